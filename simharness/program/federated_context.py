"""`FederatedContext` (``tff.program``): the context a federated program's logic runs in.

A federated context invokes computations whose results hold only
server-placed data, and gives those results back as structures of
`MaterializableValueReference` s (awaited with `materialize_value`).
Arguments: server values as materializable structures, client values as
what a `FederatedDataSourceIterator.select` returns.

`check_in_federated_context()` raises unless the current context is one
(program logic calls it first).
"""

from __future__ import annotations

import abc
from typing import Any, Optional, Union

from simharness.core import context_stack
from simharness.core import types as T
from simharness.errors import SimharnessTypeError, SimharnessValueError
from simharness.program import value_reference

__all__ = [
    'ComputationArgValue',
    'FederatedContext',
    'check_in_federated_context',
    'contains_only_server_placed_data',
]

#: What a computation invoked in a federated context may take as its argument.
ComputationArgValue = Union[value_reference.MaterializableStructure, object]


def _preorder(t: T.Type):
    yield t
    if isinstance(t, T.StructType):
        for e in t:
            yield from _preorder(e)
    elif isinstance(t, T.FederatedType):
        yield from _preorder(t.member)
    elif isinstance(t, T.SequenceType):
        yield from _preorder(t.element)
    elif isinstance(t, T.FunctionType):
        if t.parameter is not None:
            yield from _preorder(t.parameter)
        yield from _preorder(t.result)


def _server_data(t: T.Type) -> bool:
    return isinstance(t, (T.StructType, T.SequenceType, T.TensorType)) or (
        isinstance(t, T.FederatedType) and t.placement is T.SERVER
    )


def contains_only_server_placed_data(type_signature: T.Type) -> bool:
    """Whether `type_signature` holds only structs, sequences, tensors and server-placed values.

    Raises:
        SimharnessTypeError: `type_signature` is not a `Type`.
    """
    if not isinstance(type_signature, T.Type):
        raise SimharnessTypeError(
            f'type_signature must be a simharness Type, got {type_signature!r} of type '
            f'{type(type_signature).__name__}',
            expected=T.Type,
            actual=type(type_signature),
        )
    return all(_server_data(t) for t in _preorder(type_signature))


class FederatedContext(abc.ABC):
    """A context that invokes computations and returns structures of value references.

    Install one with ``simharness.framework.set_default_context(ctx)`` or
    ``simharness.framework.get_context_stack().install(ctx)``.
    """

    @abc.abstractmethod
    def invoke(self, comp: Any, arg: Optional[ComputationArgValue]) -> Any:
        """Invokes `comp` on `arg`.

        Args:
            comp: the computation.
            arg: its argument (None for none): server values as materializable
                structures, client values as an iterator's `select` gives them.

        Returns:
            The result: a structure of `MaterializableValueReference` s.

        Raises:
            ValueError: the result type of `comp` holds more than structures,
                server-placed values, sequences and tensors.
        """

    def close(self) -> None:
        """Releases what the context holds (nothing by default)."""


def check_in_federated_context() -> None:
    """Raises unless the current context is a `FederatedContext`.

    Raises:
        SimharnessValueError (a ValueError): the current context is not one.
    """
    current = context_stack.get_context()
    if not isinstance(current, FederatedContext):
        raise SimharnessValueError(
            'Expected the current context to be a `tff.program.FederatedContext`, found '
            f'{type(current)}.'
        )
