"""TFF's `MeasuredProcess`, its output and its compositions (``core/templates/measured_process.py``).

```
next(state, x) -> MeasuredProcessOutput(state=S', result=y, measurements=m)
chain_measured_processes({F, G}):        y = G(F(x)),   state <F=.., G=..>, measurements <F=.., G=..>
concatenate_measured_processes({F, G}):  <F=F(x_F), G=G(x_G)>
```
"""

from __future__ import annotations

import collections
from typing import Any, Mapping, NamedTuple, Optional

from simharness.core import intrinsics as I
from simharness.core import types as T
from simharness.core.computation import Computation, federated_computation
from simharness.errors import SimharnessTypeError
from simharness.templates.errors import (
    TemplateNotMeasuredProcessOutputError,
    TemplateStateNotAssignableError,
)
from simharness.templates.iterative_process import IterativeProcess

__all__ = [
    'MeasuredProcess',
    'MeasuredProcessOutput',
    'chain_measured_processes',
    'concatenate_measured_processes',
]


class MeasuredProcessOutput(NamedTuple):
    """What a `MeasuredProcess`'s `next` returns.

    Attributes:
      state: passed to the next call of `next`.
      result: the process's result for this call.
      measurements: metrics about the computation of `result`.
    """

    state: object
    result: object
    measurements: object


class MeasuredProcess(IterativeProcess):
    """An `IterativeProcess` whose `next` returns a `MeasuredProcessOutput`.

    Args are those of `IterativeProcess`.

    Raises:
      TemplateNotMeasuredProcessOutputError: `next_fn` does not return a
        `MeasuredProcessOutput` <state=S,result=O,measurements=M> (another
        namedtuple or a dict of those names is refused, as in TFF).
      TemplateStateNotAssignableError: the `state` of the output is not
        assignable to the state type; and the errors of `IterativeProcess`.
    """

    def __init__(
        self,
        initialize_fn: Computation,
        next_fn: Computation,
        next_is_multi_arg: Optional[bool] = None,
    ):
        super().__init__(initialize_fn, next_fn, next_is_multi_arg)
        result = next_fn.type_signature.result
        if not (isinstance(result, T.StructType) and result.container is MeasuredProcessOutput):
            raise TemplateNotMeasuredProcessOutputError(
                f'the next_fn of a MeasuredProcess must return a MeasuredProcessOutput '
                f'<state=S,result=O,measurements=M>, but returns {result}',
                actual=result,
            )
        if not self.state_type.is_assignable_from(result.state):
            raise TemplateStateNotAssignableError(
                f'the state of the MeasuredProcessOutput that next_fn returns ({result.state}) '
                f'must be assignable to its first argument, {self.state_type}',
                expected=self.state_type,
                actual=result.state,
            )


def _value_param(process: MeasuredProcess) -> T.Type:
    param: Any = process.next.type_signature.parameter
    return param[1]


def _check_processes(measured_processes: Mapping[str, MeasuredProcess]) -> None:
    if not isinstance(measured_processes, Mapping) or not measured_processes:
        raise SimharnessTypeError(
            f'measured_processes must be a non-empty OrderedDict of name -> MeasuredProcess, '
            f'got {measured_processes!r}',
            actual=type(measured_processes),
        )
    for name, p in measured_processes.items():
        if not isinstance(p, IterativeProcess):
            raise SimharnessTypeError(
                f'measured_processes[{name!r}] must be a MeasuredProcess, got {type(p).__name__}',
                expected=MeasuredProcess,
                actual=type(p),
            )


def _zipped_initialize(measured_processes: Mapping[str, MeasuredProcess]) -> Computation:
    @federated_computation
    def initialize():
        try:
            return I.federated_zip(
                collections.OrderedDict(
                    (name, p.initialize()) for name, p in measured_processes.items()
                )
            )
        except TypeError as e:
            states = {name: str(p.state_type) for name, p in measured_processes.items()}
            raise SimharnessTypeError(
                'Cannot concatenate the initialization functions as not all '
                f'MeasuredProcesses have the same placement of the state: {states}.'
            ) from e

    return initialize


def _server_state_type(measured_processes: Mapping[str, MeasuredProcess]) -> T.FederatedType:
    members = []
    for name, p in measured_processes.items():
        st = p.state_type
        if not isinstance(st, T.FederatedType) or st.placement is not T.SERVER:
            states = {n: str(q.state_type) for n, q in measured_processes.items()}
            raise SimharnessTypeError(
                'Cannot concatenate the initialization functions as not all '
                f'MeasuredProcesses have the same placement of the state: {states} (the state '
                f'of {name!r} must be placed at SERVER)',
                actual=st,
            )
        members.append((name, st.member))
    return T.FederatedType(T.StructType(members, container=collections.OrderedDict), T.SERVER)


def chain_measured_processes(measured_processes: Mapping[str, MeasuredProcess]) -> MeasuredProcess:
    """The composition of `MeasuredProcess`es: each feeds its result to the next.

    The composition's state is ``<F=F.state, G=G.state>`` at SERVER, its
    result that of the last process, its measurements
    ``<F=F.measurements, G=G.measurements>`` at SERVER.

    Args:
      measured_processes: an OrderedDict of name -> `MeasuredProcess`.

    Returns:
      A `MeasuredProcess`.

    Raises:
      TypeError: the states are placed differently, or a process cannot
        take the result of the one before.
    """
    _check_processes(measured_processes)
    initialize = _zipped_initialize(measured_processes)
    first = next(iter(measured_processes.values()))
    first_param: Any = first.next.type_signature.parameter
    value_type = first_param[1]
    state_type = _server_state_type(measured_processes)

    @federated_computation(state_type, value_type)
    def next_fn(state, values):
        new_states, measurements = collections.OrderedDict(), collections.OrderedDict()
        for name, process in measured_processes.items():
            param: Any = process.next.type_signature.parameter
            expected = param[1]
            if not values.type_signature.is_assignable_from(expected):
                raise SimharnessTypeError(
                    f'Cannot call function {name} of type {process.next.type_signature} with '
                    f'value of type {values.type_signature}.',
                    expected=expected,
                    actual=values.type_signature,
                )
            output = process.next(state[name], values)
            new_states[name] = output.state
            measurements[name] = output.measurements
            values = output.result
        return MeasuredProcessOutput(
            state=I.federated_zip(new_states),
            result=values,
            measurements=I.federated_zip(measurements),
        )

    return MeasuredProcess(initialize, next_fn)


def concatenate_measured_processes(
    measured_processes: Mapping[str, MeasuredProcess],
) -> MeasuredProcess:
    """The concatenation of `MeasuredProcess`es: each runs on its own input.

    ``next(<F=s_F, G=s_G>, <F=x_F, G=x_G>)`` returns the result
    ``<F=F(x_F), G=G(x_G)>`` with the states and measurements concatenated
    likewise.

    Args:
      measured_processes: an OrderedDict of name -> `MeasuredProcess`.

    Returns:
      A `MeasuredProcess`.

    Raises:
      TypeError: the states are placed differently.
    """
    _check_processes(measured_processes)
    initialize = _zipped_initialize(measured_processes)
    state_type = _server_state_type(measured_processes)
    values_type = T.StructType(
        [(name, _value_param(p)) for name, p in measured_processes.items()],
        container=collections.OrderedDict,
    )

    @federated_computation(state_type, values_type)
    def next_fn(state, values):
        new_states, results, measurements = (
            collections.OrderedDict(),
            collections.OrderedDict(),
            collections.OrderedDict(),
        )
        for name, process in measured_processes.items():
            output = process.next(state[name], values[name])
            new_states[name] = output.state
            results[name] = output.result
            measurements[name] = output.measurements
        return MeasuredProcessOutput(
            state=I.federated_zip(new_states),
            result=results,
            measurements=I.federated_zip(measurements),
        )

    return MeasuredProcess(initialize, next_fn)
