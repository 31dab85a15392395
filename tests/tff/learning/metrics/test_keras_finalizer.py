"""TFF's learning/metrics/keras_finalizer_test.py, renamed (Keras 3 metrics). Left out: none."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import simharness as tff


class CustomMeanMetric(keras.metrics.Mean):
    """A custom metric whose result is total / (count + initial_count)."""

    def __init__(self, initial_count, name='custom_mean_metric', dtype=None):
        self._initial_count = initial_count
        super().__init__(name=name, dtype=dtype)
        self.count.assign(initial_count)

    def get_config(self):
        return dict(super().get_config(), initial_count=self._initial_count)


class CustomSumMetric(keras.metrics.Sum):
    """A custom metric whose result is total + extra scalar and vector values."""

    def __init__(self, has_extra_variables, name='custom_sum_metric', dtype=None):
        super().__init__(name=name, dtype=dtype)
        self._has_extra_variables = has_extra_variables
        if has_extra_variables:
            self.scalar = self.add_weight(
                name='scalar', shape=(), initializer='zeros', dtype='float32'
            )
            self.vector = self.add_weight(
                name='vector', shape=(2,), initializer='zeros', dtype='float32'
            )

    def result(self):
        if self._has_extra_variables:
            return self.total + self.scalar + tf.reduce_sum(self.vector)
        return self.total

    def get_config(self):
        return dict(super().get_config(), has_extra_variables=self._has_extra_variables)


class CustomCounter(keras.metrics.Sum):
    """A custom metric with extra arguments in `__init__` (not in its config)."""

    def __init__(self, name='new_metric', arg1=0, dtype='int64'):
        super().__init__(name=name, dtype=dtype)
        self._arg1 = arg1


def _wrap(metric, unfinalized_type):
    finalizer = tff.learning.metrics.create_keras_metric_finalizer(metric)
    return tff.tf_computation(finalizer, unfinalized_type)


_F32 = tff.TensorType(np.float32)


@pytest.mark.parametrize(
    'metric',
    [
        keras.metrics.SparseCategoricalAccuracy(),
        CustomMeanMetric(initial_count=0.0),
        keras.metrics.SparseCategoricalAccuracy,
    ],
    ids=['keras_metric', 'custom_keras_metric', 'keras_metric_constructor'],
)
def test_keras_metric_finalizer_returns_correct_result(tff_stack, metric):
    computation = _wrap(metric, tff.StructType([_F32, _F32], container=list))
    assert float(computation([np.float32(2.0), np.float32(2.0)])) == 1.0


@pytest.mark.parametrize(
    'metric, values, unfinalized_type, expected',
    [
        (
            CustomSumMetric(has_extra_variables=False),
            [np.float32(1.0)],
            tff.StructType([_F32], container=list),
            1.0,
        ),
        (
            CustomSumMetric(has_extra_variables=True),
            [np.float32(1.0), np.float32(1.0), np.array([1.0, 1.0], np.float32)],
            tff.StructType([_F32, _F32, tff.TensorType(np.float32, [2])], container=list),
            4.0,
        ),
    ],
    ids=['one_variable', 'three_variables'],
)
def test_keras_metric_finalizer_succeeds_with_different_metric_variables(
    metric, values, unfinalized_type, expected
):
    assert float(_wrap(metric, unfinalized_type)(values)) == expected


@pytest.mark.parametrize(
    'invalid_metric, message',
    [
        (tf.constant(1.0), 'found a non-callable'),
        (keras.losses.MeanSquaredError, 'found a callable'),
        (CustomCounter(arg1=1), 'extra arguments'),
    ],
    ids=['tensor', 'loss_constructor', 'custom_metric_with_extra_init_args'],
)
def test_create_keras_metric_finalizer_fails_with_invalid_input(invalid_metric, message):
    with pytest.raises(TypeError, match=message):
        _wrap(invalid_metric, tff.StructType([_F32], container=list))


@pytest.mark.parametrize(
    'unfinalized_type, error_type, message',
    [
        (_F32, TypeError, 'Expected list'),
        (
            tff.StructType([_F32, tff.StructType([_F32], container=list)], container=list),
            TypeError,
            'found list',
        ),
        (tff.StructType([_F32], container=list), ValueError, 'found a list of length 1'),
        (
            tff.StructType([tff.TensorType(np.float32, [2]), _F32], container=list),
            ValueError,
            r'found a `tf.Tensor` of shape \(2,\) and dtype tf.float32',
        ),
        (
            tff.StructType([tff.TensorType(np.int32), _F32], container=list),
            ValueError,
            r'found a `tf.Tensor` of shape \(\) and dtype tf.int32',
        ),
    ],
    ids=[
        'not_a_list',
        'not_a_list_of_tensors',
        'unmatched_length',
        'unmatched_shape',
        'unmatched_dtype',
    ],
)
def test_keras_metric_finalizer_fails_with_unmatched_unfinalized_metric_values(
    unfinalized_type, error_type, message
):
    with pytest.raises(error_type, match=message):
        _wrap(keras.metrics.SparseCategoricalAccuracy(), unfinalized_type)
