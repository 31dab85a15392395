"""`ReferenceResolvingExecutor`: the lambda calculus layer.

What it does: evaluates lambdas (with closures), blocks (locals in order),
references, calls of lambdas, structs and selections itself; everything
else (compiled TF, intrinsics, data, placements, plain values) is created in
its target executor, and calls of target functions are delegated.

What it leaves to other layers: intrinsics and placements (its target, the
federating layer), TF execution (the leaves).

Structs are evaluated element by element as a dataflow, like a block's
locals: a struct's elements start at once and a selection waits only for the
element it selects. So a round composed of processes (TFF's
`compose_learning_process`: the client work returns its result at CLIENTS and
its metrics' sum at SERVER in one struct; the aggregator then reduces the
result) issues both reductions of the one client map together, and the
federating layer streams them in one batch instead of computing the map
twice. Every element is still evaluated and its error raised: each
invocation (`create_call`, `create_value` of a building block) waits for all
the elements it started before it returns, and raises the first error.
"""

from __future__ import annotations

from typing import Any, List, Optional, Tuple, cast

import asyncio
import collections
import collections.abc
import contextvars
import functools
import inspect
import types

from simharness.core import building_blocks as bb
from simharness.core import types as T
from simharness.core.computation import Computation
from simharness.core.structure import Struct, from_container
from simharness.errors import ExecutorClosedError, SimharnessTypeError
from simharness.executors.base import (
    Executor,
    ExecutorValue,
    normalize_struct_elements,
    selection_index,
)
from simharness.validation import check_instance, check_type_spec_matches


class CapturedReferenceError(SimharnessTypeError, RuntimeError):
    """A lambda that refers to names of its enclosing scope was passed on (a TypeError, and
    TFF's RuntimeError)."""


class _Scope:
    """One binding, `name` to `value`, in front of the bindings of `parent` (read-only)."""

    __slots__ = ('name', 'value', 'parent')

    def __init__(self, name: Optional[str], value: Any, parent: Optional['_Scope']):
        self.name, self.value, self.parent = name, value, parent

    def resolve(self, name: str) -> 'ReferenceResolvingValue':
        s: Optional[_Scope] = self
        while s is not None:
            if s.name == name:
                return s.value
            s = s.parent
        raise SimharnessTypeError(f'reference {name!r} is not bound in this scope')


_EMPTY = _Scope(None, None, None)

#: The most compiled computations, intrinsics and placements an executor keeps the values
#: of (least recently used first out).
STATIC_VALUES = 1024

#: The struct-element tasks an invocation started (a list per `create_call` /
#: `create_value`): it waits for all of them before it returns.
_PENDING: contextvars.ContextVar[Optional[List[asyncio.Future]]] = contextvars.ContextVar(
    'simharness_rre_pending', default=None
)


def _done(v: Any) -> 'ReferenceResolvingValue':
    """A struct element: a value, or the result of the finished task evaluating it."""
    return v.result() if isinstance(v, asyncio.Future) else v


async def _element(v: Any) -> 'ReferenceResolvingValue':
    """A struct element, waiting for the task evaluating it when it is one."""
    return await asyncio.shield(v) if isinstance(v, asyncio.Future) else v


class ReferenceResolvingValue(ExecutorValue):
    """A delegated target value, a struct of these, or a closure."""

    __slots__ = ('_target_value', '_struct', '_closure', '_type')

    def __init__(
        self,
        type_spec: T.Type,
        target_value: Optional[ExecutorValue] = None,
        struct: Optional[List[Tuple[Optional[str], 'ReferenceResolvingValue']]] = None,
        closure: Optional[Tuple[bb.Lambda, _Scope]] = None,
    ):
        self._type = type_spec
        self._target_value = target_value
        self._struct = struct
        self._closure = closure

    @property
    def type_signature(self) -> T.Type:
        return self._type

    @property
    def target_value(self) -> Optional[ExecutorValue]:
        return self._target_value

    @property
    def struct_elements(self) -> Optional[List[Tuple[Optional[str], Any]]]:
        """For a struct: its (name, element) pairs, an element a `ReferenceResolvingValue`
        or the task still evaluating it; else None."""
        return self._struct

    @property
    def closure(self) -> Optional[Tuple[bb.Lambda, _Scope]]:
        """For a closure: its lambda and the scope it was made in; else None."""
        return self._closure

    @property
    def internal_representation(self) -> Any:
        """As in TFF: the target value, a `Struct` of these values, or the closure."""
        if self._target_value is not None:
            return self._target_value
        if self._struct is not None:
            return Struct([(n, _done(v)) for n, v in self._struct])
        return self._closure

    async def compute(self) -> Any:
        if self._target_value is not None:
            return await self._target_value.compute()
        if self._struct is not None:
            return Struct([(n, await (await _element(v)).compute()) for n, v in self._struct])
        raise SimharnessTypeError(f'a function of type {self._type} cannot be computed; call it')


def _is_generator(value: Any) -> bool:
    if isinstance(value, types.GeneratorType):
        return True
    if not callable(value) or isinstance(value, type):  # a dataset, a list: at once
        return False
    return inspect.isgeneratorfunction(value) or (
        not hasattr(value, 'element_spec') and not hasattr(value, 'type_signature')
    )


@functools.lru_cache(maxsize=1024)
def _has_sequence(t: T.Type) -> bool:
    if isinstance(t, T.SequenceType):
        return True
    if isinstance(t, T.FederatedType):
        return _has_sequence(t.member)
    return isinstance(t, T.StructType) and any(_has_sequence(e) for e in t)


def _drain_generators(value: Any, t: T.Type) -> Any:
    """`value` with every sequence given as a generator (function) replaced by its elements.

    A list of elements can go to any executor (a worker process too); a
    generator is Python state that only this process has. Lazy client lists
    (not a list or tuple) are left alone.
    """
    if isinstance(t, T.SequenceType):
        if _is_generator(value):
            return list(value if isinstance(value, types.GeneratorType) else value())
        return value
    if isinstance(t, T.FederatedType):
        if t.placement is T.CLIENTS and not t.all_equal:
            if isinstance(value, (list, tuple)):
                return [_drain_generators(v, t.member) for v in value]
            return value
        return _drain_generators(value, t.member)
    if isinstance(t, T.StructType) and isinstance(
        value, (Struct, collections.abc.Mapping, list, tuple)
    ):
        s = from_container(value, t)
        # elements without sequences (a round's state) pass as they are, not rebuilt
        return Struct(
            (n, _drain_generators(v, e) if _has_sequence(e) else v)
            for (n, e), v in zip(t.items(), s)
        )
    return value


class ReferenceResolvingExecutor(Executor):
    """Resolves references and lambdas; delegates the rest to `target`.

    Args:
      target: the executor that runs everything that is not lambda calculus.
    """

    def __init__(self, target: Executor):
        """Raises a `TypeError` naming `target` unless it is an `Executor`."""
        check_instance(
            'ReferenceResolvingExecutor target',
            target,
            Executor,
            'an Executor (e.g. a FederatingExecutor or an EagerTFExecutor)',
        )
        self._target = target
        self._closed = False
        # The values of the compiled computations, intrinsics and placements met (by
        # object): a computation called every round evaluates to the same ones again.
        self._static: 'collections.OrderedDict[int, Tuple[Any, ReferenceResolvingValue]]' = (
            collections.OrderedDict()
        )

    @property
    def target(self) -> Executor:
        return self._target

    def _check_open(self) -> None:
        if self._closed:
            raise ExecutorClosedError('this ReferenceResolvingExecutor is closed')

    async def create_value(self, value: Any, type_spec: Any = None) -> ReferenceResolvingValue:
        """Embeds a Python value, a building block, a computation or a placement literal."""
        self._check_open()
        if isinstance(value, ReferenceResolvingValue):
            return value
        if isinstance(value, Computation):  # a computation given as is (TFF's raw API)
            hint = type_spec.parameter if isinstance(type_spec, T.FunctionType) else None
            value = value.to_building_block(hint)
        if isinstance(value, T.PlacementLiteral):  # simharness.SERVER / CLIENTS
            value = bb.Placement(value)
        if isinstance(value, bb.ComputationBuildingBlock):
            check_type_spec_matches(type_spec, value.type_signature, 'computation')
            return await self._invocation(self._evaluate(value, _EMPTY))
        t = T.to_type(type_spec) if type_spec is not None else T.infer_type(value)
        if _has_sequence(t):
            value = _drain_generators(value, t)
        if isinstance(t, T.StructType):
            s = from_container(value, t)
            elems = [(n, await self.create_value(v, e)) for (n, e), v in zip(t.items(), s)]
            return ReferenceResolvingValue(t, struct=elems)
        return ReferenceResolvingValue(t, target_value=await self._target.create_value(value, t))

    async def create_call(
        self, comp: ExecutorValue, arg: Optional[ExecutorValue] = None
    ) -> ReferenceResolvingValue:
        self._check_open()
        for what, v in (('function', comp), ('argument', arg)):
            if v is not None and not isinstance(v, ReferenceResolvingValue):
                raise SimharnessTypeError(
                    f'the {what} {v!r} is not a value of this ReferenceResolvingExecutor',
                    expected=ReferenceResolvingValue,
                    actual=type(v),
                )
        ft = comp.type_signature
        if (
            arg is not None
            and isinstance(ft, T.FunctionType)
            and not (
                ft.parameter is not None and ft.parameter.is_assignable_from(arg.type_signature)
            )
        ):
            raise SimharnessTypeError(
                f'the argument of type {arg.type_signature} is incompatible with the parameter '
                f'type {ft.parameter} of the function {ft}',
                expected=ft.parameter,
                actual=arg.type_signature,
            )
        return await self._invocation(
            self._call(
                cast(ReferenceResolvingValue, comp), cast(Optional[ReferenceResolvingValue], arg)
            )
        )

    @staticmethod
    async def _invocation(evaluation: Any) -> ReferenceResolvingValue:
        """Runs `evaluation`, then waits for every struct element it started (and raises the
        first error, after all have finished), as when they were evaluated in turn."""
        if _PENDING.get() is not None:  # nested in an invocation: that one waits
            return await evaluation
        pending: List[asyncio.Future] = []
        token = _PENDING.set(pending)
        try:
            try:
                result = await evaluation
            except BaseException:
                await _settle(pending, cancel=True)
                raise
            await _settle(pending, cancel=False)
            return result
        finally:
            _PENDING.reset(token)
            # Each task holds a copy of the context, which holds this list: clearing it
            # breaks that cycle, so a round's values are freed without the garbage collector.
            pending.clear()

    async def create_struct(self, elements: Any) -> ReferenceResolvingValue:
        self._check_open()
        items = normalize_struct_elements(elements)
        return ReferenceResolvingValue(
            T.StructType([(n, v.type_signature) for n, v in items]), struct=list(items)
        )

    async def create_tuple(self, elements: Any) -> ReferenceResolvingValue:
        """TFF's earlier name of `create_struct`."""
        return await self.create_struct(elements)

    async def create_selection(
        self, source: ExecutorValue, index: Optional[int] = None, name: Optional[str] = None
    ) -> ReferenceResolvingValue:
        self._check_open()
        index = selection_index(source, index, name)
        return await self._select(cast(ReferenceResolvingValue, source), index)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._static.clear()
            self._target.close()

    # ------------------------------------------------------------ evaluation
    async def _to_target(self, v: ReferenceResolvingValue) -> ExecutorValue:
        if v.target_value is not None:
            return v.target_value
        if v.struct_elements is not None:
            elems = [(n, await self._to_target(await _element(e))) for n, e in v.struct_elements]
            return await self._target.create_struct(elems)
        # neither a target value nor a struct: a closure
        lam, scope = cast(Tuple[bb.Lambda, _Scope], v.closure)
        free = bb.free_references(lam)
        if free:
            raise CapturedReferenceError(
                f'lambda passed to intrinsic contains references to captured variables '
                f'{sorted(free)}: a lambda that refers to names of its enclosing scope cannot be '
                'passed to the federating layer; pass a tf_computation (or a lambda without free '
                'references) instead'
            )
        return await self._target.create_value(lam, lam.type_signature)

    async def _call(
        self, fn: ReferenceResolvingValue, arg: Optional[ReferenceResolvingValue]
    ) -> ReferenceResolvingValue:
        ft = fn.type_signature
        if not isinstance(ft, T.FunctionType):
            raise SimharnessTypeError(f'cannot call a value of type {ft}', actual=ft)
        if fn.closure is not None:
            lam, scope = fn.closure
            if lam.parameter_name is not None:
                if arg is None:
                    raise SimharnessTypeError(f'function {ft} needs an argument')
                scope = _Scope(lam.parameter_name, arg, scope)
            return await self._evaluate(lam.result, scope)
        target_arg = None if arg is None else await self._to_target(arg)
        # a function value that is not a closure is a target value
        result = await self._target.create_call(cast(ExecutorValue, fn.target_value), target_arg)
        return ReferenceResolvingValue(ft.result, target_value=result)

    async def _evaluate_block(self, comp: bb.Block, scope: _Scope) -> ReferenceResolvingValue:
        """Evaluates a block's locals as a dataflow: each starts at once, and waits only
        for the locals it references (so independent intrinsics, such as a round's two
        aggregations, are in flight together). Every local is evaluated, used or not,
        and its error is raised, as when they ran one after the other (inside an
        invocation, the invocation waits for the locals, not the block).
        """
        tasks: List[asyncio.Future] = []
        for name, value in comp.locals:
            task = asyncio.ensure_future(self._evaluate(value, scope))
            tasks.append(task)
            scope = _Scope(name, task, scope)
        try:
            result = await self._evaluate(comp.result, scope)
        except asyncio.CancelledError:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        except Exception:
            self._raise_first(await asyncio.gather(*tasks, return_exceptions=True))
            raise
        pending = _PENDING.get()
        if pending is not None:
            # Inside an invocation: the result goes on while locals it does not use still
            # run (a client work's metrics sum waits for the stream batch that the
            # aggregator's reductions join); the invocation waits for them all.
            pending.extend(tasks)
            return result
        # The error of the first failing local in program order, as sequential evaluation.
        self._raise_first(await asyncio.gather(*tasks, return_exceptions=True))
        return result

    @staticmethod
    def _raise_first(outcomes: List[Any]) -> None:
        for o in outcomes:
            if isinstance(o, Exception):
                raise o

    async def _select(self, source: ReferenceResolvingValue, index: int) -> ReferenceResolvingValue:
        if source.struct_elements is not None:
            return await _element(source.struct_elements[index][1])
        if source.target_value is None:
            raise SimharnessTypeError(
                f'cannot select from a function of type {source.type_signature}'
            )
        t = bb.selection_type(source.type_signature, index)
        return ReferenceResolvingValue(
            t, target_value=await self._target.create_selection(source.target_value, index)
        )

    async def _evaluate(
        self, comp: bb.ComputationBuildingBlock, scope: _Scope
    ) -> ReferenceResolvingValue:
        if isinstance(comp, bb.Reference):
            value = scope.resolve(comp.name)
            if isinstance(value, asyncio.Future):  # a Block local still being evaluated
                return await asyncio.shield(value)
            return value
        if isinstance(comp, bb.Lambda):
            return ReferenceResolvingValue(comp.type_signature, closure=(comp, scope))
        if isinstance(comp, bb.Block):
            return await self._evaluate_block(comp, scope)
        if isinstance(comp, bb.Call):
            if comp.arg is None:
                return await self._call(await self._evaluate(comp.fn, scope), None)
            if _at_once(comp.fn, scope):  # nothing to wait for: no task pair (gather's)
                fn = await self._evaluate(comp.fn, scope)
                return await self._call(fn, await self._evaluate(comp.arg, scope))
            fn, arg = await asyncio.gather(
                self._evaluate(comp.fn, scope), self._evaluate(comp.arg, scope)
            )
            return await self._call(fn, arg)
        if isinstance(comp, bb.Struct):
            pending = _PENDING.get()
            if pending is None:  # outside an invocation: nobody would wait for the elements
                values = await asyncio.gather(*[self._evaluate(e, scope) for _, e in comp.elements])
                return ReferenceResolvingValue(
                    comp.type_signature, struct=[(n, v) for (n, _), v in zip(comp.elements, values)]
                )
            elems: List[Tuple[Optional[str], Any]] = []
            for n, e in comp.elements:
                if isinstance(e, bb.Reference):  # a value, or the task of a block local
                    value = scope.resolve(e.name)
                    elems.append(
                        (
                            n,
                            value
                            if isinstance(value, asyncio.Future) and not value.done()
                            else await self._evaluate(e, scope),
                        )
                    )
                elif isinstance(e, bb.Lambda):  # nothing to wait for
                    elems.append((n, await self._evaluate(e, scope)))
                else:
                    task = asyncio.ensure_future(self._evaluate(e, scope))
                    pending.append(task)
                    elems.append((n, task))
            return ReferenceResolvingValue(comp.type_signature, struct=elems)
        if isinstance(comp, bb.Selection):
            return await self._select(await self._evaluate(comp.source, scope), comp.index)
        # Compiled TF, intrinsics, data and placements belong to the target (a placement as
        # its literal, as TFF's reference-resolving layer passes it on).
        static = isinstance(comp, (bb.CompiledComputation, bb.Intrinsic, bb.Placement))
        if static:
            hit = self._static.get(id(comp))
            if hit is not None and hit[0] is comp:
                self._static.move_to_end(id(comp))
                return hit[1]
        value = comp.literal if isinstance(comp, bb.Placement) else comp
        out = ReferenceResolvingValue(
            comp.type_signature,
            target_value=await self._target.create_value(value, comp.type_signature),
        )
        if static:  # immutable: kept (with `comp`, so that its id stays its own)
            self._static[id(comp)] = (comp, out)
            if len(self._static) > STATIC_VALUES:
                self._static.popitem(last=False)
        return out


def _at_once(fn: bb.ComputationBuildingBlock, scope: _Scope) -> bool:
    """True when evaluating the function of a call waits for nothing: a lambda, an
    intrinsic, compiled TF, or a reference to a value already there (not a block local
    still being evaluated)."""
    if isinstance(fn, (bb.Lambda, bb.Intrinsic, bb.CompiledComputation)):
        return True
    return isinstance(fn, bb.Reference) and not isinstance(scope.resolve(fn.name), asyncio.Future)


async def _settle(tasks: List[asyncio.Future], cancel: bool) -> None:
    """Waits for `tasks` (and those they add meanwhile); raises the first error unless
    `cancel` (an error is being raised already: the tasks are cancelled instead)."""
    first: Optional[BaseException] = None
    seen = 0
    while seen < len(tasks):
        batch = tasks[seen:]
        seen = len(tasks)
        if cancel:
            for t in batch:
                t.cancel()
        for outcome in await asyncio.gather(*batch, return_exceptions=True):
            if first is None and isinstance(outcome, Exception) and not cancel:
                first = outcome
    if first is not None:
        raise first


#: TFF's earlier name of the reference-resolving executor.
LambdaExecutor = ReferenceResolvingExecutor
