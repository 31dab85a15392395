"""`simharness.backends.native`: TFF's ``tff.backends.native`` execution contexts.

TFF's "local C++" contexts run every client of a computation in one C++
process, in parallel. Here they map onto the process stack
(`simharness.framework.process_executor_factory`): one pinned worker process
per usable core, started on the first call and reused by every later call
(and every cardinality), clients spread over the workers in contiguous
blocks. It is the fastest local stack for client work (no GIL, one TF call
per block of clients); results are bit-identical to the thread stack's.

```
set_sync_local_cpp_execution_context(default_num_clients=0, ...)
  -> ExecutionContext(process_executor_factory(default_num_clients=...),
                      max_concurrent_calls=..., transform_args=..., transform_result=...)
  -> the process-wide default context; the previous default simharness made is
     closed (its workers stop, its shared memory is unlinked)
```

TFF 0.19-era programs call `set_local_python_execution_context` (TFF's
Python thread stack): it maps onto simharness's thread stack
(`local_executor_factory`), as its arguments (`max_fanout`,
`clients_per_thread`) describe threads.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from simharness.context import AsyncExecutionContext, ExecutionContext
from simharness.core import context_stack
from simharness.errors import SimharnessValueError
from simharness.stacks import local_executor_factory, process_executor_factory
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
    return process_executor_factory(default_num_clients=default_num_clients)


def create_sync_local_cpp_execution_context(
        default_num_clients: int = 0, max_concurrent_computation_calls: int = -1,
        stream_structs: bool = False) -> ExecutionContext:
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
    return ExecutionContext(_process_factory(n), max_concurrent_calls=limit,
                            transform_args=eager_values_to_numpy, transform_result=transform_result,
                            owns_factory=True)


def create_async_local_cpp_execution_context(
        default_num_clients: int = 0, max_concurrent_computation_calls: int = -1,
        stream_structs: bool = False) -> AsyncExecutionContext:
    """As `create_sync_local_cpp_execution_context`, with an awaitable `invoke`.

    A computation called while it is current returns an awaitable.
    """
    n = check_local_args(default_num_clients, stream_structs)
    limit = concurrency_limit(max_concurrent_computation_calls)
    return AsyncExecutionContext(_process_factory(n), max_concurrent_calls=limit,
                                 transform_args=eager_values_to_numpy,
                                 transform_result=transform_result, owns_factory=True)


def set_default(ctx: ExecutionContext) -> None:
    # Owned: the previous default that simharness made is closed (workers, shared memory).
    context_stack.replace_default(ctx, owned=True)


def set_sync_local_cpp_execution_context(default_num_clients: int = 0,
                                         max_concurrent_computation_calls: int = -1,
                                         stream_structs: bool = False) -> None:
    """Makes `create_sync_local_cpp_execution_context(...)` the default context.

    The previous default context simharness made (by an earlier call, say) is
    closed: its worker processes stop and its shared memory is unlinked.
    """
    set_default(create_sync_local_cpp_execution_context(
        default_num_clients, max_concurrent_computation_calls, stream_structs))


def set_async_local_cpp_execution_context(default_num_clients: int = 0,
                                          max_concurrent_computation_calls: int = -1,
                                          stream_structs: bool = False) -> None:
    """Makes `create_async_local_cpp_execution_context(...)` the default context."""
    set_default(create_async_local_cpp_execution_context(
        default_num_clients, max_concurrent_computation_calls, stream_structs))


def create_local_python_execution_context(
        default_num_clients: int = 0, max_fanout: int = 100, clients_per_thread: int = 1,
        server_tf_device: Any = None, client_tf_devices: Sequence[Any] = (),
        reference_resolving_clients: bool = False) -> ExecutionContext:
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
            'local_executor_factory(device=...) or process_executor_factory(devices=...)')
    factory = local_executor_factory(clients_per_thread=clients_per_thread,
                                     max_fanout=max_fanout, default_num_clients=n)
    return ExecutionContext(factory, transform_args=eager_values_to_numpy,
                            transform_result=transform_result)


def set_local_python_execution_context(default_num_clients: int = 0, max_fanout: int = 100,
                                       clients_per_thread: int = 1, server_tf_device: Any = None,
                                       client_tf_devices: Sequence[Any] = (),
                                       reference_resolving_clients: bool = False) -> None:
    """Makes `create_local_python_execution_context(...)` the default context."""
    set_default(create_local_python_execution_context(
        default_num_clients, max_fanout, clients_per_thread, server_tf_device,
        client_tf_devices, reference_resolving_clients))


def set_local_execution_context(*args: Any, **kwargs: Any) -> None:
    """TFF 0.17-0.19's name of `set_local_python_execution_context` (same arguments)."""
    set_local_python_execution_context(*args, **kwargs)


__all__ = [
    'create_async_local_cpp_execution_context', 'create_local_python_execution_context',
    'create_sync_local_cpp_execution_context', 'set_async_local_cpp_execution_context',
    'set_local_execution_context', 'set_local_python_execution_context',
    'set_sync_local_cpp_execution_context',
]
