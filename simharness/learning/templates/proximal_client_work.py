"""FedProx's client work: local training with a proximal term (TFF's ``proximal_client_work.py``).

```
gradient += delta_l2_regularizer * (w - w_initial)      (Li et al. 2020, FedProx)
update = w_initial.trainable - w.trainable (zeros if non-finite); weight by client_weighting
```
The state is empty; otherwise as `model_delta_client_work`, a no-argument
function returning a Keras optimizer (TFF up to v0.86) included: one is made per
client update and steps the model's variables (`build_model_delta_update_with_keras_optimizer`).
"""

from __future__ import annotations

import collections
import logging
from typing import Callable, Optional, TypeVar

import tensorflow as tf

from simharness.core import intrinsics as I
from simharness.core import types as T
from simharness.core import narrowing as N
from simharness.core.computation import Computation, federated_computation, tf_computation
from simharness.core.tracing import Value
from simharness.errors import SimharnessTypeError, SimharnessValueError
from simharness.learning import loop_builder
from simharness.learning._typing import Batch, TensorStructure
from simharness.learning.client_weight_lib import ClientWeighting
from simharness.learning.metrics import aggregator as metrics_aggregators
from simharness.learning.metrics.types import MetricsAggregatorType
from simharness.learning.models import functional, keras_utils, variable
from simharness.learning.models import model_weights as model_weights_lib
from simharness.learning.optimizers import keras_optimizer
from simharness.learning.optimizers.optimizer import Optimizer
from simharness.learning.templates import client_works
from simharness.learning.templates._tensor_utils import zero_all_if_any_non_finite
from simharness.learning.templates import model_delta_client_work
from simharness.learning.templates.model_delta_client_work import (
    ClientUpdateFn,
    choose_client_weight,
    functional_weights_type,
    split_batch,
    stateless_keras_update,
)
from simharness.templates.measured_process import MeasuredProcessOutput

__all__ = [
    'build_functional_model_delta_client_work',
    'build_model_delta_client_work',
    'build_model_delta_update_with_keras_optimizer',
    'build_model_delta_update_with_tff_optimizer',
]

_LOG = logging.getLogger(__name__)


#: The gradients' structure (the trainable weights').
_Gradients = TypeVar('_Gradients')


def _proximal(
    gradients: _Gradients,
    weights: TensorStructure,
    initial: TensorStructure,
    delta_l2_regularizer: float,
) -> _Gradients:
    if delta_l2_regularizer > 0.0:
        term = tf.nest.map_structure(lambda x, y: delta_l2_regularizer * (y - x), weights, initial)
        gradients = tf.nest.map_structure(tf.add, gradients, term)
    return gradients


def build_model_delta_update_with_tff_optimizer(
    model_fn: Callable[[], variable.VariableModel],
    *,
    weighting: ClientWeighting,
    delta_l2_regularizer: float,
    loop_implementation: loop_builder.LoopImplementation,
) -> ClientUpdateFn:
    """The proximal client update of a `VariableModel` (build it inside a `tf_computation`)."""
    model = model_fn()
    dataset_reduce_fn = loop_builder.build_training_loop(loop_implementation=loop_implementation)
    if isinstance(model, keras_utils.KerasModel) and model.runs_stateless():
        return stateless_keras_update(
            model,
            weighting,
            dataset_reduce_fn,
            reset_metrics_if_non_finite=False,
            adjust_gradients=lambda g, w, w0: _proximal(g, w, w0, delta_l2_regularizer),
        )

    @tf.function
    def client_update(
        optimizer: Optimizer, initial_weights: model_weights_lib.ModelWeights, data: tf.data.Dataset
    ) -> tuple[client_works.ClientResult, TensorStructure]:
        model_weights = model_weights_lib.ModelWeights.from_model(model)
        tf.nest.map_structure(lambda a, b: a.assign(b), model_weights, initial_weights)

        def reduce_fn(
            state: tuple[tf.Tensor, TensorStructure], batch: Batch
        ) -> tuple[tf.Tensor, TensorStructure]:
            num_examples_sum, optimizer_state = state
            with tf.GradientTape() as tape:
                output = model.forward_pass(batch, training=True)
            gradients = tape.gradient(output.loss, model_weights.trainable)
            gradients = _proximal(
                gradients, model_weights.trainable, initial_weights.trainable, delta_l2_regularizer
            )
            optimizer_state, updated = optimizer.next(
                optimizer_state,
                tuple(tf.nest.flatten(model_weights.trainable)),
                tuple(tf.nest.flatten(gradients)),
            )
            updated = tf.nest.pack_sequence_as(model_weights.trainable, updated)
            tf.nest.map_structure(lambda a, b: a.assign(b), model_weights.trainable, updated)
            if output.num_examples is None:
                num_examples_sum += tf.shape(output.predictions, out_type=tf.int64)[0]
            else:
                num_examples_sum += tf.cast(output.num_examples, tf.int64)
            return num_examples_sum, optimizer_state

        def initial_state() -> tuple[tf.Tensor, TensorStructure]:
            specs = tf.nest.map_structure(
                lambda v: tf.TensorSpec(v.shape, v.dtype),
                tuple(tf.nest.flatten(model_weights.trainable)),
            )
            return tf.zeros(shape=[], dtype=tf.int64), optimizer.initialize(specs)

        num_examples, _ = dataset_reduce_fn(reduce_fn, data, initial_state)
        update = tf.nest.map_structure(
            tf.subtract, initial_weights.trainable, model_weights.trainable
        )
        model_output = model.report_local_unfinalized_metrics()
        update, has_non_finite = zero_all_if_any_non_finite(update)
        weight = choose_client_weight(weighting, has_non_finite, num_examples)
        return client_works.ClientResult(update=update, update_weight=weight), model_output

    return client_update


def build_model_delta_update_with_keras_optimizer(
    model_fn: Callable[[], variable.VariableModel],
    weighting: ClientWeighting,
    delta_l2_regularizer: float,
    loop_implementation: loop_builder.LoopImplementation,
) -> ClientUpdateFn:
    """The proximal client update with a Keras optimizer (TFF up to v0.86): the
    proximal term is added to the gradients before ``apply_gradients``; the
    metrics are reported before the non-finite check and not reset (as TFF)."""
    return model_delta_client_work.build_model_delta_update_with_keras_optimizer(
        model_fn,
        weighting,
        loop_implementation,
        adjust_gradients=lambda g, w, w0: _proximal(g, w, w0, delta_l2_regularizer),
        reset_metrics_if_non_finite=False,
    )


def _check_args(client_weighting: object, delta_l2_regularizer: object) -> None:
    if not isinstance(client_weighting, ClientWeighting):
        raise SimharnessTypeError(
            f'client_weighting must be a ClientWeighting, got {client_weighting!r} of type '
            f'{type(client_weighting).__name__}',
            expected=ClientWeighting,
            actual=type(client_weighting),
        )
    if not isinstance(delta_l2_regularizer, float):
        raise SimharnessTypeError(
            f'delta_l2_regularizer must be a float, got {delta_l2_regularizer!r} of type '
            f'{type(delta_l2_regularizer).__name__}',
            expected=float,
            actual=type(delta_l2_regularizer),
        )
    if delta_l2_regularizer < 0.0:
        raise SimharnessValueError(
            f'Provided delta_l2_regularizer must be nonnegative,but found: {delta_l2_regularizer}'
        )
    if delta_l2_regularizer == 0.0:
        _LOG.warning(
            'delta_l2_regularizer is set to 0.0, which means no regularization will occur.'
        )


def _client_work(
    weights_type: T.Type,
    data_type: T.Type,
    client_update_computation: Computation,
    metrics_fn: Callable[[Value], Value],
) -> client_works.ClientWorkProcess:
    @federated_computation()
    def init_fn() -> Value:
        return I.federated_value((), T.SERVER)

    @federated_computation(
        init_fn.type_signature.result,
        T.FederatedType(weights_type, T.CLIENTS),
        T.FederatedType(data_type, T.CLIENTS),
    )
    def next_fn(state: Value, weights: Value, client_data: Value) -> MeasuredProcessOutput:
        client_result, model_outputs = I.federated_map(
            client_update_computation, (weights, client_data)
        )
        measurements = I.federated_zip(collections.OrderedDict(train=metrics_fn(model_outputs)))
        return MeasuredProcessOutput(state, client_result, measurements)

    return client_works.ClientWorkProcess(init_fn, next_fn)


def build_model_delta_client_work(
    model_fn: Callable[[], variable.VariableModel],
    optimizer: keras_optimizer.OptimizerOrKerasFn,
    client_weighting: ClientWeighting,
    delta_l2_regularizer: float,
    metrics_aggregator: Optional[MetricsAggregatorType] = None,
    *,
    loop_implementation: loop_builder.LoopImplementation,
) -> client_works.ClientWorkProcess:
    """A stateless `ClientWorkProcess` of FedProx over a `VariableModel`.

    `optimizer` is an `Optimizer` or a no-arg callable returning a Keras optimizer.

    Raises:
      SimharnessTypeError: `client_weighting`, `delta_l2_regularizer` or `optimizer`
        has the wrong type.
      SimharnessValueError: `delta_l2_regularizer` is negative.
    """
    _check_args(client_weighting, delta_l2_regularizer)
    keras_optimizer.check_optimizer_or_keras_fn(optimizer, 'optimizer')
    if metrics_aggregator is None:
        metrics_aggregator = metrics_aggregators.sum_then_finalize
    with tf.Graph().as_default():
        model = model_fn()
        metrics_aggregation_fn = metrics_aggregator(model.metric_finalizers())
        data_type = T.SequenceType(T.to_type(model.input_spec))
        weights_type = model_weights_lib.weights_type_from_model(model)

    @tf_computation(weights_type, data_type)
    def client_update_computation(
        initial_model_weights: model_weights_lib.ModelWeights, dataset: tf.data.Dataset
    ) -> tuple[client_works.ClientResult, TensorStructure]:
        if not isinstance(optimizer, Optimizer):
            keras_update = build_model_delta_update_with_keras_optimizer(
                model_fn, client_weighting, delta_l2_regularizer, loop_implementation
            )
            return keras_update(optimizer(), initial_model_weights, dataset)
        client_update = build_model_delta_update_with_tff_optimizer(
            model_fn=model_fn,
            weighting=client_weighting,
            delta_l2_regularizer=delta_l2_regularizer,
            loop_implementation=loop_implementation,
        )
        return client_update(optimizer, initial_model_weights, dataset)

    return _client_work(weights_type, data_type, client_update_computation, metrics_aggregation_fn)


def _build_functional_model_delta_update(
    *, model: functional.FunctionalModel, weighting: ClientWeighting, delta_l2_regularizer: float
) -> ClientUpdateFn:
    """The proximal client update of a `FunctionalModel` (TFF's private name)."""
    return _build_functional_update(model, weighting, delta_l2_regularizer)


def _build_functional_update(
    model: functional.FunctionalModel, weighting: ClientWeighting, delta_l2_regularizer: float
) -> ClientUpdateFn:
    loop = loop_builder.build_training_loop(
        loop_implementation=loop_builder.LoopImplementation.DATASET_ITERATOR
    )

    @tf.function
    def client_update(
        optimizer: Optimizer,
        initial_weights: tuple[TensorStructure, TensorStructure],
        data: tf.data.Dataset,
    ) -> tuple[client_works.ClientResult, TensorStructure]:
        initial_trainable, initial_non_trainable = initial_weights

        def reduce_fn(state: tuple[tf.Tensor, ...], batch: Batch) -> tuple[tf.Tensor, ...]:
            num_examples_sum, model_weights, metrics_state, optimizer_state = state
            trainable, non_trainable = model_weights
            x, y = split_batch(batch)
            with tf.GradientTape() as tape:
                tape.watch(trainable)
                batch_output = model.predict_on_batch(model_weights, x, training=True)
                batch_loss = model.loss(output=batch_output, label=y)
            gradients = tape.gradient(batch_loss, trainable)
            gradients = _proximal(gradients, trainable, initial_trainable, delta_l2_regularizer)
            optimizer_state, updated = optimizer.next(
                optimizer_state, tuple(trainable), tuple(gradients)
            )
            trainable = tf.nest.pack_sequence_as(trainable, updated)
            batch_num_examples = tf.shape(tf.nest.flatten(batch_output)[0])[0]
            num_examples_sum += tf.cast(batch_num_examples, tf.int64)
            metrics_state = model.update_metrics_state(
                metrics_state,
                batch_output=variable.BatchOutput(
                    loss=batch_loss, predictions=batch_output, num_examples=batch_num_examples
                ),
                labels=y,
            )
            return num_examples_sum, (trainable, non_trainable), metrics_state, optimizer_state

        def initial_state() -> tuple[tf.Tensor, ...]:
            specs = tuple(
                tf.TensorSpec(v.shape, v.dtype) for v in tf.nest.flatten(initial_trainable)
            )
            return (
                tf.zeros(shape=[], dtype=tf.int64),
                (initial_trainable, initial_non_trainable),
                model.initialize_metrics_state(),
                optimizer.initialize(specs),
            )

        num_examples, model_weights, metrics_state, _ = loop(reduce_fn, data, initial_state)
        update = tf.nest.map_structure(tf.subtract, initial_trainable, model_weights[0])
        update, has_non_finite = zero_all_if_any_non_finite(update)
        weight = choose_client_weight(weighting, has_non_finite, num_examples)
        return client_works.ClientResult(update=update, update_weight=weight), metrics_state

    return client_update


def build_functional_model_delta_client_work(
    *,
    model: functional.FunctionalModel,
    optimizer: Optimizer,
    client_weighting: ClientWeighting,
    delta_l2_regularizer: float,
    metrics_aggregator: Optional[MetricsAggregatorType] = None,
) -> client_works.ClientWorkProcess:
    """A stateless `ClientWorkProcess` of FedProx over a `FunctionalModel`.

    Raises:
      SimharnessTypeError: an argument has the wrong type.
      SimharnessValueError: `delta_l2_regularizer` is negative.
    """
    if not isinstance(model, functional.FunctionalModel):
        raise SimharnessTypeError(
            f'model must be a FunctionalModel, got {type(model).__name__}',
            expected=functional.FunctionalModel,
            actual=type(model),
        )
    if not isinstance(optimizer, Optimizer):
        raise SimharnessTypeError(
            f'optimizer must be an Optimizer, got {type(optimizer).__name__}',
            expected=Optimizer,
            actual=type(optimizer),
        )
    _check_args(client_weighting, delta_l2_regularizer)
    if metrics_aggregator is None:
        metrics_aggregator = metrics_aggregators.sum_then_finalize
    data_type = T.SequenceType(T.to_type(model.input_spec))
    weights_type = functional_weights_type(model)

    @tf_computation(weights_type, data_type)
    def client_update_computation(
        initial_model_weights: model_weights_lib.ModelWeights, dataset: tf.data.Dataset
    ) -> tuple[client_works.ClientResult, TensorStructure]:
        update = _build_functional_update(model, client_weighting, delta_l2_regularizer)
        return update(
            optimizer,
            (initial_model_weights.trainable, initial_model_weights.non_trainable),
            dataset,
        )

    def metrics_fn(unfinalized: Value) -> Value:
        return metrics_aggregator(model.finalize_metrics, N.member_of(unfinalized.type_signature))(
            unfinalized
        )

    return _client_work(weights_type, data_type, client_update_computation, metrics_fn)
