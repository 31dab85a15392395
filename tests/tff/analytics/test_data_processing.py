"""Port of TFF's ``tensorflow_federated/python/analytics/data_processing_test.py``.

TFF's cases and expected values, table-driven (each TFF test, its
parameterizations with the expected values as TFF's). Condensed: the error
checks (rank 0/2/3, bad parameters, int/float/bool datasets) run for every
function in one table each, with ranks 0 and 2 and the int and bool datasets
(rank 3 and float go through the same checks). `histogram_test_utils`'
``assert_histograms_all_close`` is a comparison of ``{element: count}``.
"""

import collections

import numpy as np
import pytest
import tensorflow as tf

from simharness.analytics import data_processing as dp

_EMPTY = tf.constant([], dtype=tf.string)
_ABACBCC = ['a', 'b', 'a', 'c', 'b', 'c', 'c']
_STRS = ['abcd', 'abcde', 'bcd', 'bcdef', 'def']
_UNI = ['新年快乐', '新年', '☺️😇', '☺️😇', '☺️']


def _ds(data, batch_size):
    return tf.data.Dataset.from_tensor_slices(data).batch(batch_size)


def _text(tensor):
    return [e.decode('utf-8', 'ignore') for e in tensor.numpy()]


def _histogram(elements, counts):
    elements = [e.decode('utf-8', 'ignore') if isinstance(e, bytes) else e for e in elements]
    return dict(zip(elements, np.asarray(counts).tolist()))


@pytest.mark.parametrize(
    'data, batch_size, expected',
    [
        (_EMPTY, 2, []),
        (['a', 'b', 'a', 'b', 'c'], 1, [b'a', b'b', b'a', b'b', b'c']),
        (['a', 'b', 'a', 'b', 'c'], 3, [b'a', b'b', b'a', b'b', b'c']),
    ],
)
def test_all_elements(data, batch_size, expected):
    assert dp.get_all_elements(_ds(data, batch_size)).numpy().tolist() == expected


@pytest.mark.parametrize(
    'data, batch_size, max_bytes, expected',
    [
        (_EMPTY, 3, 3, []),
        (_STRS, 1, 3, ['abc', 'abc', 'bcd', 'bcd', 'def']),
        (_UNI, 3, 6, ['新年', '新年', '☺️', '☺️', '☺️']),
    ],
)
def test_all_elements_with_max_len(data, batch_size, max_bytes, expected):
    assert _text(dp.get_all_elements(_ds(data, batch_size), string_max_bytes=max_bytes)) == expected


@pytest.mark.parametrize(
    'data, batch_size, cap, elements, counts',
    [
        (_EMPTY, 2, 10, [], []),
        (_ABACBCC, 1, 4, [b'a', b'b', b'c'], [2, 1, 1]),
        (_ABACBCC, 3, 4, [b'a', b'b'], [2, 1]),
    ],
)
def test_capped_elements_with_counts(data, batch_size, cap, elements, counts):
    got = dp.get_capped_elements_with_counts(
        _ds(data, batch_size), max_user_contribution=cap, batch_size=batch_size
    )
    assert _histogram(got[0].numpy(), got[1]) == _histogram(elements, counts)


@pytest.mark.parametrize(
    'data, batch_size, cap, max_bytes, elements, counts',
    [
        (_EMPTY, 3, 10, 3, [], []),
        (_STRS, 1, 4, 3, ['abc', 'bcd'], [2, 2]),
        (_STRS, 2, 2, 2, ['ab'], [2]),
        (_UNI, 2, 3, 6, ['新年'], [2]),
    ],
)
def test_capped_elements_with_counts_max_len(data, batch_size, cap, max_bytes, elements, counts):
    got = dp.get_capped_elements_with_counts(
        _ds(data, batch_size),
        batch_size=batch_size,
        max_user_contribution=cap,
        string_max_bytes=max_bytes,
    )
    assert _histogram(_text(got[0]), got[1]) == _histogram(elements, counts)


@pytest.mark.parametrize(
    'data, batch_size, cap, expected',
    [
        (_EMPTY, 2, 10, []),
        (_ABACBCC, 1, 4, [b'a', b'b', b'a', b'c']),
        (_ABACBCC, 3, 4, [b'a', b'b', b'a']),
    ],
)
def test_capped_elements(data, batch_size, cap, expected):
    got = dp.get_capped_elements(
        _ds(data, batch_size), max_user_contribution=cap, batch_size=batch_size
    )
    assert got.numpy().tolist() == expected


@pytest.mark.parametrize(
    'data, batch_size, cap, max_bytes, expected',
    [
        (_EMPTY, 3, 10, 3, []),
        (_STRS, 1, 4, 3, ['abc', 'abc', 'bcd', 'bcd']),
        (_STRS, 2, 2, 2, ['ab', 'ab']),
        (_UNI, 2, 3, 6, ['新年', '新年']),
    ],
)
def test_capped_elements_with_max_len(data, batch_size, cap, max_bytes, expected):
    got = dp.get_capped_elements(
        _ds(data, batch_size),
        batch_size=batch_size,
        max_user_contribution=cap,
        string_max_bytes=max_bytes,
    )
    assert _text(got) == expected


@pytest.mark.parametrize(
    'data, batch_size, expected',
    [(_EMPTY, 3, []), (_ABACBCC, 1, [b'a', b'b', b'c']), (_ABACBCC, 3, [b'a', b'b', b'c'])],
)
def test_unique_elements(data, batch_size, expected):
    assert dp.get_unique_elements(_ds(data, batch_size)).numpy().tolist() == expected


@pytest.mark.parametrize(
    'data, batch_size, max_bytes, expected',
    [(_EMPTY, 3, 3, []), (_STRS, 1, 3, ['abc', 'bcd', 'def']), (_UNI, 3, 6, ['新年', '☺️'])],
)
def test_unique_elements_with_max_len(data, batch_size, max_bytes, expected):
    got = dp.get_unique_elements(_ds(data, batch_size), string_max_bytes=max_bytes)
    assert set(_text(got)) == set(expected)


@pytest.mark.parametrize(
    'data, batch_size, elements, counts',
    [
        (_EMPTY, 3, [], []),
        (_ABACBCC, 1, [b'a', b'b', b'c'], [2, 2, 3]),
        (_ABACBCC, 3, [b'a', b'b', b'c'], [2, 2, 3]),
    ],
)
def test_unique_elements_with_counts(data, batch_size, elements, counts):
    got_elements, got_counts = dp.get_unique_elements_with_counts(_ds(data, batch_size))
    assert got_elements.numpy().tolist() == elements
    assert got_counts.numpy().tolist() == counts
    assert got_counts.dtype == tf.int64


@pytest.mark.parametrize(
    'data, batch_size, max_bytes, elements, counts',
    [
        (_EMPTY, 3, 3, [], []),
        (_STRS, 1, 3, ['abc', 'bcd', 'def'], [2, 2, 1]),
        (_UNI, 3, 6, ['新年', '☺️'], [2, 3]),
    ],
)
def test_unique_elements_with_counts_max_len(data, batch_size, max_bytes, elements, counts):
    got = dp.get_unique_elements_with_counts(_ds(data, batch_size), string_max_bytes=max_bytes)
    assert _histogram(_text(got[0]), got[1]) == _histogram(elements, counts)


@pytest.mark.parametrize(
    'data, batch_size, cap, expected',
    [
        (_EMPTY, 3, 1, []),
        (_ABACBCC, 1, 2, [b'a', b'c']),
        (_ABACBCC, 3, 2, [b'a', b'c']),
        (_ABACBCC, 1, 3, [b'a', b'b', b'c']),
        (['a', 'b', 'c', 'd', 'e', 'a'], 2, 4, [b'a', b'b', b'c', b'd']),
    ],
)
def test_top_elements(data, batch_size, cap, expected):
    assert set(dp.get_top_elements(_ds(data, batch_size), cap).numpy()) == set(expected)


@pytest.mark.parametrize(
    'data, batch_size, cap, max_bytes, expected',
    [
        (_EMPTY, 3, 1, 3, []),
        (['abc', 'abcd', 'def', 'ghijk'], 3, 2, 3, ['abc', 'def']),
        (['abcd', 'abcde', 'bcd', 'bcdef'], 1, 10, 3, ['abc', 'bcd']),
        (['abcd', 'abcde', 'bcd', 'bcdef'], 3, 2, 10, ['abcd', 'abcde']),
        (_UNI, 1, 2, 6, ['新年', '☺️']),
    ],
)
def test_top_elements_with_max_len(data, batch_size, cap, max_bytes, expected):
    got = dp.get_top_elements(_ds(data, batch_size), cap, string_max_bytes=max_bytes)
    assert set(_text(got)) == set(expected)


@pytest.mark.parametrize(
    'data, batch_size, cap, expected',
    [
        (_EMPTY, 3, 1, []),
        (_ABACBCC, 1, 2, [b'a', b'a', b'c', b'c', b'c']),
        (_ABACBCC, 3, 2, [b'a', b'a', b'c', b'c', b'c']),
        (_ABACBCC, 1, 3, [b'a', b'a', b'b', b'b', b'c', b'c', b'c']),
        (['a', 'b', 'c', 'd', 'e', 'a'], 2, 4, [b'a', b'a', b'b', b'c', b'd']),
    ],
)
def test_top_multi_elements(data, batch_size, cap, expected):
    # TFF compares sets; the multiset is checked here.
    got = dp.get_top_multi_elements(_ds(data, batch_size), cap).numpy().tolist()
    assert sorted(got) == sorted(expected)


@pytest.mark.parametrize(
    'data, batch_size, cap, max_bytes, expected',
    [
        (_EMPTY, 3, 1, 3, []),
        (
            ['abc', 'abcd', 'def', 'ghijk', 'ghijk', 'ghijk', 'abc', 'abc', 'def'],
            3,
            2,
            3,
            ['abc', 'abc', 'abc', 'ghi', 'ghi'],
        ),
        (['abcd', 'abcde', 'bcd', 'bcdef'], 1, 10, 3, ['abc', 'bcd']),
        (
            ['abcd', 'abcde', 'bcd', 'bcdef', 'bcd', 'bcdef'],
            3,
            2,
            10,
            ['bcd', 'bcd', 'bcdef', 'bcdef'],
        ),
        (
            ['新年快乐', '新年', '☺️😇', '☺️😇', '안녕하세요', '☺️', '안녕하세요'],
            1,
            2,
            6,
            ['新年', '☺️'],
        ),
    ],
)
def test_top_multi_elements_with_max_len(data, batch_size, cap, max_bytes, expected):
    got = dp.get_top_multi_elements(_ds(data, batch_size), cap, string_max_bytes=max_bytes)
    assert set(_text(got)) == set(expected)


_RANK_MSG = 'The shape of elements in `dataset` must be of rank 1.*'
_FUNCTIONS = {
    'all': lambda ds, **kw: dp.get_all_elements(ds, **kw),
    'unique': lambda ds, **kw: dp.get_unique_elements(ds, **kw),
    'unique_with_counts': lambda ds, **kw: dp.get_unique_elements_with_counts(ds, **kw),
    'capped': lambda ds, **kw: dp.get_capped_elements(
        ds, **{'max_user_contribution': 3, 'batch_size': 1, **kw}
    ),
    'capped_with_counts': lambda ds, **kw: dp.get_capped_elements_with_counts(
        ds, **{'max_user_contribution': 3, 'batch_size': 1, **kw}
    ),
    'top': lambda ds, **kw: dp.get_top_elements(ds, **{'max_user_contribution': 1, **kw}),
    'top_multi': lambda ds, **kw: dp.get_top_multi_elements(
        ds, **{'max_user_contribution': 1, **kw}
    ),
}


@pytest.mark.parametrize('name', sorted(_FUNCTIONS))
@pytest.mark.parametrize('rank', [0, 2])
def test_raise_rank_value_error(name, rank):
    ds = tf.data.Dataset.from_tensor_slices(['a', 'b', 'a', 'b', 'c'])
    for _ in range(rank):
        ds = ds.batch(1)
    with pytest.raises(ValueError, match=_RANK_MSG):
        _FUNCTIONS[name](ds)


@pytest.mark.parametrize('name', sorted(_FUNCTIONS))
@pytest.mark.parametrize('data', [[1, 3, 2, 2, 4, 6, 3], [True, True, False]])
def test_raise_type_error(name, data):
    with pytest.raises(TypeError, match='`dataset.element_spec.dtype` must be `tf.string`.'):
        _FUNCTIONS[name](_ds(data, 1))


@pytest.mark.parametrize(
    'name, kwargs, regex',
    [
        ('all', dict(string_max_bytes=0), '`string_max_bytes` must be at least 1.'),
        ('all', dict(string_max_bytes=-1), '`string_max_bytes` must be at least 1.'),
        ('unique', dict(string_max_bytes=0), '`string_max_bytes` must be at least 1.'),
        ('unique_with_counts', dict(string_max_bytes=-1), '`string_max_bytes` must be at least 1.'),
        (
            'capped',
            dict(max_user_contribution=5, batch_size=0, string_max_bytes=10),
            '`batch_size` must be at least 1.',
        ),
        (
            'capped',
            dict(max_user_contribution=-10, batch_size=10, string_max_bytes=10),
            '`max_user_contribution` must be at least 1.',
        ),
        (
            'capped_with_counts',
            dict(max_user_contribution=10, batch_size=5, string_max_bytes=0),
            '`string_max_bytes` must be at least 1.',
        ),
        (
            'capped_with_counts',
            dict(max_user_contribution=5, batch_size=0, string_max_bytes=10),
            '`batch_size` must be at least 1.',
        ),
        (
            'top',
            dict(max_user_contribution=0, string_max_bytes=1),
            '`max_user_contribution` must be at least 1.',
        ),
        (
            'top',
            dict(max_user_contribution=20, string_max_bytes=-1),
            '`string_max_bytes` must be at least 1.',
        ),
        (
            'top_multi',
            dict(max_user_contribution=-10, string_max_bytes=10),
            '`max_user_contribution` must be at least 1.',
        ),
        (
            'top_multi',
            dict(max_user_contribution=10, string_max_bytes=0),
            '`string_max_bytes` must be at least 1.',
        ),
    ],
)
def test_raise_params_value_error(name, kwargs, regex):
    with pytest.raises(ValueError, match=regex):
        _FUNCTIONS[name](_ds(['a', 'b', 'a', 'b', 'c'], 1), **kwargs)


def test_to_stacked_tensor_basic_encoding():
    encoded = dp.to_stacked_tensor(tf.data.Dataset.range(5))
    assert isinstance(encoded, tf.Tensor) and encoded.shape == [5]
    assert encoded.numpy().tolist() == list(range(5))


def test_to_stacked_tensor_structures():
    encoded = dp.to_stacked_tensor(tf.data.Dataset.from_tensors(collections.OrderedDict(x=42)))
    assert list(encoded) == ['x'] and encoded['x'].numpy().tolist() == [42]
    assert dp.to_stacked_tensor(tf.data.Dataset.from_tensors([42])).numpy().tolist() == [[42]]
    non_scalar = dp.to_stacked_tensor(tf.data.Dataset.from_tensors([[1, 2], [3, 4]]))
    assert non_scalar.numpy().tolist() == [[[1, 2], [3, 4]]]
    assert dp.to_stacked_tensor(tf.data.Dataset.range(-1)).numpy().tolist() == []
    batched = dp.to_stacked_tensor(tf.data.Dataset.range(6).batch(2, drop_remainder=True))
    assert batched.numpy().tolist() == [[0, 1], [2, 3], [4, 5]]


def test_to_stacked_tensor_batched_with_remainder_unsupported():
    with pytest.raises(ValueError, match='Dataset elements must have fully-defined shapes'):
        dp.to_stacked_tensor(tf.data.Dataset.range(6).batch(2, drop_remainder=False))


def test_to_stacked_tensor_roundtrip():
    ds = tf.data.Dataset.from_tensor_slices(
        collections.OrderedDict(x=[1, 2, 3], y=[['a'], ['b'], ['c']])
    )
    roundtripped = tf.data.Dataset.from_tensor_slices(dp.to_stacked_tensor(ds))
    for a, b in zip(ds, roundtripped, strict=True):
        assert a['x'].numpy() == b['x'].numpy()
        assert a['y'].numpy().tolist() == b['y'].numpy().tolist()


def test_to_stacked_tensor_validates_input():
    with pytest.raises(TypeError, match='ds'):
        dp.to_stacked_tensor([tf.constant(42)])
