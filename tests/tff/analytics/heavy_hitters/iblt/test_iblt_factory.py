"""Port of TFF's ``analytics/heavy_hitters/iblt/iblt_factory_test.py``.

TFF's cases and data. `test_iblt_aggregation_as_expected` keeps the
``secure_sum_factories`` parameterization (both inner factories
`SecureSumFactory(2**32 - 1)`, 4 repetitions, seed 5); the
``default_factories``, ``sketch_secure_factory`` and
``tensor_value_sum_factory`` ones run the same process with `SumFactory`
inner factories, left out for time (each process traces its decoder, ~2 s).
Here the aggregated values are checked too (TFF compares the keys only).
TFF's ``status.StatusNotOk`` (its C++ runtime's error) for a too-long string
is the TF assertion error our runtime raises (`tf.errors.InvalidArgumentError`
or a `RuntimeError` that carries it).
"""

import collections

import numpy as np
import pytest
import tensorflow as tf

import simharness as tff
from simharness.aggregators import secure
from simharness.analytics.heavy_hitters.iblt import chunkers, iblt_factory

DATA = [
    (['seattle', 'hello', 'world', 'bye'], [[1, 2, 3], [4, 5, 1], [1, 1, 1], [-5, 2, 9]]),
    (['hi', 'seattle'], [[2, 3, 4], [-5, -5, -5]]),
    (['good', 'morning', 'hi', 'bye'], [[3, 3, 8], [-1, -5, -6], [0, 0, 0], [3, 1, 8]]),
]
VALUE_TYPE = tff.SequenceType(
    collections.OrderedDict(key=np.str_, value=tff.TensorType(np.int64, (3,)))
)
AGGREGATED_DATA = {
    'seattle': [-4, -3, -2],
    'hello': [4, 5, 1],
    'world': [1, 1, 1],
    'hi': [2, 3, 4],
    'good': [3, 3, 8],
    'morning': [-1, -5, -6],
    'bye': [-2, 3, 17],
}


def _client_data(structure):
    return [
        tf.data.Dataset.from_tensor_slices(
            collections.OrderedDict(
                [
                    (iblt_factory.DATASET_KEY, tf.constant(strings, dtype=tf.string)),
                    (iblt_factory.DATASET_VALUE, tf.constant(values, dtype=tf.int64)),
                ]
            )
        )
        for strings, values in structure
    ]


@pytest.mark.parametrize(
    'name, bad',
    [
        ('capacity', 0),
        ('capacity', -1),
        ('string_max_bytes', 0),
        ('string_max_bytes', -1),
        ('repetitions', 0),
        ('repetitions', 2),
    ],
)
def test_argument_validation(name, bad):
    kwargs = dict(capacity=10, string_max_bytes=10, repetitions=3, seed=0)
    iblt_factory.IbltFactory(**{**kwargs, name: {'repetitions': 3}.get(name, 1)})
    with pytest.raises(ValueError, match=name):
        iblt_factory.IbltFactory(**{**kwargs, name: bad})


@pytest.mark.parametrize(
    'value_type',
    [
        tff.SequenceType(tff.TensorType(np.int64, ())),
        tff.SequenceType(tff.TensorType(np.int64, (3,))),
        tff.SequenceType(
            collections.OrderedDict([('foo', np.int64), ('value', tff.TensorType(np.int64, (1,)))])
        ),
        tff.SequenceType(
            collections.OrderedDict(
                [('bar', np.int64), ('key', np.int64), ('value', tff.TensorType(np.int64, (1,)))]
            )
        ),
        tff.SequenceType(
            collections.OrderedDict([('key', np.int64), ('value', tff.TensorType(np.int64, (1,)))])
        ),
        tff.SequenceType(
            collections.OrderedDict([('key', np.str_), ('value', tff.TensorType(np.int32, (1,)))])
        ),
    ],
    ids=[
        'scalar',
        'list',
        'dict_wrong_key',
        'dict_extra_key',
        'dict_int64_int64',
        'dict_string_int32',
    ],
)
def test_value_type_validation(value_type):
    factory = iblt_factory.IbltFactory(capacity=10, string_max_bytes=5, repetitions=3, seed=0)
    with pytest.raises(ValueError):
        factory.create(value_type)


def test_string_max_bytes_error(tff_stack):
    value_type = tff.SequenceType(
        collections.OrderedDict(key=np.str_, value=tff.TensorType(np.int64, (1,)))
    )
    process = iblt_factory.IbltFactory(
        capacity=10, string_max_bytes=5, repetitions=3, seed=0
    ).create(value_type)
    with pytest.raises(
        (tf.errors.InvalidArgumentError, RuntimeError), match='Input strings must be truncated'
    ):
        process.next(process.initialize(), _client_data([(['thisisalongword'], [[1]])]))


def test_iblt_aggregation_secure_sum_factories(tff_stack):
    factory = iblt_factory.IbltFactory(
        sketch_agg_factory=secure.SecureSumFactory(2**32 - 1),
        value_tensor_agg_factory=secure.SecureSumFactory(2**32 - 1),
        capacity=10,
        string_max_bytes=10,
        repetitions=4,
        seed=5,
    )
    process = factory.create(VALUE_TYPE)
    output = process.next(process.initialize(), _client_data(DATA))
    result = dict(
        zip(
            [s.decode('utf-8') for s in output.result.output_strings],
            output.result.string_values.tolist(),
        )
    )
    assert result == AGGREGATED_DATA
    assert output.measurements['num_not_decoded'] == 0
    assert list(output.measurements) == ['num_not_decoded', 'sketch', 'value_tensor']


def test_binary_string_aggregation(tff_stack):
    non_unicode = b'\xff' * 5
    client_data = _client_data(
        [
            ([b'AAA', b'BBB', non_unicode], [[1, 2], [3, 4], [5, 6]]),
            ([b'CCC', non_unicode], [[7, 8], [9, 10]]),
            ([b'AAA'], [[11, 12]]),
        ]
    )
    factory = iblt_factory.IbltFactory(
        encoding=chunkers.CharacterEncoding.UNKNOWN,
        repetitions=3,
        seed=42,
        capacity=2,
        string_max_bytes=5,
    )
    process = factory.create(
        tff.SequenceType(collections.OrderedDict(key=np.str_, value=tff.TensorType(np.int64, (2,))))
    )
    output = process.next(process.initialize(), client_data)
    assert output.measurements['num_not_decoded'] == 0
    result = dict(zip(output.result.output_strings, output.result.string_values.tolist()))
    assert result == {b'AAA': [12, 14], b'BBB': [3, 4], b'CCC': [7, 8], non_unicode: [14, 16]}
