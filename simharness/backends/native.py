"""`simharness.backends.native`: TFF's ``tff.backends.native`` execution contexts.

TFF's "local C++" contexts run every client of a computation in one C++
process, in parallel. Here they map onto the process stack
(`simharness.framework.process_executor_factory`): one pinned worker process
per usable core, started in the background when the context is made (a first call
waits for them if the program reaches it first) and reused by every later call
(and every cardinality), clients spread over the workers in contiguous
blocks. Every local C++ context and factory open in the process shares that
one pool (`simharness.local_cpp`; each with its own session in every
worker), as TFF's all run in the process that makes them; the last one
closed stops it. It is the fastest local stack for client work (no GIL, one
TF call per block of clients); results are bit-identical to the thread
stack's.

```
set_sync_local_cpp_execution_context(default_num_clients=0, ...)
  -> ExecutionContext(local_cpp.shared_local_process_factory(default_num_clients),
                      max_concurrent_calls=..., transform_args=..., transform_result=...)
  -> the process-wide default context; the previous default simharness made is
     closed (its workers go on for the new one; the last context closed stops them
     and unlinks their shared memory)
```

TFF 0.19-era programs call `set_local_python_execution_context` (TFF's
Python thread stack): it maps onto simharness's thread stack
(`local_executor_factory`), as its arguments (`max_fanout`,
`clients_per_thread`) describe threads.

Contexts over executor services, and TFF's older local names:

```
create_localhost_cpp_execution_context(default_num_clients=0, max_concurrent_computation_calls=0)
  -> ExecutionContext(LocalhostExecutorFactory)
       first create_executor: start_executor_service('127.0.0.1', port 0, num_workers=<usable
       cores>, a random token) -> remote_executor_factory(service address, same token)
       close(): the stacks, the gRPC streams, then the service and its worker processes
create_{sync,async}_remote_cpp_execution_context(channels, default_num_clients=0)
create_remote{,_async}_python_execution_context(channels, thread_pool_executor=None,
                                                dispose_batch_size=20, max_fanout=100,
                                                default_num_clients=0)
  -> ExecutionContext(remote_executor_factory(channels, ...))  (services run `simharness serve`)
create_local_async_python_execution_context(...)   -> the thread stack, awaitable calls
create_thread_debugging_execution_context(...)     -> thread_debugging_executor_factory
```

TFF's localhost C++ context (TFF 0.30-0.44; renamed `set_sync_local_cpp_execution_context`
in 0.45) started TFF's C++ worker binary on a free local port on the first call and
talked to it through a remote executor. Here the worker is simharness's executor
service, started in this process on a loopback port, its clients run by one worker
process per usable core; only this process knows its token. The remote contexts take
what `remote_executor_factory` takes as services: `grpc.Channel`s (TFF's argument),
addresses ``'host:port'`` or stubs.
"""

from __future__ import annotations

import secrets
import threading
from typing import Any, Dict, Optional, Sequence

from simharness.context import AsyncExecutionContext, ExecutionContext
from simharness.core import context_stack
from simharness.core import types as T
from simharness.errors import ExecutorClosedError, SimharnessTypeError, SimharnessValueError
from simharness.executors.base import Executor, ExecutorFactory
from simharness.runtime.pinning import usable_cpus
from simharness.local_cpp import shared_local_process_factory
from simharness.runtime.grpc.client import RemoteServices
from simharness.stacks import (
    WorkerGroupExecutorFactory,
    local_executor_factory,
    remote_executor_factory,
    thread_debugging_executor_factory,
)
from simharness.tensorflow import eager_values_to_numpy, transform_result
from simharness.validation import check_bool, check_int


def concurrency_limit(max_concurrent_computation_calls: Any) -> Optional[int]:
    """TFF's limit (nonpositive or None: no limit) as `max_concurrent_calls`."""
    if max_concurrent_computation_calls is None:
        return None
    n = check_int('max_concurrent_computation_calls', max_concurrent_computation_calls)
    return n if n > 0 else None


def check_local_args(default_num_clients: Any, stream_structs: Any) -> int:
    check_bool('stream_structs', stream_structs)
    return check_int('default_num_clients', default_num_clients, 0)


def _process_factory(default_num_clients: int):
    return shared_local_process_factory(default_num_clients)


def create_sync_local_cpp_execution_context(
    default_num_clients: int = 0,
    max_concurrent_computation_calls: int = -1,
    stream_structs: bool = False,
) -> ExecutionContext:
    """A synchronous context on the local process stack (TFF's local C++ context).

    Args:
      default_num_clients: the number of clients when the arguments do not
        tell (no value placed at clients).
      max_concurrent_computation_calls: at most this many computations run
        at once; nonpositive: no limit.
      stream_structs: TFF's flag to stream the parts of a struct through its
        gRPC runtime; accepted for compatibility, it changes nothing here
        (values never travel through gRPC on a local stack).

    Returns:
      An `ExecutionContext`; `close()` it to stop its workers (a context set
      as the default is closed when replaced).

    Raises:
      SimharnessTypeError: an argument of the wrong type.
      SimharnessValueError: `default_num_clients` < 0.
    """
    n = check_local_args(default_num_clients, stream_structs)
    limit = concurrency_limit(max_concurrent_computation_calls)
    return ExecutionContext(
        _process_factory(n),
        max_concurrent_calls=limit,
        transform_args=eager_values_to_numpy,
        transform_result=transform_result,
        owns_factory=True,
    )


def create_async_local_cpp_execution_context(
    default_num_clients: int = 0,
    max_concurrent_computation_calls: int = -1,
    stream_structs: bool = False,
) -> AsyncExecutionContext:
    """As `create_sync_local_cpp_execution_context`, with an awaitable `invoke`.

    A computation called while it is current returns an awaitable.
    """
    n = check_local_args(default_num_clients, stream_structs)
    limit = concurrency_limit(max_concurrent_computation_calls)
    return AsyncExecutionContext(
        _process_factory(n),
        max_concurrent_calls=limit,
        transform_args=eager_values_to_numpy,
        transform_result=transform_result,
        owns_factory=True,
    )


def set_default(ctx: ExecutionContext) -> None:
    # Owned: the previous default that simharness made is closed (workers, shared memory).
    context_stack.replace_default(ctx, owned=True)


def set_sync_local_cpp_execution_context(
    default_num_clients: int = 0,
    max_concurrent_computation_calls: int = -1,
    stream_structs: bool = False,
) -> None:
    """Makes `create_sync_local_cpp_execution_context(...)` the default context.

    The previous default context simharness made (by an earlier call, say) is
    closed: its worker processes stop and its shared memory is unlinked.
    """
    set_default(
        create_sync_local_cpp_execution_context(
            default_num_clients, max_concurrent_computation_calls, stream_structs
        )
    )


def set_async_local_cpp_execution_context(
    default_num_clients: int = 0,
    max_concurrent_computation_calls: int = -1,
    stream_structs: bool = False,
) -> None:
    """Makes `create_async_local_cpp_execution_context(...)` the default context."""
    set_default(
        create_async_local_cpp_execution_context(
            default_num_clients, max_concurrent_computation_calls, stream_structs
        )
    )


def create_local_python_execution_context(
    default_num_clients: int = 0,
    max_fanout: int = 100,
    clients_per_thread: int = 1,
    server_tf_device: Any = None,
    client_tf_devices: Sequence[Any] = (),
    reference_resolving_clients: bool = False,
) -> ExecutionContext:
    """TFF's (0.19-0.4x) local Python context, on simharness's thread stack.

    Args:
      default_num_clients: the number of clients when the arguments do not tell.
      max_fanout: the most client threads.
      clients_per_thread: clients per client thread (raised as needed to stay
        within `max_fanout`).
      server_tf_device, client_tf_devices: TFF's device placement; only the
        default (None and no client devices) is supported: a thread stack
        runs every executor on one TF device (`local_executor_factory(device=...)`).
      reference_resolving_clients: accepted (a bool); simharness's client
        executors always resolve references.

    Raises:
      SimharnessTypeError: an argument of the wrong type.
      SimharnessValueError: an out-of-range number, or devices given.
    """
    n = check_int('default_num_clients', default_num_clients, 0)
    check_bool('reference_resolving_clients', reference_resolving_clients)
    if server_tf_device is not None or tuple(client_tf_devices or ()):
        raise SimharnessValueError(
            f'server_tf_device={server_tf_device!r} / client_tf_devices={client_tf_devices!r}: '
            'per-placement devices are not supported; use simharness.framework.'
            'local_executor_factory(device=...) or process_executor_factory(devices=...)'
        )
    factory = local_executor_factory(
        clients_per_thread=clients_per_thread, max_fanout=max_fanout, default_num_clients=n
    )
    return ExecutionContext(
        factory, transform_args=eager_values_to_numpy, transform_result=transform_result
    )


def set_local_python_execution_context(
    default_num_clients: int = 0,
    max_fanout: int = 100,
    clients_per_thread: int = 1,
    server_tf_device: Any = None,
    client_tf_devices: Sequence[Any] = (),
    reference_resolving_clients: bool = False,
) -> None:
    """Makes `create_local_python_execution_context(...)` the default context."""
    set_default(
        create_local_python_execution_context(
            default_num_clients,
            max_fanout,
            clients_per_thread,
            server_tf_device,
            client_tf_devices,
            reference_resolving_clients,
        )
    )


def set_local_execution_context(*args: Any, **kwargs: Any) -> None:
    """TFF 0.17-0.19's name of `set_local_python_execution_context` (same arguments)."""
    set_local_python_execution_context(*args, **kwargs)


class LocalhostExecutorFactory(ExecutorFactory):
    """Stacks on an executor service this factory starts on a loopback port (TFF's localhost
    C++ worker).

    The service starts on the first `create_executor` (as TFF started its worker binary),
    with `num_workers` worker processes (default: one per usable core) and a random token
    only this factory knows; `close()` ends the stacks, the connection, then the service.

    Args:
      default_num_clients: the number of clients when the arguments do not tell.
      num_workers: the service's worker processes (default: one per usable core; 0: the
        clients run in this process, on the service's one thread).

    Attributes:
      server: the running `ExecutorServer` (None before the first call and after `close()`).
    """

    def __init__(self, default_num_clients: int = 0, num_workers: Optional[int] = None):
        self._default = check_int('default_num_clients', default_num_clients, 0)
        self.num_workers = (
            len(usable_cpus()) if num_workers is None else check_int('num_workers', num_workers, 0)
        )
        self.server: Any = None
        self._remote: Optional[WorkerGroupExecutorFactory[RemoteServices]] = None
        self._lock = threading.Lock()
        self._closed = False

    @property
    def default_num_clients(self) -> Optional[int]:
        return self._default

    def _started(self) -> WorkerGroupExecutorFactory[RemoteServices]:
        with self._lock:
            if self._closed:
                raise ExecutorClosedError(
                    'this localhost executor factory is closed; make a new execution context'
                )
            if self._remote is None:
                from simharness.hosts.grpc_service import start_executor_service

                token = secrets.token_urlsafe(32)
                server = start_executor_service(
                    0, '127.0.0.1', token=token, num_workers=self.num_workers
                )
                try:
                    self._remote = remote_executor_factory(
                        server.address, default_num_clients=self._default, token=token
                    )
                except BaseException:
                    server.stop()
                    raise
                self.server = server
            return self._remote

    def create_executor(self, cardinalities: Dict[T.PlacementLiteral, int]) -> Executor:
        return self._started().create_executor(cardinalities)

    def clean_up_executors(self) -> None:
        with self._lock:
            remote = self._remote
        if remote is not None:
            remote.clean_up_executors()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            remote, server = self._remote, self.server
            self._remote = self.server = None
        try:
            if remote is not None:
                remote.close()
        finally:
            if server is not None:
                server.stop()


def _context(
    factory: ExecutorFactory, asynchronous: bool, limit: Optional[int] = None, owns: bool = True
) -> ExecutionContext:
    cls = AsyncExecutionContext if asynchronous else ExecutionContext
    return cls(
        factory,
        max_concurrent_calls=limit,
        transform_args=eager_values_to_numpy,
        transform_result=transform_result,
        owns_factory=owns,
    )


def create_localhost_cpp_execution_context(
    default_num_clients: int = 0, max_concurrent_computation_calls: int = 0
) -> ExecutionContext:
    """TFF 0.30-0.44's context on a local worker service (see the module docstring).

    Args:
      default_num_clients: the number of clients when the arguments do not tell.
      max_concurrent_computation_calls: at most this many computations run at once;
        nonpositive or None: no limit.

    Returns:
      An `ExecutionContext`; `close()` it to stop its service (a context set as the
      default is closed when replaced).

    Raises:
      SimharnessTypeError: an argument of the wrong type.
      SimharnessValueError: `default_num_clients` < 0.
    """
    n = check_int('default_num_clients', default_num_clients, 0)
    limit = concurrency_limit(max_concurrent_computation_calls)
    return _context(LocalhostExecutorFactory(n), False, limit)


def set_localhost_cpp_execution_context(
    default_num_clients: int = 0, max_concurrent_computation_calls: int = 1
) -> None:
    """Makes `create_localhost_cpp_execution_context(...)` the default context (TFF's
    default here is one computation at a time)."""
    set_default(
        create_localhost_cpp_execution_context(
            default_num_clients, max_concurrent_computation_calls
        )
    )


def _check_channels(channels: Any) -> list:
    if isinstance(channels, (str, bytes)) or not isinstance(channels, Sequence):
        raise SimharnessTypeError(
            f"channels must be a sequence of grpc.Channels (or addresses 'host:port'), got "
            f'{channels!r} of type {type(channels).__name__}',
            expected=Sequence,
            actual=type(channels),
        )
    return list(channels)


def _remote_factory(
    channels: Any,
    default_num_clients: Any,
    dispose_batch_size: Any = 20,
    stream_structs: bool = False,
) -> WorkerGroupExecutorFactory[RemoteServices]:
    targets = _check_channels(channels)
    n = check_int('default_num_clients', default_num_clients, 0)
    return remote_executor_factory(
        targets,
        default_num_clients=n,
        dispose_batch_size=dispose_batch_size,
        stream_structs=stream_structs,
    )


def create_sync_remote_cpp_execution_context(
    channels: Sequence[Any], default_num_clients: int = 0
) -> ExecutionContext:
    """A synchronous context whose clients run on the executor services at `channels`.

    Args:
      channels: `grpc.Channel`s (or addresses ``'host:port'``) of running services
        (``simharness serve``); clients are cut into contiguous blocks, one per
        worker slot of every service, in this order.
      default_num_clients: the number of clients when the arguments do not tell.

    Raises:
      SimharnessTypeError: `channels` not a sequence, or an argument of the wrong type.
      SimharnessValueError: no channels, or `default_num_clients` < 0.
    """
    return _context(_remote_factory(channels, default_num_clients), False)


def create_async_remote_cpp_execution_context(
    channels: Sequence[Any], default_num_clients: int = 0
) -> AsyncExecutionContext:
    """As `create_sync_remote_cpp_execution_context`, with an awaitable `invoke`."""
    ctx = _context(_remote_factory(channels, default_num_clients), True)
    assert isinstance(ctx, AsyncExecutionContext)
    return ctx


def set_sync_remote_cpp_execution_context(
    channels: Sequence[Any], default_num_clients: int = 0
) -> None:
    """Makes `create_sync_remote_cpp_execution_context(...)` the default context."""
    set_default(create_sync_remote_cpp_execution_context(channels, default_num_clients))


def _remote_python(
    channels: Any,
    thread_pool_executor: Any,
    dispose_batch_size: Any,
    max_fanout: Any,
    default_num_clients: Any,
    asynchronous: bool,
) -> ExecutionContext:
    # TFF's thread pool waited on its streams' replies and its fanout built aggregator
    # tiers; simharness's streams have their own threads and aggregate in one tier.
    del thread_pool_executor
    check_int('max_fanout', max_fanout, 2)
    return _context(
        _remote_factory(channels, default_num_clients, dispose_batch_size), asynchronous
    )


def create_remote_python_execution_context(
    channels: Sequence[Any],
    thread_pool_executor: Any = None,
    dispose_batch_size: int = 20,
    max_fanout: int = 100,
    default_num_clients: int = 0,
) -> ExecutionContext:
    """TFF 0.19-0.44's remote context: clients on the executor services at `channels`.

    `dispose_batch_size` is the `RemoteExecutor`'s; `thread_pool_executor` (TFF waited
    on its gRPC replies there) and `max_fanout` (>= 2; TFF's aggregator tiers) are
    accepted and change nothing.
    """
    return _remote_python(
        channels, thread_pool_executor, dispose_batch_size, max_fanout, default_num_clients, False
    )


def set_remote_python_execution_context(
    channels: Sequence[Any],
    thread_pool_executor: Any = None,
    dispose_batch_size: int = 20,
    max_fanout: int = 100,
    default_num_clients: int = 0,
) -> None:
    """Makes `create_remote_python_execution_context(...)` the default context."""
    set_default(
        create_remote_python_execution_context(
            channels, thread_pool_executor, dispose_batch_size, max_fanout, default_num_clients
        )
    )


def create_remote_async_python_execution_context(
    channels: Sequence[Any],
    thread_pool_executor: Any = None,
    dispose_batch_size: int = 20,
    max_fanout: int = 100,
    default_num_clients: int = 0,
) -> AsyncExecutionContext:
    """As `create_remote_python_execution_context`, with an awaitable `invoke`."""
    ctx = _remote_python(
        channels, thread_pool_executor, dispose_batch_size, max_fanout, default_num_clients, True
    )
    assert isinstance(ctx, AsyncExecutionContext)
    return ctx


def set_remote_async_python_execution_context(
    channels: Sequence[Any],
    thread_pool_executor: Any = None,
    dispose_batch_size: int = 20,
    max_fanout: int = 100,
    default_num_clients: int = 0,
) -> None:
    """Makes `create_remote_async_python_execution_context(...)` the default context."""
    set_default(
        create_remote_async_python_execution_context(
            channels, thread_pool_executor, dispose_batch_size, max_fanout, default_num_clients
        )
    )


def create_local_async_python_execution_context(
    default_num_clients: int = 0,
    max_fanout: int = 100,
    clients_per_thread: int = 1,
    server_tf_device: Any = None,
    client_tf_devices: Sequence[Any] = (),
    reference_resolving_clients: bool = False,
) -> AsyncExecutionContext:
    """TFF 0.2x-0.44's async local Python context: the thread stack, awaitable calls
    (arguments as in `create_local_python_execution_context`)."""
    sync = create_local_python_execution_context(
        default_num_clients,
        max_fanout,
        clients_per_thread,
        server_tf_device,
        client_tf_devices,
        reference_resolving_clients,
    )  # its checks; its factory is reused
    ctx = _context(sync.factory, True)
    assert isinstance(ctx, AsyncExecutionContext)
    return ctx


def set_local_async_python_execution_context(
    default_num_clients: int = 0,
    max_fanout: int = 100,
    clients_per_thread: int = 1,
    server_tf_device: Any = None,
    client_tf_devices: Sequence[Any] = (),
    reference_resolving_clients: bool = False,
) -> None:
    """Makes `create_local_async_python_execution_context(...)` the default context."""
    set_default(
        create_local_async_python_execution_context(
            default_num_clients,
            max_fanout,
            clients_per_thread,
            server_tf_device,
            client_tf_devices,
            reference_resolving_clients,
        )
    )


def create_thread_debugging_execution_context(
    default_num_clients: int = 0, clients_per_thread: int = 1
) -> ExecutionContext:
    """TFF's thread-debugging context: `thread_debugging_executor_factory`'s stack
    (every step on one thread, in order)."""
    n = check_int('default_num_clients', default_num_clients, 0)
    factory = thread_debugging_executor_factory(
        default_num_clients=n, clients_per_thread=clients_per_thread
    )
    return _context(factory, False)


def set_thread_debugging_execution_context(
    default_num_clients: int = 0, clients_per_thread: int = 1
) -> None:
    """Makes `create_thread_debugging_execution_context(...)` the default context."""
    set_default(create_thread_debugging_execution_context(default_num_clients, clients_per_thread))


def transform_to_native_form(
    comp: Any, transform_math_to_tf: bool = False, grappler_config: Any = None
) -> Any:
    """TFF's compiler pass for its C++ runtime; here `comp` itself, checked.

    TFF rewrites a computation's proto for its C++ runtime (call-dominant form,
    Grappler run on every graph with `grappler_config`, ids on TF calls) and
    returns the same computation in that form. simharness's executors run the
    traced building blocks as they are, with Grappler's defaults on every graph,
    so the computation is already in the form they run: it is returned as given.
    TFF's own pass also returns its input when it cannot transform it.

    Raises:
      SimharnessTypeError: `comp` is not a computation, or `transform_math_to_tf`
        not a bool.
    """
    _check_computation(comp)
    check_bool('transform_math_to_tf', transform_math_to_tf)
    return comp


def desugar_and_transform_to_native(comp: Any) -> Any:
    """TFF's compiler that lowers intrinsics to TF before `transform_to_native_form`; here
    `comp` itself, checked: simharness's executors run every intrinsic themselves."""
    return transform_to_native_form(comp)


def _check_computation(comp: Any) -> None:
    if not isinstance(getattr(comp, 'type_signature', None), T.FunctionType):
        raise SimharnessTypeError(
            f'expected a computation, got {comp!r} of type {type(comp).__name__}',
            expected='Computation',
            actual=type(comp),
        )


def create_mergeable_comp_execution_context(
    async_contexts: Sequence[Any], num_subrounds: Optional[int] = None
) -> Any:
    """TFF's context that compiles each computation to a `MergeableCompForm`
    (`compile_to_mergeable_comp_form`) and runs it in subrounds over `async_contexts`
    (`simharness.mergeable.MergeableCompExecutionContext`).

    Args:
      async_contexts: async contexts to spread the subrounds over
        (`create_async_local_cpp_execution_context()`, ...).
      num_subrounds: subrounds per call (default: one per context).
    """
    from simharness.backends.mergeable_compiler import compile_to_mergeable_comp_form
    from simharness.mergeable import MergeableCompExecutionContext

    return MergeableCompExecutionContext(
        async_contexts, compiler_fn=compile_to_mergeable_comp_form, num_subrounds=num_subrounds
    )


def set_mergeable_comp_execution_context(
    async_contexts: Sequence[Any], num_subrounds: Optional[int] = None
) -> None:
    """Makes `create_mergeable_comp_execution_context(...)` the default context (the
    async contexts stay the caller's to close)."""
    set_default(create_mergeable_comp_execution_context(async_contexts, num_subrounds))


def compile_to_mergeable_comp_form(comp: Any) -> Any:
    """`simharness.backends.mergeable_compiler.compile_to_mergeable_comp_form`."""
    from simharness.backends.mergeable_compiler import compile_to_mergeable_comp_form as compile_

    return compile_(comp)


__all__ = [
    'compile_to_mergeable_comp_form',
    'create_mergeable_comp_execution_context',
    'desugar_and_transform_to_native',
    'set_mergeable_comp_execution_context',
    'transform_to_native_form',
    'LocalhostExecutorFactory',
    'create_async_remote_cpp_execution_context',
    'create_local_async_python_execution_context',
    'create_localhost_cpp_execution_context',
    'create_remote_async_python_execution_context',
    'create_remote_python_execution_context',
    'create_sync_remote_cpp_execution_context',
    'create_thread_debugging_execution_context',
    'set_local_async_python_execution_context',
    'set_localhost_cpp_execution_context',
    'set_remote_async_python_execution_context',
    'set_remote_python_execution_context',
    'set_sync_remote_cpp_execution_context',
    'set_thread_debugging_execution_context',
    'create_async_local_cpp_execution_context',
    'create_local_python_execution_context',
    'create_sync_local_cpp_execution_context',
    'set_async_local_cpp_execution_context',
    'set_local_execution_context',
    'set_local_python_execution_context',
    'set_sync_local_cpp_execution_context',
]
