"""The run directory's lock: one run at a time writes a run directory.

::

    run_lock(run_dir)          held by run_experiment for the whole run (resume included)
        <run_dir>/run.lock     fcntl.flock(LOCK_EX | LOCK_NB); content: the holder's pid,
                               host and start time (JSON, for the refusal's message)
        held elsewhere?        -> RunInProgressError naming the run directory and the pid,
                                  before anything in the directory is touched
        on release             the file is removed (while still locked), then closed
    check_not_running(run_dir) the same question without taking the lock (the CLI asks
                               it before loading TensorFlow, so a refusal is quick)
    is_running(run_dir)        the same question answered (the report asks it of a
                               summary that says 'running')

The lock is the kernel's: it goes with its holder's last file descriptor, so
a run that was killed (SIGKILL, a crash, a lost machine's process) leaves at
most a stale ``run.lock`` file that the next run locks and uses as usual. The
descriptor is not inherited by the processes a run starts (Python opens files
non-inheritable; the worker pool's forkserver is a fresh executable), so
workers that outlive a killed driver do not keep its lock.

Removing the file on release is safe because a locker checks, after
``flock``, that the file it locked is still the one at the path (else it
opens the path again). On a file system without ``flock`` (some network or
FUSE mounts answer ENOLCK) a run goes ahead unlocked, with a warning.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import socket
import time
from pathlib import Path
from typing import Any, Dict, Iterator, Optional

from simharness.errors import RunInProgressError
from simharness.experiments.runner.rundir import _now, PathLike

#: The lock file of a run directory (there while a run holds it, or after a killed one).
LOCK_FILE = 'run.lock'

# `check_not_running` holds a shared lock for an instant; a run starting at that
# instant tries again for this long before it calls the directory taken.
_GRACE_SECONDS = 0.25
_RETRY_SECONDS = 0.02
# Where a file system's inode numbers do not compare (`_is_at` never true), the
# file locked after this many opens is kept.
_MAX_REOPENS = 20
# flock answers these where the file system has no locks: run unlocked.
_NO_LOCKS = frozenset({errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP})

_log = logging.getLogger(__name__)


@contextlib.contextmanager
def run_lock(run_dir: PathLike) -> Iterator[None]:
    """Holds the lock of `run_dir` (an existing directory) while the block runs.

    Raises:
        RunInProgressError: another process (or another `run_lock` of this
            one) holds it; nothing in `run_dir` was changed.
        OSError: the lock file could not be opened (``filename`` names it).
    """
    run_dir = Path(run_dir)
    fd = _acquire(run_dir)
    try:
        yield
    finally:
        if fd is not None:
            _release(run_dir, fd)


def check_not_running(run_dir: PathLike) -> None:
    """Raises `RunInProgressError` if a run holds the lock of `run_dir`.

    Takes nothing and creates nothing (a missing directory or lock file is no
    run); the lock `run_experiment` takes is what keeps a second run out, this
    only lets a caller refuse before expensive start-up work.
    """
    _probe(Path(run_dir), refuse=True)


def is_running(run_dir: PathLike) -> Optional[bool]:
    """Whether a run holds the lock of `run_dir` now: True or False, or None where the
    file system has no locks (nothing can tell). Takes nothing and creates nothing; a
    summary that says 'running' while this is False is a dead run's (killed by a
    signal, its machine lost), which the same command resumes."""
    return _probe(Path(run_dir), refuse=False)


def _probe(run_dir: Path, refuse: bool) -> Optional[bool]:
    """Holds a shared lock on `run_dir`'s lock file for an instant: False when it could
    (or there is no lock file), True when a run holds it (`RunInProgressError` instead
    when `refuse`), None when the file system has no locks."""
    try:
        fd = os.open(run_dir / LOCK_FILE, os.O_RDONLY)
    except OSError:
        return False  # no lock file (or an unreadable one: run_lock will tell)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        if refuse:
            raise _in_progress(run_dir, fd) from None
        return True
    except OSError:
        return None  # no locks on this file system
    finally:
        os.close(fd)
    return False


def _acquire(run_dir: Path) -> Optional[int]:
    """The descriptor of the locked lock file (None where the file system has no locks)."""
    path = run_dir / LOCK_FILE
    deadline = time.monotonic() + _GRACE_SECONDS
    opens = 0
    while True:
        opens += 1
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)  # non-inheritable (PEP 446)
        keep = False
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise _in_progress(run_dir, fd) from None
                time.sleep(_RETRY_SECONDS)
                continue
            except OSError as e:
                if e.errno not in _NO_LOCKS:
                    raise OSError(e.errno, e.strerror, str(path)) from None
                _log.warning(
                    '%s: the file system has no locks (%s); running without one, '
                    'so a second run of this directory would not be refused',
                    path,
                    e.strerror or e,
                )
                return None
            if not _is_at(fd, path) and opens <= _MAX_REOPENS:
                continue  # the previous holder removed the file after we opened it: again
            _write_holder(fd)
            keep = True
            return fd
        finally:
            if not keep:
                os.close(fd)


def _write_holder(fd: int) -> None:
    """The holder's pid, host and start time, for the message of a refused run."""
    info = {'pid': os.getpid(), 'host': socket.gethostname(), 'started_at': _now()}
    try:
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps(info).encode('utf-8'))
    except OSError:
        pass  # a full disk: the lock holds all the same; a refusal then names no pid


def _release(run_dir: Path, fd: int) -> None:
    """Removes the lock file (still locked: no one else can be using it) and unlocks."""
    path = run_dir / LOCK_FILE
    try:
        if _is_at(fd, path):
            path.unlink()
    except OSError:
        pass  # the next run locks the file that stays
    finally:
        os.close(fd)


def _is_at(fd: int, path: Path) -> bool:
    """Whether the open file `fd` is the file at `path`."""
    try:
        return os.path.samestat(os.fstat(fd), os.stat(path))
    except OSError:
        return False


def _holder(fd: int) -> Dict[str, Any]:
    """What the holder wrote into the lock file ({} if nothing readable yet)."""
    try:
        info = json.loads(os.pread(fd, 4096, 0).decode('utf-8'))
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


def _in_progress(run_dir: Path, fd: int) -> RunInProgressError:
    info = _holder(fd)
    pid = info.get('pid') if isinstance(info.get('pid'), int) else None
    host = info.get('host') if isinstance(info.get('host'), str) else None
    who = []
    if pid is not None:
        elsewhere = host is not None and host != socket.gethostname()
        who.append(f'pid {pid}' + (f' on {host}' if elsewhere else ''))
    if isinstance(info.get('started_at'), str):
        who.append(f'since {info["started_at"]}')
    detail = f' ({", ".join(who)})' if who else ''
    return RunInProgressError(
        f'{run_dir}: another run of it is in progress{detail}; not started: wait for that '
        'run to end, or stop it and run again to resume it',
        run_dir=str(run_dir),
        pid=pid,
        host=host,
    )
