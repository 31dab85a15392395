"""The one place that assembles executors into stacks (the factories).

```
ReferenceResolvingExecutor
  FederatingExecutor(FederatedResolvingStrategy)
    server:   ThreadDelegating(EagerTF)
    unplaced: ThreadDelegating(EagerTF)
    clients:  ThreadDelegating(EagerTF) x ceil(n / clients_per_thread)
```

Here: the thread stacks and the factory functions of each worker transport
(processes, gRPC services, Ray actors). The factory classes they build on
(`CachingExecutorFactory`, `WorkerGroupExecutorFactory`) and the driver's
function cache are in `simharness.stack_factories`; this module exports them too.
"""

from __future__ import annotations

import inspect
import math
import os
from typing import Callable, List, Optional, cast

from simharness.core import types as T
from simharness.errors import (
    SimharnessTypeError,
    SimharnessValueError,
)
from simharness.executors.base import BatchExecutor, Executor, ExecutorFactory
from simharness.executors.leaf.eager_tf import EagerTFExecutor, FunctionCache
from simharness.executors.federating import FederatingExecutor
from simharness.executors.reference_resolving import ReferenceResolvingExecutor
from simharness.executors.remote import RemoteExecutor
from simharness.executors.strategy.resolving_strategy import FederatedResolvingStrategy
from simharness.executors.thread_delegating import ThreadDelegatingExecutor
from simharness.runtime import pinning
from simharness.hosts.local_worker import create_worker_pool, pool_for  # noqa: F401
from simharness.runtime.seam import DEFAULT_CLIENTS_PER_WORKER
from simharness.runtime.local.options import (
    DEFAULT_ARENA_BYTES,
    DEFAULT_LIVENESS_TIMEOUT,
    DEFAULT_START_TIMEOUT,
    DEFAULT_STOPPED_TIMEOUT,
    PoolOptions,
)
from simharness.hosts.ray_actor import RayWorker
from simharness.runtime.grpc.auth import read_token_file
from simharness.runtime.grpc.client import DEFAULT_LIVENESS_TIMEOUT as REMOTE_LIVENESS_TIMEOUT
from simharness.runtime.grpc.client import RemoteServices, RemoteWorkerHandle
from simharness.runtime.local.pool import WorkerPool
from simharness.runtime.ray.placement import check_ray_arguments
from simharness.runtime.ray.workers import RayWorkers
from simharness.runtime.seam import WorkerHandle
from simharness.stack_factories import (
    DEFAULT_MAX_CACHED_STACKS,
    CachingExecutorFactory,
    WorkerGroupExecutorFactory,
    check_default_num_clients,
    driver_function_cache,
)
from simharness.stack_factories import split_even as split_even
from simharness.stack_factories import split_for_workers as split_for_workers
from simharness.validation import check_bool, check_int, check_number


def split_blocks(n: int, per_block: int) -> List[int]:
    """Sizes of contiguous blocks of at most `per_block` clients covering n."""
    if n == 0:
        return []
    k = math.ceil(n / per_block)
    return [min(per_block, n - i * per_block) for i in range(k)]


#: Makes the leaf executor of a thread: TFF's `leaf_executor_fn`, called as
#: ``fn(device=...)`` when it takes a `device` argument, else as ``fn()``.
LeafExecutorFn = Callable[..., BatchExecutor]


def _check_leaf_executor_fn(leaf_executor_fn: Optional[LeafExecutorFn]) -> None:
    if leaf_executor_fn is not None and not callable(leaf_executor_fn):
        raise SimharnessTypeError(
            f'leaf_executor_fn must be a callable returning an executor (e.g. '
            f'EagerTFExecutor), got {leaf_executor_fn!r} of type '
            f'{type(leaf_executor_fn).__name__}',
            expected='callable',
            actual=type(leaf_executor_fn),
        )


def _takes_device(fn: Callable[..., object]) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature
        return False
    return any(p.name == 'device' or p.kind is p.VAR_KEYWORD for p in params)


class _ExecutorLeaf(BatchExecutor):
    """A leaf that has only the `Executor` API (TFF's: any executor, a mock included):
    block operations that the API spells out (maps, structs, selections) run value by
    value; reductions, sequence operations and selects need a `BatchExecutor`."""

    def __init__(self, target: Executor):
        self.target = target

    async def create_value(self, value, type_spec=None):
        return await self.target.create_value(value, type_spec)

    async def create_call(self, comp, arg=None):
        return await self.target.create_call(comp, arg)

    async def create_struct(self, elements):
        return await self.target.create_struct(elements)

    async def create_selection(self, source, index=None, name=None):
        return await self.target.create_selection(source, index, name)

    def close(self):
        self.target.close()

    async def create_map(self, fn, args, count=None):
        calls = (
            [self.create_call(fn, a) for a in args]
            if args is not None
            else [self.create_call(fn) for _ in range(count or 0)]
        )
        return [await c for c in calls]

    async def create_structs(self, rows, names):
        return [await self.create_struct(list(zip(names, row))) for row in rows]

    async def create_selections(self, sources, index):
        return [await self.create_selection(s, index) for s in sources]

    def _needs_batch(self, what: str):
        raise SimharnessTypeError(
            f'the leaf executor {type(self.target).__name__} has only the Executor API; {what} '
            'needs a BatchExecutor leaf (such as EagerTFExecutor)',
            expected=BatchExecutor,
            actual=type(self.target),
        )

    async def create_partial_reduction(self, kind, values, start, total, params):
        self._needs_batch(f'a {kind} reduction')

    async def create_reduction_result(self, kind, partials, total, params, result_type):
        self._needs_batch(f'a {kind} reduction')

    async def create_sequence_op(self, op, values, params):
        self._needs_batch(op)

    async def create_select(self, keys, server_value, select_fn, element_type):
        self._needs_batch('federated_select')


def _leaf(
    device: Optional[str], cache: FunctionCache, leaf_executor_fn: Optional[LeafExecutorFn]
) -> BatchExecutor:
    if leaf_executor_fn is None:
        return EagerTFExecutor(device=device, function_cache=cache)
    leaf = (
        leaf_executor_fn(device=device) if _takes_device(leaf_executor_fn) else leaf_executor_fn()
    )
    if isinstance(leaf, BatchExecutor):
        return leaf
    if isinstance(leaf, Executor):  # duck-typed, as TFF takes any executor
        return _ExecutorLeaf(leaf)
    raise SimharnessTypeError(
        f'leaf_executor_fn returned {leaf!r} of type {type(leaf).__name__}; a leaf executor '
        f'must be an Executor such as EagerTFExecutor',
        expected=Executor,
        actual=type(leaf),
    )


def _thread_eager(
    name: str,
    device: Optional[str],
    cache: FunctionCache,
    leaf_executor_fn: Optional[LeafExecutorFn] = None,
) -> ThreadDelegatingExecutor:
    return ThreadDelegatingExecutor(_leaf(device, cache, leaf_executor_fn), name=name)


def _build_thread_stack(
    n: int,
    clients_per_thread: int,
    device: Optional[str],
    leaf_executor_fn: Optional[LeafExecutorFn] = None,
) -> Executor:
    cache = driver_function_cache(device)
    server = _thread_eager('simharness-server', device, cache, leaf_executor_fn)
    unplaced = _thread_eager('simharness-unplaced', device, cache, leaf_executor_fn)
    groups = [
        (_thread_eager(f'simharness-clients-{i}', device, cache, leaf_executor_fn), size)
        for i, size in enumerate(split_blocks(n, clients_per_thread))
    ]
    federating = FederatingExecutor(FederatedResolvingStrategy.factory(server, groups), unplaced)
    return ReferenceResolvingExecutor(federating)


def thread_debugging_executor_factory(
    num_clients: Optional[int] = None,
    clients_per_thread: int = 1,
    *,
    default_num_clients: Optional[int] = None,
    leaf_executor_fn: Optional[LeafExecutorFn] = None,
) -> ExecutorFactory:
    """TFF's debugging stack: one thread (and EagerTF executor) per client group.

    Args:
      num_clients: the number of clients when the arguments do not tell
        (and the only one accepted when given); one or larger.
      clients_per_thread: clients hosted by each thread's EagerTF executor.
      default_num_clients: the number of clients when the arguments do not
        tell, without fixing it (TFF's; default 1).
      leaf_executor_fn: makes each thread's leaf executor (TFF's; default
        `EagerTFExecutor`), called with ``device=`` when it takes one.
    """
    # As in TFF: num_clients, when given, must be one or larger (ValueError).
    check_int('num_clients', num_clients, 1, allow_none=True)
    check_int('clients_per_thread', clients_per_thread, 1)
    check_default_num_clients(num_clients, default_num_clients)
    _check_leaf_executor_fn(leaf_executor_fn)
    return CachingExecutorFactory(
        lambda n: _build_thread_stack(n, clients_per_thread, None, leaf_executor_fn),
        num_clients,
        default_num_clients=default_num_clients,
    )


def default_max_fanout() -> int:
    """`local_executor_factory`'s client threads when not given: 2 per usable CPU, at most 32."""
    cpus = (
        len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else (os.cpu_count() or 1)
    )
    return max(2, min(32, 2 * cpus))


def local_executor_factory(
    num_clients: Optional[int] = None,
    clients_per_thread: int = 1,
    max_fanout: Optional[int] = None,
    device: Optional[str] = None,
    max_cached_stacks: int = DEFAULT_MAX_CACHED_STACKS,
    *,
    default_num_clients: Optional[int] = None,
    leaf_executor_fn: Optional[LeafExecutorFn] = None,
) -> ExecutorFactory:
    """The everyday local stack of threads.

    Args:
      num_clients: as in `thread_debugging_executor_factory`.
      default_num_clients, leaf_executor_fn: as in
        `thread_debugging_executor_factory`.
      clients_per_thread: clients per client thread; raised automatically so
        that there are at most `max_fanout` client threads.
      max_fanout: the most client threads a stack may have (two or more, as in TFF);
        None: twice the CPUs this process may use, at most 32 (TF releases the GIL, so two
        threads per core keep the cores busy; more threads only add per-call
        overhead: a block of clients runs in one TF call per thread).
      device: the TF device of every EagerTF executor (None: TF's choice).
      max_cached_stacks: how many cardinalities keep a live stack.
    """
    check_int('num_clients', num_clients, 0, allow_none=True)
    check_int('clients_per_thread', clients_per_thread, 1)
    check_int('max_fanout', max_fanout, 2, allow_none=True)  # TFF's: at least 2
    if max_fanout is None:
        max_fanout = default_max_fanout()
    pinning.check_tf_device('device', device)
    check_int('max_cached_stacks', max_cached_stacks, 1)
    check_default_num_clients(num_clients, default_num_clients)
    _check_leaf_executor_fn(leaf_executor_fn)

    def build(n: int) -> Executor:
        per = max(clients_per_thread, math.ceil(n / max_fanout)) if n else clients_per_thread
        return _build_thread_stack(n, per, device, leaf_executor_fn)

    return CachingExecutorFactory(
        build, num_clients, max_cached_stacks, default_num_clients=default_num_clients
    )


# ---------------------------------------------------------------- process stacks

#: What a process stack's factory says once its pool is closed.
PROCESS_CLOSED_MESSAGE = (
    'the worker pool of this factory is closed; make a new process_executor_factory (or pool)'
)
#: What a remote stack's factory says once its services are closed.
REMOTE_CLOSED_MESSAGE = (
    'the remote services of this factory are closed; make a new remote_executor_factory'
)
#: What a Ray stack's factory says once its actors are closed.
RAY_CLOSED_MESSAGE = 'the Ray workers of this factory are closed; make a new ray_executor_factory'


def process_executor_factory(
    num_clients: Optional[int] = None,
    num_workers: Optional[int] = None,
    clients_per_worker: Optional[int] = DEFAULT_CLIENTS_PER_WORKER,
    cpu_affinity: bool = True,
    devices: object = None,
    workers_per_gpu: int = 1,
    max_cached_stacks: int = DEFAULT_MAX_CACHED_STACKS,
    arena_bytes: int = DEFAULT_ARENA_BYTES,
    start_timeout: float = DEFAULT_START_TIMEOUT,
    start: bool = False,
    worker_options: Optional[dict] = None,
    pool: Optional[WorkerPool] = None,
    request_timeout: Optional[float] = None,
    liveness_timeout: float = DEFAULT_LIVENESS_TIMEOUT,
    *,
    default_num_clients: Optional[int] = None,
    stopped_timeout: float = DEFAULT_STOPPED_TIMEOUT,
) -> WorkerGroupExecutorFactory[WorkerPool]:
    """Stacks whose client executors live in pinned worker processes.

    Stacks for every cardinality run on the same warm `WorkerPool` (the
    factory's `group`), each in sessions of its own.

    Args:
      num_clients: as in `local_executor_factory`.
      default_num_clients: as in `local_executor_factory` (there is no
        `leaf_executor_fn`: the workers' leaf executors are built in the
        workers, which run none of the driver's Python code).
      num_workers: worker processes (default: usable CPU cores, or
        GPUs x `workers_per_gpu` when `devices` names GPUs).
      clients_per_worker: the most clients a worker runs through one TF call
        (bounds its memory); None: no bound.
      cpu_affinity: pin each worker to its own core set.
      devices: GPUs to use ('cuda:0', [0, 1], ...); None: CPU only.
      workers_per_gpu: workers sharing each GPU (memory growth on).
      max_cached_stacks: cardinalities that keep a live stack.
      arena_bytes: initial size of each shared-memory arena (they grow).
      start_timeout: seconds to wait for a worker to start.
      start: start the workers now rather than on first use.
      worker_options: advanced options passed to the workers ('profile': log
        each request's time to stderr).
      pool: an existing `WorkerPool` to share (then the pool arguments above
        are ignored and closing the factory leaves the pool running). Any
        number of factories and stacks may share one pool: each stack has
        its own session in every worker.
      request_timeout: seconds one worker request may take; past it the
        worker is killed and the call fails with `WorkerTimeoutError`
        (retryable; None: no limit).
      liveness_timeout: seconds a request may wait on a worker that uses
        no CPU (deadlocked) before the same.
      stopped_timeout: seconds a request may wait on a worker seen stopped
        (SIGSTOP, process state T) before the same; a worker busy in a long
        TF call is never taken for stopped.

    Returns:
      A `WorkerGroupExecutorFactory` over the `WorkerPool` (`factory.group`);
      close it (or use it as a context manager) to stop the workers it
      started. `factory.stats()`: the pool's counters (requests, bytes moved)
      and each worker's RSS and CPU time (`WorkerPool.stats`).
    """
    # Every check runs before the pool exists: a bad argument starts nothing.
    check_int('num_clients', num_clients, 0, allow_none=True)
    check_int('max_cached_stacks', max_cached_stacks, 1)
    check_bool('start', start)
    check_default_num_clients(num_clients, default_num_clients)
    owns = pool is None
    if pool is None:
        pool = pool_for(
            PoolOptions(
                num_workers=num_workers,
                clients_per_worker=clients_per_worker,
                cpu_affinity=cpu_affinity,
                devices=devices,
                workers_per_gpu=workers_per_gpu,
                arena_bytes=arena_bytes,
                start_timeout=start_timeout,
                worker_options=worker_options,
                request_timeout=request_timeout,
                liveness_timeout=liveness_timeout,
                stopped_timeout=stopped_timeout,
            )
        )
    factory = WorkerGroupExecutorFactory(
        pool,
        num_clients,
        max_cached_stacks,
        owns_group=owns,
        default_num_clients=default_num_clients,
        closed_message=PROCESS_CLOSED_MESSAGE,
    )
    if start:
        pool.start()
    return factory


# ---------------------------------------------------------------- remote stacks


def remote_client_executor(
    dispose_batch_size: int = 20, stream_structs: bool = False
) -> Callable[[WorkerHandle, int], BatchExecutor]:
    """The client executors of a remote stack: a `RemoteExecutor` on each worker slot of
    every service, hosting a contiguous block of clients (its cardinality fixed).

    Args:
      dispose_batch_size, stream_structs: as in `RemoteExecutor`.
    """

    def client_executor(handle: WorkerHandle, size: int) -> BatchExecutor:
        ex = RemoteExecutor.on_handle(
            cast(RemoteWorkerHandle, handle), dispose_batch_size, stream_structs
        )
        ex.set_cardinalities({T.CLIENTS: size})
        return ex

    return client_executor


def remote_executor_factory(
    addresses_or_channels=None,
    num_clients: Optional[int] = None,
    *,
    default_num_clients: Optional[int] = None,
    max_cached_stacks: int = DEFAULT_MAX_CACHED_STACKS,
    token: Optional[str] = None,
    token_file: Optional[str] = None,
    root_certificates: Optional[bytes] = None,
    dispose_batch_size: int = 20,
    stream_structs: bool = False,
    max_inflight: int = 32,
    connect_timeout: float = 30.0,
    services=None,
    liveness_timeout: float = REMOTE_LIVENESS_TIMEOUT,
    request_timeout: Optional[float] = None,
) -> WorkerGroupExecutorFactory[RemoteServices]:
    """Stacks whose clients are spread over executor services (TFF's remote stack).

    Clients are cut into contiguous blocks, one per worker slot of every
    service (a service started with ``--num-workers N`` has N slots, else 1),
    in the order given; results are bit-identical to the thread stack.

    Args:
      addresses_or_channels: the services: addresses ``'host:port'``,
        `grpc.Channel`s or ``ExecutorServiceStub``s (one or a list).
      num_clients, default_num_clients, max_cached_stacks: as in
        `local_executor_factory`.
      token / token_file: the services' token (call metadata).
      root_certificates: PEM bytes: reach addresses over TLS.
      dispose_batch_size, stream_structs: as in `RemoteExecutor`.
      max_inflight: requests in flight per stream (bounds driver memory).
      connect_timeout: seconds a (re)connect waits for a service; with
        ``execution_context(factory, retries=N)`` a computation whose
        service died is re-run once the service is back within it.
      services: an existing `RemoteServices` to share (then the connection
        arguments are ignored and closing the factory leaves it open).
      liveness_timeout: seconds within which a service that stops answering
        (frozen, machine or network gone) fails the call with the retryable
        `ServiceUnavailableError` naming it (gRPC keepalive).
      request_timeout: seconds one request may wait for its answer; past it
        the call fails with the retryable `WorkerTimeoutError` (None: no limit).

    Returns:
      A `WorkerGroupExecutorFactory` over the `RemoteServices` (`factory.group`)
      whose client executors are `RemoteExecutor`s; close it (or use it as a
      context manager) to end the streams, and the channels made here, unless
      `services` was given. `factory.stats()`: what every service holds
      (`RemoteServices.stats`).
    """
    check_int('num_clients', num_clients, 0, allow_none=True)
    check_int('max_cached_stacks', max_cached_stacks, 1)
    check_int('dispose_batch_size', dispose_batch_size, 1)
    check_bool('stream_structs', stream_structs)
    check_int('max_inflight', max_inflight, 1)
    check_number('connect_timeout', connect_timeout, greater_than=0)
    check_default_num_clients(num_clients, default_num_clients)
    owns = services is None
    if services is None:
        if addresses_or_channels is None:
            raise SimharnessTypeError(
                "remote_executor_factory needs the services: addresses 'host:port' or grpc channels"
            )
        targets = (
            list(addresses_or_channels)
            if isinstance(addresses_or_channels, (list, tuple))
            else [addresses_or_channels]
        )
        if not targets:
            raise SimharnessValueError('remote_executor_factory needs at least one service')
        if token is not None and token_file is not None:
            raise SimharnessValueError('give token or token_file, not both')
        if token_file is not None:
            token = read_token_file(token_file)
        services = RemoteServices(
            targets,
            token=token,
            root_certificates=root_certificates,
            max_inflight=max_inflight,
            connect_timeout=connect_timeout,
            liveness_timeout=liveness_timeout,
            request_timeout=request_timeout,
        )
    return WorkerGroupExecutorFactory(
        services,
        num_clients,
        max_cached_stacks,
        owns,
        default_num_clients,
        client_executor=remote_client_executor(dispose_batch_size, stream_structs),
        closed_message=REMOTE_CLOSED_MESSAGE,
    )


# ---------------------------------------------------------------- Ray stacks


def ray_executor_factory(
    address: Optional[str] = None,
    num_workers: Optional[int] = None,
    num_cpus_per_worker: float = 1,
    num_gpus_per_worker: float = 0,
    clients_per_worker: Optional[int] = DEFAULT_CLIENTS_PER_WORKER,
    placement_strategy: str = 'PACK',
    *,
    num_clients: Optional[int] = None,
    default_num_clients: Optional[int] = None,
    max_cached_stacks: int = DEFAULT_MAX_CACHED_STACKS,
    ready_timeout: float = 120.0,
    max_restarts: int = 3,
    call_timeout: Optional[float] = None,
    cpu_affinity: bool = True,
    ray_init_args: Optional[dict] = None,
    start: bool = False,
    workers=None,
    worker_options: Optional[dict] = None,
) -> WorkerGroupExecutorFactory[RayWorkers]:
    """Stacks whose clients run in Ray actors: from one machine to a cluster.

    One long-lived actor per worker slot (an actor imports TensorFlow once),
    all in one placement group; clients are cut into contiguous blocks, one
    per actor, and every operation is one call per actor covering its block.
    Results are bit-identical to the thread and process stacks. Needs the
    extra: ``pip install "simharness[ray]"``.

    Args:
      address: None starts a local Ray; ``'auto'`` joins the cluster of this
        machine, ``'ray://head:10001'`` (Ray Client) or ``'head:6379'`` a
        remote one. Unused when Ray is already initialised in this process.
      num_workers: actors (default: the cluster's CPUs / `num_cpus_per_worker`,
        or GPUs / `num_gpus_per_worker` when `num_gpus_per_worker` > 0).
      num_cpus_per_worker: Ray CPUs reserved per actor (> 0).
      num_gpus_per_worker: Ray GPUs per actor, in [0, 1] (0.5: two actors
        share a GPU, with memory growth on); Ray sets the actor's
        ``CUDA_VISIBLE_DEVICES``.
      clients_per_worker: the most clients an actor runs through one TF call.
      placement_strategy: of the placement group: 'PACK' (default),
        'SPREAD', 'STRICT_PACK' or 'STRICT_SPREAD'.
      num_clients, default_num_clients, max_cached_stacks: as in
        `local_executor_factory`.
      ready_timeout: seconds to wait for the placement group and the actors;
        an unsatisfiable group is a `WorkerStartError` naming the resources.
      max_restarts: Ray restarts of a dead actor (-1: no limit). Calls are
        never retried by Ray (``max_task_retries=0``): a call to a dead actor
        is a `WorkerLostError` (retryable: ``execution_context(factory,
        retries=N)`` runs the computation again on the restarted actor).
      call_timeout: seconds one call may run (None: no limit): a straggler
        past it is killed (and restarted) and the call fails with
        `WorkerTimeoutError` (retryable).
      cpu_affinity: pin every actor to node-local cores of its own (from the
        placement group table; see `runtime.ray.placement.plan_ray_placements`).
      ray_init_args: more keyword arguments of ``ray.init`` (e.g.
        ``{'num_cpus': 4}`` for a local Ray).
      start: start Ray and the actors now rather than on first use.
      workers: an existing `simharness.runtime.ray.RayWorkers` to
        share (the arguments above that describe workers are then ignored,
        and closing the factory leaves the actors running).
      worker_options: advanced options passed to the actors ('profile': log each
        request's operation and time to stderr).

    Returns:
      A `WorkerGroupExecutorFactory` over the `RayWorkers` (`factory.group`);
      close it (or use it as a context manager) to end the actors, the
      placement group, and Ray when it started it, unless `workers` was given.
      `factory.stats()`: requests, bytes moved, broadcast puts and each actor's
      node, pid, RSS and CPU time (`RayWorkers.stats`);
      ``factory.group.cluster()``: the cluster's nodes and where each actor runs.
    """
    check_int('num_clients', num_clients, 0, allow_none=True)
    check_int('max_cached_stacks', max_cached_stacks, 1)
    check_bool('start', start)
    check_default_num_clients(num_clients, default_num_clients)
    owns = workers is None
    if workers is None:
        check_ray_arguments(
            num_workers,
            num_cpus_per_worker,
            num_gpus_per_worker,
            clients_per_worker,
            placement_strategy,
            ready_timeout,
            max_restarts,
            call_timeout,
            cpu_affinity,
            address,
        )
        workers = RayWorkers(
            num_workers,
            address=address,
            num_cpus_per_worker=num_cpus_per_worker,
            num_gpus_per_worker=num_gpus_per_worker,
            clients_per_worker=clients_per_worker,
            placement_strategy=placement_strategy,
            ready_timeout=ready_timeout,
            max_restarts=max_restarts,
            call_timeout=call_timeout,
            cpu_affinity=cpu_affinity,
            ray_init_args=ray_init_args,
            worker_options=worker_options,
            actor=RayWorker,
        )
    elif not isinstance(workers, RayWorkers):
        raise SimharnessTypeError(
            f'workers must be a RayWorkers, got {workers!r} of type {type(workers).__name__}',
            expected=RayWorkers,
            actual=type(workers),
        )
    factory = WorkerGroupExecutorFactory(
        workers,
        num_clients,
        max_cached_stacks,
        owns_group=owns,
        default_num_clients=default_num_clients,
        closed_message=RAY_CLOSED_MESSAGE,
    )
    if start:
        try:
            workers.start()
        except BaseException:
            factory.close()
            raise
    return factory
