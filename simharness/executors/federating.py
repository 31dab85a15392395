"""`FederatingExecutor` and the `FederatingStrategy` interface.

What it does: gives meaning to placements. Unplaced values and compiled TF
go to the unplaced child; federated values and intrinsics are handed to a
`FederatingStrategy`, which decides where client and server values live
and how each intrinsic runs (see `resolving_strategy`).

What it leaves to other layers: lambdas and references (the layer above),
running TF (the children), threads and processes (the delegating
children).
"""

from __future__ import annotations

import abc
import contextlib
from typing import Any, Callable, Dict, Optional

from simharness.core import building_blocks as bb
from simharness.core import types as T
from simharness.core.computation import Computation
from simharness.core.structure import Struct, from_container
from simharness.errors import (
    ExecutorClosedError,
    SimharnessError,
    SimharnessTypeError,
    SimharnessValueError,
)
from simharness.executors.base import (
    BatchExecutor,
    Executor,
    ExecutorValue,
    normalize_struct_elements,
    selection_index,
)
from simharness.validation import check_callable, check_instance, check_type_spec_matches


class FederatingValue(ExecutorValue):
    """A value of the federating layer.

    Kinds: 'unplaced' (a value of the unplaced child; `source` keeps the
    building block of compiled computations so that they can be embedded in
    other children), 'federated' (a strategy-specific payload), 'struct'
    (a list of (name, FederatingValue)), 'intrinsic' ((uri, static args)),
    'placement', 'lambda' (the `Lambda` block, embedded as is).
    """

    __slots__ = ('kind', 'payload', '_type', 'source', '_executor')

    def __init__(
        self,
        kind: str,
        payload: Any,
        type_spec: T.Type,
        executor: 'FederatingExecutor',
        source: Optional[bb.ComputationBuildingBlock] = None,
    ):
        self.kind = kind
        self.payload = payload
        self._type = type_spec
        self._executor = executor
        self.source = source

    @property
    def type_signature(self) -> T.Type:
        return self._type

    async def compute(self) -> Any:
        if self.kind == 'unplaced':
            if not isinstance(self.payload, ExecutorValue):
                raise SimharnessRuntimeError(
                    f'an unplaced value of type {self._type} holds {self.payload!r:.80} '
                    f'({type(self.payload).__name__}), not a value of the unplaced executor'
                )
            return await self.payload.compute()
        if self.kind == 'federated':
            _check_embedded(self.payload, self._type)
            return await self._executor.strategy.compute_federated_value(self)
        if self.kind == 'struct':
            return Struct([(n, await v.compute()) for n, v in self.payload])
        raise SimharnessTypeError(f'a value of kind {self.kind} ({self._type}) cannot be computed')

    def __repr__(self) -> str:
        return f'FederatingValue({self.kind}: {self._type})'


class SimharnessRuntimeError(SimharnessError, RuntimeError):
    """A value of the federating layer whose contents are not embedded (TFF's RuntimeError)."""


def _check_embedded(payload: Any, t: T.Type) -> None:
    """A federated payload of client groups (lists) holds embedded values, not Python
    numbers or strings (TFF's TypeError); other payloads are the strategy's to read."""
    if not isinstance(payload, list):
        return
    for group in payload:
        for x in group if isinstance(group, list) else [group]:
            if isinstance(x, (int, float, complex, str, bytes)):
                raise SimharnessTypeError(
                    f'a federated value of type {t} holds {x!r:.80} ({type(x).__name__}), not '
                    'an embedded value',
                    expected=ExecutorValue,
                    actual=type(x),
                )


class FederatingStrategy(abc.ABC):
    """How a `FederatingExecutor` places values and runs intrinsics."""

    def __init__(self, executor: 'FederatingExecutor'):
        self.executor = executor

    @abc.abstractmethod
    async def ingest_federated(self, value: Any, type_spec: T.FederatedType) -> FederatingValue:
        """Embeds a Python value of a federated type."""

    @abc.abstractmethod
    async def compute_federated_value(self, value: FederatingValue) -> Any:
        """Materializes a federated value (a list for clients)."""

    @abc.abstractmethod
    async def select_federated(self, value: FederatingValue, index: int) -> FederatingValue:
        """Element `index` of every member of a federated struct."""

    @abc.abstractmethod
    async def compute_intrinsic(
        self, uri: str, static: Dict[str, Any], arg: Optional[FederatingValue], result_type: T.Type
    ) -> FederatingValue:
        """Runs the intrinsic `uri` on `arg`."""

    @abc.abstractmethod
    def close(self) -> None:
        """Closes the children the strategy owns."""

    def check_placement(self, placement: T.PlacementLiteral, t: T.Type) -> None:
        """Raises a ValueError when the strategy has no executors for `placement` (a value
        of type `t`, or a function returning one, is embedded there); by default every
        placement is served."""

    def busy(self) -> Any:
        """A context manager around each operation of the executor (the strategy may track
        what is running, e.g. to batch work); by default it does nothing."""
        return contextlib.nullcontext()


class FederatingExecutor(Executor):
    """Placements and intrinsics, as in TFF's `FederatingExecutor`.

    Args:
      strategy_factory: called with this executor, returns its strategy
        (e.g. ``FederatedResolvingStrategy.factory({...})``).
      unplaced_executor: runs unplaced values and compiled TF.

    Raises:
      TypeError: `strategy_factory` is not callable or does not return a
        `FederatingStrategy`; `unplaced_executor` is not an `Executor`.
    """

    def __init__(
        self,
        strategy_factory: Callable[['FederatingExecutor'], FederatingStrategy],
        unplaced_executor: BatchExecutor,
    ):
        check_callable(
            'FederatingExecutor strategy_factory',
            strategy_factory,
            'a strategy factory: a callable taking the FederatingExecutor and '
            'returning a FederatingStrategy (e.g. FederatedResolvingStrategy.factory('
            '{SERVER: ..., CLIENTS: [...]}))',
        )
        check_instance(
            'FederatingExecutor unplaced_executor',
            unplaced_executor,
            Executor,
            'an Executor (e.g. an EagerTFExecutor)',
        )
        self._unplaced = unplaced_executor
        self._closed = False
        strategy = strategy_factory(self)
        if not isinstance(strategy, FederatingStrategy):
            raise SimharnessTypeError(
                f'FederatingExecutor strategy_factory must return a FederatingStrategy, '
                f'{strategy_factory!r} returned {strategy!r} of type {type(strategy).__name__}',
                expected=FederatingStrategy,
                actual=type(strategy),
            )
        self.strategy = strategy

    @property
    def unplaced_executor(self) -> BatchExecutor:
        return self._unplaced

    def _check_open(self) -> None:
        if self._closed:
            raise ExecutorClosedError('this FederatingExecutor is closed')

    def unplaced(
        self, value: ExecutorValue, source: Optional[bb.ComputationBuildingBlock] = None
    ) -> FederatingValue:
        return FederatingValue('unplaced', value, value.type_signature, self, source)

    async def _create_value(self, value: Any, type_spec: Any = None) -> FederatingValue:
        """TFF 0.19's kinds: an `IntrinsicDef` with its concrete type, a placement literal,
        compiled computations, intrinsics and lambdas (blocks or `Computation`s), and Python
        values of a given type.

        Raises:
          SimharnessTypeError: `value` does not match `type_spec`, or a Python value (or an
            `IntrinsicDef`) without a `type_spec`.
          SimharnessValueError: an unrecognized intrinsic URI, or a building block of another
            kind (references, calls, selections, structs, blocks, placements: only a
            `ReferenceResolvingExecutor` above evaluates those).
        """
        self._check_open()
        if isinstance(value, FederatingValue):
            check_type_spec_matches(type_spec, value.type_signature, 'value')
            return value
        t = None if type_spec is None else T.to_type(type_spec)
        if isinstance(value, bb.IntrinsicDef):
            if t is None:
                raise SimharnessTypeError(
                    f'{value!r} is embedded with its concrete type: pass type_spec (e.g. the '
                    'FunctionType of this use)',
                    expected=T.Type,
                    actual=None,
                )
            a_value = value.type_signature is not None and not isinstance(
                value.type_signature, T.FunctionType
            )  # generic_zero
            if not a_value and not isinstance(t, T.FunctionType):
                raise SimharnessTypeError(
                    f'{value!r} is a function; type_spec {t} is not a function type',
                    expected=T.FunctionType,
                    actual=t,
                )
            self._check_result_placement(t)
            return FederatingValue('intrinsic', (value.uri, {}), t, self)
        if isinstance(value, T.PlacementLiteral):  # simharness.SERVER / CLIENTS
            t = T.PlacementType() if t is None else t
            if not isinstance(t, T.PlacementType):
                raise SimharnessTypeError(
                    f'placement {value} of type placement is not '
                    f'assignable to the type_spec {t} given with it',
                    expected=T.PlacementType(),
                    actual=t,
                )
            return FederatingValue('placement', value, t, self)
        if isinstance(value, Computation):  # a computation given as is (TFF's raw API)
            hint = t.parameter if isinstance(t, T.FunctionType) else None
            value = value.to_building_block(hint)
        if isinstance(value, bb.ComputationBuildingBlock):
            check_type_spec_matches(
                t, value.type_signature, f'{type(value).__name__} building block'
            )
            if isinstance(value, bb.Intrinsic):
                if bb.uri_to_intrinsic_def(value.uri) is None:
                    raise SimharnessValueError(
                        f'Encountered an unrecognized intrinsic {value.uri!r}'
                    )
                self._check_result_placement(value.type_signature)
                return FederatingValue(
                    'intrinsic', (value.uri, value.static), value.type_signature, self
                )
            if isinstance(value, bb.CompiledComputation):
                return self.unplaced(
                    await self._unplaced.create_value(value, value.type_signature), value
                )
            if isinstance(value, bb.Lambda):
                # Embedded as is (TFF's); an intrinsic given it asks for a tf_computation.
                return FederatingValue('lambda', value, value.type_signature, self, value)
            raise SimharnessValueError(
                f'Unsupported computation building block of type {type(value).__name__} '
                f'({value.type_signature}): the federating layer embeds compiled computations, '
                'intrinsics and lambdas; a ReferenceResolvingExecutor above it evaluates the '
                'others'
            )
        if isinstance(value, ExecutorValue):
            raise SimharnessTypeError(
                f'{value!r} is a value of another executor, not of this FederatingExecutor',
                actual=type(value),
            )
        if t is None:
            raise SimharnessTypeError(
                f'create_value needs the type of {value!r} ({type(value).__name__}): the '
                'federating layer embeds Python values of a given type_spec',
                expected=T.Type,
                actual=None,
            )
        if isinstance(t, T.FederatedType):
            return await self.strategy.ingest_federated(value, t)
        if isinstance(t, T.StructType) and any(T.contains(e, (T.FederatedType,)) for e in t):
            s = from_container(value, t)
            elems = [(n, await self.create_value(v, e)) for (n, e), v in zip(t.items(), s)]
            return FederatingValue('struct', elems, t, self)
        return self.unplaced(await self._unplaced.create_value(value, t))

    def _check_result_placement(self, t: T.Type) -> None:
        """TFF's check of an intrinsic embedded: the strategy serves its result's placement."""
        if isinstance(t, T.FunctionType) and isinstance(t.result, T.FederatedType):
            self.strategy.check_placement(t.result.placement, t)

    async def _create_call(
        self, comp: ExecutorValue, arg: Optional[ExecutorValue] = None
    ) -> FederatingValue:
        """Raises:
        SimharnessTypeError: `comp` or `arg` is not a value of this executor, or `arg`
          does not match the parameter of `comp`'s function type.
        SimharnessValueError: `comp` is not a compiled computation or an intrinsic.
        NotImplementedError: the strategy does not run the intrinsic.
        """
        self._check_open()
        if not isinstance(comp, FederatingValue):
            raise SimharnessTypeError(
                f'{comp!r} is not a value of this FederatingExecutor',
                expected=FederatingValue,
                actual=type(comp),
            )
        ft = comp.type_signature
        if arg is not None:
            if not isinstance(arg, FederatingValue):
                raise SimharnessTypeError(
                    f'the argument {arg!r} is not a value of this FederatingExecutor',
                    expected=FederatingValue,
                    actual=type(arg),
                )
            if not isinstance(ft, T.FunctionType) or ft.parameter is None:
                raise SimharnessTypeError(
                    f'cannot call a value of type {ft} with an argument '
                    f'of type {arg.type_signature}',
                    actual=ft,
                )
            ft.parameter.check_assignable_from(arg.type_signature, 'argument')
        if comp.kind == 'intrinsic':
            uri, static = comp.payload
            rt = ft.result if isinstance(ft, T.FunctionType) else ft
            # values passed to this executor are its own (FederatingValues)
            return await self.strategy.compute_intrinsic(uri, static, arg, rt)
        if comp.kind == 'unplaced' and isinstance(ft, T.FunctionType):
            target_arg = None if arg is None else await self.to_unplaced(arg)
            return self.unplaced(await self._unplaced.create_call(comp.payload, target_arg))
        raise SimharnessValueError(
            f'Directly calling a {comp.kind} value of type {ft} is unsupported: the federating '
            'layer calls compiled computations and intrinsics'
        )

    async def to_unplaced(self, v: FederatingValue) -> ExecutorValue:
        if v.kind == 'unplaced':
            return v.payload
        if v.kind == 'struct':
            return await self._unplaced.create_struct(
                [(n, await self.to_unplaced(e)) for n, e in v.payload]
            )
        raise SimharnessTypeError(
            f'a value of type {v.type_signature} cannot be passed to an unplaced tf_computation; '
            'use federated_map (or federated_apply at the server)',
            actual=v.type_signature,
        )

    async def _create_struct(self, elements: Any) -> FederatingValue:
        self._check_open()
        items = normalize_struct_elements(elements)
        for n, v in items:
            if not isinstance(v, FederatingValue):
                raise SimharnessTypeError(
                    f'struct element {n if n is not None else ""!s} {v!r} is not a value of this '
                    'FederatingExecutor',
                    expected=FederatingValue,
                    actual=type(v),
                )
        t = T.StructType([(n, v.type_signature) for n, v in items])
        return FederatingValue('struct', list(items), t, self)

    async def _create_selection(
        self, source: ExecutorValue, index: Optional[int] = None, name: Optional[str] = None
    ) -> FederatingValue:
        self._check_open()
        index = selection_index(source, index, name)
        if not isinstance(source, FederatingValue):
            raise SimharnessTypeError(f'{source!r} is not a value of this executor')
        if source.kind == 'struct':
            return source.payload[index][1]
        if source.kind == 'unplaced':
            return self.unplaced(await self._unplaced.create_selection(source.payload, index))
        if source.kind == 'federated':
            return await self.strategy.select_federated(source, index)
        raise SimharnessValueError(
            f'cannot select from a {source.kind} value of type {source.type_signature}'
        )

    async def create_value(self, value: Any, type_spec: Any = None) -> FederatingValue:
        with self.strategy.busy():
            return await self._create_value(value, type_spec)

    async def create_call(
        self, comp: ExecutorValue, arg: Optional[ExecutorValue] = None
    ) -> FederatingValue:
        with self.strategy.busy():
            return await self._create_call(comp, arg)

    async def create_struct(self, elements: Any) -> FederatingValue:
        with self.strategy.busy():
            return await self._create_struct(elements)

    async def create_selection(
        self, source: ExecutorValue, index: Optional[int] = None, name: Optional[str] = None
    ) -> FederatingValue:
        with self.strategy.busy():
            return await self._create_selection(source, index, name)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            try:
                self.strategy.close()
            finally:
                self._unplaced.close()
