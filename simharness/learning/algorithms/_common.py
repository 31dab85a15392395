"""What the algorithm builders share: the initial weights of a `model_fn`, argument checks."""

from __future__ import annotations

from typing import Callable, Union

import tensorflow as tf

from simharness.core import types as T
from simharness.core import narrowing as N
from simharness.core.computation import Computation, tf_computation
from simharness.errors import SimharnessTypeError
from simharness.learning.models import functional, variable
from simharness.learning.models.model_weights import ModelWeights
from simharness.learning.optimizers import keras_optimizer
from simharness.learning.optimizers.optimizer import Optimizer
from simharness.templates.aggregation_process import AggregationProcess

ModelFn = Union[Callable[[], variable.VariableModel], functional.FunctionalModel]


def check_model_fn(model_fn: object) -> None:
    """A callable or a `FunctionalModel` (TFF's error otherwise)."""
    if not callable(model_fn) and not isinstance(model_fn, functional.FunctionalModel):
        raise SimharnessTypeError(
            'If `model_fn` is not a callable, it must be an instance of '
            f'`tff.learning.models.FunctionalModel`. Got {type(model_fn)}',
            expected=functional.FunctionalModel,
            actual=type(model_fn),
        )


def initial_model_weights_fn(model_fn: ModelFn) -> Computation:
    """``( -> ModelWeights)``: the initial weights of a new model of `model_fn`."""
    check_model_fn(model_fn)
    if not callable(model_fn):

        @tf_computation()
        def functional_initial_weights() -> ModelWeights:
            trainable, non_trainable = model_fn.initial_weights
            return ModelWeights(
                tuple(tf.convert_to_tensor(w) for w in trainable),
                tuple(tf.convert_to_tensor(w) for w in non_trainable),
            )

        return functional_initial_weights

    @tf_computation()
    def variable_initial_weights() -> ModelWeights:
        model = model_fn()
        if not isinstance(model, variable.VariableModel):
            raise SimharnessTypeError(
                'When `model_fn` is a callable, it return instances of '
                'tff.learning.models.VariableModel. Instead callable returned type: '
                f'{type(model)}',
                expected=variable.VariableModel,
                actual=type(model),
            )
        return ModelWeights.from_model(model)

    return variable_initial_weights


def check_instance(value: object, cls: Union[type, tuple[type, ...]], name: str) -> None:
    """Raises a `SimharnessTypeError` naming `name` unless `value` is a `cls`."""
    if not isinstance(value, cls):
        names = cls.__name__ if isinstance(cls, type) else ' or '.join(c.__name__ for c in cls)
        raise SimharnessTypeError(
            f'{name} must be a {names}, got {value!r} of type {type(value).__name__}',
            expected=cls,
            actual=type(value),
        )


def tff_optimizer(optimizer: keras_optimizer.OptimizerOrKerasFn, name: str) -> Optimizer:
    """`optimizer`, which must be a TFF `Optimizer` (a `FunctionalModel` takes no Keras one)."""
    if not isinstance(optimizer, Optimizer):
        raise SimharnessTypeError(
            f'`{name}` must be a `tff.learning.optimizers.Optimizer` with a '
            f'`tff.learning.models.FunctionalModel`, got {type(optimizer)}',
            expected=Optimizer,
            actual=type(optimizer),
        )
    return optimizer


def check_aggregator_keeps_type(aggregator: AggregationProcess) -> None:
    """The aggregator's server result has the type of its client value (TFF's check)."""
    sig = aggregator.next.type_signature
    client_value = N.member_of(N.parameter_element(sig, 1))
    server_value = N.member_of(N.as_struct(sig.result)[1])
    if not client_value.is_equivalent_to(server_value):
        raise SimharnessTypeError(
            '`model_aggregator` does not produce a compatible `AggregationProcess`. The '
            'processes must retain the type structure of the inputs on the server, but got '
            f'{client_value} != {server_value}.',
            expected=client_value,
            actual=server_value,
        )


def model_update_type(
    model_fn: ModelFn, model_weights_type: T.StructType
) -> Union[T.TensorType, T.StructType]:
    """The type of a model update: the trainable weights."""
    return N.as_tensor_or_struct(
        model_weights_type.trainable if callable(model_fn) else model_weights_type[0]
    )
