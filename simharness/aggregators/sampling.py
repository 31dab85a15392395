"""TFF's `UnweightedReservoirSamplingFactory` (``aggregators/sampling.py``).

```
federated_aggregate(value, zero=empty reservoir, accumulate=reservoir sampling of one value,
                    merge=keep the sample_size largest random values, report=samples)
reservoir <random_seed int64[2], random_values int32[?], samples: value leaves with a leading [?]>
measurements: per leaf, the number of clients whose leaf has a NaN or Inf (int64)
```
Difference from TFF: TFF seeds each accumulator from a timestamp (different
samples on every call). Here an empty reservoir's seed is a fingerprint of
the first value it receives, and the reduction order is canonical, so the
sample is a function of the client values: the same bits on every stack.
The price: reduction chunks holding identical values draw identical keys, so
the proportions of equal values in a sample vary more than TFF's.
"""

from __future__ import annotations

import collections
from typing import Any

import numpy as np
import tensorflow as tf

from simharness.aggregators import factory
from simharness.aggregators import tensor_utils as tu
from simharness.core import intrinsics
from simharness.core import types as T
from simharness.core.computation import Computation, federated_computation, tf_computation
from simharness.errors import SimharnessTypeError, SimharnessValueError
from simharness.templates import AggregationProcess, MeasuredProcessOutput

__all__ = [
    'SEED_SENTINEL',
    'UnweightedReservoirSamplingFactory',
    'build_initial_sample_reservoir',
    'build_merge_samples_computation',
    'build_reservoir_type',
]

SEED_SENTINEL = -1


def _tensors_or_containers(t: T.Type) -> bool:
    if isinstance(t, T.TensorType):
        return True
    return (
        isinstance(t, T.StructType)
        and t.container is not None
        and all(_tensors_or_containers(e) for e in t)
    )


def _with_leading_dim(t: Any, dim: Any) -> T.Type:
    if isinstance(t, T.TensorType):
        shape: Any = t.shape
        return T.TensorType(t.dtype, (dim,) + tuple(shape))
    struct: Any = t
    return T.StructType(
        [(n, _with_leading_dim(e, dim)) for n, e in struct.items()], container=struct.container
    )


def build_reservoir_type(sample_value_type: T.Type) -> T.Type:
    """The accumulator type of the sampling: `<random_seed, random_values, samples>`.

    Raises:
      TypeError: `sample_value_type` holds other than tensors and structs with
        Python containers.
    """
    if not _tensors_or_containers(sample_value_type):
        raise SimharnessTypeError(
            'Cannot create a reservoir for type structure. Sample type must only contain '
            f'`TensorType` or `StructWithPythonType`, got a {sample_value_type!r}.',
            actual=sample_value_type,
        )
    return T.to_type(
        collections.OrderedDict(
            random_seed=T.TensorType(np.int64, [2]),
            random_values=T.TensorType(np.int32, [None]),
            samples=_with_leading_dim(sample_value_type, None),
        )
    )


def build_initial_sample_reservoir(sample_value_type: T.Type, seed: Any = None) -> Any:
    """The empty reservoir (a call of a tf_computation: use it while tracing)."""
    build_reservoir_type(sample_value_type)
    specs = tu.tensor_specs(sample_value_type)

    @tf_computation
    def initialize():
        real_seed = tf.constant(SEED_SENTINEL if seed is None else seed, tf.int64)
        return collections.OrderedDict(
            random_seed=tf.fill((2,), real_seed),
            random_values=tf.zeros([0], tf.int32),
            samples=tu.map_structure(lambda s: tf.zeros([0] + s.shape.as_list(), s.dtype), specs),
        )

    return initialize()


def _fingerprint_seed(sample: Any) -> tf.Tensor:
    return tf.stack([tu.fingerprint(tu.flatten(sample)), tf.constant(0, tf.int64)])


def _reservoir(seed: Any, values: Any, samples: Any) -> Any:
    return collections.OrderedDict(random_seed=seed, random_values=values, samples=samples)


def _build_sample_value_computation(value_type: T.Type, sample_size: int) -> Computation:
    reservoir_type = build_reservoir_type(value_type)

    @tf_computation(reservoir_type, value_type)
    def perform_sampling(reservoir, sample):
        old_seed = reservoir['random_seed']
        seed = tf.cond(
            tf.reduce_all(tf.equal(old_seed, SEED_SENTINEL)),
            lambda: _fingerprint_seed(sample),
            lambda: old_seed,
        )
        value = tf.random.stateless_uniform((1,), seed=seed, minval=None, dtype=tf.int32)
        new_seed = tf.stack([seed[0], tf.cast(value[0], tf.int64)])
        values, samples = reservoir['random_values'], reservoir['samples']
        sample_leaves, held = tu.flatten(sample), tu.flatten(samples)

        def add(vals, leaves):
            return [tf.concat([vals, value], 0)] + [
                tf.concat([h, tf.expand_dims(s, 0)], 0) for h, s in zip(leaves, sample_leaves)
            ]

        def keep():
            return [values] + held

        def pop_and_add():
            _, idx = tf.nn.top_k(values, k=tf.size(values) - 1, sorted=False)
            return add(tf.gather(values, idx), [tf.gather(h, idx) for h in held])

        def full():
            return tf.cond(value[0] < tf.reduce_min(values), keep, pop_and_add)

        out = tf.cond(tf.size(values) < sample_size, lambda: add(values, held), full)
        return _reservoir(new_seed, out[0], tu.pack_sequence_as(samples, list(out[1:])))

    return perform_sampling


def build_merge_samples_computation(value_type: T.Type, sample_size: int) -> Computation:
    """The merge of two reservoirs: the `sample_size` largest random values (in order)."""
    reservoir_type = build_reservoir_type(value_type)

    @tf_computation(reservoir_type, reservoir_type)
    def merge_samples(a, b):
        values = tf.concat([a['random_values'], b['random_values']], 0)
        leaves = [
            tf.concat([x, y], 0) for x, y in zip(tu.flatten(a['samples']), tu.flatten(b['samples']))
        ]

        def select():
            _, idx = tf.nn.top_k(values, sample_size, sorted=False)
            mask = tf.scatter_nd(
                tf.expand_dims(idx, -1), tf.fill(tf.shape(idx), True), tf.shape(values)
            )
            return [tf.boolean_mask(values, mask)] + [tf.boolean_mask(t, mask) for t in leaves]

        out = tf.cond(tf.size(values) <= sample_size, lambda: [values] + leaves, select)
        return _reservoir(
            a['random_seed'], out[0], tu.pack_sequence_as(a['samples'], list(out[1:]))
        )

    return merge_samples


class UnweightedReservoirSamplingFactory(factory.UnweightedAggregationFactory):
    """Samples up to `sample_size` client values by reservoir sampling.

    The state is empty; the measurements count, per leaf of the value, the
    clients whose leaf holds a non-finite value (before sampling).

    Args:
      sample_size: how many client values the server receives (> 0).
      return_sampling_metadata: return the whole reservoir (seed, random
        values, samples) instead of the samples.

    Raises:
      TypeError: an argument of the wrong type.
      ValueError: `sample_size` is not positive.
    """

    def __init__(self, sample_size: int, return_sampling_metadata: bool = False):
        if isinstance(sample_size, bool) or not isinstance(sample_size, int):
            raise SimharnessTypeError(
                f'Expected sample_size to be an int, found {type(sample_size).__name__}',
                actual=sample_size,
            )
        factory.check_factory(return_sampling_metadata, bool, 'return_sampling_metadata')
        if sample_size <= 0:
            raise SimharnessValueError('`sample_size` must be positive.')
        self._sample_size = sample_size
        self._return_sampling_metadata = return_sampling_metadata

    def create(self, value_type: factory.ValueType) -> AggregationProcess:
        if not factory.is_structure_of_tensors(value_type):
            raise SimharnessTypeError(
                f'`value_type` must be a structure of tensors, got a {value_type!r}.',
                actual=value_type,
            )
        sample_value = _build_sample_value_computation(value_type, self._sample_size)
        merge_samples = build_merge_samples_computation(value_type, self._sample_size)
        metadata = self._return_sampling_metadata
        finalize = tf_computation(
            lambda r: r if metadata else r['samples'], build_reservoir_type(value_type)
        )

        @tf_computation(value_type)
        def non_finite_leaves(value):
            def check(t):
                bad = (
                    tf.logical_not(tf.reduce_all(tf.math.is_finite(t)))
                    if t.dtype.is_floating
                    else tf.constant(False)
                )
                return tf.cast(bad, tf.int64)

            return tu.map_structure(check, value)

        @federated_computation()
        def init_fn():
            return intrinsics.federated_value((), T.SERVER)

        @federated_computation(
            T.FederatedType((), T.SERVER), T.FederatedType(value_type, T.CLIENTS)
        )
        def next_fn(unused_state, value):
            counts = intrinsics.federated_sum(intrinsics.federated_map(non_finite_leaves, value))
            samples = intrinsics.federated_aggregate(
                value,
                zero=build_initial_sample_reservoir(value_type),
                accumulate=sample_value,
                merge=merge_samples,
                report=finalize,
            )
            return MeasuredProcessOutput(
                state=intrinsics.federated_value((), T.SERVER), result=samples, measurements=counts
            )

        return AggregationProcess(init_fn, next_fn)
