"""The worker pool: pinned worker processes, their pipes and arenas.

```
WorkerPool (owned by a process_executor_factory)
  forkserver context (preload: tensorflow, imported but no op run)
  WorkerHandle k  (one per worker; replaced after a crash)
    process k           pinned per plan_workers(...)
    pipe (driver end)   Request → / ← Response, one request in flight
    driver arena k      created by the driver; the driver writes, worker k reads
    worker arena k      created by worker k; worker k writes, the driver reads
                        (unlinked by the driver if worker k dies)
```

Every resource has one owner: the pool owns the handles; a handle owns its
process, pipe end and driver arena. `close()` is idempotent and reaps all.
"""

from __future__ import annotations

import os
import pickle
import signal
import threading
import time
import weakref
from multiprocessing.connection import wait as mp_wait
from typing import Any, Dict, List, NoReturn, Optional, Sequence, Tuple, cast

from simharness.errors import (ExecutorClosedError, WorkerCrashedError, WorkerError,
                               WorkerStartError)
from simharness.runtime import pinning
from simharness.runtime.protocol import Request, Response
from simharness.runtime.shm import SEGMENT_PREFIX, ShmArena, ShmAttachment, list_leaked_segments
from simharness.runtime.worker import read_tree, worker_main, write_tree

DEFAULT_START_TIMEOUT = 120.0


def _likely_cause(exitcode: Optional[int]) -> str:
    if exitcode is None:
        return 'unknown'
    if exitcode == -signal.SIGKILL:
        return 'killed with SIGKILL (kill -9, or the kernel OOM killer: check dmesg)'
    if exitcode == -signal.SIGSEGV:
        return 'segmentation fault in native code'
    if exitcode == -signal.SIGABRT:
        return 'aborted (a native assertion, or a misaligned dlpack view)'
    if exitcode == -signal.SIGBUS:
        return 'bus error (shared memory exhausted?)'
    if exitcode < 0:
        return f'killed by signal {-exitcode}'
    return f'exited with code {exitcode}'


def get_forkserver_context():
    """A `multiprocess` forkserver context that preloads TensorFlow."""
    import multiprocess as mp
    ctx = mp.get_context('forkserver')
    ctx.set_forkserver_preload(['tensorflow'])
    return ctx


_START_LOCK = threading.Lock()


class _NoMainReimport:
    """While starting a worker, keep the child from re-running the user's __main__.

    A forkserver child normally imports the parent's main script (so that
    pickled functions defined there resolve); a script without an
    ``if __name__ == '__main__'`` guard would then start workers again. The
    worker entry point lives in this package, so the child needs no main.
    """

    def __enter__(self):
        import multiprocess.spawn as spawn
        self._spawn = spawn
        self._orig = spawn.get_preparation_data
        orig = self._orig

        def prep(name):
            d = orig(name)
            d.pop('init_main_from_path', None)
            d.pop('init_main_from_name', None)
            return d
        spawn.get_preparation_data = prep
        return self

    def __exit__(self, *exc):
        self._spawn.get_preparation_data = self._orig
        return False


class BroadcastArena:
    """A driver-owned arena holding ONE value that every worker reads (broadcast).

    `acquire(key, value)` writes `value` once (unless it already holds `key`)
    and counts a reader; `release()` ends a read. Concurrent requests of one
    broadcast share the write; a new value waits until no request still
    reads the old one, so every reader sees complete bytes.
    """

    def __init__(self, capacity: int):
        self._arena = ShmArena(capacity)
        self._cond = threading.Condition()
        self._readers = 0
        self._key: Any = None
        self._packed: Any = None
        self.bytes_written = 0

    def acquire(self, key: Any, value: Any) -> Any:
        with self._cond:
            if self._key is not key:
                while self._readers:
                    self._cond.wait()
                self._packed, nbytes = write_tree(self._arena, value)
                self._key = key
                self.bytes_written += nbytes
            self._readers += 1
            return self._packed

    def release(self) -> None:
        with self._cond:
            self._readers -= 1
            if not self._readers:
                # Forget the key: a later broadcast of the same (possibly since
                # mutated) object is written again.
                self._key = None
                self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._key = self._packed = None
        self._arena.close()


class WorkerStats:
    """Counters of one worker, as seen by the driver."""

    def __init__(self):
        self.requests = 0
        self.bytes_to_worker = 0
        self.bytes_from_worker = 0


class WorkerHandle:
    """The driver side of one worker process. Requests are serialized by a lock."""

    def __init__(self, pool: 'WorkerPool', worker_id: int, placement: pinning.WorkerPlacement):
        self.pool = pool
        self.worker_id = worker_id
        self.placement = placement
        self.generation = 0
        self.stats = WorkerStats()
        self._lock = threading.Lock()
        self._proc: Any = None  # a multiprocess Process (untyped library)
        self._conn: Any = None  # its multiprocess Connection (driver end)
        self._arena: Optional[ShmArena] = None
        self._attachment: Optional[ShmAttachment] = None
        self._worker_arenas: set = set()
        self.pid: Optional[int] = None

    # ------------------------------------------------------------ lifecycle
    def start(self, timeout: float = DEFAULT_START_TIMEOUT) -> None:
        ctx = self.pool.context
        parent, child = ctx.Pipe(duplex=True)
        proc = ctx.Process(target=worker_main,
                           args=(child, self.worker_id, self.placement, self.pool.worker_options),
                           name=f'simharness-worker-{self.worker_id}', daemon=True)
        with _START_LOCK, _NoMainReimport():
            proc.start()
        child.close()
        self._proc, self._conn = proc, parent
        deadline = time.monotonic() + timeout
        while True:
            ready = mp_wait([parent, proc.sentinel], timeout=max(0.0, deadline - time.monotonic()))
            if parent in ready:
                try:
                    msg = parent.recv()
                except EOFError:
                    msg = None
                break
            if proc.sentinel in ready:
                proc.join(1)
                self._reap()
                raise WorkerStartError(
                    f'worker {self.worker_id} died while starting ({_likely_cause(proc.exitcode)})',
                    worker_id=self.worker_id)
            if time.monotonic() >= deadline:
                self._reap()
                raise WorkerStartError(f'worker {self.worker_id} did not start within {timeout} s',
                                       worker_id=self.worker_id)
        if not msg or msg[0] != 'ready':
            text = msg[1] if msg else 'no message'
            tb = msg[2] if msg and len(msg) > 2 else ''
            self._reap()
            raise WorkerStartError(f'worker {self.worker_id} could not start: {text}',
                                   worker_id=self.worker_id, remote_traceback=tb)
        self.pid = msg[1]
        self._worker_arenas = {msg[2]}
        self._arena = ShmArena(self.pool.arena_bytes)
        self._attachment = ShmAttachment()
        self.generation += 1

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.is_alive()

    def _reap(self) -> None:
        """Stops the process (if any) and frees everything this handle owns."""
        proc, conn = self._proc, self._conn
        self._proc = self._conn = None
        if conn is not None:
            try:
                conn.send_bytes(pickle.dumps('close'))
            except (OSError, EOFError, BrokenPipeError, ValueError):
                pass
        if proc is not None:
            proc.join(5)
            if proc.is_alive():
                proc.terminate()
                proc.join(5)
            if proc.is_alive():
                proc.kill()
                proc.join(5)
            try:
                proc.close()
            except ValueError:
                pass
        if conn is not None:
            conn.close()
        if self._attachment is not None:
            self._attachment.close()
            self._attachment = None
        if self._arena is not None:
            self._arena.close()
            self._arena = None
        # A worker unlinks its own arena when it exits cleanly; after a crash
        # (or a kill during a growth) the driver does it: segment names carry
        # their creator's pid.
        names = set(self._worker_arenas)
        if self.pid is not None:
            prefix = f'{SEGMENT_PREFIX}{self.pid}_'
            names.update(n for n in list_leaked_segments() if n.startswith(prefix))
        for name in names:
            try:
                os.unlink(os.path.join('/dev/shm', name))
            except FileNotFoundError:
                pass
        self._worker_arenas = set()

    def close(self) -> None:
        """Stops the worker and frees its resources, even during a request.

        A request in flight holds the lock: the worker is killed first, so
        that the waiting request returns (with `WorkerCrashedError`) and
        releases it.
        """
        if not self._lock.acquire(timeout=0.2):
            proc = self._proc
            if proc is not None and proc.pid:
                try:
                    os.kill(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self._lock.acquire()
        try:
            self._reap()
        finally:
            self._lock.release()

    # ------------------------------------------------------------ requests
    def request(self, op: str, args: tuple, out_base: int = 0,
                free: Sequence[Tuple[int, int]] = ()) -> Response:
        """Sends one request and waits for its response (thread-safe)."""
        with self._lock:
            if self.pool.closed:
                raise ExecutorClosedError('the worker pool is closed')
            if not self.alive:
                self._reap()
                self.start()
            arena = cast(ShmArena, self._arena)  # set by start()
            attachment = cast(ShmAttachment, self._attachment)  # set by start()
            packed, nbytes = write_tree(arena, args)
            req = Request(op, packed, out_base, tuple(free), arena.name)
            self.stats.requests += 1
            self.stats.bytes_to_worker += nbytes
            try:
                # The stdlib pickler (C): multiprocess' dill-based one is slow.
                self._conn.send_bytes(pickle.dumps(req, protocol=pickle.HIGHEST_PROTOCOL))
            except (OSError, BrokenPipeError, EOFError):
                self._crashed()
            while True:
                ready = mp_wait([self._conn, self._proc.sentinel], timeout=1.0)
                if self._conn in ready:
                    try:
                        resp: Response = pickle.loads(self._conn.recv_bytes())
                    except (EOFError, OSError):
                        self._crashed()
                    break
                if self._proc.sentinel in ready:
                    self._crashed()
            if resp.arena and resp.arena not in self._worker_arenas:
                # The worker re-created its arena bigger (and unlinked the old one).
                for old in self._worker_arenas:
                    if old in attachment.names:
                        attachment.release(old)
                self._worker_arenas = {resp.arena}
            if not resp.ok:
                err = resp.error
                if isinstance(err, BaseException):
                    err.__cause__ = WorkerError(
                        f'worker {self.worker_id} (pid {self.pid}) traceback:\n{resp.traceback}',
                        worker_id=self.worker_id, pid=self.pid, remote_traceback=resp.traceback)
                    raise err
                raise WorkerError(f'worker {self.worker_id} failed', worker_id=self.worker_id,
                                  pid=self.pid, remote_traceback=resp.traceback)
            if resp.kind == 'data':
                attachment.attach(resp.arena)
                resp.result = read_tree(attachment, resp.result, copy=True)
                self.stats.bytes_from_worker += resp.nbytes
            return resp

    def _crashed(self) -> NoReturn:
        proc = self._proc
        proc.join(2)
        exitcode = proc.exitcode
        pid = self.pid
        self._reap()
        cause = _likely_cause(exitcode)
        raise WorkerCrashedError(
            f'worker {self.worker_id} (pid {pid}) died: {cause}; it will be replaced on next use',
            worker_id=self.worker_id, pid=pid, exitcode=exitcode, likely_cause=cause)

    def kill_for_test(self) -> None:
        """Sends SIGKILL to the worker process (fault-injection in tests)."""
        if self._proc is not None and self._proc.pid:
            os.kill(self._proc.pid, signal.SIGKILL)

    def resource_usage(self) -> Dict[str, Any]:
        """RSS (bytes) and CPU seconds of the worker process (psutil)."""
        import psutil
        if not self.alive:
            return {'worker_id': self.worker_id, 'alive': False}
        p = psutil.Process(self._proc.pid)
        with p.oneshot():
            mem = p.memory_info()
            cpu = p.cpu_times()
        return {'worker_id': self.worker_id, 'alive': True, 'pid': self._proc.pid,
                'rss_bytes': mem.rss, 'cpu_seconds': cpu.user + cpu.system,
                'requests': self.stats.requests, 'bytes_to_worker': self.stats.bytes_to_worker,
                'bytes_from_worker': self.stats.bytes_from_worker}


class WorkerPool:
    """`num_workers` pinned worker processes started from a TF-preloading forkserver.

    Args:
      placements: one `WorkerPlacement` per worker (see `pinning.plan_workers`).
      clients_per_worker: the most clients a worker runs through one TF call.
      arena_bytes: initial size of each shared-memory arena (they grow).
      start_timeout: seconds to wait for a worker to report ready.
      context: a multiprocess context (default: forkserver preloading TF).
    """

    def __init__(self, placements: Sequence[pinning.WorkerPlacement],
                 clients_per_worker: Optional[int] = None, arena_bytes: int = 1 << 20,
                 start_timeout: float = DEFAULT_START_TIMEOUT, context: Any = None,
                 worker_options: Optional[Dict[str, Any]] = None):
        self.placements = list(placements)
        self.arena_bytes = arena_bytes
        self.start_timeout = start_timeout
        self.context = context if context is not None else get_forkserver_context()
        self.worker_options = dict(worker_options or {})
        self.worker_options.setdefault('clients_per_worker', clients_per_worker)
        self.worker_options.setdefault('arena_bytes', arena_bytes)
        self.handles = [WorkerHandle(self, p.worker_id, p) for p in self.placements]
        self.broadcast = BroadcastArena(arena_bytes)
        self.closed = False
        self._started = False
        self._lock = threading.Lock()
        self._finalizer = weakref.finalize(self, _warn_unclosed, list(self.handles), self.broadcast)

    @property
    def num_workers(self) -> int:
        return len(self.handles)

    def start(self) -> float:
        """Starts every worker that is not running; returns the seconds it took."""
        with self._lock:
            if self.closed:
                raise ExecutorClosedError('the worker pool is closed')
            t0 = time.perf_counter()
            try:
                for h in self.handles:
                    with h._lock:
                        if not h.alive:
                            h._reap()
                            h.start(self.start_timeout)
            except BaseException:
                self._close_all()
                raise
            self._started = True
            return time.perf_counter() - t0

    def resource_usage(self) -> List[Dict[str, Any]]:
        return [h.resource_usage() for h in self.handles]

    def stats(self) -> Dict[str, int]:
        return {'requests': sum(h.stats.requests for h in self.handles),
                'bytes_to_workers': (sum(h.stats.bytes_to_worker for h in self.handles)
                                     + self.broadcast.bytes_written),
                'bytes_from_workers': sum(h.stats.bytes_from_worker for h in self.handles)}

    def _close_all(self) -> None:
        for h in self.handles:
            h.close()
        self.broadcast.close()

    def close(self) -> None:
        """Stops every worker and frees every segment. Idempotent."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            self._close_all()
            self._finalizer.detach()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def _warn_unclosed(handles: List[WorkerHandle], broadcast: BroadcastArena) -> None:
    import warnings
    if any(h._proc is not None for h in handles):
        warnings.warn('a simharness WorkerPool was not closed; reaping its workers',
                      ResourceWarning, stacklevel=2)
    for h in handles:
        h.close()
    broadcast.close()
