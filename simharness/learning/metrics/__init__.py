"""Metrics (``tff.learning.metrics``): counters, finalizers, functional metrics.

* `sum_then_finalize(metric_finalizers)`: the default metrics aggregator
  (federated sum of the clients' unfinalized metrics, finalized at the server).
* `SumThenFinalizeFactory`: the same as an aggregation factory whose process
  also accumulates the metrics over rounds (``result``: this round's and all
  rounds' finalized metrics).
* `NumExamplesCounter`, `NumBatchesCounter`: Keras metrics every model reports.
* `create_keras_metric_finalizer`: a Keras metric's finalizer (unfinalized
  values, i.e. its variables' values, -> its result).
* `create_functional_metric_fns`: Keras metrics as ``(initialize, update,
  finalize)`` for `tff.learning.models.FunctionalModel`.
"""

from simharness.learning.metrics.aggregator import sum_then_finalize
from simharness.learning.metrics.counters import NumBatchesCounter, NumExamplesCounter
from simharness.learning.metrics.keras_finalizer import create_keras_metric_finalizer
from simharness.learning.metrics.keras_utils import create_functional_metric_fns
from simharness.learning.metrics.sum_aggregation_factory import SumThenFinalizeFactory
from simharness.learning.metrics.types import (FunctionalMetricFinalizersType,
                                               MetricFinalizersType, MetricsAggregatorType)

__all__ = ['FunctionalMetricFinalizersType', 'MetricFinalizersType', 'MetricsAggregatorType',
           'NumBatchesCounter', 'NumExamplesCounter', 'SumThenFinalizeFactory', 'create_functional_metric_fns',
           'create_keras_metric_finalizer', 'sum_then_finalize']
