"""The `DPQuery` interface and its sum queries (TFF's ``aggregators/privacy/query.py``).

```
global_state = q.initial_global_state()
params       = q.derive_sample_params(global_state)            (server -> clients)
record       = q.preprocess_record(params, value)               (each client: clip, ...)
sample_state = sum of records                                   (an aggregation factory)
result, global_state, dp_event = q.get_noised_result(sample_state, global_state[, noise_seed])
```

Noise: TFF's `GaussianSumQuery` draws from an unseeded `tf.random` op,
which gives different bits on every call and stack. Ours also takes an
optional ``noise_seed`` (an int64 tensor of shape [2]) in
`get_noised_result`: given one, the noise comes from stateless random ops
seeded by it, the same bits everywhere. `needs_noise_seed()` says whether a
query uses one; composite queries split the seed among their parts.
`DifferentiallyPrivateFactory` keeps the seed in its state.
"""

from __future__ import annotations

import abc
import collections
from typing import Any, Optional

import dp_accounting
import tensorflow as tf

from simharness.aggregators import tensor_utils as tu

__all__ = [
    'DPQuery',
    'GaussianSumQuery',
    'NoPrivacyAverageQuery',
    'NoPrivacySumQuery',
    'NormalizedQuery',
    'SumAggregationDPQuery',
    'split_seed',
]


def split_seed(noise_seed: Optional[tf.Tensor], num: int) -> list:
    """`num` independent seeds derived from `noise_seed` (None: `num` Nones)."""
    if noise_seed is None:
        return [None] * num
    seeds = tf.random.experimental.stateless_split(tf.cast(noise_seed, tf.int64), num)
    return [seeds[i] for i in range(num)]


class DPQuery(metaclass=abc.ABCMeta):
    """A differentially private query mechanism (tensorflow_privacy's interface)."""

    def initial_global_state(self) -> Any:
        """The state kept across applications (default: none)."""
        return ()

    def derive_sample_params(self, global_state: Any) -> Any:
        """The parameters sent to the clients to process their records."""
        del global_state
        return ()

    @abc.abstractmethod
    def initial_sample_state(self, template: Any = None) -> Any:
        """The zero of the accumulation, shaped like `template`."""

    def preprocess_record(self, params: Any, record: Any) -> Any:
        """One client's record, processed (clipped, say) for aggregation."""
        del params
        return record

    @abc.abstractmethod
    def accumulate_preprocessed_record(self, sample_state: Any, preprocessed_record: Any) -> Any:
        """Adds a preprocessed record to the sample state."""

    def accumulate_record(self, params: Any, sample_state: Any, record: Any) -> Any:
        """Preprocesses and accumulates one record."""
        return self.accumulate_preprocessed_record(
            sample_state, self.preprocess_record(params, record)
        )

    @abc.abstractmethod
    def merge_sample_states(self, sample_state_1: Any, sample_state_2: Any) -> Any:
        """Merges two sample states."""

    @abc.abstractmethod
    def get_noised_result(self, sample_state: Any, global_state: Any) -> Any:
        """``(result, new_global_state, dp_event)`` from the accumulated records."""

    def derive_metrics(self, global_state: Any) -> Any:
        """Metrics of the (privatized) global state."""
        del global_state
        return collections.OrderedDict()

    def needs_noise_seed(self) -> bool:
        """Whether `get_noised_result` takes a ``noise_seed`` (ours; not in TFF)."""
        return False


def _zeros_like(arg: Any) -> tf.Tensor:
    try:
        arg = tf.convert_to_tensor(value=arg)
    except (TypeError, ValueError):
        pass
    return tf.zeros(arg.shape, arg.dtype)


def _safe_add(x: Any, y: Any) -> Any:
    return x if y is None else tf.add(x, y)


class SumAggregationDPQuery(DPQuery):
    """A `DPQuery` whose records are aggregated by summing."""

    def initial_sample_state(self, template: Any = None) -> Any:
        return tu.map_structure(_zeros_like, template)

    def accumulate_preprocessed_record(self, sample_state: Any, preprocessed_record: Any) -> Any:
        return tu.map_structure(_safe_add, sample_state, preprocessed_record)

    def merge_sample_states(self, sample_state_1: Any, sample_state_2: Any) -> Any:
        return tu.map_structure(tf.add, sample_state_1, sample_state_2)


class GaussianSumQuery(SumAggregationDPQuery):
    """Clips each record to an L2 norm and adds Gaussian noise to the sum.

    Args:
      l2_norm_clip: the clipping norm of each record's global L2 norm.
      stddev: the standard deviation of the noise added to the sum.
    """

    _GlobalState = collections.namedtuple('_GlobalState', ['l2_norm_clip', 'stddev'])

    def __init__(self, l2_norm_clip: float, stddev: float):
        self._l2_norm_clip = l2_norm_clip
        self._stddev = stddev

    def make_global_state(self, l2_norm_clip: Any, stddev: Any) -> Any:
        """A global state of these parameters (float32)."""
        return self._GlobalState(tf.cast(l2_norm_clip, tf.float32), tf.cast(stddev, tf.float32))

    def initial_global_state(self) -> Any:
        return self.make_global_state(self._l2_norm_clip, self._stddev)

    def derive_sample_params(self, global_state: Any) -> Any:
        return global_state.l2_norm_clip

    def preprocess_record_impl(self, params: Any, record: Any) -> Any:
        """``(clipped record, its L2 norm before clipping)``."""
        leaves = tu.flatten(record)
        clipped, norm = tf.clip_by_global_norm(leaves, params)
        return tu.pack_sequence_as(record, clipped), norm

    def preprocess_record(self, params: Any, record: Any) -> Any:
        return self.preprocess_record_impl(params, record)[0]

    def get_noised_result(
        self, sample_state: Any, global_state: Any, noise_seed: Optional[tf.Tensor] = None
    ) -> Any:
        leaves = tu.flatten(sample_state)
        if noise_seed is None:  # TFF's: an unseeded op, fresh noise on every call
            normal = tf.random_normal_initializer(stddev=global_state.stddev)
            noised = [v + tf.cast(normal(tf.shape(input=v)), v.dtype) for v in leaves]
        else:
            seeds = split_seed(noise_seed, max(len(leaves), 1))
            noised = [
                v
                + tf.cast(
                    tf.random.stateless_normal(
                        tf.shape(input=v), seed=s, stddev=global_state.stddev
                    ),
                    v.dtype,
                )
                for v, s in zip(leaves, seeds)
            ]
        result = tu.pack_sequence_as(sample_state, noised)
        noise_multiplier = global_state.stddev / global_state.l2_norm_clip
        return result, global_state, dp_accounting.GaussianDpEvent(noise_multiplier)

    def needs_noise_seed(self) -> bool:
        return True


class NoPrivacySumQuery(SumAggregationDPQuery):
    """Sums the records without clipping or noise."""

    def get_noised_result(self, sample_state: Any, global_state: Any) -> Any:
        return sample_state, global_state, dp_accounting.NonPrivateDpEvent()


class NoPrivacyAverageQuery(SumAggregationDPQuery):
    """Averages the (optionally weighted) records by their exact count; no privacy."""

    def initial_sample_state(self, template: Any = None) -> Any:
        return super().initial_sample_state(template), tf.constant(0.0)

    def preprocess_record(self, params: Any, record: Any, weight: Any = 1) -> Any:
        return tu.map_structure(lambda t: weight * t, record), tf.cast(weight, tf.float32)

    def accumulate_record(
        self, params: Any, sample_state: Any, record: Any, weight: Any = 1
    ) -> Any:
        return self.accumulate_preprocessed_record(
            sample_state, self.preprocess_record(params, record, weight)
        )

    def get_noised_result(self, sample_state: Any, global_state: Any) -> Any:
        sum_state, denominator = sample_state
        result = tu.map_structure(lambda t: t / denominator, sum_state)
        return result, global_state, dp_accounting.NonPrivateDpEvent()


class NormalizedQuery(SumAggregationDPQuery):
    """A `SumAggregationDPQuery` numerator divided by a fixed denominator.

    Args:
      numerator_query: a `SumAggregationDPQuery`.
      denominator: the (public) denominator, such as the expected number of
        records per round.
    """

    _GlobalState = collections.namedtuple('_GlobalState', ['numerator_state', 'denominator'])

    def __init__(self, numerator_query: SumAggregationDPQuery, denominator: Any):
        if not isinstance(numerator_query, SumAggregationDPQuery):
            raise TypeError(
                f'numerator_query must be a SumAggregationDPQuery, got '
                f'{type(numerator_query).__name__}'
            )
        self._numerator = numerator_query
        self._denominator = denominator

    def initial_global_state(self) -> Any:
        return self._GlobalState(
            self._numerator.initial_global_state(), tf.cast(self._denominator, tf.float32)
        )

    def derive_sample_params(self, global_state: Any) -> Any:
        return self._numerator.derive_sample_params(global_state.numerator_state)

    def initial_sample_state(self, template: Any = None) -> Any:
        return self._numerator.initial_sample_state(template)

    def preprocess_record(self, params: Any, record: Any) -> Any:
        return self._numerator.preprocess_record(params, record)

    def get_noised_result(
        self, sample_state: Any, global_state: Any, noise_seed: Optional[tf.Tensor] = None
    ) -> Any:
        seeded = {'noise_seed': noise_seed} if self._numerator.needs_noise_seed() else {}
        noised_sum, new_sum_state, event = self._numerator.get_noised_result(
            sample_state, global_state.numerator_state, **seeded
        )

        def normalize(v):
            return tf.truediv(v, tf.cast(global_state.denominator, v.dtype))

        return (
            tu.map_structure(normalize, noised_sum),
            self._GlobalState(new_sum_state, global_state.denominator),
            event,
        )

    def derive_metrics(self, global_state: Any) -> Any:
        return self._numerator.derive_metrics(global_state.numerator_state)

    def needs_noise_seed(self) -> bool:
        return self._numerator.needs_noise_seed()
