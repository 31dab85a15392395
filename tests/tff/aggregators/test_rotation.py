"""Port of TFF's ``tensorflow_federated/python/aggregators/rotation_test.py`` (and ``hadamard_test.py``'s core).

Condensed: the sum and mean cases run for the scalar, rank-1, rank-2 and
nested types, one round instead of three (the rotated-space test runs two
rounds: the seed moves on). Left out: the
tests of TFF's private seed and padding helpers (``SeedUtilsTest``,
``PaddingTest``; the same behaviour is checked through the processes: the
inner shapes and the state's seed counter), and the statistical tests of
``sample_rademacher``/``sample_cis`` beyond the two kept below.
"""

import collections

import numpy as np
import pytest
import tensorflow as tf

import simharness as tff
from simharness.aggregators import mean, measurements, rotation, sum_factory
from simharness.templates import AggregationProcess, MeasuredProcessOutput
from tests.tff.aggregators.aggregator_test_utils import assert_all_close

_test_struct_type_nested = collections.OrderedDict(
    a=[np.float32, [(np.float32, (2, 1))]], b=(np.float32, (1, 1, 2))
)


def _nested(value, dtype=np.float32):
    return collections.OrderedDict(
        a=[np.array(value, dtype), [np.full([2, 1], value, dtype)]],
        b=np.ones([1, 1, 2], dtype) * value,
    )


def _measured_sum():
    return measurements.add_measurements(
        sum_factory.SumFactory(), server_measurement_fn=lambda x: collections.OrderedDict(sum=x)
    )


_FACTORIES = {
    'hd': rotation.HadamardTransformFactory,
    'dft': rotation.DiscreteFourierTransformFactory,
}


@pytest.mark.parametrize('name', ['hd', 'dft'])
@pytest.mark.parametrize(
    'value_type',
    [
        np.float32,
        [np.int32, np.int32, np.int32],
        [np.float32, (np.float32, (3,)), (np.float32, (2, 2))],
        _test_struct_type_nested,
    ],
    ids=['float', 'ints', 'struct', 'nested_struct'],
)
def test_type_properties(name, value_type):
    process = _FACTORIES[name](sum_factory.SumFactory()).create(tff.to_type(value_type))
    assert isinstance(process, AggregationProcess)
    value_type = tff.to_type(value_type)
    state = tff.FederatedType(((), rotation.SEED_TFF_TYPE), tff.SERVER)
    assert process.initialize.type_signature.is_equivalent_to(tff.FunctionType(None, state))
    meas = tff.FederatedType(collections.OrderedDict([(name, ())]), tff.SERVER)
    assert process.next.type_signature.is_equivalent_to(
        tff.FunctionType(
            collections.OrderedDict(state=state, value=tff.FederatedType(value_type, tff.CLIENTS)),
            MeasuredProcessOutput(state, tff.FederatedType(value_type, tff.SERVER), meas),
        )
    )


@pytest.mark.parametrize('name', ['hd', 'dft'])
def test_raises_on_bad_types(name):
    for bad in (np.bool_, np.str_, [np.str_, [np.str_]], [np.int32, np.float32]):
        with pytest.raises(TypeError, match='all integers or all floats'):
            _FACTORIES[name]().create(tff.to_type(bad))
    for bad in (
        tff.StructType([('a', np.int32)]),
        tff.SequenceType(np.int32),
        tff.FunctionType(np.int32, np.int32),
    ):
        with pytest.raises(TypeError, match='Expected `value_type` to be'):
            _FACTORIES[name]().create(bad)
    with pytest.raises(ValueError):
        _FACTORIES[name](num_repeats=0)
    with pytest.raises(TypeError):
        _FACTORIES[name](mean.MeanFactory())


@pytest.mark.parametrize('name', ['hd', 'dft'])
def test_sum(tff_stack, name):
    cases = [
        (np.int32, [1, 2, 3], 6),
        (
            (np.int32, [4]),
            [np.arange(4, dtype=np.int32), np.arange(4, dtype=np.int32) * 2],
            np.arange(4, dtype=np.int32) * 3,
        ),
        ((np.int32, [1, 2]), [((1, 1),), ((2, 2),)], ((3, 3),)),
    ]
    for value_type, client_data, expected in cases:
        process = _FACTORIES[name](sum_factory.SumFactory()).create(tff.to_type(value_type))
        output = process.next(process.initialize(), client_data)
        assert_all_close(output.result, expected, atol=0, rtol=0)


@pytest.mark.parametrize('name', ['hd', 'dft'])
def test_mean_nested(tff_stack, name):
    process = _FACTORIES[name](mean.UnweightedMeanFactory()).create(
        tff.to_type(_test_struct_type_nested)
    )
    output = process.next(process.initialize(), [_nested(123.0), _nested(-321.0)])
    assert_all_close(output.result, _nested(-99.0), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize(
    'name, input_shape, expected_inner_shape',
    [
        ('hd', [5], [8]),
        ('hd', [8], [8]),
        ('hd', [2, 3, 4], [32]),
        ('dft', [5], [6]),
        ('dft', [8], [8]),
        ('dft', [3, 5, 3], [46]),
    ],
)
def test_inner_aggregation_acts_on_padded_space(name, input_shape, expected_inner_shape):
    process = _FACTORIES[name](_measured_sum()).create(tff.to_type((np.float32, input_shape)))
    output = process.next(process.initialize(), [np.ones(input_shape, np.float32)])
    assert list(output.measurements[name]['sum'].shape) == expected_inner_shape


@pytest.mark.parametrize('name', ['hd', 'dft'])
def test_inner_aggregation_acts_on_rotated_space(tff_stack, name):
    process = _FACTORIES[name](_measured_sum()).create(tff.TensorType(np.float32, [8]))
    x = np.array([1.0, -1.0, 2.5, -1.5, -0.5, 1.9, 2.2, -2.0], np.float32)
    inner_state, _ = process.initialize()
    # TFF's test keeps the seed `initialize` draws from a timestamp: then in one run of 256 the
    # two rounds draw the same 8 signs for 'hd' and the last assertion fails (TFF's test has
    # that flake too). A fixed seed makes it deterministic; that `next` moves the seed, so that
    # each round rotates differently, is what the test asserts.
    output = process.next((inner_state, np.array([1, 0], np.int64)), [x])
    inner_1 = output.measurements[name]['sum']
    assert not np.allclose(inner_1, x)
    assert np.isclose(np.linalg.norm(inner_1), np.linalg.norm(x), rtol=1e-5)
    output = process.next(output.state, [x])
    inner_2 = output.measurements[name]['sum']
    assert not np.allclose(inner_2, inner_1)
    assert np.isclose(np.linalg.norm(inner_2), np.linalg.norm(x), rtol=1e-5)
    assert output.state[1][1] == 2  # the seed counter moved on by one stride per round


def test_hd_and_dft_spread_information():
    x = 256 * tf.one_hot(indices=17, depth=256, dtype=tf.float32).numpy()
    process = rotation.HadamardTransformFactory(_measured_sum()).create(
        tff.TensorType(np.float32, [256])
    )
    inner = process.next(process.initialize(), [x]).measurements['hd']['sum']
    assert np.all(np.isclose(np.abs(inner), 16))
    assert 255 <= np.var(inner) <= 257
    process = rotation.DiscreteFourierTransformFactory(_measured_sum()).create(
        tff.TensorType(np.float32, [256])
    )
    inner = process.next(process.initialize(), [x]).measurements['dft']['sum']
    assert np.sum(np.abs(inner) > 1e-6) >= 240
    assert 255 <= np.var(inner) <= 257


def test_fast_walsh_hadamard_transform():
    x = np.random.RandomState(0).normal(size=[3, 8]).astype(np.float32)
    h = np.array([[1.0]])
    while h.shape[0] < 8:
        h = np.block([[h, h], [h, -h]])
    expected = x @ h / np.sqrt(8)
    np.testing.assert_allclose(
        rotation.fast_walsh_hadamard_transform(x).numpy(), expected, rtol=1e-5, atol=1e-5
    )
    with pytest.raises(rotation.TensorShapeError):
        rotation.fast_walsh_hadamard_transform(np.zeros([3, 6], np.float32))
    with pytest.raises(rotation.TensorShapeError):
        rotation.fast_walsh_hadamard_transform(np.zeros([8], np.float32))


def test_samplers():
    seed = tf.constant([1, 2], tf.int64)
    r = rotation.sample_rademacher([1000], tf.float32, seed).numpy()
    assert set(np.unique(r)) == {-1.0, 1.0}
    c = rotation.sample_cis([100], seed).numpy()
    np.testing.assert_allclose(np.abs(c), 1.0, rtol=1e-6)
    np.testing.assert_allclose(
        rotation.sample_cis([100], seed, inverse=True).numpy(), np.conj(c), rtol=1e-5, atol=1e-6
    )
