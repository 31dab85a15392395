"""The worker pool: pinned worker processes, and one reactor thread that talks to all of them.

```
WorkerPool (owned by a process_executor_factory, or shared by several)
  forkserver context (preload: tensorflow, imported but no op run)
  reactor thread      ONE for all workers: a selector over every worker's socket
                      and process sentinel; writes queued requests (non-blocking),
                      reads responses, resolves the callers' futures, checks
                      deadlines and liveness
  broadcast arena     up to 4 slots, each one big value (a model) written once and
                      read in place by every worker (a worker's tensors of it hold
                      the slot until they are freed: "pinned", then "unpinned")
  WorkerHandle k      (one per worker; its process is replaced after a crash)
    process k         pinned per plan_workers(...)
    socket (driver end, non-blocking, used only by the reactor)
    queue / inflight  requests not yet sent / sent and not yet answered (FIFO)
    driver arena k    created by the driver; the reactor writes request buffers,
                      worker k reads them (one request with buffers in flight)
    worker arenas k   created by worker k (one per answer the driver still reads); the
                      reactor copies an answer out and ACKs at once, or lends a
                      partial reduction's views to the caller (`ResponseLoan`), who
                      ACKs after combining it (unlinked by the driver if worker k dies)
```

Callers (any thread, any event loop) call `WorkerHandle.submit(...)`, which
returns a `concurrent.futures.Future`; nothing blocks a thread per worker,
and requests to different workers are in flight together. Every resource
has one owner: the pool owns the reactor, the broadcast arena and the
handles; a handle owns its process, socket and driver arena. `close()` is
idempotent and reaps all.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import logging
import threading
import time
import warnings
import weakref
from typing import Any, Callable, Dict, List, Optional, Sequence

from simharness.errors import ExecutorClosedError, SimharnessTypeError
from simharness.runtime import pinning
from simharness.runtime import protocol as P
from simharness.runtime.local import lifeline
from simharness.runtime.local.arenas import BroadcastArena
from simharness.runtime.local.handle import WorkerHandle
from simharness.runtime.local.process import (DEFAULT_LIVENESS_TIMEOUT, DEFAULT_START_TIMEOUT,
                                              DEFAULT_STOPPED_TIMEOUT, get_forkserver_context)
from simharness.runtime.local.reactor import _Reactor
from simharness.runtime.shm import reap_orphaned_segments
from simharness.validation import check_bool, check_int, check_number


log = logging.getLogger(__name__)


class WorkerPool:
    """`num_workers` pinned worker processes started from a TF-preloading forkserver.

    Args:
      placements: one `WorkerPlacement` per worker (see `pinning.plan_workers`).
      clients_per_worker: the most clients a worker runs through one TF call.
      arena_bytes: initial size of each shared-memory arena (they grow).
      start_timeout: seconds to wait for a worker to report ready.
      context: a multiprocess context (default: forkserver preloading TF).
      request_timeout: seconds a request may take before its worker is
        killed and the call fails with `WorkerTimeoutError` (None: no limit).
      liveness_timeout: seconds a request may wait on a worker that uses no
        CPU (deadlocked), before the same.
      stopped_timeout: seconds a request may wait on a worker seen stopped
        (SIGSTOP, a debugger: process state T), before the same. A worker busy
        in one long TF call (state R or S) is never judged by it. Also an
        attribute (can be changed on a running pool).

      worker_target: the function a worker process runs, ``(conn, worker_id,
        placement, options)``: a host (None: the one `seam.LOCAL_WORKER_MAIN`
        names, `simharness.hosts.local_worker.worker_main`). Also an attribute:
        fault-injection tests set it (before `start`) to a function of their own
        that wraps `worker_main`.
    """

    def __init__(self, placements: Sequence[pinning.WorkerPlacement],
                 clients_per_worker: Optional[int] = None, arena_bytes: int = 1 << 20,
                 start_timeout: float = DEFAULT_START_TIMEOUT, context: Any = None,
                 worker_options: Optional[Dict[str, Any]] = None,
                 request_timeout: Optional[float] = None,
                 liveness_timeout: float = DEFAULT_LIVENESS_TIMEOUT,
                 worker_target: Optional[Callable[..., None]] = None,
                 stopped_timeout: float = DEFAULT_STOPPED_TIMEOUT):
        self.placements = list(placements)
        self.arena_bytes = arena_bytes
        self.start_timeout = start_timeout
        self.request_timeout = request_timeout
        self.liveness_timeout = liveness_timeout
        self.stopped_timeout = stopped_timeout
        self.context = context if context is not None else get_forkserver_context()
        self.worker_options = dict(worker_options or {})
        self.worker_options.setdefault('clients_per_worker', clients_per_worker)
        self.worker_options.setdefault('arena_bytes', arena_bytes)
        self.worker_target: Optional[Callable[..., None]] = worker_target
        #: Submitting threads write requests to the workers themselves
        #: (`WorkerHandle._send_directly`) while each worker can have a core of its own.
        #: With more workers than cores, a write wakes a worker that takes the caller's
        #: core: the reactor thread writes them. (FedAvg reference round, 2 cores: with 2
        #: workers the benchmark's speed-up over the hand-written loop +0.02-0.05 in four
        #: pairs, the reactor's CPU -30 %; 16 workers sent directly: driver CPU up to +15 %.)
        self.sends_directly = len(self.placements) <= len(pinning.usable_cpus())
        self._reactor = _Reactor(self)
        self.handles = [WorkerHandle(self, p.worker_id, p) for p in self.placements]
        self.broadcast = BroadcastArena(arena_bytes)
        self.closed = False
        self._started = False
        self._lock = threading.Lock()
        self._sessions = itertools.count(1)
        self._finalizer = weakref.finalize(self, _warn_unclosed, list(self.handles),
                                           self.broadcast, self._reactor)

    @property
    def num_workers(self) -> int:
        return len(self.handles)

    @property
    def started(self) -> bool:
        """True once `start` has succeeded (workers that died since restart on their next use)."""
        return self._started

    def new_session_id(self) -> int:
        """A session id unique in this pool (sessions scope value ids in the workers)."""
        return next(self._sessions)

    def start(self) -> float:
        """Starts every worker that is not running; returns the seconds it took.

        Also removes shared-memory segments left by dead processes (a driver
        killed with SIGKILL cannot clean up after itself).
        """
        with self._lock:
            if self.closed:
                raise ExecutorClosedError('the worker pool is closed')
            t0 = time.perf_counter()
            if not self._started:
                removed = reap_orphaned_segments()
                if removed:
                    log.info('removed %d shared-memory segments left by dead processes',
                             len(removed))
            try:
                for h in self.handles:
                    h.ensure_started(self.start_timeout)
            except BaseException:
                # Stop what did start; the pool stays usable (a later call retries).
                for h in self.handles:
                    h.close()
                raise
            self._started = True
            lifeline.register_pool(self)  # SIGTERM closes it
            return time.perf_counter() - t0

    def resource_usage(self) -> List[Dict[str, Any]]:
        return [h.resource_usage() for h in self.handles]

    def ping(self, timeout: float = 30.0) -> List[Optional[Dict[str, Any]]]:
        """Asks every running worker for its state: requests served, open sessions, values held.

        A worker that is not running gives None. Requests queue behind those
        already sent, so this also waits until the workers have caught up.
        """
        futures: List[Optional[concurrent.futures.Future]] = []
        for h in self.handles:
            if not h.alive:
                futures.append(None)
                continue
            header, buffers = P.encode_message(P.Request(int(P.Op.PING), 0, []))
            futures.append(h.submit(header, buffers, 'PING', h.generation))
        out: List[Optional[Dict[str, Any]]] = []
        for f in futures:
            resp = None if f is None else f.result(timeout)
            out.append(None if resp is None or not resp.ok else resp.result)
        return out

    def stats(self) -> Dict[str, int]:
        return {'requests': sum(h.stats.requests for h in self.handles),
                'bytes_to_workers': (sum(h.stats.bytes_to_worker for h in self.handles)
                                     + self.broadcast.bytes_written),
                'bytes_from_workers': sum(h.stats.bytes_from_worker for h in self.handles)}

    def close(self) -> None:
        """Stops every worker and frees every segment. Idempotent."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
        lifeline.unregister_pool(self)
        try:
            for h in self.handles:
                h.close()
        finally:
            self._reactor.stop()
            self.broadcast.close()
            self._finalizer.detach()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def _warn_unclosed(handles: List[WorkerHandle], broadcast: BroadcastArena,
                   reactor: _Reactor) -> None:
    if any(h._proc is not None for h in handles):
        warnings.warn('a simharness WorkerPool was not closed; reaping its workers',
                      ResourceWarning, stacklevel=2)
    for h in handles:
        h.close()
    reactor.stop()
    broadcast.close()


def check_worker_options(worker_options: object) -> None:
    """Raises `SimharnessTypeError` unless `worker_options` is a dict or None."""
    if worker_options is not None and not isinstance(worker_options, dict):
        raise SimharnessTypeError(
            f'worker_options must be a dict or None, got {worker_options!r} of type '
            f'{type(worker_options).__name__}', expected='Optional[dict]',
            actual=type(worker_options))


def create_worker_pool(num_workers: Optional[int] = None, clients_per_worker: Optional[int] = 256,
                       cpu_affinity: bool = True, devices: object = None, workers_per_gpu: int = 1,
                       arena_bytes: int = 1 << 20, start_timeout: float = 120.0,
                       worker_options: Optional[dict] = None,
                       request_timeout: Optional[float] = None,
                       liveness_timeout: float = 60.0,
                       worker_target: Optional[Callable[..., None]] = None,
                       stopped_timeout: float = DEFAULT_STOPPED_TIMEOUT) -> WorkerPool:
    """A `WorkerPool` of pinned workers (not started; see `WorkerPool.start`).

    Args are those of `simharness.stacks.process_executor_factory`, checked
    before anything starts; `worker_target` as in `WorkerPool`.
    """
    check_int('num_workers', num_workers, 1, allow_none=True)
    check_int('clients_per_worker', clients_per_worker, 1, allow_none=True)
    check_bool('cpu_affinity', cpu_affinity)
    check_int('workers_per_gpu', workers_per_gpu, 1)
    check_int('arena_bytes', arena_bytes, 1)
    check_number('start_timeout', start_timeout, greater_than=0)
    if request_timeout is not None:
        check_number('request_timeout', request_timeout, greater_than=0)
    check_number('liveness_timeout', liveness_timeout, greater_than=0)
    check_number('stopped_timeout', stopped_timeout, greater_than=0)
    check_worker_options(worker_options)
    gpus = pinning.parse_devices(devices)
    pinning.check_gpus_exist(devices, gpus or ())
    placements = pinning.plan_workers(num_workers, pinning.usable_cpus(), gpus or None,
                                      workers_per_gpu, cpu_affinity)
    return WorkerPool(placements, clients_per_worker=clients_per_worker, arena_bytes=arena_bytes,
                      start_timeout=start_timeout, worker_options=worker_options,
                      request_timeout=request_timeout, liveness_timeout=liveness_timeout,
                      worker_target=worker_target, stopped_timeout=stopped_timeout)
