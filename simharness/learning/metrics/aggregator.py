"""Metric aggregators (TFF's ``learning/metrics/aggregator.py``).

`sum_then_finalize`, `secure_sum_then_finalize` and `finalize_then_sample`.

An aggregator is a federated computation ``unfinalized metrics@CLIENTS ->
finalized metrics@SERVER``; learning processes call it on what each client's
model reports (`VariableModel.report_local_unfinalized_metrics`).
"""

from __future__ import annotations

import collections
from collections.abc import Mapping
from typing import Optional, cast

from simharness.core import intrinsics
from simharness.core import types as T
from simharness.core import narrowing as N
from simharness.core.computation import Computation, federated_computation, tf_computation
from simharness.core.tracing import Value
from simharness.errors import SimharnessTypeError
from simharness.learning._typing import MetricFinalizers, TensorStructure
from simharness.learning.metrics import (
    aggregation_utils,
    sampling_aggregation_factory,
    secure_sum_factory,
)
from simharness.templates import is_stateful
from simharness.templates.aggregation_process import AggregationProcess

DEFAULT_SECURE_LOWER_BOUND = 0
DEFAULT_SECURE_UPPER_BOUND = 2**20 - 1


def sum_then_finalize(
    metric_finalizers: MetricFinalizers, local_unfinalized_metrics_type: Optional[T.Type] = None
) -> Computation:
    """Sums the clients' unfinalized metrics, then finalizes them at the server.

    Args:
      metric_finalizers: a `VariableModel.metric_finalizers()` result (an
        `OrderedDict` of name -> finalizer, the names those of the unfinalized
        metrics) or a `FunctionalModel.finalize_metrics`-like callable of the
        whole summed state.
      local_unfinalized_metrics_type: unused (as in TFF, which will remove it).

    Returns:
      A polymorphic federated computation ``OrderedDict@CLIENTS -> OrderedDict@SERVER``
      (traced for the type of its argument).

    Raises:
      TypeError: `metric_finalizers` is neither; (when traced) the metrics are not
        an `OrderedDict`.
      ValueError: (when traced) the names of finalizers and metrics differ.
    """
    del local_unfinalized_metrics_type
    aggregation_utils.check_metric_finalizers(metric_finalizers)

    @federated_computation
    def aggregator_computation(client_local_unfinalized_metrics: Value) -> Value:
        metrics_type = aggregation_utils.check_local_unfinalized_metrics_type(
            N.member_of(client_local_unfinalized_metrics.type_signature)
        )
        if not callable(metric_finalizers):
            aggregation_utils.check_finalizers_matches_unfinalized_metrics(
                metric_finalizers, metrics_type
            )
        summed = intrinsics.federated_sum(client_local_unfinalized_metrics)
        finalize = aggregation_utils.build_finalizer_computation(metric_finalizers, metrics_type)
        return intrinsics.federated_map(finalize, summed)

    return aggregator_computation


def secure_sum_then_finalize(
    metric_finalizers: MetricFinalizers,
    local_unfinalized_metrics_type: Optional[T.Type] = None,
    metric_value_ranges: Optional[secure_sum_factory.ValueRanges] = None,
) -> Computation:
    """Sums the clients' unfinalized metrics securely, then finalizes them at the server.

    Every tensor is clipped into its range (default ``[0, 2**20 - 1]``; floats
    are quantized) and summed with `tff.aggregators.SecureSumFactory`, tensors
    of one range and dtype together. The result holds the finalized metrics
    and ``secure_sum_measurements`` (per group: clipped counts, thresholds).

    Args:
      metric_finalizers: as `sum_then_finalize`.
      local_unfinalized_metrics_type: unused (as in TFF).
      metric_value_ranges: an optional partial tree of ``(lower, upper)`` ranges
        matching the unfinalized metrics (None: the default range).

    Returns:
      A polymorphic federated computation ``OrderedDict@CLIENTS -> OrderedDict@SERVER``.

    Raises:
      TypeError: bad finalizers or ranges.
    """
    del local_unfinalized_metrics_type
    aggregation_utils.check_metric_finalizers(metric_finalizers)

    def create_secure_sum_process(unfinalized_type: T.Type) -> AggregationProcess:
        metrics_type = aggregation_utils.check_local_unfinalized_metrics_type(unfinalized_type)
        if not callable(metric_finalizers):
            aggregation_utils.check_finalizers_matches_unfinalized_metrics(
                metric_finalizers, metrics_type
            )
        defaults = secure_sum_factory.create_default_secure_sum_quantization_ranges(
            metrics_type,
            lower_bound=DEFAULT_SECURE_LOWER_BOUND,
            upper_bound=DEFAULT_SECURE_UPPER_BOUND,
            use_auto_tuned_bounds_for_float_values=False,
        )
        try:
            ranges = secure_sum_factory.fill_missing_values_with_defaults(
                defaults, metric_value_ranges
            )
        except TypeError as e:
            raise SimharnessTypeError(
                f'Failed to create encoding value range from: {metric_value_ranges}'
            ) from e
        # An OrderedDict, as the defaults: the metrics type is an OrderedDict struct.
        process = secure_sum_factory.SecureSumFactory(cast(collections.OrderedDict, ranges)).create(
            metrics_type
        )
        if is_stateful(process):  # fixed ranges: no state to carry
            raise SimharnessTypeError('internal: the secure metric sum must be stateless')
        return process

    @federated_computation
    def aggregator_computation(client_local_unfinalized_metrics: Value) -> Value:
        metrics_type = N.member_of(client_local_unfinalized_metrics.type_signature)
        process = create_secure_sum_process(metrics_type)
        output = process.next(process.initialize(), client_local_unfinalized_metrics)
        measurements_type = N.member_of(output.measurements.type_signature)
        unfinalized_type = N.member_of(output.result.type_signature)

        def finalize(
            unfinalized_metrics: TensorStructure, secure_sum_measurements: TensorStructure
        ) -> collections.OrderedDict:
            unfinalized_metrics = aggregation_utils.as_python(unfinalized_metrics)
            finalized = collections.OrderedDict(secure_sum_measurements=secure_sum_measurements)
            if callable(metric_finalizers):
                finalized.update(metric_finalizers(unfinalized_metrics))
            else:
                # The metrics type is checked to be an OrderedDict struct: a mapping by name.
                by_name = cast(Mapping[str, TensorStructure], unfinalized_metrics)
                for name, finalizer in metric_finalizers.items():
                    finalized[name] = finalizer(by_name[name])
            return finalized

        finalizer_computation = tf_computation(finalize, unfinalized_type, measurements_type)
        return intrinsics.federated_map(
            finalizer_computation, intrinsics.federated_zip((output.result, output.measurements))
        )

    return aggregator_computation


def finalize_then_sample(
    metric_finalizers: MetricFinalizers,
    local_unfinalized_metrics_type: Optional[T.Type] = None,
    sample_size: int = 100,
) -> Computation:
    """Finalizes each client's metrics, then samples up to `sample_size` clients' at the server.

    The result has the metrics' keys, each leaf a list of the sampled clients'
    finalized values (a sampled client gives all its metrics; all clients when
    there are at most `sample_size`): the current round's samples of
    `sampling_aggregation_factory.FinalizeThenSampleFactory`.

    Args:
      metric_finalizers: as `sum_then_finalize`.
      local_unfinalized_metrics_type: unused (as in TFF, which will remove it).
      sample_size: the most clients sampled (default 100).

    Returns:
      A polymorphic federated computation ``OrderedDict@CLIENTS -> OrderedDict@SERVER``.

    Raises:
      TypeError: bad finalizers; (when traced) the metrics are not an
        `OrderedDict`, or `sample_size` is not an int.
      ValueError: (when traced) the names of finalizers and metrics differ, or
        `sample_size` is not positive.
    """
    del local_unfinalized_metrics_type
    aggregation_utils.check_metric_finalizers(metric_finalizers)

    @federated_computation
    def aggregator_computation(client_local_unfinalized_metrics: Value) -> Value:
        metrics_type = aggregation_utils.check_local_unfinalized_metrics_type(
            N.member_of(client_local_unfinalized_metrics.type_signature)
        )
        if not callable(metric_finalizers):
            aggregation_utils.check_finalizers_matches_unfinalized_metrics(
                metric_finalizers, metrics_type
            )
        sampling_aggregation_factory.check_sample_size(sample_size)
        process = sampling_aggregation_factory.FinalizeThenSampleFactory(
            sample_size=sample_size
        ).create(metric_finalizers=metric_finalizers, local_unfinalized_metrics_type=metrics_type)
        output = process.next(process.initialize(), client_local_unfinalized_metrics)
        current_round_samples, _ = output.result
        return current_round_samples

    return aggregator_computation
