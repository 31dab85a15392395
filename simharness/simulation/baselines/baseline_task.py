"""`BaselineTask`: a task's datasets and its model (TFF's ``baseline_task``)."""

from __future__ import annotations

from typing import Any, Callable

import attrs
import tensorflow as tf

from simharness.learning.models import variable
from simharness.simulation.baselines import task_data

__all__ = ['BaselineTask']


@attrs.define(frozen=True, init=True)
class BaselineTask:
    """A baseline learning simulation: datasets and a model.

    Attributes:
      datasets: a `BaselineTaskDatasets` (the data and its preprocessing).
      model_fn: a no-argument callable returning a
        `tff.learning.models.VariableModel` whose `input_spec` is
        `datasets.element_type_structure`.

    Raises (on construction):
      TypeError: `datasets` is not a `BaselineTaskDatasets`, or `model_fn`
        does not return a `VariableModel`.
      attrs.exceptions.NotCallableError: `model_fn` is not callable.
      ValueError: the model's input spec is not the datasets' element structure.
    """

    datasets: task_data.BaselineTaskDatasets = attrs.field(
        validator=attrs.validators.instance_of(task_data.BaselineTaskDatasets)
    )
    model_fn: Callable[[], Any] = attrs.field(validator=attrs.validators.is_callable())

    def __attrs_post_init__(self) -> None:
        # The model is built once to check it, in a graph of its own so that its variables
        # stay out of the caller's (eager) context.
        with tf.Graph().as_default():
            model = self.model_fn()
        if not isinstance(model, variable.VariableModel):
            raise TypeError(
                'Expected model_fn to output a tff.learning.models.VariableModel, '
                f'found {type(model)} instead'
            )
        element_spec = self.datasets.element_type_structure
        if element_spec != model.input_spec:
            raise ValueError(
                'Dataset element spec and model input spec do not match. Found dataset '
                f'element spec {element_spec}, but model input spec {model.input_spec}'
            )
