"""`simharness.templates`: TFF's templates (``tff.templates``).

`IterativeProcess`, `MeasuredProcess` (with `MeasuredProcessOutput`,
`chain_measured_processes`, `concatenate_measured_processes`),
`AggregationProcess`, `EstimationProcess`, `is_stateful`, and TFF's error
classes (all `TypeError`s). The constructors check the types as TFF does.
"""

from simharness.templates.aggregation_process import (
    AggregationNotFederatedError,
    AggregationPlacementError,
    AggregationProcess,
)
from simharness.templates.errors import (
    TemplateInitFnParamNotEmptyError,
    TemplateNextFnNumArgsError,
    TemplateNotFederatedError,
    TemplateNotMeasuredProcessOutputError,
    TemplatePlacementError,
    TemplateStateNotAssignableError,
)
from simharness.templates.estimation_process import EstimateNotAssignableError, EstimationProcess
from simharness.templates.iterative_process import IterativeProcess, is_stateful
from simharness.templates.measured_process import (
    MeasuredProcess,
    MeasuredProcessOutput,
    chain_measured_processes,
    concatenate_measured_processes,
)

__all__ = [
    'AggregationNotFederatedError',
    'AggregationPlacementError',
    'AggregationProcess',
    'EstimateNotAssignableError',
    'EstimationProcess',
    'IterativeProcess',
    'MeasuredProcess',
    'MeasuredProcessOutput',
    'TemplateInitFnParamNotEmptyError',
    'TemplateNextFnNumArgsError',
    'TemplateNotFederatedError',
    'TemplateNotMeasuredProcessOutputError',
    'TemplatePlacementError',
    'TemplateStateNotAssignableError',
    'chain_measured_processes',
    'concatenate_measured_processes',
    'is_stateful',
]
