"""The native platform (``tff.program``): `NativeFederatedContext` and `NativeValueReference`.

`NativeFederatedContext(context)` runs computations on an
`AsyncExecutionContext` (``simharness.backends.native.create_async_local_cpp_execution_context()``,
or ``AsyncExecutionContext(factory, ...)``). `invoke` must be called while an
event loop runs (from program logic, a coroutine): it starts the computation
as an `asyncio.Task` and returns at once a structure of
`NativeValueReference` s, one per tensor or sequence of the result, which
`materialize_value` awaits. Value references in the argument are awaited
before the computation runs.
"""

from __future__ import annotations

import asyncio
from typing import Any, Optional

from simharness.context import AsyncExecutionContext
from simharness.core import types as T
from simharness.core.structure import Struct, from_container, to_container
from simharness.errors import SimharnessTypeError, SimharnessValueError
from simharness.program import federated_context, value_reference

__all__ = ['NativeFederatedContext', 'NativeValueReference']


class NativeValueReference(value_reference.MaterializableValueReference):
    """A `MaterializableValueReference` backed by an `asyncio.Task`.

    Args:
        task: the task whose result is the value.
        type_signature: the value's `TensorType` or `SequenceType`.
    """

    def __init__(
        self, task: asyncio.Task, type_signature: value_reference.MaterializableTypeSignature
    ):
        self._task = task
        self._type_signature = type_signature

    @property
    def type_signature(self) -> value_reference.MaterializableTypeSignature:
        return self._type_signature

    @property
    def task(self) -> asyncio.Task:
        """The task whose result is the value (ours)."""
        return self._task

    async def get_value(self) -> value_reference.MaterializedValue:
        """The value (a numpy scalar or array; a list of elements for a sequence)."""
        return await self._task

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, NativeValueReference):
            return NotImplemented
        return (self._type_signature, self._task) == (other.type_signature, other.task)

    def __repr__(self) -> str:
        return f'NativeValueReference({self._type_signature})'


async def _as_struct(task: asyncio.Future, t: T.StructType) -> Struct:
    value = await task
    return value if isinstance(value, Struct) else from_container(value, t)


async def _element(task: asyncio.Future, index: int) -> Any:
    return (await task)[index]


def _create_structure_of_references(task: asyncio.Future, t: T.Type) -> Any:
    """A `Struct` of `NativeValueReference` s (one per tensor or sequence of `t`) over `task`.

    Raises:
        NotImplementedError: `t` holds a type other than structs, server-placed
            values, sequences and tensors.
    """
    if isinstance(t, T.StructType):
        struct_task = asyncio.create_task(_as_struct(task, t))  # converted once for all
        elements = []
        for index, (name, element_type) in enumerate(t.items()):
            element_task = asyncio.create_task(_element(struct_task, index))
            elements.append((name, _create_structure_of_references(element_task, element_type)))
        return Struct(elements)
    if isinstance(t, T.FederatedType) and t.placement is T.SERVER:
        return _create_structure_of_references(task, t.member)
    if isinstance(t, (T.SequenceType, T.TensorType)):
        return NativeValueReference(task, t)
    raise NotImplementedError(f'Unexpected type found: {t}.')


def _to_py_container(value: Any, t: T.Type) -> Any:
    """`value` (`Struct` s of references) in the Python containers `t` records."""
    if isinstance(t, T.FederatedType):
        return _to_py_container(value, t.member)
    if isinstance(t, T.StructType) and isinstance(value, Struct):
        elements = Struct((n, _to_py_container(v, e)) for (n, e), v in zip(t.items(), value))
        return to_container(elements, t)
    return value


class NativeFederatedContext(federated_context.FederatedContext):
    """A `FederatedContext` that runs computations on an `AsyncExecutionContext`.

    Args:
        context: the `AsyncExecutionContext` the computations run on (left
            open by `close`: it belongs to the caller).

    Raises:
        SimharnessTypeError: `context` is not an `AsyncExecutionContext`.
    """

    def __init__(self, context: AsyncExecutionContext):
        if not isinstance(context, AsyncExecutionContext):
            raise SimharnessTypeError(
                f'context must be an AsyncExecutionContext, got {type(context).__name__} '
                f'{context!r}; make one with simharness.backends.native.'
                'create_async_local_cpp_execution_context()',
                expected=AsyncExecutionContext,
                actual=type(context),
            )
        self._context = context

    def invoke(self, comp: Any, arg: Optional[federated_context.ComputationArgValue]) -> Any:
        """Starts `comp` on `arg` as a task; returns its result as a structure of references.

        Must be called while an event loop runs.

        Raises:
            SimharnessValueError (a ValueError): the result type of `comp` holds
                more than structures, server-placed values, sequences and tensors.
        """
        result_type = comp.type_signature.result
        if not federated_context.contains_only_server_placed_data(result_type):
            raise SimharnessValueError(
                'Expected the result type of `comp` to contain only structures, server-placed '
                f'values, or tensors, found {result_type}.'
            )

        try:
            asyncio.get_running_loop()
        except RuntimeError:
            raise SimharnessValueError(
                'NativeFederatedContext.invoke needs a running event loop: call computations '
                'from program logic (a coroutine, run with asyncio.run)'
            ) from None

        async def _invoke(arg: Any) -> Any:
            if comp.type_signature.parameter is not None:
                arg = await value_reference.materialize_value(arg)
            return await self._context.invoke(comp, arg)

        task = asyncio.create_task(_invoke(arg))
        return _to_py_container(_create_structure_of_references(task, result_type), result_type)
