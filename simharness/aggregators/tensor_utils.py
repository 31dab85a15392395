"""Helpers for the TF bodies of the aggregators: nested structures, norms.

A client value of a struct type reaches a `tf_computation` as a Python
container (list, tuple, dict, namedtuple, attrs class) or, for a struct type
with no container, a `Struct`; `map_structure` and `flatten` handle both, as
`tf.nest` does for the containers.
"""

from __future__ import annotations

from typing import Any, Callable, List

import attrs
import tensorflow as tf

from simharness.core import types as T
from simharness.core.struct import Struct

__all__ = [
    'cond',
    'flatten',
    'map_structure',
    'pack_sequence_as',
    'global_l1_norm',
    'global_l2_norm',
    'global_inf_norm',
    'tensor_specs',
]


def _children(v: Any) -> List[Any]:
    if attrs.has(type(v)):
        return [getattr(v, a.name) for a in attrs.fields(type(v))]
    if isinstance(v, Struct):
        return list(v)
    if isinstance(v, dict):
        return list(v.values())
    if isinstance(v, (list, tuple)):
        return list(v)
    return []


def _is_nest(v: Any) -> bool:
    return isinstance(v, (Struct, dict, list, tuple)) or attrs.has(type(v))


def flatten(value: Any) -> List[Any]:
    """The leaves of `value`, depth first (dicts in their own order)."""
    if not _is_nest(value):
        return [value]
    return [leaf for c in _children(value) for leaf in flatten(c)]


def _rebuild(like: Any, children: List[Any]) -> Any:
    if attrs.has(type(like)):
        return type(like)(*children)
    if isinstance(like, Struct):
        return Struct(zip(like.names, children))
    if isinstance(like, dict):
        return type(like)(zip(like.keys(), children))
    if T.is_namedtuple(like):
        return type(like)(*children)
    return type(like)(children)


def map_structure(fn: Callable[..., Any], *values: Any) -> Any:
    """`fn` of corresponding leaves of `values`, rebuilt in the layout of the first."""
    first = values[0]
    if not _is_nest(first):
        return fn(*values)
    kids = [_children(v) for v in values]
    return _rebuild(first, [map_structure(fn, *xs) for xs in zip(*kids)])


def pack_sequence_as(structure: Any, leaves: List[Any]) -> Any:
    """`leaves` in the layout of `structure`."""
    it = iter(leaves)

    def build(s: Any) -> Any:
        if not _is_nest(s):
            return next(it)
        return _rebuild(s, [build(c) for c in _children(s)])

    return build(structure)


def cond(pred: Any, true_fn: Callable[[], Any], false_fn: Callable[[], Any], like: Any) -> Any:
    """`tf.cond` of two functions returning structures laid out as `like` (Structs too)."""
    leaves = tf.cond(pred, lambda: flatten(true_fn()), lambda: flatten(false_fn()))
    return pack_sequence_as(like, list(leaves) if isinstance(leaves, (list, tuple)) else [leaves])


def fingerprint(tensors: List[Any], suffix: List[Any] = ()) -> tf.Tensor:
    """An int64 scalar from the bits of `tensors` (serialized) and the strings `suffix`: the
    stateless seed the aggregators draw "random" rounding, sampling or noise from, so that
    it is the same on every stack and rerun."""
    data = tf.strings.join([tf.io.serialize_tensor(t) for t in tensors] + list(suffix) or [''])
    return tf.bitcast(tf.fingerprint(tf.reshape(data, [1]))[0], tf.int64)


def global_l2_norm(value: Any) -> tf.Tensor:
    """The L2 norm of all leaves together, in float32 (mixed float dtypes allowed)."""
    squares = [tf.cast(tf.norm(a, ord=2) ** 2, tf.float32) for a in flatten(value)]
    return tf.math.sqrt(tf.reduce_sum(tf.stack(squares)))


def global_l1_norm(value: Any) -> tf.Tensor:
    """The L1 norm of all leaves together, in float32."""
    return tf.reduce_sum(tf.stack([tf.cast(tf.norm(a, ord=1), tf.float32) for a in flatten(value)]))


def global_inf_norm(value: Any) -> tf.Tensor:
    """The largest absolute entry of all leaves, in float32."""
    return tf.reduce_max(
        tf.stack([tf.cast(tf.norm(a, ord=float('inf')), tf.float32) for a in flatten(value)])
    )


def tensor_specs(value_type: T.Type) -> Any:
    """`value_type` as a structure of `tf.TensorSpec`s (TFF's type_to_tf_tensor_specs)."""
    if isinstance(value_type, T.TensorType):
        shape = None if value_type.shape is None else list(value_type.shape)
        return tf.TensorSpec(shape, tf.as_dtype(value_type.dtype))
    if isinstance(value_type, T.StructType):
        kids = [tensor_specs(e) for e in value_type]
        names = value_type.names
        container: Any = value_type.container
        if container is None:
            if any(n is not None for n in names):
                return Struct(zip(names, kids))
            return tuple(kids)
        if issubclass(container, dict):
            return container(zip(names, kids))
        if T.is_namedtuple_class(container):
            return container(*kids)
        return container(kids)
    raise TypeError(f'no tensor specs for {value_type}')
