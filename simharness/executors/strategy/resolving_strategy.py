"""`FederatedResolvingStrategy`: runs every intrinsic on a server child and client groups.

Clients are split into contiguous groups ``[start, start + n)``, each hosted
by one `BatchExecutor` child (a thread-delegating EagerTF executor, or a
process-delegating executor whose worker hosts the block). Every intrinsic
issues ONE batch operation per group, all groups concurrently; reductions
are computed as per-group partials of the canonical tree and combined on
the server child, so results do not depend on the grouping.

Payloads of federated values: a server value is one child value of the
server executor; a clients value is a list (one per group) of lists of
child values (an all-equal value repeats one child value per group), or a
`Lazy` plan not computed yet.

Streaming (map -> reduce in bounded memory):

```
  federated_map / federated_zip / selections at CLIENTS  ->  Lazy plan (nothing runs)
  federated_sum / mean / weighted mean / aggregate / secure sums of a Lazy
      -> joins the invocation's stream batch (every reduction asked for while the
         event loop turns a few times: a round's mean and sums of one map)
      -> per group ONE create_streamed_reductions(plan nodes, PlanReductions): the group's
         holder computes the plan slice by slice (<= clients_per_worker clients,
         whole chunks) and folds each slice into every reduction's partial
      -> partials combined on the server as before: the same bits
  anything else (compute, sequence ops, select, collect) materializes the plan
      with the block operations of before, once (cached)
```

A plan that a stream batch consumed and something else needs later is
computed again (counted in `stream_stats['recomputed']`): client
computations are pure functions, so the bits are the same. The Lazy graph,
its translation into a typed stream plan (`runtime.stream_plan`) and the
stream batches are `resolving_streams.ClientStreams`, which the strategy owns
(`client_streams`: given the frozen `ClientGroups` and the strategy's `_gather_groups`,
`_embed_fn` and `replicate_now`); `stream`, `stream_slice` and `stream_stats` are its
settings and counters, read and set through the strategy.
"""

from __future__ import annotations

import asyncio
import collections.abc
from typing import Any, Awaitable, Callable, Dict, List, Optional, Sequence, Tuple, cast

import numpy as np

from simharness.core import building_blocks as bb
from simharness.core import types as T
from simharness.core.batching import stack_python_values
from simharness.core.structure import Struct
from simharness.errors import CardinalityError, SimharnessTypeError, SimharnessValueError, at_client
from simharness.core.reduction import EXTREMUM_FOLDS, Partial, ReductionKind, extremum_identity
from simharness.data.sourced import SourcedClients
from simharness.executors.base import BatchExecutor, ExecutorValue
from simharness.executors.federating import FederatingExecutor, FederatingStrategy, FederatingValue
from simharness.executors.strategy.resolving_streams import IN_PROCESS_STREAM_CLIENTS  # noqa: F401
from simharness.executors.strategy.resolving_streams import Busy, ClientStreams
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
    hosting_child,
    mapping_names_clients,
    secure_params,
    targets_from_mapping,
)

#: The most bytes of one worker group's clients' values (from the driver's Python) that ride
#: inside a streamed request's plan (`LazyLocal`, `PlanStacked`); bigger ones are sent at once
#: by a request of their own. Inside the plan they save a request and an answer per worker, but
#: reach the worker only with the plan, no longer while the driver still prepares the round.
#: Measured on 2 cores: map + sum of 100 floats, driver CPU a call 1.05 -> 0.86 ms on 2 workers,
#: 4.4 -> 3.2 ms on 16; the reference FedAvg round, 16 workers (72 KB each): driver CPU
#: 14.0-15.5 -> 12.4-14.1 ms, the round unchanged; 2 workers (600 KB each): the round 22.5 ->
#: 23.6 ms. The bound sits between the two.
INLINE_CLIENT_BYTES = 128 << 10


def _in_cohort(err: Exception, start: int) -> Exception:
    """`err` of a group whose part starts at client `start`, naming its client by the
    client's position in the whole list (`at_client`), when it names one."""
    state = getattr(err, '__dict__', {})
    pos = state.pop('map_position', None)
    if isinstance(pos, int) and 'client' not in state:
        return cast(Exception, at_client(err, start + pos))
    if 'client' in state and start:
        return cast(Exception, at_client(err, start))
    return err


class FederatedResolvingStrategy(FederatingStrategy):
    """Runs intrinsics over a server child and groups of clients.

    Args:
      executor: the owning `FederatingExecutor`.
      server: the child that holds server values.
      client_groups: (child, number of clients) per group, in client order.
    """

    def __init__(
        self,
        executor: FederatingExecutor,
        server: BatchExecutor,
        client_groups: Sequence[Tuple[BatchExecutor, int]],
        clients_target: bool = True,
    ):
        super().__init__(executor)
        self._server = server
        #: False when built from a mapping without a `CLIENTS` entry: values placed at
        #: CLIENTS are refused (TFF's ValueError), where ``CLIENTS: []`` is zero clients.
        self.clients_target = clients_target
        #: The client groups (frozen), in client order.
        self.groups = ClientGroups.of(client_groups)
        #: Lazy client values and streamed reductions over the groups (see `resolving_streams`).
        self.client_streams = ClientStreams(
            self.groups,
            server,
            gather=self._gather_groups,
            embed_fn=self._embed_fn,
            replicate=self.replicate_now,
        )

    @property
    def num_clients(self) -> int:
        """The number of clients, in all groups."""
        return self.groups.num_clients

    @property
    def stream(self) -> bool:
        """Whether reductions of client values made by maps, zips and selections stream
        (computed and folded slice by slice in each group) instead of materializing them."""
        return self.client_streams.stream

    @stream.setter
    def stream(self, on: bool) -> None:
        self.client_streams.stream = on

    @property
    def stream_slice(self) -> Optional[int]:
        """Clients per streamed slice (None: each holder's batch bound, in whole chunks)."""
        return self.client_streams.stream_slice

    @stream_slice.setter
    def stream_slice(self, clients: Optional[int]) -> None:
        self.client_streams.stream_slice = clients

    @property
    def stream_stats(self) -> Dict[str, int]:
        """Counters: reductions streamed, stream batches run, plans computed again."""
        return self.client_streams.stats

    def busy(self) -> Busy:
        """Marks the calling invocation as working in the federating layer (a context
        manager: `ClientStreams.busy`)."""
        return self.client_streams.busy()

    @classmethod
    def factory(
        cls, server: Any, client_groups: Optional[Sequence[Tuple[BatchExecutor, int]]] = None
    ):
        """A strategy factory for `FederatingExecutor`.

        Either ``factory(server, [(child, number of clients), ...])`` or TFF's
        ``factory({SERVER: ex, CLIENTS: [ex, ...]})``: one client per `CLIENTS`
        executor (a single executor is one client; a pair ``(ex, n)`` is a group
        of n clients), no `CLIENTS` entry means no clients. A child may be
        wrapped in a `ReferenceResolvingExecutor`, as in TFF's stacks: its
        target is used.

        Raises:
          ValueError: the mapping has no `SERVER` executor or an unknown key.
          TypeError: a child is not an executor that can host clients.
        """
        clients_target = True
        if isinstance(server, collections.abc.Mapping):
            if client_groups is not None:
                raise SimharnessTypeError(
                    'give either a mapping {SERVER: ..., CLIENTS: [...]} or '
                    'a server and client groups, not both'
                )
            clients_target = mapping_names_clients(server)
            server, client_groups = targets_from_mapping(server)
        elif client_groups is None:
            raise SimharnessTypeError(
                'FederatedResolvingStrategy.factory needs client groups '
                '[(executor, number of clients), ...] after the server '
                'executor, or one mapping {SERVER: ex, CLIENTS: [ex, ...]}'
            )
        server = hosting_child(server, 'the SERVER executor')
        groups = [
            (hosting_child(ex, f'client executor {i}'), n)
            for i, (ex, n) in enumerate(client_groups)
        ]
        return lambda executor: cls(executor, server, groups, clients_target)

    def check_placement(self, placement: T.PlacementLiteral, t: T.Type) -> None:
        """Raises `SimharnessValueError` (a ValueError, TFF's) when a value of type `t` is
        placed at CLIENTS and the target executors had no `CLIENTS` entry."""
        if placement is T.CLIENTS and not self.clients_target:
            raise SimharnessValueError(
                f'a value of type {t} is placed at CLIENTS, but the target executors have no '
                'CLIENTS executor: give {SERVER: ex, CLIENTS: [ex, ...]} (CLIENTS: [] for zero '
                'clients)'
            )

    def close(self) -> None:
        seen = set()
        for ex in [self._server, *self.groups.executors]:
            if id(ex) not in seen:
                seen.add(id(ex))
                ex.close()

    # ------------------------------------------------------------ helpers
    def _fed(self, payload: Any, t: T.FederatedType) -> FederatingValue:
        return FederatingValue('federated', payload, t, self.executor)

    async def _gather_groups(
        self, make: Callable[[int, BatchExecutor], Awaitable[Any]]
    ) -> List[Any]:
        """`make(g, ex)` for every group at once. An error naming a client by its position
        in its group's part (`client`, or `map_position` from a leaf's map) is raised
        naming the client by its position in the program's list (`at_client`)."""

        async def run(g: int, ex: BatchExecutor) -> Any:
            try:
                return await make(g, ex)
            except Exception as e:
                state = getattr(e, '__dict__', {})
                if state.get('_named_by') == id(self):  # by a group call inside this one
                    raise
                state['_named_by'] = id(self)  # private: not sent with a worker's error
                raise _in_cohort(e, self.groups.starts[g] if g < len(self.groups.starts) else 0)

        # The largest groups start first: a request's preparation and sending takes a
        # share of a millisecond per worker, and a round lasts as long as the group that
        # finishes last (the layout has e.g. 48 and 52 clients: the 52 go out first).
        sizes = self.groups.sizes
        execs = self.groups.executors
        order = sorted(range(len(execs)), key=lambda g: -sizes[g] if g < len(sizes) else 0)
        done = await asyncio.gather(*[run(g, execs[g]) for g in order])
        out = [None] * len(execs)  # filled below, every position
        for g, v in zip(order, done):
            out[g] = v
        return out

    async def _materialize(self, v: FederatingValue) -> Any:
        """A Python/tensor form of an unplaced or server value, for moving it."""
        if v.kind == 'federated':
            ft = cast(T.FederatedType, v.type_signature)  # the type of a federated value
            if ft.placement is not T.SERVER and not ft.all_equal:
                raise SimharnessTypeError(f'expected a server value, got {v.type_signature}')
            if ft.placement is T.SERVER:
                return await v.payload.compute()
            for g, vals in enumerate(await self._as_clients(v)):
                if vals:
                    return (await self.groups.executors[g].compute_many(vals[:1]))[0]
        return await v.compute()

    @staticmethod
    def _check_fn(fn: FederatingValue) -> None:
        if fn.kind != 'unplaced' or not isinstance(fn.source, bb.CompiledComputation):
            raise SimharnessTypeError(
                f'expected a tf_computation, got a value of type {fn.type_signature}'
            )

    async def _embed_fn(self, fn: FederatingValue, child: BatchExecutor) -> ExecutorValue:
        self._check_fn(fn)
        return await child.create_value(fn.source, fn.type_signature)

    def _plans_carry_values(self) -> bool:
        """Whether the driver's values for clients wait for the stream plan that uses them
        (`LazyLocal`, `LazyShared`): streaming on worker groups only (in-process groups
        take the values as they are)."""
        return self.client_streams.streams_reduction() and all(
            ex.worker_id is not None for ex in self.groups.executors
        )

    async def _replicate(self, py: Any, member: T.Type) -> Any:
        """`py` on every client: a `LazyShared` (sent with the stream plan that uses it) when
        streaming on worker groups only, else sent to every group now (`replicate_now`)."""
        if not self._plans_carry_values() or isinstance(py, ExecutorValue):
            return await self.replicate_now(py, member)
        lazy = LazyShared(py, member)
        for ex in self.groups.executors:  # prepared (checked, encoded) now, once for every group
            ex.share_value(py, member, lazy.forms)
        return lazy

    async def replicate_now(
        self, py: Any, member: T.Type, shared: Optional[Dict[Any, Any]] = None
    ) -> ClientsPayload:
        """`py` sent to every group: per group, one value repeated for each of its clients.
        `shared`: what the groups' executors prepared once for it (`share_value`)."""
        shared = {} if shared is None else shared

        async def one(g, ex):
            if self.groups.sizes[g] == 0:
                return []
            v = await ex.create_value(ex.share_value(py, member, shared), member)
            return [v] * self.groups.sizes[g]

        return await self._gather_groups(one)

    def _elements(self, arg: FederatingValue, n: int) -> List[FederatingValue]:
        if arg is None or arg.kind != 'struct' or len(arg.payload) != n:
            raise SimharnessTypeError(f'expected a struct of {n} arguments, got {arg!r}')
        return [v for _, v in arg.payload]

    def _check_clients(self, v: FederatingValue) -> None:
        t = v.type_signature
        if v.kind != 'federated' or cast(T.FederatedType, t).placement is not T.CLIENTS:
            raise SimharnessTypeError(f'expected a value placed at CLIENTS, got {t}', actual=t)

    async def _as_clients(self, v: FederatingValue) -> ClientsPayload:
        """The per-group values of a clients value (a lazy plan is computed first)."""
        self._check_clients(v)
        if isinstance(v.payload, Lazy):
            return await self.client_streams.force(v.payload)
        return v.payload

    # ------------------------------------------------------------ values
    async def ingest_federated(self, value: Any, t: T.FederatedType) -> FederatingValue:
        self.check_placement(t.placement, t)
        if t.placement is T.SERVER:
            return self._fed(await self._server.create_value(value, t.member), t)
        if t.all_equal:
            return self._fed(await self._replicate(value, t.member), t)
        if not isinstance(value, collections.abc.Sequence) or isinstance(value, (str, bytes)):
            raise SimharnessTypeError(
                f'a value of type {t} must be a list with one element per client, got '
                f'{type(value).__name__}',
                expected=t,
                actual=type(value).__name__,
            )
        if len(value) != self.num_clients:
            raise CardinalityError(
                f'got a list of {len(value)} values for {self.num_clients} clients ({t})',
                expected=self.num_clients,
                actual=len(value),
            )
        if self.stream and isinstance(value, SourcedClients) and self.num_clients:
            # Clients by reference stay a reference until something needs them: a
            # streamed reduction loads them slice by slice where they are computed.
            return self._fed(LazySourced(value, t.member), t)
        local = self._local_rows(value, t.member)
        if local is not None:
            return self._fed(LazyLocal(local, t.member), t)

        async def one(g, ex):
            s = self.groups.starts[g]
            # A slice, not a list: lazy sequences (SourcedClients) stay lazy, so
            # that a worker can load its own clients.
            part = value[s : s + self.groups.sizes[g]]
            return await ex.create_values(
                part if not isinstance(part, tuple) else list(part), t.member
            )

        return self._fed(await self._gather_groups(one), t)

    def _local_rows(self, value: Sequence[Any], member: T.Type) -> Optional[List[Any]]:
        """Per worker group, its clients' values stacked (`stack_python_values`), to go with
        the stream plan that uses them instead of a request of their own (`LazyLocal`);
        None unless streaming on worker groups only, every group's values stack exactly
        (anything else is sent now, by `create_values`, which gives the precise errors) and
        no group's rows are over `INLINE_CLIENT_BYTES` (big ones are sent now, so that the
        workers take them in while the driver still prepares the round)."""
        if not self._plans_carry_values() or isinstance(value, SourcedClients):
            return None
        leaves = T.flatten_type(member)
        if not all(
            isinstance(t, T.TensorType) and t.is_fully_defined and t.dtype != np.dtype(object)
            for t in leaves
        ):
            return None  # what does not stack (`stack_python_values`), before stacking it
        row_bytes = sum(t.dtype.itemsize * int(np.prod(t.shape, dtype=np.int64)) for t in leaves)
        if row_bytes * max(self.groups.sizes, default=0) > INLINE_CLIENT_BYTES:
            return None
        # Stacked once for every group (each group's rows are a slice of them: one check and
        # one copy per leaf, not one per worker).
        rows = stack_python_values(list(value), member)
        if rows is None:
            return None
        return [
            [x[a : a + n] for x in rows] if n else None
            for a, n in zip(self.groups.starts, self.groups.sizes)
        ]

    async def compute_federated_value(self, v: FederatingValue) -> Any:
        t = cast(T.FederatedType, v.type_signature)  # the type of a federated value
        if t.placement is T.SERVER:
            return await v.payload.compute()
        if t.all_equal:
            return await self._materialize(v)

        payload = await self._as_clients(v)

        async def one(g, ex):
            return await ex.compute_many(payload[g]) if payload[g] else []

        out: List[Any] = []
        for part in await self._gather_groups(one):
            out.extend(part)
        return out

    async def select_federated(self, v: FederatingValue, index: int) -> FederatingValue:
        t = cast(T.FederatedType, v.type_signature)  # the type of a federated value
        rt = T.FederatedType(cast(T.StructType, t.member)[index], t.placement, t.all_equal)
        if t.placement is T.SERVER:
            return self._fed((await self._server.create_selections([v.payload], index))[0], rt)
        if self.stream and not t.all_equal:
            return self._fed(LazySelect(self.client_streams.source(v), index), rt)
        payload = await self._as_clients(v)

        async def one(g, ex):
            vals = payload[g]
            if not vals:
                return []
            if t.all_equal:
                return (await ex.create_selections(vals[:1], index)) * len(vals)
            return await ex.create_selections(vals, index)

        return self._fed(await self._gather_groups(one), rt)

    # ------------------------------------------------------------ intrinsics
    async def compute_intrinsic(
        self, uri: str, static: Dict[str, Any], arg: Optional[FederatingValue], result_type: T.Type
    ) -> FederatingValue:
        method = getattr(self, '_' + uri, None)
        if method is None:
            # TFF's error for an intrinsic a strategy does not implement
            raise NotImplementedError(
                f'intrinsic {uri!r} is not supported by {type(self).__name__}'
            )
        return await method(arg, static, result_type)

    async def _federated_map(self, arg, static, rt):
        fn, value = self._elements(arg, 2)
        self._check_clients(value)
        all_equal = value.type_signature.all_equal
        if self.stream and not all_equal:
            self._check_fn(fn)
            return self._fed(LazyMap(self.client_streams.source(value), fn), rt)
        payload = await self._as_clients(value)
        # A value equal on all clients is mapped once per group, unless the function
        # draws fresh random values: then, as in TFF, each client runs it.
        once = all_equal and not (
            isinstance(fn.source, bb.CompiledComputation) and fn.source.may_be_random
        )

        async def one(g, ex):
            vals = payload[g]
            if not vals:
                return []
            f = await self._embed_fn(fn, ex)
            if once:
                return (await ex.create_map(f, vals[:1])) * len(vals)
            return await ex.create_map(f, vals)

        return self._fed(await self._gather_groups(one), rt)

    async def _federated_map_all_equal(self, arg, static, rt):
        # The result is equal on all clients: computed once (on the server child,
        # so that it does not depend on how clients are grouped), then placed.
        fn, value = self._elements(arg, 2)
        self._check_clients(value)
        if not self.num_clients:
            return self._fed([[] for _ in self.groups.executors], rt)
        member = cast(T.FederatedType, value.type_signature).member
        f = await self._embed_fn(fn, self._server)
        src = await self._server.create_value(await self._materialize(value), member)
        out = (await self._server.create_map(f, [src]))[0]
        return self._fed(await self._replicate(await out.compute(), rt.member), rt)

    async def _federated_apply(self, arg, static, rt):
        fn, value = self._elements(arg, 2)
        f = await self._embed_fn(fn, self._server)
        return self._fed((await self._server.create_map(f, [value.payload]))[0], rt)

    async def _federated_broadcast(self, arg, static, rt):
        shared = self._shareable_server_value(arg)
        if shared is not None:  # every group uses the server's value itself (one tensor)
            return self._fed(await self._replicate(shared, rt.member), rt)
        py = await self._materialize(arg)
        return self._fed(await self._replicate(py, rt.member), rt)

    def _shareable_server_value(self, arg: FederatingValue) -> Optional[ExecutorValue]:
        """The server value of `arg` when every client group can use it without a copy."""
        if (
            arg.kind != 'federated'
            or cast(T.FederatedType, arg.type_signature).placement is not T.SERVER
            or not isinstance(arg.payload, ExecutorValue)
        ):
            return None
        for g, ex in enumerate(self.groups.executors):
            if self.groups.sizes[g] and not ex.can_share(arg.payload):
                return None
        return arg.payload

    async def _federated_value_at_clients(self, arg, static, rt):
        return self._fed(await self._replicate(await self._materialize(arg), rt.member), rt)

    async def _federated_value_at_server(self, arg, static, rt):
        py = await self._materialize(arg)
        return self._fed(await self._server.create_value(py, rt.member), rt)

    async def _federated_eval_at_clients(self, arg, static, rt):
        async def one(g, ex):
            if not self.groups.sizes[g]:
                return []
            f = await self._embed_fn(arg, ex)
            return await ex.create_map(f, None, count=self.groups.sizes[g])

        return self._fed(await self._gather_groups(one), rt)

    async def _federated_eval_at_server(self, arg, static, rt):
        f = await self._embed_fn(arg, self._server)
        return self._fed((await self._server.create_map(f, None, count=1))[0], rt)

    def _zip_plan(self, v: FederatingValue) -> Any:
        """A (nested) struct of clients values as a lazy zip plan."""
        if v.kind == 'federated':
            self._check_clients(v)
            return self.client_streams.source(v)
        if v.kind != 'struct':
            raise SimharnessTypeError(
                f'federated_zip needs federated values, got {v.type_signature}'
            )
        return LazyZip([self._zip_plan(e) for _, e in v.payload], [n for n, _ in v.payload])

    async def _zip_rows(self, v: FederatingValue, g: int) -> Sequence[Any]:
        """Per-client member values of group g for a (nested) struct of federated values."""
        if v.kind == 'federated':
            return (await self._as_clients(v))[g]
        if v.kind != 'struct':
            raise SimharnessTypeError(
                f'federated_zip needs federated values, got {v.type_signature}'
            )
        cols = [await self._zip_rows(e, g) for _, e in v.payload]
        names = [n for n, _ in v.payload]
        rows = [list(r) for r in zip(*cols)] if cols else [[] for _ in range(self.groups.sizes[g])]
        return await self.groups.executors[g].create_structs(rows, names)

    async def _federated_zip_at_clients(self, arg, static, rt):
        if self.stream and not rt.all_equal and self.num_clients:
            return self._fed(self._zip_plan(arg), rt)

        async def one(g, ex):
            if not self.groups.sizes[g]:
                return []
            return await self._zip_rows(arg, g)

        return self._fed(await self._gather_groups(one), rt)

    async def _federated_zip_at_server(self, arg, static, rt):
        return self._fed(await self._zip_server_struct(arg), rt)

    async def _zip_server_struct(self, v: FederatingValue) -> Any:
        # A method, not a self-referencing closure (a cycle the garbage collector frees).
        if v.kind == 'federated':
            return v.payload
        names = [n for n, _ in v.payload]
        row = [await self._zip_server_struct(e) for _, e in v.payload]
        return (await self._server.create_structs([row], names))[0]

    async def _reduce(
        self,
        kind: ReductionKind,
        values_per_group: List[List[Any]],
        params_for,
        server_params: Dict[str, Any],
        rt: T.FederatedType,
    ):
        n = self.num_clients

        async def one(g, ex):
            if not self.groups.sizes[g]:
                return None
            return await ex.create_partial_reduction(
                kind, values_per_group[g], self.groups.starts[g], n, await params_for(ex)
            )

        partials = [p for p in await self._gather_groups(one) if p is not None]
        return await self._reduction_result(kind, partials, server_params, rt.member)

    async def _reduction_result(
        self,
        kind: ReductionKind,
        partials: List[Partial],
        server_params: Dict[str, Any],
        member: T.Type,
    ) -> Any:
        """The server's value of the reduction of `partials`; then their lent memory (views
        of workers' arenas, `Partial.loans`) goes back: the result never refers to it."""
        try:
            return await self._server.create_reduction_result(
                kind, partials, self.num_clients, server_params, member
            )
        finally:
            for p in partials:
                p.release()

    async def _zeros_at_server(
        self, rt: T.FederatedType, fill: Optional[ReductionKind] = None
    ) -> FederatingValue:
        """Zeros of the result type at the server (a reduction over no clients); with
        `fill` MIN or MAX, the start value TFF gives that reduction instead."""

        def zeros(t):
            if isinstance(t, T.StructType):
                return Struct((n, zeros(e)) for n, e in t.items())
            shape = [d or 0 for d in (t.shape or ())]
            if fill is not None:
                return np.full(shape, extremum_identity(fill, t.dtype), dtype=t.dtype)
            return np.zeros(shape, dtype=t.dtype)

        return self._fed(await self._server.create_value(zeros(rt.member), rt.member), rt)

    async def _simple_reduce(self, kind: ReductionKind, value: FederatingValue, rt, params=None):
        if self.num_clients == 0:
            if kind in (ReductionKind.MEAN, ReductionKind.WEIGHTED_MEAN):
                raise SimharnessValueError('federated_mean over zero clients is undefined')
            return await self._zeros_at_server(rt, kind if kind in EXTREMUM_FOLDS else None)
        params = params or {}

        async def same(ex):
            return params

        if self.client_streams.streams_reduction(value):
            partials = await self.client_streams.stream_partials(kind, [value], same)
            return self._fed(await self._reduction_result(kind, partials, params, rt.member), rt)
        payload = await self._as_clients(value)
        return self._fed(await self._reduce(kind, payload, same, params, rt), rt)

    async def _federated_sum(self, arg, static, rt):
        return await self._simple_reduce(ReductionKind.SUM, arg, rt)

    async def _federated_mean(self, arg, static, rt):
        return await self._simple_reduce(ReductionKind.MEAN, arg, rt)

    async def _federated_min(self, arg, static, rt):
        return await self._simple_reduce(ReductionKind.MIN, arg, rt)

    async def _federated_max(self, arg, static, rt):
        return await self._simple_reduce(ReductionKind.MAX, arg, rt)

    async def _federated_weighted_mean(self, arg, static, rt):
        value, weight = self._elements(arg, 2)
        if self.num_clients == 0:
            raise SimharnessValueError('federated_mean over zero clients is undefined')

        async def same(ex):
            return {}

        self._check_clients(value)
        self._check_clients(weight)
        if self.client_streams.streams_reduction(value, weight):
            wm = ReductionKind.WEIGHTED_MEAN
            partials = await self.client_streams.stream_partials(wm, [value, weight], same)
            return self._fed(await self._reduction_result(wm, partials, {}, rt.member), rt)
        vp, wp = await self._as_clients(value), await self._as_clients(weight)
        pairs = [list(zip(a, b)) for a, b in zip(vp, wp)]
        wm = ReductionKind.WEIGHTED_MEAN
        return self._fed(await self._reduce(wm, pairs, same, {}, rt), rt)

    async def _secure_reduce(self, kind: ReductionKind, arg, static, rt):
        if not T.flatten_type(rt.member):  # an empty struct: nothing to sum
            return await self._zeros_at_server(rt)
        params = secure_params(kind, static, rt.member, self.num_clients)
        return await self._simple_reduce(kind, arg, rt, params)

    async def _federated_secure_sum_bitwidth(self, arg, static, rt):
        return await self._secure_reduce(ReductionKind.SECURE_SUM_BITWIDTH, arg, static, rt)

    async def _federated_secure_sum(self, arg, static, rt):
        # Values in [0, max_input]: the bitwidth machinery with a per-element bound check.
        return await self._secure_reduce(ReductionKind.SECURE_SUM_BITWIDTH, arg, static, rt)

    async def _federated_secure_modular_sum(self, arg, static, rt):
        return await self._secure_reduce(ReductionKind.SECURE_MODULAR_SUM, arg, static, rt)

    async def _federated_aggregate(self, arg, static, rt):
        value, zero, accumulate, merge, report = self._elements(arg, 5)
        zero_py = await self._materialize(zero)
        zt = zero.type_signature
        if isinstance(zt, T.FederatedType):  # a zero placed at the server
            zt = zt.member
        report_fn = await self._embed_fn(report, self._server)
        if self.num_clients == 0:
            z = await self._server.create_value(zero_py, zt)
            return self._fed(await self._server.create_call(report_fn, z), rt)

        async def params_for(ex):
            return {
                'zero': await ex.create_value(zero_py, zt),
                'accumulate': await self._embed_fn(accumulate, ex),
                'merge': await self._embed_fn(merge, ex),
            }

        self._check_clients(value)
        if self.client_streams.streams_reduction(value):
            server_params = await params_for(self._server)
            agg = ReductionKind.AGGREGATE
            partials = await self.client_streams.stream_partials(agg, [value], params_for)
            acc = await self._reduction_result(agg, partials, server_params, rt.member)
            return self._fed(await self._server.create_call(report_fn, acc), rt)
        payload = await self._as_clients(value)
        server_params = await params_for(self._server)
        acc = await self._reduce(ReductionKind.AGGREGATE, payload, params_for, server_params, rt)
        return self._fed(await self._server.create_call(report_fn, acc), rt)

    async def _federated_collect(self, arg, static, rt):
        py = await self.compute_federated_value(arg)
        return self._fed(await self._server.create_value(list(py), rt.member), rt)

    async def _federated_secure_select(self, arg, static, rt):
        # The same values as federated_select: what is secure is what the server
        # learns of the keys, which a simulation does not model.
        return await self._federated_select(arg, static, rt)

    async def _federated_select(self, arg, static, rt):
        # `max_key` is not read, nor are keys checked against it: TFF's runtime does not
        # read it either ("unused in this impl", federating_executor.cc), and TFF's
        # sparse_federated_learning tutorial selects keys above it. Keys must be
        # non-negative, as TFF documents.
        keys, _, server_val, select_fn = self._elements(arg, 4)
        kp = await self._as_clients(keys)
        sv_py = await self._materialize(server_val)
        for g, ex in enumerate(self.groups.executors):
            for i, k in enumerate(await ex.compute_many(kp[g]) if kp[g] else []):
                arr = np.asarray(k.numpy() if hasattr(k, 'numpy') else k)
                if arr.size and arr.min() < 0:
                    raise SimharnessValueError(
                        f'client {self.groups.starts[g] + i}: keys {arr.tolist()} must be '
                        'non-negative'
                    )
        st = server_val.type_signature.member
        et = rt.member.element

        async def one(g, ex):
            if not self.groups.sizes[g]:
                return []
            sv = await ex.create_value(sv_py, st)
            f = await self._embed_fn(select_fn, ex)
            return await ex.create_select(kp[g], sv, f, et)

        return self._fed(await self._gather_groups(one), rt)

    async def _sequence(
        self, op: str, seq: FederatingValue, params_fvs: Dict[str, FederatingValue], rt
    ):
        async def params_for(ex):
            out = {}
            for k, v in params_fvs.items():
                if k in ('fn', 'op'):
                    out[k] = await self._embed_fn(v, ex)
                else:
                    out[k] = await ex.create_value(await self._materialize(v), v.type_signature)
            return out

        if seq.kind != 'federated':
            ex = self.executor.unplaced_executor
            src = await self.executor.to_unplaced(seq)
            return self.executor.unplaced(
                (await ex.create_sequence_op(op, [src], await params_for(ex)))[0]
            )
        t = cast(T.FederatedType, seq.type_signature)  # the type of a federated value
        if t.placement is T.SERVER:
            res = await self._server.create_sequence_op(
                op, [seq.payload], await params_for(self._server)
            )
            return self._fed(res[0], rt)

        payload = await self._as_clients(seq)

        async def one(g, ex):
            vals = payload[g]
            if not vals:
                return []
            return await ex.create_sequence_op(op, vals, await params_for(ex))

        return self._fed(await self._gather_groups(one), rt)

    async def _sequence_map(self, arg, static, rt):
        fn, seq = self._elements(arg, 2)
        return await self._sequence('sequence_map', seq, {'fn': fn}, rt)

    async def _sequence_reduce(self, arg, static, rt):
        seq, zero, op = self._elements(arg, 3)
        return await self._sequence('sequence_reduce', seq, {'zero': zero, 'op': op}, rt)

    async def _sequence_sum(self, arg, static, rt):
        return await self._sequence('sequence_sum', arg, {}, rt)
