"""TFF's `IterativeProcess` and `is_stateful` (``core/templates/iterative_process.py``).

```
process = IterativeProcess(initialize_fn, next_fn)   # both computations
state = process.initialize()
for _ in range(rounds):
    state, metrics = process.next(state, data)      # state first, in and out
```

The constructor checks the types as TFF does: `initialize_fn` takes no
parameter; its result (the state type) is assignable to `next_fn`'s whole
parameter or to its first element; `next_fn`'s result (or its first
element) is assignable to the state type.
"""

from __future__ import annotations

from typing import Any, Optional

from simharness.core import types as T
from simharness.core.computation import Computation
from simharness.errors import SimharnessTypeError
from simharness.templates.errors import (
    TemplateInitFnParamNotEmptyError,
    TemplateNextFnNumArgsError,
    TemplateStateNotAssignableError,
)

__all__ = ['IterativeProcess', 'is_stateful']


def check_computation(fn: Any, what: str) -> Computation:
    """`fn` if it is a concrete computation, else TFF's `TypeError` ("Expected ...Computation")."""
    if not isinstance(fn, Computation):
        raise SimharnessTypeError(
            f'Expected simharness.Computation, found {type(fn).__name__}: {what} must be a '
            f'computation (decorated with tf_computation or federated_computation), got {fn!r}',
            expected=Computation,
            actual=type(fn),
        )
    fn.type_signature  # a polymorphic computation raises: it has no type yet
    return fn


def first_element(t: Optional[T.Type]) -> Optional[T.Type]:
    """The first element of a non-empty struct type, else None."""
    return t[0] if isinstance(t, T.StructType) and len(t) > 0 else None


def _state_type(
    init_result: T.Type, next_param: Optional[T.Type], next_is_multi_arg: Optional[bool]
) -> T.Type:
    """The state type: `next_fn`'s whole parameter or its first element."""
    if next_param is None:
        raise TemplateNextFnNumArgsError(
            f'next_fn takes no argument; it must take the state (of type {init_result}) first'
        )
    first = first_element(next_param)
    whole_ok = next_param.is_assignable_from(init_result)
    first_ok = first is not None and first.is_assignable_from(init_result)
    if next_is_multi_arg is None:
        if whole_ok:
            return next_param
        if first is not None and first_ok:
            return first
        where = 'the whole argument or the first argument'
    elif next_is_multi_arg:
        if first is None:
            raise TemplateNextFnNumArgsError(
                f'Expected `next_parameter_type` to be a structure type of at least length '
                f'one (next_is_multi_arg=True), but found type: {next_param}'
            )
        if first_ok:
            return first
        where = 'the first argument'
    else:
        if whole_ok:
            return next_param
        where = 'the whole argument'
    raise TemplateStateNotAssignableError(
        f'the result type of initialize_fn, {init_result}, is not assignable to {where} of '
        f'next_fn, whose parameter type is {next_param}',
        expected=next_param,
        actual=init_result,
    )


class IterativeProcess:
    """An initialization and a step iterated on a state (TFF's `IterativeProcess`).

    Args:
      initialize_fn: a no-parameter computation returning the initial state
        of type S.
      next_fn: a computation whose parameter is S, or a struct whose first
        element is S, and whose result is S or a struct whose first element
        is S.
      next_is_multi_arg: True when `next_fn` takes the state and more
        arguments, False when it takes only the state; None: either.

    Raises:
      SimharnessTypeError: a function is not a (concrete) computation.
      TemplateInitFnParamNotEmptyError: `initialize_fn` takes a parameter.
      TemplateStateNotAssignableError: the state types do not line up.
      TemplateNextFnNumArgsError: `next_fn` takes no state argument.
    """

    def __init__(
        self,
        initialize_fn: Computation,
        next_fn: Computation,
        next_is_multi_arg: Optional[bool] = None,
    ):
        if next_is_multi_arg is not None and not isinstance(next_is_multi_arg, bool):
            raise SimharnessTypeError(
                f'next_is_multi_arg must be a bool or None, got {next_is_multi_arg!r} of type '
                f'{type(next_is_multi_arg).__name__}',
                expected=bool,
                actual=type(next_is_multi_arg),
            )
        check_computation(initialize_fn, 'initialize_fn')
        init_type = initialize_fn.type_signature
        if init_type.parameter is not None:
            raise TemplateInitFnParamNotEmptyError(
                f'initialize_fn must take no parameter, but takes {init_type.parameter}',
                actual=init_type.parameter,
            )
        check_computation(next_fn, 'next_fn')
        next_type = next_fn.type_signature
        state_type = _state_type(init_type.result, next_type.parameter, next_is_multi_arg)
        result = next_type.result
        first_result = first_element(result)
        if not (
            state_type.is_assignable_from(result)
            or (first_result is not None and state_type.is_assignable_from(first_result))
        ):
            raise TemplateStateNotAssignableError(
                f'next_fn returns {result}, whose first element (or whole) must be assignable to '
                f'the state type {state_type}',
                expected=state_type,
                actual=result,
            )
        self._initialize_fn = initialize_fn
        self._next_fn = next_fn
        self._state_type = state_type

    @property
    def initialize(self) -> Computation:
        """The no-parameter computation that returns the initial state."""
        return self._initialize_fn

    @property
    def next(self) -> Computation:
        """The computation that takes the state (first) and returns the next one (first)."""
        return self._next_fn

    @property
    def state_type(self) -> T.Type:
        """The type of the process's state."""
        return self._state_type


def is_stateful(process: IterativeProcess) -> bool:
    """Whether the process's state holds any value (not only empty structs).

    Args:
      process: an `IterativeProcess`.

    Returns:
      False when the state type (unplaced) contains only struct types.

    Raises:
      SimharnessTypeError: `process` is not an `IterativeProcess`.
    """
    if not isinstance(process, IterativeProcess):
        raise SimharnessTypeError(
            f'process must be an IterativeProcess, got {type(process).__name__}',
            expected=IterativeProcess,
            actual=type(process),
        )
    t = process.state_type
    if isinstance(t, T.FederatedType):
        t = t.member
    return len(T.flatten_type(t)) > 0  # an empty struct (nested or not) has no leaves
