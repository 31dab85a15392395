"""Mime Lite's client work (TFF's ``learning/algorithms/mime.py``, its client half).

```
state: (optimizer state s, full-gradient aggregator state)        at the server
client: full gradient g_k = mean over the client's examples of the gradient at the broadcast
        weights (first pass over the dataset); then local training where every step is
        optimizer.next(s, w, gradient) with the *server's* optimizer state s (not updated
        locally); update = initial - trained weights; weight by client_weighting
server: s <- optimizer.next(s, zeros, aggregate(g_k)) (only the state is kept)
```
(Karimireddy et al. 2020, "Mime: Mimicking Centralized Stochastic Algorithms in FL".)
"""

from __future__ import annotations

import collections
from typing import Callable, Optional, Sequence, Union, cast

import numpy as np
import tensorflow as tf

from simharness.aggregators import factory, mean
from simharness.core import intrinsics as I
from simharness.core import types as T
from simharness.core import narrowing as N
from simharness.core.computation import federated_computation, tf_computation
from simharness.core.tracing import Value
from simharness.learning import loop_builder
from simharness.learning._typing import Batch, SpecStructure, TensorStructure
from simharness.learning.algorithms import _common
from simharness.learning.client_weight_lib import ClientWeighting
from simharness.learning.metrics import aggregator as metric_aggregator
from simharness.learning.metrics.types import MetricsAggregatorType
from simharness.learning.models import functional, variable
from simharness.learning.models import model_weights as model_weights_lib
from simharness.learning.optimizers.optimizer import Optimizer
from simharness.learning.templates import client_works
from simharness.learning.templates._tensor_utils import zero_all_if_any_non_finite
from simharness.learning.templates.apply_optimizer_finalizer import _tensor_specs
from simharness.learning.templates.model_delta_client_work import (
    choose_client_weight,
    functional_weights_type,
    split_batch,
)
from simharness.templates.measured_process import MeasuredProcessOutput

#: The weights a functional model's client update takes: ``(trainable, non_trainable)``.
WeightsPair = tuple[Sequence[tf.Tensor], Sequence[tf.Tensor]]

#: The output of a Mime Lite client update: its result, unfinalized metrics and full gradient.
MimeClientOutput = tuple[client_works.ClientResult, TensorStructure, TensorStructure]


def _variable_client_update(
    model: variable.VariableModel,
    optimizer: Optimizer,
    client_weighting: ClientWeighting,
    loop_implementation: loop_builder.LoopImplementation,
    trainable_specs: SpecStructure,
) -> Callable[..., MimeClientOutput]:
    dataset_reduce_fn = loop_builder.build_training_loop(loop_implementation=loop_implementation)

    @tf.function
    def client_update(
        global_optimizer_state: TensorStructure,
        initial_weights: model_weights_lib.ModelWeights,
        data: tf.data.Dataset,
    ) -> MimeClientOutput:
        model_weights = model_weights_lib.ModelWeights.from_model(model)
        tf.nest.map_structure(lambda a, b: a.assign(b), model_weights, initial_weights)

        def full_gradient_reduce_fn(
            state: tuple[TensorStructure, tf.Tensor], batch: Batch
        ) -> tuple[TensorStructure, tf.Tensor]:
            gradient_sum, num_examples_sum = state
            with tf.GradientTape() as tape:
                output = model.forward_pass(batch, training=True)
            if output.num_examples is None:
                num_examples = tf.shape(output.predictions, out_type=tf.int64)[0]
            else:
                num_examples = tf.cast(output.num_examples, tf.int64)
            gradients = tuple(tf.nest.flatten(tape.gradient(output.loss, model_weights.trainable)))
            gradient_sum = tf.nest.map_structure(
                lambda s, g: s + g * tf.cast(num_examples, g.dtype), gradient_sum, gradients
            )
            return gradient_sum, num_examples_sum + num_examples

        def initial_full_gradient_state() -> tuple[TensorStructure, tf.Tensor]:
            return (
                tuple(tf.zeros(s.shape, s.dtype) for s in tf.nest.flatten(trainable_specs)),
                tf.constant(0, tf.int64),
            )

        full_gradient, num_examples = dataset_reduce_fn(
            full_gradient_reduce_fn, data, initial_full_gradient_state
        )
        full_gradient = tf.nest.map_structure(
            lambda g: tf.math.divide_no_nan(g, tf.cast(num_examples, g.dtype)), full_gradient
        )
        model.reset_metrics()

        def train_reduce_fn(state: tf.Tensor, batch: Batch) -> tf.Tensor:
            with tf.GradientTape() as tape:
                output = model.forward_pass(batch, training=True)
            gradients = tape.gradient(output.loss, model_weights.trainable)
            _, updated = optimizer.next(global_optimizer_state, model_weights.trainable, gradients)
            tf.nest.map_structure(lambda a, b: a.assign(b), model_weights.trainable, updated)
            return state

        dataset_reduce_fn(train_reduce_fn, data, lambda: tf.zeros(shape=[0]))
        delta = tf.nest.map_structure(
            tf.subtract, initial_weights.trainable, model_weights.trainable
        )
        model_output = model.report_local_unfinalized_metrics()
        delta, has_non_finite = zero_all_if_any_non_finite(delta)
        weight = choose_client_weight(client_weighting, has_non_finite, num_examples)
        return (
            client_works.ClientResult(update=delta, update_weight=weight),
            model_output,
            full_gradient,
        )

    return client_update


def _functional_client_update(
    model: functional.FunctionalModel,
    optimizer: Optimizer,
    client_weighting: ClientWeighting,
    loop_implementation: loop_builder.LoopImplementation,
) -> Callable[..., MimeClientOutput]:
    dataset_reduce_fn = loop_builder.build_training_loop(loop_implementation=loop_implementation)

    @tf.function
    def client_update(
        global_optimizer_state: TensorStructure,
        incoming_weights: WeightsPair,
        data: tf.data.Dataset,
    ) -> MimeClientOutput:
        trainable_weights, _ = incoming_weights

        def full_gradient_reduce_fn(
            state: tuple[TensorStructure, tf.Tensor], batch: Batch
        ) -> tuple[TensorStructure, tf.Tensor]:
            gradient_sum, num_examples_sum = state
            x, y = split_batch(batch)
            with tf.GradientTape() as tape:
                tape.watch(trainable_weights)
                batch_output = model.predict_on_batch(
                    model_weights=incoming_weights, x=x, training=True
                )
                batch_loss = model.loss(output=batch_output, label=y)
            batch_num_examples = tf.shape(tf.nest.flatten(batch_output)[0])[0]
            gradients = tape.gradient(batch_loss, trainable_weights)
            gradient_sum = tf.nest.map_structure(
                lambda s, g: s + g * tf.cast(batch_num_examples, g.dtype), gradient_sum, gradients
            )
            return gradient_sum, num_examples_sum + tf.cast(batch_num_examples, tf.int64)

        def initial_full_gradient_state() -> tuple[TensorStructure, tf.Tensor]:
            return (tuple(tf.zeros_like(w) for w in trainable_weights), tf.constant(0, tf.int64))

        full_gradient, num_examples = dataset_reduce_fn(
            full_gradient_reduce_fn, data, initial_full_gradient_state
        )
        full_gradient = tf.nest.map_structure(
            lambda g: tf.math.divide_no_nan(g, tf.cast(num_examples, g.dtype)), full_gradient
        )

        def train_reduce_fn(
            state: tuple[WeightsPair, collections.OrderedDict], batch: Batch
        ) -> tuple[WeightsPair, collections.OrderedDict]:
            model_weights, metrics_state = state
            trainable, non_trainable = model_weights
            x, y = split_batch(batch)
            with tf.GradientTape() as tape:
                tape.watch(trainable)
                batch_output = model.predict_on_batch(
                    model_weights=model_weights, x=x, training=True
                )
                batch_loss = model.loss(output=batch_output, label=y)
            gradients = tape.gradient(batch_loss, trainable)
            batch_num_examples = tf.shape(tf.nest.flatten(batch_output)[0])[0]
            metrics_state = model.update_metrics_state(
                metrics_state,
                batch_output=variable.BatchOutput(
                    loss=batch_loss,
                    predictions=batch_output,
                    num_examples=tf.cast(batch_num_examples, tf.int64),
                ),
                labels=y,
            )
            _, updated = optimizer.next(global_optimizer_state, trainable, gradients)
            return (updated, non_trainable), metrics_state

        model_weights, unfinalized = dataset_reduce_fn(
            train_reduce_fn, data, lambda: (incoming_weights, model.initialize_metrics_state())
        )
        delta = tf.nest.map_structure(tf.subtract, incoming_weights[0], model_weights[0])
        delta, has_non_finite = zero_all_if_any_non_finite(delta)
        weight = choose_client_weight(client_weighting, has_non_finite, num_examples)
        return (
            client_works.ClientResult(update=delta, update_weight=weight),
            unfinalized,
            full_gradient,
        )

    return client_update


def build_mime_lite_client_work(
    model_fn: _common.ModelFn,
    optimizer: Optimizer,
    client_weighting: ClientWeighting,
    full_gradient_aggregator: Optional[factory.WeightedAggregationFactory] = None,
    metrics_aggregator: Optional[MetricsAggregatorType] = None,
    loop_implementation: loop_builder.LoopImplementation = (
        loop_builder.LoopImplementation.DATASET_REDUCE
    ),
) -> client_works.ClientWorkProcess:
    """Mime Lite's `ClientWorkProcess` (a `VariableModel` callable or a `FunctionalModel`).

    Raises:
      SimharnessTypeError: an argument has the wrong type.
    """
    _common.check_model_fn(model_fn)
    _common.check_instance(optimizer, Optimizer, 'optimizer')
    _common.check_instance(client_weighting, ClientWeighting, 'client_weighting')
    if full_gradient_aggregator is None:
        full_gradient_aggregator = mean.MeanFactory()
    _common.check_instance(
        full_gradient_aggregator, factory.WeightedAggregationFactory, 'full_gradient_aggregator'
    )
    if metrics_aggregator is None:
        metrics_aggregator = metric_aggregator.sum_then_finalize
    is_functional = not callable(model_fn)
    model: Union[functional.FunctionalModel, variable.VariableModel]
    weights_type: T.StructType
    if is_functional:
        model = cast(functional.FunctionalModel, model_fn)  # not callable: checked above
        weights_type = N.as_struct(functional_weights_type(model))
        metrics_aggregation_fn = None
    else:
        with tf.Graph().as_default():
            model = cast(Callable[[], variable.VariableModel], model_fn)()
            metrics_aggregation_fn = metrics_aggregator(model.metric_finalizers())
            weights_type = model_weights_lib.weights_type_from_model(model)
    data_type = T.SequenceType(T.to_type(model.input_spec))
    trainable_specs = _tensor_specs(weights_type.trainable)
    gradient_aggregator = full_gradient_aggregator.create(
        N.as_tensor_or_struct(weights_type.trainable), T.TensorType(np.float32)
    )

    @tf_computation()
    def optimizer_init() -> TensorStructure:
        return optimizer.initialize(trainable_specs)

    @federated_computation()
    def init_fn() -> Value:
        return I.federated_zip(
            (I.federated_eval(optimizer_init, T.SERVER), gradient_aggregator.initialize())
        )

    optimizer_state_type = N.as_struct(N.member_of(init_fn.type_signature.result))[0]

    @tf_computation(optimizer_state_type, weights_type, data_type)
    def client_update_fn(
        global_optimizer_state: TensorStructure,
        weights: model_weights_lib.ModelWeights,
        data: tf.data.Dataset,
    ) -> MimeClientOutput:
        if is_functional:
            update = _functional_client_update(
                cast(functional.FunctionalModel, model),
                optimizer,
                client_weighting,
                loop_implementation,
            )
            return update(global_optimizer_state, (weights.trainable, weights.non_trainable), data)
        variable_model_fn = cast(Callable[[], variable.VariableModel], model_fn)  # callable
        update = _variable_client_update(
            variable_model_fn(), optimizer, client_weighting, loop_implementation, trainable_specs
        )
        return update(global_optimizer_state, weights, data)

    @tf_computation(optimizer_state_type, weights_type.trainable)
    def update_optimizer_state(
        state: TensorStructure, aggregate_gradient: TensorStructure
    ) -> TensorStructure:
        zeros = tf.nest.map_structure(lambda g: tf.zeros(g.shape, g.dtype), aggregate_gradient)
        updated_state, _ = optimizer.next(state, zeros, aggregate_gradient)
        return updated_state

    @federated_computation(
        init_fn.type_signature.result,
        T.FederatedType(weights_type, T.CLIENTS),
        T.FederatedType(data_type, T.CLIENTS),
    )
    def next_fn(state: Value, weights: Value, client_data: Value) -> MeasuredProcessOutput:
        optimizer_state, aggregator_state = state
        client_result, model_outputs, full_gradient = I.federated_map(
            client_update_fn, (I.federated_broadcast(optimizer_state), weights, client_data)
        )
        gradient_output = gradient_aggregator.next(
            aggregator_state, full_gradient, client_result.update_weight
        )
        new_state = I.federated_zip(
            (
                I.federated_map(update_optimizer_state, (optimizer_state, gradient_output.result)),
                gradient_output.state,
            )
        )
        # No aggregation function yet: a functional model (is_functional).
        aggregation_fn = metrics_aggregation_fn or metrics_aggregator(
            cast(functional.FunctionalModel, model).finalize_metrics,
            N.member_of(model_outputs.type_signature),
        )
        measurements = I.federated_zip(collections.OrderedDict(train=aggregation_fn(model_outputs)))
        return MeasuredProcessOutput(new_state, client_result, measurements)

    return client_works.ClientWorkProcess(init_fn, next_fn)
