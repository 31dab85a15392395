"""The local wing: the driver side of one worker process (`WorkerHandle`, the seam's handle).

A `WorkerHandle` owns two objects and no resource of its own: the `WorkerProcess`
(process.py: the process and its socket) and the `RequestQueue` (request_queue.py:
the requests, their frames and the shared memory they travel through); each closes
what it owns. Callers (any thread) `submit` requests; the pool's reactor polls the
handle through the public methods of `reactor.Polled` (`poll_fds`, `on_wake`,
`on_readable`, `on_writable`, `on_dead`, `check_liveness`, `fail_all`).
"""

from __future__ import annotations

import concurrent.futures
import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

from simharness.errors import ExecutorClosedError, WorkerCrashedError
from simharness.runtime import pinning
from simharness.runtime.protocol import Op
from simharness.runtime.local.arenas import WorkerStats
from simharness.runtime.local.process import WorkerProcess
from simharness.runtime.local.request_queue import Call, RequestQueue
from simharness.runtime.seam import Answer

#: The `pool.WorkerPool` that owns the handle (pool.py imports this module).
_WorkerPool = Any


class WorkerHandle:
    """The driver side of one worker process.

    `submit` may be called from any thread; the pool's reactor does all
    I/O. `ensure_started` (re)starts the process when it is not running.

    Attributes:
      process: the `WorkerProcess` (replaced processes included: it starts each).
      requests: the `RequestQueue` (it serves one generation of process at a time).
    """

    #: `submit(..., lend=True)` answers with views of the worker's memory and a loan.
    lends = True
    #: `submit`'s `locs` may place the first buffers only (a broadcast value leading a
    #: request): the others go into the worker's arena as usual.
    places_prefix = True

    def __init__(self, pool: _WorkerPool, worker_id: int, placement: pinning.WorkerPlacement):
        self.pool = pool
        self.worker_id = worker_id
        self.placement = placement
        self.process = WorkerProcess(pool, worker_id, placement)
        self.requests = RequestQueue()
        # The worker's socket I/O (the queue's output buffer and its writes, reading
        # answers): the reactor's, or a submitting thread's while it sends directly
        # (`_send_directly`).
        self._io_lock = threading.Lock()
        self._start_lock = threading.Lock()  # one start at a time

    @property
    def pid(self) -> Optional[int]:
        """The pid of the worker's process (of the last one after it died; None before)."""
        return self.process.pid

    @property
    def generation(self) -> int:
        """The generation of the worker now in this slot (0: never started)."""
        return self.requests.generation

    @property
    def stats(self) -> WorkerStats:
        """Requests and bytes to and from the worker, as seen by the driver."""
        return self.requests.stats

    @property
    def has_process(self) -> bool:
        """Whether a process was started and not yet reaped (it may have died)."""
        return self.process.exists

    @property
    def alive(self) -> bool:
        return self.requests.is_open and self.process.alive

    @property
    def _live(self) -> bool:
        # Requests of the current generation are taken (tests poll it to see the pool
        # notice a death).
        return self.requests.is_open

    def ensure_started(self, timeout: Optional[float] = None) -> None:
        """Starts the worker process unless it runs (blocking: a fresh one takes ~0.1-3 s)."""
        with self._start_lock:
            if self.pool.closed:
                raise ExecutorClosedError('the worker pool is closed')
            if self.requests.is_open:
                return
            self._reap()
            self.process.start(self.pool.start_timeout if timeout is None else timeout)
            self.requests.open(self.pool.arena_bytes)
            self.pool.reactor.register(self)

    def submit(
        self,
        header: bytes,
        buffers: List[Any],
        op: Op,
        generation: int,
        locs: Optional[List[Any]] = None,
        on_done: Optional[Callable[[], None]] = None,
        lend: bool = False,
        defer: bool = False,
    ) -> 'concurrent.futures.Future[Answer]':
        """Queues one encoded request; the future resolves to its `Answer`.

        Args:
          header, buffers: the encoded `Request`.
          op: its operation (its name goes into error messages).
          generation: the worker generation the request was made for: if the
            worker was replaced since, the request fails with
            `WorkerCrashedError` (its session is gone).
          locs: where the first ``len(locs)`` of `buffers` already are (the broadcast
            arena), if placed; the others go into the worker's arena.
          on_done: called once the worker answered (or the request failed).
          lend: the answer's big arrays are read-only views of the worker's arena,
            valid until ``answer.loan.release()`` (the loan is None when nothing is
            lent), instead of copies. For answers the caller reads once and drops
            (partial reductions).
          defer: queued, not sent: it goes, in order, with the next request to this
            worker (or when the reactor next writes to it), so that the worker wakes
            once for both. Only for requests whose answer nobody waits for: a
            value created for a later request, say.
        """
        call = Call(header, buffers, locs, op.name, on_done, lend, generation)
        err: Optional[BaseException] = None
        if self.pool.closed:
            err = ExecutorClosedError('the worker pool is closed')
        elif not self.requests.push(call):
            err = WorkerCrashedError(
                f'worker {self.worker_id} was replaced after a crash; its values are gone: run '
                'the computation again',
                worker_id=self.worker_id,
                pid=self.pid,
            )
        if err is not None:
            call.finish(error=err)
        elif defer:
            pass  # the next submit (or the reactor's next write) sends it
        elif not (self.pool.sends_directly and self._send_directly()):
            self.pool.reactor.wake(self)
        return call.future

    def _send_directly(self) -> bool:
        """Writes the queued requests from the calling thread; False: the reactor must.

        A request then reaches its worker without a hop through the reactor thread,
        which had to wait for the GIL while the caller went on preparing the next
        request (0.3-1 ms per request on 2 cores, on the critical path of a round).
        Not while the reactor does this worker's I/O, nor when the socket takes
        only part of it (the reactor writes the rest when it can). The reactor
        still reads every answer and checks liveness.
        """
        if not self._io_lock.acquire(blocking=False):
            return False
        try:
            if not self.requests.is_open:
                return False
            self.requests.pump()
            return self.requests.flush(self.process.fd)
        finally:
            self._io_lock.release()

    def acknowledge(self, names: List[str], generation: int) -> None:
        """The driver is done with these arenas of the worker (any thread; see `ResponseLoan`)."""
        self.requests.acknowledge(names, generation)

    # ------------------------------------------------ what the reactor polls (`reactor.Polled`)
    def poll_fds(self) -> Optional[Tuple[int, int]]:
        """(socket, process sentinel) of the running worker; None when there is none."""
        fd, sentinel = self.process.fd, self.process.sentinel
        if fd is None or sentinel is None:
            return None
        return fd, sentinel

    def on_wake(self) -> bool:
        """Requests were submitted: writes what the socket takes; True when all of it."""
        with self._io_lock:
            self.requests.pump()
            return self.requests.flush(self.process.fd)

    def on_readable(self) -> Optional[bool]:
        """Reads the answers, then writes as `on_wake`; None on EOF (the sentinel follows)."""
        with self._io_lock:
            fd = self.process.fd
            if not self.requests.read(fd):
                return None
            self.requests.pump()  # answers free the driver arena for queued requests
            return self.requests.flush(fd)

    def on_writable(self) -> bool:
        """The socket takes more: writes; True when all of it was written."""
        with self._io_lock:
            return self.requests.flush(self.process.fd)

    def on_dead(self) -> None:
        """The process exited: fails its requests and frees its resources."""
        with self._start_lock:  # not while a caller restarts it
            self.requests.fail_all(self.process.death_errors())
            self._reap()

    def check_liveness(self, now: float) -> None:
        """Kills a worker whose oldest request is past its deadline, stopped or makes no
        progress (`WorkerProcess.check_liveness`)."""
        self.process.check_liveness(self.requests.oldest_sent(), now)

    def fail_all(self, error_for: Callable[[Call], BaseException]) -> None:
        """Stops taking requests and fails those queued or in flight."""
        self.requests.fail_all(error_for)

    # ---------------------------------------------------------------- end of a process
    def _reap(self) -> None:
        """Stops the process (if any) and frees everything its owners hold (idempotent)."""
        self.requests.release_pins()  # its tensors of our broadcasts are gone with it
        with self._io_lock:  # no write is under way on the socket closed below
            self.process.disconnect()
            self.requests.stop()
        self.process.stop()
        self.requests.free()

    def close(self) -> None:
        """Stops the worker: at once (SIGKILL) when a request is in flight, else cleanly."""
        calls = self.requests.drain()
        if calls:
            self.process.kill()
        for c in calls:
            c.finish(
                error=ExecutorClosedError(
                    f'the worker pool was closed while worker {self.worker_id} ran {c.op}'
                )
            )
        self.pool.reactor.unregister(self)
        self._reap()

    def resource_usage(self) -> Dict[str, Any]:
        """RSS (bytes) and CPU seconds of the worker process (psutil)."""
        usage = self.process.usage() if self.alive else None
        if usage is None:
            return {'worker_id': self.worker_id, 'alive': False}
        pid, rss, cpu = usage
        return {
            'worker_id': self.worker_id,
            'alive': True,
            'pid': pid,
            'rss_bytes': rss,
            'cpu_seconds': cpu,
            'requests': self.stats.requests,
            'bytes_to_worker': self.stats.bytes_to_worker,
            'bytes_from_worker': self.stats.bytes_from_worker,
        }
