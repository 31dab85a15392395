"""`WorkerService`: the worker role as a pure state machine (sessions, values by id, ops).

```
transport (pipe+shm | gRPC | Ray)        WorkerService
  bytes ──decode──▶ Request ──────────▶  check version/op/arity
                                         session = sessions[req.session]
                                         free req.free ids; resolve Refs → values
                                         run Op on the executor (EagerTF)
  bytes ◀─encode── Response ◀──────────  store VALUES under out_base.. / return DATA
```

Reads and writes only its own state: `sessions` (id → `Session`: values by
id, poisoned id ranges, data sources). It starts no process, opens no pipe
and maps no shared memory, so it is tested in-process. A failed operation
poisons its result ids: a later request that uses them fails with the
original error (which lets the driver pipeline requests without waiting).

It imports no executor: a host (`simharness.hosts.leaf`) gives it one.
"""

from __future__ import annotations

import asyncio
import collections
import traceback
from typing import (
    Any,
    Callable,
    Coroutine,
    Deque,
    Dict,
    List,
    Optional,
    Protocol,
    Sequence,
    Tuple,
    TypeVar,
)

import numpy as np

from simharness import errors as E
from simharness.core.reduction import Partial, ReductionKind
from simharness.core.structure import tensor_to_numpy
from simharness.data.sourced import source_from_spec, transform_from_spec
from simharness.runtime import op_libraries
from simharness.runtime import protocol as P
from simharness.runtime.codec import DatasetBlob, DatasetRecipe, Ref, RefRange
from simharness.runtime.protocol import ErrorRecord, Op, Request, Response
from simharness.runtime.stream_plan import (
    PlanLoad,
    PlanNode,
    PlanReduction,
    PlanSourced,
)

#: A value the worker's executor holds, or takes: the runtime imports no executor, so it
#: cannot name their classes (an `EagerTFExecutor`'s are `EagerValue`s).
Held = Any

_R = TypeVar('_R')


class ServiceExecutor(Protocol):
    """The executor a `WorkerService` runs requests on: the `BatchExecutor` methods it calls.

    A `BatchExecutor` (the hosts give an `EagerTFExecutor`) is one; the runtime imports
    no executor, so it names here what it needs of one.
    """

    async def create_value(self, value: Held, type_spec: Held = None) -> Held:
        """Embeds one value."""

    async def create_call(self, comp: Held, arg: Held = None) -> Held:
        """Calls `comp` on `arg`."""

    async def create_struct(self, elements: Held) -> Held:
        """A struct of (name, value) `elements`."""

    async def create_selection(self, source: Held, index: Optional[int] = None) -> Held:
        """Element `index` of the struct `source`."""

    async def create_values(self, values: Sequence[Held], type_spec: Held) -> Sequence[Held]:
        """Embeds many values of one type."""

    async def create_values_stacked(
        self, leaves: Sequence[Held], type_spec: Held
    ) -> Sequence[Held]:
        """Embeds values given leaf by leaf (arrays ``[n, ...]``)."""

    async def create_map(
        self, fn: Held, args: Optional[Sequence[Held]], count: Optional[int] = None
    ) -> Sequence[Held]:
        """`fn(arg)` for every arg (or `count` calls of a no-parameter `fn`)."""

    async def create_structs(
        self, rows: Sequence[Sequence[Held]], names: Sequence[Optional[str]]
    ) -> Sequence[Held]:
        """One struct per row."""

    async def create_selections(self, sources: Sequence[Held], index: int) -> Sequence[Held]:
        """Element `index` of every struct in `sources`."""

    async def compute_many(self, values: Sequence[Held]) -> List[Held]:
        """Materializes many values."""

    async def create_partial_reduction(
        self,
        kind: ReductionKind,
        values: Sequence[Held],
        start: int,
        total: int,
        params: Dict[str, Held],
    ) -> Partial:
        """Reduces a block of clients of a reduction."""

    async def create_reduction_result(
        self,
        kind: ReductionKind,
        partials: Sequence[Partial],
        total: int,
        params: Dict[str, Held],
        result_type: Held,
    ) -> Held:
        """Combines the partials of all blocks."""

    async def create_streamed_reductions(
        self,
        nodes: Sequence[PlanNode],
        reductions: Sequence[PlanReduction],
        start: int,
        count: int,
        total: int,
        slice_size: Optional[int] = None,
    ) -> List[Partial]:
        """Computes a map -> reduce plan slice by slice."""

    async def create_sequence_op(
        self, op: str, values: Sequence[Held], params: Dict[str, Held]
    ) -> Sequence[Held]:
        """A sequence operation on every value."""

    async def create_select(
        self, keys: Sequence[Held], server_value: Held, select_fn: Held, element_type: Held
    ) -> Sequence[Held]:
        """For each client's keys, a sequence of `select_fn(server_value, key)`."""

    def close(self) -> None:
        """Releases what the executor holds."""


class _Poisoned(Exception):
    """A request used a value whose operation failed: re-raise that failure."""

    def __init__(self, record: ErrorRecord):
        super().__init__(record.message)
        self.record = record


def drive(coro: Coroutine[object, None, _R]) -> _R:
    """Runs a coroutine that never really suspends (EagerTF's methods) to completion."""
    try:
        coro.send(None)
    except StopIteration as stop:
        value: _R = stop.value
        return value
    loop = asyncio.new_event_loop()  # it suspended after all: finish it on a private loop
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()


class Session:
    """The values of one driver-side stack on this worker."""

    def __init__(self, session_id: int):
        self.id = session_id
        self.values: Dict[int, Any] = {}
        self.poisoned: List[Tuple[int, int, ErrorRecord]] = []
        self.sources: Dict[int, Any] = {}
        self.requests = 0  # requests of this session handled so far (for error messages)
        # The last ranges the driver freed, with the request that freed them: a value asked
        # for after its free names that request (a driver-side bookkeeping error otherwise
        # shows only as "not held").
        self.recent_frees: Deque[Tuple[int, int, int]] = collections.deque(maxlen=512)

    def free(self, ranges: List[Any]) -> None:
        for first, count in ranges:
            self.recent_frees.append((first, count, self.requests))
            for i in range(first, first + count):
                self.values.pop(i, None)
            self.poisoned = [
                p for p in self.poisoned if not (first <= p[0] and p[0] + p[1] <= first + count)
            ]

    def get(self, value_id: int, worker_id: Optional[int]) -> Any:
        try:
            return self.values[value_id]
        except KeyError:
            pass
        for first, count, rec in self.poisoned:
            if first <= value_id < first + count:
                raise _Poisoned(rec)
        freed = [n for first, count, n in self.recent_frees if first <= value_id < first + count]
        how = (
            f'the driver freed it with request {freed[-1]} of this session, and request '
            f'{self.requests} uses it'
            if freed
            else 'its state was lost, or the value was already freed'
        )
        raise E.WorkerLostError(
            f'value {value_id} of session {self.id} is not held by worker {worker_id} ({how}); '
            'run the computation again',
            worker_id=worker_id,
        )


class WorkerService:
    """Runs protocol requests against an executor, keeping values per session.

    Args:
      executor: a `BatchExecutor` holding values in this process (an
        `EagerTFExecutor`): a `ServiceExecutor`.
      worker_id: for error messages.
      dataset_from_blob / dataset_to_blob: how datasets cross (the TF
        functions of `runtime.datasets`; injectable for tests).
    """

    def __init__(
        self,
        executor: ServiceExecutor,
        worker_id: Optional[int] = None,
        dataset_from_blob: Optional[Callable[[DatasetBlob], Any]] = None,
        dataset_to_blob: Optional[Callable[[Any], DatasetBlob]] = None,
    ):
        self.executor = executor
        self.worker_id = worker_id
        self.sessions: Dict[int, Session] = {}
        self.requests = 0
        if dataset_from_blob is None or dataset_to_blob is None:
            # reason: datasets.py imports TensorFlow (a service without datasets needs none)
            from simharness.runtime.datasets import BlobReader, dataset_to_blob as tb

            # repeatable datasets sent again (every round) are read once (`BlobReader`)
            dataset_from_blob, dataset_to_blob = (
                dataset_from_blob or BlobReader(),
                dataset_to_blob or tb,
            )
        self._from_blob = dataset_from_blob
        self._to_blob = dataset_to_blob
        self._recipe_reader: Optional[Callable[[DatasetRecipe], Any]] = None
        #: The operations that need no session's values (run before the frees and the Refs).
        self._control: Dict[Op, Callable[[Request], Response]] = {
            Op.OPEN_SESSION: self._open_session,
            Op.CLOSE_SESSION: self._close_session,
            Op.PING: self._ping,
            Op.LOAD_OP_LIBRARIES: self._load_op_libraries,
        }
        #: The value operations that need more than the executor (`_OPS`): the session's
        #: data sources. (executor, args, session) -> the executor's coroutine.
        self._session_ops: Dict[Op, Callable[[ServiceExecutor, Any, Session], _Run]] = {
            Op.LOAD_SOURCED: self._create_sourced_values,
            Op.STREAM_REDUCE: self._stream_reduce,
        }

    def _from_recipe(self, recipe: DatasetRecipe) -> Any:
        """A `DatasetRecipe`'s elements (`runtime.datasets.RecipeReader`, made on first use)."""
        if self._recipe_reader is None:
            # reason: datasets.py imports TensorFlow (a service without datasets needs none)
            from simharness.runtime.datasets import RecipeReader

            self._recipe_reader = RecipeReader()
        return self._recipe_reader(recipe)

    # ------------------------------------------------------------ entry point
    def handle(self, req: Any) -> Response:
        """Runs one request; never raises for a failing operation (the Response says)."""
        self.requests += 1
        seq = getattr(req, 'seq', 0)
        try:
            req = P.check_request(req)
            return self._handle(req)
        except _Poisoned as p:
            self._poison(req, p.record)
            return Response(False, error=p.record, seq=seq)
        except Exception as e:  # the operation failed: report it, keep serving
            rec = P.error_to_record(e, traceback.format_exc())
            self._poison(req, rec)
            return Response(False, error=rec, seq=seq)

    def _poison(self, req: Any, rec: ErrorRecord) -> None:
        if not isinstance(req, Request):
            return
        session = self.sessions.get(req.session)
        kind = P.RESULT.get(req.op)
        if session is not None and kind == P.Result.VALUES:
            session.poisoned.append((req.out_base, max(req.out_count, 1), rec))

    def _open_session(self, req: Request) -> Response:
        self.sessions.setdefault(req.session, Session(req.session))
        return Response(True, seq=req.seq)

    def _load_op_libraries(self, req: Request) -> Response:
        # Loaded when a graph first needs one of their ops (`_handle` runs that op again).
        op_libraries.expect(P.LoadOpLibrariesArgs(*req.args).libraries)
        return Response(True, seq=req.seq)

    def _close_session(self, req: Request) -> Response:
        self.sessions.pop(req.session, None)
        return Response(True, seq=req.seq)

    def _ping(self, req: Request) -> Response:
        return Response(
            True,
            P.Result.DATA,
            result={
                'requests': self.requests,
                'sessions': len(self.sessions),
                'values': sum(len(s.values) for s in self.sessions.values()),
            },
            seq=req.seq,
        )

    def _session(self, req: Request) -> Session:
        s = self.sessions.get(req.session)
        if s is None:
            raise E.WorkerLostError(
                f'session {req.session} is not open on worker {self.worker_id} (the worker was '
                'restarted, or the stack was closed); run the computation again',
                worker_id=self.worker_id,
            )
        return s

    def _handle(self, req: Request) -> Response:
        op = req.op
        control = self._control.get(op)
        if control is not None:  # sessions and pings: no values, no executor
            return control(req)
        session = self._session(req)
        session.requests += 1
        session.free(req.free)
        if op == Op.FREE:  # the frees above were all it asked for
            return Response(True, seq=req.seq)
        try:
            result = self._run(op, self._args(req, session), session)
        except Exception as e:
            # A graph with an op of the driver's op libraries (custom ops) that this process
            # has not loaded: load them, and run the operation again (it stored nothing).
            if not op_libraries.load_expected_for(e):
                raise
            result = self._run(op, self._args(req, session), session)
        if P.RESULT[op] == P.Result.VALUES:
            if not isinstance(result, list):
                result = [result]
            for k, v in enumerate(result):
                session.values[req.out_base + k] = v
            types: Any = None
            if req.want_types:
                types = [v.type_signature for v in result]
                if types and all(t is types[0] or t == types[0] for t in types):
                    types = types[0]
            return Response(True, P.Result.VALUES, count=len(result), types=types, seq=req.seq)
        return Response(True, P.Result.DATA, result=self._plain(result), seq=req.seq)

    # ------------------------------------------------------------ operations
    def _args(self, req: Request, session: Session) -> Tuple[object, ...]:
        """The request's arguments, their `Ref`s resolved, as the op's named tuple (`P.ARGS`)."""
        return P.ARGS[req.op](*self._resolve(req.args, session))

    def _run(self, op: Op, a: Tuple[object, ...], session: Session) -> Held:
        run = _OPS.get(op)
        if run is not None:
            return drive(run(self.executor, a))
        own = self._session_ops.get(op)
        if own is None:
            raise E.ProtocolError(f'operation {op.name} is not run by WorkerService')
        return drive(own(self.executor, a, session))

    def _create_sourced_values(
        self, ex: ServiceExecutor, a: P.LoadSourcedArgs, session: Session
    ) -> _Run:
        loaded = self._load_sourced(session, a.token, a.source, a.client_ids, a.transform)
        return ex.create_values(loaded, a.type)

    def _stream_reduce(self, ex: ServiceExecutor, a: P.StreamReduceArgs, session: Session) -> _Run:
        for r in a.reductions:  # off the wire: an unknown kind is refused, naming it
            if isinstance(r, PlanReduction):
                ReductionKind.of(r.kind)
        nodes = [self._loader_node(session, n) for n in a.nodes]
        return ex.create_streamed_reductions(
            nodes, a.reductions, a.start, a.clients, a.total, a.slice_size
        )

    def _loader_node(self, session: Session, node: Any) -> Any:
        """A stream plan's `PlanSourced` node as a `PlanLoad`: the worker loads each slice's
        clients when it needs them (other nodes are evaluated as they came)."""
        if not isinstance(node, PlanSourced):
            return node
        ids = list(node.client_ids)
        token, transform = node.token, node.transform
        if node.source is not None:  # registered now, so that a slice's loader finds it
            self._load_sourced(session, token, node.source, [], transform)
        return PlanLoad(
            lambda lo, hi: self._load_sourced(session, token, None, ids[lo:hi], transform),
            node.type,
        )

    def _load_sourced(
        self, session: Session, token: int, source: Any, client_ids: List[str], transform: Any
    ) -> List[Any]:
        if source is not None:
            session.sources[token] = source_from_spec(source)
        try:
            src = session.sources[token]
        except KeyError:
            raise E.WorkerLostError(
                f'data source {token} was never sent to worker '
                f'{self.worker_id} in session {session.id}',
                worker_id=self.worker_id,
            ) from None
        fn = transform_from_spec(transform)
        return [fn(src.client_arrays(cid)) for cid in client_ids]

    # ------------------------------------------------------------ trees
    def _resolve(self, tree: Any, session: Session) -> Any:
        wid = self.worker_id

        def leaf(x: Any) -> Any:
            if isinstance(x, Ref):
                return session.get(x.id, wid)
            if isinstance(x, RefRange):
                return [session.get(i, wid) for i in range(x.start, x.start + x.count)]
            if isinstance(x, DatasetBlob):
                return self._from_blob(x)
            if isinstance(x, DatasetRecipe):
                return self._from_recipe(x)
            return x

        return P.map_leaves(tree, leaf)

    def _plain(self, tree: Any) -> Any:
        to_blob = self._to_blob

        def leaf(x: Any) -> Any:
            if hasattr(x, 'element_spec') and hasattr(x, '_as_serialized_graph'):
                return to_blob(x)
            if hasattr(x, 'numpy') and not isinstance(x, np.ndarray):
                return tensor_to_numpy(x)
            return x

        return P.map_leaves(tree, leaf)

    def close(self) -> None:
        self.sessions.clear()
        self.executor.close()


#: An operation's run: the executor's coroutine.
_Run = Coroutine[object, None, object]


def _create_value(ex: ServiceExecutor, a: P.CreateValueArgs) -> _Run:
    return ex.create_value(a.value, a.type)


def _create_call(ex: ServiceExecutor, a: P.CreateCallArgs) -> _Run:
    return ex.create_call(a.fn, a.arg)


def _create_struct(ex: ServiceExecutor, a: P.CreateStructArgs) -> _Run:
    return ex.create_struct(a.elements)


def _create_selection(ex: ServiceExecutor, a: P.CreateSelectionArgs) -> _Run:
    return ex.create_selection(a.source, a.element)


def _create_values(ex: ServiceExecutor, a: P.CreateValuesArgs) -> _Run:
    return ex.create_values(a.values, a.type)


def _create_values_stacked(ex: ServiceExecutor, a: P.CreateValuesStackedArgs) -> _Run:
    return ex.create_values_stacked(a.leaves, a.type)


def _create_map(ex: ServiceExecutor, a: P.CreateMapArgs) -> _Run:
    return ex.create_map(a.fn, a.args, a.calls)


def _create_structs(ex: ServiceExecutor, a: P.CreateStructsArgs) -> _Run:
    return ex.create_structs(a.rows, a.names)


def _create_selections(ex: ServiceExecutor, a: P.CreateSelectionsArgs) -> _Run:
    return ex.create_selections(a.sources, a.element)


def _compute_many(ex: ServiceExecutor, a: P.ComputeManyArgs) -> _Run:
    return ex.compute_many(a.values)


def _partial_reduction(ex: ServiceExecutor, a: P.PartialReductionArgs) -> _Run:
    kind = ReductionKind.of(a.kind)  # off the wire: a string; an unknown one is refused
    return ex.create_partial_reduction(kind, a.values, a.start, a.total, a.params)


def _reduction_result(ex: ServiceExecutor, a: P.ReductionResultArgs) -> _Run:
    kind = ReductionKind.of(a.kind)  # off the wire: a string; an unknown one is refused
    return ex.create_reduction_result(kind, a.partials, a.total, a.params, a.result_type)


def _sequence_op(ex: ServiceExecutor, a: P.SequenceOpArgs) -> _Run:
    return ex.create_sequence_op(a.op, a.values, a.params)


def _select(ex: ServiceExecutor, a: P.SelectArgs) -> _Run:
    return ex.create_select(a.keys, a.server_value, a.select_fn, a.element_type)


#: The executor's coroutine for each value operation that needs only the executor, from
#: the operation's arguments (`protocol.ARGS`); the others are the service's own
#: (`WorkerService._session_ops`).
_OPS: Dict[Op, Callable[[ServiceExecutor, Any], _Run]] = {
    Op.CREATE_VALUE: _create_value,
    Op.CREATE_CALL: _create_call,
    Op.CREATE_STRUCT: _create_struct,
    Op.CREATE_SELECTION: _create_selection,
    Op.CREATE_VALUES: _create_values,
    Op.CREATE_VALUES_STACKED: _create_values_stacked,
    Op.CREATE_MAP: _create_map,
    Op.CREATE_STRUCTS: _create_structs,
    Op.CREATE_SELECTIONS: _create_selections,
    Op.COMPUTE_MANY: _compute_many,
    Op.PARTIAL_REDUCTION: _partial_reduction,
    Op.REDUCTION_RESULT: _reduction_result,
    Op.SEQUENCE_OP: _sequence_op,
    Op.SELECT: _select,
}
