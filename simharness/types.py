"""`simharness.types`: TFF 0.88's `tff.types`, the type classes and helpers by that path.

(``tff.types.SequenceType(...)``, ``tff.types.TensorType(...)``: TFF's own tests and
its simple_fedavg example write them so.) With TFF's error classes (`TypeNotAssignableError`
and its kin: what ``Type.check_assignable_from`` and a computation given a value of
another type raise, `TypeError`s as in TFF), ``TypeRelation``, and ``contains`` / ``count``
/ ``contains_only`` over a predicate. Left out: TFF's type serialization
(``serialize_type`` returns TFF's protocol buffer, which simharness does not have).
"""

import functools
import operator
from collections.abc import Mapping
from typing import Callable, Iterator, Optional, cast

import attrs

from simharness.aggregators.factory import (
    is_structure_of_floats,
    is_structure_of_integers,
    is_structure_of_tensors,
)
from simharness.core.arrays import ArrayShape
from simharness.core.types import (
    AbstractType,
    FederatedType,
    FunctionType,
    PlacementType,
    SequenceType,
    StructType,
    StructWithPythonType,
    TensorType,
    Type,
    infer_type,
    is_namedtuple,
    to_type,
    type_at_clients,
    type_at_server,
)
from simharness.core.type_errors import (
    TypeNotAssignableError,
    TypeRelation,
    TypesNotEquivalentError,
    TypesNotIdenticalError,
    UnexpectedTypeError,
    type_mismatch_error_message,
)
from simharness.mergeable import type_to_py_container
from simharness.tensorflow import structure_from_tensor_type_tree, type_to_tf_tensor_specs

__all__ = [
    'AbstractType',
    'ArrayShape',
    'FederatedType',
    'FunctionType',
    'PlacementType',
    'SequenceType',
    'StructType',
    'StructWithPythonType',
    'TensorType',
    'Type',
    'TypeNotAssignableError',
    'TypeRelation',
    'TypesNotEquivalentError',
    'TypesNotIdenticalError',
    'UnexpectedTypeError',
    'contains',
    'contains_only',
    'count',
    'is_shape_fully_defined',
    'is_tensorflow_compatible_type',
    'num_elements_in_shape',
    'structure_from_tensor_type_tree',
    'type_mismatch_error_message',
    'type_to_py_container',
    'type_to_tf_tensor_specs',
    'is_structure_of_floats',
    'is_structure_of_integers',
    'is_structure_of_tensors',
    'at_clients',
    'at_server',
    'tensorflow_to_type',
    'to_type',
    'type_from_tensors',
]

# TFF had these names in `tff.types` up to 0.66 (`tff.FederatedType(..., tff.CLIENTS)` since).
at_clients = type_at_clients
at_server = type_at_server

# TFF 0.68-0.88 export ``tensorflow_to_type`` here too (``tff.tensorflow.to_type`` is the same
# function in 0.88): simharness's `to_type` already accepts TF's type specs inside structures.
tensorflow_to_type = to_type


def type_from_tensors(tensors: object) -> Type:
    """The type of a structure of tensors, variables or arrays, graph tensors included (TFF
    had it by this name up to 0.64; `infer_type` since, for values)."""

    def spec(x: object) -> object:
        dtype, shape = getattr(x, 'dtype', None), getattr(x, 'shape', None)
        if dtype is not None and shape is not None:  # a tensor, variable or array
            return TensorType(getattr(dtype, 'base_dtype', dtype), shape)
        if isinstance(x, tuple) and is_namedtuple(x):
            return cast(Callable[..., object], type(x))(*(spec(v) for v in x))
        if attrs.has(type(x)):
            fields = attrs.fields(cast('type[attrs.AttrsInstance]', type(x)))
            changes = {a.name: spec(getattr(x, a.name)) for a in fields}
            return cast(Callable[..., object], attrs.evolve)(x, **changes)
        if isinstance(x, Mapping):
            return cast(Callable[[object], object], type(x))((k, spec(v)) for k, v in x.items())
        if isinstance(x, (list, tuple)):
            return type(x)(spec(v) for v in x)
        return infer_type(x)

    return to_type(spec(tensors))


def preorder_types(type_signature: Type) -> Iterator[Type]:
    """`type_signature` and every type inside it, parents before their children."""
    yield type_signature
    for child in type_signature.children():
        yield from preorder_types(child)


def count(type_signature: Type, predicate: Callable[[Type], bool]) -> int:
    """How many types in `type_signature` (itself included, at any depth) pass `predicate`."""
    return sum(1 for t in preorder_types(type_signature) if predicate(t))


def contains(type_signature: Type, predicate: Callable[[Type], bool]) -> bool:
    """Whether a type in `type_signature` (itself included, at any depth) passes `predicate`."""
    return any(predicate(t) for t in preorder_types(type_signature))


def contains_only(type_signature: Type, predicate: Callable[[Type], bool]) -> bool:
    """Whether every type in `type_signature` (itself included) passes `predicate`."""
    return all(predicate(t) for t in preorder_types(type_signature))


def is_tensorflow_compatible_type(type_spec: Optional[Type]) -> bool:
    """Whether a TensorFlow computation may take or return `type_spec`: tensors, structs
    and sequences only (None, no parameter, is)."""
    if type_spec is None:
        return True
    return contains_only(type_spec, lambda t: isinstance(t, (SequenceType, StructType, TensorType)))


def is_shape_fully_defined(shape: ArrayShape) -> bool:
    """Whether `shape` has a known rank and every dimension known."""
    return shape is not None and all(dim is not None for dim in shape)


def num_elements_in_shape(shape: ArrayShape) -> Optional[int]:
    """The number of elements of a fully defined `shape`, else None."""
    if not is_shape_fully_defined(shape):
        return None
    return functools.reduce(operator.mul, cast('tuple[int, ...]', shape), 1)
