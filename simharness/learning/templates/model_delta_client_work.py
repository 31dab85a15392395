"""Client work that trains locally and reports the model delta (TFF's ``model_delta_client_work.py``).

```
client_update(state=optimizer hparams, weights W, dataset):
  model weights := W
  for batch in dataset (loop_implementation: dataset.reduce | for ... in iter(dataset)):
      gradients of forward_pass(batch).loss; optimizer.next(...)
      (a Keras optimizer, made per client update: apply_gradients on the model's variables)
  update        = W.trainable - trained weights        (zeros if any is non-finite)
  update_weight = num_examples | 1.0                   (client_weighting; 0.0 if non-finite)
  metrics       = the model's local unfinalized metrics (reset if non-finite)
measurements: OrderedDict(train=metrics_aggregator(finalizers)(client metrics))
```

The client computation is one `tf_computation` over ``SequenceType(batch)``:
its dataset loop is lowered to a tensor loop on our runtime when the client's
data are in-memory tensors (`simharness.executors.leaf.sequence_lowering`).

The optimizer is a `tff.learning.optimizers.Optimizer` (state: its
hyperparameters), or, as in TFF up to v0.86, a no-argument function returning a
Keras optimizer (state ``()``, no hyperparameters): each client update makes one,
builds its variables for the model's trainable variables and steps with
``apply_gradients`` (`build_model_delta_update_with_keras_optimizer`).
"""

from __future__ import annotations

import collections
from typing import Callable, Mapping, Optional

import numpy as np
import tensorflow as tf

from simharness.core import intrinsics as I
from simharness.core import types as T
from simharness.core import narrowing as N
from simharness.core.computation import federated_computation, tf_computation
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
from simharness.templates.measured_process import MeasuredProcessOutput

__all__ = [
    'build_functional_model_delta_client_work',
    'build_functional_model_delta_update',
    'build_model_delta_client_work',
    'build_model_delta_update_with_keras_optimizer',
    'build_model_delta_update_with_tff_optimizer',
]

#: A client update (a `tf.function`): ``(optimizer, initial weights, dataset[, optimizer
#: hyperparameters]) -> (ClientResult, the model's unfinalized metrics)``.
ClientUpdateFn = Callable[..., tuple[client_works.ClientResult, TensorStructure]]

#: ``(gradients, weights, initial weights) -> gradients``: a change to the gradients
#: before the optimizer's step (FedProx' proximal term).
GradientsAdjustment = Callable[[TensorStructure, TensorStructure, TensorStructure], TensorStructure]


def choose_client_weight(
    weighting: ClientWeighting, has_non_finite_delta: tf.Tensor, num_examples: tf.Tensor
) -> tf.Tensor:
    """The client's weight: 0 if its update was non-finite, else by `weighting` (float32)."""
    if weighting == ClientWeighting.NUM_EXAMPLES:
        weight = tf.cast(num_examples, tf.float32)
    elif weighting == ClientWeighting.UNIFORM:
        weight = tf.constant(1.0, tf.float32)
    else:
        raise SimharnessValueError(f'Unexpected weighting argument: {weighting}')
    return tf.where(has_non_finite_delta > 0, tf.constant(0.0, tf.float32), weight)


def _check_weighting(client_weighting: object) -> None:
    if not isinstance(client_weighting, ClientWeighting):
        raise SimharnessTypeError(
            f'client_weighting must be a tff.learning.ClientWeighting, got {client_weighting!r} '
            f'of type {type(client_weighting).__name__}',
            expected=ClientWeighting,
            actual=type(client_weighting),
        )


def build_model_delta_update_with_tff_optimizer(
    model_fn: Callable[[], variable.VariableModel],
    *,
    weighting: ClientWeighting,
    loop_implementation: loop_builder.LoopImplementation,
) -> ClientUpdateFn:
    """The client update of a `VariableModel` (build it inside a `tf_computation`).

    Returns:
      ``client_update(optimizer, initial_weights, data, optimizer_hparams=None)
      -> (ClientResult, unfinalized metrics)``, a `tf.function`.
    """
    model = model_fn()
    dataset_reduce_fn = loop_builder.build_training_loop(loop_implementation=loop_implementation)
    if isinstance(model, keras_utils.KerasModel) and model.runs_stateless():
        return stateless_keras_update(model, weighting, dataset_reduce_fn)

    @tf.function
    def client_update(
        optimizer: Optimizer,
        initial_weights: model_weights_lib.ModelWeights,
        data: tf.data.Dataset,
        optimizer_hparams: Optional[TensorStructure] = None,
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
            optimizer_state, updated_weights = optimizer.next(
                optimizer_state,
                tuple(tf.nest.flatten(model_weights.trainable)),
                tuple(tf.nest.flatten(gradients)),
            )
            updated_weights = tf.nest.pack_sequence_as(model_weights.trainable, updated_weights)
            tf.nest.map_structure(
                lambda a, b: a.assign(b), model_weights.trainable, updated_weights
            )
            if output.num_examples is None:
                num_examples_sum += tf.shape(output.predictions, out_type=tf.int64)[0]
            else:
                num_examples_sum += tf.cast(output.num_examples, tf.int64)
            return num_examples_sum, optimizer_state

        def initial_state_for_reduce_fn() -> tuple[tf.Tensor, TensorStructure]:
            specs = tf.nest.map_structure(
                lambda v: tf.TensorSpec(v.shape, v.dtype),
                tuple(tf.nest.flatten(model_weights.trainable)),
            )
            optimizer_state = optimizer.initialize(specs)
            if optimizer_hparams is not None:
                optimizer_state = optimizer.set_hparams(optimizer_state, optimizer_hparams)
            return tf.zeros(shape=[], dtype=tf.int64), optimizer_state

        num_examples, _ = dataset_reduce_fn(reduce_fn, data, initial_state_for_reduce_fn)
        update = tf.nest.map_structure(
            tf.subtract, initial_weights.trainable, model_weights.trainable
        )
        update, has_non_finite_delta = zero_all_if_any_non_finite(update)
        client_weight = choose_client_weight(weighting, has_non_finite_delta, num_examples)
        if has_non_finite_delta > 0:
            model.reset_metrics()
        model_output = model.report_local_unfinalized_metrics()
        return client_works.ClientResult(update=update, update_weight=client_weight), model_output

    return client_update


def build_model_delta_update_with_keras_optimizer(
    model_fn: Callable[[], variable.VariableModel],
    weighting: ClientWeighting,
    loop_implementation: loop_builder.LoopImplementation,
    *,
    adjust_gradients: Optional[GradientsAdjustment] = None,
    reset_metrics_if_non_finite: bool = True,
) -> ClientUpdateFn:
    """The client update of a `VariableModel` with a Keras optimizer (TFF up to v0.86).

    The model's variables are trained in place by ``optimizer.apply_gradients``
    (any model, a Keras one included, takes this variable path). The optimizer's
    variables are built for the trainable variables before the loop
    (`keras_optimizer.build_keras_optimizer`): a Keras 3 optimizer makes them
    lazily, which it cannot do inside the loop's function.
    `adjust_gradients` and `reset_metrics_if_non_finite` serve the proximal client
    work (`proximal_client_work`), as in `stateless_keras_update`.

    Returns:
      ``client_update(optimizer, initial_weights, data) -> (ClientResult, unfinalized
      metrics)``, a `tf.function`.
    """
    model = model_fn()
    dataset_reduce_fn = loop_builder.build_training_loop(loop_implementation=loop_implementation)
    model_weights = model_weights_lib.ModelWeights.from_model(model)

    @tf.function
    def client_update(
        optimizer: keras_optimizer.KerasOptimizerLike,
        initial_weights: model_weights_lib.ModelWeights,
        data: tf.data.Dataset,
    ) -> tuple[client_works.ClientResult, TensorStructure]:
        with tf.init_scope():  # the computation's graph (or eagerly), not this function's
            keras_optimizer.build_keras_optimizer(optimizer, model_weights.trainable)
        tf.nest.map_structure(lambda a, b: a.assign(b), model_weights, initial_weights)

        def reduce_fn(num_examples_sum: tf.Tensor, batch: Batch) -> tf.Tensor:
            with tf.GradientTape() as tape:
                output = model.forward_pass(batch, training=True)
            gradients = tape.gradient(output.loss, model_weights.trainable)
            if adjust_gradients is not None:
                gradients = adjust_gradients(
                    gradients, model_weights.trainable, initial_weights.trainable
                )
            optimizer.apply_gradients(
                list(zip(tf.nest.flatten(gradients), tf.nest.flatten(model_weights.trainable)))
            )
            if output.num_examples is None:
                num_examples_sum += tf.shape(output.predictions, out_type=tf.int64)[0]
            else:
                num_examples_sum += tf.cast(output.num_examples, tf.int64)
            return num_examples_sum

        num_examples = dataset_reduce_fn(
            reduce_fn, data, lambda: tf.zeros(shape=[], dtype=tf.int64)
        )
        update = tf.nest.map_structure(
            tf.subtract, initial_weights.trainable, model_weights.trainable
        )
        if not reset_metrics_if_non_finite:
            model_output = model.report_local_unfinalized_metrics()
        update, has_non_finite_delta = zero_all_if_any_non_finite(update)
        client_weight = choose_client_weight(weighting, has_non_finite_delta, num_examples)
        if reset_metrics_if_non_finite:
            if has_non_finite_delta > 0:
                model.reset_metrics()
            model_output = model.report_local_unfinalized_metrics()
        return client_works.ClientResult(update=update, update_weight=client_weight), model_output

    return client_update


def stateless_keras_update(
    model: 'keras_utils.KerasModel',
    weighting: ClientWeighting,
    dataset_reduce_fn: loop_builder.TrainingLoop,
    *,
    adjust_gradients: Optional[GradientsAdjustment] = None,
    reset_metrics_if_non_finite: bool = True,
) -> ClientUpdateFn:
    """The client update of a model of `from_keras_model` (this module's, or the proximal
    one with `adjust_gradients(gradients, weights, initial_weights)` and no metrics reset),
    with the weights and metric values as tensors in the loop's state
    (`KerasModel.stateless_forward_pass`): the same steps and results, but no variable is
    read, so the model's variables leave the graph (`core.tf_serialization`) and the
    client update can run XLA-compiled (`core.xla`)."""

    @tf.function
    def client_update(
        optimizer: Optimizer,
        initial_weights: model_weights_lib.ModelWeights,
        data: tf.data.Dataset,
        optimizer_hparams: Optional[TensorStructure] = None,
    ) -> tuple[client_works.ClientResult, TensorStructure]:
        trainable = tuple(tf.nest.flatten(initial_weights.trainable))
        non_trainable = tuple(tf.nest.flatten(initial_weights.non_trainable))
        reset_metrics = model.stateless_metrics_state()

        def reduce_fn(state: tuple[tf.Tensor, ...], batch: Batch) -> tuple[tf.Tensor, ...]:
            num_examples_sum, optimizer_state, weights, fixed, metrics_state = state
            with tf.GradientTape() as tape:
                tape.watch(weights)
                output, fixed, metrics_state = model.stateless_forward_pass(
                    weights, fixed, metrics_state, batch, training=True
                )
            gradients = tape.gradient(output.loss, weights)
            if adjust_gradients is not None:
                gradients = adjust_gradients(gradients, weights, trainable)
            optimizer_state, weights = optimizer.next(optimizer_state, weights, tuple(gradients))
            if output.num_examples is None:
                num_examples_sum += tf.shape(output.predictions, out_type=tf.int64)[0]
            else:
                num_examples_sum += tf.cast(output.num_examples, tf.int64)
            return (num_examples_sum, optimizer_state, tuple(weights), tuple(fixed), metrics_state)

        def initial_state_for_reduce_fn() -> tuple[tf.Tensor, ...]:
            specs = tuple(tf.TensorSpec(w.shape, w.dtype) for w in trainable)
            optimizer_state = optimizer.initialize(specs)
            if optimizer_hparams is not None:
                optimizer_state = optimizer.set_hparams(optimizer_state, optimizer_hparams)
            return (
                tf.zeros(shape=[], dtype=tf.int64),
                optimizer_state,
                trainable,
                non_trainable,
                reset_metrics,
            )

        num_examples, _, trained, _, metrics_state = dataset_reduce_fn(
            reduce_fn, data, initial_state_for_reduce_fn
        )
        trained = tf.nest.pack_sequence_as(initial_weights.trainable, list(trained))
        update = tf.nest.map_structure(tf.subtract, initial_weights.trainable, trained)
        update, has_non_finite_delta = zero_all_if_any_non_finite(update)
        client_weight = choose_client_weight(weighting, has_non_finite_delta, num_examples)
        if reset_metrics_if_non_finite:
            metrics_state = tf.cond(
                has_non_finite_delta > 0, lambda: reset_metrics, lambda: metrics_state
            )
        return (
            client_works.ClientResult(update=update, update_weight=client_weight),
            model.unfinalized_metrics_of(metrics_state),
        )

    return client_update


def build_model_delta_client_work(
    model_fn: Callable[[], variable.VariableModel],
    optimizer: keras_optimizer.OptimizerOrKerasFn,
    client_weighting: ClientWeighting,
    metrics_aggregator: Optional[MetricsAggregatorType] = None,
    *,
    loop_implementation: loop_builder.LoopImplementation = (
        loop_builder.LoopImplementation.DATASET_REDUCE
    ),
) -> client_works.ClientWorkProcess:
    """A `ClientWorkProcess` training a `VariableModel` and reporting its delta.

    With an `Optimizer`, the state is the optimizer's hyperparameters
    (``get_hparams`` of a state initialized for a scalar), broadcast to the
    clients each round. With a no-arg function returning a Keras optimizer (TFF
    up to v0.86), the state is ``()`` and the process has no hyperparameters:
    each client update calls the function (`build_model_delta_update_with_keras_optimizer`).

    Args:
      model_fn: a no-arg callable returning a `VariableModel` (it must build
        new variables each call).
      optimizer: a `simharness.learning.optimizers.Optimizer`, or a no-arg
        callable returning a Keras optimizer.
      client_weighting: a `ClientWeighting`.
      metrics_aggregator: ``(metric_finalizers) -> (unfinalized@CLIENTS ->
        metrics@SERVER)``; default `sum_then_finalize`.
      loop_implementation: a `LoopImplementation`.

    Raises:
      SimharnessTypeError: `client_weighting` or `optimizer` has the wrong type.
    """
    _check_weighting(client_weighting)
    keras_optimizer.check_optimizer_or_keras_fn(optimizer, 'optimizer')
    if metrics_aggregator is None:
        metrics_aggregator = metrics_aggregators.sum_then_finalize
    with tf.Graph().as_default():
        model = model_fn()
        metrics_aggregation_fn = metrics_aggregator(model.metric_finalizers())
        element_type = T.to_type(model.input_spec)
        weights_type = model_weights_lib.weights_type_from_model(model)
    data_type = T.SequenceType(element_type)
    if not isinstance(optimizer, Optimizer):
        return _keras_client_work(
            model_fn,
            optimizer,
            client_weighting,
            loop_implementation,
            weights_type,
            data_type,
            metrics_aggregation_fn,
        )
    initial_hparams = optimizer.get_hparams(
        optimizer.initialize(tf.TensorSpec(shape=(), dtype=tf.float32))
    )
    initial_hparams = tf.nest.map_structure(
        lambda v: v.numpy() if tf.is_tensor(v) else v, initial_hparams
    )

    @federated_computation()
    def init_fn() -> Value:
        return I.federated_value(initial_hparams, T.SERVER)

    state_type = N.member_of(init_fn.type_signature.result)

    @tf_computation(state_type)
    def get_hparams_fn(state: TensorStructure) -> TensorStructure:
        return state

    @tf_computation(state_type, state_type)
    def set_hparams_fn(state: TensorStructure, hparams: TensorStructure) -> TensorStructure:
        del state
        return hparams

    @tf_computation(state_type, weights_type, data_type)
    def client_update_computation(
        state: TensorStructure,
        initial_model_weights: model_weights_lib.ModelWeights,
        dataset: tf.data.Dataset,
    ) -> tuple[client_works.ClientResult, TensorStructure]:
        client_update = build_model_delta_update_with_tff_optimizer(
            model_fn=model_fn, weighting=client_weighting, loop_implementation=loop_implementation
        )
        return client_update(optimizer, initial_model_weights, dataset, state)

    @federated_computation(
        init_fn.type_signature.result,
        T.FederatedType(weights_type, T.CLIENTS),
        T.FederatedType(data_type, T.CLIENTS),
    )
    def next_fn(state: Value, weights: Value, client_data: Value) -> MeasuredProcessOutput:
        state_at_clients = I.federated_broadcast(state)
        client_result, model_outputs = I.federated_map(
            client_update_computation, (state_at_clients, weights, client_data)
        )
        train_metrics = metrics_aggregation_fn(model_outputs)
        measurements = I.federated_zip(collections.OrderedDict(train=train_metrics))
        return MeasuredProcessOutput(state, client_result, measurements)

    return client_works.ClientWorkProcess(
        init_fn, next_fn, get_hparams_fn=get_hparams_fn, set_hparams_fn=set_hparams_fn
    )


def _keras_client_work(
    model_fn: Callable[[], variable.VariableModel],
    optimizer_fn: keras_optimizer.KerasOptimizerFn,
    client_weighting: ClientWeighting,
    loop_implementation: loop_builder.LoopImplementation,
    weights_type: T.Type,
    data_type: T.Type,
    metrics_aggregation_fn: Callable[[Value], Value],
) -> client_works.ClientWorkProcess:
    """TFF v0.86's client work of a Keras optimizer function: state ``()``, no hparams."""

    @federated_computation()
    def init_fn() -> Value:
        return I.federated_value((), T.SERVER)

    @tf_computation(weights_type, data_type)
    def client_update_computation(
        initial_model_weights: model_weights_lib.ModelWeights, dataset: tf.data.Dataset
    ) -> tuple[client_works.ClientResult, TensorStructure]:
        optimizer = optimizer_fn()
        client_update = build_model_delta_update_with_keras_optimizer(
            model_fn=model_fn, weighting=client_weighting, loop_implementation=loop_implementation
        )
        return client_update(optimizer, initial_model_weights, dataset)

    @federated_computation(
        init_fn.type_signature.result,
        T.FederatedType(weights_type, T.CLIENTS),
        T.FederatedType(data_type, T.CLIENTS),
    )
    def next_fn(state: Value, weights: Value, client_data: Value) -> MeasuredProcessOutput:
        client_result, model_outputs = I.federated_map(
            client_update_computation, (weights, client_data)
        )
        train_metrics = metrics_aggregation_fn(model_outputs)
        measurements = I.federated_zip(collections.OrderedDict(train=train_metrics))
        return MeasuredProcessOutput(state, client_result, measurements)

    return client_works.ClientWorkProcess(init_fn, next_fn)


def split_batch(batch: Batch) -> tuple[TensorStructure, TensorStructure]:
    """``(x, y)`` of a batch: a mapping with keys ``'x'`` and ``'y'``, or a pair."""
    if isinstance(batch, Mapping):
        return batch['x'], batch['y']
    x, y = batch
    return x, y


def build_functional_model_delta_update(
    model: functional.FunctionalModel,
    *,
    weighting: ClientWeighting,
    loop_implementation: loop_builder.LoopImplementation,
) -> ClientUpdateFn:
    """The client update of a `FunctionalModel`.

    Returns:
      ``client_update_fn(optimizer, (trainable, non_trainable), dataset) ->
      (ClientResult, unfinalized metrics)``, a `tf.function`.
    """

    @tf.function
    def client_update_fn(
        optimizer: Optimizer,
        initial_weights: tuple[TensorStructure, TensorStructure],
        dataset: tf.data.Dataset,
    ) -> tuple[client_works.ClientResult, TensorStructure]:
        initial_trainable_weights = initial_weights[0]
        trainable_specs = tf.nest.map_structure(
            tf.TensorSpec.from_tensor, tuple(tf.nest.flatten(initial_trainable_weights))
        )

        def reduce_func(
            training_state: tuple[tf.Tensor, ...], batch: Batch
        ) -> tuple[tf.Tensor, ...]:
            model_weights, optimizer_state, metrics_state, num_examples = training_state
            trainable_weights, non_trainable_weights = model_weights
            x, y = split_batch(batch)
            with tf.GradientTape() as tape:
                tape.watch(trainable_weights)
                batch_output = model.predict_on_batch(model_weights, x, training=True)
                batch_loss = model.loss(output=batch_output, label=y)
            gradients = tape.gradient(batch_loss, trainable_weights)
            optimizer_state, trainable_weights = optimizer.next(
                optimizer_state, trainable_weights, gradients
            )
            predictions = tf.nest.flatten(batch_output)[0]
            batch_num_examples = tf.shape(predictions)[0]
            num_examples += tf.cast(batch_num_examples, tf.int64)
            metrics_state = model.update_metrics_state(
                metrics_state,
                batch_output=variable.BatchOutput(
                    loss=batch_loss, predictions=batch_output, num_examples=batch_num_examples
                ),
                labels=y,
            )
            return (
                (trainable_weights, non_trainable_weights),
                optimizer_state,
                metrics_state,
                num_examples,
            )

        def initial_training_state() -> tuple[tf.Tensor, ...]:
            return (
                initial_weights,
                optimizer.initialize(trainable_specs),
                model.initialize_metrics_state(),
                tf.constant(0, tf.int64),
            )

        loop = loop_builder.build_training_loop(loop_implementation=loop_implementation)
        model_weights, _, metrics_state, num_examples = loop(
            reduce_func, dataset, initial_training_state
        )
        trainable_weights, _ = model_weights
        update = tf.nest.map_structure(tf.subtract, initial_trainable_weights, trainable_weights)
        update, has_non_finite_delta = zero_all_if_any_non_finite(update)
        client_weight = choose_client_weight(weighting, has_non_finite_delta, num_examples)
        unfinalized = tf.cond(
            has_non_finite_delta > 0, model.initialize_metrics_state, lambda: metrics_state
        )
        return client_works.ClientResult(update=update, update_weight=client_weight), unfinalized

    return client_update_fn


def functional_weights_type(model: functional.FunctionalModel) -> T.Type:
    """The `ModelWeights` type of a `FunctionalModel`'s ``initial_weights``."""

    def spec(a: TensorStructure) -> tf.TensorSpec:
        a = np.asarray(a)
        return tf.TensorSpec(shape=a.shape, dtype=tf.as_dtype(a.dtype))

    return T.to_type(
        model_weights_lib.ModelWeights(
            tuple(spec(w) for w in model.initial_weights[0]),
            tuple(spec(w) for w in model.initial_weights[1]),
        )
    )


def build_functional_model_delta_client_work(
    *,
    model: functional.FunctionalModel,
    optimizer: Optimizer,
    client_weighting: ClientWeighting,
    metrics_aggregator: Optional[MetricsAggregatorType] = None,
    loop_implementation: loop_builder.LoopImplementation = (
        loop_builder.LoopImplementation.DATASET_REDUCE
    ),
) -> client_works.ClientWorkProcess:
    """A stateless `ClientWorkProcess` training a `FunctionalModel` and reporting its delta.

    Raises:
      SimharnessTypeError: an argument has the wrong type.
    """
    if not isinstance(model, functional.FunctionalModel):
        raise SimharnessTypeError(
            f'model must be a tff.learning.models.FunctionalModel, got {type(model).__name__}',
            expected=functional.FunctionalModel,
            actual=type(model),
        )
    if not isinstance(optimizer, Optimizer):
        raise SimharnessTypeError(
            f'optimizer must be a tff.learning.optimizers.Optimizer, got {optimizer!r} of type '
            f'{type(optimizer).__name__}',
            expected=Optimizer,
            actual=type(optimizer),
        )
    _check_weighting(client_weighting)
    data_type = T.SequenceType(T.to_type(model.input_spec))
    weights_type = functional_weights_type(model)

    @tf_computation(weights_type, data_type)
    def client_update_computation(
        initial_model_weights: model_weights_lib.ModelWeights, dataset: tf.data.Dataset
    ) -> tuple[client_works.ClientResult, TensorStructure]:
        client_update = build_functional_model_delta_update(
            model=model, weighting=client_weighting, loop_implementation=loop_implementation
        )
        return client_update(
            optimizer,
            (initial_model_weights.trainable, initial_model_weights.non_trainable),
            dataset,
        )

    @federated_computation()
    def init_fn() -> Value:
        return I.federated_value((), T.SERVER)

    if metrics_aggregator is None:
        metrics_aggregator = metrics_aggregators.sum_then_finalize

    @federated_computation(
        T.FederatedType(T.StructType([]), T.SERVER),
        T.FederatedType(weights_type, T.CLIENTS),
        T.FederatedType(data_type, T.CLIENTS),
    )
    def next_fn(state: Value, weights: Value, client_data: Value) -> MeasuredProcessOutput:
        client_result, unfinalized_metrics = I.federated_map(
            client_update_computation, (weights, client_data)
        )
        aggregation_fn = metrics_aggregator(model.finalize_metrics)
        measurements = I.federated_zip(
            collections.OrderedDict(train=aggregation_fn(unfinalized_metrics))
        )
        return MeasuredProcessOutput(state, client_result, measurements)

    return client_works.ClientWorkProcess(init_fn, next_fn)
