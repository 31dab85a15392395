"""Getting and setting a process's hyperparameters (TFF's ``learning/templates/hparams_base.py``).

```
get_hparams_fn: (S -> H)          default: (S -> <>), an empty OrderedDict
set_hparams_fn: (<S, H> -> S)     default: the state unchanged
```
"""

from __future__ import annotations

import collections
from typing import Optional

from simharness.core import types as T
from simharness.core.computation import Computation, tf_computation
from simharness.learning._typing import TensorStructure
from simharness.templates.iterative_process import check_computation

__all__ = [
    'GetHparamsTypeError',
    'SetHparamsTypeError',
    'build_basic_hparams_getter',
    'build_basic_hparams_setter',
    'type_check_get_hparams_fn',
    'type_check_set_hparams_fn',
]


class GetHparamsTypeError(TypeError):
    """`get_hparams_fn` does not take the state (TFF's class)."""


class SetHparamsTypeError(TypeError):
    """`set_hparams_fn` does not take ``<state, hparams>`` and return a state (TFF's class)."""


def type_check_get_hparams_fn(get_hparams_fn: Computation, state_type: T.Type) -> None:
    """Raises `GetHparamsTypeError` unless `get_hparams_fn` takes `state_type`."""
    check_computation(get_hparams_fn, 'get_hparams_fn')
    param = get_hparams_fn.type_signature.parameter
    if param is None or not param.is_assignable_from(state_type):
        raise GetHparamsTypeError(
            f'The input to get_hparams must be compatible with the state type {state_type}, '
            f'but found type {param}.'
        )


def type_check_set_hparams_fn(set_hparams_fn: Computation, state_type: T.Type) -> None:
    """Raises `SetHparamsTypeError` unless `set_hparams_fn` is ``(<S, H> -> S)``."""
    check_computation(set_hparams_fn, 'set_hparams_fn')
    param = set_hparams_fn.type_signature.parameter
    if not isinstance(param, T.StructType) or len(param) != 2:
        raise SetHparamsTypeError(
            f'Expected two input arguments to set_hparams, but found {param}.'
        )
    if not param[0].is_assignable_from(state_type):
        raise SetHparamsTypeError(
            f'The first input to set_hparams must be compatible with the state type '
            f'{state_type}, but found {param[0]}.'
        )
    result = set_hparams_fn.type_signature.result
    if not result.is_assignable_from(state_type):
        raise SetHparamsTypeError(
            f'The output of set_hparams must be compatible with the state of type '
            f'{state_type} but found {result}.'
        )


def build_basic_hparams_getter(state_type: T.Type) -> Computation:
    """``(S -> <>)``: no hyperparameters (an empty OrderedDict)."""

    @tf_computation(state_type)
    def get_hparams_computation(state: TensorStructure) -> collections.OrderedDict:
        del state
        return collections.OrderedDict()

    return get_hparams_computation


def build_basic_hparams_setter(state_type: T.Type, hparams_type: T.Type) -> Computation:
    """``(<S, H> -> S)``: the state unchanged."""

    @tf_computation(state_type, hparams_type)
    def set_hparams_computation(
        state: TensorStructure, hparams: TensorStructure
    ) -> TensorStructure:
        del hparams
        return state

    return set_hparams_computation


def hparams_pair(
    state_type: T.Type, get_hparams_fn: Optional[Computation], set_hparams_fn: Optional[Computation]
) -> tuple[Computation, Computation]:
    """The checked (getter, setter), each the basic one where None."""
    if get_hparams_fn is not None:
        type_check_get_hparams_fn(get_hparams_fn, state_type)
    else:
        get_hparams_fn = build_basic_hparams_getter(state_type)
    if set_hparams_fn is not None:
        type_check_set_hparams_fn(set_hparams_fn, state_type)
    else:
        set_hparams_fn = build_basic_hparams_setter(
            state_type, get_hparams_fn.type_signature.result
        )
    return get_hparams_fn, set_hparams_fn
