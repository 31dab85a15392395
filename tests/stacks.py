"""The suite's executor stacks, declared to simharness' pytest plugin.

The plugin (`simharness.pytest_plugin`) keeps the session's one
`StackRegistry`: built-in names (``thread``, ``thread-debug``,
``process-N``, what ``--simharness-stacks`` and the benchmarks use) and the
entries `register` adds here (tests/conftest.py calls it from the plugin's
``pytest_simharness_register_stacks`` hook). Every stack's session resource
(a warm worker pool, executor services, a Ray cluster) starts on first use
and is closed by the registry at the end of the session.

Every test that takes the `stack` fixture (see `conftest.py`) runs once per
name of `CONFORMANCE`, inside `simharness.execution_context` of a factory of
that stack (the plugin's `SimharnessStack`).

This module must not import TensorFlow at import time (unit tests of pure
modules stay light): builders import simharness' stacks lazily.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import pytest

from simharness.pytest_plugin import StackEntry, StackRegistry, process_stack


def _thread_stack(clients_per_thread: int) -> StackEntry:
    def build(_resource: Any, num_clients: Optional[int]) -> Any:
        from simharness.stacks import thread_debugging_executor_factory

        return thread_debugging_executor_factory(
            num_clients=num_clients, clients_per_thread=clients_per_thread
        )

    return StackEntry(build, kind='thread-debug')


def _local_stack(_resource: Any, num_clients: Optional[int]) -> Any:
    from simharness.stacks import local_executor_factory

    # At most 2 client threads: uneven blocks as soon as there are more than 2 clients.
    return local_executor_factory(num_clients=num_clients, max_fanout=2)


def _remote_pair() -> Any:
    from remote_services import ServicePair  # tests/remote_services.py

    return ServicePair(2)


def _remote_stack(pair: Any, num_clients: Optional[int]) -> Any:
    from simharness.stacks import remote_executor_factory

    return remote_executor_factory(services=pair.services, num_clients=num_clients)


def _loopback_group() -> Any:
    # Two in-process workers behind the codec and the worker service (no process, no
    # transport): each cuts its block into TF calls of 3 clients and sums in its calls,
    # as a worker process does.
    from simharness.executors.leaf.eager_tf import EagerTFExecutor
    from simharness.runtime.loopback import LoopbackGroup
    from simharness.runtime.service import WorkerService

    return LoopbackGroup(
        lambda k: WorkerService(EagerTFExecutor(max_batch_size=3, sums_in_calls=True), worker_id=k),
        num_workers=2,
    )


def _loopback_stack(group: Any, num_clients: Optional[int]) -> Any:
    from simharness.stacks import WorkerGroupExecutorFactory

    return WorkerGroupExecutorFactory(group, num_clients, owns_group=False)


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


#: The suite's own stacks (names the plugin does not know), registered by `register`.
ENTRIES: Dict[str, StackEntry] = {
    'thread-1': _thread_stack(1),
    'thread-2': _thread_stack(2),
    'local': StackEntry(_local_stack, kind='thread'),
    # Two workers, clients_per_worker=3: the workers cut their blocks into several TF
    # calls. Its warm pool is shared by the session (conformance, tests/process, ...).
    'process-2-cpw3': process_stack(2, clients_per_worker=3, marks=(pytest.mark.process,)),
    # The seam without a transport: the codec and the worker service in this process.
    'loopback-2': StackEntry(
        _loopback_stack,
        start=_loopback_group,
        kind='loopback',
        resident_threads=('simharness-loopback',),
    ),
    # Two executor services on loopback, started as subprocesses once per session.
    'remote-2': StackEntry(
        _remote_stack,
        start=_remote_pair,
        kind='remote',
        marks=(pytest.mark.remote,),
        resident_threads=('simharness-grpc',),
    ),
    # Two Ray nodes on loopback (127.0.0.2, 127.0.0.3), one actor on each, started once
    # per session (tests/ray_cluster.py).
    'ray-2': StackEntry(
        _ray_stack,
        start=_ray_resource,
        kind='ray',
        marks=(
            pytest.mark.ray,
            pytest.mark.skipif(
                not have_ray(), reason='Ray is not installed (pip install "simharness[ray]")'
            ),
        ),
        resident_threads=('simharness-ray',),
    ),
}

#: Stacks the conformance tests (the `stack` fixture) run on: each family once, its
#: layouts apart: the debugging thread stack with blocks of 2 clients per thread, the
#: local stack (uneven blocks), two in-process workers behind the codec and the worker
#: service (loopback), two workers cutting blocks of 3, two services, two Ray actors. One client per thread (``thread-1``) and one worker (``process-1``, the
#: plugin's built-in) are compared with these bit for bit in tests/integration and
#: tests/process (CI time: every conformance case on 7 stacks was ~7% of the suite).
CONFORMANCE = ('thread-2', 'local', 'loopback-2', 'process-2-cpw3', 'remote-2', 'ray-2')


def register(registry: StackRegistry) -> None:
    """Declares the suite's stacks to the session's registry."""
    for name, entry in ENTRIES.items():
        registry.register(name, entry)
    for name in ('process-1', 'process-2'):  # built-in stacks the suite and benchmarks use
        registry.add_marks(name, pytest.mark.process)
