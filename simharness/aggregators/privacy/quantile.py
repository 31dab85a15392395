"""Quantile estimation queries (TFF's ``aggregators/privacy/quantile.py``).

The algorithm of Andrew et al. 2021 (https://arxiv.org/abs/1905.03871):
```
below  = mean over clients of [value <= estimate]   (noised, or exact for no privacy)
update = learning_rate * (clip01(below) - target_quantile)
estimate <- estimate * exp(-update)   (geometric)   |   estimate - update   (arithmetic)
```
`QuantileAdaptiveClipSumQuery` is a Gaussian sum whose clip follows that
estimate of the quantile of the records' norms. `TreeQuantileEstimatorQuery`
privatizes the below-estimate fraction with a `tree.TreeResidualSumQuery`;
`QAdaClipTreeResSumQuery` (DP-FTRL with adaptive clipping) sums with
tree-aggregated noise and adopts the estimated clip only at `reset_state`
(called by a `tree.RestartQuery`).

Differences from TFF: `get_noised_result` takes our optional ``noise_seed``
(see `query`). The tree queries draw their noise from their own seeded
generators, so `QAdaClipTreeResSumQuery.needs_noise_seed()` is False; given
an int ``noise_seed`` it also seeds the below-estimate tree (with
``noise_seed + 2**31``; TFF seeds that one from the clock), so its whole
noise is reproducible.
"""

from __future__ import annotations

import abc
import collections
from typing import Any, Optional

import dp_accounting
import tensorflow as tf

from simharness.aggregators.privacy import query
from simharness.aggregators.privacy import tree
from simharness.errors import SimharnessValueError

__all__ = [
    'NoPrivacyQuantileEstimatorQuery',
    'QAdaClipTreeResSumQuery',
    'QuantileAdaptiveClipSumQuery',
    'QuantileEstimatorQuery',
    'TreeQuantileEstimatorQuery',
]

#: Offset of the below-estimate tree's seed from the sum tree's (ours).
_BELOW_ESTIMATE_SEED_OFFSET = 2**31


class QuantileEstimatorQuery(query.SumAggregationDPQuery):
    """Estimates a target quantile of a univariate distribution, privately.

    Args:
      initial_estimate: the initial estimate of the quantile.
      target_quantile: the quantile in [0, 1] to estimate.
      learning_rate: the learning rate (>= 0) of the estimate.
      below_estimate_stddev: the noise stddev on the count of records below
        the estimate (Andrew et al. suggest expected_num_records / 20).
      expected_num_records: the expected number of records per round.
      geometric_update: update the estimate geometrically (for positive
        values such as norms).

    Raises:
      ValueError: `target_quantile` outside [0, 1] or a negative
        `learning_rate`.
    """

    _GlobalState = collections.namedtuple(
        '_GlobalState',
        ['current_estimate', 'target_quantile', 'learning_rate', 'below_estimate_state'],
    )
    _SampleParams = collections.namedtuple(
        '_SampleParams', ['current_estimate', 'below_estimate_params']
    )

    def __init__(
        self,
        initial_estimate: float,
        target_quantile: float,
        learning_rate: float,
        below_estimate_stddev: Optional[float],
        expected_num_records: Optional[float],
        geometric_update: bool = False,
    ):
        if target_quantile < 0 or target_quantile > 1:
            raise SimharnessValueError(
                f'`target_quantile` must be between 0 and 1, got {target_quantile}.'
            )
        if learning_rate < 0:
            raise SimharnessValueError(f'`learning_rate` must be non-negative, got {learning_rate}')
        self._initial_estimate = initial_estimate
        self._target_quantile = target_quantile
        self._learning_rate = learning_rate
        self._below_estimate_query = self._construct_below_estimate_query(
            below_estimate_stddev, expected_num_records
        )
        self._geometric_update = geometric_update

    def _construct_below_estimate_query(
        self, below_estimate_stddev: Any, expected_num_records: Any
    ) -> query.SumAggregationDPQuery:
        return query.NormalizedQuery(
            query.GaussianSumQuery(l2_norm_clip=0.5, stddev=below_estimate_stddev),
            denominator=expected_num_records,
        )

    def initial_global_state(self) -> Any:
        return self._GlobalState(
            tf.cast(self._initial_estimate, tf.float32),
            tf.cast(self._target_quantile, tf.float32),
            tf.cast(self._learning_rate, tf.float32),
            self._below_estimate_query.initial_global_state(),
        )

    def derive_sample_params(self, global_state: Any) -> Any:
        return self._SampleParams(
            global_state.current_estimate,
            self._below_estimate_query.derive_sample_params(global_state.below_estimate_state),
        )

    def initial_sample_state(self, template: Any = None) -> Any:
        del template
        return self._below_estimate_query.initial_sample_state(0.0)

    def preprocess_record(self, params: Any, record: Any) -> Any:
        tf.debugging.assert_scalar(record)
        below = tf.cast(record <= params.current_estimate, tf.float32) - 0.5
        return self._below_estimate_query.preprocess_record(params.below_estimate_params, below)

    def get_noised_result(
        self, sample_state: Any, global_state: Any, noise_seed: Optional[tf.Tensor] = None
    ) -> Any:
        seeded = {'noise_seed': noise_seed} if self._below_estimate_query.needs_noise_seed() else {}
        below_result, new_below_state, event = self._below_estimate_query.get_noised_result(
            sample_state, global_state.below_estimate_state, **seeded
        )
        below_estimate = tf.minimum(1.0, tf.maximum(0.0, below_result + 0.5))
        update = global_state.learning_rate * (below_estimate - global_state.target_quantile)
        if self._geometric_update:
            new_estimate = global_state.current_estimate * tf.math.exp(-update)
        else:
            new_estimate = global_state.current_estimate - update
        new_global_state = global_state._replace(
            current_estimate=new_estimate, below_estimate_state=new_below_state
        )
        return new_estimate, new_global_state, event

    def derive_metrics(self, global_state: Any) -> Any:
        return collections.OrderedDict(estimate=global_state.current_estimate)

    def needs_noise_seed(self) -> bool:
        return self._below_estimate_query.needs_noise_seed()


class NoPrivacyQuantileEstimatorQuery(QuantileEstimatorQuery):
    """A `QuantileEstimatorQuery` with the exact fraction below the estimate (no privacy)."""

    def __init__(
        self,
        initial_estimate: float,
        target_quantile: float,
        learning_rate: float,
        geometric_update: bool = False,
    ):
        super().__init__(
            initial_estimate,
            target_quantile,
            learning_rate,
            below_estimate_stddev=None,
            expected_num_records=None,
            geometric_update=geometric_update,
        )

    def _construct_below_estimate_query(
        self, below_estimate_stddev: Any, expected_num_records: Any
    ) -> query.SumAggregationDPQuery:
        del below_estimate_stddev, expected_num_records
        return query.NoPrivacyAverageQuery()


class TreeQuantileEstimatorQuery(QuantileEstimatorQuery):
    """A `QuantileEstimatorQuery` whose below-estimate fraction is a tree-aggregated sum.

    The noised cumulative sum of the below-estimate indicators (a
    `tree.TreeResidualSumQuery`, clip 0.5, noise multiplier ``2 *
    below_estimate_stddev``) over `expected_num_records`; `reset_state`
    restarts that tree. Args as `QuantileEstimatorQuery`, plus ``noise_seed``
    (ours): the int seed of the tree's noise (None: from the clock, as TFF).
    """

    def __init__(
        self,
        initial_estimate: float,
        target_quantile: float,
        learning_rate: float,
        below_estimate_stddev: Optional[float],
        expected_num_records: Optional[float],
        geometric_update: bool = False,
        noise_seed: Optional[int] = None,
    ):
        self._tree_noise_seed = noise_seed
        super().__init__(
            initial_estimate,
            target_quantile,
            learning_rate,
            below_estimate_stddev,
            expected_num_records,
            geometric_update,
        )

    def _construct_below_estimate_query(
        self, below_estimate_stddev: Any, expected_num_records: Any
    ) -> query.SumAggregationDPQuery:
        # Clip 0.5: the records are the indicators shifted to +-0.5.
        sum_query = tree.TreeResidualSumQuery.build_l2_gaussian_query(
            clip_norm=0.5,
            noise_multiplier=2 * below_estimate_stddev,
            record_specs=tf.TensorSpec([]),
            noise_seed=self._tree_noise_seed,
        )
        self._below_estimate_tree = sum_query  # the numerator, which `reset_state` restarts
        return query.NormalizedQuery(sum_query, denominator=expected_num_records)

    def reset_state(self, noised_results: Any, global_state: Any) -> Any:
        """The state with the below-estimate tree restarted."""
        below_state = global_state.below_estimate_state
        new_numerator_state = self._below_estimate_tree.reset_state(
            noised_results, below_state.numerator_state
        )
        return global_state._replace(
            below_estimate_state=below_state._replace(numerator_state=new_numerator_state)
        )


class _AdaptiveClipSum(query.SumAggregationDPQuery):
    """What both adaptive-clip sums share: a sum query (`_sum_query`) and an estimator of
    a quantile of the record norms (`_quantile_estimator_query`), states side by side;
    a subclass says how its sum clips a record (`_clip`: the clipped record and its norm)."""

    _GlobalState = collections.namedtuple(
        '_GlobalState', ['noise_multiplier', 'sum_state', 'quantile_estimator_state']
    )
    _SampleState = collections.namedtuple('_SampleState', ['sum_state', 'quantile_estimator_state'])
    _SampleParams = collections.namedtuple(
        '_SampleParams', ['sum_params', 'quantile_estimator_params']
    )

    _noise_multiplier: float
    _sum_query: Any
    _quantile_estimator_query: Any

    def initial_global_state(self) -> Any:
        return self._GlobalState(
            tf.cast(self._noise_multiplier, tf.float32),
            self._sum_query.initial_global_state(),
            self._quantile_estimator_query.initial_global_state(),
        )

    def derive_sample_params(self, global_state: Any) -> Any:
        return self._SampleParams(
            self._sum_query.derive_sample_params(global_state.sum_state),
            self._quantile_estimator_query.derive_sample_params(
                global_state.quantile_estimator_state
            ),
        )

    def initial_sample_state(self, template: Any = None) -> Any:
        return self._SampleState(
            self._sum_query.initial_sample_state(template),
            self._quantile_estimator_query.initial_sample_state(),
        )

    @abc.abstractmethod
    def _clip(self, params: Any, record: Any) -> Any:
        """``(clipped record, its global norm)`` under the sum's sample params."""

    def preprocess_record(self, params: Any, record: Any) -> Any:
        clipped_record, global_norm = self._clip(params.sum_params, record)
        below_estimate = self._quantile_estimator_query.preprocess_record(
            params.quantile_estimator_params, global_norm
        )
        return self._SampleState(clipped_record, below_estimate)


class QuantileAdaptiveClipSumQuery(_AdaptiveClipSum):
    """A Gaussian sum query whose clip adapts to a quantile of the record norms.

    Args:
      initial_l2_norm_clip: the initial clipping norm.
      noise_multiplier: the noise stddev is this times the current clip.
      target_unclipped_quantile: the quantile of records to leave unclipped.
      learning_rate: the learning rate of the clip.
      clipped_count_stddev: the noise stddev on the clipped count.
      expected_num_records: the expected number of records per round.
      geometric_update: update the clip geometrically (recommended).
    """

    def __init__(
        self,
        initial_l2_norm_clip: float,
        noise_multiplier: float,
        target_unclipped_quantile: float,
        learning_rate: float,
        clipped_count_stddev: float,
        expected_num_records: float,
        geometric_update: bool = True,
    ):
        self._noise_multiplier = noise_multiplier
        self._quantile_estimator_query = QuantileEstimatorQuery(
            initial_l2_norm_clip,
            target_unclipped_quantile,
            learning_rate,
            clipped_count_stddev,
            expected_num_records,
            geometric_update,
        )
        self._sum_query = query.GaussianSumQuery(
            initial_l2_norm_clip, noise_multiplier * initial_l2_norm_clip
        )

    def _clip(self, params: Any, record: Any) -> Any:
        return self._sum_query.preprocess_record_impl(params, record)

    def get_noised_result(
        self, sample_state: Any, global_state: Any, noise_seed: Optional[tf.Tensor] = None
    ) -> Any:
        sum_seed, quantile_seed = query.split_seed(noise_seed, 2)
        noised_vectors, _, sum_event = self._sum_query.get_noised_result(
            sample_state.sum_state, global_state.sum_state, noise_seed=sum_seed
        )
        seeded = (
            {'noise_seed': quantile_seed}
            if self._quantile_estimator_query.needs_noise_seed()
            else {}
        )
        new_clip, new_quantile_state, quantile_event = (
            self._quantile_estimator_query.get_noised_result(
                sample_state.quantile_estimator_state,
                global_state.quantile_estimator_state,
                **seeded,
            )
        )
        new_clip = tf.maximum(new_clip, 0.0)
        new_sum_state = self._sum_query.make_global_state(
            l2_norm_clip=new_clip, stddev=new_clip * global_state.noise_multiplier
        )
        new_global_state = self._GlobalState(
            global_state.noise_multiplier, new_sum_state, new_quantile_state
        )
        event = dp_accounting.ComposedDpEvent(events=[sum_event, quantile_event])
        return noised_vectors, new_global_state, event

    def derive_metrics(self, global_state: Any) -> Any:
        return collections.OrderedDict(clip=global_state.sum_state.l2_norm_clip)

    def needs_noise_seed(self) -> bool:
        return True


class QAdaClipTreeResSumQuery(_AdaptiveClipSum):
    """Tree-aggregated (DP-FTRL) sums with a clip adapted to a quantile of the norms.

    The sum is a `tree.TreeResidualSumQuery`; the quantile is estimated every
    call (`TreeQuantileEstimatorQuery`) but the clip (and the noise stddev,
    ``clip * noise_multiplier``) only change at `reset_state`, which also
    restarts the trees (compose with `tree.RestartQuery`).

    Args: as `QuantileAdaptiveClipSumQuery`, plus `record_specs` (the
    ``tf.TensorSpec``s of a record) and `noise_seed` (the int seed of the
    tree noise; None: from the clock).
    """

    def __init__(
        self,
        initial_l2_norm_clip: float,
        noise_multiplier: float,
        record_specs: Any,
        target_unclipped_quantile: float,
        learning_rate: float,
        clipped_count_stddev: float,
        expected_num_records: float,
        geometric_update: bool = True,
        noise_seed: Optional[int] = None,
    ):
        self._noise_multiplier = noise_multiplier
        below_seed = None if noise_seed is None else noise_seed + _BELOW_ESTIMATE_SEED_OFFSET
        self._quantile_estimator_query = TreeQuantileEstimatorQuery(
            initial_l2_norm_clip,
            target_unclipped_quantile,
            learning_rate,
            clipped_count_stddev,
            expected_num_records,
            geometric_update,
            noise_seed=below_seed,
        )
        self._sum_query = tree.TreeResidualSumQuery.build_l2_gaussian_query(
            initial_l2_norm_clip,
            noise_multiplier,
            record_specs,
            noise_seed=noise_seed,
            use_efficient=True,
        )

    def _clip(self, params: Any, record: Any) -> Any:
        return self._sum_query.preprocess_record_l2_impl(params, record)

    def get_noised_result(
        self, sample_state: Any, global_state: Any, noise_seed: Optional[tf.Tensor] = None
    ) -> Any:
        # Neither part uses `noise_seed` (tree noise is seeded by its state);
        # it is passed on to the estimator if that one ever does.
        noised_vectors, sum_state, sum_event = self._sum_query.get_noised_result(
            sample_state.sum_state, global_state.sum_state
        )
        seeded = (
            {'noise_seed': noise_seed} if self._quantile_estimator_query.needs_noise_seed() else {}
        )
        _, quantile_state, quantile_event = self._quantile_estimator_query.get_noised_result(
            sample_state.quantile_estimator_state, global_state.quantile_estimator_state, **seeded
        )
        new_global_state = self._GlobalState(
            global_state.noise_multiplier, sum_state, quantile_state
        )
        event = dp_accounting.ComposedDpEvent(events=[sum_event, quantile_event])
        return noised_vectors, new_global_state, event

    def reset_state(self, noised_results: Any, global_state: Any) -> Any:
        """The state with restarted trees and the clip (and stddev) set to the estimate."""
        new_clip = tf.math.maximum(global_state.quantile_estimator_state.current_estimate, 0.0)
        sum_state = self._sum_query.reset_l2_clip_gaussian_noise(
            global_state.sum_state,
            clip_norm=new_clip,
            stddev=new_clip * global_state.noise_multiplier,
        )
        sum_state = self._sum_query.reset_state(noised_results, sum_state)
        quantile_state = self._quantile_estimator_query.reset_state(
            noised_results, global_state.quantile_estimator_state
        )
        return global_state._replace(sum_state=sum_state, quantile_estimator_state=quantile_state)

    def derive_metrics(self, global_state: Any) -> Any:
        return collections.OrderedDict(
            current_clip=global_state.sum_state.clip_value,
            estimate_clip=global_state.quantile_estimator_state.current_estimate,
        )

    def needs_noise_seed(self) -> bool:
        return self._quantile_estimator_query.needs_noise_seed()
