"""Lazy client values and stream batches of `FederatedResolvingStrategy` (see `resolving_strategy`).

```
  federated_map / federated_zip / selections at CLIENTS  ->  LazyMap / LazyZip / LazySelect
  clients by reference (SourcedClients)                   ->  LazySourced           (nothing runs)
  the driver's values, stackable, on worker groups        ->  LazyLocal (stacked, not sent)
  a driver's value on every client (a broadcast), likewise ->  LazyShared (prepared, not sent)
  a reduction of one  -> joins the invocation's `StreamBatch`; when the invocation is quiet,
      per group: the Lazy graph -> stream plan nodes (`runtime.stream_plan`, `_PLAN_NODES`)
                 + one PlanReduction per reduction -> ONE create_streamed_reductions
  anything else       -> `force`: the graph computed with the block operations (`_COMPUTE`), once
```

`ClientStreams` does this for the strategy that owns it (its `client_streams`). It is
given the client groups, frozen (`ClientGroups`: executors, sizes, starts, number of
clients), the server executor (which joins the partials as they arrive) and three
callables of the strategy: `gather` (one call per group, all at once, an error naming
its client), `embed_fn` (a tf_computation on a group's executor) and `replicate` (a
driver's value sent to every group). It owns what only streaming uses: the settings
(`stream`, `stream_slice`), the counters (`stats`), and per invocation its stream batch
and its operations at work (`busy`).
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, Dict, List, Optional, Sequence, Set, Tuple, Union, cast

from simharness.core import types as T
from simharness.core.reduction import CHUNK, Partial, ReductionKind
from simharness.executors.base import CURRENT_INVOCATION, BatchExecutor, ExecutorValue
from simharness.executors.federating import FederatingValue
from simharness.executors.strategy.strategy_plans import (
    ClientGroups,
    ClientsPayload,
    Lazy,
    LazyLocal,
    LazyMap,
    LazySelect,
    LazyShared,
    LazySourced,
    LazyZip,
    Leaf,
    StreamBatch,
)
from simharness.runtime.stream_plan import (
    PlanClients,
    PlanMap,
    PlanNode,
    PlanReduction,
    PlanSame,
    PlanSelect,
    PlanShared,
    PlanStacked,
    PlanValues,
    PlanZip,
)

#: Event-loop turns without a new reduction after which a stream batch runs.
_STREAM_QUIET_TURNS = 8

#: Clients whose values may be alive at once in THIS process while client groups that
#: run here (threads) stream together: their slices split it (whole chunks, at least one).
#: A group in a worker process streams in slices of the worker's own batch bound.
IN_PROCESS_STREAM_CLIENTS = 512

#: A source inside a plan: a `Lazy` (maybe computed already) or computed values (`Leaf`).
PlanSource = Union[Lazy, Leaf]
#: One call per group: ``make(g, executor)``.
GroupCall = Callable[[int, BatchExecutor], Awaitable[Any]]
#: The strategy's `_gather_groups`: every group's call at once, their results in group order.
Gather = Callable[[GroupCall], Awaitable[List[Any]]]
#: The strategy's `_embed_fn`: a tf_computation value as a value of a group's executor.
EmbedFn = Callable[[FederatingValue, BatchExecutor], Awaitable[ExecutorValue]]
#: The strategy's `replicate_now`: ``(py, member, prepared forms)`` sent to every group.
Replicate = Callable[[Any, T.Type, Dict[Any, Any]], Awaitable[ClientsPayload]]
#: A reduction's parameters on a group's executor (a zero, the accumulate function, ...).
ParamsFor = Callable[[BatchExecutor], Awaitable[Dict[str, Any]]]


class ClientStreams:
    """Lazy client values, their materialization, and streamed reductions over `groups`.

    Args:
      groups: the client groups (frozen; the owning strategy's).
      server: the server's executor: it joins the groups' partials as they arrive.
      gather: runs ``make(g, executor)`` for every group at once (the strategy's).
      embed_fn: a tf_computation value on a group's executor (the strategy's).
      replicate: a driver's value sent to every group now (the strategy's).
    """

    def __init__(
        self,
        groups: ClientGroups,
        server: BatchExecutor,
        *,
        gather: Gather,
        embed_fn: EmbedFn,
        replicate: Replicate,
    ):
        self.groups = groups
        self.gather = gather
        self.embed_fn = embed_fn
        self.replicate = replicate
        self._server = server
        #: Whether reductions of client values made by maps, zips and selections stream
        #: (computed and folded slice by slice in each group) instead of materializing them.
        self.stream = True
        #: Clients per streamed slice (None: each holder's batch bound, in whole chunks).
        self.stream_slice: Optional[int] = None
        #: Counters: reductions streamed, stream batches run, plans computed again.
        self.stats = {'reductions': 0, 'batches': 0, 'recomputed': 0}
        self._batches: Dict[Any, StreamBatch] = {}
        # Per invocation: intrinsics running now (not waiting for a stream batch), and an
        # event set whenever none is; a batch runs only then, so that the reductions of a
        # round whose arguments still need a round trip (a zero to materialize) join it.
        self._busy: Dict[Any, int] = {}
        self._idle: Dict[Any, asyncio.Event] = {}

    @staticmethod
    def source(v: FederatingValue) -> PlanSource:
        """A clients value as a plan source: its `Lazy`, or a `Leaf` of its values."""
        if isinstance(v.payload, Lazy):
            return v.payload
        return Leaf(v.payload, bool(cast(T.FederatedType, v.type_signature).all_equal))

    # ------------------------------------------------------------ lazy plans
    async def force(self, lazy: Lazy) -> ClientsPayload:
        """Computes a plan with the block operations (once; the result is cached)."""
        if lazy.payload is not None:
            return lazy.payload
        async with lazy.lock():
            if lazy.payload is None:
                if lazy.streamed and not isinstance(lazy, (LazyLocal, LazyShared)):
                    # the plan computed it in the workers; sent values are not recomputed
                    self.stats['recomputed'] += 1
                lazy.payload = await _COMPUTE[type(lazy)](self, lazy)
        return lazy.payload

    async def leaf_values(self, src: PlanSource) -> Tuple[ClientsPayload, bool]:
        """The per-group values of `src` (a plan is computed first), and whether they are
        equal on every client."""
        if isinstance(src, Leaf):
            return src.payload, src.all_equal
        return await self.force(src), isinstance(src, LazyShared)

    def streams_reduction(self, *values: FederatingValue) -> bool:
        """Whether a reduction of `values` goes through a stream batch: streaming is on and
        every client group can stream. Reductions of values computed already join the
        batch too (as plain values): one request per worker for all of a round's
        reductions, which fail or succeed together."""
        return (
            self.stream
            and self.groups.num_clients > 0
            and all(ex.can_stream for ex in self.groups.executors)
        )

    async def _plan_for_group(
        self,
        g: int,
        ex: BatchExecutor,
        srcs: Sequence[PlanSource],
        nodes: List[PlanNode],
        index: Dict[int, int],
    ) -> List[int]:
        """Appends group g's plan nodes for `srcs` (deduplicated) to `nodes`; their indices."""
        return [await self.plan_node(g, ex, src, nodes, index) for src in srcs]

    async def plan_node(
        self,
        g: int,
        ex: BatchExecutor,
        src: PlanSource,
        nodes: List[PlanNode],
        index: Dict[int, int],
    ) -> int:
        """Group g's plan node of `src` (appended to `nodes` after those it reads, once per
        source: `index` by the source's id); its index in `nodes`."""
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
    async def stream_partials(
        self, kind: ReductionKind, values: Sequence[FederatingValue], params_for: ParamsFor
    ) -> List[Partial]:
        """The per-group partials of a streamed reduction (joined with the invocation's batch)."""
        key = self._invocation()
        batch = self._batches.get(key)
        if batch is None:
            batch = self._batches[key] = StreamBatch()
            batch.task = asyncio.ensure_future(self._run_batch(key, batch))
        k = len(batch.requests)
        batch.requests.append((kind, [self.source(v) for v in values], params_for))
        self.leave(key)  # waiting for the batch: not what the batch waits for
        try:
            partials: List[Partial] = (await asyncio.shield(batch.done))[k]
            return partials
        finally:
            self.enter(key)

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
        groups = self.groups
        try:
            for _, srcs, _ in batch.requests:
                for src in srcs:
                    _mark_streamed(src)
            self.stats['batches'] += 1
            self.stats['reductions'] += len(batch.requests)
            n = groups.num_clients
            # Each reduction's partials joined as they arrive, from the first client on (the
            # server's additions, done while later groups still compute).
            arrivals = [
                _Arrivals(self._server.partial_joiner(kind, n)) for kind, _, _ in batch.requests
            ]

            async def one(g: int, ex: BatchExecutor) -> Optional[List[Any]]:
                if not groups.sizes[g]:
                    return None
                nodes: List[PlanNode] = []
                index: Dict[int, int] = {}
                reductions = []
                # The values every client shares first: a big one's bytes then lead the
                # request (the local transport places them once for all workers).
                for src in _shared_sources([x for _, srcs, _ in batch.requests for x in srcs]):
                    await self.plan_node(g, ex, src, nodes, index)
                for kind, srcs, params_for in batch.requests:
                    ids = await self._plan_for_group(g, ex, srcs, nodes, index)
                    # One source; a weighted mean's two: (values, weights).
                    reductions.append(PlanReduction(kind, tuple(ids), await params_for(ex)))
                parts = await ex.create_streamed_reductions(
                    nodes, reductions, groups.starts[g], groups.sizes[g], n, self._slice_for(ex)
                )
                for came, p in zip(arrivals, parts):
                    came.add(p)
                return parts

            await self.gather(one)
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
        local = sum(1 for e in self.groups.executors if e.worker_id is None)
        return max(CHUNK, IN_PROCESS_STREAM_CLIENTS // max(local, 1) // CHUNK * CHUNK)

    # ------------------------------------------------------------ invocations at work
    def busy(self) -> Busy:
        """Marks the calling invocation as working in the federating layer (a context manager).

        The `FederatingExecutor` wraps each of its operations in it (through its strategy's
        `busy`): a stream batch waits until none of the invocation's operations runs, so
        that every reduction of a round whose arguments are still being made joins it.
        """
        return Busy(self, self._invocation())

    @staticmethod
    def _invocation() -> Any:
        return CURRENT_INVOCATION.get()

    def enter(self, key: Any) -> None:
        """One more operation of the invocation `key` at work."""
        self._busy[key] = self._busy.get(key, 0) + 1
        ev = self._idle.get(key)
        if ev is not None:
            ev.clear()

    def leave(self, key: Any) -> None:
        """One operation of the invocation `key` less at work (its batch may run at none)."""
        left = self._busy.get(key, 1) - 1
        if left > 0:
            self._busy[key] = left
            return
        self._busy.pop(key, None)
        ev = self._idle.pop(key, None)
        if ev is not None:
            ev.set()


class Busy:
    """An operation of the invocation `key` at work in `streams` (`ClientStreams.busy`)."""

    __slots__ = ('_streams', '_key')

    def __init__(self, streams: ClientStreams, key: Any):
        self._streams, self._key = streams, key

    def __enter__(self) -> None:
        self._streams.enter(self._key)

    def __exit__(self, *exc: Any) -> None:
        self._streams.leave(self._key)


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


def _shared_sources(srcs: Sequence[PlanSource]) -> List[LazyShared]:
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
async def _compute_sourced(s: ClientStreams, lazy: LazySourced) -> ClientsPayload:
    sc, member = lazy.sourced, lazy.member

    async def load(g: int, ex: BatchExecutor) -> Any:
        start, n = s.groups.starts[g], s.groups.sizes[g]
        return await ex.create_values(sc[start : start + n], member) if n else []

    return await s.gather(load)


async def _compute_local(s: ClientStreams, lazy: LazyLocal) -> ClientsPayload:
    async def send(g: int, ex: BatchExecutor) -> Any:
        leaves = lazy.stacked[g]
        return list(await ex.create_values_stacked(leaves, lazy.member)) if leaves else []

    return await s.gather(send)


async def _compute_shared(s: ClientStreams, lazy: LazyShared) -> ClientsPayload:
    return await s.replicate(lazy.py, lazy.member, lazy.forms)


async def _compute_zip(s: ClientStreams, lazy: LazyZip) -> ClientsPayload:
    cols = [await s.leaf_values(src) for src in lazy.srcs]

    async def zip_group(g: int, ex: BatchExecutor) -> Any:
        if not s.groups.sizes[g]:
            return []
        vals = [c[g] for c, _ in cols]
        rows = [list(r) for r in zip(*vals)] if vals else [[] for _ in range(s.groups.sizes[g])]
        return await ex.create_structs(rows, lazy.names)

    return await s.gather(zip_group)


async def _compute_select(s: ClientStreams, lazy: LazySelect) -> ClientsPayload:
    payload, all_equal = await s.leaf_values(lazy.srcs[0])

    async def select_group(g: int, ex: BatchExecutor) -> Any:
        vals = payload[g]
        if not vals:
            return []
        if all_equal:
            return cast(List[Any], await ex.create_selections(vals[:1], lazy.index)) * len(vals)
        return await ex.create_selections(vals, lazy.index)

    return await s.gather(select_group)


async def _compute_map(s: ClientStreams, lazy: LazyMap) -> ClientsPayload:
    payload, all_equal = await s.leaf_values(lazy.srcs[0])

    async def map_group(g: int, ex: BatchExecutor) -> Any:
        vals = payload[g]
        if not vals:
            return []
        f = await s.embed_fn(lazy.fn, ex)
        if all_equal:
            return cast(List[Any], await ex.create_map(f, vals[:1])) * len(vals)
        return await ex.create_map(f, vals)

    return await s.gather(map_group)


#: How each kind of Lazy is computed with the block operations.
_COMPUTE: Dict[type, Callable[[ClientStreams, Any], Awaitable[ClientsPayload]]] = {
    LazySourced: _compute_sourced,
    LazyLocal: _compute_local,
    LazyShared: _compute_shared,
    LazyZip: _compute_zip,
    LazySelect: _compute_select,
    LazyMap: _compute_map,
}


# ---------------------------------------------------------------- Lazy -> stream plan nodes
async def _plan_sourced(
    s: ClientStreams,
    g: int,
    ex: BatchExecutor,
    src: LazySourced,
    nodes: List[PlanNode],
    index: Dict[int, int],
) -> PlanNode:
    start, n = s.groups.starts[g], s.groups.sizes[g]
    return PlanClients(src.sourced[start : start + n], src.member)


async def _plan_local(
    s: ClientStreams,
    g: int,
    ex: BatchExecutor,
    src: LazyLocal,
    nodes: List[PlanNode],
    index: Dict[int, int],
) -> PlanNode:
    return PlanStacked(src.stacked[g] or [], src.member)


async def _plan_shared(
    s: ClientStreams,
    g: int,
    ex: BatchExecutor,
    src: LazyShared,
    nodes: List[PlanNode],
    index: Dict[int, int],
) -> PlanNode:
    # As the group's executor takes it (prepared once: `share_value`); it decides how the
    # value crosses (`WorkerDelegatingExecutor._wire_node`).
    return PlanShared(ex.share_value(src.py, src.member, src.forms), src.member)


async def _plan_map(
    s: ClientStreams,
    g: int,
    ex: BatchExecutor,
    src: LazyMap,
    nodes: List[PlanNode],
    index: Dict[int, int],
) -> PlanNode:
    fn = await s.embed_fn(src.fn, ex)
    return PlanMap(fn, await s.plan_node(g, ex, src.srcs[0], nodes, index))


async def _plan_select(
    s: ClientStreams,
    g: int,
    ex: BatchExecutor,
    src: LazySelect,
    nodes: List[PlanNode],
    index: Dict[int, int],
) -> PlanNode:
    return PlanSelect(src.index, await s.plan_node(g, ex, src.srcs[0], nodes, index))


async def _plan_zip(
    s: ClientStreams,
    g: int,
    ex: BatchExecutor,
    src: LazyZip,
    nodes: List[PlanNode],
    index: Dict[int, int],
) -> PlanNode:
    return PlanZip(
        tuple(src.names), tuple([await s.plan_node(g, ex, x, nodes, index) for x in src.srcs])
    )


#: Group g's stream plan node of each kind of Lazy not computed yet.
_PLAN_NODES: Dict[type, Callable[..., Awaitable[PlanNode]]] = {
    LazySourced: _plan_sourced,
    LazyLocal: _plan_local,
    LazyShared: _plan_shared,
    LazyMap: _plan_map,
    LazySelect: _plan_select,
    LazyZip: _plan_zip,
}
