"""Finalizers of Keras metrics (TFF's ``learning/metrics/keras_finalizer.py``).

A finalizer maps a metric's unfinalized values (the values of its
variables, summed over clients) to its result. With Keras 3 it runs the
metric's ``result()`` in a ``keras.StatelessScope`` that maps its variables to
the values: no variable is created or assigned, so it traces into any
`tf_computation`.
"""

from __future__ import annotations

import inspect
from typing import Callable, Union

import keras
import numpy as np
import tensorflow as tf

from simharness.errors import SimharnessTypeError, SimharnessValueError
from simharness.learning import keras_kinds
from simharness.learning._typing import TensorStructure

#: The values of a metric's variables -> its result.
KerasMetricFinalizer = Callable[[list], TensorStructure]
#: A Keras metric, or a no-argument callable making one.
MetricOrConstructor = Union[keras.metrics.Metric, Callable[[], keras.metrics.Metric]]


def _check_keras_metric_config_constructable(metric: object) -> None:
    """Raises TypeError if `metric` cannot be rebuilt from its ``get_config()``."""
    if not isinstance(metric, keras_kinds.metrics()):
        raise SimharnessTypeError(
            f'Metric {type(metric)} is not a `keras.metrics.Metric` to be constructable from '
            'the `get_config()` method.',
            expected=keras.metrics.Metric,
            actual=type(metric),
        )
    name = type(metric).__name__
    if any(getattr(m.metrics, name, None) is type(metric) for m in keras_kinds.modules()):
        return
    params = [
        p
        for p in inspect.signature(type(metric).__init__).parameters.values()
        if p.name != 'self' and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    config = metric.get_config()
    extra = [p.name for p in params if p.name not in config]
    if extra:
        raise SimharnessTypeError(
            f'Metric {name} is not constructable from the `get_config()` method, because '
            f'`__init__` takes extra arguments that are not included in the `get_config()`: '
            f'{extra}. Pass the metric constructor instead, or update the `get_config()` in '
            'the metric class to include these extra arguments.',
            actual=type(metric),
        )


def create_keras_metric(metric: MetricOrConstructor) -> keras.metrics.Metric:
    """A new Keras metric: a copy of `metric` (from its config) or ``metric()``.

    Raises:
      TypeError: `metric` is neither a Keras metric nor a no-argument callable
        returning one (or cannot be rebuilt from its config).
    """
    if isinstance(metric, keras_kinds.metrics()):
        _check_keras_metric_config_constructable(metric)
        return type(metric).from_config(metric.get_config())
    if callable(metric):
        made = metric()
        if not isinstance(made, keras_kinds.metrics()):
            raise SimharnessTypeError(
                'Expected input `metric` to be either a `keras.metrics.Metric` or a no-arg '
                f'callable that creates a `keras.metrics.Metric`, found a callable that returns '
                f'a {type(made).__name__}.',
                expected=keras.metrics.Metric,
                actual=type(made),
            )
        return made
    raise SimharnessTypeError(
        'Expected input `metric` to be either a `keras.metrics.Metric` or a no-arg callable '
        f'that constructs a `keras.metrics.Metric`, found a non-callable '
        f'{type(metric).__name__}.',
        expected=keras.metrics.Metric,
        actual=type(metric),
    )


def create_keras_metric_finalizer(metric: MetricOrConstructor) -> KerasMetricFinalizer:
    """A finalizer for `metric`: ``list of variable values -> metric.result()``.

    Args:
      metric: a Keras metric, or a no-argument callable that makes one.

    Returns:
      A callable taking a list of tensors (one per variable of the metric, in
      order) and returning the metric's result; TF ops only.

    Raises:
      TypeError: `metric` is neither (at creation), or the values are not a list
        (at call).
      ValueError: (at call) the values do not match the metric's variables.
    """
    keras_metric = create_keras_metric(metric)
    if keras_kinds.is_tf_keras(keras_metric):
        return _tf_keras_finalizer(metric)

    def finalizer(unfinalized_metric_values: list) -> TensorStructure:
        values = _check_values(keras_metric, unfinalized_metric_values)
        variables = keras_metric.variables
        # Keras' stateless_result, with the result read inside the scope (a metric whose
        # result is one of its variables would otherwise hand back the variable itself).
        with keras.StatelessScope(state_mapping=list(zip(variables, values))):
            return tf.nest.map_structure(
                lambda r: tf.convert_to_tensor(r.value if isinstance(r, keras.Variable) else r),
                keras_metric.result(),
            )

    return finalizer


def _check_values(keras_metric: keras.metrics.Metric, unfinalized_metric_values: object) -> list:
    """The values as tensors, one per variable of `keras_metric` (its shape and dtype).

    Raises:
      TypeError: not a list (or tuple) of tensors.
      ValueError: their number, shapes or dtypes do not match the metric's variables.
    """
    if not isinstance(unfinalized_metric_values, (list, tuple)):
        raise SimharnessTypeError(
            f'Expected list of tensors as the input to the finalizer of '
            f'{keras_metric.name}, found {type(unfinalized_metric_values).__name__}.',
            expected=list,
            actual=type(unfinalized_metric_values),
        )
    variables = keras_metric.variables
    if len(variables) != len(unfinalized_metric_values):
        raise SimharnessValueError(
            'The input to the finalizer should be a list of `tf.Tensor`s matching the '
            f'variables of the Keras metric {keras_metric.name}. Expected a list of '
            f'`tf.Tensor`s of length {len(variables)}, found a list of length '
            f'{len(unfinalized_metric_values)}.'
        )
    values = []
    for v, a in zip(variables, unfinalized_metric_values):
        if not (tf.is_tensor(a) or isinstance(a, (np.ndarray, np.generic, int, float))):
            raise SimharnessTypeError(
                f'Expected tf.Tensor values in the input to the finalizer of '
                f'{keras_metric.name}, found {type(a).__name__}.',
                expected=tf.Tensor,
                actual=type(a),
            )
        a = tf.convert_to_tensor(a)
        if tuple(v.shape) != tuple(a.shape) or tf.as_dtype(v.dtype) != a.dtype:
            raise SimharnessValueError(
                'The input to the finalizer should be a list of `tf.Tensor`s matching the '
                f'variables of the Keras metric {keras_metric.name}. Expected a '
                f'`tf.Tensor` of shape {tuple(v.shape)} and dtype '
                f'{tf.as_dtype(v.dtype)!r}, found a `tf.Tensor` of shape '
                f'{tuple(a.shape)} and dtype {a.dtype!r}.'
            )
        values.append(a)
    return values


def _tf_keras_finalizer(metric: MetricOrConstructor) -> KerasMetricFinalizer:
    """TFF's finalizer, for a ``tf_keras`` (Keras 2) metric: a new metric made where the
    finalizer is traced (its variables in that computation), assigned the values, its
    ``result()``."""

    def finalizer(unfinalized_metric_values: list) -> TensorStructure:
        with tf.init_scope():
            keras_metric = create_keras_metric(metric)
        values = _check_values(keras_metric, unfinalized_metric_values)
        for v, a in zip(keras_metric.variables, values):
            v.assign(a)
        return keras_metric.result()

    return finalizer
