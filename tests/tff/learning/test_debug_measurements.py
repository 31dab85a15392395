"""Port of TFF's ``tensorflow_federated/python/learning/debug_measurements_test.py``.

No case left out. The computations are traced once per type for the module.
The int32 case expects TypeError or ValueError, as TFF's;
ours raises a `SimharnessTypeError` (a TypeError) while tracing ``tf.norm``
of an int32.
"""

import collections
import functools

import numpy as np
import pytest
import tensorflow as tf

import simharness as tff
from simharness.aggregators import mean
from simharness.learning import debug_measurements
from tests.tff.aggregators.aggregator_test_utils import assert_all_close

FloatType = tff.TensorType(np.float32)
FloatAtServer = tff.FederatedType(FloatType, tff.SERVER)
FloatAtClients = tff.FederatedType(FloatType, tff.CLIENTS)

SERVER_MEASUREMENTS_OUTPUT_TYPE = tff.FederatedType(
    collections.OrderedDict(
        [
            ('server_update_max', FloatType),
            ('server_update_norm', FloatType),
            ('server_update_min', FloatType),
        ]
    ),
    tff.SERVER,
)
CLIENT_MEASUREMENTS_OUTPUT_TYPE = tff.FederatedType(
    collections.OrderedDict(
        [('average_client_norm', FloatType), ('std_dev_client_norm', FloatType)]
    ),
    tff.SERVER,
)

VALUE_TYPES = pytest.mark.parametrize(
    'value_type',
    [
        FloatType,
        tff.TensorType(np.float32, [3]),
        [FloatType, FloatType],
        [[tff.TensorType(np.float32, [3])], [FloatType, FloatType]],
    ],
    ids=['scalar_type', 'vector_type', 'struct_type', 'nested_struct_type'],
)


@VALUE_TYPES
def test_server_measurement_fn_traceable_by_federated_computation(value_type):
    _, server_measurement_fn = debug_measurements._build_aggregator_measurement_fns()
    input_type = tff.FederatedType(value_type, tff.SERVER)

    @tff.federated_computation(input_type)
    def get_server_measurements(server_update):
        return server_measurement_fn(server_update)

    type_signature = get_server_measurements.type_signature
    type_signature.parameter.check_assignable_from(input_type)
    type_signature.result.check_assignable_from(SERVER_MEASUREMENTS_OUTPUT_TYPE)


@VALUE_TYPES
def test_unweighted_client_measurement_fn_traceable_by_federated_computation(value_type):
    client_measurement_fn, _ = debug_measurements._build_aggregator_measurement_fns(
        weighted_aggregator=False
    )
    input_type = tff.FederatedType(value_type, tff.CLIENTS)

    @tff.federated_computation(input_type)
    def get_client_measurements(client_update):
        return client_measurement_fn(client_update)

    type_signature = get_client_measurements.type_signature
    type_signature.parameter.check_assignable_from(input_type)
    type_signature.result.check_assignable_from(CLIENT_MEASUREMENTS_OUTPUT_TYPE)


@VALUE_TYPES
def test_weighted_client_measurement_fn_traceable_by_federated_computation(value_type):
    client_measurement_fn, _ = debug_measurements._build_aggregator_measurement_fns(
        weighted_aggregator=True
    )
    input_type = tff.FederatedType(value_type, tff.CLIENTS)
    weights_type = tff.FederatedType(np.float32, tff.CLIENTS)

    @tff.federated_computation(input_type, weights_type)
    def get_client_measurements(client_update, client_weights):
        return client_measurement_fn(client_update, client_weights)

    type_signature = get_client_measurements.type_signature
    type_signature.parameter[0].check_assignable_from(input_type)
    type_signature.parameter[1].check_assignable_from(weights_type)
    type_signature.result.check_assignable_from(CLIENT_MEASUREMENTS_OUTPUT_TYPE)


def _close(actual, expected, tol=1e-6):
    assert list(actual.keys()) == list(expected.keys())
    for k in expected:
        np.testing.assert_allclose(actual[k], expected[k], rtol=tol, atol=tol)


@pytest.mark.parametrize(
    'server_update,expected_max,expected_norm,expected_min',
    [
        ([-3.0, 4.0, 0.0], 4.0, 5.0, -3.0),
        ([0.0], 0.0, 0.0, 0.0),
        ({'a': np.array([1.0, -1.0], np.float32), 'b': np.float32(2.0)}, 2.0, np.sqrt(6.0), -1.0),
    ],
    ids=['server_update_float32_1', 'server_update_float32_2', 'server_update_float32_3'],
)
def test_correctness_of_server_update_statistics(
    server_update, expected_max, expected_norm, expected_min
):
    actual = debug_measurements._calculate_server_update_statistics(server_update)
    _close(
        actual,
        collections.OrderedDict(
            server_update_max=expected_max,
            server_update_norm=expected_norm,
            server_update_min=expected_min,
        ),
    )


@pytest.mark.parametrize(
    'server_update,expected_max,expected_norm,expected_min',
    [
        ([-3.0, np.float16(4.0), 0.0], 4.0, 5.0, -3.0),
        ({'a': np.array([1.0, -1.0], np.float32), 'b': np.float16(2.0)}, 2.0, np.sqrt(6.0), -1.0),
        ([-3.0, np.float64(4), 0.0], 4.0, 5.0, -3.0),
    ],
    ids=[
        'server_update_mixed_float16_float32_1',
        'server_update_mixed_float16_float32_2',
        'server_update_mixed_float64_float32_1',
    ],
)
def test_correctness_of_server_update_statistics_mixed_dtypes(
    server_update, expected_max, expected_norm, expected_min
):
    actual = debug_measurements._calculate_server_update_statistics_mixed_dtype(server_update)
    _close(
        actual,
        collections.OrderedDict(
            server_update_max=expected_max,
            server_update_norm=expected_norm,
            server_update_min=expected_min,
        ),
    )


@pytest.mark.parametrize(
    'distribution',
    [[1.0, 3.0, 0.0], [-1.0], [2.0, 2.0, 2.0]],
    ids=['distribution1', 'distribution2', 'distribution3'],
)
def test_correctness_unbiased_std_dev_unweighted(distribution):
    n = tf.cast(len(distribution), dtype=tf.float32)
    expected_value = tf.math.reduce_mean(distribution)
    expected_value_squared = tf.math.reduce_mean(tf.constant(distribution) ** 2)
    unbiased_std_dev = debug_measurements._calculate_unbiased_std_dev(
        expected_value, expected_value_squared, n, n
    )
    biased_std_dev = tf.math.reduce_std(distribution)
    correct = tf.math.sqrt(tf.math.divide_no_nan(n, n - 1)) * biased_std_dev
    assert abs(float(unbiased_std_dev) - float(correct)) <= 1e-6


@functools.lru_cache(maxsize=None)
def _client_statistics_comp(client_dtype, mixed=False):
    fn = (
        debug_measurements._calculate_client_update_statistics_mixed_dtype
        if mixed
        else debug_measurements._calculate_client_update_statistics
    )

    @tff.federated_computation(
        tff.FederatedType(client_dtype, tff.CLIENTS), tff.FederatedType(np.float32, tff.CLIENTS)
    )
    def compute_client_statistics(client_updates, client_weights):
        return fn(client_updates, client_weights)

    return compute_client_statistics


@pytest.fixture(scope='module')
def float32_statistics():
    return _client_statistics_comp(np.float32)


@pytest.mark.parametrize(
    'client_updates',
    [[1.0, -2.0, 5.0], [7.0], [2.0, 2.0, 2.0]],
    ids=['client_updates1', 'client_updates2', 'client_updates3'],
)
def test_correctness_of_unweighted_client_update_statistics(
    tff_stack, float32_statistics, client_updates
):
    client_weights = [1.0 for _ in client_updates]
    actual = float32_statistics(client_updates, client_weights)
    client_norms = [abs(a) for a in client_updates]
    n = np.float32(len(client_updates))
    expected_std_dev = tf.math.reduce_std(client_norms) * tf.math.sqrt(
        tf.math.divide_no_nan(n, n - 1)
    )
    _close(
        actual,
        collections.OrderedDict(
            average_client_norm=np.mean(client_norms), std_dev_client_norm=expected_std_dev
        ),
    )


def _expected_weighted(client_updates, client_weights):
    client_updates = tf.cast(tf.constant(client_updates), tf.float32)
    client_weights = tf.constant(client_weights)
    weights_sum = tf.math.reduce_sum(client_weights)
    weights_squared_sum = tf.math.reduce_sum(client_weights**2)
    expected_norm = tf.math.divide_no_nan(
        tf.math.reduce_sum(tf.math.abs(client_updates) * client_weights), weights_sum
    )
    expected_norm_squared = tf.math.divide_no_nan(
        tf.math.reduce_sum(client_updates**2 * client_weights), weights_sum
    )
    biased_variance = expected_norm_squared - expected_norm**2
    unbiased_variance = (
        tf.math.divide_no_nan(weights_sum**2, weights_sum**2 - weights_squared_sum)
        * biased_variance
    )
    return collections.OrderedDict(
        average_client_norm=expected_norm, std_dev_client_norm=tf.math.sqrt(unbiased_variance)
    )


@pytest.mark.parametrize(
    'client_updates,client_weights',
    [
        ([1.0, 3.0, 0.0], [2.0, 3.0, 1.0]),
        ([-1.0], [5.0]),
        ([2.0, -2.0, 2.0], [6.0, 7.0, 4.0]),
        ([1.0, 2.0, -3.0], [1.0, 1.0, 0.0]),
    ],
    ids=[
        'distribution_float32_1',
        'distribution_float32_2',
        'distribution_float32_3',
        'distribution_float32_4',
    ],
)
def test_correctness_of_weighted_client_update_statistics(
    tff_stack, float32_statistics, client_updates, client_weights
):
    actual = float32_statistics(client_updates, client_weights)
    _close(actual, _expected_weighted(client_updates, client_weights), tol=1e-5)


@pytest.mark.parametrize(
    'client_updates,client_weights,client_type_spec',
    [
        ([np.float16(1.0), np.float16(3.0), np.float16(2.0)], [2.0, 3.0, 1.0], np.float16),
        ([np.float64(123), np.float64(234), np.float64(456)], [6.0, 7.0, 4.0], np.float64),
    ],
    ids=['distribution_float16', 'distribution_float64'],
)
def test_correctness_of_weighted_client_update_statistics_mixed_dtype(
    tff_stack, client_updates, client_weights, client_type_spec
):
    comp = _client_statistics_comp(client_type_spec, mixed=True)
    actual = comp(client_updates, client_weights)
    _close(actual, _expected_weighted(client_updates, client_weights), tol=1e-5)


def test_inf_error_in_client_update_statistics(tff_stack):
    comp = _client_statistics_comp(np.float64, mixed=True)
    actual = comp(
        [np.float64(2**63 - 1), np.float64(2**63), np.float64(2**63 + 1)], [2.0, 3.0, 1.0]
    )
    assert np.isinf(actual['std_dev_client_norm'])


def test_type_error_in_client_update_statistics_with_int32():
    with pytest.raises((TypeError, ValueError)):
        comp = _client_statistics_comp(np.int32, mixed=True)
        comp([np.int32(123), np.int32(234), np.int32(345)], [2.0, 3.0, 1.0])


@pytest.fixture(scope='module')
def weighted_pair():
    value_type = tff.TensorType(np.float32)
    mean_factory = mean.MeanFactory()
    debug_mean_factory = debug_measurements.add_debug_measurements(mean_factory)
    return (
        mean_factory.create(value_type, value_type),
        debug_mean_factory.create(value_type, value_type),
    )


@pytest.fixture(scope='module')
def unweighted_pair():
    value_type = tff.TensorType(np.float32)
    mean_factory = mean.UnweightedMeanFactory()
    debug_mean_factory = debug_measurements.add_debug_measurements(mean_factory)
    return mean_factory.create(value_type), debug_mean_factory.create(value_type)


def _check_same_types(mean_aggregator, debug_aggregator):
    assert mean_aggregator.initialize.type_signature == debug_aggregator.initialize.type_signature
    assert (
        mean_aggregator.next.type_signature.parameter
        == debug_aggregator.next.type_signature.parameter
    )
    assert (
        mean_aggregator.next.type_signature.result.state
        == debug_aggregator.next.type_signature.result.state
    )
    assert (
        mean_aggregator.next.type_signature.result.result
        == debug_aggregator.next.type_signature.result.result
    )


def test_add_measurements_to_weighted_aggregation_factory_types(weighted_pair):
    mean_aggregator, debug_aggregator = weighted_pair
    assert debug_aggregator.is_weighted
    _check_same_types(mean_aggregator, debug_aggregator)


def test_add_measurements_to_unweighted_aggregation_factory_types(unweighted_pair):
    mean_aggregator, debug_aggregator = unweighted_pair
    assert not debug_aggregator.is_weighted
    _check_same_types(mean_aggregator, debug_aggregator)


EXPECTED_DEBUGGING_MEASUREMENTS = {
    'average_client_norm': 3.0,
    'std_dev_client_norm': np.sqrt(2.0),
    'server_update_max': 3.0,
    'server_update_norm': 3.0,
    'server_update_min': 3.0,
}


def _check_outputs(mean_output, debug_output):
    assert mean_output.state == debug_output.state
    assert abs(mean_output.result - debug_output.result) <= 1e-6
    mean_measurements = mean_output.measurements
    debugging_measurements = debug_output.measurements
    assert sorted(debugging_measurements.keys()) == sorted(
        list(mean_measurements.keys()) + list(EXPECTED_DEBUGGING_MEASUREMENTS.keys())
    )
    for k in mean_measurements:
        assert mean_measurements[k] == debugging_measurements[k]
    for k, v in EXPECTED_DEBUGGING_MEASUREMENTS.items():
        assert abs(debugging_measurements[k] - v) <= 1e-6, k


def test_add_measurements_to_weighted_aggregation_factory_output(tff_stack, weighted_pair):
    mean_aggregator, debug_aggregator = weighted_pair
    state = mean_aggregator.initialize()
    _check_outputs(
        mean_aggregator.next(state, [2.0, 4.0], [1.0, 1.0]),
        debug_aggregator.next(state, [2.0, 4.0], [1.0, 1.0]),
    )


def test_add_measurements_to_unweighted_aggregation_factory_output(tff_stack, unweighted_pair):
    mean_aggregator, debug_aggregator = unweighted_pair
    state = mean_aggregator.initialize()
    _check_outputs(
        mean_aggregator.next(state, [2.0, 4.0]), debug_aggregator.next(state, [2.0, 4.0])
    )


# Ours after TFF's.


def test_mixed_dtype_factory_output(tff_stack):
    value_type = tff.to_type([np.float32, np.float64])
    process = debug_measurements.add_debug_measurements_with_mixed_dtype(
        mean.UnweightedMeanFactory()
    ).create(value_type)
    output = process.next(process.initialize(), [[3.0, 4.0], [-3.0, -4.0]])
    assert_all_close(output.result, [0.0, 0.0])
    m = output.measurements
    np.testing.assert_allclose(
        [
            m['average_client_norm'],
            m['std_dev_client_norm'],
            m['server_update_max'],
            m['server_update_min'],
        ],
        [5.0, 0.0, 0.0, 0.0],
        atol=1e-6,
    )


def test_rejects_a_non_factory():
    with pytest.raises(TypeError, match='aggregation_factory'):
        debug_measurements.add_debug_measurements('not a factory')
