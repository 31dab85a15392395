"""Mime Lite (TFF's ``learning/algorithms/mime.py``; Karimireddy et al. 2020).

```
build_weighted_mime_lite(model_fn, base_optimizer, server_optimizer=SGD(1.0), ...)
build_unweighted_mime_lite(...)                 UNIFORM weighting, unweighted aggregators
build_mime_lite_with_optimizer_schedule(model_fn, learning_rate_fn, base_optimizer, ...)
    client_work state (round, mime state); the base optimizer's learning rate is
    learning_rate_fn(round), set before each round
```
The client work is in `_mime_client_work`; the rest is FedAvg's composition.
"""

from __future__ import annotations

from typing import Callable, Optional

import numpy as np
import tensorflow as tf

from simharness.aggregators import factory, factory_utils, mean
from simharness.core import intrinsics as I
from simharness.core import types as T
from simharness.core import narrowing as N
from simharness.core.computation import federated_computation, tf_computation
from simharness.core.tracing import Value
from simharness.errors import SimharnessTypeError
from simharness.learning import loop_builder
from simharness.learning._typing import TensorStructure
from simharness.learning.algorithms import _common
from simharness.learning.algorithms._mime_client_work import build_mime_lite_client_work
from simharness.learning.client_weight_lib import ClientWeighting
from simharness.learning.metrics.types import MetricsAggregatorType
from simharness.learning.models import functional
from simharness.learning.optimizers import sgdm
from simharness.learning.optimizers.optimizer import (
    LEARNING_RATE_KEY,
    Float,
    Int,
    Optimizer,
    OptimizerState,
)
from simharness.learning.templates import (
    apply_optimizer_finalizer,
    client_works,
    composers,
    distributors,
    learning_process,
)
from simharness.templates.measured_process import MeasuredProcessOutput

#: Mime Lite's client work state: the server optimizer's state and the full-gradient
#: aggregator's.
MimeState = tuple[OptimizerState, TensorStructure]

__all__ = [
    'build_mime_lite_with_optimizer_schedule',
    'build_unweighted_mime_lite',
    'build_weighted_mime_lite',
]


def _build_scheduled_client_work(
    model_fn: _common.ModelFn,
    learning_rate_fn: Callable[[Int], Float],
    optimizer: Optimizer,
    client_weighting: ClientWeighting,
    full_gradient_aggregator: Optional[factory.WeightedAggregationFactory],
    metrics_aggregator: Optional[MetricsAggregatorType],
    loop_implementation: loop_builder.LoopImplementation,
) -> client_works.ClientWorkProcess:
    client_work = build_mime_lite_client_work(
        model_fn,
        optimizer,
        client_weighting,
        full_gradient_aggregator,
        metrics_aggregator,
        loop_implementation,
    )
    params = N.as_struct(client_work.next.type_signature.parameter, 'client work next')
    mime_state_type, weights_type, data_type = (N.member_of(t) for t in params)

    def with_learning_rate(mime_state: MimeState, learning_rate: Float) -> MimeState:
        optimizer_state, aggregator_state = mime_state
        optimizer_state = type(optimizer_state)(optimizer_state)
        optimizer_state[LEARNING_RATE_KEY] = tf.cast(
            learning_rate, tf.convert_to_tensor(optimizer_state[LEARNING_RATE_KEY]).dtype
        )
        return optimizer_state, aggregator_state

    @tf_computation(mime_state_type)
    def initialize_learning_rate(mime_state: MimeState) -> MimeState:
        return with_learning_rate(mime_state, learning_rate_fn(0))

    @federated_computation()
    def init_fn() -> Value:
        updated = I.federated_map(initialize_learning_rate, client_work.initialize())
        return I.federated_zip((I.federated_value(0, T.SERVER), updated))

    state_type = N.member_of(init_fn.type_signature.result)

    @tf_computation(state_type)
    def update_state(state: tuple[tf.Tensor, MimeState]) -> tuple[tf.Tensor, MimeState]:
        round_num = state[0] + 1
        return round_num, with_learning_rate(state[1], learning_rate_fn(round_num))

    @federated_computation(
        init_fn.type_signature.result,
        T.FederatedType(weights_type, T.CLIENTS),
        T.FederatedType(data_type, T.CLIENTS),
    )
    def next_fn(state: Value, weights: Value, client_data: Value) -> MeasuredProcessOutput:
        round_num, mime_state = state
        output = client_work.next(mime_state, weights, client_data)
        updated = I.federated_map(update_state, I.federated_zip((round_num, output.state)))
        return MeasuredProcessOutput(updated, output.result, output.measurements)

    return client_works.ClientWorkProcess(init_fn, next_fn)


#: TFF's private names of the client work builders (its tests call them).
_build_mime_lite_client_work = build_mime_lite_client_work


def _build_mime_lite_functional_client_work(
    model: functional.FunctionalModel,
    optimizer: Optimizer,
    client_weighting: ClientWeighting,
    full_gradient_aggregator: Optional[factory.WeightedAggregationFactory] = None,
    metrics_aggregator: Optional[MetricsAggregatorType] = None,
    loop_implementation: loop_builder.LoopImplementation = (
        loop_builder.LoopImplementation.DATASET_REDUCE
    ),
) -> client_works.ClientWorkProcess:
    _common.check_instance(model, functional.FunctionalModel, 'model')
    return build_mime_lite_client_work(
        model,
        optimizer,
        client_weighting,
        full_gradient_aggregator,
        metrics_aggregator,
        loop_implementation,
    )


def _compose(
    model_fn: _common.ModelFn,
    server_optimizer: Optimizer,
    model_distributor: Optional[distributors.DistributionProcess],
    model_aggregator: Optional[factory.WeightedAggregationFactory],
    full_gradient_aggregator: Optional[factory.WeightedAggregationFactory],
    build_client_work: Callable[
        [factory.WeightedAggregationFactory], client_works.ClientWorkProcess
    ],
) -> learning_process.LearningProcess:
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
    if full_gradient_aggregator is None:
        full_gradient_aggregator = mean.MeanFactory()
    _common.check_instance(
        full_gradient_aggregator, factory.WeightedAggregationFactory, 'full_gradient_aggregator'
    )
    client_work = build_client_work(full_gradient_aggregator)
    finalizer = apply_optimizer_finalizer.build_apply_optimizer_finalizer(
        server_optimizer, model_weights_type
    )
    return composers.compose_learning_process(
        initial_model_weights_fn, model_distributor, client_work, aggregator, finalizer
    )


def _check(base_optimizer: object, server_optimizer: object, client_weighting: object) -> None:
    _common.check_instance(base_optimizer, Optimizer, 'base_optimizer')
    _common.check_instance(server_optimizer, Optimizer, 'server_optimizer')
    _common.check_instance(client_weighting, ClientWeighting, 'client_weighting')


def build_weighted_mime_lite(
    model_fn: _common.ModelFn,
    base_optimizer: Optimizer,
    server_optimizer: Optimizer = sgdm.build_sgdm(1.0),
    client_weighting: ClientWeighting = ClientWeighting.NUM_EXAMPLES,
    model_distributor: Optional[distributors.DistributionProcess] = None,
    model_aggregator: Optional[factory.WeightedAggregationFactory] = None,
    full_gradient_aggregator: Optional[factory.WeightedAggregationFactory] = None,
    metrics_aggregator: Optional[MetricsAggregatorType] = None,
    loop_implementation: loop_builder.LoopImplementation = (
        loop_builder.LoopImplementation.DATASET_REDUCE
    ),
) -> learning_process.LearningProcess:
    """A `LearningProcess` of Mime Lite with weighted clients.

    Args:
      model_fn: a no-arg callable returning a `VariableModel`, or a `FunctionalModel`.
      base_optimizer: the `Optimizer` whose server-held state the clients use
        (``build_sgdm(lr, momentum)``, ``build_adam(...)``, ...).
      server_optimizer: applies the mean model update at the server.
      client_weighting, model_distributor, model_aggregator, metrics_aggregator,
      loop_implementation: as `build_weighted_fed_avg`.
      full_gradient_aggregator: aggregates the clients' full gradients
        (default `MeanFactory()`).

    Raises:
      SimharnessTypeError: an argument has the wrong type.
    """
    _check(base_optimizer, server_optimizer, client_weighting)
    return _compose(
        model_fn,
        server_optimizer,
        model_distributor,
        model_aggregator,
        full_gradient_aggregator,
        lambda agg: build_mime_lite_client_work(
            model_fn, base_optimizer, client_weighting, agg, metrics_aggregator, loop_implementation
        ),
    )


def build_unweighted_mime_lite(
    model_fn: _common.ModelFn,
    base_optimizer: Optimizer,
    server_optimizer: Optimizer = sgdm.build_sgdm(1.0),
    model_distributor: Optional[distributors.DistributionProcess] = None,
    model_aggregator: Optional[factory.UnweightedAggregationFactory] = None,
    full_gradient_aggregator: Optional[factory.UnweightedAggregationFactory] = None,
    metrics_aggregator: Optional[MetricsAggregatorType] = None,
    loop_implementation: loop_builder.LoopImplementation = (
        loop_builder.LoopImplementation.DATASET_REDUCE
    ),
) -> learning_process.LearningProcess:
    """Mime Lite with every client counted the same (unweighted aggregators)."""
    if model_aggregator is None:
        model_aggregator = mean.UnweightedMeanFactory()
    _common.check_instance(
        model_aggregator, factory.UnweightedAggregationFactory, 'model_aggregator'
    )
    if full_gradient_aggregator is None:
        full_gradient_aggregator = mean.UnweightedMeanFactory()
    _common.check_instance(
        full_gradient_aggregator, factory.UnweightedAggregationFactory, 'full_gradient_aggregator'
    )
    return build_weighted_mime_lite(
        model_fn=model_fn,
        base_optimizer=base_optimizer,
        server_optimizer=server_optimizer,
        client_weighting=ClientWeighting.UNIFORM,
        model_distributor=model_distributor,
        model_aggregator=factory_utils.as_weighted_aggregator(model_aggregator),
        full_gradient_aggregator=factory_utils.as_weighted_aggregator(full_gradient_aggregator),
        metrics_aggregator=metrics_aggregator,
        loop_implementation=loop_implementation,
    )


def build_mime_lite_with_optimizer_schedule(
    model_fn: _common.ModelFn,
    learning_rate_fn: Callable[[Int], Float],
    base_optimizer: Optimizer,
    server_optimizer: Optimizer = sgdm.build_sgdm(1.0),
    client_weighting: ClientWeighting = ClientWeighting.NUM_EXAMPLES,
    model_distributor: Optional[distributors.DistributionProcess] = None,
    model_aggregator: Optional[factory.WeightedAggregationFactory] = None,
    full_gradient_aggregator: Optional[factory.WeightedAggregationFactory] = None,
    metrics_aggregator: Optional[MetricsAggregatorType] = None,
    loop_implementation: loop_builder.LoopImplementation = (
        loop_builder.LoopImplementation.DATASET_REDUCE
    ),
) -> learning_process.LearningProcess:
    """Mime Lite whose base optimizer's learning rate is ``learning_rate_fn(round)``.

    Args: as `build_weighted_mime_lite`, and `learning_rate_fn` (round number ->
    learning rate; the base optimizer's state must hold ``learning_rate``).
    """
    _check(base_optimizer, server_optimizer, client_weighting)
    if not callable(learning_rate_fn):
        raise SimharnessTypeError(
            f'learning_rate_fn must be callable (round number -> learning rate), got '
            f'{learning_rate_fn!r} of type {type(learning_rate_fn).__name__}',
            actual=type(learning_rate_fn),
        )
    return _compose(
        model_fn,
        server_optimizer,
        model_distributor,
        model_aggregator,
        full_gradient_aggregator,
        lambda agg: _build_scheduled_client_work(
            model_fn,
            learning_rate_fn,
            base_optimizer,
            client_weighting,
            agg,
            metrics_aggregator,
            loop_implementation,
        ),
    )
