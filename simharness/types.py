"""`simharness.types`: TFF 0.88's `tff.types`, the type classes and helpers by that path.

(``tff.types.SequenceType(...)``, ``tff.types.TensorType(...)``: TFF's own tests and
its simple_fedavg example write them so.) Left out, as no TFF 0.88 tutorial or example
calls them: TFF's type serialization, its error classes, ``TypeRelation``, and
``contains``/``count`` over a predicate.
"""

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
    to_type,
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
    'to_type',
]
