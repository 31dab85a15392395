"""Port of TFF's ``analytics/heavy_hitters/iblt/iblt_clipping_test.py``.

All of TFF's cases, with TFF's expected values. The client data of
`test_clipping_factory` are TFF's Python lists of batches (one batch of 4
words per client), which the runtime turns into datasets.
"""

import numpy as np
import pytest
import tensorflow as tf

import simharness as tff
from simharness.analytics.heavy_hitters.iblt import iblt_clipping, iblt_factory


@pytest.mark.parametrize(
    'data, max_words, multi, batch_size, max_bytes, unique, expected',
    [
        (['a', 'a', 'a', 'b', 'b', 'c'], 10, True, 1, 20, False, {'a': 3, 'b': 2, 'c': 1}),
        (
            ['a', 'a', 'a', 'b', 'b', 'c'],
            10,
            True,
            1,
            20,
            True,
            {'a': [3, 1], 'b': [2, 1], 'c': [1, 1]},
        ),
        (
            ['a', 'ab', 'a', 'cc', 'a', 'b', 'c', 'd'],
            4,
            True,
            1,
            20,
            False,
            {'a': 2, 'ab': 1, 'cc': 1},
        ),
        (
            ['a', 'ab', 'a', 'cc', 'a', 'b', 'c', 'd'],
            4,
            False,
            1,
            20,
            False,
            {'a': 1, 'ab': 1, 'cc': 1, 'b': 1},
        ),
        (
            ['aaaaaaa', 'a', 'b', 'c', 'dddddd', 'a'],
            10,
            True,
            1,
            1,
            False,
            {'a': 3, 'b': 1, 'c': 1, 'd': 1},
        ),
    ],
    ids=['basic', 'unique', 'max_words', 'single_contrib', 'max_bytes'],
)
def test_get_clipped_elements_with_counts(
    data, max_words, multi, batch_size, max_bytes, unique, expected
):
    ds = tf.data.Dataset.from_tensor_slices(data).batch(batch_size=batch_size)
    result = iblt_clipping.get_clipped_elements_with_counts(
        ds, max_words, multi, batch_size, max_bytes, unique
    )
    as_value = list if unique else int
    got = {
        x['key'].decode('utf-8', 'ignore'): as_value(x['value']) for x in result.as_numpy_iterator()
    }
    assert got == expected


def test_incorrect_value_type():
    factory = iblt_clipping.ClippingIbltFactory(
        iblt_factory.IbltFactory(capacity=100, string_max_bytes=10, repetitions=3, seed=0)
    )
    with pytest.raises(ValueError):
        factory.create(tff.SequenceType(tff.TensorType(np.int32, [None])))


def test_clipping_factory(tff_stack):
    factory = iblt_clipping.ClippingIbltFactory(
        iblt_factory.IbltFactory(capacity=100, string_max_bytes=10, repetitions=3),
        max_words_per_user=4,
        unique_counts=True,
    )
    process = factory.create(tff.SequenceType(tff.TensorType(np.str_, [None])))
    data = [[['a', 'a', 'a', 'a']], [['a', 'a', 'b', 'b']], [['a', 'b', 'c', 'd']]]
    output = process.next(process.initialize(), data)
    counts = dict(zip(output.result.output_strings, output.result.string_values[:, 0].tolist()))
    assert counts == {b'a': 7, b'b': 3, b'c': 1, b'd': 1}
    # [count, 1] per client and word: the second column counts each word's clients.
    clients = dict(zip(output.result.output_strings, output.result.string_values[:, 1].tolist()))
    assert clients == {b'a': 3, b'b': 2, b'c': 1, b'd': 1}
