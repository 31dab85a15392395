"""Fixtures of the remote tests: services as subprocesses, always stopped; no leaked threads."""

from __future__ import annotations

import os
import sys
from typing import Iterator, List

import pytest

_TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)
from remote_services import ServiceProcess, stop_and_check  # noqa: E402  (tests/remote_services.py)


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
    stop_and_check(started)
