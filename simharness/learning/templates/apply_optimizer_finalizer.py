"""A finalizer that applies an optimizer to the weights (TFF's ``apply_optimizer_finalizer.py``).

```
state:        the optimizer's state (initialize(specs of the trainable weights))
next:         new_state, new_trainable = optimizer.next(state, trainable, update)
              rejected (by should_reject_update; default: a non-finite update):
              state and weights unchanged
result:       ModelWeights(new_trainable, non_trainable)
measurements: OrderedDict(update_non_finite=0|1) (of the default rejection)
hparams:      optimizer.get_hparams(state) / set_hparams(state, hparams)
```

The optimizer is a `tff.learning.optimizers.Optimizer`, or, as in TFF up to
v0.86, a no-argument function returning a Keras optimizer: then the state is
that optimizer's variables (``[iteration, learning_rate, slots...]`` for
Keras 3, see `keras_optimizer`), made afresh in each computation and assigned
from the state before each ``apply_gradients``, and there are no hparams.
"""

from __future__ import annotations

import collections
from typing import Callable, Optional, Tuple, Union, cast

import tensorflow as tf

from simharness.core import intrinsics as I
from simharness.core import types as T
from simharness.core import narrowing as N
from simharness.core.computation import Computation, federated_computation, tf_computation
from simharness.core.tracing import Value
from simharness.errors import SimharnessTypeError
from simharness.learning._typing import SpecStructure, TensorStructure
from simharness.learning.models.model_weights import ModelWeights
from simharness.learning.optimizers import keras_optimizer
from simharness.learning.optimizers.optimizer import Optimizer
from simharness.learning.templates import finalizers
from simharness.learning.templates._tensor_utils import any_non_finite
from simharness.templates.measured_process import MeasuredProcessOutput

__all__ = ['build_apply_optimizer_finalizer', 'reject_non_finite_update']

#: ``(optimizer state, update) -> (reject, measurements)``.
RejectFn = Callable[
    [TensorStructure, TensorStructure], Tuple[Union[bool, tf.Tensor], Optional[TensorStructure]]
]


def reject_non_finite_update(
    state: TensorStructure, update: TensorStructure
) -> Tuple[tf.Tensor, collections.OrderedDict[str, tf.Tensor]]:
    """Rejects an update with a NaN or Inf; measures ``update_non_finite`` (0 or 1)."""
    del state
    has_non_finite = any_non_finite(update)
    return tf.equal(has_non_finite, 1), collections.OrderedDict(update_non_finite=has_non_finite)


def _tensor_specs(t: T.Type) -> SpecStructure:
    """`tf.TensorSpec`s in the Python containers of `t` (lists where the struct has none)."""
    if isinstance(t, T.TensorType):
        return tf.TensorSpec(t.shape, tf.as_dtype(t.dtype))
    if isinstance(t, T.StructType):
        items = [_tensor_specs(e) for e in t]
        container = t.container
        if container is None or container is list:
            return items
        if container is tuple:
            return tuple(items)
        if issubclass(container, dict):
            return container(zip(t.names, items))
        return cast(SpecStructure, container(*items))  # a namedtuple or attrs class of specs
    raise SimharnessTypeError(f'model weights must hold only tensors, found {t}', actual=t)


def _is_model_weights_type(t: object) -> bool:
    def federated_inside(x: T.Type) -> bool:
        return isinstance(x, T.FederatedType) or (
            isinstance(x, T.StructType) and any(federated_inside(e) for e in x)
        )

    return isinstance(t, T.StructType) and t.container is ModelWeights and not federated_inside(t)


def _build_tff_optimizer_initialize_and_next(
    model_weights_type: T.StructType, optimizer: Optimizer, should_reject_update: RejectFn
) -> Tuple[Computation, Computation]:
    trainable_type = model_weights_type.trainable

    @tf_computation()
    def init_fn() -> TensorStructure:
        return optimizer.initialize(_tensor_specs(trainable_type))

    @tf_computation(init_fn.type_signature.result, trainable_type, trainable_type)
    @tf.function
    def next_fn(
        optimizer_state: TensorStructure,
        trainable_weights: TensorStructure,
        update: TensorStructure,
    ) -> tuple[TensorStructure, ...]:
        new_state, new_weights = optimizer.next(optimizer_state, trainable_weights, update)
        # Autograph turns this `if` (on a tensor) into a `tf.cond`, as in TFF.
        should_reject, measurements = should_reject_update(new_state, update)
        if should_reject:
            return optimizer_state, trainable_weights, measurements
        return new_state, new_weights, measurements

    return init_fn, next_fn


def _build_keras_optimizer_initialize_and_next(
    model_weights_type: T.StructType,
    optimizer_fn: keras_optimizer.KerasOptimizerFn,
    should_reject_update: RejectFn,
) -> Tuple[Computation, Computation]:
    """TFF v0.86's finalizer of a Keras optimizer: the state is the optimizer's variables."""
    trainable_type = model_weights_type.trainable

    def as_tensors(structure: TensorStructure) -> TensorStructure:
        return tf.nest.map_structure(tf.convert_to_tensor, structure)

    @tf_computation()
    def init_fn() -> TensorStructure:
        specs = _tensor_specs(trainable_type)
        model_variables = tf.nest.map_structure(
            lambda s: tf.Variable(initial_value=tf.zeros(s.shape, s.dtype)), specs
        )
        optimizer = keras_optimizer.build_or_verify_tff_optimizer(
            optimizer_fn, model_variables, disjoint_init_and_next=True
        )
        return as_tensors(optimizer.initialize(specs))

    @tf_computation(init_fn.type_signature.result, trainable_type, trainable_type)
    @tf.function
    def next_fn(
        optimizer_state: TensorStructure,
        trainable_weights: TensorStructure,
        update: TensorStructure,
    ) -> tuple[TensorStructure, ...]:
        with tf.init_scope():
            # Variables the Keras optimizer updates in place (made outside this function).
            trainable_variables = tf.nest.map_structure(
                lambda t: tf.Variable(initial_value=tf.zeros(t.shape, t.dtype)),
                trainable_weights,
            )
            optimizer = keras_optimizer.build_or_verify_tff_optimizer(
                optimizer_fn, trainable_variables, disjoint_init_and_next=True
            )
        tf.nest.map_structure(lambda a, b: a.assign(b), trainable_variables, trainable_weights)
        new_state, _ = optimizer.next(optimizer_state, trainable_variables, update)
        new_state = as_tensors(new_state)
        new_weights = as_tensors(trainable_variables)
        should_reject, measurements = should_reject_update(new_state, update)
        if should_reject:
            return optimizer_state, trainable_weights, measurements
        return new_state, new_weights, measurements

    return init_fn, next_fn


def _check_keras_optimizer_fn(optimizer_fn: object) -> None:
    """A no-arg callable returning a Keras optimizer (TFF v0.86 calls it once to check)."""
    made = optimizer_fn() if callable(optimizer_fn) else None
    if not isinstance(made, tf.keras.optimizers.Optimizer):
        raise SimharnessTypeError(
            'The optimizer_fn must be a `tff.learning.optimizers.Optimizer`, or a no-arg '
            f'callable returning a `tf.keras.optimizers.Optimizer`. Got: {type(optimizer_fn)=}',
            expected=Optimizer,
            actual=type(optimizer_fn),
        )


def build_apply_optimizer_finalizer(
    optimizer_fn: keras_optimizer.OptimizerOrKerasFn,
    model_weights_type: T.StructType,
    should_reject_update: RejectFn = reject_non_finite_update,
) -> finalizers.FinalizerProcess:
    """A `FinalizerProcess` that applies `optimizer_fn` to the trainable weights.

    Args:
      optimizer_fn: a `simharness.learning.optimizers.Optimizer`, or a no-arg
        callable returning a Keras optimizer (state: its variables; no hparams).
      model_weights_type: the `StructType` of a `ModelWeights` (no federated
        types inside).
      should_reject_update: ``(optimizer state, update) -> (reject, measurements)``.

    Raises:
      SimharnessTypeError: `model_weights_type` is not a `ModelWeights` type,
        or `optimizer_fn` is neither an `Optimizer` nor a Keras optimizer function.
    """
    if not _is_model_weights_type(model_weights_type):
        raise SimharnessTypeError(
            'Provided value_type must be a StructType with its python container being '
            'tff.learning.models.ModelWeights, not containing a FederatedType, but found: '
            f'{model_weights_type}',
            expected=ModelWeights,
            actual=model_weights_type,
        )
    if isinstance(optimizer_fn, Optimizer):
        init_tf, next_tf = _build_tff_optimizer_initialize_and_next(
            model_weights_type, optimizer_fn, should_reject_update
        )
    else:
        _check_keras_optimizer_fn(optimizer_fn)
        init_tf, next_tf = _build_keras_optimizer_initialize_and_next(
            model_weights_type, optimizer_fn, should_reject_update
        )

    @federated_computation()
    def init_fn() -> Value:
        return I.federated_eval(init_tf, T.SERVER)

    @federated_computation(
        init_fn.type_signature.result,
        T.FederatedType(model_weights_type, T.SERVER),
        T.FederatedType(model_weights_type.trainable, T.SERVER),
    )
    def next_fn(state: Value, weights: Value, update: Value) -> MeasuredProcessOutput:
        optimizer_state, new_trainable, measurements = I.federated_map(
            next_tf, (state, weights.trainable, update)
        )
        new_weights = I.federated_zip(ModelWeights(new_trainable, weights.non_trainable))
        return MeasuredProcessOutput(optimizer_state, new_weights, measurements)

    if not isinstance(optimizer_fn, Optimizer):
        return finalizers.FinalizerProcess(init_fn, next_fn)
    tff_optimizer = optimizer_fn
    state_type = N.member_of(init_fn.type_signature.result)

    @tf_computation(state_type)
    def get_hparams_fn(state: TensorStructure) -> TensorStructure:
        return tff_optimizer.get_hparams(state)

    @tf_computation(state_type, get_hparams_fn.type_signature.result)
    def set_hparams_fn(state: TensorStructure, hparams: TensorStructure) -> TensorStructure:
        return tff_optimizer.set_hparams(state, hparams)

    return finalizers.FinalizerProcess(
        init_fn, next_fn, get_hparams_fn=get_hparams_fn, set_hparams_fn=set_hparams_fn
    )
