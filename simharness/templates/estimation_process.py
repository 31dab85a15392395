"""TFF's `EstimationProcess` (``core/templates/estimation_process.py``).

An `IterativeProcess` with a `report` computation that maps the state to an
estimate; `map(fn)` gives a process reporting ``fn(report(state))``.
"""

from __future__ import annotations

from typing import Optional

from simharness.core.computation import Computation, federated_computation
from simharness.errors import SimharnessTypeError
from simharness.templates.errors import TemplateStateNotAssignableError
from simharness.templates.iterative_process import IterativeProcess, check_computation

__all__ = ['EstimateNotAssignableError', 'EstimationProcess']


class EstimateNotAssignableError(SimharnessTypeError):
    """An estimate is not assignable to the type expected (a `TypeError`)."""


class EstimationProcess(IterativeProcess):
    """A stateful process that can report an estimate of some value from its state.

    Args:
      initialize_fn, next_fn, next_is_multi_arg: as `IterativeProcess`.
      report_fn: a computation whose parameter accepts the state type.

    Raises:
      TemplateStateNotAssignableError: the state is not assignable to
        `report_fn`'s parameter; and the errors of `IterativeProcess`.
    """

    def __init__(
        self,
        initialize_fn: Computation,
        next_fn: Computation,
        report_fn: Computation,
        next_is_multi_arg: Optional[bool] = None,
    ):
        super().__init__(initialize_fn, next_fn, next_is_multi_arg=next_is_multi_arg)
        check_computation(report_fn, 'report_fn')
        report_param = report_fn.type_signature.parameter
        if report_param is None or not report_param.is_assignable_from(self.state_type):
            raise TemplateStateNotAssignableError(
                f'The state type of the process must be assignable to the input argument of '
                f'`report_fn`, but the state type is: {self.state_type}\nand the argument of '
                f'`report_fn` is:\n{report_param}',
                expected=report_param,
                actual=self.state_type,
            )
        self._report_fn = report_fn

    @property
    def report(self) -> Computation:
        """The computation that computes the current estimate from the state."""
        return self._report_fn

    def map(self, map_fn: Computation) -> 'EstimationProcess':
        """A process with the same `initialize` and `next` reporting ``map_fn(report(state))``.

        Raises:
          EstimateNotAssignableError: `report`'s result is not assignable to
            `map_fn`'s parameter.
        """
        check_computation(map_fn, 'map_fn')
        estimate_type = self.report.type_signature.result
        map_param = map_fn.type_signature.parameter
        if map_param is None or not map_param.is_assignable_from(estimate_type):
            raise EstimateNotAssignableError(
                f'The return type of `report` of this process must be assignable to the input '
                f'argument of `map_fn`, but `report` returns type:\n{estimate_type}\nand the '
                f'argument of `map_fn` is:\n{map_param}',
                expected=map_param,
                actual=estimate_type,
            )
        report = self.report
        transformed = federated_computation(lambda state: map_fn(report(state)), self.state_type)
        return EstimationProcess(
            initialize_fn=self.initialize, next_fn=self.next, report_fn=transformed
        )
