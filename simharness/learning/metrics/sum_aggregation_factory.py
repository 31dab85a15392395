"""`SumThenFinalizeFactory` (TFF's ``learning/metrics/sum_aggregation_factory.py``).

An aggregation factory for metrics: its process sums the clients'
unfinalized metrics (with an inner summation factory, `SumFactory` by
default), accumulates the sums over rounds in its state, and returns the
finalized metrics of the round and of all rounds so far.
"""

from __future__ import annotations

import collections
from typing import Callable, Optional

import tensorflow as tf

from simharness.aggregators import factory
from simharness.aggregators.sum_factory import SumFactory
from simharness.core import intrinsics
from simharness.core import types as T
from simharness.core.computation import federated_computation, tf_computation
from simharness.core.tracing import Value
from simharness.errors import SimharnessTypeError
from simharness.learning._typing import MetricFinalizers, TensorStructure
from simharness.learning.metrics import aggregation_utils

# TFF keeps these in this module; they live in `secure_sum_factory` here.
from simharness.learning.metrics.secure_sum_factory import (  # noqa: F401
    DEFAULT_FIXED_SECURE_LOWER_BOUND,
    DEFAULT_FIXED_SECURE_UPPER_BOUND,
    SecureSumFactory,
    UnquantizableDTypeError,
    _MetricRange,
    create_default_secure_sum_quantization_ranges,
    create_factory_key,
    fill_missing_values_with_defaults,
)
from simharness.templates import AggregationProcess, MeasuredProcessOutput


def _zeros_of(t: T.Type) -> TensorStructure:
    """Zeros of the tensor types of `t`, in `t`'s containers."""
    if isinstance(t, T.TensorType):
        return tf.zeros(t.shape, t.dtype)
    assert isinstance(t, T.StructType)  # checked by check_local_unfinalized_metrics_type
    items = [(n, _zeros_of(e)) for n, e in t.items()]
    container = t.python_container
    if container is None:
        if all(n for n, _ in items):
            return collections.OrderedDict(items)
        return tuple(v for _, v in items)
    make: Callable[..., TensorStructure] = container
    if issubclass(container, dict):
        return make(items)
    if hasattr(container, '_fields'):
        return make(*[v for _, v in items])
    return make(v for _, v in items)


def _initialize_accumulators(
    metrics_type: T.StructType, initial: Optional[collections.OrderedDict]
) -> Value:
    if initial is not None:
        return intrinsics.federated_value(initial, T.SERVER)

    @tf_computation
    def create_all_zero_state():
        return _zeros_of(metrics_type)

    return intrinsics.federated_eval(create_all_zero_state, T.SERVER)


class SumThenFinalizeFactory(factory.UnweightedAggregationFactory):
    """Sums unfinalized metrics, accumulates them over rounds, finalizes both.

    The process' ``next(state, unfinalized_metrics@CLIENTS)`` returns:
      state: ``(inner summation state, accumulated unfinalized metrics)``;
      result: ``(this round's finalized metrics, all rounds' finalized metrics)``;
      measurements: the inner summation's measurements.

    Args:
      metric_finalizers: an `OrderedDict` of metric name -> finalizer (e.g.
        `VariableModel.metric_finalizers()`), or a callable finalizing the
        whole structure (`FunctionalModel.finalize_metrics`).
      initial_unfinalized_metrics: the accumulators' start (default zeros).
      inner_summation_factory: an `UnweightedAggregationFactory` (default `SumFactory`).

    Raises:
      TypeError: an argument of the wrong type.
    """

    def __init__(
        self,
        metric_finalizers: MetricFinalizers,
        initial_unfinalized_metrics: Optional['collections.OrderedDict'] = None,
        inner_summation_factory: Optional[factory.UnweightedAggregationFactory] = None,
    ):
        aggregation_utils.check_metric_finalizers(metric_finalizers)
        self._metric_finalizers = metric_finalizers
        if initial_unfinalized_metrics is not None and not isinstance(
            initial_unfinalized_metrics, collections.OrderedDict
        ):
            raise SimharnessTypeError(
                'Expected initial_unfinalized_metrics to be a collections.OrderedDict, found '
                f'{type(initial_unfinalized_metrics).__name__}',
                expected=collections.OrderedDict,
                actual=type(initial_unfinalized_metrics),
            )
        self._initial_unfinalized_metrics = initial_unfinalized_metrics
        if inner_summation_factory is None:
            inner_summation_factory = SumFactory()
        elif not isinstance(inner_summation_factory, factory.UnweightedAggregationFactory):
            raise SimharnessTypeError(
                'Expected inner_summation_factory to be an UnweightedAggregationFactory, found '
                f'{type(inner_summation_factory).__name__}',
                expected=factory.UnweightedAggregationFactory,
                actual=type(inner_summation_factory),
            )
        self._inner_summation_factory = inner_summation_factory

    def create(self, local_unfinalized_metrics_type: factory.ValueType) -> AggregationProcess:
        """The metrics' `AggregationProcess` for one client's unfinalized metrics type.

        Raises:
          TypeError: the type is not an `OrderedDict` struct.
          ValueError: finalizer names differ from the metric names.
        """
        metrics_type = aggregation_utils.check_local_unfinalized_metrics_type(
            local_unfinalized_metrics_type
        )
        if not callable(self._metric_finalizers):
            aggregation_utils.check_finalizers_matches_unfinalized_metrics(
                self._metric_finalizers, metrics_type
            )
        inner = self._inner_summation_factory.create(metrics_type)
        initial = self._initial_unfinalized_metrics
        finalizer = aggregation_utils.build_finalizer_computation(
            self._metric_finalizers, metrics_type
        )

        @tf_computation(metrics_type, metrics_type)
        def add_unfinalized_metrics(accumulated, summed):
            return tf.nest.map_structure(tf.add, accumulated, summed)

        @federated_computation()
        def init_fn():
            return intrinsics.federated_zip(
                (inner.initialize(), _initialize_accumulators(metrics_type, initial))
            )

        @federated_computation(
            init_fn.type_signature.result, T.FederatedType(metrics_type, T.CLIENTS)
        )
        def next_fn(state, unfinalized_metrics):
            inner_state, accumulators = state
            inner_output = inner.next(inner_state, unfinalized_metrics)
            summed = inner_output.result
            accumulators = intrinsics.federated_map(add_unfinalized_metrics, (accumulators, summed))
            current = intrinsics.federated_map(finalizer, summed)
            total = intrinsics.federated_map(finalizer, accumulators)
            return MeasuredProcessOutput(
                state=intrinsics.federated_zip((inner_output.state, accumulators)),
                result=intrinsics.federated_zip((current, total)),
                measurements=inner_output.measurements,
            )

        return AggregationProcess(init_fn, next_fn)
