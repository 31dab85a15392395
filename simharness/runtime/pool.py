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

import collections
import concurrent.futures
import itertools
import logging
import os
import selectors
import signal
import threading
import time
import warnings
import weakref
from typing import Any, Callable, Deque, Dict, List, Optional, Sequence, Tuple

import psutil

from simharness.errors import (ExecutorClosedError, SimharnessTypeError, WorkerCrashedError,
                               WorkerStartError, WorkerTimeoutError)
from simharness.runtime import local_transport as L
from simharness.runtime import pinning
from simharness.runtime import protocol as P
from simharness.runtime.inflight import InFlight
from simharness.validation import check_bool, check_int, check_number
from simharness.runtime.shm import (SEGMENT_PREFIX, ShmArena, ShmAttachment, list_leaked_segments,
                                    reap_orphaned_segments)

DEFAULT_START_TIMEOUT = 120.0
#: Seconds a request may run while its worker is stopped or uses no CPU.
DEFAULT_LIVENESS_TIMEOUT = 60.0

log = logging.getLogger(__name__)


def _likely_cause(exitcode: Optional[int]) -> str:
    if exitcode is None:
        return 'unknown'
    if exitcode == -signal.SIGKILL:
        return 'killed with SIGKILL (kill -9, or the kernel OOM killer: check dmesg)'
    if exitcode == -signal.SIGTERM:
        return ('terminated by SIGTERM (an OOM killer such as earlyoom or systemd-oomd, '
                'systemctl stop, Slurm scancel, or kill)')
    if exitcode == -signal.SIGSEGV:
        return 'segmentation fault in native code'
    if exitcode == -signal.SIGABRT:
        return 'aborted (a native assertion, or a misaligned dlpack view)'
    if exitcode == -signal.SIGBUS:
        return 'bus error (shared memory exhausted?)'
    if exitcode < 0:
        try:
            return f'killed by signal {signal.Signals(-exitcode).name}'
        except ValueError:
            return f'killed by signal {-exitcode}'
    return f'exited with code {exitcode}'


def get_forkserver_context():
    """A `multiprocess` forkserver context that preloads TensorFlow."""
    import multiprocess as mp
    ctx = mp.get_context('forkserver')
    ctx.set_forkserver_preload(['simharness._tf_preload'])  # TF, without start-up noise
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


class _Slot:
    __slots__ = ('arena', 'key', 'locs', 'readers')

    def __init__(self) -> None:
        self.arena: Optional[ShmArena] = None
        self.key: Any = None
        self.locs: List[Any] = []
        self.readers = 0


class BroadcastArena:
    """Driver-owned arenas each holding ONE value's buffers that every worker reads.

    `acquire(key, buffers)` writes the buffers once into a slot nobody reads
    (unless a slot holds `key` already) and counts a reader; `release(locs)`
    ends a read. A read lasts until the worker answered, or, when the worker
    made tensors of the bytes in place, until it freed them (it says so in a
    later answer). A new value takes a free slot, or a new one up to
    `max_slots`; when every slot is read, `acquire` returns None and the
    caller sends the bytes with the request instead: it never waits (a
    worker's tensors may hold a slot until the driver's next request).
    """

    def __init__(self, capacity: int, max_slots: int = 4):
        self._capacity = capacity
        self._max_slots = max_slots
        self._slots: List[_Slot] = []
        self._lock = threading.Lock()
        self._closed = False
        self.bytes_written = 0

    def acquire(self, key: Any, buffers: Sequence[Any]) -> Optional[List[Any]]:
        """The locations of `key`'s buffers (written now unless held); None if every slot is read."""
        with self._lock:
            if self._closed:
                raise ExecutorClosedError('the worker pool is closed')
            for slot in self._slots:
                if slot.readers and slot.key is key:
                    slot.readers += 1
                    return slot.locs
            free = next((s for s in self._slots if not s.readers), None)
            if free is None:
                if len(self._slots) >= self._max_slots:
                    return None
                free = _Slot()
                self._slots.append(free)
            if free.arena is None:
                free.arena = ShmArena(self._capacity)
            free.locs = L.write_buffers(free.arena, buffers)
            free.key = key
            free.readers = 1
            self.bytes_written += sum(b.nbytes for b in buffers)
            return free.locs

    def release(self, locs: Optional[List[Any]] = None) -> None:
        """Ends one read of the slot whose locations `acquire` gave as `locs`."""
        with self._lock:
            for slot in self._slots:
                if slot.locs is locs and slot.readers:
                    slot.readers -= 1
                    if not slot.readers:
                        # Forget the key: a later broadcast of the same (possibly since
                        # mutated) object is written again.
                        slot.key = None
                    return

    @property
    def readers(self) -> int:
        """Reads not yet ended, over all slots."""
        with self._lock:
            return sum(s.readers for s in self._slots)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            slots, self._slots = self._slots, []
        for slot in slots:
            if slot.arena is not None:
                slot.arena.close()


class WorkerStats:
    """Counters of one worker, as seen by the driver."""

    def __init__(self):
        self.requests = 0
        self.bytes_to_worker = 0
        self.bytes_from_worker = 0


class ResponseLoan:
    """The driver's hold on the worker arenas a response lies in, while it reads them in place.

    `release()` (once; again is a no-op) tells the worker it may reuse them.
    A loan nobody released is released when it is freed, so the worker's
    arenas never stay busy for a dropped response; but the views read
    through it must not be used after its release.
    """

    __slots__ = ('_handle', '_generation', '_names')

    def __init__(self, handle: 'WorkerHandle', generation: int, names: List[str]):
        self._handle = handle
        self._generation = generation
        self._names = [names]  # popped once: release is exactly-once across threads

    def release(self) -> None:
        try:
            names = self._names.pop()
        except IndexError:
            return
        self._handle.acknowledge(names, self._generation)

    def __del__(self) -> None:
        try:
            self.release()
        except Exception:  # interpreter shutdown: the worker is gone too
            pass


class _Call(InFlight):
    """One request on its way: what the reactor needs to send it and answer the caller."""

    __slots__ = ('header', 'buffers', 'locs', 'uses_arena', 'sent_at', 'nbytes', 'lend',
                 'generation', 'token')

    def __init__(self, header: bytes, buffers: List[Any], locs: Optional[List[Any]], op: str,
                 on_done: Optional[Callable[[], None]], lend: bool = False, generation: int = 0):
        super().__init__(op, on_done)
        self.lend = lend
        self.generation = generation
        self.token: Optional[int] = None  # placed (broadcast) buffers: the worker may pin them
        self.header = header
        self.buffers = buffers
        self.locs = locs
        self.uses_arena = locs is None and L.arena_bytes_needed(buffers) > 0
        self.sent_at = 0.0
        # Bytes this request writes: none when its buffers are already placed (a
        # broadcast, counted once by the broadcast arena).
        self.nbytes = 0 if locs is not None else sum(b.nbytes for b in buffers)


class WorkerHandle:
    """The driver side of one worker process.

    `submit` may be called from any thread; the pool's reactor does all
    I/O. `ensure_started` (re)starts the process when it is not running.
    """

    #: `submit(..., lend=True)` answers with views of the worker's memory and a loan.
    lends = True

    def __init__(self, pool: 'WorkerPool', worker_id: int, placement: pinning.WorkerPlacement):
        self.pool = pool
        self.worker_id = worker_id
        self.placement = placement
        self.generation = 0
        self.stats = WorkerStats()
        self.pid: Optional[int] = None
        self._lock = threading.Lock()        # short sections: queue, inflight, state
        self._start_lock = threading.Lock()  # one start at a time
        self._proc: Any = None
        self._conn: Any = None
        self._fd: Optional[int] = None
        self._live = False
        self._arena: Optional[ShmArena] = None
        self._attachment: Optional[ShmAttachment] = None
        self._worker_arenas: set = set()
        self.queue: Deque[_Call] = collections.deque()
        self.inflight: Deque[_Call] = collections.deque()
        self._out = bytearray()
        self._acks: List[str] = []  # worker arenas to acknowledge with the next pump
        self._tokens = itertools.count()
        # Broadcast reads the worker still holds in place (token -> release), until it
        # reports them unpinned or dies.
        self._pins: Dict[int, Callable[[], None]] = {}
        self._reader = L.FrameReader()
        self._arena_busy = False
        self._kill_error: Optional[BaseException] = None
        self._progress = (0.0, 0.0)  # (cpu seconds, when they last advanced)

    # ------------------------------------------------------------ lifecycle
    @property
    def alive(self) -> bool:
        return self._live and self._proc is not None and self._proc.is_alive()

    def ensure_started(self, timeout: Optional[float] = None) -> None:
        """Starts the worker process unless it runs (blocking: a fresh one takes ~0.1-3 s)."""
        with self._start_lock:
            if self.pool.closed:
                raise ExecutorClosedError('the worker pool is closed')
            if self._live:
                return
            self._reap()
            self._start(self.pool.start_timeout if timeout is None else timeout)

    def _start(self, timeout: float) -> None:
        from multiprocess.connection import wait as mp_wait
        from simharness.runtime.worker import worker_main
        ctx = self.pool.context
        parent, child = ctx.Pipe(duplex=True)
        proc = ctx.Process(target=self.pool.worker_target or worker_main,
                           args=(child, self.worker_id, self.placement, self.pool.worker_options),
                           name=f'simharness-worker-{self.worker_id}', daemon=True)
        with _START_LOCK, _NoMainReimport():
            proc.start()
        child.close()
        with self._lock:
            self._proc, self._conn = proc, parent
        deadline = time.monotonic() + timeout
        frame: Optional[list] = None
        while True:
            ready = mp_wait([parent, proc.sentinel], timeout=max(0.0, deadline - time.monotonic()))
            if parent in ready:
                try:
                    frame = L.unpack_frame(parent.recv_bytes())
                except (EOFError, OSError):
                    frame = None
                break
            if proc.sentinel in ready:
                break
            if time.monotonic() >= deadline:
                pid = proc.pid
                self._reap()
                raise WorkerStartError(f'worker {self.worker_id} (pid {pid}) did not start within '
                                       f'{timeout} s', worker_id=self.worker_id)
        if not frame or frame[0] != L.F_READY:
            pid = proc.pid
            proc.join(5)
            cause = _likely_cause(proc.exitcode)
            if frame and frame[0] == L.F_START_ERROR:
                text, tb = frame[1], frame[2]
            else:
                text, tb = f'it died while starting ({cause})', ''
            self._reap()
            raise WorkerStartError(f'worker {self.worker_id} (pid {pid}) could not start: {text}',
                                   worker_id=self.worker_id, remote_traceback=tb)
        arena = ShmArena(self.pool.arena_bytes)
        with self._lock:
            self.pid = frame[1]
            self._worker_arenas = {frame[2]}
            self._arena = arena
            self._attachment = ShmAttachment()
            self._fd = parent.fileno()
            os.set_blocking(self._fd, False)
            self._out = bytearray()
            self._acks = []
            self._reader = L.FrameReader()
            self._arena_busy = False
            self._kill_error = None
            self._progress = (0.0, time.monotonic())
            self.generation += 1
            self._live = True
        self.pool._reactor.register(self)

    def _reap(self) -> None:
        """Stops the process (if any) and frees everything this handle owns (idempotent)."""
        with self._lock:
            pins, self._pins = self._pins, {}
        for release in pins.values():  # its tensors of our broadcasts are gone with it
            release()
        with self._lock:
            proc, conn = self._proc, self._conn
            self._proc = self._conn = None
            self._fd = None
            self._live = False
            attachment, self._attachment = self._attachment, None
            arena, self._arena = self._arena, None
            names = set(self._worker_arenas)
            self._worker_arenas = set()
            pid = self.pid
        if conn is not None:
            try:
                os.set_blocking(conn.fileno(), True)
                conn.send_bytes(L.pack_frame(L.F_CLOSE))
            except (OSError, EOFError, BrokenPipeError, ValueError):
                pass
        if proc is not None:
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
        if attachment is not None:
            attachment.close()
        if arena is not None:
            arena.close()
        # A worker unlinks its own arena when it exits cleanly; after a crash
        # the driver does it: segment names carry their creator's pid.
        if pid is not None:
            prefix = f'{SEGMENT_PREFIX}{pid}_'
            names.update(n for n in list_leaked_segments() if n.startswith(prefix))
        for name in names:
            try:
                os.unlink(os.path.join('/dev/shm', name))
            except FileNotFoundError:
                pass

    def close(self) -> None:
        """Stops the worker: at once (SIGKILL) when a request is in flight, else cleanly."""
        with self._lock:
            busy = bool(self.inflight or self.queue)
            proc = self._proc
            calls = list(self.inflight) + list(self.queue)
            self.inflight.clear()
            self.queue.clear()
            self._live = False
        if busy and proc is not None and proc.pid:
            try:
                os.kill(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for c in calls:
            c.finish(error=ExecutorClosedError(
                f'the worker pool was closed while worker {self.worker_id} ran {c.op}'))
        self.pool._reactor.unregister(self)
        self._reap()

    # ------------------------------------------------------------ requests
    def submit(self, header: bytes, buffers: List[Any], op: str, generation: int,
               locs: Optional[List[Any]] = None,
               on_done: Optional[Callable[[], None]] = None,
               lend: bool = False) -> concurrent.futures.Future:
        """Queues one encoded request; the future resolves to its decoded `Response`.

        Args:
          header, buffers: the encoded `Request`.
          op: its operation's name (for error messages).
          generation: the worker generation the request was made for: if the
            worker was replaced since, the request fails with
            `WorkerCrashedError` (its session is gone).
          locs: where `buffers` already are (the broadcast arena), if placed.
          on_done: called once the worker answered (or the request failed).
          lend: the future resolves to ``(response, loan)``: the response's
            big arrays are read-only views of the worker's arena, valid until
            ``loan.release()`` (None when nothing is lent), instead of copies.
            For answers the caller reads once and drops (partial reductions).
        """
        call = _Call(header, buffers, locs, op, on_done, lend, generation)
        if locs is not None:
            call.token = next(self._tokens)
        with self._lock:
            if self.pool.closed:
                err: Optional[BaseException] = ExecutorClosedError('the worker pool is closed')
            elif not self._live or generation != self.generation:
                err = WorkerCrashedError(
                    f'worker {self.worker_id} was replaced after a crash; its values are gone: run '
                    'the computation again', worker_id=self.worker_id, pid=self.pid)
            else:
                err = None
                self.queue.append(call)
                self.stats.requests += 1
                self.stats.bytes_to_worker += call.nbytes
        if err is not None:
            call.finish(error=err)
        else:
            self.pool._reactor.wake(self)
        return call.future

    def resource_usage(self) -> Dict[str, Any]:
        """RSS (bytes) and CPU seconds of the worker process (psutil)."""
        proc = self._proc
        if not self.alive or proc is None:
            return {'worker_id': self.worker_id, 'alive': False}
        try:
            p = psutil.Process(proc.pid)
            with p.oneshot():
                mem = p.memory_info()
                cpu = p.cpu_times()
        except psutil.Error:
            return {'worker_id': self.worker_id, 'alive': False}
        return {'worker_id': self.worker_id, 'alive': True, 'pid': proc.pid,
                'rss_bytes': mem.rss, 'cpu_seconds': cpu.user + cpu.system,
                'requests': self.stats.requests, 'bytes_to_worker': self.stats.bytes_to_worker,
                'bytes_from_worker': self.stats.bytes_from_worker}

    def acknowledge(self, names: List[str], generation: int) -> None:
        """The driver is done with these arenas of the worker (any thread; see `ResponseLoan`)."""
        with self._lock:
            if generation != self.generation or not self._live:
                return  # a worker since replaced: its arenas are gone
            self._acks.extend(names)
        self.pool._reactor.wake(self)

    # ------------------------------------------------------------ reactor side
    def _pump(self) -> None:
        """Moves ACKs and queued requests into the output buffer (reactor thread)."""
        with self._lock:
            if self._acks:
                self._out += L.frame_with_length(L.pack_frame(L.F_ACK, *self._acks))
                self._acks = []
            while self.queue and self._live:
                call = self.queue[0]
                if call.uses_arena and self._arena_busy:
                    break  # the worker still reads the driver arena
                self.queue.popleft()
                try:
                    locs = call.locs
                    if locs is None:
                        locs = L.write_buffers(self._arena, call.buffers)
                except Exception as e:
                    call.finish(error=e)
                    continue
                if call.uses_arena:
                    self._arena_busy = True
                call.buffers = []
                self._out += L.frame_with_length(L.pack_frame(L.F_REQUEST, call.header, locs,
                                                              call.token))
                call.header = b''
                call.sent_at = time.monotonic()
                self.inflight.append(call)

    def _flush(self) -> bool:
        """Writes what it can; True when everything was written."""
        fd = self._fd
        if fd is None:
            return True
        while self._out:
            try:
                n = os.write(fd, self._out)
            except BlockingIOError:
                return False
            except OSError:
                return True  # the worker is gone: its sentinel tells
            del self._out[:n]
        return True

    def _read(self) -> bool:
        """Reads and dispatches responses; False on EOF (reactor thread)."""
        fd = self._fd
        if fd is None:
            return False
        while True:
            try:
                data = os.read(fd, 1 << 20)
            except BlockingIOError:
                return True
            except OSError:
                return False
            if not data:
                return False
            for raw in self._reader.feed(data):
                self._on_frame(L.unpack_frame(raw))

    def _on_frame(self, frame: list) -> None:
        if frame[0] != L.F_RESPONSE:
            return
        with self._lock:
            if not self.inflight:
                return
            call = self.inflight.popleft()
            if call.uses_arena:
                self._arena_busy = False
            attachment = self._attachment
        _, header, locs, retired, pinned, unpinned = frame
        for name in retired:
            # Arenas the worker closed or re-created bigger (under a new name): unmap.
            self._worker_arenas.discard(name)
            if attachment is not None and name in attachment.names:
                attachment.release(name)
        names = L.segment_names(locs)
        self._worker_arenas.update(names)
        with self._lock:
            if pinned and call.token is not None and call.on_done is not None:
                # The worker holds the broadcast in place (tensors of it live on): the
                # read ends when it reports the token unpinned, not now.
                self._pins[call.token], call.on_done = call.on_done, None
            ended = [self._pins.pop(t) for t in unpinned if t in self._pins]
        for release in ended:
            release()
        loan: Optional[ResponseLoan] = None
        try:
            if call.lend and names:
                buffers = L.read_buffers(attachment, locs, copy=False)
                loan = ResponseLoan(self, call.generation, names)
            else:
                buffers = L.read_buffers(attachment, locs, copy=True)
                if names:
                    self._out += L.frame_with_length(L.pack_frame(L.F_ACK, *names))
            self.stats.bytes_from_worker += sum(len(b) if isinstance(b, bytes) else b.nbytes
                                                for b in buffers)
            resp = P.decode_message(header, buffers)
        except Exception as e:
            if loan is not None:
                loan.release()
            call.finish(error=e)
            return
        if not call.lend:
            call.finish(resp)
        elif not call.finish((resp, loan)) and loan is not None:
            loan.release()  # nobody waits for it any more (cancelled)

    def _fail_all(self, error_for: Callable[[_Call], BaseException]) -> None:
        with self._lock:
            calls = list(self.inflight) + list(self.queue)
            self.inflight.clear()
            self.queue.clear()
            self._live = False
        for c in calls:
            c.finish(error=error_for(c))

    def _died(self) -> None:
        """The process exited (reactor thread): fail its requests, free its resources."""
        with self._start_lock:  # not while a caller restarts it
            self._died_locked()

    def _died_locked(self) -> None:
        proc = self._proc
        if proc is not None:
            proc.join(2)
        exitcode = proc.exitcode if proc is not None else None
        pid = self.pid
        kill_error = self._kill_error
        cause = _likely_cause(exitcode)

        def error(c: _Call) -> BaseException:
            if kill_error is not None:
                return kill_error
            return WorkerCrashedError(
                f'worker {self.worker_id} (pid {pid}) died while running {c.op}: {cause}; it will '
                'be replaced on next use', worker_id=self.worker_id, pid=pid, exitcode=exitcode,
                likely_cause=cause)
        self._fail_all(error)
        self._reap()

    def _check_liveness(self, now: float) -> None:
        """Kills a worker whose oldest request is past its deadline or makes no progress."""
        with self._lock:
            call = self.inflight[0] if self.inflight else None
            proc = self._proc
        if call is None or proc is None or self._kill_error is not None:
            return
        age = now - call.sent_at
        timeout = self.pool.request_timeout
        reason = ''
        if timeout is not None and age > timeout:
            reason = 'timeout'
            what = f'did not answer {call.op} within request_timeout={timeout} s'
        elif age > self.pool.liveness_timeout:
            try:
                p = psutil.Process(proc.pid)
                status = p.status()
                cpu = sum(p.cpu_times()[:2])
            except psutil.Error:
                return
            last_cpu, since = self._progress
            if cpu > last_cpu + 1e-3:
                self._progress = (cpu, now)
            if status in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP):
                if now - since > self.pool.liveness_timeout:
                    reason = 'stopped'
                    what = (f'has been stopped (SIGSTOP?) for {now - since:.0f} s while running '
                            f'{call.op}')
            elif cpu <= last_cpu + 1e-3 and now - max(since, call.sent_at) > self.pool.liveness_timeout:
                reason = 'no progress'
                what = (f'used no CPU for {self.pool.liveness_timeout} s while running {call.op} '
                        '(deadlocked?)')
        if not reason:
            return
        self._kill_error = WorkerTimeoutError(
            f'worker {self.worker_id} (pid {proc.pid}) {what}; it was killed and will be '
            'replaced on next use', worker_id=self.worker_id, pid=proc.pid, op=call.op,
            seconds=round(age, 3), reason=reason)
        log.warning('%s', self._kill_error)
        try:
            os.kill(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class _Reactor:
    """The pool's I/O thread: a selector over every worker's socket and sentinel."""

    def __init__(self, pool: 'WorkerPool'):
        self._pool_ref = weakref.ref(pool)
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._sel.register(self._wake_r, selectors.EVENT_READ, None)
        self._lock = threading.Lock()
        self._dirty: set = set()
        self._register: List[WorkerHandle] = []
        self._unregister: List[Tuple[WorkerHandle, threading.Event]] = []
        self._registered: Dict[WorkerHandle, tuple] = {}
        self._stopping = False
        self._thread: Optional[threading.Thread] = None

    def _ensure_thread(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name='simharness-pool-reactor',
                                            daemon=True)
            self._thread.start()

    def wake(self, handle: Optional[WorkerHandle] = None) -> None:
        with self._lock:
            if handle is not None:
                self._dirty.add(handle)
            self._ensure_thread()
        try:
            os.write(self._wake_w, b'x')
        except (BlockingIOError, OSError):
            pass  # a wake-up is already pending (or we are closing)

    def register(self, handle: WorkerHandle) -> None:
        with self._lock:
            self._register.append(handle)
        self.wake(handle)

    def unregister(self, handle: WorkerHandle) -> None:
        """Forgets `handle` (waits until the reactor has let go of its fds)."""
        done = threading.Event()
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._drop(handle)
                return
            self._unregister.append((handle, done))
        self.wake()
        if threading.current_thread() is not self._thread:
            done.wait(10)

    def _drop(self, handle: WorkerHandle) -> None:
        keys = self._registered.pop(handle, None)
        if keys:
            for fd in keys:
                try:
                    self._sel.unregister(fd)
                except (KeyError, ValueError):
                    pass

    def stop(self) -> None:
        with self._lock:
            self._stopping = True
            thread = self._thread
        try:
            os.write(self._wake_w, b'x')
        except OSError:
            pass
        if thread is not None and thread is not threading.current_thread():
            thread.join(10)
        self._sel.close()
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass

    def _run(self) -> None:
        try:
            self._loop()
        except Exception:  # pragma: no cover - a bug: fail every request rather than hang
            log.exception('simharness pool reactor failed')
            pool = self._pool_ref()
            if pool is not None:
                for h in pool.handles:
                    h._fail_all(lambda c: ExecutorClosedError(
                        'the worker pool reactor failed (see the log)'))

    def _loop(self) -> None:
        last_check = time.monotonic()
        while True:
            with self._lock:
                if self._stopping:
                    return
                registering, self._register = self._register, []
                unregistering, self._unregister = self._unregister, []
            for h, done in unregistering:
                self._drop(h)
                done.set()
            for h in registering:
                self._drop(h)
                fd, proc = h._fd, h._proc
                if fd is None or proc is None:
                    continue
                self._sel.register(fd, selectors.EVENT_READ, (h, 'io'))
                self._sel.register(proc.sentinel, selectors.EVENT_READ, (h, 'sentinel'))
                self._registered[h] = (fd, proc.sentinel)
            with self._lock:
                dirty, self._dirty = self._dirty, set()
            for h in dirty:
                if h in self._registered:
                    h._pump()
                    self._flush(h)
            busy = any(h.inflight for h in self._registered)
            events = self._sel.select(0.25 if busy else 1.0)
            for key, mask in events:
                if key.data is None:
                    try:
                        while os.read(self._wake_r, 4096):
                            pass
                    except (BlockingIOError, OSError):
                        pass
                    continue
                h, what = key.data
                if h not in self._registered:
                    continue
                if what == 'sentinel':
                    self._drop(h)
                    h._died()
                    continue
                if mask & selectors.EVENT_READ:
                    if not h._read():
                        continue  # EOF: the sentinel follows
                    h._pump()  # answers free the driver arena for queued requests
                self._flush(h)
            now = time.monotonic()
            if now - last_check >= 0.25:
                last_check = now
                for h in list(self._registered):
                    h._check_liveness(now)

    def _flush(self, h: WorkerHandle) -> None:
        keys = self._registered.get(h)
        if not keys:
            return
        done = h._flush()
        events = selectors.EVENT_READ | (0 if done else selectors.EVENT_WRITE)
        try:
            if self._sel.get_key(keys[0]).events != events:
                self._sel.modify(keys[0], events, (h, 'io'))
        except (KeyError, ValueError):
            pass


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
      liveness_timeout: seconds a request may wait on a worker that is
        stopped (SIGSTOP) or uses no CPU, before the same.

    Attribute `worker_target` (None: `simharness.runtime.worker.worker_main`) is
    the function a worker process runs, ``(conn, worker_id, placement,
    options)``; fault-injection tests set it (before `start`) to a function of
    their own that wraps `worker_main`.
    """

    def __init__(self, placements: Sequence[pinning.WorkerPlacement],
                 clients_per_worker: Optional[int] = None, arena_bytes: int = 1 << 20,
                 start_timeout: float = DEFAULT_START_TIMEOUT, context: Any = None,
                 worker_options: Optional[Dict[str, Any]] = None,
                 request_timeout: Optional[float] = None,
                 liveness_timeout: float = DEFAULT_LIVENESS_TIMEOUT):
        self.placements = list(placements)
        self.arena_bytes = arena_bytes
        self.start_timeout = start_timeout
        self.request_timeout = request_timeout
        self.liveness_timeout = liveness_timeout
        self.context = context if context is not None else get_forkserver_context()
        self.worker_options = dict(worker_options or {})
        self.worker_options.setdefault('clients_per_worker', clients_per_worker)
        self.worker_options.setdefault('arena_bytes', arena_bytes)
        self.worker_target: Optional[Callable[..., None]] = None
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
                       liveness_timeout: float = 60.0) -> WorkerPool:
    """A `WorkerPool` of pinned workers (not started; see `WorkerPool.start`).

    Args are those of `simharness.stacks.process_executor_factory`, checked
    before anything starts.
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
    check_worker_options(worker_options)
    gpus = pinning.parse_devices(devices)
    pinning.check_gpus_exist(devices, gpus or ())
    placements = pinning.plan_workers(num_workers, pinning.usable_cpus(), gpus or None,
                                      workers_per_gpu, cpu_affinity)
    return WorkerPool(placements, clients_per_worker=clients_per_worker, arena_bytes=arena_bytes,
                      start_timeout=start_timeout, worker_options=worker_options,
                      request_timeout=request_timeout, liveness_timeout=liveness_timeout)
