"""The Ray transport, one worker slot: `RayWorkerHandle` (the seam's `WorkerHandle`).

It owns its actor's calls in flight (`_Call`, oldest first, for the watchdog), its
generation and liveness, and the counts of its requests and bytes; the actors'
start, placement and the watchdog thread are its owner's (`workers.RayWorkers`, seen
here only as a `SlotOwner`).
"""

from __future__ import annotations

import collections
import concurrent.futures
import logging
import threading
import time
from types import ModuleType
from typing import Any, Callable, Deque, Dict, List, Optional, Protocol

import numpy as np

from simharness import errors as E
from simharness.runtime import protocol as P
from simharness.runtime.inflight import InFlight
from simharness.runtime.seam import Answer
from simharness.runtime.pinning import WorkerPlacement

log = logging.getLogger(__name__)


class SlotOwner(Protocol):
    """What a handle asks of the Ray workers that own its slot."""

    @property
    def closed(self) -> bool: ...

    @property
    def ray(self) -> ModuleType: ...

    def restart_slot(self, h: 'RayWorkerHandle', timeout: Optional[float] = None) -> None: ...


class _Call(InFlight):
    __slots__ = ('started', 'generation', 'nbytes')

    def __init__(
        self, op: str, on_done: Optional[Callable[[], None]], generation: int, nbytes: int
    ):
        super().__init__(op, on_done)
        self.started: Optional[float] = None  # when the actor began it (head of the queue)
        self.generation = generation
        self.nbytes = nbytes


def _owned(buf: Any) -> Any:
    """A buffer the driver may keep: arrays read from Ray's object store are read-only views."""
    if isinstance(buf, np.ndarray) and not buf.flags.writeable:
        return buf.copy()
    return buf


class RayWorkerHandle:
    """The driver side of one worker slot (the `WorkerHandle` protocol).

    `WorkerDelegatingExecutor` drives it as a local worker process:
    `submit(header, buffers, op, generation, locs, on_done) ->
    Future[Answer]`, `ensure_started()`, `alive`, `generation`,
    `worker_id`, `pid`, `pool`.
    """

    #: Answers are never lent (`submit(..., lend=True)` is a plain request).
    lends = False
    places_prefix = False  # a broadcast goes alone (`WorkerDelegatingExecutor._wire_node`)

    def __init__(self, workers: SlotOwner, slot: int):
        self.workers = workers
        self.pool = workers  # the handle protocol's name for the owner
        self.worker_id = slot
        self.slot = slot
        self.generation = 0
        self.pid: Optional[int] = None
        self.node_id: Optional[str] = None
        self.node_ip: Optional[str] = None
        self.incarnation = ''
        self.placement: Optional[WorkerPlacement] = None
        self.node_cpus: List[int] = []  # the usable cores of its node, as the actor saw them
        self.actor: Any = None
        self.requests = 0
        self.bytes_to_worker = 0
        self.bytes_from_worker = 0
        self._alive = False
        self._lock = threading.Lock()
        self._start_lock = threading.Lock()
        self._inflight: Deque[_Call] = collections.deque()

    @property
    def alive(self) -> bool:
        return self._alive and not self.workers.closed

    # ------------------------------------------------------------ lifecycle
    def ensure_started(self, timeout: Optional[float] = None) -> None:
        """(Re)starts the actor in its bundle: a new generation of this worker slot."""
        with self._start_lock:
            if self.workers.closed:
                raise E.ExecutorClosedError('the Ray workers are closed')
            if self.alive:
                return
            self.workers.restart_slot(self, timeout)

    def record_start(self, info: Dict[str, Any]) -> None:
        """Records that its actor started (`info`: the actor's answer to ``start``): a new
        generation of this slot, alive."""
        with self._lock:
            self.generation += 1
            self.incarnation = info['incarnation']
            self.pid = info['pid']
            self.node_id = info['node_id']
            self.node_ip = info['node_ip']
            self._alive = True

    def _mark_lost(self, generation: int) -> None:
        with self._lock:
            if generation == self.generation:
                self._alive = False

    # ------------------------------------------------------------ calls
    def submit(
        self,
        header: bytes,
        buffers: List[Any],
        op: P.Op,
        generation: int,
        locs: Optional[List[Any]] = None,
        on_done: Optional[Callable[[], None]] = None,
        lend: bool = False,
        defer: bool = False,
    ) -> 'concurrent.futures.Future[Answer]':
        """Sends one encoded request; the future resolves to its `Answer` (never with a
        loan: `lend` is ignored, answers are Ray's objects, never views lent by the actor;
        `defer` too: each request is an actor call of its own)."""
        nbytes = len(header) + sum(int(getattr(b, 'nbytes', 0)) for b in buffers)
        call = _Call(op.name, on_done, generation, 0 if locs else nbytes)
        err: Optional[BaseException] = None
        if self.workers.closed:
            err = E.ExecutorClosedError('the Ray workers are closed')
        elif generation != self.generation or not self._alive:
            err = E.WorkerLostError(
                f'Ray worker {self.slot} was lost (its actor died or was restarted); its values '
                'are gone: run the computation again',
                worker_id=self.slot,
                pid=self.pid,
            )
        if err is not None:
            call.finish(error=err)
            return call.future
        payload = locs[0] if locs else list(buffers)
        with self._lock:
            self.requests += 1
            self.bytes_to_worker += call.nbytes
            if not self._inflight:
                call.started = time.monotonic()
            self._inflight.append(call)
        try:
            ref = self.actor.call.remote(self.incarnation, header, payload)
            ref.future().add_done_callback(lambda f, c=call: self._done(c, f))
        except Exception as e:  # Ray refused the call (shut down, ...)
            self._forget(call)
            self._mark_lost(generation)
            call.finish(
                error=E.WorkerLostError(
                    f'Ray worker {self.slot}: the call could not be sent ({type(e).__name__}: {e}); '
                    'run the computation again',
                    worker_id=self.slot,
                    pid=self.pid,
                )
            )
        return call.future

    def _forget(self, call: _Call) -> None:
        with self._lock:
            try:
                self._inflight.remove(call)
            except ValueError:
                return
            if self._inflight and self._inflight[0].started is None:
                self._inflight[0].started = time.monotonic()

    def _done(self, call: _Call, f: concurrent.futures.Future) -> None:
        self._forget(call)
        if call.future.done():  # failed already (timeout, close)
            call.finish()
            return
        try:
            out = f.result()
        except Exception as e:  # noqa: BLE001 - mapped below
            call.finish(error=self._ray_error(e, call))
            return
        if out is None:
            self._mark_lost(call.generation)
            call.finish(
                error=E.WorkerLostError(
                    f'Ray worker {self.slot} was restarted by Ray while this driver used it (a '
                    f'new incarnation answered {call.op}); its values are gone: run the '
                    'computation again',
                    worker_id=self.slot,
                    pid=self.pid,
                )
            )
            return
        try:
            header, bufs = out
            bufs = [_owned(b) for b in bufs]
            with self._lock:
                self.bytes_from_worker += len(header) + sum(int(b.nbytes) for b in bufs)
            resp = P.decode_message(header, bufs)
        except Exception as e:
            call.finish(error=e)
            return
        call.finish(Answer(resp))

    def _ray_error(self, e: BaseException, call: _Call) -> BaseException:
        ray = self.workers.ray
        exc = ray.exceptions
        lost_types = tuple(
            t
            for t in (
                getattr(exc, 'RayActorError', None),
                getattr(exc, 'ActorUnavailableError', None),
                getattr(exc, 'ObjectLostError', None),
                getattr(exc, 'OwnerDiedError', None),
                getattr(exc, 'WorkerCrashedError', None),
                getattr(exc, 'NodeDiedError', None),
            )
            if isinstance(t, type)
        )
        if isinstance(e, lost_types):
            self._mark_lost(call.generation)
            where = f' on {self.node_ip}' if self.node_ip else ''
            err: BaseException = E.WorkerLostError(
                f'Ray worker {self.slot} (pid {self.pid}{where}) died while it ran {call.op} '
                f'({type(e).__name__}); its values are gone: run the computation again '
                '(execution_context(factory, retries=N) does)',
                worker_id=self.slot,
                pid=self.pid,
            )
            err.__cause__ = e
            return err
        if isinstance(e, getattr(exc, 'RayTaskError', ())):
            err = E.WorkerError(
                f'Ray worker {self.slot} failed while it ran {call.op}: {e}',
                worker_id=self.slot,
                pid=self.pid,
            )
            return err
        return e

    def _fail_inflight(self, first: BaseException, others: BaseException) -> None:
        with self._lock:
            calls = list(self._inflight)
            self._inflight.clear()
        for k, c in enumerate(calls):
            c.finish(error=first if k == 0 else others)

    def kill_if_overdue(self, timeout: float, now: float) -> None:
        """Kills its actor, failing the calls in flight, when the oldest one has run more
        than `timeout` seconds at `now` (the watchdog's check)."""
        with self._lock:
            head = self._inflight[0] if self._inflight else None
            if head is None or head.started is None or now - head.started <= timeout:
                return
            self._alive = False
        log.warning(
            'Ray worker %d ran %s for more than %g s: killing its actor',
            self.slot,
            head.op,
            timeout,
        )
        try:
            self.workers.ray.kill(self.actor, no_restart=False)
        except Exception:  # already dead
            pass
        self._fail_inflight(
            E.WorkerTimeoutError(
                f'Ray worker {self.slot} (pid {self.pid}) ran {head.op} for more than '
                f'{timeout:g} s (call_timeout); it was killed and restarts: run the computation '
                'again',
                worker_id=self.slot,
                pid=self.pid,
                op=head.op,
                seconds=timeout,
                reason='timeout',
            ),
            E.WorkerLostError(
                f'Ray worker {self.slot} was killed after a call timed out; its values are gone',
                worker_id=self.slot,
                pid=self.pid,
            ),
        )

    def close(self) -> None:
        self._alive = False
        self._fail_inflight(
            *(
                2
                * [
                    E.ExecutorClosedError(
                        f'the Ray workers were closed while worker {self.slot} ran a request'
                    )
                ]
            )
        )
