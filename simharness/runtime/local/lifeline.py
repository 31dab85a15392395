"""Nothing outlives the driver: a worker's watch on its driver, and the driver's SIGTERM path.

```
driver (pid D)                               worker k (started from the forkserver)
  SIGTERM handler (installed by the first      lifeline thread: waits on a pidfd of D
  started pool, main thread only): a previous  (or polls it where pidfd_open is missing)
  handler runs first (if it raises or exits,    D died (any signal, SIGKILL included):
  every live pool is closed, bounded: 5 s);       unlink /dev/shm/simharness_D_*  (driver's)
  by default: close them, remove D's temp dir,    unlink /dev/shm/simharness_k_*  (its own)
  die by SIGTERM                                  remove D's multiprocess temp dir (the
  SIGINT: untouched (KeyboardInterrupt; the        forkserver's listener socket)
  pool closes as the interpreter exits)           exit at once (os._exit), even mid-TF-call
```

A driver killed by SIGKILL cannot run anything; its workers see it die and
remove what it left, so no segment and no worker outlives it. Before the first
worker exists the driver has made no segment, and its forkserver (importing
TensorFlow, not yet serving) dies with it (`DriverWatchWhilePreloading`).
"""

from __future__ import annotations

import atexit
import os
import re
import select
import shutil
import signal
import stat
import sys
import tempfile
import threading
import time
import types
import weakref
from typing import Any, Callable, Dict, List, Optional


from simharness.errors import WorkerStartError
from simharness.runtime.local.shm import (
    SEGMENT_PREFIX,
    creator_gone,
    list_leaked_segments,
    stop_creating,
)

try:
    import _posixshmem
except ImportError:  # pragma: no cover - not POSIX
    _posixshmem = None

#: Seconds between checks where the kernel has no pidfd (Linux < 5.3).
_POLL_SECONDS = 0.5
#: Seconds the SIGTERM handler waits for the pools to close before the signal's action.
_CLOSE_SECONDS = 5.0
#: Seconds a worker whose driver's pipe ended without a goodbye waits for the driver to be
#: gone (a dying process closes its files before it exits) before it cleans up after it.
_DYING_SECONDS = 10.0
#: What a worker's target returns when its driver's pipe ended without a goodbye (EOF).
DRIVER_GONE = 'driver-gone'


def _unlink_segments_of(pid: int) -> None:
    for name in list_leaked_segments(f'{SEGMENT_PREFIX}{pid}_'):
        try:
            if _posixshmem is not None:
                _posixshmem.shm_unlink('/' + name)
            else:  # pragma: no cover
                os.unlink(os.path.join('/dev/shm', name))
        except OSError:
            pass


#: The longest path an AF_UNIX socket may have (``sun_path`` less its final NUL): 107 on
#: Linux, 103 on macOS and the BSDs.
SOCKET_PATH_MAX = 107 if sys.platform.startswith('linux') else 103
#: What multiprocess adds to the driver's temporary directory for the forkserver's
#: listener socket: ``/listener-XXXXXXXX``.
_LISTENER = len('/listener-XXXXXXXX')
#: Where multiprocess's directory goes when the machine's temporary directory is too long
#: for the socket's path in it (the first of them that can be written; CPython 3.12's
#: multiprocessing falls back to the same ones).
SHORT_TEMP_DIRS = ('/tmp', '/var/tmp', '/usr/tmp')


def driver_temp_dir() -> str:
    """multiprocess's temporary directory of this process (``pymp-*``, made with the
    forkserver: its listener socket lives there). The interpreter's exit removes it; a
    process killed by a signal cannot, so its workers or its SIGTERM path do.

    Made in the machine's temporary directory (``TMPDIR``), or, when the socket's path
    would be too long there (a deep ``TMPDIR``, as pytest's or a batch system's), in the
    first writable of `SHORT_TEMP_DIRS`.

    Raises:
      WorkerStartError: no directory fits the socket's path (the message names ``TMPDIR``
        and the limit).
    """
    from multiprocess import process, util

    config = process.current_process()._config  # multiprocess's own cache of it
    made = config.get('tempdir')
    if made is None:
        # Named by its maker's pid (``pymp-<pid>-XXXXXXXX``): one left by a process killed
        # before any worker could remove it is found later (`reap_orphaned_temp_dirs`).
        prefix = f'pymp-{os.getpid()}-'
        below = 1 + len(prefix) + 8 + _LISTENER  # what the socket's path adds to the base
        base = tempfile.gettempdir()
        if len(base) + below > SOCKET_PATH_MAX:
            short = next((d for d in SHORT_TEMP_DIRS if _writable_dir(d)), None)
            if short is None:
                raise _socket_path_error(base, below)
            base = short
        made = tempfile.mkdtemp(prefix=prefix, dir=base)
        # As multiprocess makes its own: removed at exit, after everything else.
        util.Finalize(None, util._remove_temp_dir, args=(shutil.rmtree, made), exitpriority=-100)
        config['tempdir'] = made
    elif len(made) + _LISTENER > SOCKET_PATH_MAX:
        # Made before (by multiprocess itself, for another use) in too long a path.
        below = 1 + len(os.path.basename(made)) + _LISTENER
        raise _socket_path_error(os.path.dirname(made), below)
    return str(made)


def _writable_dir(path: str) -> bool:
    return os.path.isdir(path) and os.access(path, os.W_OK | os.X_OK)


def _socket_path_error(base: str, below: int) -> Exception:
    return WorkerStartError(
        f'the temporary directory {base!r} ({len(base)} characters, from TMPDIR) is too long '
        f"for the worker pool's socket: its path there would pass the {SOCKET_PATH_MAX} "
        f'characters a Unix socket may have, and none of {", ".join(SHORT_TEMP_DIRS)} can be '
        f'written; set TMPDIR to a directory of at most {SOCKET_PATH_MAX - below} characters'
    )


#: A driver's temporary directory: ``pymp-<pid>-`` and tempfile's 8 random characters.
_OWN_TEMP_DIR = re.compile(r'pymp-(\d+)-[a-z0-9_]{8}')


def reap_orphaned_temp_dirs() -> List[str]:
    """Removes the drivers' temporary directories (`driver_temp_dir`) whose maker is gone.

    A driver killed (SIGKILL, the OOM killer) after its forkserver started and before
    a worker could watch it leaves its directory (the forkserver's socket in it);
    nothing else would remove it. As `shm.reap_orphaned_segments` does for segments:
    a directory of the current user whose maker pid is not running, is a zombie or
    belongs to a process started after the directory last changed (a reused pid);
    never one of a live process. Looks in the machine's temporary directory and in
    `SHORT_TEMP_DIRS`. The same limitation as for segments: it trusts this pid
    namespace, so containers that share a temporary directory but not pids, under one
    uid, would see each other's live directories as orphans.

    Returns:
        The directories removed, sorted.
    """
    uid = os.getuid() if hasattr(os, 'getuid') else None
    bases = {os.path.realpath(d) for d in (tempfile.gettempdir(), *SHORT_TEMP_DIRS)}
    removed = []
    for base in sorted(bases):
        try:
            entries = list(os.scandir(base))
        except OSError:
            continue
        for entry in entries:
            m = _OWN_TEMP_DIR.fullmatch(entry.name)
            if m is None:
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:  # removed meanwhile
                continue
            if not stat.S_ISDIR(st.st_mode) or (uid is not None and st.st_uid != uid):
                continue
            if creator_gone(int(m.group(1)), max(st.st_mtime, st.st_ctime)):
                shutil.rmtree(entry.path, ignore_errors=True)
                removed.append(entry.path)
    return sorted(removed)


def remove_temp_dir(path: Optional[str]) -> None:
    """Removes `path` if it is a multiprocess temporary directory (``<tmp>/pymp-*``, where
    <tmp> is the machine's temporary directory or one of `SHORT_TEMP_DIRS`)."""
    if not path:
        return
    parent, base = os.path.split(os.path.normpath(path))
    parents = {os.path.realpath(d) for d in SHORT_TEMP_DIRS}
    parents.add(os.path.realpath(_machine_temp_dir or tempfile.gettempdir()))
    if not base.startswith('pymp-') or os.path.realpath(parent) not in parents:
        return
    shutil.rmtree(path, ignore_errors=True)


#: The machine's temporary directory, where a worker has made `tempfile`'s its own.
_machine_temp_dir: Optional[str] = None


def _use_temp_dir_under(driver_tempdir: Optional[str]) -> Optional[str]:
    """Makes this worker's temporary files (`tempfile`'s default directory) live in a
    directory of its own inside the driver's temporary directory, and returns it.

    A worker ends with `os._exit` (multiprocess's way, and the lifeline's), so no
    `atexit` handler runs in it: TensorFlow's autograph, which writes a
    ``__autograph_generated_file*.py`` for each function it converts
    (`tf.vectorized_map` converts some on every worker) and removes them at exit, would
    leave them in the machine's temporary directory for good. Here they go with the
    worker's directory when it ends, or with the driver's when the driver does (a worker
    killed by a signal). Nothing is changed where the driver's directory is not given.
    """
    if not driver_tempdir or not os.path.isdir(driver_tempdir):
        return None
    return _temp_dir_of_own(f'worker-{os.getpid()}-', driver_tempdir)


def use_own_temp_dir() -> Optional[str]:
    """Makes this process's temporary files (`tempfile`'s default directory) live in a
    directory of its own, named as a driver's (``pymp-<pid>-XXXXXXXX``), and returns it.

    For a worker that is not forked by a local pool (a Ray actor): autograph's
    ``__autograph_generated_file*.py`` then go there. Removed at this process's normal
    exit; a process killed (``ray.kill``) leaves it to `reap_orphaned_temp_dirs` (a later
    pool's or actor's start on the machine). None where it cannot be made.
    """
    own = _temp_dir_of_own(f'pymp-{os.getpid()}-', None)
    if own is not None:
        atexit.register(shutil.rmtree, own, True)
    return own


def _temp_dir_of_own(prefix: str, parent: Optional[str]) -> Optional[str]:
    """A new directory (`prefix`, in `parent` or the machine's temporary directory) made
    `tempfile`'s default for this process, the machine's remembered; None if it cannot be
    made."""
    try:
        own = tempfile.mkdtemp(prefix=prefix, dir=parent)
    except OSError:
        return None
    global _machine_temp_dir
    _machine_temp_dir = tempfile.gettempdir()
    tempfile.tempdir = own
    return own


def _remove_own_temp_dir(path: Optional[str]) -> None:
    if path is not None:
        shutil.rmtree(path, ignore_errors=True)


def _wait_for_death(pid: int, timeout: Optional[float] = None) -> bool:
    """Waits until process `pid` has exited (at most `timeout` seconds when given);
    returns whether it has."""
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True  # already gone
    except (AttributeError, OSError):
        fd = None
    if fd is not None:
        try:
            # Readable once the process has exited.
            return bool(select.select([fd], [], [], timeout)[0])
        finally:
            os.close(fd)
    while True:  # pragma: no cover - kernels without pidfd
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            pass
        if deadline is not None and time.monotonic() >= deadline:
            return False
        time.sleep(_POLL_SECONDS)


def _clean_up_after(driver_pid: int, driver_tempdir: Optional[str]) -> None:
    # The process leaves after this: a segment another of its threads is creating now
    # (a worker growing its arena) exists before the listing below, or never.
    stop_creating()
    _unlink_segments_of(driver_pid)
    _unlink_segments_of(os.getpid())
    remove_temp_dir(driver_tempdir)


def _lifeline(driver_pid: int, driver_tempdir: Optional[str]) -> None:
    _wait_for_death(driver_pid)
    _clean_up_after(driver_pid, driver_tempdir)
    os._exit(0)


def run_worker(
    target: Callable[..., Optional[str]],
    driver_pid: int,
    conn: Any,
    worker_id: int,
    placement: Any,
    config: Any,
    driver_tempdir: Optional[str] = None,
) -> None:
    """A worker process' entry point: `target(conn, worker_id, placement, config)` (`config`:
    the pool's `options.WorkerConfig`) under a
    lifeline to the driver (`driver_pid`): if the driver dies, the worker removes the
    driver's segments and its own and the driver's temporary directory
    (`driver_tempdir`, see `driver_temp_dir`), and exits at once."""
    started = time.time()
    threading.Thread(
        target=_lifeline, args=(driver_pid, driver_tempdir), name='simharness-lifeline', daemon=True
    ).start()
    own_tempdir = _use_temp_dir_under(driver_tempdir)
    try:
        ended = target(conn, worker_id, placement, config)
    except BaseException as e:
        _remove_own_temp_dir(own_tempdir)
        # This thread ends the process (the exit code of an exception) maybe before the
        # lifeline has cleaned up, or while it does: a worker whose driver died while
        # it started fails to send READY (the pipe ended). Clean up here if the driver
        # is dying or gone.
        pipe_ended = isinstance(e, (EOFError, ConnectionError))
        if (
            _wait_for_death(driver_pid, _DYING_SECONDS)
            if pipe_ended
            else creator_gone(driver_pid, started)
        ):
            _clean_up_after(driver_pid, driver_tempdir)
        raise
    # An idle worker sees its driver die on its pipe (EOF) and returns here, before the
    # lifeline thread has cleaned up: the pipe closes while the dying driver still runs
    # (its files close before it exits), and returning would end this process and the
    # lifeline with it. Wait for the driver to be gone (bounded), then clean up.
    _remove_own_temp_dir(own_tempdir)
    if ended == DRIVER_GONE:
        if _wait_for_death(driver_pid, _DYING_SECONDS):
            _clean_up_after(driver_pid, driver_tempdir)
    elif creator_gone(driver_pid, started):
        _clean_up_after(driver_pid, driver_tempdir)


# ------------------------------------------------------------------ the forkserver's side


def _in_forkserver_preload() -> bool:
    """Whether the caller runs in a forkserver's preload (``multiprocess.forkserver.main``
    is on the stack)."""
    frame: Optional[types.FrameType] = sys._getframe(1)  # pylint: disable=protected-access
    while frame is not None:
        if frame.f_code.co_name == 'main' and frame.f_globals.get('__name__') in (
            'multiprocess.forkserver',
            'multiprocessing.forkserver',
        ):
            return True
        frame = frame.f_back
    return False


#: The driver's pid, in the environment its forkserver starts with
#: (`process._name_forkserver_parent`).
FORKSERVER_PARENT_ENV = 'SIMHARNESS_FORKSERVER_PARENT'
#: prctl(2) option: the signal this process gets when its parent dies.
_PR_SET_PDEATHSIG = 1


def _set_parent_death_signal(signum: int) -> bool:
    """prctl(PR_SET_PDEATHSIG, signum); False where it is missing (not Linux)."""
    if not sys.platform.startswith('linux'):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


class DriverWatchWhilePreloading:
    """In a forkserver's preload: die with the driver meanwhile.

    The forkserver sees its driver die (EOF on its "alive" pipe) only once it serves,
    after its preload, which imports TensorFlow (seconds, more under load): a driver
    killed by then would leave it (and the resource tracker, which outlives it) running
    that long. A thread cannot watch for it: the import holds the GIL for seconds at a
    time. For the time of the preload the kernel kills the forkserver when its parent
    (the driver, which spawned it) dies (PR_SET_PDEATHSIG); a driver that died before
    that is seen from the parent pid (not the driver's, `FORKSERVER_PARENT_ENV`). (The
    "alive" pipe cannot tell: the resource tracker may hold it too.) Workers are forked
    after the preload, with the signal unset (a fork clears it anyway). Outside a
    forkserver of `get_forkserver_context`: does nothing.
    """

    def __enter__(self) -> 'DriverWatchWhilePreloading':
        self._armed = False
        driver = os.environ.get(FORKSERVER_PARENT_ENV)
        if (
            not driver
            or not _in_forkserver_preload()
            or not _set_parent_death_signal(signal.SIGKILL)
        ):
            return self
        self._armed = True
        # A driver that died before the signal was set sends none: its forkserver has
        # another parent already (init, or a subreaper).
        if str(os.getppid()) != driver:
            os._exit(0)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._armed:
            _set_parent_death_signal(0)


# ------------------------------------------------------------------ the driver's side

_POOLS: 'weakref.WeakSet[Any]' = weakref.WeakSet()
#: This process' multiprocess temporary directory once a pool started (`driver_temp_dir`).
_TEMP_DIR: Optional[str] = None
_PREVIOUS: Dict[int, Any] = {}
_INSTALL_LOCK = threading.Lock()


def _close_pools() -> None:
    for pool in list(_POOLS):
        try:
            pool.close()
        except Exception:  # best effort: the process is going down
            pass


def _close_pools_bounded() -> None:
    # Closing takes locks the interrupted main thread may hold: close on a helper
    # thread, bounded; the workers' lifelines clean up whatever is left.
    closer = threading.Thread(target=_close_pools, name='simharness-sigterm-close', daemon=True)
    closer.start()
    closer.join(_CLOSE_SECONDS)


def _on_sigterm(signum: int, frame: Any) -> None:
    previous = _PREVIOUS.get(signum, signal.SIG_DFL)
    if callable(previous):
        # A handler of the program's own runs first: one that returns (a graceful
        # "stop after this round") keeps the pools; one that raises or exits
        # (the CLI's, SystemExit) closes them on the way out.
        try:
            previous(signum, frame)
        except BaseException:
            _close_pools_bounded()
            raise
        return
    if previous == signal.SIG_IGN:
        return
    # The default action, as without this handler: die by the signal (exit status 143),
    # which runs no exit handler: remove what they would have.
    _close_pools_bounded()
    remove_temp_dir(_TEMP_DIR)
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def register_pool(pool: Any) -> None:
    """Tracks a started pool; installs the SIGTERM handler once (main thread only; a
    handler set before is chained, and an ignored SIGTERM stays ignored)."""
    global _TEMP_DIR
    _POOLS.add(pool)
    _TEMP_DIR = driver_temp_dir()
    install_sigterm_handler()


def install_sigterm_handler() -> None:
    """`register_pool`'s SIGTERM handler, installed now (main thread only: a pool started
    on another thread has it installed by the main thread beforehand, `WorkerPool.start_soon`)."""
    if threading.current_thread() is not threading.main_thread():
        return
    with _INSTALL_LOCK:
        current = signal.getsignal(signal.SIGTERM)
        if current is _on_sigterm or current == signal.SIG_IGN or current is None:
            return
        _PREVIOUS[signal.SIGTERM] = current
        signal.signal(signal.SIGTERM, _on_sigterm)


def unregister_pool(pool: Any) -> None:
    _POOLS.discard(pool)
