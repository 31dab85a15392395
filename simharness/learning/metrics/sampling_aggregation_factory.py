"""Per-client metric samples (TFF's ``learning/metrics/sampling_aggregation_factory.py``).

```
FinalizeThenSampleFactory(sample_size=100).create(metric_finalizers, local_unfinalized_metrics_type)
state:         the reservoir of all rounds so far: OrderedDict(random_seed=int64[2],
               random_values=int32[?], samples=<finalized metrics, each leaf with a leading [?]>)
next:          each client finalizes its own metrics; up to sample_size clients are sampled
               (reservoir sampling, tff.aggregators.UnweightedReservoirSamplingFactory) and the
               round's reservoir is merged into the state's
result:        (current_round_samples, total_rounds_samples), each leaf a list of <= sample_size
               client values (a sampled client gives all its metrics)
measurements:  per leaf, the clients whose finalized leaf is NaN or Inf (before sampling), int64
```
The samples are a function of the client values (see `simharness.aggregators.sampling`):
the same bits on every stack, where TFF's differ per call.
"""

from __future__ import annotations

from simharness.aggregators import factory, sampling
from simharness.core import intrinsics as I
from simharness.core import types as T
from simharness.core import narrowing as N
from simharness.core.computation import federated_computation, tf_computation
from simharness.core.tracing import Value
from simharness.errors import SimharnessTypeError, SimharnessValueError
from simharness.learning._typing import MetricFinalizers
from simharness.learning.metrics import aggregation_utils
from simharness.templates import AggregationProcess, MeasuredProcessOutput

__all__ = ['FinalizeThenSampleFactory']


def check_sample_size(sample_size: object) -> None:
    """TypeError unless an int, ValueError unless positive."""
    if isinstance(sample_size, bool) or not isinstance(sample_size, int):
        raise SimharnessTypeError(
            f'Expected sample_size to be an int, found {type(sample_size).__name__} '
            f'({sample_size!r})',
            expected=int,
            actual=type(sample_size),
        )
    if sample_size <= 0:
        raise SimharnessValueError(f'sample_size must be positive, got {sample_size}.')


class FinalizeThenSampleFactory(factory.UnweightedAggregationFactory):
    """Finalizes each client's metrics, then samples up to `sample_size` clients' at the server.

    A sampled client contributes all its metrics: the samples have the
    metrics' keys, each leaf a list of values of the sampled clients (the
    i-th entries of two leaves come from one client). Both the current
    round's samples and the samples over all rounds so far are returned,
    each of at most `sample_size` clients. Usable as the
    ``metrics_aggregation_process`` of `tff.learning.algorithms.build_fed_eval`.

    Args:
      sample_size: the most clients whose metrics are kept (default 100).

    Raises:
      TypeError: `sample_size` is not an int.
      ValueError: `sample_size` is not positive.
    """

    def __init__(self, sample_size: int = 100):
        check_sample_size(sample_size)
        self._sample_size = sample_size

    def create(
        self,
        metric_finalizers: MetricFinalizers,  # type: ignore[override]  # TFF's
        local_unfinalized_metrics_type: T.Type,
    ) -> AggregationProcess:
        """The `AggregationProcess` of the metrics.

        Args:
          metric_finalizers: a `VariableModel.metric_finalizers()` result (an
            `OrderedDict` of name -> finalizer, the names those of the
            unfinalized metrics) or a `FunctionalModel.finalize_metrics`-like
            callable of the whole unfinalized metrics.
          local_unfinalized_metrics_type: a struct type with container
            `collections.OrderedDict`: one client's unfinalized metrics.

        Raises:
          TypeError: bad finalizers or metrics type.
          ValueError: the finalizers' names are not the metrics'.
        """
        aggregation_utils.check_metric_finalizers(metric_finalizers)
        metrics_type = aggregation_utils.check_local_unfinalized_metrics_type(
            local_unfinalized_metrics_type
        )
        if not callable(metric_finalizers):
            aggregation_utils.check_finalizers_matches_unfinalized_metrics(
                metric_finalizers, metrics_type
            )
        local_finalize = aggregation_utils.build_finalizer_computation(
            metric_finalizers, local_unfinalized_metrics_type
        )
        finalized_type = N.as_tensor_or_struct(
            local_finalize.type_signature.result, 'the finalized metrics'
        )
        sample_size = self._sample_size
        sampling_process = sampling.UnweightedReservoirSamplingFactory(
            sample_size=sample_size, return_sampling_metadata=True
        ).create(finalized_type)
        merge_samples = sampling.build_merge_samples_computation(finalized_type, sample_size)

        @federated_computation()
        def init_fn() -> Value:
            return I.federated_eval(
                tf_computation(lambda: sampling.build_initial_sample_reservoir(finalized_type)),
                T.SERVER,
            )

        # The state's sample dimension grows over rounds: [None], not init's [0].
        state_type = sampling.build_reservoir_type(finalized_type)

        @federated_computation(
            T.FederatedType(state_type, T.SERVER),
            T.FederatedType(local_unfinalized_metrics_type, T.CLIENTS),
        )
        def next_fn(state: Value, client_unfinalized_metrics: Value) -> MeasuredProcessOutput:
            local_finalized = I.federated_map(local_finalize, client_unfinalized_metrics)
            current = sampling_process.next(sampling_process.initialize(), local_finalized)
            new_state = I.federated_map(merge_samples, (state, current.result))
            return MeasuredProcessOutput(
                state=new_state,
                result=I.federated_zip((current.result['samples'], new_state['samples'])),
                measurements=current.measurements,
            )

        return AggregationProcess(init_fn, next_fn)
