"""Fixtures of the process-runtime tests: the session's warm pool, leak checks after every test.

A test that needs no pool of its own (it kills no worker, sets no pool
option, does not check a pool's start or close) runs on `warm_pool`: the
pool of the suite's ``process-2-cpw3`` stack (2 workers, 3 clients per
worker), started once by the session's stack registry and shared with the
conformance tests.
"""

from __future__ import annotations

import os
import threading
import time

import psutil
import pytest


WARM_STACK = 'process-2-cpw3'  # tests/stacks.py


@pytest.fixture(scope='session')
def warm_pool(stack_registry):
    """The session's warm `WorkerPool` of the ``process-2-cpw3`` stack (2 workers, 3 clients each).

    Use it with ``process_executor_factory(pool=warm_pool, ...)``: closing the
    factory leaves the pool running. Session-scoped, so it is up before the
    per-test leak checks look.
    """
    pool = stack_registry.resource(WARM_STACK)
    assert pool.num_workers == 2 and pool.options.clients_per_worker == 3
    return pool


@pytest.fixture(scope='session')
def warm_pool_1(stack_registry):
    """The session's warm `WorkerPool` of the built-in ``process-1`` stack (1 worker, 256 clients)."""
    pool = stack_registry.resource('process-1')
    assert pool.num_workers == 1 and pool.options.clients_per_worker == 256
    return pool


#: Pids of the worker processes this test process started (`_record_worker_pids`).
_OUR_WORKERS: set = set()


@pytest.fixture(scope='session', autouse=True)
def _record_worker_pids():
    """Records the pid of every worker process this test process starts, so that the leak
    check judges the segments of its own dead workers, not those of another process's
    (a test running in parallel whose worker died and whose driver has not yet reaped it)."""
    from simharness.runtime.local.process import WorkerProcess

    start = WorkerProcess.start

    def recording(self, timeout):
        try:
            return start(self, timeout)
        finally:
            if self.pid is not None:
                _OUR_WORKERS.add(self.pid)

    WorkerProcess.start = recording
    yield
    WorkerProcess.start = start


def _segments() -> set:
    """Segments made by this process, or by one of its workers that no longer exists.

    Segment names carry their creator's pid; other processes (tests running in
    parallel on the machine, their workers, dead or alive) are not ours to judge.
    """
    import os
    from simharness.runtime.local.shm import list_leaked_segments

    out = set()
    for name in list_leaked_segments():
        parts = name.split('_')
        pid = int(parts[1]) if len(parts) > 2 and parts[1].isdigit() else None
        if (
            pid is None
            or pid == os.getpid()
            or (pid in _OUR_WORKERS and not psutil.pid_exists(pid))
        ):
            out.add(name)
    return out


def _worker_children() -> list:
    """This process's descendants but the forkserver and the resource tracker.

    Those two are per-process singletons of multiprocess, direct children of this
    process. Workers are the forkserver's children and carry its command line too,
    so they are told apart by their parent, not by their command line.
    """
    me = os.getpid()
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            cmd = ' '.join(p.cmdline())
            singleton = p.ppid() == me and ('forkserver' in cmd or 'resource_tracker' in cmd)
            if p.status() != psutil.STATUS_ZOMBIE and not singleton:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


def _reactors() -> list:
    return [
        t for t in threading.enumerate() if t.name == 'simharness-pool-reactor' and t.is_alive()
    ]


def _mapped_segments(pids) -> set:
    """Names of the segments the processes `pids` map (their /proc/<pid>/maps)."""
    out = set()
    for pid in pids:
        try:
            with open(f'/proc/{pid}/maps', encoding='ascii', errors='replace') as f:
                for line in f:
                    path = line.rstrip('\n').partition('/dev/shm/')[2]
                    if path:
                        out.add(path.split(' ')[0])
        except OSError:  # gone, or no /proc
            pass
    return out


def _held_by_session_pools(stack_registry) -> set:
    """Segments the session's warm pools use: those their live workers map.

    A warm pool grows its arenas (and makes its broadcast arena) when a test
    first needs them; they are the pool's, freed when the session closes it.
    """
    pids = [
        h.pid for pool in stack_registry.pools.started for h in pool.handles if h.alive and h.pid
    ]
    return _mapped_segments(pids)


def _pool_state(pool) -> list:
    return [None if st is None else (st['sessions'], st['values']) for st in pool.ping()]


@pytest.fixture(autouse=True)
def no_leaks(request, stack_registry):
    """Each test closes what it starts: no worker process and no segment survive it.

    A test on the warm pool must also leave no session and no value in its workers.
    """
    procs_before = {p.pid for p in _worker_children()}
    # Every segment there now, whoever made it: one of another process (a test running in
    # parallel) that dies during this test would otherwise count as this test's.
    from simharness.runtime.local.shm import list_leaked_segments

    segs_before = set(list_leaked_segments())
    reactors_before = {t.ident for t in _reactors()}
    warm = request.getfixturevalue('warm_pool') if 'warm_pool' in request.fixturenames else None
    warm_before = _pool_state(warm) if warm is not None else None
    yield
    if warm is not None:
        assert [h.alive for h in warm.handles] == [True, True], 'a warm pool worker died'
        assert _pool_state(warm) == warm_before, 'sessions or values left in the warm pool'
    deadline = time.monotonic() + 5
    while [
        t for t in _reactors() if t.ident not in reactors_before
    ] and time.monotonic() < deadline:
        time.sleep(0.05)
    reactors = [t for t in _reactors() if t.ident not in reactors_before]
    assert not reactors, f'pool reactor threads left running (a pool was not closed): {reactors}'
    deadline = time.monotonic() + 5  # a closed pool's workers may still be exiting
    while [
        p for p in _worker_children() if p.pid not in procs_before
    ] and time.monotonic() < deadline:
        time.sleep(0.05)
    leaked = [p for p in _worker_children() if p.pid not in procs_before]
    for p in leaked:
        p.kill()
    assert not leaked, f'worker processes left running: {leaked}'
    # A worker that is leaving unlinks its own arena as it exits, and the pool
    # unlinks a dead worker's: give both the same grace as the reactor threads.
    deadline = time.monotonic() + 5
    while (
        _segments() - segs_before - _held_by_session_pools(stack_registry)
        and time.monotonic() < deadline
    ):
        time.sleep(0.05)
    new_segments = _segments() - segs_before - _held_by_session_pools(stack_registry)
    assert not new_segments, f'shared-memory segments left: {sorted(new_segments)}'
