"""Federated Reconstruction (TFF's ``learning/algorithms/fed_recon.py``; Singhal et al. 2021).

A `ReconstructionModel` splits its variables into global ones (trained and
aggregated as in FedAvg) and local ones (reconstructed on each client every
round, never sent to the server). Clients are stateless.

```
distributor:  broadcast the global ModelWeights
client_work:  (stateless, state ()) on each client, dataset_split_fn(dataset) -> (recon, post):
                1. global weights := broadcast; local weights as model_fn made them
                2. reconstruction: reconstruction_optimizer_fn trains the local trainable
                   variables on `recon` (global frozen; skipped when there are none)
                3. training: client_optimizer_fn trains the global trainable variables on
                   `post` (local frozen); loss and metrics_fn's metrics updated on `post` only
              update = broadcast - trained global trainable weights (zeros if any non-finite)
              weight = 0 if non-finite, else num examples of `post` (NUM_EXAMPLES) | 1 (UNIFORM)
                       | client_weighting(unfinalized metrics) (a callable)
aggregator:   model_aggregator_factory (default MeanFactory; an unweighted one wrapped, only
              with UNIFORM weighting)
finalizer:    server_optimizer_fn applied with the mean update as its gradient
metrics:      OrderedDict(distributor=(), client_work=OrderedDict(train=OrderedDict(
                  <metrics_fn's names>..., loss=...)), aggregator=..., finalizer=...)
```
The loss metric is ``MeanMetricWrapper(loss_fn(), name='loss')``. A Keras ``Loss`` with
its default reduction gives one value per batch, so the metric is the mean of the batch
losses over the post-reconstruction batches of all clients, each batch counted once
whatever its size (as in TFF, whose docstring says example-weighted).
"""

from __future__ import annotations

import collections
from typing import Callable, Mapping, Optional, Union

import keras
import numpy as np
import tensorflow as tf

from simharness.aggregators import factory, factory_utils, mean
from simharness.core import intrinsics as I
from simharness.core import types as T
from simharness.core import narrowing as N
from simharness.core.computation import Computation, federated_computation, tf_computation
from simharness.core.tracing import Value
from simharness.errors import SimharnessTypeError, SimharnessValueError
from simharness.learning import client_weight_lib
from simharness.learning._typing import Batch, Finalizer, TensorStructure
from simharness.learning.metrics import aggregator as metrics_aggregators
from simharness.learning.metrics import keras_finalizer as metrics_finalizers_lib
from simharness.learning.models import model_weights, reconstruction_model
from simharness.learning.optimizers import keras_optimizer, sgdm
from simharness.learning.optimizers.optimizer import Optimizer
from simharness.learning.templates import (
    apply_optimizer_finalizer,
    client_works,
    composers,
    distributors,
    learning_process,
)
from simharness.learning.templates._tensor_utils import zero_all_if_any_non_finite
from simharness.templates.measured_process import MeasuredProcessOutput

__all__ = ['build_fed_recon']

ReconstructionModel = reconstruction_model.ReconstructionModel
AggregationFactory = Union[factory.WeightedAggregationFactory, factory.UnweightedAggregationFactory]
LossFn = Callable[[], keras.losses.Loss]
MetricsFn = Callable[[], list]
MetricFinalizersType = collections.OrderedDict[str, Finalizer]
ModelFn = Callable[[], ReconstructionModel]
#: A training loop's state: the examples seen and the optimizer's state.
TrainState = tuple[tf.Tensor, TensorStructure]


def check_model(model: object) -> None:
    """Raises TFF's `TypeError` unless `model` is a `ReconstructionModel`."""
    if not isinstance(model, ReconstructionModel):
        raise SimharnessTypeError(
            '`model_fn` must return an instance of `tff.learning.models.ReconstructionModel`. '
            f'Got a: {type(model)}',
            expected=ReconstructionModel,
            actual=type(model),
        )


def make_metrics(
    loss_fn: LossFn, metrics_fn: Optional[MetricsFn], metric_finalizers: collections.OrderedDict
) -> list:
    """``metrics_fn() + [loss]``; records each one's finalizer in `metric_finalizers`.

    Raises:
        SimharnessValueError: two metrics share a name.
    """
    loss_metric = tf.keras.metrics.MeanMetricWrapper(loss_fn(), name='loss')  # Keras 3's
    metrics = [loss_metric] if metrics_fn is None else list(metrics_fn()) + [loss_metric]
    for metric in metrics:
        if metric.name in metric_finalizers:
            raise SimharnessValueError(
                f'Duplicate metric name detected: {metric.name}. '
                f'Already saw metrics {list(metric_finalizers.keys())}'
            )
        metric_finalizers[metric.name] = metrics_finalizers_lib.create_keras_metric_finalizer(
            metric
        )
    return metrics


def build_train_step(
    model: ReconstructionModel,
    client_loss: keras.losses.Loss,
    weights: list,
    optimizer: Optimizer,
    metrics: Optional[list] = None,
) -> Callable[[TrainState, Batch], TrainState]:
    """``(num_examples, optimizer state), batch -> same``: one step on `weights` only.

    The gradients of ``client_loss`` are taken for `weights` (the others stay
    frozen); `metrics`, if given, are updated with the batch's outputs.
    """

    @tf.function
    def reduce_fn(state: TrainState, batch: Batch) -> TrainState:
        num_examples_sum, optimizer_state = state
        with tf.GradientTape() as tape:
            output = model.forward_pass(batch, training=True)
            batch_loss = client_loss(y_true=output.labels, y_pred=output.predictions)
        gradients = tape.gradient(batch_loss, weights)
        optimizer_state, updated_weights = optimizer.next(
            optimizer_state, tuple(weights), tuple(gradients)
        )
        if not isinstance(optimizer, keras_optimizer.KerasOptimizer):
            # A Keras optimizer assigns the variables in its step; ours return new tensors.
            tf.nest.map_structure(lambda a, b: a.assign(b), weights, list(updated_weights))
        for metric in metrics or ():
            metric.update_state(y_true=output.labels, y_pred=output.predictions)
        return num_examples_sum + output.num_examples, optimizer_state

    return reduce_fn


def initial_train_state(optimizer: Optimizer, weights: list) -> TrainState:
    """``(0, optimizer.initialize(specs of weights))`` (specs as a tuple, as TFF)."""
    specs = tuple(tf.TensorSpec(v.shape, v.dtype) for v in weights)
    return tf.constant(0), optimizer.initialize(specs)


def reconstruct(
    model: ReconstructionModel,
    client_loss: keras.losses.Loss,
    optimizer: Optimizer,
    recon_dataset: tf.data.Dataset,
) -> None:
    """Trains the local trainable variables on `recon_dataset` (none: nothing to do)."""
    local_trainable = ReconstructionModel.get_local_variables(model).trainable
    if not local_trainable:
        return
    # The number of reconstruction examples is not part of any weight or metric.
    recon_dataset.reduce(
        initial_state=initial_train_state(optimizer, local_trainable),
        reduce_func=build_train_step(model, client_loss, local_trainable, optimizer),
    )


def _client_weight(
    client_weighting: client_weight_lib.ClientWeightType,
    has_non_finite_weight: tf.Tensor,
    num_examples_sum: tf.Tensor,
    unfinalized_metrics: Mapping[str, TensorStructure],
) -> tf.Tensor:
    if client_weighting is client_weight_lib.ClientWeighting.NUM_EXAMPLES:
        weight = tf.cast(num_examples_sum, tf.float32)
    elif client_weighting is client_weight_lib.ClientWeighting.UNIFORM:
        weight = tf.constant(1.0, tf.float32)
    else:
        weight = tf.cast(client_weighting(unfinalized_metrics), tf.float32)
    return tf.where(has_non_finite_weight > 0, tf.constant(0.0, tf.float32), weight)


def _build_reconstruction_client_work(
    model_fn: ModelFn,
    *,
    loss_fn: LossFn,
    metrics_fn: Optional[MetricsFn],
    client_optimizer_fn: keras_optimizer.OptimizerOrKerasFn,
    reconstruction_optimizer_fn: keras_optimizer.OptimizerOrKerasFn,
    dataset_split_fn: reconstruction_model.ReconstructionDatasetSplitFn,
    client_weighting: client_weight_lib.ClientWeightType,
    metrics_aggregator: Callable[..., Computation],
) -> client_works.ClientWorkProcess:
    """The stateless `ClientWorkProcess`: reconstruct, then train the global variables."""
    with tf.Graph().as_default():
        model_for_metadata = model_fn()
        # Names checked here too: raised inside the traced function, autograph would wrap it.
        make_metrics(loss_fn, metrics_fn, collections.OrderedDict())
    model_weights_type = reconstruction_model.global_weights_type_from_model(model_for_metadata)
    dataset_type = T.SequenceType(T.to_type(model_for_metadata.input_spec))

    @federated_computation()
    def initialize() -> Value:
        return I.federated_value((), T.SERVER)

    # Filled while `client_update` is traced; the federated computation uses them after.
    metric_finalizers: collections.OrderedDict = collections.OrderedDict()

    @tf_computation(model_weights_type, dataset_type)
    @tf.function
    def client_update(
        initial_model_weights: model_weights.ModelWeights, dataset: tf.data.Dataset
    ) -> tuple[client_works.ClientResult, TensorStructure]:
        with tf.init_scope():
            model = model_fn()
            metric_finalizers.clear()  # a second trace (variables made) makes them again
            metrics = make_metrics(loss_fn, metrics_fn, metric_finalizers)
            client_loss = loss_fn()  # the loss of each batch's gradients
            global_weights = ReconstructionModel.get_global_variables(model)
            local_weights = ReconstructionModel.get_local_variables(model)
            # Ours: made here, a Keras optimizer's variables are made once per trace (TFF
            # makes them in the body, which a second trace refuses).
            client_optimizer = keras_optimizer.build_or_verify_tff_optimizer(
                client_optimizer_fn, global_weights.trainable, disjoint_init_and_next=False
            )
            reconstruction_optimizer = keras_optimizer.build_or_verify_tff_optimizer(
                reconstruction_optimizer_fn, local_weights.trainable, disjoint_init_and_next=False
            )
        tf.nest.map_structure(lambda a, b: a.assign(b), global_weights, initial_model_weights)

        recon_dataset, post_recon_dataset = dataset_split_fn(dataset)
        reconstruct(model, client_loss, reconstruction_optimizer, recon_dataset)
        global_trainable = list(global_weights.trainable)
        num_examples_sum, _ = post_recon_dataset.reduce(
            initial_state=initial_train_state(client_optimizer, global_trainable),
            reduce_func=build_train_step(
                model, client_loss, global_trainable, client_optimizer, metrics
            ),
        )

        # The finalizer takes the update as `initial - final`.
        weights_delta = tf.nest.map_structure(
            lambda a, b: a - b, initial_model_weights.trainable, global_trainable
        )
        weights_delta, has_non_finite_weight = zero_all_if_any_non_finite(weights_delta)
        unfinalized_metrics = ReconstructionModel.read_metric_variables(metrics)
        client_weight = _client_weight(
            client_weighting, has_non_finite_weight, num_examples_sum, unfinalized_metrics
        )
        return client_works.ClientResult(weights_delta, client_weight), unfinalized_metrics

    @federated_computation(
        T.FederatedType(T.StructType([]), T.SERVER),
        T.FederatedType(model_weights_type, T.CLIENTS),
        T.FederatedType(dataset_type, T.CLIENTS),
    )
    def next_fn(
        state: Value, incoming_model_weights: Value, client_datasets: Value
    ) -> MeasuredProcessOutput:
        del state  # stateless
        client_result, unfinalized_metrics = I.federated_map(
            client_update, (incoming_model_weights, client_datasets)
        )
        metrics_aggregation_computation = metrics_aggregator(
            metric_finalizers, N.member_of(unfinalized_metrics.type_signature)
        )
        finalized_metrics = I.federated_zip(
            collections.OrderedDict(train=metrics_aggregation_computation(unfinalized_metrics))
        )
        return MeasuredProcessOutput(
            state=I.federated_value((), T.SERVER),
            result=client_result,
            measurements=finalized_metrics,
        )

    return client_works.ClientWorkProcess(initialize_fn=initialize, next_fn=next_fn)


def build_initial_model_weights_fn(model_fn: ModelFn) -> Computation:
    """``( -> ModelWeights)``: the global variables of a new model of `model_fn`."""

    @tf_computation()
    def build_initial_model_weights() -> model_weights.ModelWeights:
        model = model_fn()
        check_model(model)
        return ReconstructionModel.get_global_variables(model)

    return build_initial_model_weights


def build_fed_recon(
    model_fn: ModelFn,
    *,
    loss_fn: LossFn,
    metrics_fn: Optional[MetricsFn] = None,
    server_optimizer_fn: Optimizer = sgdm.build_sgdm(learning_rate=1.0),
    client_optimizer_fn: keras_optimizer.OptimizerOrKerasFn = sgdm.build_sgdm(learning_rate=0.1),
    reconstruction_optimizer_fn: keras_optimizer.OptimizerOrKerasFn = sgdm.build_sgdm(
        learning_rate=0.1
    ),
    dataset_split_fn: Optional[reconstruction_model.ReconstructionDatasetSplitFn] = None,
    client_weighting: Optional[client_weight_lib.ClientWeightType] = None,
    model_distributor: Optional[distributors.DistributionProcess] = None,
    model_aggregator_factory: Optional[AggregationFactory] = None,
    metrics_aggregator: Optional[Callable[..., Computation]] = (
        metrics_aggregators.sum_then_finalize
    ),
) -> learning_process.LearningProcess:
    """A `LearningProcess` of Federated Reconstruction.

    Args:
      model_fn: a no-arg callable returning a new `ReconstructionModel` each call.
      loss_fn: a no-arg callable returning a Keras loss: the gradients of both
        stages and the ``loss`` metric (post-reconstruction batches only).
      metrics_fn: a no-arg callable returning a list of Keras metrics, updated on
        the post-reconstruction batches; None: only ``loss``.
      server_optimizer_fn: the server's `Optimizer` (default SGD at 1.0).
      client_optimizer_fn: the `Optimizer` (or Keras optimizer function) of the
        global variables after reconstruction (default SGD at 0.1).
      reconstruction_optimizer_fn: the `Optimizer` (or Keras optimizer
        function) of the local variables (default SGD at 0.1).
      dataset_split_fn: a `ReconstructionDatasetSplitFn`; None:
        ``ReconstructionModel.build_dataset_split_fn(split_dataset=True)``
        (even batches reconstruct, odd ones train).
      client_weighting: a `ClientWeighting` or a callable of the client's
        unfinalized metrics; None: NUM_EXAMPLES.
      model_distributor: a `DistributionProcess`; default broadcast.
      model_aggregator_factory: a weighted or unweighted aggregation factory;
        default `MeanFactory()`.
      metrics_aggregator: ``(finalizers, unfinalized metrics type) ->
        computation``; default `sum_then_finalize`.

    Returns:
      A `LearningProcess` whose state is a `LearningAlgorithmState` of the
      global variables.

    Raises:
      TypeError: `model_fn` does not make a `ReconstructionModel`, or an
        argument has the wrong type.
      ValueError: an unweighted aggregation factory with a weighting other
        than UNIFORM.
    """
    build_initial_model_weights = build_initial_model_weights_fn(model_fn)
    model_weights_type = N.as_struct(build_initial_model_weights.type_signature.result)

    if client_weighting is None:
        client_weighting = client_weight_lib.ClientWeighting.NUM_EXAMPLES
    client_weight_lib.check_is_client_weighting_or_callable(client_weighting)
    if (
        isinstance(model_aggregator_factory, factory.UnweightedAggregationFactory)
        and client_weighting is not client_weight_lib.ClientWeighting.UNIFORM
    ):
        raise SimharnessValueError(
            'Expected `tff.learning.ClientWeighting.UNIFORM` client weighting with unweighted '
            f'aggregator, instead got {client_weighting}'
        )
    if model_distributor is None:
        model_distributor = distributors.build_broadcast_process(model_weights_type)
    if model_aggregator_factory is None:
        model_aggregator_factory = mean.MeanFactory()
    if isinstance(model_aggregator_factory, factory.UnweightedAggregationFactory):
        model_aggregator_factory = factory_utils.as_weighted_aggregator(model_aggregator_factory)
    if not isinstance(model_aggregator_factory, factory.WeightedAggregationFactory):
        raise SimharnessTypeError(
            '`model_aggregator_factory` must be a tff.aggregators.WeightedAggregationFactory or '
            f'UnweightedAggregationFactory, got {type(model_aggregator_factory).__name__}',
            expected=factory.WeightedAggregationFactory,
            actual=type(model_aggregator_factory),
        )
    model_aggregator = model_aggregator_factory.create(
        N.as_tensor_or_struct(model_weights_type.trainable), T.TensorType(np.float32)
    )
    if dataset_split_fn is None:
        dataset_split_fn = ReconstructionModel.build_dataset_split_fn(split_dataset=True)
    if metrics_aggregator is None:
        metrics_aggregator = metrics_aggregators.sum_then_finalize

    client_work = _build_reconstruction_client_work(
        model_fn,
        loss_fn=loss_fn,
        metrics_fn=metrics_fn,
        client_optimizer_fn=client_optimizer_fn,
        reconstruction_optimizer_fn=reconstruction_optimizer_fn,
        dataset_split_fn=dataset_split_fn,
        client_weighting=client_weighting,
        metrics_aggregator=metrics_aggregator,
    )
    finalizer = apply_optimizer_finalizer.build_apply_optimizer_finalizer(
        server_optimizer_fn, model_weights_type
    )
    return composers.compose_learning_process(
        initial_model_weights_fn=build_initial_model_weights,
        model_weights_distributor=model_distributor,
        client_work=client_work,
        model_update_aggregator=model_aggregator,
        model_finalizer=finalizer,
    )
