"""Metrics (``tff.learning.metrics``): counters, finalizers, functional metrics.

* `sum_then_finalize(metric_finalizers)`: the default metrics aggregator
  (federated sum of the clients' unfinalized metrics, finalized at the server).
* `secure_sum_then_finalize(metric_finalizers, metric_value_ranges=...)`: the
  same over secure summation (values clipped into ranges), with
  ``secure_sum_measurements``; `SecureSumFactory` and
  `create_default_secure_sum_quantization_ranges` build it.
* `finalize_then_sample(metric_finalizers, sample_size=100)` /
  `FinalizeThenSampleFactory(sample_size=100)`: each client's metrics
  finalized, up to ``sample_size`` clients' kept (reservoir sampling); the
  factory's process also keeps a sample over all rounds.
* `SumThenFinalizeFactory`: the same as an aggregation factory whose process
  also accumulates the metrics over rounds (``result``: this round's and all
  rounds' finalized metrics).
* `NumExamplesCounter`, `NumBatchesCounter`: Keras metrics every model reports.
* `create_keras_metric_finalizer`: a Keras metric's finalizer (unfinalized
  values, i.e. its variables' values, -> its result).
* `create_functional_metric_fns`: Keras metrics as ``(initialize, update,
  finalize)`` for `tff.learning.models.FunctionalModel`.
"""

from simharness.learning.metrics.aggregator import (
    finalize_then_sample,
    secure_sum_then_finalize,
    sum_then_finalize,
)
from simharness.learning.metrics.counters import NumBatchesCounter, NumExamplesCounter
from simharness.learning.metrics.keras_finalizer import create_keras_metric_finalizer
from simharness.learning.metrics.keras_utils import create_functional_metric_fns
from simharness.learning.metrics.sampling_aggregation_factory import FinalizeThenSampleFactory
from simharness.learning.metrics.secure_sum_factory import (
    SecureSumFactory,
    create_default_secure_sum_quantization_ranges,
)
from simharness.learning.metrics.sum_aggregation_factory import SumThenFinalizeFactory
from simharness.learning.metrics.types import (
    FunctionalMetricFinalizersType,
    MetricFinalizersType,
    MetricsAggregatorType,
)

__all__ = [
    'FinalizeThenSampleFactory',
    'FunctionalMetricFinalizersType',
    'MetricFinalizersType',
    'MetricsAggregatorType',
    'NumBatchesCounter',
    'NumExamplesCounter',
    'SecureSumFactory',
    'SumThenFinalizeFactory',
    'create_default_secure_sum_quantization_ranges',
    'secure_sum_then_finalize',
    'create_functional_metric_fns',
    'create_keras_metric_finalizer',
    'finalize_then_sample',
    'sum_then_finalize',
]
