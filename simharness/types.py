"""`simharness.types`: TFF 0.88's `tff.types`, the type classes and helpers by that path.

(``tff.types.SequenceType(...)``, ``tff.types.TensorType(...)``: TFF's own tests and
its simple_fedavg example write them so.) Left out, as no TFF 0.88 tutorial or example
calls them: TFF's type serialization, its error classes, ``TypeRelation``, and
``contains``/``count`` over a predicate.
"""

from collections.abc import Mapping
from typing import Callable, cast

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
