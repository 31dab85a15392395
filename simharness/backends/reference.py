"""`simharness.backends.reference`: TFF v0.19's ``tff.backends.reference`` (2021).

TFF's reference context was a pure-Python interpreter of computations, kept as
the golden standard for its other contexts; TFF removed it. Here its two
functions make the same context as `simharness.backends.test`: the local thread
stack, which starts no process and gives the same bits as every other stack
(the number of clients is inferred from the arguments, as the reference
context did).
"""

from __future__ import annotations

from simharness.backends import test
from simharness.context import ExecutionContext


def create_reference_context() -> ExecutionContext:
    """A synchronous context on the local thread stack (TFF v0.19's function)."""
    return test.create_sync_test_cpp_execution_context()


def set_reference_context() -> None:
    """Makes `create_reference_context()` the default context (TFF v0.19's function)."""
    test.set_sync_test_cpp_execution_context()


__all__ = ['create_reference_context', 'set_reference_context']
