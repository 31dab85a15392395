"""Types of metric finalizers and aggregators (TFF's ``learning/metrics/types.py``)."""

from __future__ import annotations

import collections
from typing import Any, Callable, Optional, Protocol

#: Metric name -> finalizer (unfinalized values -> the metric's value).
MetricFinalizersType = collections.OrderedDict  # of str -> Callable[[Any], Any]
#: A functional model's metrics state: metric name -> its variables' values.
MetricsState = collections.OrderedDict  # of str -> Any
#: A functional model's finalizer: the whole metrics state -> the metrics' values.
FunctionalMetricFinalizersType = Callable[[Any], Any]


class MetricsAggregatorType(Protocol):
    """``(metric_finalizers, local_unfinalized_metrics_type) -> federated computation``."""

    def __call__(self, metric_finalizers: Any,
                 local_unfinalized_metrics_type: Optional[Any] = None) -> Any:
        ...
