"""`ModelWeights`: a model's trainable and non-trainable weights (``tff.learning.models``)."""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Union

import keras
import numpy as np
import tensorflow as tf

from simharness import structure
from simharness.core import types as T
from simharness.core.structure import Struct
from simharness.errors import SimharnessTypeError, SimharnessValueError
from simharness.learning._typing import ModelVariable, TensorLeaf, TensorStructure
from simharness.learning import keras_kinds
from simharness.learning.models import keras_seeds, variable


def _check_model(model: object) -> None:
    if not isinstance(model, (variable.VariableModel, *keras_kinds.models())):
        raise SimharnessTypeError(
            f'expected a tff.learning.models.VariableModel or a keras.Model, got '
            f'{type(model).__name__}',
            expected=variable.VariableModel,
            actual=type(model),
        )


def _unwrap(v: ModelVariable) -> TensorLeaf:
    """A Keras 3 variable's current value as a tensor (eager only)."""
    return tf.identity(v.value) if isinstance(v, keras.Variable) else v


class ModelWeights(NamedTuple):
    """The trainable and non-trainable weights of a model (not its local variables).

    Also holds anything parallel to them: tensors of their values, updates.
    """

    trainable: Any
    non_trainable: Any

    @classmethod
    def from_model(cls, model: Union[variable.VariableModel, keras.Model]) -> 'ModelWeights':
        """The variables of a `VariableModel` or Keras model (eagerly from a Keras model:
        their values as tensors)."""
        _check_model(model)
        if (
            isinstance(model, keras_kinds.models())
            and tf.executing_eagerly()
            and not tf.inside_function()
        ):
            return cls(
                [_unwrap(v) for v in model.trainable_variables],
                [_unwrap(v) for v in keras_seeds.KerasSeeds.weights_of(model)],
            )
        if isinstance(
            model, keras_kinds.models()
        ):  # its weights: not its random layers' seed states
            return cls(model.trainable_variables, keras_seeds.KerasSeeds.weights_of(model))
        return cls(model.trainable_variables, model.non_trainable_variables)

    @classmethod
    def from_tff_result(cls, struct: object) -> 'ModelWeights':
        """`ModelWeights` of lists from a computation's result (a `Struct` or containers)."""
        result = (
            struct
            if isinstance(struct, Struct)
            else structure.from_container(struct, recursive=True)
        )
        return cls(
            [v for _, v in structure.to_elements(result.trainable)],
            [v for _, v in structure.to_elements(result.non_trainable)],
        )

    def assign_weights_to(self, model: Union[variable.VariableModel, keras.Model]) -> None:
        """Assigns these weights to the variables of `model` (a `VariableModel` or Keras model).

        Raises:
          TypeError: `model` is neither.
        """
        _check_model(model)
        if isinstance(model, keras_kinds.models()):
            # Keras' weights are flat lists; zip allows list / tuple differences.
            for var, t in zip(model.trainable_weights, self.trainable):
                var.assign(t)
            for var, t in zip(keras_seeds.KerasSeeds.weights_of(model), self.non_trainable):
                var.assign(t)
        else:
            tf.nest.map_structure(
                lambda var, t: var.assign(t), model.trainable_variables, self.trainable
            )
            tf.nest.map_structure(
                lambda var, t: var.assign(t), model.non_trainable_variables, self.non_trainable
            )

    def convert_variables_to_arrays(self) -> 'ModelWeights':
        """These weights with every variable (or tensor) read into a numpy array.

        Raises:
          ValueError: called inside a graph (a `tf.function` or computation).
        """
        if not tf.executing_eagerly():
            raise SimharnessValueError(
                'Can only convert to numpy array in eager mode outside a @tf.function.'
            )

        def to_arrays(part: TensorStructure) -> TensorStructure:
            if isinstance(part, Struct):
                return structure.map_structure(np.array, part)
            return tf.nest.map_structure(np.array, part)

        return ModelWeights(to_arrays(self.trainable), to_arrays(self.non_trainable))


def weights_type_from_model(
    model: Union[variable.VariableModel, Callable[[], variable.VariableModel]],
) -> T.StructType:
    """The type of the `ModelWeights` of `model` (a `VariableModel` or a no-arg builder).

    A builder is called inside a fresh graph, so its variables touch nothing else.
    """
    if callable(model) and not isinstance(model, variable.VariableModel):
        with tf.Graph().as_default():
            return weights_type_from_model(model())
    if not isinstance(model, variable.VariableModel):
        raise SimharnessTypeError(
            f'expected a tff.learning.models.VariableModel, got {type(model).__name__}',
            expected=variable.VariableModel,
            actual=type(model),
        )
    weights = ModelWeights.from_model(model)
    specs = tf.nest.map_structure(
        lambda v: tf.TensorSpec(v.shape, tf.as_dtype(v.dtype)),
        ModelWeights(list(weights.trainable), list(weights.non_trainable)),
    )
    result = T.to_type(specs)
    assert isinstance(result, T.StructType)  # a ModelWeights of lists
    return result
