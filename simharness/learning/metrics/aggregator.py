"""Metric aggregators (TFF's ``learning/metrics/aggregator.py``): `sum_then_finalize`.

An aggregator is a federated computation ``unfinalized metrics@CLIENTS ->
finalized metrics@SERVER``; learning processes call it on what each client's
model reports (`VariableModel.report_local_unfinalized_metrics`).
"""

from __future__ import annotations

from typing import Any, Optional

from simharness.core import intrinsics
from simharness.core.computation import federated_computation
from simharness.learning.metrics import aggregation_utils


def sum_then_finalize(metric_finalizers: Any,
                      local_unfinalized_metrics_type: Optional[Any] = None) -> Any:
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
    def aggregator_computation(client_local_unfinalized_metrics: Any) -> Any:
        metrics_type = client_local_unfinalized_metrics.type_signature.member
        aggregation_utils.check_local_unfinalized_metrics_type(metrics_type)
        if not callable(metric_finalizers):
            aggregation_utils.check_finalizers_matches_unfinalized_metrics(metric_finalizers,
                                                                           metrics_type)
        summed = intrinsics.federated_sum(client_local_unfinalized_metrics)
        finalize = aggregation_utils.build_finalizer_computation(metric_finalizers, metrics_type)
        return intrinsics.federated_map(finalize, summed)

    return aggregator_computation
