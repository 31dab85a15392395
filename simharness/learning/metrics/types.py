"""Types of metric finalizers and aggregators (TFF's ``learning/metrics/types.py``)."""

from __future__ import annotations

import collections
from typing import Optional, Protocol

from simharness.core import types as T
from simharness.core.computation import Computation
from simharness.learning._typing import FunctionalFinalizer, MetricFinalizers

#: Metric name -> finalizer (unfinalized values -> the metric's value): an `OrderedDict`.
MetricFinalizersType = collections.OrderedDict
#: A functional model's metrics state: metric name -> its variables' values (an
#: `OrderedDict` of structures of tensors).
MetricsState = collections.OrderedDict
#: A functional model's finalizer: the whole metrics state -> the metrics' values.
FunctionalMetricFinalizersType = FunctionalFinalizer


class MetricsAggregatorType(Protocol):
    """``(metric_finalizers, local_unfinalized_metrics_type) -> federated computation``."""

    def __call__(
        self,
        metric_finalizers: MetricFinalizers,
        local_unfinalized_metrics_type: Optional[T.Type] = None,
    ) -> Computation: ...
