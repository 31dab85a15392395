"""Fixtures of the process-runtime tests: leak checks after every test."""

from __future__ import annotations

import threading
import time

import psutil
import pytest


def _segments() -> set:
    """Segments made by this process, or by a process that no longer exists.

    Segment names carry their creator's pid; other live processes (tests
    running in parallel on the machine) are not ours to judge.
    """
    import os
    from simharness.runtime.shm import list_leaked_segments
    out = set()
    for name in list_leaked_segments():
        parts = name.split('_')
        pid = int(parts[1]) if len(parts) > 2 and parts[1].isdigit() else None
        if pid is None or pid == os.getpid() or not psutil.pid_exists(pid):
            out.add(name)
    return out


def _worker_children() -> list:
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            cmd = ' '.join(p.cmdline())
            # The forkserver and the resource tracker are per-process singletons of multiprocess.
            if p.status() != psutil.STATUS_ZOMBIE and 'forkserver' not in cmd and 'resource_tracker' not in cmd:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


def _reactors() -> list:
    return [t for t in threading.enumerate() if t.name == 'simharness-pool-reactor' and t.is_alive()]


@pytest.fixture(autouse=True)
def no_leaks():
    """Each test closes what it starts: no worker process and no segment survive it."""
    procs_before = {p.pid for p in _worker_children()}
    segs_before = _segments()
    reactors_before = {t.ident for t in _reactors()}
    yield
    deadline = time.monotonic() + 5
    while [t for t in _reactors() if t.ident not in reactors_before] and time.monotonic() < deadline:
        time.sleep(0.05)
    reactors = [t for t in _reactors() if t.ident not in reactors_before]
    assert not reactors, f'pool reactor threads left running (a pool was not closed): {reactors}'
    leaked = [p for p in _worker_children() if p.pid not in procs_before]
    for p in leaked:
        p.kill()
    assert not leaked, f'worker processes left running: {leaked}'
    # A worker that is leaving unlinks its own arena as it exits, and the pool
    # unlinks a dead worker's: give both the same grace as the reactor threads.
    deadline = time.monotonic() + 5
    while _segments() - segs_before and time.monotonic() < deadline:
        time.sleep(0.05)
    new_segments = _segments() - segs_before
    assert not new_segments, f'shared-memory segments left: {sorted(new_segments)}'
