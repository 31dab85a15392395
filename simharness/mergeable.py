"""TFF's mergeable computations: a round run in subrounds over several async contexts.

`MergeableCompForm(up_to_merge=, merge=, after_merge=)` is a computation with one
logical aggregation, split at it (TFF's ``tff.framework.MergeableCompForm``, same
checks and errors). `MergeableCompExecutionContext(async_contexts, compiler_fn=None,
transform_args=None, transform_result=None, num_subrounds=None)` runs one as TFF does::

    arg ──split clients into num_subrounds slices (other values replicated)──▶ slice_k
    up_to_merge(slice_k)      on the async contexts, at most one call per context at a
                              time; each result merged into the running one as it arrives
                              (`merge(running, new)`, on the context that finished)
    after_merge(slice_0, merged)          when its result holds no client-placed values
    after_merge(slice_k, merged), joined  else: per subround, client lists concatenated

A plain computation is first compiled with `compiler_fn`
(`simharness.backends.native.compile_to_mergeable_comp_form` in
`create_mergeable_comp_execution_context`).

Differences from one call of the same computation: the clients of different
subrounds are reduced separately and their results merged, so floating-point sums
can differ in the last bits from a single run (as in TFF); the same contexts and
`num_subrounds` give the same bits every run, since the merges follow the
subrounds' order (TFF merges in order of completion).
"""

from __future__ import annotations

import asyncio
import functools
import math
import threading
from typing import Any, Callable, List, Optional, Sequence

from simharness.core import building_blocks as bb
from simharness.core import types as T
from simharness.core.context_stack import AsyncContext, SyncContext
from simharness.core.structure import Struct, from_container
from simharness.context import infer_cardinality
from simharness.errors import SimharnessTypeError, SimharnessValueError
from simharness.validation import check_int
from simharness.core import context_stack

__all__ = [
    'AfterMergeStructureError',
    'MergeTypeNotAssignableError',
    'MergeableCompExecutionContext',
    'MergeableCompForm',
    'UpToMergeTypeError',
    'type_to_py_container',
]


class MergeTypeNotAssignableError(SimharnessTypeError):
    """`merge`'s types do not fit `up_to_merge`'s result (TFF's, a TypeError)."""


class UpToMergeTypeError(SimharnessTypeError):
    """`up_to_merge` does not return one server-placed value (TFF's, a TypeError)."""


class AfterMergeStructureError(SimharnessValueError):
    """`after_merge` holds an aggregation (TFF's, a ValueError)."""


#: Intrinsics that take values at clients to the server: what `after_merge` may not hold.
AGGREGATION_URIS = frozenset(
    {
        'federated_aggregate',
        'federated_sum',
        'federated_mean',
        'federated_weighted_mean',
        'federated_min',
        'federated_max',
        'federated_secure_sum',
        'federated_secure_sum_bitwidth',
        'federated_secure_modular_sum',
        'federated_collect',
    }
)


def _is_server(t: Any) -> bool:
    return isinstance(t, T.FederatedType) and t.placement is T.SERVER


def aggregations_in(comp: bb.ComputationBuildingBlock) -> List[bb.Intrinsic]:
    """The intrinsics in `comp` that take client values to the server (pre-order)."""
    found: List[bb.Intrinsic] = []
    stack = [comp]
    while stack:
        c = stack.pop()
        if isinstance(c, bb.Intrinsic) and c.uri in AGGREGATION_URIS:
            found.append(c)
        stack.extend(reversed(c.children()))
    return found


class MergeableCompForm:
    """A computation with one logical aggregation, split at it (TFF's `MergeableCompForm`).

    Args (keyword only):
      up_to_merge: a computation returning one `SERVER`-placed value.
      merge: a computation of two such values (unplaced members) returning one.
      after_merge: a computation of ``(up_to_merge's argument, merged@SERVER)``
        (or of the merged value alone when `up_to_merge` takes none) holding no
        aggregation.

    Raises:
      UpToMergeTypeError: `up_to_merge` returns something else than one server value.
      MergeTypeNotAssignableError: `merge`'s parameter or result does not fit.
      SimharnessTypeError: `after_merge`'s parameter does not fit.
      AfterMergeStructureError: `after_merge` holds an aggregation.
    """

    def __init__(self, *, up_to_merge: Any, merge: Any, after_merge: Any):
        for what, c in (
            ('up_to_merge', up_to_merge),
            ('merge', merge),
            ('after_merge', after_merge),
        ):
            if not isinstance(getattr(c, 'type_signature', None), T.FunctionType):
                raise SimharnessTypeError(
                    f'{what} must be a computation, got {c!r} of type {type(c).__name__}',
                    expected='Computation',
                    actual=type(c),
                )
        ut, mt, at = up_to_merge.type_signature, merge.type_signature, after_merge.type_signature
        if not _is_server(ut.result):
            raise UpToMergeTypeError(
                'Expected `up_to_merge` to return a single `SERVER`-placed value; found return '
                f'type {ut.result}.'
            )
        member = ut.result.member
        expected = T.StructType([(None, member), (None, member)])
        if mt.parameter is None or not mt.parameter.is_assignable_from(expected):
            raise MergeTypeNotAssignableError(
                f'Type mismatch checking `merge` type signature.\n{mt.parameter}\nis not '
                f'assignable to\n{expected}\n'
            )
        if not (
            isinstance(mt.parameter, T.StructType)
            and len(mt.parameter) == 2
            and mt.parameter[0].is_assignable_from(mt.result)
            and mt.parameter[1].is_assignable_from(mt.result)
        ):
            raise MergeTypeNotAssignableError(
                'Expected `merge` to have result which is assignable to each element of its '
                f'parameter tuple; found parameter of type: \n{mt.parameter}\nAnd result of '
                f'type: \n{mt.result}'
            )
        merged = T.FederatedType(mt.result, T.SERVER)
        expected_after = (
            merged if ut.parameter is None else T.StructType([(None, ut.parameter), (None, merged)])
        )
        if at.parameter is None:
            raise SimharnessTypeError(
                f'after_merge takes no argument; expected one of type {expected_after}',
                expected=expected_after,
            )
        at.parameter.check_assignable_from(expected_after, 'after_merge parameter')
        to_bb = getattr(after_merge, 'to_building_block', None)
        found = aggregations_in(to_bb()) if callable(to_bb) else []
        if found:
            names = ', '.join(sorted({f'{i.uri}: {i.type_signature}' for i in found}))
            raise AfterMergeStructureError(
                'Expected `after_merge` to contain no intrinsics with signatures accepting '
                f'values at clients and returning values at server. Found the following '
                f'aggregations: {names}'
            )
        self.up_to_merge = up_to_merge
        self.merge = merge
        self.after_merge = after_merge


# ------------------------------------------------------------- subrounds


def _slice(value: Any, t: T.Type, lo: int, hi: int) -> Any:
    if isinstance(t, T.FederatedType):
        if t.placement is T.CLIENTS and not t.all_equal:
            # A list or tuple keeps its type (as TFF's slices); another sequence a list.
            return value[lo:hi] if isinstance(value, (list, tuple)) else list(value[lo:hi])
        return value
    if isinstance(t, T.StructType) and T.contains(t, (T.FederatedType,)):
        s = from_container(value, t)
        return Struct((n, _slice(v, e, lo, hi)) for (n, e), v in zip(t.items(), s))
    return value


def split_into_subrounds(value: Any, t: T.Type, num_subrounds: int) -> List[Any]:
    """The arguments of the subrounds: client lists in contiguous slices (the first ones
    a client longer, as TFF's ``ceil(remaining / remaining subrounds)``), every other value
    replicated; at most one subround per client (one when there are none)."""
    n = infer_cardinality(value, t)
    if n is None:
        return [value] * num_subrounds
    if n == 0:
        return [value]
    out, lo, left = [], 0, num_subrounds
    while lo < n and left > 0:
        size = math.ceil((n - lo) / left)
        out.append(_slice(value, t, lo, lo + size))
        lo, left = lo + size, left - 1
    return out


def _joined(results: Sequence[Any], t: T.Type) -> Any:
    """The subrounds' results of `after_merge` as one: client lists concatenated (a tuple
    when every part is one, as TFF's ``+``), the first subround's value for anything else."""
    if isinstance(t, T.StructType):
        parts = [from_container(r, t) for r in results]
        return Struct((n, _joined([p[i] for p in parts], e)) for i, (n, e) in enumerate(t.items()))
    if isinstance(t, T.FederatedType) and t.placement is T.CLIENTS and not t.all_equal:
        joined = [x for r in results for x in r]
        return tuple(joined) if all(isinstance(r, tuple) for r in results) else joined
    return results[0]


def type_to_py_container(value: Any, type_spec: Any) -> Any:
    """`federated_language.framework.type_to_py_container`: the `Struct`s in `value` as the
    Python containers `type_spec` records (client lists and sequences element by element).

    Raises:
      SimharnessTypeError: a client-placed value that is not a list.
    """
    t = T.to_type(type_spec)
    if isinstance(t, T.FederatedType):
        if not t.all_equal:
            if not isinstance(value, list):
                raise SimharnessTypeError(
                    f'Unexpected Python type for non-all-equal type {t}: expected `list`, '
                    f'found `{type(value).__name__}`.',
                    expected=list,
                    actual=type(value),
                )
            return [type_to_py_container(v, t.member) for v in value]
        t = t.member
    if isinstance(t, T.SequenceType):
        return (
            [type_to_py_container(v, t.element) for v in value]
            if isinstance(value, list)
            else value
        )
    if not isinstance(t, T.StructType) or not isinstance(value, Struct):
        return value
    inner = Struct((n, type_to_py_container(v, e)) for (n, e), v in zip(t.items(), value))
    from simharness.core.structure import to_container

    return to_container(inner, t)


# --------------------------------------------------------------- context


class MergeableCompExecutionContext(SyncContext):
    """Runs `MergeableCompForm`s in subrounds over async contexts (TFF's context).

    Args:
      async_contexts: `AsyncContext`s (such as
        `simharness.backends.native.create_async_local_cpp_execution_context()`).
      compiler_fn: makes a `MergeableCompForm` of a plain computation (called
        once per computation); None: only forms are run.
      transform_args: applied to the argument before it is split.
      transform_result: applied to the result.
      num_subrounds: subrounds per call (default: one per context); more than
        contexts: the extra ones wait for a free context.

    The contexts are not closed by this one (`close()` stops its own loop
    thread only): the caller made them.

    Raises:
      SimharnessTypeError: a context that is not an `AsyncContext`, a function
        that is not callable.
      SimharnessValueError: no contexts, or `num_subrounds` < 1.
    """

    def __init__(
        self,
        async_contexts: Sequence[AsyncContext],
        compiler_fn: Optional[Callable[[Any], MergeableCompForm]] = None,
        transform_args: Optional[Callable[[Any], Any]] = None,
        transform_result: Optional[Callable[[Any], Any]] = None,
        num_subrounds: Optional[int] = None,
    ):
        contexts = list(async_contexts)
        if not contexts:
            raise SimharnessValueError(
                'MergeableCompExecutionContext needs at least one async context'
            )
        for c in contexts:
            if not isinstance(c, AsyncContext):
                raise SimharnessTypeError(
                    f'async_contexts holds {c!r} of type {type(c).__name__}; expected '
                    'AsyncContexts (create_async_local_cpp_execution_context(), ...)',
                    expected=AsyncContext,
                    actual=type(c),
                )
        for what, fn in (
            ('compiler_fn', compiler_fn),
            ('transform_args', transform_args),
            ('transform_result', transform_result),
        ):
            if fn is not None and not callable(fn):
                raise SimharnessTypeError(
                    f'{what} must be callable or None, got {fn!r}',
                    expected='callable',
                    actual=type(fn),
                )
        self._contexts = contexts
        self._num_subrounds = (
            len(contexts) if num_subrounds is None else check_int('num_subrounds', num_subrounds, 1)
        )
        self._compiler = None if compiler_fn is None else functools.lru_cache()(compiler_fn)
        self._transform_args = transform_args
        self._transform_result = transform_result
        self._lock = threading.Lock()
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._thread: Optional[threading.Thread] = None

    def _run(self, coro: Any) -> Any:
        with self._lock:
            if self._loop is None:
                self._loop = context_stack.new_event_loop()
                self._thread = threading.Thread(
                    target=self._loop.run_forever, name='simharness-mergeable', daemon=True
                )
                self._thread.start()
            loop = self._loop
        return asyncio.run_coroutine_threadsafe(coro, loop).result()

    def invoke(self, comp: Any, arg: Any = None) -> Any:
        """Runs `comp` (a `MergeableCompForm`, or a computation `compiler_fn` makes one of)
        on `arg` in subrounds; returns its result in the result type's containers.

        Raises:
          SimharnessValueError: a computation and no `compiler_fn`, or a compiler that
            does not return a `MergeableCompForm`.
        """
        if not isinstance(comp, MergeableCompForm):
            if not isinstance(getattr(comp, 'type_signature', None), T.FunctionType):
                raise SimharnessTypeError(
                    f'expected a MergeableCompForm or a computation, got {comp!r}',
                    expected=MergeableCompForm,
                    actual=type(comp),
                )
            if self._compiler is None:
                raise SimharnessValueError(
                    'Without a compiler, mergeable comp execution context can only invoke '
                    'instances of MergeableCompForm. Encountered a `Computation`.'
                )
            comp = self._compiler(comp)
            if not isinstance(comp, MergeableCompForm):
                raise SimharnessValueError(
                    'Expected compilation in mergeable comp execution context to produce an '
                    f'instance of MergeableCompForm; found instead {comp!r} of Python type '
                    f'{type(comp).__name__}.'
                )
        if arg is not None and self._transform_args is not None:
            arg = self._transform_args(arg)
        param = comp.up_to_merge.type_signature.parameter
        # As TFF: no argument, one subround per context (each runs its default clients).
        args = (
            [None] * len(self._contexts)
            if arg is None or param is None
            else split_into_subrounds(arg, param, self._num_subrounds)
        )
        result = self._run(self._invoke(comp, args, param is not None))
        result = type_to_py_container(result, comp.after_merge.type_signature.result)
        return result if self._transform_result is None else self._transform_result(result)

    async def _pool(self, fn: Callable[[Any, AsyncContext], Any], args: List[Any]) -> List[Any]:
        """`fn(arg, context)` for every arg, at most one at a time per context; the results
        in the order of `args`."""
        free: 'asyncio.Queue[AsyncContext]' = asyncio.Queue()
        for c in self._contexts[: len(args)]:
            free.put_nowait(c)

        async def one(a: Any) -> Any:
            ctx = await free.get()
            try:
                return await fn(a, ctx)
            finally:
                free.put_nowait(ctx)

        return list(await asyncio.gather(*(one(a) for a in args)))

    async def _invoke(self, comp: MergeableCompForm, args: List[Any], has_arg: bool) -> Any:
        partials = await self._pool(lambda a, ctx: ctx.invoke(comp.up_to_merge, a), args)
        merged = partials[0]
        for p in partials[1:]:  # in subround order: the same bits on every run
            merged = await self._contexts[0].invoke(comp.merge, Struct([(None, merged), (None, p)]))

        def after(a: Any, ctx: AsyncContext) -> Any:
            return ctx.invoke(
                comp.after_merge, Struct([(None, a), (None, merged)]) if has_arg else merged
            )

        rt = comp.after_merge.type_signature.result
        if not T.contains(rt, (T.FederatedType,)) or all(t.all_equal for t in _federated_types(rt)):
            return await after(args[0], self._contexts[0])
        return _joined(await self._pool(after, args), rt)

    def close(self) -> None:
        """Stops this context's loop thread (the async contexts stay open)."""
        with self._lock:
            loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)
            assert thread is not None
            thread.join(timeout=30)
            loop.close()


def _federated_types(t: T.Type) -> List[T.FederatedType]:
    if isinstance(t, T.FederatedType):
        return [t]
    if isinstance(t, T.StructType):
        return [f for e in t for f in _federated_types(e)]
    return []
