"""`simharness.backends.test`: TFF's ``tff.backends.test`` execution contexts.

TFF's test contexts are its local C++ contexts with the secure intrinsics
replaced by plain TF bodies. simharness runs its secure sums as exact plain
sums on every stack already, so these contexts differ from the native ones
only in the stack: the thread stack (`local_executor_factory`), which starts
no process -- what a test wants -- and gives the same bits as the process
stack. Arguments are keyword-only, as in TFF.
"""

from __future__ import annotations

from simharness.backends.native import check_local_args, concurrency_limit, set_default
from simharness.context import AsyncExecutionContext, ExecutionContext
from simharness.stacks import local_executor_factory
from simharness.tensorflow import eager_values_to_numpy, transform_result


def create_sync_test_cpp_execution_context(
    *,
    default_num_clients: int = 0,
    max_concurrent_computation_calls: int = -1,
    stream_structs: bool = False,
) -> ExecutionContext:
    """A synchronous context on the local thread stack (arguments as in `native`).

    Raises:
      SimharnessTypeError: an argument of the wrong type.
      SimharnessValueError: `default_num_clients` < 0.
    """
    n = check_local_args(default_num_clients, stream_structs)
    return ExecutionContext(
        local_executor_factory(default_num_clients=n),
        max_concurrent_calls=concurrency_limit(max_concurrent_computation_calls),
        transform_args=eager_values_to_numpy,
        transform_result=transform_result,
        owns_factory=True,
    )


def create_async_test_cpp_execution_context(
    *,
    default_num_clients: int = 0,
    max_concurrent_computation_calls: int = -1,
    stream_structs: bool = False,
) -> AsyncExecutionContext:
    """As `create_sync_test_cpp_execution_context`, with an awaitable `invoke`."""
    n = check_local_args(default_num_clients, stream_structs)
    return AsyncExecutionContext(
        local_executor_factory(default_num_clients=n),
        max_concurrent_calls=concurrency_limit(max_concurrent_computation_calls),
        transform_args=eager_values_to_numpy,
        transform_result=transform_result,
        owns_factory=True,
    )


def set_sync_test_cpp_execution_context(
    *,
    default_num_clients: int = 0,
    max_concurrent_computation_calls: int = -1,
    stream_structs: bool = False,
) -> None:
    """Makes `create_sync_test_cpp_execution_context(...)` the default context
    (the previous default simharness made is closed)."""
    set_default(
        create_sync_test_cpp_execution_context(
            default_num_clients=default_num_clients,
            max_concurrent_computation_calls=max_concurrent_computation_calls,
            stream_structs=stream_structs,
        )
    )


def set_async_test_cpp_execution_context(
    *,
    default_num_clients: int = 0,
    max_concurrent_computation_calls: int = -1,
    stream_structs: bool = False,
) -> None:
    """Makes `create_async_test_cpp_execution_context(...)` the default context."""
    set_default(
        create_async_test_cpp_execution_context(
            default_num_clients=default_num_clients,
            max_concurrent_computation_calls=max_concurrent_computation_calls,
            stream_structs=stream_structs,
        )
    )


__all__ = [
    'create_async_test_cpp_execution_context',
    'create_sync_test_cpp_execution_context',
    'set_async_test_cpp_execution_context',
    'set_sync_test_cpp_execution_context',
]
