"""Fixtures of the ``tff.learning.programs`` ports: a `NativeFederatedContext` installed."""

from __future__ import annotations

from typing import Iterator

import pytest

import simharness as tff
from simharness.context import AsyncExecutionContext
from simharness.program import native_platform
from simharness.stacks import local_executor_factory
from simharness.tensorflow import eager_values_to_numpy, transform_result


@pytest.fixture
def native_context() -> Iterator[native_platform.NativeFederatedContext]:
    """A `NativeFederatedContext` over a thread stack, current in the test (TFF's test context)."""
    async_context = AsyncExecutionContext(
        local_executor_factory(),
        transform_args=eager_values_to_numpy,
        transform_result=transform_result,
        owns_factory=True,
    )
    context = native_platform.NativeFederatedContext(async_context)
    try:
        with tff.framework.get_context_stack().install(context):
            yield context
    finally:
        async_context.close()


@pytest.fixture
def native_tff_stack(tff_stack) -> Iterator[native_platform.NativeFederatedContext]:
    """A `NativeFederatedContext` over the factory of `tff_stack` (each of its stacks (tests/tff/conftest.py: stacks_for))."""
    async_context = AsyncExecutionContext(
        tff_stack.factory, transform_args=eager_values_to_numpy, transform_result=transform_result
    )
    context = native_platform.NativeFederatedContext(async_context)
    try:
        with tff.framework.get_context_stack().install(context):
            yield context
    finally:
        async_context.close()  # its loop thread; the stack's factory stays with `tff_stack`
