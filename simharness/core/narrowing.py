"""Narrowing a `Type` to the kind that code knows (or must check) it is.

A computation's `type_signature` is a `FunctionType`, but its `parameter` and
`result` are only `Type` s: code that reads ``result.member`` or ``parameter[1]``
narrows with these instead of typing the signature `Any`::

    state_type = N.member_of(init_fn.type_signature.result)
    data_type = N.parameter_element(next_fn.type_signature, 1)

Each raises a `SimharnessTypeError` (a `TypeError`) naming `what` was narrowed,
the kind expected and the type found.
"""

from __future__ import annotations

from typing import TypeVar, Union

from simharness.core.types import FederatedType, FunctionType, StructType, TensorType, Type
from simharness.errors import SimharnessTypeError

__all__ = [
    'as_federated',
    'as_function',
    'as_struct',
    'as_tensor_or_struct',
    'member_of',
    'parameter_element',
]

_KindT = TypeVar('_KindT', bound=Type)


def _narrow(t: object, kind: type[_KindT], expected: str, what: str) -> _KindT:
    if not isinstance(t, kind):
        raise SimharnessTypeError(
            f'{what}: expected {expected}, got {t} ({type(t).__name__})', expected=kind, actual=t
        )
    return t


def as_function(t: object, what: str = 'type') -> FunctionType:
    """`t` as a `FunctionType` (a computation's signature)."""
    return _narrow(t, FunctionType, 'a function type', what)


def as_federated(t: object, what: str = 'type') -> FederatedType:
    """`t` as a `FederatedType` (``member@placement``)."""
    return _narrow(t, FederatedType, 'a federated type', what)


def as_struct(t: object, what: str = 'type') -> StructType:
    """`t` as a `StructType`."""
    return _narrow(t, StructType, 'a struct type', what)


def as_tensor_or_struct(t: object, what: str = 'type') -> Union[TensorType, StructType]:
    """`t` as a `TensorType` or a `StructType` (a value an aggregator takes)."""
    if isinstance(t, StructType):
        return t
    return _narrow(t, TensorType, 'a tensor or struct type', what)


def member_of(t: object, what: str = 'type') -> Type:
    """The member type ``T`` of the federated type ``T@P``."""
    return as_federated(t, what).member


def parameter_element(t: object, index: Union[int, str], what: str = 'computation') -> Type:
    """The type of argument `index` (a position or a name) of the function type `t`: element
    `index` of its struct parameter."""
    return as_struct(as_function(t, what).parameter, f'{what} parameter')[index]
