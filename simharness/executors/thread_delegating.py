"""`ThreadDelegatingExecutor`: runs its target on an event loop in a dedicated thread.

What it does: every call is scheduled on the target's own loop (its own
thread), so that blocking TF work of one client group does not stall the
driver or the other groups. It owns the thread and the loop: `close()`
closes the target on that thread, stops the loop and joins the thread. As in
TFF, an executor used after `close()` re-initializes itself: the next
operation starts a new thread and loop (closed by the next `close()`; a
finalizer stops them if the executor is dropped unclosed).

What it leaves to other layers: everything about values (the target).
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from typing import Any, Dict, List, Optional, Sequence

from simharness.core import types as T
from simharness.core.reduction import Partial, ReductionKind
from simharness.core.structure import map_nest
from simharness.core.wakeups import await_future
from simharness.executors.base import (
    BatchExecutor,
    Executor,
    ExecutorValue,
    normalize_struct_elements,
    selection_index,
)
from simharness.runtime.stream_plan import PlanNode, PlanReduction, is_plan_part
from simharness.validation import check_instance
from simharness.core import context_stack


class ThreadDelegatingValue(ExecutorValue):
    """A target value, computed on the target's thread."""

    __slots__ = ('_value', '_owner')

    def __init__(self, value: ExecutorValue, owner: 'ThreadDelegatingExecutor'):
        self._value = value
        self._owner = owner

    @property
    def internal(self) -> ExecutorValue:
        return self._value

    @property
    def owner(self) -> 'ThreadDelegatingExecutor':
        """The executor that made it (whose thread computes it)."""
        return self._owner

    @property
    def internal_representation(self) -> ExecutorValue:
        """TFF's name of `internal`: the target executor's value."""
        return self._value

    @property
    def type_signature(self) -> T.Type:
        return self._value.type_signature

    async def compute(self) -> Any:
        return await self._owner.run_on_thread(self._value.compute())


def _unwrap(v: Any) -> Any:
    """`v` with the target's values for ours (in containers and stream plan parts)."""
    return map_nest(_unwrap_leaf, v)


def _unwrap_leaf(x: Any) -> Any:
    if isinstance(x, ThreadDelegatingValue):
        return x.internal
    if is_plan_part(x):
        return x.map_values(_unwrap)
    return x


class ThreadDelegatingExecutor(BatchExecutor):
    """Delegates every operation to `target` on a dedicated thread.

    Args:
      target: the executor to run (usually an `EagerTFExecutor`; the block
        operations of a `BatchExecutor` need a `BatchExecutor` target).
      name: the thread's name.

    Raises:
      TypeError: `target` is not an `Executor`, or `name` not a str.
    """

    def __init__(self, target: BatchExecutor, name: str = 'simharness-executor'):
        check_instance(
            'ThreadDelegatingExecutor target',
            target,
            Executor,
            'an Executor (e.g. an EagerTFExecutor)',
        )
        check_instance('ThreadDelegatingExecutor name', name, str, 'a str (the thread name)')
        self._target = target
        self._name = name
        self._lock = threading.Lock()
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._thread: Optional[threading.Thread] = None
        self._finalizer: Optional[weakref.finalize] = None
        with self._lock:
            self._start()

    def _start(self) -> asyncio.AbstractEventLoop:
        """Starts the thread and its loop (the caller holds the lock)."""
        loop = context_stack.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name=self._name, daemon=True)
        thread.start()
        self._loop, self._thread = loop, thread
        # A safety net only: close() is the mechanism. The finalizer must not
        # refer to self, or the executor would never be collected.
        self._finalizer = weakref.finalize(self, _stop_loop, loop, thread)
        return loop

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:  # closed: re-initialize, as TFF's executors do
                return self._start()
            return self._loop

    @property
    def target(self) -> BatchExecutor:
        """The executor it delegates to."""
        return self._target

    async def run_on_thread(self, coro: Any) -> Any:
        """Runs the coroutine `coro` on this executor's thread (starting it again after
        `close`); its result."""
        try:
            loop = self._running_loop()
        except BaseException:
            coro.close()
            raise
        fut = asyncio.run_coroutine_threadsafe(coro, loop)
        return await await_future(fut)

    def _wrap(self, v: ExecutorValue) -> ThreadDelegatingValue:
        return ThreadDelegatingValue(v, self)

    def _wrap_all(self, vs: Sequence[ExecutorValue]) -> List[ThreadDelegatingValue]:
        return [ThreadDelegatingValue(v, self) for v in vs]

    def can_share(self, value: Any) -> bool:
        """Whether `value`, another thread executor's value, can be used here without a
        copy (`create_value(value)`): the targets say they share values (EagerTF
        executors of this process on one device: a broadcast is one tensor for all)."""
        if not isinstance(value, ThreadDelegatingValue):
            return False
        return isinstance(self._target, BatchExecutor) and bool(
            self._target.can_share(value.owner.target)
        )

    async def create_value(self, value: Any, type_spec: Any = None) -> ThreadDelegatingValue:
        if isinstance(value, ThreadDelegatingValue) and self.can_share(value):
            value = value.internal  # the target takes its own kind of value as it is
        return self._wrap(await self.run_on_thread(self._target.create_value(value, type_spec)))

    async def create_call(
        self, comp: ExecutorValue, arg: Optional[ExecutorValue] = None
    ) -> ThreadDelegatingValue:
        return self._wrap(
            await self.run_on_thread(self._target.create_call(_unwrap(comp), _unwrap(arg)))
        )

    async def create_struct(self, elements: Any) -> ThreadDelegatingValue:
        # A list of values, of (name, value) pairs, a dict or a Struct: by name and value.
        items = [(n, _unwrap(v)) for n, v in normalize_struct_elements(elements)]
        return self._wrap(await self.run_on_thread(self._target.create_struct(items)))

    async def create_selection(
        self, source: ExecutorValue, index: Optional[int] = None, name: Optional[str] = None
    ) -> ThreadDelegatingValue:
        index = selection_index(source, index, name)
        return self._wrap(
            await self.run_on_thread(self._target.create_selection(_unwrap(source), index))
        )

    async def create_values(
        self, values: Sequence[Any], type_spec: Any
    ) -> List[ThreadDelegatingValue]:
        return self._wrap_all(
            await self.run_on_thread(self._target.create_values(values, type_spec))
        )

    async def compute_many(self, values: Sequence[ExecutorValue]) -> List[Any]:
        return await self.run_on_thread(self._target.compute_many(_unwrap(list(values))))

    async def create_map(
        self,
        fn: ExecutorValue,
        args: Optional[Sequence[ExecutorValue]],
        count: Optional[int] = None,
    ) -> List[ThreadDelegatingValue]:
        return self._wrap_all(
            await self.run_on_thread(
                self._target.create_map(
                    _unwrap(fn), None if args is None else _unwrap(list(args)), count
                )
            )
        )

    async def create_structs(self, rows, names) -> List[ThreadDelegatingValue]:
        return self._wrap_all(
            await self.run_on_thread(
                self._target.create_structs([_unwrap(list(r)) for r in rows], names)
            )
        )

    async def create_selections(self, sources, index: int) -> List[ThreadDelegatingValue]:
        return self._wrap_all(
            await self.run_on_thread(self._target.create_selections(_unwrap(list(sources)), index))
        )

    async def create_partial_reduction(
        self,
        kind: ReductionKind,
        values: Sequence[object],
        start: int,
        total: int,
        params: Dict[str, object],
    ) -> Partial:
        return await self.run_on_thread(
            self._target.create_partial_reduction(
                kind, _unwrap(list(values)), start, total, _unwrap(params)
            )
        )

    @property
    def can_stream(self) -> bool:
        """Whether the target streams map -> reduce (`create_streamed_reductions`)."""
        return isinstance(self._target, BatchExecutor) and self._target.can_stream

    async def create_streamed_reductions(
        self,
        nodes: Sequence[PlanNode],
        reductions: Sequence[PlanReduction],
        start: int,
        count: int,
        total: int,
        slice_size: Optional[int] = None,
    ) -> List[Partial]:
        """Streams map -> reduce on the target's thread (see `EagerTFExecutor`)."""
        return await self.run_on_thread(
            self._target.create_streamed_reductions(
                _unwrap(list(nodes)), _unwrap(list(reductions)), start, count, total, slice_size
            )
        )

    async def create_reduction_result(self, kind, partials, total, params, result_type):
        return self._wrap(
            await self.run_on_thread(
                self._target.create_reduction_result(
                    kind, partials, total, _unwrap(params), result_type
                )
            )
        )

    async def create_sequence_op(self, op, values, params):
        return self._wrap_all(
            await self.run_on_thread(
                self._target.create_sequence_op(op, _unwrap(list(values)), _unwrap(params))
            )
        )

    async def create_select(self, keys, server_value, select_fn, element_type):
        return self._wrap_all(
            await self.run_on_thread(
                self._target.create_select(
                    _unwrap(list(keys)), _unwrap(server_value), _unwrap(select_fn), element_type
                )
            )
        )

    def close(self) -> None:
        """Closes the target on the thread, stops the loop and joins the thread.

        Idempotent; a later operation re-initializes the executor.
        """
        with self._lock:
            loop, thread, finalizer = self._loop, self._thread, self._finalizer
            if loop is None or thread is None:
                return
            self._loop = self._thread = self._finalizer = None
        if finalizer is not None:
            finalizer.detach()
        if thread.is_alive():

            async def _close_target():
                self._target.close()

            try:
                asyncio.run_coroutine_threadsafe(_close_target(), loop).result(timeout=60)
            finally:
                loop.call_soon_threadsafe(loop.stop)
                thread.join(timeout=60)
        if not loop.is_running():
            loop.close()


def _stop_loop(loop: asyncio.AbstractEventLoop, thread: threading.Thread) -> None:
    """Stops an unclosed executor's loop when the executor is collected."""
    if not loop.is_closed():
        loop.call_soon_threadsafe(loop.stop)
    if thread is not threading.current_thread():
        thread.join(timeout=10)
