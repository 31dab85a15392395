"""The local wing: supervision of a worker process (start, liveness, death, reaping).

A worker process is started from a forkserver that preloaded TensorFlow, runs the
pool's `worker_target` (a host: `simharness.hosts.local_worker.worker_main`),
reports READY, and is reaped (its segments unlinked) when it dies or is closed.
`WorkerProcess` owns, and alone closes, the process and the driver's end of its
socket; it knows no request (its `WorkerHandle` owns those).
"""

from __future__ import annotations

import logging
import os
import select
import signal
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Optional, Tuple

import psutil

if TYPE_CHECKING:  # reason: the forkserver's context type, for annotations only
    import multiprocess.context

from simharness.errors import WorkerCrashedError, WorkerStartError, WorkerTimeoutError
from simharness.runtime import pinning
from simharness.runtime.exits import describe_exit
from simharness.runtime.inflight import InFlight
from simharness.runtime.local import transport as L
from simharness.runtime.local.lifeline import FORKSERVER_PARENT_ENV, driver_temp_dir, run_worker
from simharness.runtime.local.options import DEFAULT_STOPPED_TIMEOUT
from simharness.runtime.local.shm import SEGMENT_PREFIX, list_leaked_segments


#: The `pool.WorkerPool` whose worker this is (pool.py imports this module).
_WorkerPool = Any


log = logging.getLogger(__name__)


def get_forkserver_context() -> 'multiprocess.context.ForkServerContext':
    """A `multiprocess` forkserver context that preloads TensorFlow."""
    import multiprocess as mp

    ctx = mp.get_context('forkserver')
    # Its temporary directory, where the forkserver's socket will be, made now in a
    # directory whose path is short enough for one (`driver_temp_dir`).
    driver_temp_dir()
    # TF, without start-up noise, under a watch on the driver while it imports
    # (`lifeline.DriverWatchWhilePreloading`, told the driver's pid by `_name_forkserver_parent`).
    ctx.set_forkserver_preload(['simharness._forkserver_preload'])
    return ctx


def _name_forkserver_parent() -> None:
    """Before a worker starts (and, the first time, the forkserver with it): the driver's
    pid in the environment the forkserver inherits, from the main thread only. The kernel
    signals a parent's death when the *thread* that spawned the child ends, so a forkserver
    spawned by another thread (which may end while the driver lives on) must not die with
    it: it is then left unwatched during its import, as before."""
    if threading.current_thread() is threading.main_thread():
        os.environ[FORKSERVER_PARENT_ENV] = str(os.getpid())
    else:
        os.environ.pop(FORKSERVER_PARENT_ENV, None)


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


#: Clock ticks per second: the unit of the CPU times in /proc/<pid>/stat.
_CLK_TCK = os.sysconf('SC_CLK_TCK') if hasattr(os, 'sysconf') else 100


class _ProcStat:
    """A process's state and CPU seconds, read from /proc/<pid>/stat through a descriptor
    kept open (psutil where there is no /proc).

    The reactor checks every worker with a request in flight four times a second; one
    ``psutil.Process(pid)`` and its status took ~170 us of the driver's CPU on a loaded
    2-core machine, a read of the open descriptor ~20 us (16 workers in a 0.3 s round:
    ~3 ms of the driver's CPU a round). The descriptor names the process, not its pid:
    once the process is gone a read fails (ESRCH), never reads a successor's.
    """

    __slots__ = ('pid', '_fd')

    def __init__(self, pid: int):
        self.pid = pid
        try:
            self._fd: Optional[int] = os.open(f'/proc/{pid}/stat', os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            self._fd = None

    def read(self, want_cpu: bool) -> Optional[Tuple[bool, float]]:
        """(stopped, CPU seconds: user + system, 0.0 unless `want_cpu`); None when gone."""
        if self._fd is None:
            try:
                p = psutil.Process(self.pid)
                with p.oneshot():
                    status = p.status()
                    cpu = sum(p.cpu_times()[:2]) if want_cpu else 0.0
            except psutil.Error:
                return None
            return status in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP), cpu
        try:
            data = os.pread(self._fd, 1024, 0)
        except OSError:
            return None
        # pid (comm) state ppid ...: the command may hold ')' or spaces, the fields after
        # its last ')' do not; utime and stime are the 12th and 13th of them.
        fields = data[data.rindex(b')') + 2 :].split()
        cpu = (int(fields[11]) + int(fields[12])) / _CLK_TCK if want_cpu else 0.0
        return fields[0] in (b'T', b't'), cpu

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


class WorkerProcess:
    """One worker process and the driver's end of its socket: start, liveness, death, reaping.

    It owns the process (`start`, `kill`, `stop`), its socket (`fd`, closed by `stop`)
    and the segments the process left behind (unlinked by `stop`); it knows no
    request: the liveness check is given the oldest one in flight.
    """

    def __init__(self, pool: _WorkerPool, worker_id: int, placement: pinning.WorkerPlacement):
        self.pool = pool
        self.worker_id = worker_id
        self.placement = placement
        #: The pid of the last process started (None before the first).
        self.pid: Optional[int] = None
        self._lock = threading.Lock()  # swaps of the process and its socket
        self._proc: Any = None
        self._conn: Any = None
        self._fd: Optional[int] = None
        self._kill_error: Optional[BaseException] = None
        self._progress = (0.0, 0.0)  # (cpu seconds, when they last advanced)
        self._stopped_since: Optional[float] = None  # when the process was first seen stopped
        self._stat: Optional[_ProcStat] = None  # the running process's /proc/<pid>/stat

    @property
    def exists(self) -> bool:
        """Whether a process was started and not yet stopped (it may have died)."""
        return self._proc is not None

    @property
    def fd(self) -> Optional[int]:
        """The driver's end of the socket (non-blocking; None unless connected)."""
        return self._fd

    @property
    def sentinel(self) -> Optional[int]:
        """A descriptor that becomes readable when the process ends (None without one)."""
        proc = self._proc
        return None if proc is None else proc.sentinel

    @property
    def alive(self) -> bool:
        """Whether the process runs (one poll(2) of its sentinel)."""
        proc = self._proc
        if proc is None:
            return False
        # The sentinel is readable once the process is gone: one poll(2), where
        # `is_alive()` builds a selector per call (it ran once per request).
        try:
            p = select.poll()
            p.register(proc.sentinel, select.POLLIN)
            return not p.poll(0)
        except (OSError, ValueError):  # closed meanwhile
            return False

    def start(self, timeout: float) -> None:
        """Starts the process and waits for its READY.

        Raises `WorkerStartError` (the process stopped and reaped) when it does not
        report READY within `timeout` seconds.
        """
        from multiprocess.connection import wait as mp_wait

        target = self.pool.worker_target
        ctx = self.pool.context
        parent, child = ctx.Pipe(duplex=True)
        # Under a lifeline to this process: if the driver dies (any signal), the worker
        # removes the driver's segments and its own, and exits.
        proc = ctx.Process(
            target=run_worker,
            args=(
                target,
                os.getpid(),
                child,
                self.worker_id,
                self.placement,
                self.pool.worker_config,
                driver_temp_dir(),
            ),
            name=f'simharness-worker-{self.worker_id}',
            daemon=True,
        )
        with _START_LOCK, _NoMainReimport():
            _name_forkserver_parent()
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
                self.stop()
                raise WorkerStartError(
                    f'worker {self.worker_id} (pid {pid}) did not start within {timeout} s',
                    worker_id=self.worker_id,
                )
        if not frame or frame[0] != L.F_READY:
            pid = proc.pid
            proc.join(5)
            cause = describe_exit(proc.exitcode)
            if frame and frame[0] == L.F_START_ERROR:
                text, tb = frame[1], frame[2]
            else:
                text, tb = f'it died while starting ({cause})', ''
            self.stop()
            raise WorkerStartError(
                f'worker {self.worker_id} (pid {pid}) could not start: {text}',
                worker_id=self.worker_id,
                remote_traceback=tb,
            )
        stat = _ProcStat(proc.pid)
        with self._lock:
            self.pid = frame[1]
            self._stat = stat
            self._fd = parent.fileno()
            os.set_blocking(self._fd, False)
            self._kill_error = None
            self._progress = (0.0, time.monotonic())
            self._stopped_since = None

    def disconnect(self) -> None:
        """No I/O starts on the socket any more (`fd` is None); `stop` closes it."""
        with self._lock:
            self._fd = None

    def kill(self) -> None:
        """SIGKILL to the process, if there is one (`stop` reaps it)."""
        proc = self._proc
        if proc is not None and proc.pid:
            try:
                os.kill(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def stop(self) -> None:
        """Stops the process (asked to, then SIGKILL), closes the socket and unlinks the
        segments the process left (idempotent)."""
        with self._lock:
            proc, conn = self._proc, self._conn
            self._proc = self._conn = None
            self._fd = None
            pid = self.pid
            if self._stat is not None:
                self._stat.close()
                self._stat = None
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
        # A worker unlinks its own segments (its arenas) when it exits cleanly; after a
        # crash the driver does it: segment names carry their creator's pid.
        if pid is not None:
            prefix = f'{SEGMENT_PREFIX}{pid}_'
            for name in list_leaked_segments():
                if name.startswith(prefix):
                    try:
                        os.unlink(os.path.join('/dev/shm', name))
                    except FileNotFoundError:
                        pass

    def death_errors(self) -> Callable[[InFlight], BaseException]:
        """After the process exited: the error of each request it had (joins it first)."""
        proc = self._proc
        if proc is not None:
            proc.join(2)
        exitcode = proc.exitcode if proc is not None else None
        pid = self.pid
        kill_error = self._kill_error
        cause = describe_exit(exitcode)

        def error(c: InFlight) -> BaseException:
            if kill_error is not None:
                return kill_error
            return WorkerCrashedError(
                f'worker {self.worker_id} (pid {pid}) died while running {c.op}: {cause}; it will '
                'be replaced on next use',
                worker_id=self.worker_id,
                pid=pid,
                exitcode=exitcode,
                likely_cause=cause,
            )

        return error

    def usage(self) -> Optional[Tuple[int, int, float]]:
        """(pid, RSS in bytes, CPU seconds) of the process (psutil); None without one."""
        proc = self._proc
        if proc is None:
            return None
        try:
            p = psutil.Process(proc.pid)
            with p.oneshot():
                mem = p.memory_info()
                cpu = p.cpu_times()
        except psutil.Error:
            return None
        return proc.pid, mem.rss, cpu.user + cpu.system

    def check_liveness(self, call: Optional[Any], now: float) -> None:
        """Kills the process when `call`, its oldest request in flight (None: there is
        none), is past its deadline, or the process is stopped or makes no progress.

        A stopped process (SIGSTOP, a debugger: /proc state T or t) is seen from
        its state at once and fails the call after `stopped_timeout`; a worker
        busy in one long TF call runs or sleeps (state R or S) and is only ever
        judged by `request_timeout` and, if it uses no CPU, `liveness_timeout`.
        The requests then fail with the `WorkerTimeoutError` `death_errors` gives.
        """
        proc = self._proc
        if call is None or proc is None or self._kill_error is not None:
            self._stopped_since = None
            return
        age = now - call.sent_at
        timeout = self.pool.request_timeout
        stopped_timeout = getattr(self.pool, 'stopped_timeout', DEFAULT_STOPPED_TIMEOUT)
        reason = ''
        if timeout is not None and age > timeout:
            reason = 'timeout'
            what = f'did not answer {call.op} within request_timeout={timeout} s'
        else:
            with self._lock:  # not while `stop` closes the descriptor
                stat = self._stat
                seen = None if stat is None else stat.read(age > self.pool.liveness_timeout)
            if seen is None:
                return
            stopped, cpu = seen
            if stopped:
                if self._stopped_since is None:
                    self._stopped_since = now
                stopped_for = now - self._stopped_since
                if stopped_for >= stopped_timeout:
                    reason = 'stopped'
                    what = (
                        f'has been stopped (SIGSTOP?) for {stopped_for:.1f} s '
                        f'(stopped_timeout={stopped_timeout} s) while running {call.op}'
                    )
            else:
                self._stopped_since = None
                if age > self.pool.liveness_timeout:
                    last_cpu, since = self._progress
                    if cpu > last_cpu + 1e-3:
                        self._progress = (cpu, now)
                    elif now - max(since, call.sent_at) > self.pool.liveness_timeout:
                        reason = 'no progress'
                        what = (
                            f'used no CPU for {self.pool.liveness_timeout} s while running '
                            f'{call.op} (deadlocked?)'
                        )
        if not reason:
            return
        self._kill_error = WorkerTimeoutError(
            f'worker {self.worker_id} (pid {proc.pid}) {what}; it was killed and will be '
            'replaced on next use',
            worker_id=self.worker_id,
            pid=proc.pid,
            op=call.op,
            seconds=round(age, 3),
            reason=reason,
        )
        log.warning('%s', self._kill_error)
        try:
            os.kill(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
