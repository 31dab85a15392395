"""TFF's `AggregationProcess` (``core/templates/aggregation_process.py``).

```
initialize: ( -> S@SERVER)
next:       (<S@SERVER, V@CLIENTS, *@CLIENTS> -> <state=S@SERVER, result=V'@SERVER,
                                                  measurements=M@SERVER>)
```
"""

from __future__ import annotations

from typing import Any

from simharness.core import types as T
from simharness.core.computation import Computation
from simharness.errors import SimharnessTypeError
from simharness.templates.errors import TemplateNextFnNumArgsError
from simharness.templates.measured_process import MeasuredProcess

__all__ = ['AggregationNotFederatedError', 'AggregationPlacementError', 'AggregationProcess']

_INPUT_PARAM_INDEX = 1


class AggregationNotFederatedError(SimharnessTypeError):
    """An aggregation's functions do not operate on federated types."""


class AggregationPlacementError(SimharnessTypeError):
    """An aggregation's types are not placed as expected."""


def _flatten_struct(t: T.Type) -> list:
    """The non-struct types of `t` (federated types are leaves), as TFF's structure.flatten."""
    if isinstance(t, T.StructType):
        return [leaf for e in t for leaf in _flatten_struct(e)]
    return [t]


class AggregationProcess(MeasuredProcess):
    """A `MeasuredProcess` that aggregates client values at the server.

    Args:
      initialize_fn: a no-parameter computation returning a state at SERVER.
      next_fn: a computation of ``<S@SERVER, V@CLIENTS, *>`` returning a
        `MeasuredProcessOutput` whose fields are placed at SERVER.

    Raises:
      AggregationNotFederatedError: a type is not federated.
      AggregationPlacementError: the state, value, result or measurements
        are placed elsewhere than above.
      TemplateNextFnNumArgsError: `next_fn` takes fewer than two arguments;
        and the errors of `MeasuredProcess`.
    """

    def __init__(self, initialize_fn: Computation, next_fn: Computation):
        super().__init__(initialize_fn, next_fn, next_is_multi_arg=True)
        init_result = initialize_fn.type_signature.result
        if not isinstance(init_result, T.FederatedType):
            raise AggregationNotFederatedError(
                f'Provided `initialize_fn` must return a federated type, but found return type: '
                f'{init_result}. Tip: if you see a collection of federated types, wrap the '
                'returned value in federated_zip before returning it.',
                actual=init_result,
            )
        next_type: Any = next_fn.type_signature
        leaves = _flatten_struct(next_type.parameter) + _flatten_struct(next_type.result)
        unfederated = [t for t in leaves if not isinstance(t, T.FederatedType)]
        if unfederated:
            listed = '\n- '.join(str(t) for t in unfederated)
            raise AggregationNotFederatedError(
                f'Provided `next_fn` must be a *federated* computation, that is, operate on '
                f'FederatedTypes, but found next_fn with type signature: {next_type}\n'
                f'The non-federated types are:\n- {listed}.',
                actual=next_type,
            )
        if init_result.placement is not T.SERVER:
            raise AggregationPlacementError(
                f'The state controlled by an AggregationProcess must be placed at the SERVER, '
                f'but found type: {init_result}.',
                actual=init_result,
            )
        param: Any = next_type.parameter
        result: Any = next_type.result
        if len(param) < 2:
            raise TemplateNextFnNumArgsError(
                f'The `next_fn` must have at least two input arguments, but found the following '
                f'input type: {param}.',
                actual=param,
            )
        if param[_INPUT_PARAM_INDEX].placement is not T.CLIENTS:
            raise AggregationPlacementError(
                f'The second input argument of `next_fn` must be placed at CLIENTS but found '
                f'{param[_INPUT_PARAM_INDEX]}.',
                actual=param[_INPUT_PARAM_INDEX],
            )
        if result.result.placement is not T.SERVER:
            raise AggregationPlacementError(
                f'The "result" attribute of return type of `next_fn` must be placed at SERVER, '
                f'but found {result.result}.',
                actual=result.result,
            )
        if result.measurements.placement is not T.SERVER:
            raise AggregationPlacementError(
                f'The "measurements" attribute of return type of `next_fn` must be placed at '
                f'SERVER, but found {result.measurements}.',
                actual=result.measurements,
            )

    @property
    def is_weighted(self) -> bool:
        """True if `next` takes a third argument (the weights)."""
        param: Any = self.next.type_signature.parameter
        return len(param) == 3
