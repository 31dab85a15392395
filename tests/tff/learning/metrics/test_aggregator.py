"""TFF's learning/metrics/aggregator_test.py (SumThenFinalizeTest, SecureSumThenFinalizeTest,
FinalizeThenSampleTest), renamed. Left out: the
check that the secure computation contains no unsecure aggregation (no such analysis here);
the secure 'non_keras_metrics' case (the same finalizer path as 'keras_metrics'; each secure
case costs seconds of tracing, and CI time is tight)."""

import collections

import keras
import numpy as np
import pytest
import tensorflow as tf

import simharness as tff
from simharness.learning.metrics import aggregator as aggregator_lib
from simharness.learning.metrics import keras_finalizer, sum_aggregation_factory

_UNUSED_METRICS_FINALIZERS = collections.OrderedDict(
    accuracy=tf.function(func=lambda x: x[0] / x[1])
)
_UNUSED_UNFINALIZED_METRICS_TYPE = tff.StructType(
    [('accuracy', tff.TensorType(np.float32, [2]))], container=collections.OrderedDict
)


class CustomSumMetric(keras.metrics.Sum):
    """A custom metric whose result is total + extra scalar and vector values."""

    def __init__(self, name='custom_sum_metric'):
        super().__init__(name=name, dtype='int32')
        self.scalar = self.add_weight(name='scalar', shape=(), initializer='zeros', dtype='int32')
        self.vector = self.add_weight(name='vector', shape=(2,), initializer='zeros', dtype='int32')

    def result(self):
        return self.total + self.scalar + tf.reduce_sum(self.vector)


def _keras_clients():
    return [
        collections.OrderedDict(
            accuracy=[np.float32(1.0), np.float32(2.0)],
            custom_sum=[np.int32(1), np.int32(1), np.array([1, 1], np.int32)],
        ),
        collections.OrderedDict(
            accuracy=[np.float32(3.0), np.float32(6.0)],
            custom_sum=[np.int32(1), np.int32(1), np.array([1, 1], np.int32)],
        ),
    ]


_KERAS_TYPE = tff.to_type(
    collections.OrderedDict(
        accuracy=[tf.TensorSpec([], tf.float32), tf.TensorSpec([], tf.float32)],
        custom_sum=[
            tf.TensorSpec([], tf.int32),
            tf.TensorSpec([], tf.int32),
            tf.TensorSpec([2], tf.int32),
        ],
    )
)


def _test_finalize_metrics(unfinalized):
    return collections.OrderedDict(
        accuracy=keras_finalizer.create_keras_metric_finalizer(
            keras.metrics.SparseCategoricalAccuracy
        )(unfinalized['accuracy']),
        custom_sum=keras_finalizer.create_keras_metric_finalizer(CustomSumMetric)(
            unfinalized['custom_sum']
        ),
    )


_CASES = {
    'keras_metrics': (
        collections.OrderedDict(
            accuracy=keras_finalizer.create_keras_metric_finalizer(
                keras.metrics.SparseCategoricalAccuracy
            ),
            custom_sum=keras_finalizer.create_keras_metric_finalizer(CustomSumMetric),
        ),
        _keras_clients(),
        _KERAS_TYPE,
        collections.OrderedDict(accuracy=(1.0 + 3.0) / (2.0 + 6.0), custom_sum=8),
    ),
    'keras_metrics_callable_finalizers': (
        _test_finalize_metrics,
        _keras_clients(),
        _KERAS_TYPE,
        collections.OrderedDict(accuracy=(1.0 + 3.0) / (2.0 + 6.0), custom_sum=8),
    ),
    'non_keras_metrics': (
        collections.OrderedDict(
            divide=tf.function(func=lambda x: x[0] / x[1]),
            sum=tf.function(func=lambda x: x['count_1'] + x['count_2']),
        ),
        [
            collections.OrderedDict(
                divide=[np.float32(1.0), np.float32(2.0)],
                sum=collections.OrderedDict(count_1=np.int32(1), count_2=np.int32(1)),
            ),
            collections.OrderedDict(
                divide=[np.float32(3.0), np.float32(6.0)],
                sum=collections.OrderedDict(count_1=np.int32(1), count_2=np.int32(1)),
            ),
        ],
        tff.to_type(
            collections.OrderedDict(
                divide=[tf.TensorSpec([], tf.float32), tf.TensorSpec([], tf.float32)],
                sum=collections.OrderedDict(
                    count_1=tf.TensorSpec([], tf.int32), count_2=tf.TensorSpec([], tf.int32)
                ),
            )
        ),
        collections.OrderedDict(divide=(1.0 + 3.0) / (2.0 + 6.0), sum=4),
    ),
    'metrics_mixed_dtypes': (
        collections.OrderedDict(
            divide=tf.function(func=lambda x: x[0] / tf.cast(x[1], tf.float32)),
            sum=tf.function(func=lambda x: tf.cast(x['count_1'], tf.float32) + x['count_2']),
        ),
        [
            collections.OrderedDict(
                divide=[np.float32(1.0), np.int32(2)],
                sum=collections.OrderedDict(count_1=np.int32(1), count_2=np.float32(1.0)),
            ),
            collections.OrderedDict(
                divide=[np.float32(3.0), np.int32(6)],
                sum=collections.OrderedDict(count_1=np.int32(1), count_2=np.float32(1.0)),
            ),
        ],
        tff.to_type(
            collections.OrderedDict(
                divide=[tf.TensorSpec([], tf.float32), tf.TensorSpec([], tf.int32)],
                sum=collections.OrderedDict(
                    count_1=tf.TensorSpec([], tf.int32), count_2=tf.TensorSpec([], tf.float32)
                ),
            )
        ),
        collections.OrderedDict(divide=(1.0 + 3.0) / (2.0 + 6.0), sum=4.0),
    ),
}


@pytest.mark.parametrize(
    'finalizers, clients, metrics_type, expected', list(_CASES.values()), ids=list(_CASES)
)
def test_returns_correct_results(tff_stack, finalizers, clients, metrics_type, expected):
    aggregator = tff.learning.metrics.sum_then_finalize(
        metric_finalizers=finalizers, local_unfinalized_metrics_type=metrics_type
    )

    @tff.federated_computation(tff.type_at_clients(metrics_type))
    def wrapped(unfinalized_metrics):
        return aggregator(unfinalized_metrics)

    result = wrapped(clients)
    assert list(result) == list(expected)
    for k in expected:
        np.testing.assert_allclose(result[k], expected[k], rtol=1e-7)


_INVALID = {
    'metric_finalizers_not_ordereddict': (
        {'accuracy': tf.function(func=lambda x: x[0] / x[1])},
        _UNUSED_UNFINALIZED_METRICS_TYPE,
        TypeError,
        'Expected .*collections.OrderedDict',
    ),
    'metric_finalizers_key_not_string': (
        collections.OrderedDict([(1, tf.function(func=lambda x: x))]),
        _UNUSED_UNFINALIZED_METRICS_TYPE,
        TypeError,
        'Expected .*str',
    ),
    'unfinalized_metrics_not_structure_type': (
        _UNUSED_METRICS_FINALIZERS,
        tff.TensorType(np.float32),
        TypeError,
        'Expected .*`StructWithPythonType`',
    ),
    'unfinalized_metrics_not_ordereddict': (
        _UNUSED_METRICS_FINALIZERS,
        tff.StructType([tff.TensorType(np.float32), tff.TensorType(np.float32)], container=list),
        TypeError,
        'with `collections.OrderedDict` as the Python container',
    ),
    'unmatched_metric_names': (
        collections.OrderedDict(accuracy=tf.function(func=lambda x: x[0] / x[1])),
        tff.StructType(
            [('loss', tff.TensorType(np.float32, [2]))], container=collections.OrderedDict
        ),
        ValueError,
        'The metric names in `metric_finalizers` do not match',
    ),
}


@pytest.mark.parametrize(
    'finalizers, metrics_type, error_type, message', list(_INVALID.values()), ids=list(_INVALID)
)
def test_fails_with_invalid_inputs(finalizers, metrics_type, error_type, message):
    with pytest.raises(error_type, match=message):

        @tff.federated_computation(tff.type_at_clients(metrics_type))
        def _aggregator_computation(unfinalized_metrics):
            return tff.learning.metrics.sum_then_finalize(metric_finalizers=finalizers)(
                unfinalized_metrics
            )


def test_secure_default_value_ranges_on_the_stacks(tff_stack):
    _check_secure_default_value_ranges(*_CASES['metrics_mixed_dtypes'])


@pytest.mark.parametrize(
    'finalizers, clients, metrics_type, expected',
    [_CASES[k] for k in ('keras_metrics', 'keras_metrics_callable_finalizers')],
    ids=['keras_metrics', 'keras_metrics_callable_finalizers'],
)
def test_secure_default_value_ranges_returns_correct_results(
    finalizers, clients, metrics_type, expected
):
    _check_secure_default_value_ranges(finalizers, clients, metrics_type, expected)


def _check_secure_default_value_ranges(finalizers, clients, metrics_type, expected):
    polymorphic = tff.learning.metrics.secure_sum_then_finalize(metric_finalizers=finalizers)

    @tff.federated_computation(tff.type_at_clients(metrics_type))
    def aggregator_computation(unfinalized_metrics):
        return polymorphic(unfinalized_metrics)

    result = aggregator_computation(clients)
    factory_keys = collections.OrderedDict()
    for value in tf.nest.flatten(clients[0]):
        tensor = tf.constant(value)
        kind = float if tensor.dtype.is_floating else int
        factory_keys[
            sum_aggregation_factory.create_factory_key(
                kind(aggregator_lib.DEFAULT_SECURE_LOWER_BOUND),
                kind(aggregator_lib.DEFAULT_SECURE_UPPER_BOUND),
                tensor.dtype,
            )
        ] = 1
    measurements = result.pop('secure_sum_measurements')
    assert list(measurements) == list(factory_keys)
    for m in measurements.values():
        assert int(m['secure_upper_clipped_count']) == 0
        assert int(m['secure_lower_clipped_count']) == 0
        assert float(m['secure_upper_threshold']) == aggregator_lib.DEFAULT_SECURE_UPPER_BOUND
        assert float(m['secure_lower_threshold']) == aggregator_lib.DEFAULT_SECURE_LOWER_BOUND
    for k in expected:
        np.testing.assert_allclose(result[k], expected[k], rtol=1e-5, atol=1e-5)


def test_secure_user_value_ranges_returns_correct_results():
    finalizers = collections.OrderedDict(
        accuracy=keras_finalizer.create_keras_metric_finalizer(
            keras.metrics.SparseCategoricalAccuracy
        ),
        custom_sum=keras_finalizer.create_keras_metric_finalizer(CustomSumMetric),
    )
    polymorphic = tff.learning.metrics.secure_sum_then_finalize(
        metric_finalizers=finalizers,
        metric_value_ranges=collections.OrderedDict(accuracy=[None, (0.0, 1.0)]),
    )

    @tff.federated_computation(tff.type_at_clients(_KERAS_TYPE))
    def aggregator_computation(unfinalized_metrics):
        return polymorphic(unfinalized_metrics)

    result = aggregator_computation(_keras_clients())
    measurements = result.pop('secure_sum_measurements')
    key = sum_aggregation_factory.create_factory_key
    upper = aggregator_lib.DEFAULT_SECURE_UPPER_BOUND
    assert list(measurements) == [
        key(0.0, float(upper), tf.float32),
        key(0.0, 1.0, tf.float32),
        key(0, upper, tf.int32),
    ]
    clipped = [int(m['secure_upper_clipped_count']) for m in measurements.values()]
    assert clipped == [0, 2, 0]  # both clients' accuracy counts (2.0, 6.0) clip to 1.0
    np.testing.assert_allclose(result['accuracy'], (1.0 + 3.0) / (1.0 + 1.0), rtol=1e-5)
    assert int(result['custom_sum']) == 8


def test_secure_bad_value_ranges_raise():
    polymorphic = tff.learning.metrics.secure_sum_then_finalize(
        _UNUSED_METRICS_FINALIZERS, metric_value_ranges=collections.OrderedDict(accuracy=(0.0, 1))
    )
    with pytest.raises(TypeError, match='Failed to create encoding value range'):

        @tff.federated_computation(tff.type_at_clients(_UNUSED_UNFINALIZED_METRICS_TYPE))
        def _aggregator_computation(unfinalized_metrics):
            return polymorphic(unfinalized_metrics)


# FinalizeThenSampleTest.

_SAMPLE_TYPE = tff.to_type(
    collections.OrderedDict(accuracy=[tff.TensorType(np.float32), tff.TensorType(np.float32)])
)


@pytest.mark.parametrize(
    'bad_sample_size, error_type, message',
    [
        (0, ValueError, 'must be positive'),
        (-1, ValueError, 'must be positive'),
        (None, TypeError, 'sample_size'),
        ('5', TypeError, 'sample_size'),
    ],
    ids=['zero', 'negative', 'none', 'string'],
)
def test_finalize_then_sample_fails_with_invalid_sample_size(bad_sample_size, error_type, message):
    with pytest.raises(error_type, match=message):

        @tff.federated_computation(tff.type_at_clients(_SAMPLE_TYPE))
        def _aggregator_computation(unfinalized_metrics):
            return aggregator_lib.finalize_then_sample(
                metric_finalizers=_UNUSED_METRICS_FINALIZERS, sample_size=bad_sample_size
            )(unfinalized_metrics)


@pytest.mark.parametrize(
    'finalizers, metrics_type, error_type, message', list(_INVALID.values()), ids=list(_INVALID)
)
def test_finalize_then_sample_fails_with_invalid_inputs(
    finalizers, metrics_type, error_type, message
):
    with pytest.raises(error_type, match=message):

        @tff.federated_computation(tff.type_at_clients(metrics_type))
        def _aggregator_computation(unfinalized_metrics):
            return aggregator_lib.finalize_then_sample(metric_finalizers=finalizers)(
                unfinalized_metrics
            )


@pytest.mark.parametrize(
    'sample_size, num_clients, expected_num_samples',
    [
        (4, 3, 3),
        (2, 2, 2),
        (2, 5, 2),
    ],
    ids=[
        'sample_size_larger_then_num_clients',
        'sample_size_equal_num_clients',
        'sample_size_smaller_than_num_clients',
    ],
)
def test_finalize_then_sample_returns_correct_num_samples(
    tff_stack, sample_size, num_clients, expected_num_samples
):
    polymorphic_aggregator_computation = tff.learning.metrics.finalize_then_sample(
        metric_finalizers=_UNUSED_METRICS_FINALIZERS, sample_size=sample_size
    )

    @tff.federated_computation(tff.type_at_clients(_SAMPLE_TYPE))
    def aggregator_computation(unfinalized_metrics):
        return polymorphic_aggregator_computation(unfinalized_metrics)

    local_metrics_at_clients = [collections.OrderedDict(accuracy=[1.0, 2.0])] * num_clients
    aggregated_metrics = aggregator_computation(local_metrics_at_clients)
    assert list(aggregated_metrics) == ['accuracy']
    np.testing.assert_allclose(aggregated_metrics['accuracy'], [0.5] * expected_num_samples)
