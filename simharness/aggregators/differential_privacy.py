"""TFF's `DifferentiallyPrivateFactory` (``aggregators/differential_privacy.py``).

```
state = DPAggregatorState(query_state, agg_state, dp_event, is_init_state, noise_seed)@SERVER
next:  params = derive_sample_params(query_state)          broadcast
       record = preprocess_record(params, value)           clients (clip)
       sum    = record_aggregation_factory(record)         (SumFactory)
       result, query_state', dp_event = get_noised_result(sum, query_state, noise_seed)
measurements <dp_query_metrics=derive_metrics(query_state'), dp=inner measurements>
```
`gaussian_fixed(noise_multiplier, clients_per_round, clip)` and
`gaussian_adaptive(...)` build TFF's queries with TFF's defaults, noise
split (`adaptive_clip_noise_params`) and limits (noise_multiplier <
2 * clipped_count_stddev).

Differences from TFF: the state has a fifth field, `noise_seed` (int64[2]):
the noise comes from stateless random ops seeded by it, and each `next`
moves it on, so the noise is reproducible from the state and the same bits
on every stack (TFF draws unseeded noise). `noise_seed=None` (the default)
starts from a fresh random seed at each `initialize`; an int fixes it.
`tree_aggregation(...)` (DP-FTRL: tree-aggregated noise, `privacy.tree`'s
`TreeResidualSumQuery`) is TFF's; its noise comes from the tree's own seeded
generator (`noise_seed`, as in TFF). `tree_adaptive(...)` is TFF's too: a
`privacy.quantile.QAdaClipTreeResSumQuery` in a `RestartQuery` that restarts
the tree and adopts the estimated clip after `restart_warmup` rounds, then
every `restart_frequency`; its noise comes from the trees' seeded generators
(an int `noise_seed` seeds both trees; TFF seeds the clipped-count tree from
the clock).
"""

from __future__ import annotations

import collections
import logging
from typing import Any, NamedTuple, Optional, Tuple
import warnings

import dp_accounting
import numpy as np

from simharness.aggregators import factory, sum_factory
from simharness.aggregators import quantile_estimation as qe
from simharness.aggregators import tensor_utils as tu
from simharness.aggregators.privacy import quantile as quantile_query
from simharness.aggregators.privacy import query as dp_query
from simharness.aggregators.privacy import tree as tree_query
from simharness.core import intrinsics
from simharness.core import types as T
from simharness.core.computation import federated_computation, tf_computation
from simharness.errors import SimharnessTypeError, SimharnessValueError
from simharness.templates import AggregationProcess, MeasuredProcessOutput

__all__ = [
    'DPAggregatorState',
    'DifferentiallyPrivateFactory',
    'ExtractingDpEventFromInitialStateError',
    'adaptive_clip_noise_params',
    'extract_dp_event_from_state',
]

_LOG = logging.getLogger(__name__)

#: What `DifferentiallyPrivateFactory` calls on its query.
_QUERY_METHODS = (
    'initial_global_state',
    'derive_sample_params',
    'initial_sample_state',
    'preprocess_record',
    'get_noised_result',
    'derive_metrics',
)


class ExtractingDpEventFromInitialStateError(SimharnessValueError):
    """`extract_dp_event_from_state` was given the state `initialize` returned."""


class DPAggregatorState(NamedTuple):
    """The state of a `DifferentiallyPrivateFactory`'s process (`noise_seed` is ours)."""

    query_state: Any
    agg_state: Any
    dp_event: Any
    is_init_state: Any
    noise_seed: Any


def adaptive_clip_noise_params(
    noise_multiplier: float,
    expected_clients_per_round: float,
    clipped_count_stddev: Optional[float] = None,
) -> Tuple[float, float]:
    """The value noise multiplier and clipped-count stddev of adaptive clipping.

    Part of the privacy budget goes to the noised clipped count, so the
    values get a larger noise multiplier:
    ``z_value = (z ** -2 - (2 * clipped_count_stddev) ** -2) ** -0.5``.

    Args:
      noise_multiplier: the total (effective) noise multiplier z.
      expected_clients_per_round: the expected number of clients per round.
      clipped_count_stddev: the count's noise stddev (default: 0.05 *
        expected_clients_per_round when z > 0, else 0).

    Returns:
      ``(value_noise_multiplier, clipped_count_stddev)``.

    Raises:
      ValueError: ``noise_multiplier >= 2 * clipped_count_stddev``.
    """
    if noise_multiplier > 0.0:
        if clipped_count_stddev is None:
            clipped_count_stddev = 0.05 * expected_clients_per_round
        if noise_multiplier >= 2 * clipped_count_stddev:
            raise SimharnessValueError(
                f'clipped_count_stddev = {clipped_count_stddev} (defaults to 0.05 * '
                '`expected_clients_per_round` if not specified) is too low to achieve the '
                f'desired effective `noise_multiplier` ({noise_multiplier}). You must either '
                'increase `clipped_count_stddev` or decrease `noise_multiplier`.'
            )
        value_noise_multiplier = (noise_multiplier**-2 - (2 * clipped_count_stddev) ** -2) ** -0.5
        added = value_noise_multiplier / noise_multiplier
        if added >= 2:
            warnings.warn(
                f'A significant amount of noise ({added:.2f}x) has to be added for record '
                'aggregation to achieve the desired effective `noise_multiplier` '
                f'({noise_multiplier}). If you are manually specifying `clipped_count_stddev` '
                'you may want to increase it. Or you may need more '
                '`expected_clients_per_round`.'
            )
    else:
        if clipped_count_stddev is None:
            clipped_count_stddev = 0.0
        value_noise_multiplier = 0.0
    return value_noise_multiplier, clipped_count_stddev


def _check_adaptive(
    noise_multiplier: float,
    clients_per_round: float,
    initial_l2_norm_clip: float,
    target_unclipped_quantile: float,
    learning_rate: float,
    learning_rate_name: str,
) -> float:
    """The checks of the adaptive-clip constructors; `clients_per_round` as a float."""
    if isinstance(clients_per_round, int):
        clients_per_round = float(clients_per_round)
    factory.check_float_nonnegative(noise_multiplier, 'noise_multiplier')
    factory.check_float_positive(clients_per_round, 'clients_per_round')
    factory.check_float_positive(initial_l2_norm_clip, 'initial_l2_norm_clip')
    factory.check_float_probability(target_unclipped_quantile, 'target_unclipped_quantile')
    factory.check_float_nonnegative(learning_rate, learning_rate_name)
    return clients_per_round


class DifferentiallyPrivateFactory(factory.UnweightedAggregationFactory):
    """Aggregates client values through a `DPQuery` (clipping, sum, noise).

    Args:
      query: a `privacy.query.DPQuery` (a sum-aggregated query).
      record_aggregation_factory: sums the preprocessed records (default
        `SumFactory`); it must not increase the query's sensitivity.
      noise_seed: the seed of the noise (ours, not TFF's); None: a fresh
        seed at each `initialize`.

    Raises:
      TypeError: `record_aggregation_factory` is not an
        `UnweightedAggregationFactory`.
    """

    @classmethod
    def gaussian_adaptive(
        cls,
        noise_multiplier: float,
        clients_per_round: float,
        initial_l2_norm_clip: float = 0.1,
        target_unclipped_quantile: float = 0.5,
        learning_rate: float = 0.2,
        clipped_count_stddev: Optional[float] = None,
        noise_seed: Optional[int] = None,
    ) -> 'DifferentiallyPrivateFactory':
        """Adaptive clipping (to a quantile of the norms) and Gaussian noise.

        Args:
          noise_multiplier: the effective total noise multiplier (>= 0).
          clients_per_round: the expected clients per round (> 0).
          initial_l2_norm_clip: the initial clip (> 0).
          target_unclipped_quantile: the quantile the clip adapts to.
          learning_rate: the clip's learning rate (>= 0).
          clipped_count_stddev: the clipped count's noise (default 0.05 *
            clients_per_round, 0 without noise).
          noise_seed: see the class.
        """
        clients_per_round = _check_adaptive(
            noise_multiplier,
            clients_per_round,
            initial_l2_norm_clip,
            target_unclipped_quantile,
            learning_rate,
            'learning_rate',
        )
        if clipped_count_stddev is not None:
            factory.check_float_nonnegative(clipped_count_stddev, 'clipped_count_stddev')
        value_noise_multiplier, clipped_count_stddev = adaptive_clip_noise_params(
            noise_multiplier, clients_per_round, clipped_count_stddev
        )
        _LOG.info(
            'Adaptive clipping, value noise multiplier: %s -> %s, clipped_count_stddev: %s',
            noise_multiplier,
            value_noise_multiplier,
            clipped_count_stddev,
        )
        query = quantile_query.QuantileAdaptiveClipSumQuery(
            initial_l2_norm_clip=initial_l2_norm_clip,
            noise_multiplier=value_noise_multiplier,
            target_unclipped_quantile=target_unclipped_quantile,
            learning_rate=learning_rate,
            clipped_count_stddev=clipped_count_stddev,
            expected_num_records=clients_per_round,
            geometric_update=True,
        )
        return cls(
            dp_query.NormalizedQuery(query, denominator=clients_per_round), noise_seed=noise_seed
        )

    @classmethod
    def gaussian_fixed(
        cls,
        noise_multiplier: float,
        clients_per_round: float,
        clip: float,
        noise_seed: Optional[int] = None,
    ) -> 'DifferentiallyPrivateFactory':
        """Fixed clipping at `clip` and Gaussian noise of stddev ``clip * noise_multiplier``.

        The noised sum is divided by `clients_per_round`.
        """
        if isinstance(clients_per_round, int):
            clients_per_round = float(clients_per_round)
        factory.check_float_nonnegative(noise_multiplier, 'noise_multiplier')
        factory.check_float_positive(clients_per_round, 'clients_per_round')
        factory.check_float_positive(clip, 'clip')
        query = dp_query.NormalizedQuery(
            dp_query.GaussianSumQuery(l2_norm_clip=clip, stddev=clip * noise_multiplier),
            denominator=clients_per_round,
        )
        return cls(query, noise_seed=noise_seed)

    @classmethod
    def tree_aggregation(
        cls,
        noise_multiplier: float,
        clients_per_round: float,
        l2_norm_clip: float,
        record_specs: Any,
        noise_seed: Optional[int] = None,
        use_efficient: bool = True,
        record_aggregation_factory: Optional[factory.UnweightedAggregationFactory] = None,
    ) -> 'DifferentiallyPrivateFactory':
        """Clipping at `l2_norm_clip` and tree-aggregated Gaussian noise (DP-FTRL).

        Each tree node's noise has stddev ``l2_norm_clip * noise_multiplier``; a
        round's result is the residual of the noised cumulative sums (before the
        division by `clients_per_round`). `record_specs`: the ``tf.TensorSpec``s
        of a client's value; `use_efficient`: the efficient tree aggregation of
        "Efficient Use of Differentially Private Binary Trees".
        """
        if isinstance(clients_per_round, int):
            clients_per_round = float(clients_per_round)
        factory.check_float_nonnegative(noise_multiplier, 'noise_multiplier')
        factory.check_float_positive(clients_per_round, 'clients_per_round')
        factory.check_float_positive(l2_norm_clip, 'l2_norm_clip')
        sum_query = tree_query.TreeResidualSumQuery.build_l2_gaussian_query(
            l2_norm_clip,
            noise_multiplier,
            record_specs,
            noise_seed=noise_seed,
            use_efficient=use_efficient,
        )
        return cls(
            dp_query.NormalizedQuery(sum_query, denominator=clients_per_round),
            record_aggregation_factory=record_aggregation_factory,
        )

    @classmethod
    def tree_adaptive(
        cls,
        noise_multiplier: float,
        clients_per_round: float,
        record_specs: Any,
        initial_l2_norm_clip: float = 0.1,
        restart_warmup: Optional[int] = 128,
        restart_frequency: int = 1024,
        target_unclipped_quantile: float = 0.5,
        clip_learning_rate: float = 0.2,
        clipped_count_stddev: Optional[float] = None,
        noise_seed: Optional[int] = None,
    ) -> 'DifferentiallyPrivateFactory':
        """Adaptive clipping and tree-aggregated Gaussian noise (DP-FTRL).

        As `tree_aggregation`, but the clip follows the
        `target_unclipped_quantile` of the norms (learning rate
        `clip_learning_rate`, geometric) and is adopted, with a restarted
        tree, after `restart_warmup` calls of `next` and then every
        `restart_frequency`. `noise_multiplier` is the effective one (part
        goes to the clipped count, see `adaptive_clip_noise_params`);
        `clipped_count_stddev` defaults to ``clients_per_round / 20``.
        """
        clients_per_round = _check_adaptive(
            noise_multiplier,
            clients_per_round,
            initial_l2_norm_clip,
            target_unclipped_quantile,
            clip_learning_rate,
            'clip_learning_rate',
        )
        if clipped_count_stddev is None:
            clipped_count_stddev = clients_per_round / 20.0
        else:
            factory.check_float_nonnegative(clipped_count_stddev, 'clipped_count_stddev')
        value_noise_multiplier, clipped_count_stddev = adaptive_clip_noise_params(
            noise_multiplier, clients_per_round, clipped_count_stddev
        )
        _LOG.info(
            'Adaptive clipping, value noise multiplier: %s -> %s, clipped_count_stddev: %s',
            noise_multiplier,
            value_noise_multiplier,
            clipped_count_stddev,
        )
        sum_query = quantile_query.QAdaClipTreeResSumQuery(
            initial_l2_norm_clip,
            value_noise_multiplier,
            record_specs,
            target_unclipped_quantile,
            clip_learning_rate,
            clipped_count_stddev,
            clients_per_round,
            geometric_update=True,
            noise_seed=noise_seed,
        )
        restart_indicator = tree_query.PeriodicRoundRestartIndicator(
            period=restart_frequency, warmup=restart_warmup
        )
        sum_query = tree_query.RestartQuery(sum_query, restart_indicator)
        return cls(dp_query.NormalizedQuery(sum_query, denominator=clients_per_round))

    def __init__(
        self,
        query: dp_query.DPQuery,
        record_aggregation_factory: Optional[factory.UnweightedAggregationFactory] = None,
        noise_seed: Optional[int] = None,
    ):
        missing = [m for m in _QUERY_METHODS if not callable(getattr(query, m, None))]
        if missing:  # duck-typed, as TFF (a tensorflow_privacy query works too)
            raise SimharnessTypeError(
                f'query must be a DPQuery (privacy.query.DPQuery or a tensorflow_privacy '
                f'query), got {query!r} of type {type(query).__name__} without {missing}',
                expected=dp_query.DPQuery,
                actual=type(query),
            )
        if record_aggregation_factory is None:
            record_aggregation_factory = sum_factory.SumFactory()
        factory.check_factory(
            record_aggregation_factory,
            factory.UnweightedAggregationFactory,
            'record_aggregation_factory',
        )
        self._query = query
        self._record_aggregation_factory = record_aggregation_factory
        self._seed_fn = qe.initial_noise_seed(noise_seed)

    def create(self, value_type: factory.ValueType) -> AggregationProcess:
        factory.check_value_type(value_type)
        q = self._query
        seeded = bool(getattr(q, 'needs_noise_seed', lambda: False)())
        initial_state_fn = tf_computation(q.initial_global_state)
        specs = tu.tensor_specs(value_type)
        sample_state_fn = tf_computation(lambda: q.initial_sample_state(specs))
        query_state_type = initial_state_fn.type_signature.result
        derive_sample_params = tf_computation(q.derive_sample_params, query_state_type)
        get_record = tf_computation(
            q.preprocess_record, derive_sample_params.type_signature.result, value_type
        )
        record_agg_process = self._record_aggregation_factory.create(
            get_record.type_signature.result
        )
        agg_next_result: Any = record_agg_process.next.type_signature.result
        agg_output_type = agg_next_result.result.member
        seed_type = T.TensorType(np.int64, [2])

        @tf_computation(agg_output_type, query_state_type, seed_type)
        def get_noised_result(sample_state, global_state, seed):
            this_call, next_seed = qe.next_noise_seed(seed)
            kwargs = {'noise_seed': this_call} if seeded else {}
            result, new_state, event = q.get_noised_result(sample_state, global_state, **kwargs)
            return result, new_state, event.to_named_tuple(), next_seed

        derive_metrics = tf_computation(q.derive_metrics, query_state_type)
        seed_fn = self._seed_fn

        @federated_computation()
        def init_fn():
            query_state = intrinsics.federated_eval(initial_state_fn, T.SERVER)
            sample_state = intrinsics.federated_eval(sample_state_fn, T.SERVER)
            seed = intrinsics.federated_eval(seed_fn, T.SERVER)
            _, _, dp_event, _ = intrinsics.federated_map(
                get_noised_result, (sample_state, query_state, seed)
            )
            return intrinsics.federated_zip(
                DPAggregatorState(
                    query_state,
                    record_agg_process.initialize(),
                    dp_event,
                    intrinsics.federated_value(True, T.SERVER),
                    seed,
                )
            )

        @federated_computation(
            init_fn.type_signature.result, T.FederatedType(value_type, T.CLIENTS)
        )
        def next_fn(state, value):
            query_state, agg_state, _, _, seed = state
            params = intrinsics.federated_broadcast(
                intrinsics.federated_map(derive_sample_params, query_state)
            )
            record = intrinsics.federated_map(get_record, (params, value))
            agg_output = record_agg_process.next(agg_state, record)
            result, new_query_state, dp_event, new_seed = intrinsics.federated_map(
                get_noised_result, (agg_output.result, query_state, seed)
            )
            new_state = DPAggregatorState(
                new_query_state,
                agg_output.state,
                dp_event,
                intrinsics.federated_value(False, T.SERVER),
                new_seed,
            )
            measurements = collections.OrderedDict(
                dp_query_metrics=intrinsics.federated_map(derive_metrics, new_query_state),
                dp=agg_output.measurements,
            )
            return MeasuredProcessOutput(
                intrinsics.federated_zip(new_state), result, intrinsics.federated_zip(measurements)
            )

        return AggregationProcess(init_fn, next_fn)


def extract_dp_event_from_state(state: DPAggregatorState) -> dp_accounting.DpEvent:
    """The `DpEvent` of the `next` call that produced `state` (for a privacy ledger).

    Raises:
      ExtractingDpEventFromInitialStateError: `state` came from `initialize`
        (its event is a placeholder).
    """
    if state.is_init_state:
        raise ExtractingDpEventFromInitialStateError(
            'State was generated by a call to process.initialize(), whose DPEvent is a '
            'placeholder. extract_dp_event_from_state only accepts states from calls to '
            'process.next().'
        )
    return dp_accounting.DpEvent.from_named_tuple(state.dp_event)
