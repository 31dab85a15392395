"""Fixtures of the remote tests: services as subprocesses, always stopped; no leaked threads."""

from __future__ import annotations

import os
import sys
from typing import Iterator, List

import pytest

_TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)
from remote_services import ServiceProcess  # noqa: E402  (tests/remote_services.py)


@pytest.fixture(scope='module')
def remote_pair(stack_registry):
    """The session's two loopback services (the conformance suite's 'remote-2' resource)."""
    return stack_registry.resource('remote-2')


@pytest.fixture
def start_service() -> Iterator:
    """``start_service(*args, port=0)``: a `simharness serve` subprocess, stopped after the test."""
    started: List[ServiceProcess] = []

    def start(*args: str, port: int = 0) -> ServiceProcess:
        p = ServiceProcess(port=port, args=args)
        started.append(p)
        return p
    yield start
    _stop_and_check(started)


def _stop_and_check(procs: List[ServiceProcess]) -> None:
    """Stops the services; then neither they nor any process they started may be running."""
    import psutil
    pids = []
    for p in procs:
        if p.pid is not None:
            pids.append(p.pid)
            try:
                pids.extend(c.pid for c in psutil.Process(p.pid).children(recursive=True))
            except psutil.NoSuchProcess:
                pass
    for p in procs:
        p.stop()
    _, alive = psutil.wait_procs([psutil.Process(q) for q in pids if psutil.pid_exists(q)],
                                 timeout=15)
    alive = [q for q in alive if q.status() != psutil.STATUS_ZOMBIE]
    assert not alive, f'processes of a stopped service still run: {alive}'


@pytest.fixture(scope='module')
def module_service() -> Iterator[ServiceProcess]:
    """One `simharness serve` subprocess for the tests of a module."""
    p = ServiceProcess()
    yield p
    _stop_and_check([p])
