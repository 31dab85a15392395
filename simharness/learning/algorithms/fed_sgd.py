"""Federated SGD (TFF's ``learning/algorithms/fed_sgd.py``; McMahan et al. 2017).

```
client_work:  no local steps: update = the example-weighted mean gradient over the client's
              dataset at the broadcast weights (zeros if non-finite), weight = num_examples
              (0 if non-finite)
aggregator:   model_aggregator (default MeanFactory)
finalizer:    server_optimizer_fn (default SGD at 0.1) applied with the mean gradient
```
"""

from __future__ import annotations

import collections
from typing import Callable, Mapping, Optional

import numpy as np
import tensorflow as tf

from simharness.aggregators import factory, mean
from simharness.core import intrinsics as I
from simharness.core import types as T
from simharness.core import narrowing as N
from simharness.core.computation import federated_computation, tf_computation
from simharness.core.tracing import Value
from simharness.learning import loop_builder
from simharness.learning._typing import Batch, TensorStructure
from simharness.learning.algorithms import _common
from simharness.learning.metrics import aggregator as metric_aggregator
from simharness.learning.metrics.types import MetricsAggregatorType
from simharness.learning.models import functional, variable
from simharness.learning.models import model_weights as model_weights_lib
from simharness.learning.optimizers import keras_optimizer, sgdm
from simharness.learning.templates import (
    apply_optimizer_finalizer,
    client_works,
    composers,
    distributors,
    learning_process,
)
from simharness.learning.templates._tensor_utils import zero_all_if_any_non_finite
from simharness.learning.templates.model_delta_client_work import functional_weights_type
from simharness.templates.measured_process import MeasuredProcessOutput

__all__ = ['DEFAULT_SERVER_OPTIMIZER_FN', 'build_fed_sgd']

#: SGD at 0.1 (TFF's default server optimizer of FedSGD).
DEFAULT_SERVER_OPTIMIZER_FN = sgdm.build_sgdm(learning_rate=0.1)


def _mean_gradient_result(
    gradient_sums: TensorStructure, num_examples_sum: tf.Tensor
) -> client_works.ClientResult:
    average = tf.nest.map_structure(lambda g: g / num_examples_sum, gradient_sums)
    average, has_non_finite = zero_all_if_any_non_finite(average)
    weight = tf.where(has_non_finite > 0, tf.constant(0.0), num_examples_sum)
    return client_works.ClientResult(update=average, update_weight=weight)


def _build_client_update(
    model: variable.VariableModel, loop_implementation: loop_builder.LoopImplementation
) -> Callable[..., tuple[client_works.ClientResult, TensorStructure]]:
    dataset_reduce_fn = loop_builder.build_training_loop(loop_implementation=loop_implementation)

    @tf.function
    def client_update(
        initial_weights: model_weights_lib.ModelWeights, dataset: tf.data.Dataset
    ) -> tuple[client_works.ClientResult, TensorStructure]:
        model_weights = model_weights_lib.ModelWeights.from_model(model)
        tf.nest.map_structure(lambda a, b: a.assign(b), model_weights, initial_weights)

        def reduce_fn(state: tuple[tuple, tf.Tensor], batch: Batch) -> tuple[tuple, tf.Tensor]:
            accumulated, num_examples_sum = state
            with tf.GradientTape() as tape:
                output = model.forward_pass(batch)
            gradients = tape.gradient(
                output.loss,
                model_weights.trainable,
                unconnected_gradients=tf.UnconnectedGradients.ZERO,
            )
            num_examples = tf.cast(output.num_examples, tf.float32)
            accumulated = tuple(a + num_examples * g for a, g in zip(accumulated, gradients))
            return accumulated, num_examples_sum + num_examples

        def zero_state() -> tuple[tuple, tf.Tensor]:
            return (
                tuple(tf.nest.map_structure(tf.zeros_like, model_weights.trainable)),
                tf.constant(0, dtype=tf.float32),
            )

        gradient_sums, num_examples_sum = dataset_reduce_fn(reduce_fn, dataset, zero_state)
        model_output = model.report_local_unfinalized_metrics()
        return _mean_gradient_result(gradient_sums, num_examples_sum), model_output

    return client_update


def _build_fed_sgd_client_work(
    model_fn: Callable[[], variable.VariableModel],
    metrics_aggregator: MetricsAggregatorType,
    loop_implementation: loop_builder.LoopImplementation,
) -> client_works.ClientWorkProcess:
    with tf.Graph().as_default():
        model = model_fn()
        metrics_aggregation_fn = metrics_aggregator(model.metric_finalizers())
        data_type = T.SequenceType(T.to_type(model.input_spec))
        weights_type = model_weights_lib.weights_type_from_model(model)

    @federated_computation()
    def init_fn() -> Value:
        return I.federated_value((), T.SERVER)

    @tf_computation(weights_type, data_type)
    def client_update_computation(
        initial_model_weights: model_weights_lib.ModelWeights, dataset: tf.data.Dataset
    ) -> tuple[client_works.ClientResult, TensorStructure]:
        client_update = _build_client_update(model_fn(), loop_implementation)
        return client_update(initial_model_weights, dataset)

    @federated_computation(
        init_fn.type_signature.result,
        T.FederatedType(weights_type, T.CLIENTS),
        T.FederatedType(data_type, T.CLIENTS),
    )
    def next_fn(state: Value, model_weights: Value, client_data: Value) -> MeasuredProcessOutput:
        client_result, model_outputs = I.federated_map(
            client_update_computation, (model_weights, client_data)
        )
        measurements = I.federated_zip(
            collections.OrderedDict(train=metrics_aggregation_fn(model_outputs))
        )
        return MeasuredProcessOutput(state, client_result, measurements)

    return client_works.ClientWorkProcess(init_fn, next_fn)


def _split_batch(batch: Batch) -> tuple[TensorStructure, TensorStructure]:
    if isinstance(batch, Mapping):
        return batch['x'], batch['y']
    x, y = batch
    return x, y


def _build_functional_client_update(
    model: functional.FunctionalModel, loop_implementation: loop_builder.LoopImplementation
) -> Callable[..., tuple[client_works.ClientResult, TensorStructure]]:
    dataset_reduce_fn = loop_builder.build_training_loop(loop_implementation=loop_implementation)

    @tf.function
    def client_update(
        initial_weights: model_weights_lib.ModelWeights, dataset: tf.data.Dataset
    ) -> tuple[client_works.ClientResult, TensorStructure]:
        trainable, non_trainable = initial_weights.trainable, initial_weights.non_trainable

        def reduce_fn(
            state: tuple[tuple, collections.OrderedDict, tf.Tensor], batch: Batch
        ) -> tuple[tuple, collections.OrderedDict, tf.Tensor]:
            accumulated, metrics_state, num_examples_sum = state
            x, y = _split_batch(batch)
            with tf.GradientTape() as tape:
                tape.watch(trainable)
                batch_output = model.predict_on_batch(
                    model_weights=(trainable, non_trainable), x=x, training=True
                )
                batch_loss = model.loss(output=batch_output, label=y)
            predictions = tf.nest.flatten(batch_output)[0]
            batch_num_examples = tf.shape(predictions)[0]
            gradients = tape.gradient(
                batch_loss, trainable, unconnected_gradients=tf.UnconnectedGradients.ZERO
            )
            num_examples = tf.cast(batch_num_examples, tf.float32)
            accumulated = tuple(a + num_examples * g for a, g in zip(accumulated, gradients))
            metrics_state = model.update_metrics_state(
                metrics_state,
                batch_output=variable.BatchOutput(
                    loss=batch_loss, predictions=batch_output, num_examples=batch_num_examples
                ),
                labels=y,
            )
            return accumulated, metrics_state, num_examples_sum + num_examples

        def zero_state() -> tuple[tuple, collections.OrderedDict, tf.Tensor]:
            return (
                tuple(tf.nest.map_structure(tf.zeros_like, trainable)),
                model.initialize_metrics_state(),
                tf.constant(0, dtype=tf.float32),
            )

        gradient_sums, metrics_state, num_examples_sum = dataset_reduce_fn(
            reduce_fn, dataset, zero_state
        )
        return _mean_gradient_result(gradient_sums, num_examples_sum), metrics_state

    return client_update


def _build_functional_fed_sgd_client_work(
    model: functional.FunctionalModel,
    metrics_aggregator: MetricsAggregatorType,
    loop_implementation: loop_builder.LoopImplementation,
) -> client_works.ClientWorkProcess:
    _common.check_instance(model, functional.FunctionalModel, 'model')
    data_type = T.SequenceType(T.to_type(model.input_spec))
    weights_type = functional_weights_type(model)

    @federated_computation()
    def init_fn() -> Value:
        return I.federated_value((), T.SERVER)

    @tf_computation(weights_type, data_type)
    def client_update_computation(
        initial_model_weights: model_weights_lib.ModelWeights, dataset: tf.data.Dataset
    ) -> tuple[client_works.ClientResult, TensorStructure]:
        return _build_functional_client_update(model, loop_implementation)(
            initial_model_weights, dataset
        )

    @federated_computation(
        init_fn.type_signature.result,
        T.FederatedType(weights_type, T.CLIENTS),
        T.FederatedType(data_type, T.CLIENTS),
    )
    def next_fn(state: Value, model_weights: Value, client_data: Value) -> MeasuredProcessOutput:
        client_result, unfinalized = I.federated_map(
            client_update_computation, (model_weights, client_data)
        )
        aggregation_fn = metrics_aggregator(
            model.finalize_metrics, N.member_of(unfinalized.type_signature)
        )
        measurements = I.federated_zip(collections.OrderedDict(train=aggregation_fn(unfinalized)))
        return MeasuredProcessOutput(state, client_result, measurements)

    return client_works.ClientWorkProcess(init_fn, next_fn)


def build_fed_sgd(
    model_fn: _common.ModelFn,
    server_optimizer_fn: keras_optimizer.OptimizerOrKerasFn = DEFAULT_SERVER_OPTIMIZER_FN,
    model_distributor: Optional[distributors.DistributionProcess] = None,
    model_aggregator: Optional[factory.WeightedAggregationFactory] = None,
    metrics_aggregator: Optional[MetricsAggregatorType] = None,
    loop_implementation: loop_builder.LoopImplementation = (
        loop_builder.LoopImplementation.DATASET_REDUCE
    ),
) -> learning_process.LearningProcess:
    """A `LearningProcess` of federated SGD: one gradient per client per round.

    Args:
      model_fn: a no-arg callable returning a new `VariableModel`, or a
        `FunctionalModel`.
      server_optimizer_fn: the server's `Optimizer` (default SGD at 0.1), or
        (TFF up to v0.86, whose default was Keras SGD at 0.1) a no-arg callable
        returning a Keras optimizer.
      model_distributor: a `DistributionProcess`; default broadcast.
      model_aggregator: a `WeightedAggregationFactory`; default `MeanFactory()`.
      metrics_aggregator: default ``sum_then_finalize``.
      loop_implementation: the clients' dataset loop.
    """
    initial_model_weights_fn = _common.initial_model_weights_fn(model_fn)
    model_weights_type = N.as_struct(initial_model_weights_fn.type_signature.result)
    if model_distributor is None:
        model_distributor = distributors.build_broadcast_process(model_weights_type)
    if model_aggregator is None:
        model_aggregator = mean.MeanFactory()
    aggregator = model_aggregator.create(
        N.as_tensor_or_struct(model_weights_type.trainable), T.TensorType(np.float32)
    )
    if metrics_aggregator is None:
        metrics_aggregator = metric_aggregator.sum_then_finalize
    if not callable(model_fn):
        client_work = _build_functional_fed_sgd_client_work(
            model_fn, metrics_aggregator, loop_implementation
        )
    else:
        client_work = _build_fed_sgd_client_work(model_fn, metrics_aggregator, loop_implementation)
    finalizer = apply_optimizer_finalizer.build_apply_optimizer_finalizer(
        server_optimizer_fn, model_weights_type
    )
    return composers.compose_learning_process(
        initial_model_weights_fn, model_distributor, client_work, aggregator, finalizer
    )
