"""`simharness.backends.xla`: TFF's ``tff.backends.xla`` execution contexts (for JAX
computations; `cpp_execution_contexts` tells how they map onto simharness's stacks)."""

from simharness.backends.xla.cpp_execution_contexts import (
    create_async_local_cpp_execution_context,
    create_async_local_execution_context,
    create_sync_local_cpp_execution_context,
    create_sync_local_execution_context,
    set_async_local_cpp_execution_context,
    set_sync_local_cpp_execution_context,
)

__all__ = [
    'create_async_local_cpp_execution_context',
    'create_async_local_execution_context',
    'create_sync_local_cpp_execution_context',
    'create_sync_local_execution_context',
    'set_async_local_cpp_execution_context',
    'set_sync_local_cpp_execution_context',
]
