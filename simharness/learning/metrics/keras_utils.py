"""Keras metrics as pure functions (TFF's ``learning/metrics/keras_utils.py``)."""

from __future__ import annotations

import collections
from typing import Callable, Mapping, Optional, Protocol, Union, cast

import keras
import numpy as np
import tensorflow as tf

from simharness.errors import SimharnessTypeError, SimharnessValueError
from simharness.learning._typing import TensorStructure

MetricConstructor = Callable[[], keras.metrics.Metric]
MetricConstructors = collections.OrderedDict  # of str -> MetricConstructor
MetricsConstructor = Callable[[], 'collections.OrderedDict[str, keras.metrics.Metric]']
#: What `create_functional_metric_fns` takes.
MetricsConstructorLike = Union[MetricConstructor, MetricsConstructor, MetricConstructors]

#: The metrics state of `create_functional_metric_fns`: the values of one metric's
#: variables (a tuple), or an `OrderedDict` of them by metric name.
KerasMetricsState = Union[tuple, Mapping[str, tuple]]


class _HasPredictions(Protocol):
    """A batch output (`BatchOutput`, say): what `update` reads of it."""

    predictions: TensorStructure


def create_functional_metric_fns(
    metrics_constructor: MetricsConstructorLike,
) -> tuple[
    Callable[[], KerasMetricsState],
    Callable[..., KerasMetricsState],
    Callable[[KerasMetricsState], TensorStructure],
]:
    """Keras metrics as ``(initialize, update, finalize)`` pure functions.

    The state is the values of the metrics' variables (a tuple per metric);
    the functions run the metrics statelessly (Keras 3's
    ``stateless_update_state`` / ``stateless_result``), so they trace into
    any `tf_computation`::

        initialize() -> state
        update(state, labels, batch_output, sample_weight=None) -> state
                         (batch_output: anything with `predictions`, e.g. BatchOutput)
        finalize(state) -> the metrics' values

    Args:
      metrics_constructor: a no-argument callable returning a Keras metric or
        an `OrderedDict` of names to Keras metrics, or an `OrderedDict` of
        names to no-argument callables each returning a Keras metric.

    Returns:
      ``(initialize, update, finalize)``.

    Raises:
      TypeError: not a callable or `OrderedDict`, a constructor that returns no
        Keras metric, or names that are not strings.
    """
    if isinstance(metrics_constructor, collections.OrderedDict):
        constructors = metrics_constructor
        metrics_constructor = lambda: tf.nest.map_structure(lambda m: m(), constructors)  # noqa
    if not callable(metrics_constructor):
        raise SimharnessTypeError(
            '`metrics_constructor` must be a callable or `collections.OrderedDict`. Got '
            f'{metrics_constructor!r} which is a {type(metrics_constructor)!r}.',
            expected=collections.OrderedDict,
            actual=type(metrics_constructor),
        )
    metrics = metrics_constructor()
    if isinstance(metrics, keras.metrics.Metric):
        leaves = [metrics]
    elif isinstance(metrics, collections.OrderedDict):
        bad_keys = [k for k in metrics if not isinstance(k, str)]
        if bad_keys:
            raise SimharnessTypeError(
                '`metrics_constructor` must return an `OrderedDict` keyed by `str`. Got keys '
                f'{bad_keys} that were not type `str`.',
                expected=str,
            )
        leaves = list(metrics.values())
    else:
        raise SimharnessValueError(
            '`metrics_constructor` must return a `keras.metrics.Metric` instance, or an '
            f'OrderedDict of string to keras metrics; got {type(metrics).__name__}.'
        )
    for m in leaves:
        if not isinstance(m, keras.metrics.Metric):
            raise SimharnessTypeError(
                f'Found non-keras.metrics.Metric value: {type(m)}: {m!r}.',
                expected=keras.metrics.Metric,
                actual=type(m),
            )
    initial = [tuple(np.array(v.numpy()) for v in m.variables) for m in leaves]

    def pack(per_metric: list) -> KerasMetricsState:
        if isinstance(metrics, keras.metrics.Metric):
            return per_metric[0]
        return collections.OrderedDict(zip(metrics.keys(), per_metric))

    def unpack(state: KerasMetricsState) -> list:
        if isinstance(metrics, keras.metrics.Metric):
            return [state]
        by_name = cast(Mapping[str, tuple], state)  # as `pack` made it for these metrics
        return [by_name[k] for k in metrics.keys()]

    def initialize() -> KerasMetricsState:
        return pack([tuple(tf.constant(a) for a in values) for values in initial])

    def update(
        state: KerasMetricsState,
        labels: TensorStructure,
        batch_output: _HasPredictions,
        sample_weight: Optional[TensorStructure] = None,
    ) -> KerasMetricsState:
        if not hasattr(batch_output, 'predictions'):
            raise SimharnessValueError(
                'The input to a functional metrics `update` method must have a `predictions` '
                'attribute, such as when feeding in a `tff.learning.models.BatchOutput` '
                'structure.'
            )
        predictions = batch_output.predictions
        return pack(
            [
                tuple(
                    m.stateless_update_state(
                        list(s), y_true=labels, y_pred=predictions, sample_weight=sample_weight
                    )
                )
                for m, s in zip(leaves, unpack(state))
            ]
        )

    def finalize(state: KerasMetricsState) -> KerasMetricsState:
        return pack([m.stateless_result(list(s)) for m, s in zip(leaves, unpack(state))])

    return initialize, update, finalize
