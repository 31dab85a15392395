"""Value references (``tff.program`` / federated_language): server values not yet materialized.

A `MaterializableValueReference` stands for a tensor or sequence value (a
computation's result, say) that becomes a Python / numpy value when its
`get_value` is awaited; `materialize_value` awaits every reference in a
structure and gives the structure back with the values in their place.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Iterable
from typing import Any, Union

import numpy as np

from simharness.core import types as T
from simharness.core.arrays import TypedObject
from simharness.program import structure_utils

__all__ = [
    'MaterializableStructure',
    'MaterializableTypeSignature',
    'MaterializableValue',
    'MaterializableValueReference',
    'MaterializedStructure',
    'MaterializedValue',
    'materialize_value',
]

#: The types a reference may have.
MaterializableTypeSignature = Union[T.TensorType, T.SequenceType]
_MaterializedArrayValue = Union[bool, int, float, complex, str, bytes, np.generic, np.ndarray]
#: A materialized value: an array value, or an iterable of them (a sequence).
MaterializedValue = Union[_MaterializedArrayValue, Iterable[_MaterializedArrayValue]]
#: A structure (nested containers) of materialized values.
MaterializedStructure = Any
#: A materialized value or a reference to one.
MaterializableValue = Union[MaterializedValue, 'MaterializableValueReference']
#: A structure (nested containers) of materializable values.
MaterializableStructure = Any


class MaterializableValueReference(TypedObject, abc.ABC):
    """A reference to a server-placed (or unplaced) tensor or sequence value."""

    @property
    @abc.abstractmethod
    def type_signature(self) -> MaterializableTypeSignature:
        """The `TensorType` or `SequenceType` of the referenced value."""

    @abc.abstractmethod
    async def get_value(self) -> MaterializedValue:
        """The referenced value: a numpy scalar or array (a tensor), an iterable (a sequence)."""


async def _materialize(value: Any) -> Any:
    if isinstance(value, MaterializableValueReference):
        return await value.get_value()
    return value


async def materialize_value(value: MaterializableStructure) -> MaterializedStructure:
    """`value` with every `MaterializableValueReference` in it replaced by its value.

    The references are awaited concurrently; containers keep their types.
    """
    leaves = structure_utils.flatten(value)
    materialized = await asyncio.gather(*[_materialize(v) for v in leaves])
    return structure_utils.pack_as(value, list(materialized))
