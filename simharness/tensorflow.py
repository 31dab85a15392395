"""`simharness.tensorflow`: TFF's ``tff.tensorflow`` namespace (TensorFlow front end).

``tff.tensorflow.computation`` is simharness's `tf_computation` (the same
decorator: the function is traced once per parameter type into a serialized
TF graph). `to_type` accepts TF's type specs inside Python structures, as
TFF's does; `transform_args` / `transform_result` turn eager tensors,
variables and datasets into numpy values; `type_to_tf_tensor_specs` and
`structure_from_tensor_type_tree` build TF structures from a type.

TFF's compiler passes exported here (`optimize_tensorflow_graphs`,
`transform_tf_add_ids`, `transform_tf_call_ops_to_disable_grappler`,
`replace_intrinsics_with_bodies`) rewrite TFF's computation protos for its
C++ runtime; simharness has no such protos and leaves them out (see
docs/tff/core.md).
"""

from __future__ import annotations

import collections
from typing import Any, Callable

import attrs
import numpy as np
import tensorflow as tf

from simharness.core import types as T
from simharness.core.computation import tf_computation
from simharness.core.structure import Struct, to_container
from simharness.errors import SimharnessTypeError, SimharnessValueError

#: ``tff.tensorflow.computation``: the decorator that traces a Python function into TF.
computation = tf_computation


def to_type(obj: Any) -> T.Type:
    """The type of `obj`, a type spec that may hold TF's specs (TFF's ``tff.tensorflow.to_type``).

    Accepts what `simharness.to_type` accepts and, anywhere inside Python
    structures, `tf.dtypes.DType`, ``(dtype, tf.TensorShape)`` pairs,
    `tf.TensorSpec` and `tf.data.DatasetSpec`.

    Raises:
      SimharnessTypeError: `obj` is not a type spec.
    """
    return T.to_type(obj)


def _to_numpy(value: Any, datasets: bool = True) -> Any:
    if isinstance(value, tf.Variable):
        return value.read_value().numpy()
    if isinstance(value, tf.Tensor):
        return value if tf.is_symbolic_tensor(value) else value.numpy()
    if isinstance(value, tf.data.Dataset):
        return list(value.as_numpy_iterator()) if datasets else value
    if isinstance(value, Struct):
        return Struct((n, _to_numpy(v, datasets)) for n, v in value.items())
    if T.is_namedtuple(value):
        return type(value)(*[_to_numpy(v, datasets) for v in value])
    if attrs.has(type(value)):
        return attrs.evolve(
            value,
            **{
                a.name: _to_numpy(getattr(value, a.name), datasets)
                for a in attrs.fields(type(value))
                if a.init
            },
        )
    if isinstance(value, collections.abc.Mapping):
        items = [(k, _to_numpy(v, datasets)) for k, v in value.items()]
        mapping_class: Any = type(value)  # a user class: its constructor is not typed
        try:
            return mapping_class(items)
        except TypeError:
            return dict(items)
    if isinstance(value, (list, tuple)):
        return type(value)(_to_numpy(v, datasets) for v in value)
    return value


def transform_args(args: Any) -> Any:
    """The arguments of a TF computation with eager tensors, variables and datasets as numpy.

    Datasets become lists of their elements (as TFF's `transform_args`).
    """
    return _to_numpy(args)


def eager_values_to_numpy(value: Any) -> Any:
    """`transform_args` that leaves datasets as they are: what simharness's contexts apply.

    simharness runs a `tf.data.Dataset` argument as a dataset (a worker process
    gets its serialized graph), which is faster than TFF's list of elements for
    big client data; a dataset that cannot be serialized (``from_generator``)
    then runs on a thread stack only.
    """
    return _to_numpy(value, datasets=False)


def transform_result(result: Any) -> Any:
    """A TF computation's result with eager tensors, variables and datasets as numpy."""
    return _to_numpy(result)


def _build_container(t: T.StructType, pairs: list) -> Any:
    container: Any = t.container  # a user class: its constructor is not typed
    if container is None:
        if pairs and pairs[0][0] is not None:
            return collections.OrderedDict(pairs)
        return tuple(v for _, v in pairs)
    if T.is_namedtuple_class(container) or attrs.has(container):
        return container(**dict(pairs))
    if issubclass(container, collections.abc.Mapping):
        return container(pairs)
    return container(v for _, v in pairs)


def _specs(t: T.Type, what: Callable[[T.TensorType], Any]) -> Any:
    if isinstance(t, T.TensorType):
        return what(t)
    if isinstance(t, T.StructType):
        named = [n is not None for n in t.names]
        if any(named) and not all(named):
            raise SimharnessValueError(
                f'the struct type {t} names some of its elements only; TF structures need '
                'all elements named or none'
            )
        return _build_container(t, [(n, _specs(e, what)) for n, e in t.items()])
    raise SimharnessValueError(f'expected a tensor or struct type, got {t}')


def type_to_tf_tensor_specs(type_spec: Any) -> Any:
    """The nested `tf.TensorSpec`s of a type of tensors and structs (TFF's function).

    Named structs without a Python container become OrderedDicts, unnamed
    ones tuples.

    Raises:
      SimharnessValueError: the type holds something other than tensors and
        structs, or a struct names only some elements.
    """
    t = T.to_type(type_spec)
    return _specs(
        t,
        lambda leaf: tf.TensorSpec(
            leaf.shape, tf.as_dtype(tf.string if leaf.dtype == np.dtype(object) else leaf.dtype)
        ),
    )


def _from_tree(fn: Callable[[T.TensorType], Any], t: T.Type) -> Any:
    if isinstance(t, T.StructType):
        return Struct((n, _from_tree(fn, e)) for n, e in t.items())
    if isinstance(t, T.TensorType):
        return fn(t)
    raise SimharnessValueError(f'expected a tensor or struct type, found {t}')


def structure_from_tensor_type_tree(fn: Callable[[T.TensorType], Any], type_spec: Any) -> Any:
    """A structure shaped as `type_spec` whose tensor leaves are ``fn(leaf type)``.

    `fn` is called once per leaf, in order; the structure has the type's
    Python containers.

    Raises:
      SimharnessTypeError: `fn` is not callable.
      SimharnessValueError: the type holds something other than tensors and structs.
    """
    if not callable(fn):
        raise SimharnessTypeError(
            f'fn must be callable, got {fn!r} of type {type(fn).__name__}',
            expected='callable',
            actual=type(fn),
        )
    t = T.to_type(type_spec)
    return to_container(_from_tree(fn, t), t)


__all__ = [
    'computation',
    'eager_values_to_numpy',
    'structure_from_tensor_type_tree',
    'to_type',
    'transform_args',
    'transform_result',
    'type_to_tf_tensor_specs',
]
