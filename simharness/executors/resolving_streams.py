"""Lazy client values and stream batches of `FederatedResolvingStrategy` (see `resolving_strategy`).

```
  federated_map / federated_zip / selections at CLIENTS  ->  LazyMap / LazyZip / LazySelect
  clients by reference (SourcedClients)                   ->  LazySourced           (nothing runs)
  the driver's values, stackable, on worker groups        ->  LazyLocal (stacked, not sent)
  a driver's value on every client (a broadcast), likewise ->  LazyShared (prepared, not sent)
  a reduction of one  -> joins the invocation's `StreamBatch`; when the invocation is quiet,
      per group: the Lazy graph -> stream plan nodes (`runtime.stream_plan`, `_PLAN_NODES`)
                 + one PlanReduction per reduction -> ONE create_streamed_reductions
  anything else       -> `_force`: the graph computed with the block operations (`_COMPUTE`), once
```

`StreamingStrategy` is the strategy's half that does this; it uses the
strategy's groups (`_groups`, `_sizes`, `_starts`, `num_clients`), its
settings (`stream`, `stream_slice`), counters (`stream_stats`), per-invocation
state (`_batches`, `_busy`, `_idle`), `_embed_fn`, `_gather_groups` and `replicate_now`.
"""

from __future__ import annotations

import asyncio
from typing import (Any, Awaitable, Callable, Dict, List, Optional, Sequence, Set, Tuple,
                    cast)

from simharness.core import types as T
from simharness.core.reduction import CHUNK, Partial
from simharness.executors.base import CURRENT_INVOCATION, BatchExecutor
from simharness.executors.federating import FederatingValue
from simharness.executors.strategy_plans import (Busy, ClientsPayload, Lazy, LazyLocal, LazyMap,
                                                 LazySelect, LazyShared, LazySourced, LazyZip,
                                                 Leaf, StreamBatch)
from simharness.runtime.stream_plan import (PlanClients, PlanMap, PlanNode, PlanReduction,
                                            PlanSame, PlanSelect, PlanShared, PlanStacked,
                                            PlanValues, PlanZip)

#: Event-loop turns without a new reduction after which a stream batch runs.
_STREAM_QUIET_TURNS = 8

#: Clients whose values may be alive at once in THIS process while client groups that
#: run here (threads) stream together: their slices split it (whole chunks, at least one).
#: A group in a worker process streams in slices of the worker's own batch bound.
IN_PROCESS_STREAM_CLIENTS = 512


class StreamingStrategy:
    """Lazy client values, their materialization, and streamed reductions (a mixin of
    `FederatedResolvingStrategy`; see the module docstring for what it uses)."""

    _groups: List[BatchExecutor]
    _sizes: List[int]
    _starts: List[int]
    num_clients: int
    stream: bool
    stream_slice: Optional[int]
    stream_stats: Dict[str, int]
    _batches: Dict[Any, StreamBatch]
    _busy: Dict[Any, int]
    _idle: Dict[Any, asyncio.Event]
    _server: BatchExecutor
    _embed_fn: Callable[..., Awaitable[Any]]
    _gather_groups: Callable[..., Awaitable[List[Any]]]
    replicate_now: Callable[..., Awaitable[ClientsPayload]]

    def _source(self, v: FederatingValue) -> Any:
        """A clients value as a plan source: its `Lazy`, or a `Leaf` of its values."""
        if isinstance(v.payload, Lazy):
            return v.payload
        return Leaf(v.payload, bool(cast(T.FederatedType, v.type_signature).all_equal))

    # ------------------------------------------------------------ lazy plans
    async def _force(self, lazy: Lazy) -> ClientsPayload:
        """Computes a plan with the block operations (once; the result is cached)."""
        if lazy.payload is not None:
            return lazy.payload
        if lazy._lock is None:
            lazy._lock = asyncio.Lock()
        async with lazy._lock:
            if lazy.payload is None:
                if lazy.streamed and not isinstance(lazy, (LazyLocal, LazyShared)):
                    # the plan computed it in the workers; sent values are not recomputed
                    self.stream_stats['recomputed'] += 1
                lazy.payload = await _COMPUTE[type(lazy)](self, lazy)
        return lazy.payload

    async def _leaf_values(self, src: Any) -> Tuple[ClientsPayload, bool]:
        if isinstance(src, Leaf):
            return src.payload, src.all_equal
        return await self._force(src), isinstance(src, LazyShared)

    def _streams(self, *values: FederatingValue) -> bool:
        """Whether a reduction of `values` goes through a stream batch: streaming is on and
        every client group can stream. Reductions of values computed already join the
        batch too (as plain values): one request per worker for all of a round's
        reductions, which fail or succeed together."""
        return self.stream and self.num_clients > 0 and all(ex.can_stream for ex in self._groups)

    async def _plan_for_group(self, g: int, ex: BatchExecutor, srcs: Sequence[Any],
                              nodes: List[PlanNode], index: Dict[int, int]) -> List[int]:
        """Appends group g's plan nodes for `srcs` (deduplicated) to `nodes`; their indices."""
        return [await self._plan_node(g, ex, src, nodes, index) for src in srcs]

    async def _plan_node(self, g: int, ex: BatchExecutor, src: Any, nodes: List[PlanNode],
                         index: Dict[int, int]) -> int:
        # A method, not a closure that refers to itself: such a cycle would keep the
        # plan's values (a round's client tensors) alive until the garbage collector runs.
        key = id(src)
        if key in index:
            return index[key]
        node: PlanNode
        if isinstance(src, Leaf):
            vals = src.payload[g]
            node = PlanSame(vals[0]) if src.all_equal else PlanValues(list(vals))
        elif src.payload is not None:  # computed already (another consumer needed it)
            vals = src.payload[g]
            node = PlanSame(vals[0]) if isinstance(src, LazyShared) else PlanValues(list(vals))
        else:
            node = await _PLAN_NODES[type(src)](self, g, ex, src, nodes, index)
        nodes.append(node)
        index[key] = len(nodes) - 1
        return index[key]

    # ------------------------------------------------------------ stream batches
    async def _stream_partials(self, kind: str, values: Sequence[FederatingValue],
                               params_for: Any) -> List[Any]:
        """The per-group partials of a streamed reduction (joined with the invocation's batch)."""
        key = self._invocation()
        batch = self._batches.get(key)
        if batch is None:
            batch = self._batches[key] = StreamBatch()
            batch.task = asyncio.ensure_future(self._run_batch(key, batch))
        k = len(batch.requests)
        batch.requests.append((kind, [self._source(v) for v in values], params_for))
        self._leave(key)  # waiting for the batch: not what the batch waits for
        try:
            partials: List[Any] = (await asyncio.shield(batch.done))[k]
            return partials
        finally:
            self._enter(key)

    async def _run_batch(self, key: Any, batch: StreamBatch) -> None:
        try:
            seen = -1
            while seen != len(batch.requests) or self._busy.get(key, 0):
                # Wait for the round's other reductions: until no intrinsic of this
                # invocation runs and the loop turned a few times without a new one.
                if self._busy.get(key, 0):
                    ev = self._idle.get(key)
                    if ev is None:
                        ev = self._idle[key] = asyncio.Event()
                    await ev.wait()
                seen = len(batch.requests)
                for _ in range(_STREAM_QUIET_TURNS):
                    await asyncio.sleep(0)
        finally:
            if self._batches.get(key) is batch:
                del self._batches[key]
        try:
            for _, srcs, _ in batch.requests:
                for src in srcs:
                    _mark_streamed(src)
            self.stream_stats['batches'] += 1
            self.stream_stats['reductions'] += len(batch.requests)
            n = self.num_clients
            # Each reduction's partials joined as they arrive, from the first client on (the
            # server's additions, done while later groups still compute).
            arrivals = [_Arrivals(self._server.partial_joiner(kind, n))
                        for kind, _, _ in batch.requests]

            async def one(g: int, ex: BatchExecutor) -> Optional[List[Any]]:
                if not self._sizes[g]:
                    return None
                nodes: List[PlanNode] = []
                index: Dict[int, int] = {}
                reductions = []
                # The values every client shares first: a big one's bytes then lead the
                # request (the local transport places them once for all workers).
                for src in _shared_sources([x for _, srcs, _ in batch.requests for x in srcs]):
                    await self._plan_node(g, ex, src, nodes, index)
                for kind, srcs, params_for in batch.requests:
                    ids = await self._plan_for_group(g, ex, srcs, nodes, index)
                    # One source; a weighted mean's two: (values, weights).
                    reductions.append(PlanReduction(kind, tuple(ids), await params_for(ex)))
                parts = await ex.create_streamed_reductions(nodes, reductions, self._starts[g],
                                                            self._sizes[g], n,
                                                            self._slice_for(ex))
                for came, p in zip(arrivals, parts):
                    came.add(p)
                return parts
            await self._gather_groups(one)
            out = [came.partials() for came in arrivals]
        except BaseException as e:  # every reduction of the batch reports it
            if not batch.done.done():
                if isinstance(e, asyncio.CancelledError):
                    # Cancelled (Ctrl-C, SIGTERM, a closing context): cancel the waiters'
                    # future too. A future holding a CancelledError that nobody awaits
                    # any more is logged as "exception was never retrieved" at exit.
                    batch.done.cancel()
                else:
                    batch.done.set_exception(e)
            if not isinstance(e, Exception):
                raise
            return
        if not batch.done.done():
            batch.done.set_result(out)

    def _slice_for(self, ex: BatchExecutor) -> Optional[int]:
        """The streamed slice of a group: `stream_slice` if set; for groups in this process
        (no `worker_id`), their share of `IN_PROCESS_STREAM_CLIENTS`; else the holder's own."""
        if self.stream_slice is not None:
            return self.stream_slice
        if ex.worker_id is not None:
            return None
        local = sum(1 for e in self._groups if e.worker_id is None)
        return max(CHUNK, IN_PROCESS_STREAM_CLIENTS // max(local, 1) // CHUNK * CHUNK)

    # ------------------------------------------------------------ invocations at work
    def busy(self) -> Any:
        """Marks the calling invocation as working in the federating layer (a context manager).

        The `FederatingExecutor` wraps each of its operations in it: a stream batch
        waits until none of the invocation's operations runs, so that every
        reduction of a round whose arguments are still being made joins it.
        """
        return Busy(self, self._invocation())

    @staticmethod
    def _invocation() -> Any:
        return CURRENT_INVOCATION.get()

    def _enter(self, key: Any) -> None:
        self._busy[key] = self._busy.get(key, 0) + 1
        ev = self._idle.get(key)
        if ev is not None:
            ev.clear()

    def _leave(self, key: Any) -> None:
        left = self._busy.get(key, 1) - 1
        if left > 0:
            self._busy[key] = left
            return
        self._busy.pop(key, None)
        ev = self._idle.pop(key, None)
        if ev is not None:
            ev.set()


class _Arrivals:
    """The partials of one reduction as the groups answer, joined (`join`) with their
    neighbours as they come: a partial takes in the next one's head values when it holds
    the beginning of their chunk (or the next one has none); what cannot join yet waits."""

    __slots__ = ('_join', '_by_start', '_by_stop')

    def __init__(self, join: Optional[Callable[[Partial, Partial], Partial]]):
        self._join = join
        self._by_start: Dict[int, Partial] = {}
        self._by_stop: Dict[int, Partial] = {}

    def add(self, p: Partial) -> None:
        if self._join is not None:
            left = self._by_stop.get(p.start)
            if left is not None and _takes_in(left, p):
                self._drop(left)
                p = self._join(left, p)
            right = self._by_start.get(p.stop)
            while right is not None and _takes_in(p, right):
                self._drop(right)
                p = self._join(p, right)
                right = self._by_start.get(p.stop)
        self._by_start[p.start] = p
        self._by_stop[p.stop] = p

    def _drop(self, p: Partial) -> None:
        del self._by_start[p.start], self._by_stop[p.stop]

    def partials(self) -> List[Partial]:
        """What arrived, in client order (one partial when all joined)."""
        return [self._by_start[k] for k in sorted(self._by_start)]


def _takes_in(left: Partial, right: Partial) -> bool:
    """Whether joining `right` onto `left` folds `right`'s head values into the chunk `left`
    began, or neither has head values (tree nodes only). Head values wait, as they came,
    for the block that began their chunk."""
    return left.open_chunk is not None or not (left.head or right.head)


def _shared_sources(srcs: Sequence[Any]) -> List[LazyShared]:
    """The `LazyShared` values `srcs` read (through their plans), each once, in order."""
    out: List[LazyShared] = []
    seen: Set[int] = set()
    todo = list(srcs)[::-1]
    while todo:
        x = todo.pop()
        if not isinstance(x, Lazy) or id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, LazyShared):
            out.append(x)
        todo.extend(x.srcs[::-1])
    return out


def _mark_streamed(src: Any) -> None:
    if isinstance(src, Lazy) and src.payload is None:
        src.streamed = True
        for x in src.srcs:
            _mark_streamed(x)


# ---------------------------------------------------------------- Lazy -> values (block ops)
async def _compute_sourced(s: StreamingStrategy, lazy: LazySourced) -> ClientsPayload:
    sc, member = lazy.sourced, lazy.member

    async def load(g: int, ex: BatchExecutor) -> Any:
        start, n = s._starts[g], s._sizes[g]
        return await ex.create_values(sc[start:start + n], member) if n else []
    return await s._gather_groups(load)


async def _compute_local(s: StreamingStrategy, lazy: LazyLocal) -> ClientsPayload:
    async def send(g: int, ex: BatchExecutor) -> Any:
        leaves = lazy.stacked[g]
        return list(await ex.create_values_stacked(leaves, lazy.member)) if leaves else []
    return await s._gather_groups(send)


async def _compute_shared(s: StreamingStrategy, lazy: LazyShared) -> ClientsPayload:
    return await s.replicate_now(lazy.py, lazy.member, lazy.forms)


async def _compute_zip(s: StreamingStrategy, lazy: LazyZip) -> ClientsPayload:
    cols = [await s._leaf_values(src) for src in lazy.srcs]

    async def zip_group(g: int, ex: BatchExecutor) -> Any:
        if not s._sizes[g]:
            return []
        vals = [c[g] for c, _ in cols]
        rows = [list(r) for r in zip(*vals)] if vals else [[] for _ in range(s._sizes[g])]
        return await ex.create_structs(rows, lazy.names)
    return await s._gather_groups(zip_group)


async def _compute_select(s: StreamingStrategy, lazy: LazySelect) -> ClientsPayload:
    payload, all_equal = await s._leaf_values(lazy.srcs[0])

    async def select_group(g: int, ex: BatchExecutor) -> Any:
        vals = payload[g]
        if not vals:
            return []
        if all_equal:
            return cast(List[Any], await ex.create_selections(vals[:1], lazy.index)) * len(vals)
        return await ex.create_selections(vals, lazy.index)
    return await s._gather_groups(select_group)


async def _compute_map(s: StreamingStrategy, lazy: LazyMap) -> ClientsPayload:
    payload, all_equal = await s._leaf_values(lazy.srcs[0])

    async def map_group(g: int, ex: BatchExecutor) -> Any:
        vals = payload[g]
        if not vals:
            return []
        f = await s._embed_fn(lazy.fn, ex)
        if all_equal:
            return cast(List[Any], await ex.create_map(f, vals[:1])) * len(vals)
        return await ex.create_map(f, vals)
    return await s._gather_groups(map_group)


#: How each kind of Lazy is computed with the block operations.
_COMPUTE: Dict[type, Callable[[StreamingStrategy, Any], Awaitable[ClientsPayload]]] = {
    LazySourced: _compute_sourced, LazyLocal: _compute_local, LazyShared: _compute_shared,
    LazyZip: _compute_zip, LazySelect: _compute_select, LazyMap: _compute_map,
}


# ---------------------------------------------------------------- Lazy -> stream plan nodes
async def _plan_sourced(s: StreamingStrategy, g: int, ex: BatchExecutor, src: LazySourced,
                        nodes: List[PlanNode], index: Dict[int, int]) -> PlanNode:
    start, n = s._starts[g], s._sizes[g]
    return PlanClients(src.sourced[start:start + n], src.member)


async def _plan_local(s: StreamingStrategy, g: int, ex: BatchExecutor, src: LazyLocal,
                      nodes: List[PlanNode], index: Dict[int, int]) -> PlanNode:
    return PlanStacked(src.stacked[g] or [], src.member)


async def _plan_shared(s: StreamingStrategy, g: int, ex: BatchExecutor, src: LazyShared,
                       nodes: List[PlanNode], index: Dict[int, int]) -> PlanNode:
    # As the group's executor takes it (prepared once: `share_value`); it decides how the
    # value crosses (`WorkerDelegatingExecutor._wire_node`).
    return PlanShared(ex.share_value(src.py, src.member, src.forms), src.member)


async def _plan_map(s: StreamingStrategy, g: int, ex: BatchExecutor, src: LazyMap,
                    nodes: List[PlanNode], index: Dict[int, int]) -> PlanNode:
    fn = await s._embed_fn(src.fn, ex)
    return PlanMap(fn, await s._plan_node(g, ex, src.srcs[0], nodes, index))


async def _plan_select(s: StreamingStrategy, g: int, ex: BatchExecutor, src: LazySelect,
                       nodes: List[PlanNode], index: Dict[int, int]) -> PlanNode:
    return PlanSelect(src.index, await s._plan_node(g, ex, src.srcs[0], nodes, index))


async def _plan_zip(s: StreamingStrategy, g: int, ex: BatchExecutor, src: LazyZip,
                    nodes: List[PlanNode], index: Dict[int, int]) -> PlanNode:
    return PlanZip(tuple(src.names),
                   tuple([await s._plan_node(g, ex, x, nodes, index) for x in src.srcs]))


#: Group g's stream plan node of each kind of Lazy not computed yet.
_PLAN_NODES: Dict[type, Callable[..., Awaitable[PlanNode]]] = {
    LazySourced: _plan_sourced, LazyLocal: _plan_local, LazyShared: _plan_shared,
    LazyMap: _plan_map, LazySelect: _plan_select, LazyZip: _plan_zip,
}
