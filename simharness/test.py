"""`simharness.test`: TFF 0.88's `tff.test`, the helpers TFF's own tests and examples use.

`with_context` / `with_contexts` install a context for one test (`with_contexts` is
absl's `parameterized.named_parameters` over ``(name, context_fn[, environment_fn])``),
and the type assertions raise `AssertionError` with the mismatch, as TFF's do. The static
assertions (`assert_contains_secure_aggregation` and its three kin) look for aggregating
intrinsics in a computation's building blocks, as TFF's ``tff.test`` does: secure ones
(``federated_secure_sum``, ``federated_secure_sum_bitwidth``, ``federated_secure_modular_sum``)
and the others (``federated_aggregate``, ``federated_sum``, ``federated_mean``,
``federated_weighted_mean``, ``federated_min``, ``federated_max``), called on tensors.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Callable, List, Optional, Tuple

from simharness.context import RuntimeErrorContext, set_no_default_context
from simharness.core import building_blocks as bb
from simharness.core.computation import ConcreteComputation
from simharness.core.types import FederatedType, TensorType, Type
from simharness.errors import SimharnessTypeError
from simharness.framework import with_context

__all__ = [
    'assert_contains_secure_aggregation',
    'assert_contains_unsecure_aggregation',
    'assert_not_contains_secure_aggregation',
    'assert_not_contains_unsecure_aggregation',
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


#: The aggregating intrinsics, by kind (TFF's ``AggregationKind``: SECURE, DEFAULT).
_SECURE = frozenset(
    ('federated_secure_sum', 'federated_secure_sum_bitwidth', 'federated_secure_modular_sum')
)
_UNSECURE = frozenset(
    (
        'federated_aggregate',
        'federated_max',
        'federated_mean',
        'federated_min',
        'federated_sum',
        'federated_weighted_mean',
    )
)


def _holds(t: Type, kind: type) -> bool:
    stack = [t]
    while stack:
        t = stack.pop()
        if isinstance(t, kind):
            return True
        stack.extend(t.children())
    return False


def _aggregations(comp: object, uris: frozenset) -> List[bb.Call]:
    """The calls of an intrinsic of `uris` on values holding tensors in `comp`'s building
    blocks, parents after their children."""
    if not isinstance(comp, ConcreteComputation):
        raise SimharnessTypeError(
            f'expected a computation with a type signature (a tff.Computation), got {comp!r} '
            f'of type {type(comp).__name__} (a polymorphic computation has none until called)',
            expected=ConcreteComputation,
            actual=type(comp),
        )
    found: List[bb.Call] = []
    stack: List[Tuple[bb.ComputationBuildingBlock, bool]] = [(comp.to_building_block(), False)]
    while stack:
        node, visited = stack.pop()
        if not visited:
            stack.append((node, True))
            stack.extend((child, False) for child in reversed(node.children()))
            continue
        if (
            isinstance(node, bb.Call)
            and isinstance(node.fn, bb.Intrinsic)
            and node.fn.uri in uris
            and _holds(node.type_signature, FederatedType)
            and node.arg is not None
            and _holds(node.arg.type_signature, TensorType)
        ):
            found.append(node)
    return found


def _listed(calls: List[bb.Call]) -> str:
    return ''.join(f'\n\t{c.compact()}' for c in calls)


def assert_contains_secure_aggregation(comp: object) -> None:
    """Raises `AssertionError` unless `comp` (a computation with a type signature) calls a
    secure aggregation."""
    if not _aggregations(comp, _SECURE):
        raise AssertionError('Expected secure aggregation, but none were found in: ' + repr(comp))


def assert_not_contains_secure_aggregation(comp: object) -> None:
    """Raises `AssertionError` naming them if `comp` calls a secure aggregation."""
    calls = _aggregations(comp, _SECURE)
    if calls:
        raise AssertionError(
            f'Expected no secure aggregations, found {len(calls)}:{_listed(calls)}'
        )


def assert_contains_unsecure_aggregation(comp: object) -> None:
    """Raises `AssertionError` unless `comp` calls an aggregation that is not secure."""
    if not _aggregations(comp, _UNSECURE):
        raise AssertionError(
            'Expected unsecure aggregation, but none were found in:\n' + repr(comp)
        )


def assert_not_contains_unsecure_aggregation(comp: object) -> None:
    """Raises `AssertionError` naming them if `comp` calls an aggregation that is not
    secure."""
    calls = _aggregations(comp, _UNSECURE)
    if calls:
        raise AssertionError(
            f'Expected no unsecure aggregations, found {len(calls)}:{_listed(calls)}'
        )
