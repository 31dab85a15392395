"""`RemoteExecutor`: TFF's proxy for an executor living in an executor service over gRPC.

What it does: everything `WorkerDelegatingExecutor` does, over the gRPC
transport instead of pipes and shared memory: a remote service hosts a block
of clients exactly as a worker process does (one message per service per
operation, reductions inside the service, the canonical reduction order),
in a session of its own that `close()` disposes of. On top it has TFF's
`RemoteExecutor` API: `RemoteExecutor(stub, dispose_batch_size=20,
stream_structs=False)`, `set_cardinalities`, `create_value_stream_structs`.

It is the worker-delegating executor with another transport, so it extends
that class rather than wrapping it (a different executor would duplicate the
block protocol).

What it leaves to other layers: the transport (`runtime/grpc/`),
the TF work (the service's `WorkerService`), placements and intrinsics (the
federating layer, in the driver).
"""

from __future__ import annotations

import threading
from typing import Any, Dict, List, Optional

from simharness.core import types as T
from simharness.core.structure import Struct, from_container
from simharness.errors import CardinalityError, SimharnessTypeError
from simharness.executors.base import ExecutorValue
from simharness.executors.worker_delegating import WorkerDelegatingExecutor
from simharness.executors.worker_values import WorkerValue
from simharness.runtime.grpc.client import RemoteServices, RemoteWorkerHandle
from simharness.runtime.protocol import Op
from simharness.validation import check_bool, check_int

#: Operations that make one value per client of the block.
_BLOCK_OPS = frozenset(
    {
        Op.CREATE_VALUES,
        Op.CREATE_VALUES_STACKED,
        Op.LOAD_SOURCED,
        Op.CREATE_MAP,
        Op.CREATE_STRUCTS,
        Op.CREATE_SELECTIONS,
        Op.SEQUENCE_OP,
        Op.SELECT,
    }
)


class RemoteExecutor(WorkerDelegatingExecutor):
    """A local proxy for a block of clients held by a remote executor service.

    Args:
      stub: the service: an ``ExecutorServiceStub``, a `grpc.Channel` or an
        address ``'host:port'`` (a channel is then made, and closed by
        `close()`; a stub or channel you give stays yours).
      dispose_batch_size: ids of values the driver dropped are sent with the
        next request, or on their own as soon as this many wait (lower:
        values freed sooner in the service; TFF's default 20).
      stream_structs: send struct values element by element
        (`create_value_stream_structs`), so that no single message holds a
        whole large struct.
      worker: the worker slot of the service (``simharness serve
        --num-workers N`` has N).
      token: the service's token (sent as call metadata).
      root_certificates: PEM bytes, to reach an address over TLS.

    Raises:
      SimharnessTypeError / SimharnessValueError: a bad argument.
    """

    def __init__(
        self,
        stub: Any,
        dispose_batch_size: int = 20,
        stream_structs: bool = False,
        *,
        worker: int = 0,
        token: Optional[str] = None,
        root_certificates: Optional[bytes] = None,
    ):
        check_int('dispose_batch_size', dispose_batch_size, 1)
        check_bool('stream_structs', stream_structs)
        check_int('worker', worker, 0)
        services = RemoteServices([stub], token=token, root_certificates=root_certificates)
        try:
            services.start()
            if worker >= services.num_workers:
                raise CardinalityError(
                    f'worker={worker}, but the service at {services.addresses[0]} has '
                    f'{services.num_workers} worker slot(s)',
                    expected=services.num_workers,
                    actual=worker,
                )
        except BaseException:
            services.close()
            raise
        self._owned_services: Any = services
        self._init(services.handles[worker], dispose_batch_size, stream_structs)

    @classmethod
    def on_handle(
        cls, handle: RemoteWorkerHandle, dispose_batch_size: int = 20, stream_structs: bool = False
    ) -> 'RemoteExecutor':
        """A `RemoteExecutor` on a worker slot of a shared `RemoteServices` (factories use it)."""
        self = cls.__new__(cls)
        self._owned_services = None
        self._init(handle, dispose_batch_size, stream_structs)
        return self

    def _init(
        self, handle: RemoteWorkerHandle, dispose_batch_size: int, stream_structs: bool
    ) -> None:
        WorkerDelegatingExecutor.__init__(self, handle)
        self._remote_handle = handle
        self._dispose_batch_size = dispose_batch_size
        self._stream_structs = stream_structs
        self._dropped = 0
        self._disposing = threading.local()
        self._cardinalities: Dict[T.PlacementLiteral, int] = {}

    @property
    def address(self) -> str:
        return self._remote_handle.address

    @property
    def dispose_batch_size(self) -> int:
        return self._dispose_batch_size

    # ------------------------------------------------------------ TFF's API
    def set_cardinalities(self, cardinalities: Dict[Any, int]) -> None:
        """Fixes how many clients this executor hosts (``{CLIENTS: n}``, as in TFF).

        Later block operations over more clients raise `CardinalityError`.

        Raises:
          SimharnessTypeError: not a dict of placements to ints.
          SimharnessValueError: a negative count.
        """
        if not isinstance(cardinalities, dict):
            raise SimharnessTypeError(
                f'cardinalities must be a dict such as {{CLIENTS: 10}}, got {cardinalities!r} of '
                f'type {type(cardinalities).__name__}',
                expected=dict,
                actual=type(cardinalities),
            )
        out = {}
        for k, v in cardinalities.items():
            if not isinstance(k, T.PlacementLiteral):
                raise SimharnessTypeError(
                    f'cardinalities keys must be placements (CLIENTS, SERVER), got {k!r}',
                    expected=T.PlacementLiteral,
                    actual=type(k),
                )
            out[k] = check_int(f'cardinalities[{k}]', v, 0)
        self._cardinalities = out

    def share_value(self, value: Any, type_spec: Any, shared: Dict[Any, Any]) -> Any:
        if self._stream_structs:  # structs go element by element: nothing to share
            return value
        return super().share_value(value, type_spec, shared)

    async def create_value(self, value: Any, type_spec: Any = None) -> WorkerValue:
        if (
            self._stream_structs
            and type_spec is not None
            and isinstance(T.to_type(type_spec), T.StructType)
        ):
            return await self.create_value_stream_structs(value, type_spec)
        return await super().create_value(value, type_spec)

    async def create_value_stream_structs(self, value: Any, type_spec: Any) -> WorkerValue:
        """Sends a struct value element by element (one message each), then builds the struct.

        No single message holds the whole struct: each element (recursively,
        for nested structs) is its own request, streamed in chunks.
        """
        t = T.to_type(type_spec)
        if not isinstance(t, T.StructType):
            return await WorkerDelegatingExecutor.create_value(self, value, t)
        if isinstance(value, ExecutorValue):
            raise SimharnessTypeError(f'{value!r} is an executor value; expected a Python value')
        s = value if isinstance(value, Struct) else from_container(value, t)
        elements = []
        for (name, et), v in zip(t.items(), s):
            elements.append((name, await self.create_value_stream_structs(v, et)))
        return await self.create_struct(elements)

    # ------------------------------------------------------------ disposal
    def release_ids(self, start: int, count: int, generation: int) -> None:
        super().release_ids(start, count, generation)
        if generation != self._generation or self._closed:
            return
        with self._lock:
            self._dropped += count
            due = self._dropped >= self._dispose_batch_size
        if due and not getattr(self._disposing, 'active', False):
            self._disposing.active = True
            try:
                self._dispose_now()
            finally:
                self._disposing.active = False

    def _dispose_now(self) -> None:
        """Sends the dropped ids on their own (a FREE request)."""
        gen, h = self._generation, self._handle
        if gen is None or self._closed or gen != h.generation or not h.alive:
            return
        header, buffers = self._encode(Op.FREE, [], 0, 0, want_types=False)
        h.submit(header, buffers, Op.FREE, gen)

    def _encode(self, op: Op, args: list, out_base: int, n_out: int, want_types: bool) -> Any:
        with self._lock:
            self._dropped = 0
        return super()._encode(op, args, out_base, n_out, want_types)

    async def _request(
        self,
        op: Op,
        *args: Any,
        n_out: int = 0,
        types: Any = None,
        wait: bool = False,
        broadcast_key: Any = None,
        placed: Optional[List[Any]] = None,
        partials: bool = False,
    ) -> Any:
        limit = self._cardinalities.get(T.CLIENTS)
        if limit is not None and op in _BLOCK_OPS and n_out > limit:
            raise CardinalityError(
                f'{op.name} over {n_out} clients, but set_cardinalities fixed {limit} clients '
                f'for the executor at {self.address}',
                expected=limit,
                actual=n_out,
            )
        return await super()._request(
            op,
            *args,
            n_out=n_out,
            types=types,
            wait=wait,
            broadcast_key=broadcast_key,
            placed=placed,
            partials=partials,
        )

    def close(self) -> None:
        """Releases everything this executor holds in the service (its session). Idempotent."""
        try:
            super().close()
        finally:
            services, self._owned_services = self._owned_services, None
            if services is not None:
                services.close()

    def __repr__(self) -> str:
        return f'RemoteExecutor({self.address}, worker={self._remote_handle.slot})'


__all__ = ['RemoteExecutor']
