"""The registry of executor stacks that the conformance suite runs on.

Every test that takes the `stack` fixture (see `conftest.py`) runs once per
entry of `STACKS`, inside `simharness.execution_context(factory)` for a
factory built by that entry.

An entry builds an `ExecutorFactory` for a number of clients (None: the
factory infers it from the arguments). Stacks that need an expensive
resource shared by the whole test session (a warm worker pool, say) make it
in `start`; the session-scoped `StackRegistry` starts it on first use and
closes it (with `close()`) at the end of the session. For example::

    'process-2': StackEntry(
        build=lambda pool, n: process_executor_factory(pool=pool, num_clients=n),
        start=lambda: WorkerPool(num_workers=2),
        marks=(pytest.mark.process,),
        resident_threads=('simharness-pool-reactor',)),

This module must not import TensorFlow at import time (unit tests of pure
modules stay light): builders import simharness' stacks lazily.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, List, Optional, Tuple


@dataclasses.dataclass(frozen=True)
class StackEntry:
    """How to build one kind of stack.

    Attributes:
      build: ``(session resource or None, num_clients or None) -> ExecutorFactory``.
      start: makes the session resource (must have ``close()``); None: no resource.
      marks: pytest marks of the stack's parametrization (e.g. ``pytest.mark.process``).
      resident_threads: name prefixes of threads the session resource keeps
        alive for the whole session (exempt from the per-module leak check).
    """

    build: Callable[[Any, Optional[int]], Any]
    start: Optional[Callable[[], Any]] = None
    marks: Tuple[Any, ...] = ()
    resident_threads: Tuple[str, ...] = ()


def _thread_stack(clients_per_thread: int) -> Callable[[Any, Optional[int]], Any]:
    def build(_resource: Any, num_clients: Optional[int]) -> Any:
        from simharness.stacks import thread_debugging_executor_factory
        return thread_debugging_executor_factory(num_clients=num_clients,
                                                 clients_per_thread=clients_per_thread)
    return build


def _local_stack(_resource: Any, num_clients: Optional[int]) -> Any:
    from simharness.stacks import local_executor_factory
    # At most 2 client threads: uneven blocks as soon as there are more than 2 clients.
    return local_executor_factory(num_clients=num_clients, max_fanout=2)


def _process_pool(num_workers: int, clients_per_worker: int) -> Callable[[], Any]:
    def start() -> Any:
        from simharness.stacks import create_worker_pool
        pool = create_worker_pool(num_workers=num_workers, clients_per_worker=clients_per_worker)
        pool.start()
        return pool
    return start


def _process_stack(pool: Any, num_clients: Optional[int]) -> Any:
    from simharness.stacks import process_executor_factory
    return process_executor_factory(num_clients=num_clients, pool=pool)


def _process_marks() -> Tuple[Any, ...]:
    import pytest
    return (pytest.mark.process,)


def _remote_pair() -> Any:
    from remote_services import ServicePair  # tests/remote_services.py
    return ServicePair(2)


def _remote_stack(pair: Any, num_clients: Optional[int]) -> Any:
    from simharness.stacks import remote_executor_factory
    return remote_executor_factory(services=pair.services, num_clients=num_clients)


def _remote_marks() -> Tuple[Any, ...]:
    import pytest
    return (pytest.mark.remote,)


def _ray_resource() -> Any:
    from ray_cluster import RayStackResource  # tests/ray_cluster.py
    return RayStackResource()


def _ray_stack(resource: Any, num_clients: Optional[int]) -> Any:
    from simharness.stacks import ray_executor_factory
    return ray_executor_factory(workers=resource.workers, num_clients=num_clients)


def have_ray() -> bool:
    """Whether Ray is installed (without importing it).

    Not just ``find_spec('ray')``: with ``tests/`` on ``sys.path``, the
    ``tests/ray`` directory is found as a namespace package ``ray`` when Ray
    itself is missing.
    """
    import importlib.util
    spec = importlib.util.find_spec('ray')
    return spec is not None and spec.origin not in (None, 'namespace')


def _ray_marks() -> Tuple[Any, ...]:
    import pytest
    return (pytest.mark.ray, pytest.mark.skipif(not have_ray(), reason='Ray is not installed '
                                                '(pip install "simharness[ray]")'))


#: name -> entry. Conformance tests run on every entry.
STACKS: Dict[str, StackEntry] = {
    'thread-1': StackEntry(_thread_stack(1)),
    'thread-2': StackEntry(_thread_stack(2)),
    'local': StackEntry(_local_stack),
    # One warm pool per entry for the whole session; clients_per_worker=3
    # makes the workers cut their blocks into several TF calls.
    'process-1': StackEntry(_process_stack, start=_process_pool(1, 256), marks=_process_marks(),
                            resident_threads=('simharness-pool-reactor',)),
    'process-2': StackEntry(_process_stack, start=_process_pool(2, 3), marks=_process_marks(),
                            resident_threads=('simharness-pool-reactor',)),
    # Two executor services on loopback, started as subprocesses once per session.
    'remote-2': StackEntry(_remote_stack, start=_remote_pair, marks=_remote_marks(),
                           resident_threads=('simharness-grpc',)),
    # Two Ray nodes on loopback (127.0.0.2, 127.0.0.3), one actor on each, started once
    # per session (tests/ray_cluster.py).
    'ray-2': StackEntry(_ray_stack, start=_ray_resource, marks=_ray_marks(),
                        resident_threads=('simharness-ray',)),
}


class StackRegistry:
    """Builds factories of the registered stacks; owns their session resources.

    Args:
      stacks: the entries (default: `STACKS`).
    """

    def __init__(self, stacks: Optional[Dict[str, StackEntry]] = None):
        self._stacks = dict(STACKS if stacks is None else stacks)
        self._resources: Dict[str, Any] = {}
        self._closed = False

    @property
    def names(self) -> List[str]:
        return list(self._stacks)

    def entry(self, name: str) -> StackEntry:
        try:
            return self._stacks[name]
        except KeyError:
            raise ValueError(f'unknown stack {name!r}; registered: {sorted(self._stacks)}') from None

    def resource(self, name: str) -> Any:
        """The session resource of stack `name` (started on first use; None if it has none)."""
        if self._closed:
            raise RuntimeError('the stack registry is closed')
        entry = self.entry(name)
        if entry.start is None:
            return None
        if name not in self._resources:
            self._resources[name] = entry.start()
        return self._resources[name]

    def make_factory(self, name: str, num_clients: Optional[int] = None) -> Any:
        """A new `ExecutorFactory` of stack `name` (sharing the stack's session resource)."""
        return self.entry(name).build(self.resource(name), num_clients)

    def resident_thread_prefixes(self) -> Tuple[str, ...]:
        """Prefixes of threads kept alive by the resources started so far."""
        out: Tuple[str, ...] = ()
        for name in self._resources:
            out += self._stacks[name].resident_threads
        return out

    def close(self) -> None:
        """Closes every started resource, newest first. Idempotent."""
        if self._closed:
            return
        self._closed = True
        errors = []
        for name in reversed(list(self._resources)):
            try:
                self._resources.pop(name).close()
            except Exception as e:  # close the others, then report
                errors.append(e)
        if errors:
            raise errors[0]

    def __enter__(self) -> 'StackRegistry':
        return self

    def __exit__(self, *exc: Any) -> bool:
        self.close()
        return False


def make_factory(name: str, num_clients: Optional[int] = None,
                 registry: Optional[StackRegistry] = None) -> Any:
    """A factory of stack `name`.

    Stacks with a session resource need the session's `registry` (the
    `stack_registry` fixture); the others can be built without one.
    """
    if registry is not None:
        return registry.make_factory(name, num_clients)
    entry = StackRegistry().entry(name)
    if entry.start is not None:
        raise ValueError(f'stack {name!r} needs a session resource: use the stack_registry '
                         'fixture (or its make_factory fixture)')
    return entry.build(None, num_clients)
