"""Federated evaluation as a learning process (TFF's ``learning/algorithms/fed_eval.py``).

```
state:        LearningAlgorithmState(global_model_weights, distributor=(),
                                     client_work=<metrics aggregation state>, aggregator, finalizer)
client_work:  the broadcast weights evaluated on each client's dataset (forward passes with
              training=False), the model's unfinalized metrics aggregated by
              metrics_aggregation_process (default SumThenFinalizeFactory over rounds)
finalizer:    identity (weights unchanged)
metrics:      OrderedDict(distributor=(), client_work=OrderedDict(eval=OrderedDict(
                  current_round_metrics=..., total_rounds_metrics=...)), aggregator=...,
                  finalizer=())
```
"""

from __future__ import annotations

import collections
from typing import Callable, Mapping, Optional, Sequence

import tensorflow as tf

from simharness.aggregators import mean
from simharness.core import intrinsics as I
from simharness.core import types as T
from simharness.core import narrowing as N
from simharness.core.computation import Computation, federated_computation, tf_computation
from simharness.core.tracing import Value
from simharness.learning import loop_builder
from simharness.learning._typing import Batch, TensorStructure
from simharness.learning.algorithms import _common
from simharness.learning.metrics import sum_aggregation_factory
from simharness.learning.models import functional, variable
from simharness.learning.models import model_weights as model_weights_lib
from simharness.learning.templates import (
    client_works,
    composers,
    distributors,
    finalizers,
    learning_process,
)
from simharness.learning.templates.model_delta_client_work import functional_weights_type
from simharness.templates.aggregation_process import AggregationProcess
from simharness.templates.measured_process import MeasuredProcessOutput

__all__ = ['build_fed_eval']


def _build_local_evaluation(
    model_fn: Callable[[], variable.VariableModel],
    model_weights_type: T.StructType,
    batch_type: T.Type,
    loop_implementation: loop_builder.LoopImplementation,
) -> Computation:
    """``(weights, dataset) -> OrderedDict(local_outputs=<unfinalized>, num_examples=int64)``."""

    @tf_computation(model_weights_type, T.SequenceType(batch_type))
    @tf.function
    def client_eval(
        incoming_model_weights: model_weights_lib.ModelWeights, dataset: tf.data.Dataset
    ) -> collections.OrderedDict[str, TensorStructure]:
        with tf.init_scope():
            model = model_fn()
        model_weights = model_weights_lib.ModelWeights.from_model(model)
        tf.nest.map_structure(lambda v, t: v.assign(t), model_weights, incoming_model_weights)

        def reduce_fn(num_examples: tf.Tensor, batch: Batch) -> tf.Tensor:
            model_output = model.forward_pass(batch, training=False)
            if model_output.num_examples is None:
                return num_examples + tf.shape(model_output.predictions, out_type=tf.int64)[0]
            return num_examples + tf.cast(model_output.num_examples, tf.int64)

        loop = loop_builder.build_training_loop(loop_implementation=loop_implementation)
        num_examples = loop(reduce_fn, dataset, lambda: tf.zeros([], dtype=tf.int64))
        return collections.OrderedDict(
            local_outputs=model.report_local_unfinalized_metrics(), num_examples=num_examples
        )

    return client_eval


def _build_functional_local_evaluation(
    model: functional.FunctionalModel,
) -> Callable[..., collections.OrderedDict]:
    """``((trainable, non_trainable), dataset) -> unfinalized metrics state`` (a `tf.function`)."""

    @tf.function
    def local_eval(
        weights: tuple[Sequence[tf.Tensor], Sequence[tf.Tensor]], dataset: tf.data.Dataset
    ) -> collections.OrderedDict:
        metrics_state = model.initialize_metrics_state()
        for batch in dataset:  # TFF: iter(dataset); this form is lowered to a tensor loop
            if isinstance(batch, Mapping):
                x, y = batch['x'], batch['y']
            else:
                x, y = batch
            batch_output = model.predict_on_batch(weights, x, training=False)
            batch_loss = model.loss(output=batch_output, label=y)
            predictions = tf.nest.flatten(batch_output)[0]
            batch_num_examples = tf.shape(predictions)[0]
            metrics_state = model.update_metrics_state(
                metrics_state,
                batch_output=variable.BatchOutput(
                    loss=batch_loss, predictions=batch_output, num_examples=batch_num_examples
                ),
                labels=y,
            )
        return metrics_state

    return local_eval


def _eval_output(metrics_output: Value) -> MeasuredProcessOutput:
    current_round_metrics, total_rounds_metrics = metrics_output.result
    measurements = I.federated_zip(
        collections.OrderedDict(
            eval=collections.OrderedDict(
                current_round_metrics=current_round_metrics,
                total_rounds_metrics=total_rounds_metrics,
            )
        )
    )
    empty_client_result = I.federated_value(
        client_works.ClientResult(update=(), update_weight=()), T.CLIENTS
    )
    return MeasuredProcessOutput(metrics_output.state, empty_client_result, measurements)


def _unfinalized_metrics_type(model: variable.VariableModel) -> T.Type:
    """The type of ``report_local_unfinalized_metrics()`` (call inside a graph)."""

    def tensor_type(x: TensorStructure) -> T.TensorType:
        t = tf.convert_to_tensor(x)
        return T.TensorType(
            t.dtype.as_numpy_dtype, t.shape.as_list() if t.shape.rank is not None else None
        )

    spec = tf.nest.map_structure(tensor_type, model.report_local_unfinalized_metrics())
    return T.StructType(list(spec.items()), container=collections.OrderedDict)


def _build_fed_eval_client_work(
    model_fn: Callable[[], variable.VariableModel],
    metrics_aggregation_process: Optional[AggregationProcess],
    model_weights_type: T.StructType,
    loop_implementation: loop_builder.LoopImplementation,
) -> client_works.ClientWorkProcess:
    with tf.Graph().as_default():
        model = model_fn()
        batch_type = T.to_type(model.input_spec)
        if metrics_aggregation_process is None:
            metrics_type = N.as_tensor_or_struct(_unfinalized_metrics_type(model))
            factory = sum_aggregation_factory.SumThenFinalizeFactory(model.metric_finalizers())
            metrics_aggregation_process = factory.create(metrics_type)
    _common.check_instance(
        metrics_aggregation_process, AggregationProcess, 'metrics_aggregation_process'
    )

    @federated_computation()
    def init_fn() -> Value:
        return metrics_aggregation_process.initialize()

    client_update_computation = _build_local_evaluation(
        model_fn, model_weights_type, batch_type, loop_implementation
    )

    @federated_computation(
        init_fn.type_signature.result,
        T.FederatedType(model_weights_type, T.CLIENTS),
        T.FederatedType(T.SequenceType(batch_type), T.CLIENTS),
    )
    def next_fn(state: Value, model_weights: Value, client_data: Value) -> MeasuredProcessOutput:
        model_outputs = I.federated_map(client_update_computation, (model_weights, client_data))
        return _eval_output(metrics_aggregation_process.next(state, model_outputs.local_outputs))

    return client_works.ClientWorkProcess(init_fn, next_fn)


def _build_functional_fed_eval_client_work(
    model: functional.FunctionalModel,
    metrics_aggregation_process: Optional[AggregationProcess],
    model_weights_type: T.StructType,
) -> client_works.ClientWorkProcess:
    weights_type = N.as_struct(functional_weights_type(model))
    tuple_weights_type = T.StructType(
        [weights_type.trainable, weights_type.non_trainable], container=tuple
    )
    batch_type = T.to_type(model.input_spec)
    local_eval = _build_functional_local_evaluation(model)
    if metrics_aggregation_process is None:
        # TFF makes local_eval a tf_computation and calls it from the client's one; here it
        # stays a tf.function (called inside), traced once on its own for its result type.
        metrics_type = N.as_tensor_or_struct(
            tf_computation(tuple_weights_type, T.SequenceType(batch_type))(
                local_eval
            ).type_signature.result
        )
        metrics_aggregation_process = sum_aggregation_factory.SumThenFinalizeFactory(
            model.finalize_metrics
        ).create(metrics_type)
    _common.check_instance(
        metrics_aggregation_process, AggregationProcess, 'metrics_aggregation_process'
    )

    @federated_computation()
    def init_fn() -> Value:
        return metrics_aggregation_process.initialize()

    @tf_computation(model_weights_type, T.SequenceType(batch_type))
    def client_update_computation(
        model_weights: model_weights_lib.ModelWeights, client_data: tf.data.Dataset
    ) -> collections.OrderedDict:
        return local_eval((model_weights.trainable, model_weights.non_trainable), client_data)

    @federated_computation(
        init_fn.type_signature.result,
        T.FederatedType(model_weights_type, T.CLIENTS),
        T.FederatedType(T.SequenceType(batch_type), T.CLIENTS),
    )
    def next_fn(state: Value, model_weights: Value, client_data: Value) -> MeasuredProcessOutput:
        unfinalized = I.federated_map(client_update_computation, (model_weights, client_data))
        return _eval_output(metrics_aggregation_process.next(state, unfinalized))

    return client_works.ClientWorkProcess(init_fn, next_fn)


def build_fed_eval(
    model_fn: _common.ModelFn,
    model_distributor: Optional[distributors.DistributionProcess] = None,
    metrics_aggregation_process: Optional[AggregationProcess] = None,
    loop_implementation: loop_builder.LoopImplementation = (
        loop_builder.LoopImplementation.DATASET_REDUCE
    ),
) -> learning_process.LearningProcess:
    """A `LearningProcess` that evaluates the model on the clients' data (no training).

    Set the weights to evaluate with ``process.set_model_weights(state, weights)``.

    Args:
      model_fn: a no-arg callable returning a new `VariableModel`, or a
        `FunctionalModel`.
      model_distributor: a `DistributionProcess`; default broadcast.
      metrics_aggregation_process: an `AggregationProcess` of the clients'
        unfinalized metrics whose result is ``(current_round_metrics,
        total_rounds_metrics)``; default ``SumThenFinalizeFactory``.
      loop_implementation: the clients' dataset loop (`VariableModel` only).

    Raises:
      SimharnessTypeError: an argument has the wrong type.
    """
    initial_model_weights_fn = _common.initial_model_weights_fn(model_fn)
    model_weights_type = N.as_struct(initial_model_weights_fn.type_signature.result)
    if model_distributor is None:
        model_distributor = distributors.build_broadcast_process(model_weights_type)
    else:
        _common.check_instance(
            model_distributor, distributors.DistributionProcess, 'model_distributor'
        )
    if not callable(model_fn):
        client_work = _build_functional_fed_eval_client_work(
            model_fn, metrics_aggregation_process, model_weights_type
        )
    else:
        client_work = _build_fed_eval_client_work(
            model_fn, metrics_aggregation_process, model_weights_type, loop_implementation
        )
    result_type = N.as_struct(T.to_type(client_works.ClientResult(update=(), update_weight=())))
    model_aggregator = mean.MeanFactory().create(
        N.as_tensor_or_struct(result_type.update), N.as_tensor_or_struct(result_type.update_weight)
    )
    aggregated = N.as_struct(model_aggregator.next.type_signature.result)
    finalizer = finalizers.build_identity_finalizer(
        model_weights_type, N.as_struct(N.member_of(aggregated.result))
    )
    return composers.compose_learning_process(
        initial_model_weights_fn, model_distributor, client_work, model_aggregator, finalizer
    )
