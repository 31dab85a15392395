"""Type checks of learning processes (TFF's ``learning/templates/type_checks.py``)."""

from __future__ import annotations

from typing import Optional

from simharness.core import types as T

__all__ = [
    'ClientSequenceTypeError',
    'check_is_client_placed_structure_of_sequences',
    'is_tensorflow_compatible_type',
]


class ClientSequenceTypeError(Exception):
    """A type is not a CLIENTS-placed structure of sequences (TFF's class)."""


def is_tensorflow_compatible_type(t: T.Type) -> bool:
    """Whether `t` holds only tensors, structs and sequences (no federated or function types)."""
    if isinstance(t, T.TensorType):
        return True
    if isinstance(t, T.SequenceType):
        return is_tensorflow_compatible_type(t.element)
    if isinstance(t, T.StructType):
        return all(is_tensorflow_compatible_type(e) for e in t)
    return False


def _is_structure_of_sequences(t: T.Type) -> bool:
    if isinstance(t, T.SequenceType):
        return is_tensorflow_compatible_type(t.element)
    if isinstance(t, T.StructType):
        return all(_is_structure_of_sequences(e) for e in t)
    return False


def check_is_client_placed_structure_of_sequences(
    type_spec: T.Type, error_message: Optional[str] = None
) -> None:
    """Raises `ClientSequenceTypeError` unless `type_spec` is ``{structure of sequences}@CLIENTS``."""
    if error_message is None:
        error_message = (
            'Expected a federated type with placement `CLIENTS` and with member type that is a '
            f'structure of TensorFlow-compatible sequences. Found {type_spec}.'
        )
    if (
        not isinstance(type_spec, T.FederatedType)
        or type_spec.placement is not T.CLIENTS
        or not _is_structure_of_sequences(type_spec.member)
    ):
        raise ClientSequenceTypeError(error_message)
