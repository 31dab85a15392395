"""TFF's tree-aggregation `DPQuery`s (``aggregators/privacy/tree.py``).

Range sums: `TreeRangeSumQuery` builds a complete ``arity``-ary tree of sums
over a histogram (the leaves; padded with zeros up to a power of ``arity``),
hands the tree, flattened layer by layer from the root, to an inner
`SumAggregationDPQuery` (which clips and noises it), and returns the noised
tree as a ``tf.RaggedTensor`` (``tree[layer][index]``). Any range sum is then
the sum of O(log n) nodes. ``build_central_gaussian_query`` uses a
`GaussianSumQuery` as the inner query.

Streaming sums (DP-FTRL): `TreeCumulativeSumQuery` releases the cumulative
sums s_i = x_0 + ... + x_i of the per-call sums x_i with tree-aggregated
noise (O(log T) noise nodes, Dwork et al. 2010; or Honaker's
`EfficientTreeAggregator`); `TreeResidualSumQuery` releases the differences
of consecutive noised cumulative sums, a drop-in for a sum query.
`RestartQuery` with a `PeriodicRoundRestartIndicator` restarts their trees
periodically. The noise nodes come from a `ValueGenerator`
(`GaussianNoiseGenerator`: stateless normal draws seeded by a counter in the
state; or any no-arg function).

Difference from TFF: `TreeRangeSumQuery.get_noised_result` takes our
optional ``noise_seed`` (see `query`) and passes it to the inner query when
that one uses it.
"""

from __future__ import annotations

import abc
import collections
import math
from typing import Any, Callable, NamedTuple, Optional, Union

import dp_accounting
import tensorflow as tf

from simharness.aggregators import tensor_utils as tu
from simharness.aggregators.privacy import query
from simharness.core import types as T

__all__ = [
    'EfficientTreeAggregator',
    'GaussianNoiseGenerator',
    'PeriodicRoundRestartIndicator',
    'RestartIndicator',
    'RestartQuery',
    'StatelessValueGenerator',
    'TreeAggregator',
    'TreeCumulativeSumQuery',
    'TreeRangeSumQuery',
    'TreeResidualSumQuery',
    'TreeState',
    'ValueGenerator',
]


def _build_tree_from_leaf(leaf_nodes: tf.Tensor, arity: Any) -> tf.RaggedTensor:
    """The complete tree over the 1-D `leaf_nodes`, root first, as a ``tf.RaggedTensor``.

    The leaves are padded with zeros up to ``arity ** (depth - 1)``, and each
    parent is the sum of its `arity` children: leaves ``[1, 2, 3, 4]`` and
    arity 2 give ``[[10], [3, 7], [1, 2, 3, 4]]``.
    """
    size = tf.constant(leaf_nodes.shape[0], dtype=tf.float32)
    arity_f = tf.cast(arity, tf.float32)
    num_layers = tf.math.ceil(tf.math.log(size) / tf.math.log(arity_f)) + 1
    padded_size = tf.cast(tf.math.pow(arity_f, num_layers - 1), tf.int32)
    padding = tf.zeros([padded_size - leaf_nodes.shape[0]], dtype=leaf_nodes.dtype)
    leaves = tf.concat((leaf_nodes, padding), axis=0)

    def shrink(layer):
        return tf.reduce_sum(tf.reshape(layer, (-1, arity)), 1)

    # A TF1-style while loop: the ragged loop variable changes shape every step.
    _, tree = tf.while_loop(
        lambda i, _: tf.less_equal(2.0, i),
        lambda i, h: [tf.add(i, -1.0), tf.concat(([shrink(h[0])], h), axis=0)],
        [tf.identity(num_layers), tf.RaggedTensor.from_tensor([leaves])],
        shape_invariants=[
            num_layers.get_shape(),
            tf.RaggedTensorSpec(dtype=leaf_nodes.dtype, ragged_rank=1),
        ],
    )
    return tree


class TreeRangeSumQuery(query.SumAggregationDPQuery):
    """A `DPQuery` for accurate range sums by tree aggregation.

    A variant of the tree aggregation of Smith, Thakurta, Upadhyay ("Is
    interaction necessary for distributed private learning?"): each record (a
    histogram, the leaves) becomes the flattened tree of its sums, the inner
    query privatizes the sum of these trees, and the result is the noised tree.

    Args:
      inner_query: the `SumAggregationDPQuery` that clips and noises the
        flattened tree.
      arity: the branching factor of the tree (default 2).

    Raises:
      ValueError: ``arity < 1``.
    """

    class GlobalState(NamedTuple):
        """The state: the tree's `arity` and the inner query's state."""

        arity: Any
        inner_query_state: Any

    def __init__(self, inner_query: query.SumAggregationDPQuery, arity: int = 2):
        self._inner_query = inner_query
        self._arity = arity
        if self._arity < 1:
            raise ValueError(f'Invalid arity={arity} smaller than 2.')

    def initial_global_state(self) -> Any:
        return TreeRangeSumQuery.GlobalState(
            arity=self._arity, inner_query_state=self._inner_query.initial_global_state()
        )

    def initial_sample_state(self, template: Any = None) -> Any:
        return self.preprocess_record(
            self.derive_sample_params(self.initial_global_state()),
            super().initial_sample_state(template),
        )

    def derive_sample_params(self, global_state: Any) -> Any:
        return (
            global_state.arity,
            self._inner_query.derive_sample_params(global_state.inner_query_state),
        )

    def preprocess_record(self, params: Any, record: Any) -> Any:
        """The flattened tree over `record` (the leaves), preprocessed by the inner query."""
        arity, inner_query_params = params
        flat_tree = _build_tree_from_leaf(record, arity).flat_values
        # A static shape: the DP factory needs the record type when it traces.
        depth = math.ceil(math.log(record.shape[0], self._arity)) + 1
        flat_tree = tf.reshape(flat_tree, [(self._arity**depth - 1) // (self._arity - 1)])
        return self._inner_query.preprocess_record(inner_query_params, flat_tree)

    def get_noised_result(
        self, sample_state: Any, global_state: Any, noise_seed: Optional[tf.Tensor] = None
    ) -> Any:
        """``(tree, new_global_state, UnsupportedDpEvent)``: the noised tree, ragged."""
        seeded = {'noise_seed': noise_seed} if self._inner_query.needs_noise_seed() else {}
        sample_state, inner_query_state, _ = self._inner_query.get_noised_result(
            sample_state, global_state.inner_query_state, **seeded
        )
        new_global_state = TreeRangeSumQuery.GlobalState(
            arity=global_state.arity, inner_query_state=inner_query_state
        )
        num_layers = math.floor(math.log(sample_state.shape[0], self._arity)) + 1
        row_splits = [0] + [
            (self._arity ** (x + 1) - 1) // (self._arity - 1) for x in range(num_layers)
        ]
        tree = tf.RaggedTensor.from_row_splits(values=sample_state, row_splits=row_splits)
        return tree, new_global_state, dp_accounting.UnsupportedDpEvent()

    def needs_noise_seed(self) -> bool:
        return self._inner_query.needs_noise_seed()

    @classmethod
    def build_central_gaussian_query(
        cls, l2_norm_clip: float, stddev: float, arity: int = 2
    ) -> 'TreeRangeSumQuery':
        """A `TreeRangeSumQuery` whose inner query is a central `GaussianSumQuery`.

        Args:
          l2_norm_clip: the L2 clip of each record's tree (> 0).
          stddev: the stddev of the Gaussian noise (>= 0).
          arity: the branching factor of the tree (>= 2).

        Raises:
          ValueError: an argument out of range.
        """
        if l2_norm_clip <= 0:
            raise ValueError(f'`l2_norm_clip` must be positive, got {l2_norm_clip}.')
        if stddev < 0:
            raise ValueError(f'`stddev` must be non-negative, got {stddev}.')
        if arity < 2:
            raise ValueError(f'`arity` must be at least 2, got {arity}.')
        return cls(arity=arity, inner_query=query.GaussianSumQuery(l2_norm_clip, stddev))


# --- Tree aggregation of noise (DP-FTRL) -----------------------------------------------------


class ValueGenerator(metaclass=abc.ABCMeta):
    """A stateful generator: ``next(state)`` gives ``(value, new_state)``."""

    @abc.abstractmethod
    def initialize(self) -> Any:
        """The initial state."""

    @abc.abstractmethod
    def next(self, state: Any) -> Any:
        """``(next value, advanced state)``."""


class GaussianNoiseGenerator(ValueGenerator):
    """I.i.d. spherical Gaussian noise shaped as `specs`; the state is ``(seeds, stddev)``.

    Each `next` draws stateless normals seeded by ``seeds + i`` for the i-th
    spec and advances the seeds past them.

    Args:
      noise_std: the noise stddev.
      specs: a nested structure of ``tf.TensorSpec``s of the noise.
      seed: an int seed; None seeds from the clock.
    """

    _GlobalState = collections.namedtuple('_GlobalState', ['seeds', 'stddev'])

    def __init__(self, noise_std: float, specs: Any, seed: Optional[int] = None):
        self._noise_std = noise_std
        self._specs = specs
        self._seed = seed

    def initialize(self) -> Any:
        if self._seed is None:
            time_now = tf.timestamp()
            residual = time_now - tf.math.floor(time_now)
            seeds = tf.cast(
                tf.stack([tf.math.floor(tf.timestamp() * 1e6), tf.math.floor(residual * 1e9)]),
                dtype=tf.int64,
            )
        else:
            seeds = tf.constant(self._seed, dtype=tf.int64, shape=(2,))
        return self._GlobalState(seeds, tf.constant(self._noise_std, dtype=tf.float32))

    def next(self, state: Any) -> Any:
        flat_specs = tu.flatten(self._specs)
        flat_seeds = [state.seeds + i for i in range(len(flat_specs))]
        noise = [
            tf.random.stateless_normal(shape=spec.shape, seed=seed, stddev=state.stddev)
            for spec, seed in zip(flat_specs, flat_seeds)
        ]
        return (
            tu.pack_sequence_as(self._specs, noise),
            self._GlobalState(flat_seeds[-1] + 1, state.stddev),
        )

    def make_state(self, seeds: tf.Tensor, stddev: tf.Tensor) -> Any:
        """The state ``(seeds, stddev)`` (int64[2], float32)."""
        seeds = tf.ensure_shape(seeds, shape=(2,))
        return self._GlobalState(tf.cast(seeds, dtype=tf.int64), tf.cast(stddev, tf.float32))


class StatelessValueGenerator(ValueGenerator):
    """Calls the no-arg `value_fn` for each value; the state is ``()``."""

    def __init__(self, value_fn: Callable[[], Any]):
        self.value_fn = value_fn

    def initialize(self) -> Any:
        return ()

    def next(self, state: Any) -> Any:
        return self.value_fn(), state


class TreeState(NamedTuple):
    """The state of a tree aggregator.

    Attributes:
      level_buffer: the values of the pending left-child nodes (the latest
        leaf's ancestors that are left children), stacked on axis 0.
      level_buffer_idx: the tree level of each of them (0: the leaves).
      value_generator_state: the state of the noise generator.
    """

    level_buffer: Any
    level_buffer_idx: Any
    value_generator_state: Any


class _TreeAggregatorBase:
    """The buffer bookkeeping the two tree aggregators share."""

    def __init__(self, value_generator: Union[ValueGenerator, Callable[[], Any]]):
        if isinstance(value_generator, ValueGenerator):
            self.value_generator = value_generator
        else:
            self.value_generator = StatelessValueGenerator(value_generator)

    def _get_init_state(self, value_generator_state: Any) -> TreeState:
        # Dynamically sized arrays (as TFF's): traced, the buffers' leading dimension is None.
        new_val, value_generator_state = self.value_generator.next(value_generator_state)
        level_buffer_idx = (
            tf.TensorArray(dtype=tf.int32, size=1, dynamic_size=True)
            .write(0, tf.constant(0, dtype=tf.int32))
            .stack()
        )
        level_buffer = tu.map_structure(
            lambda v: (
                tf.TensorArray(dtype=tf.float32, size=1, dynamic_size=True).write(0, v).stack()
            ),
            new_val,
        )
        return TreeState(
            level_buffer=level_buffer,
            level_buffer_idx=level_buffer_idx,
            value_generator_state=value_generator_state,
        )

    def init_state(self) -> TreeState:
        """The state of a tree of one leaf (its node value drawn from the generator)."""
        return self._get_init_state(self.value_generator.initialize())

    def reset_state(self, state: TreeState) -> TreeState:
        """The state of a restarted tree (the generator's state carries on)."""
        return self._get_init_state(state.value_generator_state)

    @staticmethod
    def _new_state(
        level_buffer, level_buffer_idx, level_idx, new_value, value_generator_state
    ) -> TreeState:
        """The buffer after a new (left) node `new_value` at `level_idx`, drops those below."""
        new_level_buffer = tu.map_structure(
            lambda b, v: tf.concat(
                [tf.expand_dims(tf.cast(v, tf.float32), 0), b[level_idx:]], axis=0
            ),
            level_buffer,
            new_value,
        )
        new_level_buffer_idx = tf.concat(
            [tf.reshape(tf.cast(level_idx, tf.int32), [1]), level_buffer_idx[level_idx:]], axis=0
        )
        return TreeState(
            level_buffer=new_level_buffer,
            level_buffer_idx=new_level_buffer_idx,
            value_generator_state=value_generator_state,
        )


class TreeAggregator(_TreeAggregatorBase):
    """Tree aggregation of noise for streaming sums (Dwork et al. 2010).

    Keeps the O(log T) left-child nodes of the latest leaf; the noise of the
    i-th cumulative sum is the sum of the nodes covering leaves 0..i.

    Args:
      value_generator: a `ValueGenerator`, or a no-arg function, of node values.
    """

    @tf.function
    def get_cumsum_and_update(self, state: TreeState) -> Any:
        """``(noise of the current cumulative sum, the state for the next leaf)``."""
        level_buffer_idx, level_buffer = state.level_buffer_idx, state.level_buffer
        cumsum = tu.map_structure(lambda x: tf.reduce_sum(x, axis=0), level_buffer)
        # The lowest level that switches from a right child (not buffered) to a left child.
        level_idx = 0
        while tf.less(level_idx, len(level_buffer_idx)) and tf.equal(
            level_idx, level_buffer_idx[level_idx]
        ):
            level_idx += 1
        new_value, value_generator_state = self.value_generator.next(state.value_generator_state)
        return cumsum, self._new_state(
            level_buffer, level_buffer_idx, level_idx, new_value, value_generator_state
        )


class EfficientTreeAggregator(_TreeAggregatorBase):
    """Honaker's efficient tree aggregation ("Efficient Use of Differentially Private Binary Trees").

    A node keeps ``v + (l + r) / 2`` (its noise and its children's average),
    reweighted by ``1 / (2 - 2 ** -depth)`` in the sum: a node's noise stddev
    is about ``sigma * sqrt(2 ** (d - 1) / (2 ** d - 1))``, ``sigma / sqrt(2)``
    for tall trees.

    Args:
      value_generator: a `ValueGenerator`, or a no-arg function, of node values.
    """

    @tf.function
    def _get_cumsum(self, state: TreeState) -> Any:
        level_weights = tf.math.divide(
            1.0, 2.0 - tf.math.pow(0.5, tf.cast(state.level_buffer_idx, tf.float32))
        )

        def weighted_sum(buffer):
            expand_shape = [len(level_weights)] + [1] * (len(tf.shape(buffer)) - 1)
            return tf.reduce_sum(buffer * tf.reshape(level_weights, expand_shape), axis=0)

        return tu.map_structure(weighted_sum, state.level_buffer)

    @tf.function
    def get_cumsum_and_update(self, state: TreeState) -> Any:
        """``(noise of the current cumulative sum, the state for the next leaf)``."""
        cumsum = self._get_cumsum(state)
        level_buffer_idx, level_buffer = state.level_buffer_idx, state.level_buffer
        level_idx = 0
        new_value, value_generator_state = self.value_generator.next(state.value_generator_state)
        while tf.less(level_idx, len(level_buffer_idx)) and tf.equal(
            level_idx, level_buffer_idx[level_idx]
        ):
            # A right child: merge it into its parent, bottom up.
            node_value, value_generator_state = self.value_generator.next(value_generator_state)
            new_value = tu.map_structure(
                lambda l, r, n: 0.5 * (l[level_idx] + r) + n, level_buffer, new_value, node_value
            )
            level_idx += 1
        return cumsum, self._new_state(
            level_buffer, level_buffer_idx, level_idx, new_value, value_generator_state
        )


def _l2_clip_fn(record_as_list, clip_norm):
    clipped_record, _ = tf.clip_by_global_norm(record_as_list, clip_norm)
    return clipped_record


class _TreeSumQueryBase(query.SumAggregationDPQuery):
    """Clipping and the tree aggregator of the two streaming tree queries."""

    def __init__(
        self,
        record_specs: Any,
        noise_generator: Any,
        clip_fn: Callable,
        clip_value: float,
        use_efficient: bool = True,
    ):
        self._clip_fn = clip_fn
        self._clip_value = clip_value
        self._record_specs = record_specs
        self._tree_aggregator = (
            EfficientTreeAggregator(noise_generator)
            if use_efficient
            else TreeAggregator(noise_generator)
        )

    def derive_sample_params(self, global_state: Any) -> Any:
        return global_state.clip_value

    def preprocess_record(self, params: Any, record: Any) -> Any:
        """`record` clipped by ``clip_fn(flat record, clip_value)``."""
        return tu.pack_sequence_as(record, self._clip_fn(tu.flatten(record), params))

    def _zeros(self) -> Any:
        return tu.map_structure(lambda spec: tf.zeros(spec.shape), self._record_specs)

    @classmethod
    def _build_l2_gaussian_query(
        cls, clip_norm, noise_multiplier, record_specs, noise_seed, use_efficient
    ):
        if isinstance(record_specs, T.Type):  # a TFF type, as TFF's tests pass: its TensorSpecs
            record_specs = tu.tensor_specs(record_specs)
        generator = GaussianNoiseGenerator(
            noise_std=clip_norm * noise_multiplier, specs=record_specs, seed=noise_seed
        )
        return cls(
            clip_fn=_l2_clip_fn,
            clip_value=clip_norm,
            record_specs=record_specs,
            noise_generator=generator,
            use_efficient=use_efficient,
        )


class TreeCumulativeSumQuery(_TreeSumQueryBase):
    """Releases private cumulative sums s_i = x_0 + ... + x_i, noised by tree aggregation.

    Each `get_noised_result` adds this call's sum x_i to the (noiseless)
    running sum and returns it plus the tree noise of step i.

    Args:
      record_specs: a nested structure of ``tf.TensorSpec``s of the records.
      noise_generator: the `ValueGenerator` (or no-arg function) of tree nodes.
      clip_fn: ``clip_fn(flat record, clip_value) -> flat clipped record``.
      clip_value: the clip.
      use_efficient: Honaker's `EfficientTreeAggregator` (default) or
        `TreeAggregator`.
    """

    class GlobalState(NamedTuple):
        """The tree state, the clip, and the noiseless cumulative sum."""

        tree_state: Any
        clip_value: Any
        samples_cumulative_sum: Any

    def initial_global_state(self) -> Any:
        return TreeCumulativeSumQuery.GlobalState(
            tree_state=self._tree_aggregator.init_state(),
            clip_value=tf.constant(self._clip_value, tf.float32),
            samples_cumulative_sum=self._zeros(),
        )

    def get_noised_result(self, sample_state: Any, global_state: Any) -> Any:
        """``(noised cumulative sum, new state, UnsupportedDpEvent)``."""
        new_cumulative_sum = tu.map_structure(
            tf.add, global_state.samples_cumulative_sum, sample_state
        )
        noise, new_tree_state = self._tree_aggregator.get_cumsum_and_update(global_state.tree_state)
        noised = tu.map_structure(tf.add, new_cumulative_sum, noise)
        new_state = TreeCumulativeSumQuery.GlobalState(
            tree_state=new_tree_state,
            clip_value=global_state.clip_value,
            samples_cumulative_sum=new_cumulative_sum,
        )
        return noised, new_state, dp_accounting.UnsupportedDpEvent()

    def reset_state(self, noised_results: Any, global_state: Any) -> Any:
        """A restarted tree whose running sum starts from `noised_results`."""
        return TreeCumulativeSumQuery.GlobalState(
            tree_state=self._tree_aggregator.reset_state(global_state.tree_state),
            clip_value=global_state.clip_value,
            samples_cumulative_sum=noised_results,
        )

    @classmethod
    def build_l2_gaussian_query(
        cls, clip_norm, noise_multiplier, record_specs, noise_seed=None, use_efficient=True
    ):
        """L2 clipping at `clip_norm` (> 0) and Gaussian nodes of stddev ``clip_norm * noise_multiplier``.

        Raises:
          ValueError: ``clip_norm <= 0`` or ``noise_multiplier < 0``.
        """
        if clip_norm <= 0:
            raise ValueError(f'`clip_norm` must be positive, got {clip_norm}.')
        if noise_multiplier < 0:
            raise ValueError(f'`noise_multiplier` must be non-negative, got {noise_multiplier}.')
        return cls._build_l2_gaussian_query(
            clip_norm, noise_multiplier, record_specs, noise_seed, use_efficient
        )


class TreeResidualSumQuery(_TreeSumQueryBase):
    """Releases x_i plus the change of the tree noise: differences of noised cumulative sums.

    A drop-in for a sum query (DP-FTRL, "Practical and Private (Deep)
    Learning without Sampling or Shuffling"): summing its results gives the
    noised cumulative sums of `TreeCumulativeSumQuery`.

    Args: as `TreeCumulativeSumQuery`.
    """

    class GlobalState(NamedTuple):
        """The tree state, the clip, and the previous call's tree noise."""

        tree_state: Any
        clip_value: Any
        previous_tree_noise: Any

    def initial_global_state(self) -> Any:
        return TreeResidualSumQuery.GlobalState(
            tree_state=self._tree_aggregator.init_state(),
            clip_value=tf.constant(self._clip_value, tf.float32),
            previous_tree_noise=self._zeros(),
        )

    def preprocess_record_l2_impl(self, params: Any, record: Any) -> Any:
        """``(record clipped to L2 norm params, its norm before clipping)``."""
        clipped, norm = tf.clip_by_global_norm(tu.flatten(record), params)
        return tu.pack_sequence_as(record, clipped), norm

    def get_noised_result(self, sample_state: Any, global_state: Any) -> Any:
        """``(sample + tree noise - previous tree noise, new state, UnsupportedDpEvent)``."""
        tree_noise, new_tree_state = self._tree_aggregator.get_cumsum_and_update(
            global_state.tree_state
        )
        noised = tu.map_structure(
            lambda a, b, c: a + b - c, sample_state, tree_noise, global_state.previous_tree_noise
        )
        new_state = TreeResidualSumQuery.GlobalState(
            tree_state=new_tree_state,
            clip_value=global_state.clip_value,
            previous_tree_noise=tree_noise,
        )
        return noised, new_state, dp_accounting.UnsupportedDpEvent()

    def reset_state(self, noised_results: Any, global_state: Any) -> Any:
        """A restarted tree with zero previous noise."""
        del noised_results
        return TreeResidualSumQuery.GlobalState(
            tree_state=self._tree_aggregator.reset_state(global_state.tree_state),
            clip_value=global_state.clip_value,
            previous_tree_noise=self._zeros(),
        )

    def reset_l2_clip_gaussian_noise(self, global_state: Any, clip_norm: Any, stddev: Any) -> Any:
        """The state with a new clip and Gaussian noise stddev (the tree carries on)."""
        generator = self._tree_aggregator.value_generator
        assert isinstance(generator, GaussianNoiseGenerator)
        tree_state = global_state.tree_state
        generator_state = generator.make_state(tree_state.value_generator_state.seeds, stddev)
        return TreeResidualSumQuery.GlobalState(
            tree_state=TreeState(
                tree_state.level_buffer, tree_state.level_buffer_idx, generator_state
            ),
            clip_value=clip_norm,
            previous_tree_noise=global_state.previous_tree_noise,
        )

    def derive_metrics(self, global_state: Any) -> Any:
        return collections.OrderedDict(tree_agg_dpftrl_clip=global_state.clip_value)

    @classmethod
    def build_l2_gaussian_query(
        cls, clip_norm, noise_multiplier, record_specs, noise_seed=None, use_efficient=True
    ):
        """L2 clipping at `clip_norm` (>= 0) and Gaussian nodes of stddev ``clip_norm * noise_multiplier``.

        Raises:
          ValueError: ``clip_norm < 0`` or ``noise_multiplier < 0``.
        """
        if clip_norm < 0:
            raise ValueError(f'`clip_norm` must be non-negative, got {clip_norm}.')
        if noise_multiplier < 0:
            raise ValueError(f'`noise_multiplier` must be non-negative, got {noise_multiplier}.')
        return cls._build_l2_gaussian_query(
            clip_norm, noise_multiplier, record_specs, noise_seed, use_efficient
        )


class RestartIndicator(metaclass=abc.ABCMeta):
    """Says when to restart a tree: ``next(state)`` gives ``(bool, new_state)``."""

    @abc.abstractmethod
    def initialize(self) -> Any:
        """The initial state."""

    @abc.abstractmethod
    def next(self, state: Any) -> Any:
        """``(whether to restart, advanced state)``."""


class PeriodicRoundRestartIndicator(RestartIndicator):
    """True every `period` calls, first at call `warmup` (or `period`); the state is a counter.

    Raises:
      ValueError: ``period < 1``, or `warmup` given and not in ``[1, period - 1]``.
    """

    def __init__(self, period: int, warmup: Optional[int] = None):
        if period < 1:
            raise ValueError(f'Restart period should be equal or larger than 1, got {period}')
        if warmup is None:
            warmup = 0
        elif warmup <= 0 or warmup >= period:
            raise ValueError(f'Warmup must be between 1 and `period`-1={period - 1}, got {warmup}')
        self.period = period
        self.warmup = warmup

    def initialize(self) -> Any:
        return tf.constant(0, tf.int32)

    def next(self, state: Any) -> Any:
        state = state + tf.constant(1, tf.int32)
        flag = tf.math.equal(
            tf.math.floormod(state, tf.constant(self.period, tf.int32)),
            tf.constant(self.warmup, tf.int32),
        )
        return flag, state


class _RestartQueryGlobalState(NamedTuple):
    inner_query_state: Any
    indicator_state: Any


class RestartQuery(query.SumAggregationDPQuery):
    """A tree query whose state is reset (``inner_query.reset_state``) when the indicator says.

    Raises:
      ValueError: `inner_query` has no ``reset_state``.
    """

    def __init__(self, inner_query: Any, restart_indicator: RestartIndicator):
        if not hasattr(inner_query, 'reset_state'):
            raise ValueError(
                f'{type(inner_query)} must define `reset_state` to be composed with `RestartQuery`.'
            )
        self._inner_query = inner_query
        self._restart_indicator = restart_indicator

    def initial_global_state(self) -> Any:
        return _RestartQueryGlobalState(
            inner_query_state=self._inner_query.initial_global_state(),
            indicator_state=self._restart_indicator.initialize(),
        )

    def derive_sample_params(self, global_state: Any) -> Any:
        return self._inner_query.derive_sample_params(global_state.inner_query_state)

    def initial_sample_state(self, template: Any = None) -> Any:
        return self._inner_query.initial_sample_state(template)

    def preprocess_record(self, params: Any, record: Any) -> Any:
        return self._inner_query.preprocess_record(params, record)

    @tf.function
    def get_noised_result(self, sample_state: Any, global_state: Any) -> Any:
        noised_results, inner_state, event = self._inner_query.get_noised_result(
            sample_state, global_state.inner_query_state
        )
        restart_flag, indicator_state = self._restart_indicator.next(global_state.indicator_state)
        if restart_flag:
            inner_state = self._inner_query.reset_state(noised_results, inner_state)
        return noised_results, _RestartQueryGlobalState(inner_state, indicator_state), event

    def derive_metrics(self, global_state: Any) -> Any:
        return self._inner_query.derive_metrics(global_state.inner_query_state)
