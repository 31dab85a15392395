"""Evaluation for Federated Reconstruction (TFF's ``learning/algorithms/fed_recon_eval.py``).

A trained `ReconstructionModel` holds only global variables: each client
first reconstructs its local variables on part of its data, then evaluates
the model (global and reconstructed local variables) on another part.

```
state:        LearningAlgorithmState(global_model_weights, distributor,
                                     client_work=<metrics aggregation state>,
                                     aggregator=OrderedDict(value_sum_process=(),
                                                            weight_sum_process=()),
                                     finalizer=())
client_work:  dataset_split_fn(dataset) -> (recon, eval); global weights := broadcast;
              reconstruction_optimizer_fn trains the local trainable variables on `recon`;
              forward passes (training=False) on `eval` update metrics_fn's metrics + loss;
              the unfinalized metrics aggregated by metrics_aggregation_process
              (default SumThenFinalizeFactory over rounds)
finalizer:    identity (weights unchanged)
metrics:      OrderedDict(distributor=..., client_work=OrderedDict(eval=OrderedDict(
                  current_round_metrics=..., total_rounds_metrics=...)),
                  aggregator=OrderedDict(mean_value=(), mean_weight=()), finalizer=())
```
Set the weights to evaluate with ``process.set_model_weights(state, weights)``.
"""

from __future__ import annotations

import collections
from typing import Optional

import tensorflow as tf

from simharness.aggregators import mean
from simharness.core import intrinsics as I
from simharness.core import types as T
from simharness.core import narrowing as N
from simharness.core.computation import federated_computation, tf_computation
from simharness.core.tracing import Value
from simharness.learning._typing import Batch
from simharness.learning.algorithms import _common, fed_recon
from simharness.learning.metrics import sum_aggregation_factory
from simharness.learning.models import model_weights as model_weights_lib
from simharness.learning.models import reconstruction_model
from simharness.learning.optimizers import keras_optimizer, sgdm
from simharness.learning.templates import (
    client_works,
    composers,
    distributors,
    finalizers,
    learning_process,
)
from simharness.templates.aggregation_process import AggregationProcess
from simharness.templates.measured_process import MeasuredProcessOutput

__all__ = ['build_fed_recon_eval']

ReconstructionModel = reconstruction_model.ReconstructionModel


def build_fed_recon_eval(
    model_fn: fed_recon.ModelFn,
    *,
    loss_fn: fed_recon.LossFn,
    metrics_fn: Optional[fed_recon.MetricsFn] = None,
    reconstruction_optimizer_fn: keras_optimizer.OptimizerOrKerasFn = sgdm.build_sgdm(
        learning_rate=0.1
    ),
    dataset_split_fn: Optional[reconstruction_model.ReconstructionDatasetSplitFn] = None,
    model_distributor: Optional[distributors.DistributionProcess] = None,
    metrics_aggregation_process: Optional[AggregationProcess] = None,
) -> learning_process.LearningProcess:
    """A `LearningProcess` that reconstructs the local variables, then evaluates.

    Args:
      model_fn: a no-arg callable returning a new `ReconstructionModel` each call.
      loss_fn: a no-arg callable returning a Keras loss: the reconstruction's
        gradients and the ``loss`` metric (evaluation batches only).
      metrics_fn: a no-arg callable returning a list of Keras metrics, updated
        on the evaluation batches; None: only ``loss``.
      reconstruction_optimizer_fn: the `Optimizer` (or Keras optimizer
        function) of the local variables (default SGD at 0.1).
      dataset_split_fn: a `ReconstructionDatasetSplitFn`; None:
        ``ReconstructionModel.build_dataset_split_fn(split_dataset=True)``.
      model_distributor: a `DistributionProcess`; default broadcast.
      metrics_aggregation_process: an `AggregationProcess` of the clients'
        unfinalized metrics whose result is ``(current_round_metrics,
        total_rounds_metrics)``; default ``SumThenFinalizeFactory``.

    Returns:
      A `LearningProcess` whose ``next`` evaluates ``state``'s global weights
      (they are not changed).

    Raises:
      TypeError: `model_fn` does not make a `ReconstructionModel`, or
        `model_distributor` / `metrics_aggregation_process` has the wrong
        type or signature.
    """
    batch_type = None

    @tf_computation()
    def build_initial_model_weights() -> model_weights_lib.ModelWeights:
        model = model_fn()
        fed_recon.check_model(model)
        nonlocal batch_type
        batch_type = T.to_type(model.input_spec)
        return ReconstructionModel.get_global_variables(model)

    if dataset_split_fn is None:
        dataset_split_fn = ReconstructionModel.build_dataset_split_fn(split_dataset=True)
    with tf.Graph().as_default():  # the metric names checked before tracing
        fed_recon.make_metrics(loss_fn, metrics_fn, collections.OrderedDict())
    model_weights_type = N.as_struct(build_initial_model_weights.type_signature.result)
    dataset_type = T.SequenceType(batch_type)
    if model_distributor is None:
        model_distributor = distributors.build_broadcast_process(model_weights_type)

    # Filled while `client_computation` is traced; the federated computation uses them after.
    metric_finalizers: collections.OrderedDict = collections.OrderedDict()

    @tf_computation(model_weights_type, dataset_type)
    def client_computation(
        incoming_model_weights: model_weights_lib.ModelWeights, client_dataset: tf.data.Dataset
    ) -> collections.OrderedDict:
        client_model = model_fn()
        client_global_weights = ReconstructionModel.get_global_variables(client_model)
        client_local_weights = ReconstructionModel.get_local_variables(client_model)
        metrics = fed_recon.make_metrics(loss_fn, metrics_fn, metric_finalizers)
        client_loss = loss_fn()  # the loss of the reconstruction's gradients
        reconstruction_optimizer = keras_optimizer.build_or_verify_tff_optimizer(
            reconstruction_optimizer_fn,
            client_local_weights.trainable,
            disjoint_init_and_next=False,
        )

        @tf.function
        def evaluation_reduce_fn(num_examples_sum: tf.Tensor, batch: Batch) -> tf.Tensor:
            output = client_model.forward_pass(batch, training=False)
            for metric in metrics:
                metric.update_state(y_true=output.labels, y_pred=output.predictions)
            return num_examples_sum + output.num_examples

        @tf.function
        def tf_client_computation(
            incoming_model_weights: model_weights_lib.ModelWeights, client_dataset: tf.data.Dataset
        ) -> collections.OrderedDict:
            recon_dataset, eval_dataset = dataset_split_fn(client_dataset)
            tf.nest.map_structure(
                lambda v, t: v.assign(t), client_global_weights, incoming_model_weights
            )
            fed_recon.reconstruct(
                client_model, client_loss, reconstruction_optimizer, recon_dataset
            )
            eval_dataset.reduce(tf.constant(0), evaluation_reduce_fn)
            return ReconstructionModel.read_metric_variables(metrics)

        return tf_client_computation(incoming_model_weights, client_dataset)

    if metrics_aggregation_process is None:
        metrics_aggregation_process = sum_aggregation_factory.SumThenFinalizeFactory(
            metric_finalizers
        ).create(client_computation.type_signature.result)
    else:
        _common.check_instance(
            metrics_aggregation_process, AggregationProcess, 'metrics_aggregation_process'
        )

    @federated_computation()
    def client_initialize() -> Value:
        return metrics_aggregation_process.initialize()

    @federated_computation(
        client_initialize.type_signature.result,
        T.FederatedType(model_weights_type, T.CLIENTS),
        T.FederatedType(dataset_type, T.CLIENTS),
    )
    def client_work_next(
        state: Value, model_weights: Value, client_dataset: Value
    ) -> MeasuredProcessOutput:
        unfinalized_metrics = I.federated_map(client_computation, (model_weights, client_dataset))
        metrics_output = metrics_aggregation_process.next(state, unfinalized_metrics)
        current_round_metrics, total_rounds_metrics = metrics_output.result
        measurements = I.federated_zip(
            collections.OrderedDict(
                eval=collections.OrderedDict(
                    current_round_metrics=current_round_metrics,
                    total_rounds_metrics=total_rounds_metrics,
                )
            )
        )
        # No model update in evaluation: the clients' result is empty.
        empty_client_result = I.federated_value(
            client_works.ClientResult(update=(), update_weight=()), T.CLIENTS
        )
        return MeasuredProcessOutput(metrics_output.state, empty_client_result, measurements)

    client_work = client_works.ClientWorkProcess(
        initialize_fn=client_initialize, next_fn=client_work_next
    )
    empty_result_type = N.as_struct(
        T.to_type(client_works.ClientResult(update=(), update_weight=()))
    )
    empty_model_aggregator = mean.MeanFactory().create(
        N.as_tensor_or_struct(empty_result_type.update),
        N.as_tensor_or_struct(empty_result_type.update_weight),
    )
    identity_finalizer = finalizers.build_identity_finalizer(
        model_weights_type, update_type=N.as_struct(empty_result_type.update_weight)
    )
    return composers.compose_learning_process(
        build_initial_model_weights,
        model_distributor,
        client_work,
        empty_model_aggregator,
        identity_finalizer,
    )
