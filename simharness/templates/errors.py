"""The error classes of `simharness.templates` (TFF's ``core/templates/errors.py``).

All are `TypeError`s (through `SimharnessTypeError`), as TFF's.
"""

from __future__ import annotations

from simharness.errors import SimharnessTypeError

__all__ = [
    'TemplateInitFnParamNotEmptyError',
    'TemplateNextFnNumArgsError',
    'TemplateNotFederatedError',
    'TemplateNotMeasuredProcessOutputError',
    'TemplatePlacementError',
    'TemplateStateNotAssignableError',
]


class TemplateInitFnParamNotEmptyError(SimharnessTypeError):
    """`initialize_fn` takes a parameter."""


class TemplateStateNotAssignableError(SimharnessTypeError):
    """A state type is not assignable where the state goes."""


class TemplateNotMeasuredProcessOutputError(SimharnessTypeError):
    """A `MeasuredProcess`'s `next_fn` does not return a `MeasuredProcessOutput`."""


class TemplateNextFnNumArgsError(SimharnessTypeError):
    """`next_fn` does not take the number of arguments expected."""


class TemplateNotFederatedError(SimharnessTypeError):
    """A template's functions are not federated."""


class TemplatePlacementError(SimharnessTypeError):
    """A template's types are not placed as expected."""
