"""TFF's aggregation primitives (``aggregators/primitives.py``): `secure_quantized_sum`.

```
client: v -> clip to [lower, upper] -> int64 in [0, 2**32 - 1]   (floats: uniform 32-bit quantization)
        federated_secure_sum_bitwidth(.., 32), count = secure sum of ones
server: the inverse shift, scaled by the count, back to v's dtype
```
`federated_sample`: at most N client values, by reservoir sampling in a
`federated_aggregate`. As TFF, each value's random key comes from an unseeded
`tf.random.uniform`: a fresh sample on every call (so not the same bits on
two stacks; a key seeded by the value would make equal values share keys and
skew the sample).
"""

from __future__ import annotations

from typing import Any, List, NamedTuple

import numpy as np
import tensorflow as tf

from simharness.aggregators import tensor_utils as tu
from simharness.core import intrinsics
from simharness.core import tracing
from simharness.core import types as T
from simharness.core.computation import tf_computation
from simharness.errors import SimharnessTypeError

# TFF had these in `tff.aggregators` up to 0.68 (the intrinsics `federated_language` has
# since): the same folds under the older names.
federated_min = intrinsics.federated_min
federated_max = intrinsics.federated_max

__all__ = [
    'BoundsDifferentSignaturesError',
    'BoundsDifferentTypesError',
    'BoundsNotPlacedAtServerError',
    'ScalarBoundSimpleValueDTypeError',
    'ScalarBoundStructValueDTypeError',
    'StructuredBoundsTypeMismatchError',
    'UnsupportedDTypeError',
    'federated_sample',
    'secure_quantized_sum',
]

_SECAGG_MAX = 2**32 - 1
_ALLOWED_DTYPES = (
    np.dtype(np.int32),
    np.dtype(np.int64),
    np.dtype(np.float32),
    np.dtype(np.float64),
)


class UnsupportedDTypeError(SimharnessTypeError):
    """A dtype `secure_quantized_sum` does not sum (int32, int64, float32, float64 only)."""


class BoundsDifferentTypesError(SimharnessTypeError):
    """One bound is a federated value and the other a constant."""


class BoundsDifferentSignaturesError(SimharnessTypeError):
    """The bounds have different types."""


class BoundsNotPlacedAtServerError(SimharnessTypeError):
    """The bounds are not placed at SERVER."""


class StructuredBoundsTypeMismatchError(SimharnessTypeError):
    """Structured bounds do not match the value's structure and dtypes."""


class ScalarBoundStructValueDTypeError(SimharnessTypeError):
    """A scalar bound of a struct value whose dtypes differ from the bound's."""


class ScalarBoundSimpleValueDTypeError(SimharnessTypeError):
    """A scalar bound whose dtype differs from the value's."""


def _leaf_dtypes(t: T.Type) -> List[np.dtype]:
    return [leaf.dtype for leaf in T.flatten_type(t)]


def _normalize_args(client_value: Any, lower_bound: Any, upper_bound: Any) -> Any:
    """TFF's checks of `secure_quantized_sum`'s arguments; constants become server values."""
    vt = client_value.type_signature
    if not (isinstance(vt, T.FederatedType) and vt.placement is T.CLIENTS):
        raise SimharnessTypeError(f'client_value must be placed at CLIENTS, got {vt}', actual=vt)
    member = vt.member
    dtypes = _leaf_dtypes(member)
    for d in dtypes:
        if d not in _ALLOWED_DTYPES:
            raise UnsupportedDTypeError(
                f'secure_quantized_sum supports int32, int64, float32 and float64, got {d}',
                actual=d,
            )
    if isinstance(lower_bound, tracing.Value) != isinstance(upper_bound, tracing.Value):
        raise BoundsDifferentTypesError(
            f'lower_bound and upper_bound must both be federated values or both constants, got '
            f'{type(lower_bound).__name__} and {type(upper_bound).__name__}'
        )
    if not isinstance(lower_bound, tracing.Value):
        lower_bound = intrinsics.federated_value(lower_bound, T.SERVER)
        upper_bound = intrinsics.federated_value(upper_bound, T.SERVER)
    lt, ut = lower_bound.type_signature, upper_bound.type_signature
    if lt != ut:
        raise BoundsDifferentSignaturesError(
            f'lower_bound and upper_bound must have the same type, got {lt} and {ut}'
        )
    if lt.placement is not T.SERVER:
        raise BoundsNotPlacedAtServerError(f'the bounds must be placed at SERVER, got {lt}')
    bound = lt.member
    if isinstance(bound, T.StructType):
        if (
            not isinstance(member, T.StructType)
            or _leaf_dtypes(bound) != dtypes
            or len(T.flatten_type(bound)) != len(dtypes)
        ):
            raise StructuredBoundsTypeMismatchError(
                f'structured bounds {bound} do not match the value type {member}'
            )
    elif isinstance(member, T.StructType):
        if len(set(dtypes)) > 1 or bound.dtype != dtypes[0]:
            raise ScalarBoundStructValueDTypeError(
                f'a scalar bound of dtype {bound.dtype} needs a value of that one dtype, got '
                f'{member}'
            )
    elif bound.dtype != member.dtype:
        raise ScalarBoundSimpleValueDTypeError(
            f'the bound dtype {bound.dtype} differs from the value dtype {member.dtype}'
        )
    return client_value, lower_bound, upper_bound


def _client_shift(value: tf.Tensor, lower: tf.Tensor, upper: tf.Tensor) -> tf.Tensor:
    """One tensor clipped to [lower, upper] and mapped to int64 in [0, 2**32 - 1]."""
    check = tf.debugging.assert_less_equal(
        lower, upper, message='lower_bound must be smaller than upper_bound for secagg quantization'
    )
    with tf.control_dependencies([check]):
        return _client_shift_unchecked(value, lower, upper)


def _client_shift_unchecked(value: tf.Tensor, lower: tf.Tensor, upper: tf.Tensor) -> tf.Tensor:
    if value.dtype == tf.int32:
        return tf.cast(tf.clip_by_value(value, lower, upper), tf.int64) - tf.cast(lower, tf.int64)
    if value.dtype == tf.int64:
        clipped = tf.clip_by_value(value, lower, upper)
        scale = tf.math.floordiv(upper - lower, _SECAGG_MAX) + 1
        return tf.cond(
            tf.greater(scale, 1),
            lambda: tf.math.floordiv(clipped - lower, scale),
            lambda: clipped - lower,
        )
    clipped = tf.clip_by_value(value, lower, upper)
    scale = tf.math.divide_no_nan(
        tf.constant(_SECAGG_MAX, tf.float64), tf.cast(upper - lower, tf.float64)
    )
    rounded = tf.saturate_cast(tf.round(tf.cast(clipped, tf.float64) * scale), tf.int64)
    shifted = rounded - tf.saturate_cast(tf.round(tf.cast(lower, tf.float64) * scale), tf.int64)
    return tf.clip_by_value(shifted, tf.constant(0, tf.int64), tf.constant(_SECAGG_MAX, tf.int64))


def _server_shift(
    num_summands: tf.Tensor, value: tf.Tensor, lower: tf.Tensor, upper: tf.Tensor, dtype: tf.DType
) -> tf.Tensor:
    """The inverse of `_client_shift` for a sum of `num_summands` values."""
    n = tf.cast(num_summands, tf.int64)
    if dtype == tf.int32:
        value = value + n * tf.cast(lower, tf.int64)
    elif dtype == tf.int64:
        scale = tf.math.floordiv(upper - lower, _SECAGG_MAX) + 1
        value = tf.cond(scale > 1, lambda: value * scale + n * lower, lambda: value + n * lower)
    else:
        scale = tf.math.divide_no_nan(
            tf.constant(_SECAGG_MAX, tf.float64), tf.cast(upper - lower, tf.float64)
        )
        value = value + tf.saturate_cast(tf.round(tf.cast(lower, tf.float64) * scale), tf.int64) * n
        value = tf.cast(value, tf.float64) * (tf.cast(upper - lower, tf.float64) / _SECAGG_MAX)
        shifted = value + tf.cast(n, tf.float64) * tf.cast(lower, tf.float64)
        value = tf.cond(tf.equal(lower, upper), lambda: shifted, lambda: value)
    return tf.cast(value, dtype)


def secure_quantized_sum(client_value: Any, lower_bound: Any, upper_bound: Any) -> Any:
    """Clips, quantizes to 32 bits and sums `client_value` with a secure sum.

    Integer values whose range spans fewer than 2**32 values sum exactly;
    floats are quantized uniformly over [lower_bound, upper_bound]
    (deterministic rounding), so expect 7-8 significant digits relative to
    the range for float32.

    Args:
      client_value: a value placed at CLIENTS (int32, int64, float32,
        float64 leaves).
      lower_bound, upper_bound: scalars, or structures of scalars matching
        `client_value`: Python constants or values placed at SERVER, of the
        value's dtype.

    Returns:
      The sum placed at SERVER, of `client_value`'s dtype.

    Raises:
      TypeError (TFF's subclasses above): bad dtypes, bounds or placements.
    """
    client_value, lower_bound, upper_bound = _normalize_args(client_value, lower_bound, upper_bound)
    member = client_value.type_signature.member
    scalar_bounds = not isinstance(lower_bound.type_signature.member, T.StructType)
    dtypes = [tf.as_dtype(d) for d in _leaf_dtypes(member)]

    @tf_computation()
    def client_shift(value, lower, upper):
        leaves = tu.flatten(value)
        if scalar_bounds:
            out = [_client_shift(v, lower, upper) for v in leaves]
        else:
            out = [
                _client_shift(v, lo, up)
                for v, lo, up in zip(leaves, tu.flatten(lower), tu.flatten(upper))
            ]
        return tu.pack_sequence_as(value, out)

    @tf_computation()
    def server_shift(value, lower, upper, summands):
        leaves = tu.flatten(value)
        if scalar_bounds:
            out = [_server_shift(summands, v, lower, upper, d) for v, d in zip(leaves, dtypes)]
        else:
            out = [
                _server_shift(summands, v, lo, up, d)
                for v, lo, up, d in zip(leaves, tu.flatten(lower), tu.flatten(upper), dtypes)
            ]
        return tu.pack_sequence_as(value, out)

    value = intrinsics.federated_map(
        client_shift,
        (
            client_value,
            intrinsics.federated_broadcast(lower_bound),
            intrinsics.federated_broadcast(upper_bound),
        ),
    )
    num_summands = intrinsics.federated_secure_sum_bitwidth(
        intrinsics.federated_value(1, T.CLIENTS), bitwidth=1
    )
    value = intrinsics.federated_secure_sum_bitwidth(value, bitwidth=32)
    return intrinsics.federated_map(server_shift, (value, lower_bound, upper_bound, num_summands))


class _Samples(NamedTuple):
    """The accumulator of `federated_sample`: parallel lists of values and random keys."""

    accumulators: Any
    rands: Any


def federated_sample(value: Any, max_num_samples: int = 100) -> Any:
    """At most `max_num_samples` of the client values, sampled uniformly (reservoir sampling).

    Args:
      value: a value placed at CLIENTS.
      max_num_samples: the most values kept (fewer clients: all of them).

    Returns:
      The sampled values, stacked along a new first dimension, at SERVER.

    Raises:
      TypeError: `value` is not placed at CLIENTS.
    """
    vt = getattr(value, 'type_signature', None)
    if not (isinstance(vt, T.FederatedType) and vt.placement is T.CLIENTS):
        raise SimharnessTypeError(
            f'`value` argument must be a federated value placed at CLIENTS. Got: {vt}', actual=vt
        )
    member = vt.member
    specs = tu.tensor_specs(member)
    accumulator_type = T.to_type(
        _Samples(
            accumulators=_with_unknown_first_dim(member), rands=T.TensorType(np.float32, [None])
        )
    )

    @tf_computation
    def zeros():
        return _Samples(
            tu.map_structure(lambda s: tf.zeros([0] + s.shape.as_list(), s.dtype), specs),
            tf.zeros([0], tf.float32),
        )

    def apply_sampling(leaves, rands):
        k = tf.minimum(tf.shape(rands)[0], max_num_samples)
        indices = tf.math.top_k(rands, k=k).indices
        return [tf.gather(v, indices) for v in leaves], tf.gather(rands, indices)

    @tf_computation(accumulator_type, member)
    def accumulate(current, new):
        rands = tf.concat([current.rands, tf.random.uniform([1])], 0)
        leaves = [
            tf.concat([a, tf.expand_dims(b, 0)], 0)
            for a, b in zip(tu.flatten(current.accumulators), tu.flatten(new))
        ]
        leaves, rands = apply_sampling(leaves, rands)
        return _Samples(tu.pack_sequence_as(current.accumulators, leaves), rands)

    @tf_computation(accumulator_type, accumulator_type)
    def merge(a, b):
        leaves = [
            tf.concat([x, y], 0)
            for x, y in zip(tu.flatten(a.accumulators), tu.flatten(b.accumulators))
        ]
        leaves, rands = apply_sampling(leaves, tf.concat([a.rands, b.rands], 0))
        return _Samples(tu.pack_sequence_as(a.accumulators, leaves), rands)

    report = tf_computation(lambda acc: acc.accumulators, accumulator_type)
    return intrinsics.federated_aggregate(value, zeros(), accumulate, merge, report)


def _with_unknown_first_dim(t: Any) -> T.Type:
    if isinstance(t, T.TensorType):
        shape: Any = t.shape
        return T.TensorType(t.dtype, (None,) + tuple(shape))
    struct: Any = t
    return T.StructType(
        [(n, _with_unknown_first_dim(e)) for n, e in struct.items()], container=struct.container
    )
