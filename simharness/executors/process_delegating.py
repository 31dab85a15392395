"""`ProcessDelegatingExecutor`: the process counterpart of `ThreadDelegatingExecutor`.

What it does: forwards every (batch) operation to one worker process as ONE
request covering all of the worker's clients; values stay in the worker
and the driver holds only `ProcessValue` handles (ids), until `compute()`
or an intrinsic moves them. Compiled computations are shipped to a worker
once (by fingerprint) per worker generation. Ids of values the driver drops
are sent back to the worker with the next request, which frees them.

What it leaves to other layers: the transport (the worker handle: pipe +
shared memory), the TF work (the worker's EagerTFExecutor), placements and
intrinsics (the federating layer).
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple, TypeGuard, cast

import numpy as np

from simharness.core import building_blocks as bb
from simharness.core import types as T
from simharness.core.batching import stack_python_values
from simharness.core.reduction import Partial
from simharness.core.structure import tensor_to_numpy
from simharness.errors import ExecutorClosedError, SimharnessTypeError
from simharness.executors.base import BatchExecutor, ExecutorValue, normalize_struct_elements
from simharness.runtime.protocol import DatasetBlob, Ref, RefRange, map_leaves

if TYPE_CHECKING:
    from simharness.data.sourced import SourcedClients



#: Values at least this big go through the pool's broadcast arena (written once).
BROADCAST_MIN_BYTES = 1 << 16


def _array_bytes(tree: Any) -> int:
    total = [0]

    def leaf(x):
        if isinstance(x, np.ndarray):
            total[0] += x.nbytes
        return x
    map_leaves(tree, leaf)
    return total[0]


def _is_sourced(values: Any) -> TypeGuard[SourcedClients]:
    from simharness.data.sourced import SourcedClients
    return isinstance(values, SourcedClients)


def _revive(x: Any) -> Any:
    """Datasets come back from workers as serialized graphs: rebuild them."""
    if isinstance(x, DatasetBlob):
        from simharness.runtime.worker import dataset_from_blob
        return dataset_from_blob(x)
    return x


class _Lease:
    """The driver's claim on a range of value ids in one worker generation.

    Shared by the `ProcessValue`s of one result block; when the last of them
    is gone, the ids are returned to the worker with the next request.
    """

    __slots__ = ('__weakref__',)

    def __init__(self, owner: 'ProcessDelegatingExecutor', start: int, count: int, generation: int):
        weakref.finalize(self, owner._release, start, count, generation)


class ProcessValue(ExecutorValue):
    """A handle to a value held by a worker process."""

    __slots__ = ('_owner', '_id', '_type', '_generation', '_lease')

    def __init__(self, owner: 'ProcessDelegatingExecutor', value_id: int, type_spec: T.Type,
                 generation: int, lease: _Lease):
        self._owner = owner
        self._id = value_id
        self._type = type_spec
        self._generation = generation
        self._lease = lease

    @property
    def type_signature(self) -> T.Type:
        return self._type

    def _check_generation(self) -> None:
        if self._generation != self._owner._handle.generation:
            from simharness.errors import WorkerCrashedError
            raise WorkerCrashedError(
                f'value {self._id} lived in worker {self._owner._handle.worker_id}, which was '
                'replaced after a crash; run the computation again',
                worker_id=self._owner._handle.worker_id)

    @property
    def ref(self) -> Ref:
        self._check_generation()
        return Ref(self._id)

    async def compute(self) -> Any:
        return (await self._owner.compute_many([self]))[0]


class ProcessDelegatingExecutor(BatchExecutor):
    """Delegates a block of clients to one worker process.

    Args:
      handle: the `WorkerHandle` of the worker (owned by its pool, not by
        this executor: `close()` leaves the worker running for other stacks).
    """

    def __init__(self, handle: Any):
        self._handle = handle
        self._next_id = 1
        self._garbage: List[Tuple[int, int]] = []  # (first id, count) ranges to free
        self._garbage_lock = threading.Lock()
        self._embedded: Dict[tuple, ProcessValue] = {}
        self._sources: set = set()
        self._closed = False

    @property
    def worker_id(self) -> int:
        return self._handle.worker_id

    def _release(self, start: int, count: int, generation: int) -> None:
        if generation == self._handle.generation and not self._closed:
            with self._garbage_lock:
                self._garbage.append((start, count))

    def _refs(self, tree: Any) -> Any:
        def as_range(xs: list):
            first = xs[0]
            if len(xs) < 2 or not isinstance(first, ProcessValue) or first._owner is not self:
                return None
            start = first._id
            for k, x in enumerate(xs):
                if not isinstance(x, ProcessValue) or x._owner is not self or x._id != start + k:
                    return None
            first._check_generation()
            return RefRange(start, len(xs))

        def walk(x):
            if isinstance(x, list):
                r = as_range(x)
                if r is not None:
                    return r
                return [walk(v) for v in x]
            if isinstance(x, tuple) and not hasattr(type(x), '_fields'):
                return tuple(walk(v) for v in x)
            if isinstance(x, dict):
                return {k: walk(v) for k, v in x.items()}
            return map_leaves(x, leaf)

        def leaf(x):
            if isinstance(x, ProcessValue):
                if x._owner is not self:
                    raise SimharnessTypeError('a value of another worker was passed to this one')
                return x.ref
            if isinstance(x, ExecutorValue):
                raise SimharnessTypeError(f'{x!r} is not a value of a worker process')
            if hasattr(x, 'numpy') and not hasattr(x, 'element_spec'):
                return tensor_to_numpy(x)
            if hasattr(x, 'element_spec') and hasattr(x, '_as_serialized_graph'):
                from simharness.runtime.worker import dataset_to_blob
                return dataset_to_blob(x)
            return x
        return walk(tree)

    async def _request(self, op: str, *args: Any, n_out: int = 0) -> Any:
        if self._closed:
            raise ExecutorClosedError('this ProcessDelegatingExecutor is closed')
        packed = self._refs(args)
        base = self._next_id  # ids base .. base + n_out - 1 are this request's
        self._next_id += max(n_out, 1)
        with self._garbage_lock:
            free, self._garbage = self._garbage, []
        resp = await asyncio.to_thread(self._handle.request, op, packed, base, free)
        if resp.kind == 'values':
            gen = self._handle.generation
            lease = _Lease(self, base, resp.count, gen)
            types = resp.types
            if isinstance(types, list):
                return [ProcessValue(self, base + k, t, gen, lease) for k, t in enumerate(types)]
            return [ProcessValue(self, base + k, types, gen, lease) for k in range(resp.count)]
        return resp.result

    async def _values(self, op: str, *args: Any, n: int) -> List[ProcessValue]:
        return await self._request(op, *args, n_out=n)

    # ------------------------------------------------------------ Executor
    async def create_value(self, value: Any, type_spec: Any = None) -> ProcessValue:
        if isinstance(value, bb.CompiledComputation):
            key = (self._handle.generation, value.fingerprint)
            v = self._embedded.get(key)
            if v is None:
                v = (await self._values('create_value', value, value.type_signature, n=1))[0]
                self._embedded[key] = v
            return v
        t = None if type_spec is None else T.to_type(type_spec)
        plain = self._refs((value,))[0]
        if _array_bytes(plain) >= BROADCAST_MIN_BYTES:
            # Large values (a broadcast model, say) are written once into the
            # pool's broadcast arena and read from there by every worker.
            bc = self._handle.pool.broadcast
            packed = await asyncio.to_thread(bc.acquire, value, plain)
            try:
                return (await self._values('create_value', packed, t, n=1))[0]
            finally:
                bc.release()
        return (await self._values('create_value', plain, t, n=1))[0]

    async def create_call(self, comp: ExecutorValue, arg: Optional[ExecutorValue] = None) -> ProcessValue:
        return (await self._values('create_call', comp, arg, n=1))[0]

    async def create_struct(self, elements: Any) -> ProcessValue:
        items = normalize_struct_elements(elements)
        return (await self._values('create_struct', list(items), n=1))[0]

    async def create_selection(self, source: ExecutorValue, index: int) -> ProcessValue:
        return (await self._values('create_selection', source, index, n=1))[0]

    def close(self) -> None:
        self._closed = True
        self._embedded.clear()

    # ------------------------------------------------------------ batches
    async def create_values(self, values: Sequence[Any], type_spec: Any) -> List[ProcessValue]:
        t = T.to_type(type_spec)
        if _is_sourced(values):
            # The worker loads its clients itself; the source travels once per worker.
            key = (self._handle.generation, values.token)
            source = None if key in self._sources else values.source
            out = await self._values('load_sourced', values.token, source, values.client_ids,
                                     values.transform, t, n=len(values))
            self._sources.add(key)
            return out
        values = list(values)
        if len(values) >= 2 and T.contains_only_tensors(t):
            arrays = stack_python_values(values, t)
            if arrays is not None:  # one array per leaf, through shared memory
                return await self._values('create_values_stacked', arrays, t, n=len(values))
        return await self._values('create_values', values, t, n=len(values))

    async def compute_many(self, values: Sequence[ExecutorValue]) -> List[Any]:
        out = await self._request('compute_many', list(values))
        return map_leaves(out, _revive)

    async def create_map(self, fn: ExecutorValue, args: Optional[Sequence[ExecutorValue]],
                         count: Optional[int] = None) -> List[ProcessValue]:
        # without args, `count` says how many calls (the BatchExecutor contract)
        n = (count or 0) if args is None else len(args)
        if n == 0:
            return []
        return await self._values('create_map', fn, None if args is None else list(args), count, n=n)

    async def create_structs(self, rows: Sequence[Sequence[ExecutorValue]],
                             names: Sequence[Optional[str]]) -> List[ProcessValue]:
        return await self._values('create_structs', [list(r) for r in rows], list(names), n=len(rows))

    async def create_selections(self, sources: Sequence[ExecutorValue], index: int) -> List[ProcessValue]:
        return await self._values('create_selections', list(sources), index, n=len(sources))

    async def create_partial_reduction(self, kind: str, values: Sequence[Any], start: int,
                                       total: int, params: Dict[str, Any]) -> Partial:
        return await self._request('create_partial_reduction', kind, list(values), start, total,
                                   dict(params))

    async def create_reduction_result(self, kind: str, partials: Sequence[Partial], total: int,
                                      params: Dict[str, Any], result_type: T.Type) -> ProcessValue:
        return (await self._values('create_reduction_result', kind, list(partials), total,
                                   dict(params), result_type, n=1))[0]

    async def create_sequence_op(self, op: str, values: Sequence[ExecutorValue],
                                 params: Dict[str, Any]) -> List[ProcessValue]:
        return await self._values('create_sequence_op', op, list(values), dict(params), n=len(values))

    async def create_select(self, keys: Sequence[ExecutorValue], server_value: ExecutorValue,
                            select_fn: ExecutorValue, element_type: T.Type) -> List[ProcessValue]:
        return await self._values('create_select', list(keys), server_value, select_fn, element_type,
                                  n=len(keys))
