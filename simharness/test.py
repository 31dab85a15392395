"""`simharness.test`: TFF 0.88's `tff.test`, the helpers TFF's own tests and examples use.

`with_context` / `with_contexts` install a context for one test (`with_contexts` is
absl's `parameterized.named_parameters` over ``(name, context_fn[, environment_fn])``),
and the type assertions raise `AssertionError` with the mismatch, as TFF's do.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Callable, Optional

from simharness.context import RuntimeErrorContext, set_no_default_context
from simharness.core.types import Type
from simharness.framework import with_context

__all__ = [
    'assert_type_assignable_from',
    'assert_types_equivalent',
    'assert_types_identical',
    'create_runtime_error_context',
    'set_no_default_context',
    'with_context',
    'with_contexts',
]


def create_runtime_error_context() -> RuntimeErrorContext:
    """A context that refuses to run computations (TFF's `create_runtime_error_context`)."""
    return RuntimeErrorContext()


def with_contexts(
    *named_contexts: object,
) -> Callable[[Callable[..., object]], Callable[..., object]]:
    """A decorator that parameterizes a test method by context (TFF's `with_contexts`).

    Each named parameter is ``(name, context_fn)`` or ``(name, context_fn, environment_fn)``
    (or the dict form of absl's `named_parameters`); the test runs once per entry inside
    ``with_context(context_fn, environment_fn)``.

    Raises:
      ValueError: no named contexts.
    """
    if not named_contexts:
        raise ValueError('Expected at least one named parameter, found none.')
    from absl.testing import parameterized

    def decorator(fn: Callable[..., object]) -> Callable[..., object]:
        if asyncio.iscoroutinefunction(fn):

            @functools.wraps(fn)
            @parameterized.named_parameters(*named_contexts)
            async def async_wrapper(
                self: object,
                context_fn: Callable[..., object],
                environment_fn: Optional[Callable[..., object]] = None,
            ):
                await with_context(context_fn, environment_fn)(fn)(self)  # type: ignore[arg-type]

            return async_wrapper

        @functools.wraps(fn)
        @parameterized.named_parameters(*named_contexts)
        def wrapper(
            self: object,
            context_fn: Callable[..., object],
            environment_fn: Optional[Callable[..., object]] = None,
        ) -> None:
            with_context(context_fn, environment_fn)(fn)(self)  # type: ignore[arg-type]

        return wrapper

    return decorator


def assert_type_assignable_from(target_type: Type, source_type: Type) -> None:
    """Raises `AssertionError` unless `target_type` is assignable from `source_type`."""
    if not target_type.is_assignable_from(source_type):
        raise AssertionError(f'{target_type} is not assignable from {source_type}')


def assert_types_equivalent(first_type: Type, second_type: Type) -> None:
    """Raises `AssertionError` unless the two types are equivalent."""
    if not first_type.is_equivalent_to(second_type):
        raise AssertionError(f'{first_type} is not equivalent to {second_type}')


def assert_types_identical(first_type: Type, second_type: Type) -> None:
    """Raises `AssertionError` unless the two types are identical."""
    if not first_type.is_identical_to(second_type):
        raise AssertionError(f'{first_type} is not identical to {second_type}')
