"""TFF's ``tff.backends.xla`` execution contexts, on simharness's process stack.

TFF's XLA backend ran its local C++ runtime with an XLA executor at the leaves (JAX
computations only: TF computations, and the TF that TFF's compiler generates for
intrinsics such as `federated_sum`, failed there). Here a JAX computation is a TF graph
that runs its StableHLO module through XLA (`simharness.jax`), so the XLA contexts are
the native ones (`simharness.backends.native`: the process stack, one worker process per
usable core, started in the background when the context is made) whose arguments may also be JAX arrays (made
numpy, as federated_language_jax's contexts do); TF computations and every intrinsic run
there too.

```
create_sync_local_cpp_execution_context(default_num_clients=0, max_concurrent_computation_calls=-1)
  -> ExecutionContext(local_cpp.shared_local_process_factory(default_num_clients),
                      transform_args=<jax.Array and eager tensors -> numpy>, ...)
create_async_local_cpp_execution_context(...)  -> the same, awaitable calls
set_{sync,async}_local_cpp_execution_context(...) -> made the default context
create_{sync,async}_local_execution_context     -> federated_language_jax's names
```

It imports no JAX: a JAX array is recognized by the module of its type.
"""

from __future__ import annotations

import sys

import numpy as np

from simharness.backends.native import check_local_args, concurrency_limit
from simharness.context import AsyncExecutionContext, ExecutionContext
from simharness.core import context_stack
from simharness.core.structure import map_nest
from simharness.local_cpp import shared_local_process_factory
from simharness.tensorflow import eager_values_to_numpy, transform_result

__all__ = [
    'create_async_local_cpp_execution_context',
    'create_async_local_execution_context',
    'create_sync_local_cpp_execution_context',
    'create_sync_local_execution_context',
    'set_async_local_cpp_execution_context',
    'set_sync_local_cpp_execution_context',
    'transform_args',
]


def _jax_array_to_numpy(value: object) -> object:
    jax = sys.modules.get('jax')  # a JAX array exists only where JAX is loaded
    if jax is not None and isinstance(value, jax.Array):
        return np.asarray(value)
    return value


def transform_args(args: object) -> object:
    """The arguments of a call, with JAX arrays and eager TF values as numpy arrays
    (federated_language_jax's ``transform_args``; datasets are kept)."""
    return eager_values_to_numpy(map_nest(_jax_array_to_numpy, args, structs=True))


def create_sync_local_cpp_execution_context(
    default_num_clients: int = 0, max_concurrent_computation_calls: int = -1
) -> ExecutionContext:
    """A synchronous context on the local process stack (TFF's XLA backend context).

    Args:
      default_num_clients: the number of clients when the arguments do not tell.
      max_concurrent_computation_calls: at most this many computations run at once;
        nonpositive: no limit.

    Returns:
      An `ExecutionContext`; `close()` it to stop its workers (a context set as the
      default is closed when replaced).
    """
    n = check_local_args(default_num_clients, False)
    return ExecutionContext(
        shared_local_process_factory(n),
        max_concurrent_calls=concurrency_limit(max_concurrent_computation_calls),
        transform_args=transform_args,
        transform_result=transform_result,
        owns_factory=True,
    )


def create_async_local_cpp_execution_context(
    default_num_clients: int = 0, max_concurrent_computation_calls: int = -1
) -> AsyncExecutionContext:
    """As `create_sync_local_cpp_execution_context`, with an awaitable `invoke`."""
    n = check_local_args(default_num_clients, False)
    return AsyncExecutionContext(
        shared_local_process_factory(n),
        max_concurrent_calls=concurrency_limit(max_concurrent_computation_calls),
        transform_args=transform_args,
        transform_result=transform_result,
        owns_factory=True,
    )


def set_sync_local_cpp_execution_context(
    default_num_clients: int = 0, max_concurrent_computation_calls: int = -1
) -> None:
    """Makes `create_sync_local_cpp_execution_context(...)` the default context (the
    previous default simharness made is closed)."""
    ctx = create_sync_local_cpp_execution_context(
        default_num_clients, max_concurrent_computation_calls
    )
    context_stack.replace_default(ctx, owned=True)


def set_async_local_cpp_execution_context(
    default_num_clients: int = 0, max_concurrent_computation_calls: int = -1
) -> None:
    """Makes `create_async_local_cpp_execution_context(...)` the default context."""
    ctx = create_async_local_cpp_execution_context(
        default_num_clients, max_concurrent_computation_calls
    )
    context_stack.replace_default(ctx, owned=True)


#: federated_language_jax's names (``federated_language_jax.backend.execution_contexts``).
create_sync_local_execution_context = create_sync_local_cpp_execution_context
create_async_local_execution_context = create_async_local_cpp_execution_context
