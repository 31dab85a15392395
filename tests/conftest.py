"""Shared fixtures: the stack registry, the `stack` fixture and the thread-leak check.

No TensorFlow (and no executor) is imported at import time: unit tests of
pure modules stay light. Fixtures import what they need when they run.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from typing import Any, Iterator

import pytest

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:  # the prepend import mode adds it already; importlib mode does not
    sys.path.insert(0, _HERE)
import stacks as stack_registry_module  # noqa: E402  (tests/stacks.py)

THREAD_PREFIX = 'simharness-'


@pytest.fixture(scope='session')
def stack_registry() -> Iterator[stack_registry_module.StackRegistry]:
    """The session's `StackRegistry`: starts stack resources lazily, closes them at the end."""
    with stack_registry_module.StackRegistry() as registry:
        yield registry


@pytest.fixture
def make_factory(stack_registry):
    """``make_factory(name, num_clients=None)``: a new factory of a registered stack."""
    return stack_registry.make_factory


class StackHandle:
    """What the `stack` fixture gives a test: the stack's name, factory and context."""

    def __init__(self, name: str, factory: Any, context: Any, registry: Any):
        self.name = name
        self.factory = factory
        self.context = context
        self._registry = registry

    @contextlib.contextmanager
    def clients(self, num_clients: int) -> Iterator[Any]:
        """Runs the `with` body on this kind of stack fixed to `num_clients` clients."""
        import simharness as sh
        with sh.execution_context(self._registry.make_factory(self.name, num_clients)) as ctx:
            yield ctx

    def __repr__(self) -> str:
        return f'StackHandle({self.name})'


@pytest.fixture(params=[pytest.param(name, marks=entry.marks, id=name)
                        for name, entry in stack_registry_module.STACKS.items()])
def stack(request, stack_registry) -> Iterator[StackHandle]:
    """Runs the test inside ``simharness.execution_context`` of every registered stack."""
    import simharness as sh
    factory = stack_registry.make_factory(request.param)
    with sh.execution_context(factory) as ctx:
        yield StackHandle(request.param, factory, ctx, stack_registry)


def _simharness_threads(exempt: tuple = ()) -> list:
    return [t for t in threading.enumerate()
            if t.is_alive() and t.name.startswith(THREAD_PREFIX)
            and not t.name.startswith(exempt)]


@pytest.fixture(scope='module', autouse=True)
def no_leaked_simharness_threads(stack_registry):
    """After each module: no simharness thread left alive.

    Non-daemon `simharness-*` threads are never allowed. Daemon ones started
    during the module (executor and context threads) must be gone too: the
    execution context closes its stacks on exit. The process-wide default
    context (used by calls outside any `execution_context`) is closed first,
    and threads of session resources of the registry are exempt.
    """
    before = {t.ident for t in threading.enumerate()}
    yield
    ctx_module = sys.modules.get('simharness.context')
    if ctx_module is not None:
        ctx_module.set_default_executor(None)
    # Pools of the session (the registry's, the pytest plugin's) keep their reactor
    # thread; a pool leaked by a test is caught by the process tests' own checks
    # (worker processes and segments).
    exempt = stack_registry.resident_thread_prefixes() + ('simharness-pool-reactor',)
    deadline = time.monotonic() + 10
    while True:
        non_daemon = [t for t in _simharness_threads(exempt) if not t.daemon]
        new = [t for t in _simharness_threads(exempt) if t.ident not in before]
        if not (non_daemon or new) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert not non_daemon, f'non-daemon simharness threads left alive: {non_daemon}'
    assert not new, f'simharness threads left alive by this module: {sorted(t.name for t in new)}'
