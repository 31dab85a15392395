"""TFF's type errors (``tff.types.TypeNotAssignableError`` and its kin), `TypeRelation` and
the sentence naming two mismatched types: what `simharness.core.types`' checks raise.

`TypeError`s of simharness's error tree (`SimharnessTypeError`), with TFF's attributes.
"""

from __future__ import annotations

import enum
from typing import Protocol

from simharness.errors import SimharnessTypeError


class Type(Protocol):
    """What these errors need of a type (`simharness.core.types.Type`, which imports this
    module): its one-line form."""

    def compact_representation(self) -> str: ...


__all__ = [
    'TypeNotAssignableError',
    'TypeRelation',
    'TypesNotEquivalentError',
    'TypesNotIdenticalError',
    'UnexpectedTypeError',
    'type_mismatch_error_message',
]


@enum.unique
class TypeRelation(enum.Enum):
    """How two types were compared (TFF's ``tff.types.TypeRelation``)."""

    EQUIVALENT = 'equivalent'
    IDENTICAL = 'identical'
    ASSIGNABLE = 'assignable'


def type_mismatch_error_message(
    first: 'Type', second: 'Type', relation: TypeRelation, second_is_expected: bool = False
) -> str:
    """TFF's sentence for two types that are not in `relation`: ``Type `float32` is not
    assignable to type `int32` `` (their `repr` where their one-line forms are equal, e.g.
    structs that differ only in their Python container)."""
    first_str, second_str = first.compact_representation(), second.compact_representation()
    if first_str == second_str:
        first_str, second_str = repr(first), repr(second)
    expected = 'expected ' if second_is_expected else ''
    return f'Type `{first_str}` is not {relation.value} to {expected}type `{second_str}`'


class TypeNotAssignableError(SimharnessTypeError):
    """A value or type is not assignable to the type expected (TFF's
    ``tff.types.TypeNotAssignableError``, a `TypeError`); `source_type` and `target_type`
    (also `actual` and `expected`) are the two types."""

    def __init__(self, source_type: 'Type', target_type: 'Type', message: str = '') -> None:
        text = message or type_mismatch_error_message(
            source_type, target_type, TypeRelation.ASSIGNABLE
        )
        super().__init__(text, expected=target_type, actual=source_type)
        self.message = text
        self.source_type = source_type
        self.target_type = target_type


class TypesNotEquivalentError(SimharnessTypeError):
    """Two types are not equivalent (TFF's ``tff.types.TypesNotEquivalentError``)."""

    def __init__(self, first_type: 'Type', second_type: 'Type') -> None:
        text = type_mismatch_error_message(first_type, second_type, TypeRelation.EQUIVALENT)
        super().__init__(text, expected=second_type, actual=first_type)
        self.message = text
        self.first_type = first_type
        self.second_type = second_type


class TypesNotIdenticalError(SimharnessTypeError):
    """Two types are not identical (TFF's ``tff.types.TypesNotIdenticalError``)."""

    def __init__(self, first_type: 'Type', second_type: 'Type') -> None:
        text = type_mismatch_error_message(first_type, second_type, TypeRelation.IDENTICAL)
        super().__init__(text, expected=second_type, actual=first_type)
        self.message = text
        self.first_type = first_type
        self.second_type = second_type


class UnexpectedTypeError(SimharnessTypeError):
    """A type of another kind than expected (TFF's ``tff.types.UnexpectedTypeError``):
    `expected` is the kind (a `Type` subclass), `actual` the type found."""

    def __init__(self, expected: type, actual: 'Type') -> None:
        super().__init__(
            f'Expected type of kind {expected}, found type {actual}',
            expected=expected,
            actual=actual,
        )
