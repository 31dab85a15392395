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
   WorkerProcess k
    process k         pinned per plan_workers(...)
    socket (driver end, non-blocking, used by the reactor or a direct send)
   RequestQueue k
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
handles; a handle owns its `WorkerProcess` (the process and its socket) and
its `RequestQueue` (the requests, the driver arena, the attachment to the
worker's arenas), and each of those closes what it holds. `close()` is
idempotent and reaps all.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import logging
import os
import sys
import threading
import time
import types
import warnings
import weakref
from typing import Any, Callable, Dict, List, Optional, Sequence

from simharness.errors import ExecutorClosedError, OversubscribedWarning
from simharness.runtime import pinning
from simharness.runtime import protocol as P
from simharness.runtime.local import lifeline
from simharness.runtime.local.arenas import BroadcastArena
from simharness.runtime.local.handle import WorkerHandle
from simharness.runtime.local.options import PoolOptions
from simharness.runtime.local.process import get_forkserver_context
from simharness.runtime.local.reactor import Reactor
from simharness.runtime.local.shm import reap_orphaned_segments
from simharness.runtime.seam import Answer


log = logging.getLogger(__name__)


class WorkerPool:
    """Pinned worker processes started from a TF-preloading forkserver.

    Args:
      placements: one `WorkerPlacement` per worker (see `pinning.plan_workers`).
      options: the pool's `PoolOptions` (its timeouts, arena size, what each worker is
        started with: `PoolOptions.worker_config`), kept as `options`.
      context: a multiprocess context (default: forkserver preloading TF).
      worker_target: the function a worker process runs, ``(conn, worker_id,
        placement, config)``: a host (`simharness.hosts.local_worker.worker_main`:
        the runtime imports no host). Also an attribute: fault-injection tests set
        it (before `start`) to a function of their own that wraps `worker_main`.

    Attributes:
      stopped_timeout: seconds a request may wait on a worker seen stopped (SIGSTOP, a
        debugger: process state T). A worker busy in one long TF call (state R or S) is
        never judged by it. It may be changed on a running pool.
    """

    def __init__(
        self,
        placements: Sequence[pinning.WorkerPlacement],
        options: PoolOptions,
        worker_target: Callable[..., Optional[str]],
        context: Any = None,
    ):
        self.placements = list(placements)
        self.options = options
        #: What each worker process is started with.
        self.worker_config = options.worker_config()
        self.arena_bytes = options.arena_bytes
        self.start_timeout = options.start_timeout
        self.request_timeout = options.request_timeout
        self.liveness_timeout = options.liveness_timeout
        self.stopped_timeout = options.stopped_timeout
        self.context = context if context is not None else get_forkserver_context()
        self.worker_target: Callable[..., Optional[str]] = worker_target
        #: Submitting threads write requests to the workers themselves
        #: (`WorkerHandle.submit`) while each worker can have a core of its own.
        #: With more workers than cores, a write wakes a worker that takes the caller's
        #: core: the reactor thread writes them. (FedAvg reference round, 2 cores: with 2
        #: workers the benchmark's speed-up over the hand-written loop +0.02-0.05 in four
        #: pairs, the reactor's CPU -30 %; 16 workers sent directly: driver CPU up to +15 %.)
        self.sends_directly = len(self.placements) <= len(pinning.usable_cpus())
        self._reactor = Reactor(self)
        self.handles = [WorkerHandle(self, p.worker_id, p) for p in self.placements]
        self.broadcast = BroadcastArena(options.arena_bytes)
        self.closed = False
        self._started = False
        self._starting_soon = False  # `start_soon` has a thread starting the workers
        self._lock = threading.Lock()
        self._sessions = itertools.count(1)
        self._finalizer = weakref.finalize(
            self, _warn_unclosed, list(self.handles), self.broadcast, self._reactor
        )

    @property
    def reactor(self) -> Reactor:
        """The pool's I/O thread (its handles register with it)."""
        return self._reactor

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
                    log.info(
                        'removed %d shared-memory segments left by dead processes', len(removed)
                    )
                dirs = lifeline.reap_orphaned_temp_dirs()
                if dirs:
                    log.info('removed %d temporary directories left by dead drivers', len(dirs))
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

    def start_soon(self) -> None:
        """Starts the workers on a thread of their own, while the caller goes on (TFF
        programs set their context, then build and trace their computations: ~3 s in
        which the workers' start, ~3 s on 2 cores, would otherwise wait for the first call).

        A caller that needs the workers calls `start`, which waits for this start (or
        starts them again, with its error, if this one failed); `close` waits for it too.
        """
        with self._lock:
            if self.closed or self._started or self._starting_soon:
                return
            self._starting_soon = True
        lifeline.install_sigterm_handler()  # `start` on another thread cannot
        threading.Thread(
            target=self._start_quietly, name='simharness-pool-start', daemon=True
        ).start()

    def _start_quietly(self) -> None:
        try:
            self.start()
        except BaseException as e:  # pylint: disable=broad-except  # `start` raises it again
            log.debug('starting the workers ahead of their first use failed: %r', e)

    def resource_usage(self) -> List[Dict[str, Any]]:
        return [h.resource_usage() for h in self.handles]

    def ping(self, timeout: float = 30.0) -> List[Optional[Dict[str, Any]]]:
        """Asks every running worker for its state: requests served, open sessions, values held.

        A worker that is not running gives None. Requests queue behind those
        already sent, so this also waits until the workers have caught up.
        """
        futures: List[Optional['concurrent.futures.Future[Answer]']] = []
        for h in self.handles:
            if not h.alive:
                futures.append(None)
                continue
            header, buffers = P.encode_message(P.Request(P.Op.PING, 0, []))
            futures.append(h.submit(header, buffers, P.Op.PING, h.generation))
        out: List[Optional[Dict[str, Any]]] = []
        for f in futures:
            resp = None if f is None else f.result(timeout).response
            out.append(None if resp is None or not resp.ok else resp.result)
        return out

    def stats(self) -> Dict[str, object]:
        """Requests served, shared-memory bytes each way, and each worker's RSS and CPU time
        (``'workers'``: `resource_usage()`)."""
        return {
            'requests': sum(h.stats.requests for h in self.handles),
            'bytes_to_workers': (
                sum(h.stats.bytes_to_worker for h in self.handles) + self.broadcast.bytes_written
            ),
            'bytes_from_workers': sum(h.stats.bytes_from_worker for h in self.handles),
            'workers': self.resource_usage(),
        }

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

    def __enter__(self) -> 'WorkerPool':
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _warn_unclosed(
    handles: List[WorkerHandle], broadcast: BroadcastArena, reactor: Reactor
) -> None:
    if any(h.has_process for h in handles):
        warnings.warn(
            'a simharness WorkerPool was not closed; reaping its workers',
            ResourceWarning,
            stacklevel=2,
        )
    for h in handles:
        h.close()
    reactor.stop()
    broadcast.close()


def _callers_level() -> int:
    """The `warnings.warn` stack level of the first frame outside simharness (the line of
    the user's program that asked for the pool), counted from the caller of this."""
    package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    frame: Optional[types.FrameType] = sys._getframe(2)
    level = 2
    while frame is not None and frame.f_code.co_filename.startswith(package + os.sep):
        frame, level = frame.f_back, level + 1
    return level


def build_pool(options: PoolOptions, worker_target: Callable[..., Optional[str]]) -> WorkerPool:
    """A `WorkerPool` of pinned workers for `options` (not started; see `WorkerPool.start`);
    `worker_target` as in `WorkerPool`. The devices are checked before anything starts."""
    gpus = pinning.parse_devices(options.devices)
    pinning.check_gpus_exist(options.devices, gpus or ())
    cpus = pinning.usable_cpus()
    if not gpus and options.num_workers is not None and options.num_workers > len(cpus):
        warnings.warn(
            OversubscribedWarning(
                f'num_workers={options.num_workers} is more than the {len(cpus)} usable CPU '
                f'core(s) of this process: the workers share them (slower rounds, the same '
                f'results); num_workers={len(cpus)} is the most that run in parallel'
            ),
            stacklevel=_callers_level(),
        )
    placements = pinning.plan_workers(
        options.num_workers, cpus, gpus or None, options.workers_per_gpu, options.cpu_affinity
    )
    return WorkerPool(placements, options, worker_target=worker_target)
