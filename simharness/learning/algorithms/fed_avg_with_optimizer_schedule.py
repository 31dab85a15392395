"""FedAvg with a client learning-rate schedule (TFF's ``fed_avg_with_optimizer_schedule.py``).

```
client_work state: the round number (int32, from 0)
round r:  client optimizer = client_optimizer_fn(client_learning_rate_fn(r)); local training
          as FedAvg (weight: num_examples); state r + 1
          (a TFF Optimizer, or as in TFF up to v0.86 a Keras optimizer: apply_gradients
          on the model's variables)
measurements: OrderedDict(train=<model metrics>, client_learning_rate=client_learning_rate_fn(r))
```
"""

from __future__ import annotations

import collections
from typing import Callable, Optional, Union

import numpy as np
import tensorflow as tf

from simharness.aggregators import factory, mean
from simharness.core import intrinsics as I
from simharness.core import types as T
from simharness.core import narrowing as N
from simharness.core.computation import federated_computation, tf_computation
from simharness.core.tracing import Value
from simharness.errors import SimharnessValueError
from simharness.learning import loop_builder
from simharness.learning._typing import TensorStructure
from simharness.learning.algorithms import _common, fed_avg
from simharness.learning.client_weight_lib import ClientWeighting
from simharness.learning.metrics import aggregator as metric_aggregator
from simharness.learning.metrics.types import MetricsAggregatorType
from simharness.learning.models import functional, variable
from simharness.learning.models import model_weights as model_weights_lib
from simharness.learning.optimizers import keras_optimizer
from simharness.learning.optimizers.optimizer import Float, Int, Optimizer
from simharness.learning.templates import (
    apply_optimizer_finalizer,
    client_works,
    composers,
    distributors,
    learning_process,
    model_delta_client_work,
)
from simharness.templates.measured_process import MeasuredProcessOutput

__all__ = [
    'TFFOrKerasOptimizer',
    'build_scheduled_client_work',
    'build_weighted_fed_avg_with_optimizer_schedule',
]

#: What `client_optimizer_fn` returns: a TFF `Optimizer` or (TFF up to v0.86) a Keras one.
TFFOrKerasOptimizer = Union[Optimizer, keras_optimizer.KerasOptimizerLike]


def _keras_learning_rate(learning_rate: tf.Tensor) -> object:
    """`learning_rate` (a tensor) as a Keras 3 optimizer takes it.

    Keras 2 (TFF's) made a variable of a tensor learning rate; Keras 3 takes only a
    float, a ``LearningRateSchedule`` or a callable: this is a schedule of the
    constant `learning_rate` (the same value at each step, the same bits).
    """

    class _RoundLearningRate(tf.keras.optimizers.schedules.LearningRateSchedule):
        def __call__(self, step: tf.Tensor) -> tf.Tensor:
            del step
            return learning_rate

        def get_config(self) -> dict[str, float]:
            return {}

    return _RoundLearningRate()


def build_scheduled_client_work(
    model_fn: _common.ModelFn,
    learning_rate_fn: Callable[[Int], Float],
    optimizer_fn: Callable[[Float], TFFOrKerasOptimizer],
    metrics_aggregator: MetricsAggregatorType,
    loop_implementation: loop_builder.LoopImplementation = (
        loop_builder.LoopImplementation.DATASET_REDUCE
    ),
) -> client_works.ClientWorkProcess:
    """A `ClientWorkProcess` whose optimizer's learning rate follows the round number.

    Args:
      model_fn: a no-arg callable returning a `VariableModel`, or a `FunctionalModel`.
      learning_rate_fn: round number (an int32 tensor) -> learning rate.
      optimizer_fn: learning rate -> a `tff.learning.optimizers.Optimizer`, or
        a Keras optimizer (TFF up to v0.86; not with a `FunctionalModel`).
      metrics_aggregator: e.g. ``sum_then_finalize``.
      loop_implementation: the clients' dataset loop.

    Raises:
      SimharnessValueError: `model_fn` is a `FunctionalModel` and `optimizer_fn`
        does not build a TFF `Optimizer` (TFF's ValueError).
    """
    model: Union[functional.FunctionalModel, variable.VariableModel]
    with tf.Graph().as_default():
        if isinstance(model_fn, functional.FunctionalModel):
            model = model_fn
            weights_type = model_delta_client_work.functional_weights_type(model)
            metrics_aggregation_fn = metrics_aggregator(model.finalize_metrics)
        else:
            model = model_fn()
            weights_type = model_weights_lib.weights_type_from_model(model)
            metrics_aggregation_fn = metrics_aggregator(model.metric_finalizers())
        whimsy_optimizer = optimizer_fn(1.0)
        data_type = T.SequenceType(T.to_type(model.input_spec))
    uses_keras = not isinstance(whimsy_optimizer, Optimizer)
    if isinstance(model_fn, functional.FunctionalModel) and uses_keras:
        raise SimharnessValueError(
            'If model_fn is a `FunctionalModel`, `optimizer_fn` must be a '
            f'tff.learning.optimizers.Optimizer, got {type(optimizer_fn)=}'
        )

    @tf_computation(weights_type, data_type, np.int32)
    def client_update_computation(
        initial_model_weights: model_weights_lib.ModelWeights,
        dataset: tf.data.Dataset,
        round_num: tf.Tensor,
    ) -> tuple[client_works.ClientResult, TensorStructure]:
        learning_rate = learning_rate_fn(round_num)
        if uses_keras and tf.is_tensor(learning_rate):
            learning_rate = _keras_learning_rate(learning_rate)
        optimizer = optimizer_fn(learning_rate)
        if isinstance(model_fn, functional.FunctionalModel):
            update = model_delta_client_work.build_functional_model_delta_update(
                model_fn,
                weighting=ClientWeighting.NUM_EXAMPLES,
                loop_implementation=loop_implementation,
            )
            return update(
                optimizer,
                (initial_model_weights.trainable, initial_model_weights.non_trainable),
                dataset,
            )
        if uses_keras:
            keras_update = model_delta_client_work.build_model_delta_update_with_keras_optimizer(
                model_fn,
                weighting=ClientWeighting.NUM_EXAMPLES,
                loop_implementation=loop_implementation,
            )
            return keras_update(optimizer, initial_model_weights, dataset)
        update = model_delta_client_work.build_model_delta_update_with_tff_optimizer(
            model_fn,
            weighting=ClientWeighting.NUM_EXAMPLES,
            loop_implementation=loop_implementation,
        )
        return update(optimizer, initial_model_weights, dataset)

    @federated_computation()
    def init_fn() -> Value:
        return I.federated_value(0, T.SERVER)

    @tf_computation(np.int32)
    @tf.function
    def add_one(x: tf.Tensor) -> tf.Tensor:
        return x + 1

    @tf_computation(np.int32)
    @tf.function
    def tf_learning_rate_fn(x: tf.Tensor) -> Float:
        return learning_rate_fn(x)

    @federated_computation(
        init_fn.type_signature.result,
        T.FederatedType(weights_type, T.CLIENTS),
        T.FederatedType(data_type, T.CLIENTS),
    )
    def next_fn(state: Value, weights: Value, client_data: Value) -> MeasuredProcessOutput:
        round_num_at_clients = I.federated_broadcast(state)
        learning_rate = I.federated_map(tf_learning_rate_fn, state)
        client_result, model_outputs = I.federated_map(
            client_update_computation, (weights, client_data, round_num_at_clients)
        )
        measurements = I.federated_zip(
            collections.OrderedDict(
                train=metrics_aggregation_fn(model_outputs), client_learning_rate=learning_rate
            )
        )
        return MeasuredProcessOutput(I.federated_map(add_one, state), client_result, measurements)

    return client_works.ClientWorkProcess(init_fn, next_fn)


def build_weighted_fed_avg_with_optimizer_schedule(
    model_fn: _common.ModelFn,
    client_learning_rate_fn: Callable[[Int], Float],
    client_optimizer_fn: Callable[[Float], TFFOrKerasOptimizer],
    server_optimizer_fn: Optional[keras_optimizer.OptimizerOrKerasFn] = None,
    model_distributor: Optional[distributors.DistributionProcess] = None,
    model_aggregator: Optional[factory.WeightedAggregationFactory] = None,
    metrics_aggregator: Optional[MetricsAggregatorType] = None,
    loop_implementation: loop_builder.LoopImplementation = (
        loop_builder.LoopImplementation.DATASET_REDUCE
    ),
) -> learning_process.LearningProcess:
    """FedAvg (weighted by examples) whose client learning rate is scheduled by round.

    Args:
      model_fn: a no-arg callable returning a `VariableModel`, or a `FunctionalModel`.
      client_learning_rate_fn: round number -> client learning rate.
      client_optimizer_fn: learning rate -> the clients' `Optimizer`
        (e.g. ``lambda lr: build_sgdm(lr)``) or Keras optimizer (TFF up to
        v0.86, e.g. ``tf.keras.optimizers.SGD``).
      server_optimizer_fn: an `Optimizer` or a no-arg callable returning a Keras
        optimizer (TFF up to v0.86); default SGD at 1.0.
      model_distributor, model_aggregator, metrics_aggregator,
      loop_implementation: as `build_weighted_fed_avg`.
    """
    if server_optimizer_fn is None:
        server_optimizer_fn = fed_avg.DEFAULT_SERVER_OPTIMIZER_FN()
    initial_model_weights_fn = _common.initial_model_weights_fn(model_fn)
    model_weights_type = N.as_struct(initial_model_weights_fn.type_signature.result)
    if model_distributor is None:
        model_distributor = distributors.build_broadcast_process(model_weights_type)
    if model_aggregator is None:
        model_aggregator = mean.MeanFactory()
    _common.check_instance(model_aggregator, factory.WeightedAggregationFactory, 'model_aggregator')
    aggregator = model_aggregator.create(
        N.as_tensor_or_struct(model_weights_type.trainable), T.TensorType(np.float32)
    )
    _common.check_aggregator_keeps_type(aggregator)
    if metrics_aggregator is None:
        metrics_aggregator = metric_aggregator.sum_then_finalize
    client_work = build_scheduled_client_work(
        model_fn,
        client_learning_rate_fn,
        client_optimizer_fn,
        metrics_aggregator,
        loop_implementation,
    )
    finalizer = apply_optimizer_finalizer.build_apply_optimizer_finalizer(
        server_optimizer_fn, model_weights_type
    )
    return composers.compose_learning_process(
        initial_model_weights_fn, model_distributor, client_work, aggregator, finalizer
    )
