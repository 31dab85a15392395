"""Checks the learning templates share (federated functions, placements)."""

from __future__ import annotations

from typing import List, Optional

from simharness.core import types as T
from simharness.core.computation import Computation
from simharness.templates.errors import (
    TemplateNextFnNumArgsError,
    TemplateNotFederatedError,
    TemplatePlacementError,
)


def struct_leaves(t: Optional[T.Type]) -> List[T.Type]:
    """The non-struct types inside `t` (structs opened, everything else a leaf)."""
    if t is None:
        return []
    if isinstance(t, T.StructType):
        return [leaf for e in t for leaf in struct_leaves(e)]
    return [t]


def check_initialize_at_server(initialize_fn: Computation, what: str) -> None:
    """`initialize_fn` returns a federated value placed at SERVER (TFF's errors)."""
    result = initialize_fn.type_signature.result
    if not isinstance(result, T.FederatedType):
        raise TemplateNotFederatedError(
            f'Provided `initialize_fn` must return a federated type, but found return type:\n'
            f'{result}\nTip: If you see a collection of federated types, try wrapping the '
            f'returned value in `federated_zip` before returning.',
            actual=result,
        )
    if result.placement is not T.SERVER:
        raise TemplatePlacementError(
            f'The state controlled by a `{what}` must be placed at the SERVER, but found type: '
            f'{result}.',
            actual=result,
        )


def check_next_is_federated(next_fn: Computation) -> None:
    """Every parameter and result of `next_fn` is federated (TFF's `TemplateNotFederatedError`)."""
    sig = next_fn.type_signature
    offending = [
        t
        for t in struct_leaves(sig.parameter) + struct_leaves(sig.result)
        if not isinstance(t, T.FederatedType)
    ]
    if offending:
        listed = '\n- '.join(str(t) for t in offending)
        raise TemplateNotFederatedError(
            f'Provided `next_fn` must be a *federated* computation, that is, operate on '
            f'`FederatedType`s, but found\nnext_fn with type signature:\n{sig}\n'
            f'The non-federated types are:\n {listed}.',
            actual=sig,
        )


def next_params(next_fn: Computation, count: int) -> T.StructType:
    """`next_fn`'s parameter, a struct of `count` arguments (TFF's `TemplateNextFnNumArgsError`)."""
    param = next_fn.type_signature.parameter
    words = {2: 'two', 3: 'three'}.get(count, str(count))
    if not isinstance(param, T.StructType):
        raise TemplateNextFnNumArgsError(
            f'The `next_fn` must have exactly {words} input arguments, but found the following '
            f'input type which is not a Struct: {param}.',
            actual=param,
        )
    if len(param) != count:
        listed = '\n- '.join(str(t) for t in param)
        raise TemplateNextFnNumArgsError(
            f'The `next_fn` must have exactly {words} input arguments, but found {len(param)} '
            f'input arguments:\n{listed}',
            actual=param,
        )
    return param


_ORDINALS = {1: 'second', 2: 'third'}


def check_param_placement(param: T.StructType, index: int, placement: T.PlacementLiteral) -> None:
    """Argument `index` of `next_fn` is placed at `placement` (TFF's `TemplatePlacementError`)."""
    t = param[index]
    if not isinstance(t, T.FederatedType) or t.placement is not placement:
        raise TemplatePlacementError(
            f'The {_ORDINALS.get(index, str(index))} input argument of `next_fn` must be placed '
            f'at {placement} but found {t}.',
            expected=placement,
            actual=t,
        )


def check_output_placement(
    next_fn: Computation, attribute: str, placement: T.PlacementLiteral
) -> T.Type:
    """The `attribute` of `next_fn`'s result is placed at `placement`; returns its type."""
    t = getattr(next_fn.type_signature.result, attribute)
    if not isinstance(t, T.FederatedType) or t.placement is not placement:
        raise TemplatePlacementError(
            f'The "{attribute}" attribute of the return type of `next_fn` must be placed at '
            f'{placement}, but found {t}.',
            expected=placement,
            actual=t,
        )
    return t
