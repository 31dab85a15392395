"""Models as functions of their weights: ``tff.learning.models.FunctionalModel``.

A `FunctionalModel` takes its weights as an argument instead of holding
variables::

    initial_weights            (trainable, non_trainable): tuples of numpy arrays
    predict_on_batch(model_weights, x, training=True) -> predictions
    loss(output, label, sample_weight=None)            -> scalar loss
    initialize_metrics_state() / update_metrics_state(state, labels, batch_output,
        sample_weight=None) / finalize_metrics(state)

`functional_model_from_keras` makes one of a Keras 3 model through
``stateless_call`` (no variables: it runs eagerly and in any computation);
`model_from_functional` wraps one as a `VariableModel`.
"""

from __future__ import annotations

import collections
import inspect
from typing import Callable, Mapping, Optional, Sequence, Union

import keras
import numpy as np
import tensorflow as tf

from simharness.errors import SimharnessTypeError, SimharnessValueError
from simharness.learning import keras_kinds
from simharness.learning._typing import Batch, TensorStructure
from simharness.learning.metrics import keras_finalizer, keras_utils
from simharness.learning.models import keras_seeds, variable

Weight = Union[np.ndarray, int, float]
ModelWeights = tuple  # (trainable, non_trainable), each a sequence of weights
#: ``(x, y)``: the `tf.TensorSpec` (or a structure of them) of a batch's model input, and
#: of its labels.
InputSpec = tuple


class CallableNotTensorFlowFunctionError(SimharnessTypeError):
    """A callable that must be a `tf.function` is not one."""


class ValueMustNotBeTFError(SimharnessTypeError):
    """A value that must not be a `tf.Tensor` or `tf.Variable` is one."""


class KerasFunctionalModelError(Exception):
    """A Keras model cannot become a `FunctionalModel`."""


def empty_metrics_state() -> collections.OrderedDict:
    return collections.OrderedDict()


def noop_update_metrics(
    state: TensorStructure,
    labels: TensorStructure,
    batch_output: TensorStructure,
    sample_weight: Optional[TensorStructure] = None,
) -> collections.OrderedDict:
    del state, labels, batch_output, sample_weight
    return collections.OrderedDict()


def noop_finalize_metrics(state: TensorStructure) -> collections.OrderedDict:
    del state
    return collections.OrderedDict()


class FunctionalModel:
    """A model whose forward pass takes its weights (``tff.learning.models.FunctionalModel``).

    Args (keyword only):
      initial_weights: ``(trainable, non_trainable)``, sequences of values
        convertible to tensors (numpy arrays, not `tf.Tensor` / `tf.Variable`).
      predict_on_batch_fn: a `tf.function` ``(model_weights, x, training) ->
        predictions`` (or a structure whose first leaf is the predictions).
      loss_fn: ``(output, label, sample_weight) -> loss``.
      metrics_fns: ``(initialize, update, finalize)``, e.g. of
        `tff.learning.metrics.create_functional_metric_fns`; default no metrics.
      input_spec: ``(x, y)`` of (structures of) `tf.TensorSpec`, batch first.

    Raises:
      CallableNotTensorFlowFunctionError: `predict_on_batch_fn` is not a `tf.function`.
      ValueMustNotBeTFError: `initial_weights` holds tensors or variables.
    """

    def __init__(
        self,
        *,
        initial_weights: ModelWeights,
        predict_on_batch_fn: Callable[[ModelWeights, TensorStructure, bool], TensorStructure],
        loss_fn: Callable[[TensorStructure, TensorStructure, Optional[TensorStructure]], tf.Tensor],
        metrics_fns: tuple = (empty_metrics_state, noop_update_metrics, noop_finalize_metrics),
        input_spec: InputSpec,
    ):
        def check_non_tf_value(value: object) -> None:
            if tf.is_tensor(value) or isinstance(value, (tf.Variable, keras.Variable)):
                raise ValueMustNotBeTFError(
                    'initial_weights may not contain TensorFlow values (tf.Tensor or '
                    f'tf.Variable). Got: {type(value)!r}. Try converting to a np.ndarray by '
                    'using the `.numpy()` attribute for tf.Tensor, or `.read_value().numpy()` '
                    'for tf.Variable.',
                    actual=type(value),
                )

        tf.nest.map_structure(check_non_tf_value, initial_weights)
        if not hasattr(predict_on_batch_fn, 'get_concrete_function'):
            raise CallableNotTensorFlowFunctionError(
                'predict_on_batch_fn does not have a `get_concrete_function` attribute meaning '
                'it is not a callable decorated with `tf.function`. Got a '
                f'{type(predict_on_batch_fn).__name__} with value {predict_on_batch_fn!r}.',
                actual=type(predict_on_batch_fn),
            )
        self._initial_weights = initial_weights
        self._predict_on_batch_fn = predict_on_batch_fn
        self._loss_fn = loss_fn
        self._input_spec = input_spec
        (self._initialize_metrics_state, self._update_metrics_state, self._finalize_metrics) = (
            metrics_fns
        )

    @property
    def initial_weights(self) -> ModelWeights:
        return self._initial_weights

    def predict_on_batch(
        self, model_weights: ModelWeights, x: TensorStructure, training: bool = True
    ) -> TensorStructure:
        """Tensor(s) the loss function understands (logits, say)."""
        return self._predict_on_batch_fn(model_weights, x, training)

    def loss(
        self,
        output: TensorStructure,
        label: TensorStructure,
        sample_weight: Optional[TensorStructure] = None,
    ) -> tf.Tensor:
        """The loss of `output` (of `predict_on_batch`) against `label`."""
        return self._loss_fn(output, label, sample_weight)

    def initialize_metrics_state(self) -> collections.OrderedDict[str, TensorStructure]:
        return self._initialize_metrics_state()

    def update_metrics_state(
        self,
        state: collections.OrderedDict[str, TensorStructure],
        labels: TensorStructure,
        batch_output: TensorStructure,
        sample_weight: Optional[TensorStructure] = None,
    ) -> collections.OrderedDict[str, TensorStructure]:
        return self._update_metrics_state(state, labels, batch_output, sample_weight)

    def finalize_metrics(self, state: TensorStructure) -> Mapping[str, tf.Tensor]:
        return self._finalize_metrics(state)

    @property
    def input_spec(self) -> InputSpec:
        return self._input_spec


class _ModelFromFunctional(variable.VariableModel):
    """A `VariableModel` over a `FunctionalModel` (see `model_from_functional`)."""

    def __init__(
        self,
        functional_model: FunctionalModel,
        metric_builders: Sequence[Callable[[], keras.metrics.Metric]] = (),
    ):
        self._functional_model = functional_model
        trainable, non_trainable = functional_model.initial_weights
        self._trainable_variables = tuple(tf.Variable(x) for x in trainable)
        self._non_trainable_variables = tuple(
            tf.Variable(x, trainable=False) for x in non_trainable
        )
        self._model_weights = (self._trainable_variables, self._non_trainable_variables)
        self._num_examples = tf.Variable(0, trainable=False)
        self._loss_sum = tf.Variable(0.0, trainable=False)
        self._metric_builders = list(metric_builders)
        self._metrics = [build() for build in self._metric_builders]
        names = [m.name for m in self._metrics]
        duplicates = {n for n in names if names.count(n) > 1}
        if duplicates:
            raise SimharnessValueError(
                f'{duplicates} appeared in the metric names more than once, each metric should '
                'have a unique name.'
            )

    @property
    def trainable_variables(self) -> tuple:
        return self._trainable_variables

    @property
    def non_trainable_variables(self) -> tuple:
        return self._non_trainable_variables

    @property
    def local_variables(self) -> tuple:
        return tuple(
            [self._loss_sum, self._num_examples] + [v for m in self._metrics for v in m.variables]
        )

    @property
    def input_spec(self) -> InputSpec:
        return self._functional_model.input_spec

    def _weights(self) -> ModelWeights:
        return tf.nest.map_structure(tf.identity, self._model_weights)

    def forward_pass(self, batch_input: Batch, training: bool = True) -> variable.BatchOutput:
        if isinstance(batch_input, Mapping):
            x, y = batch_input['x'], batch_input['y']
        else:
            x, y = batch_input
        output = self._functional_model.predict_on_batch(self._weights(), x, training)
        batch_loss = self._functional_model.loss(output=output, label=y)
        num = tf.shape(tf.nest.flatten(output)[0])[0]
        self._num_examples.assign_add(num)
        self._loss_sum.assign_add(batch_loss * tf.cast(num, tf.float32))
        for metric in self._metrics:
            metric.update_state(y_true=y, y_pred=output)
        return variable.BatchOutput(loss=batch_loss, predictions=output, num_examples=num)

    def predict_on_batch(self, x: TensorStructure, training: bool = True) -> TensorStructure:
        return self._functional_model.predict_on_batch(self._weights(), x, training)

    def report_local_unfinalized_metrics(self) -> collections.OrderedDict:
        out = collections.OrderedDict(
            loss=[tf.identity(self._loss_sum), tf.cast(self._num_examples, tf.float32)]
        )
        for metric in self._metrics:
            out[metric.name] = [
                tf.identity(v.value if isinstance(v, keras.Variable) else v)
                for v in metric.variables
            ]
        return out

    def metric_finalizers(self) -> collections.OrderedDict:
        finalizers = collections.OrderedDict(loss=lambda x: x[0] / x[1])
        for metric, builder in zip(self._metrics, self._metric_builders):
            finalizers[metric.name] = keras_finalizer.create_keras_metric_finalizer(builder)
        return finalizers

    def reset_metrics(self) -> None:
        for metric in self._metrics:
            metric.reset_state()
        for v in (self._loss_sum, self._num_examples):
            v.assign(tf.zeros_like(v))


def model_from_functional(
    functional_model: FunctionalModel,
    metric_constructors: Sequence[Callable[[], keras.metrics.Metric]] = (),
) -> variable.VariableModel:
    """A `VariableModel` behaving as `functional_model` (its weights become variables).

    It reports ``loss`` (example-weighted mean) and the metrics of
    `metric_constructors`, which *replace* the functional model's metrics.
    """
    return _ModelFromFunctional(functional_model, metric_constructors)


def functional_model_from_keras(
    keras_model: Union[keras.Model, Callable[[], keras.Model]],
    loss_fn: keras.losses.Loss,
    input_spec: InputSpec,
    metrics_constructor: Optional[keras_utils.MetricsConstructorLike] = None,
) -> FunctionalModel:
    """A `FunctionalModel` of a Keras 3 model (TFF's ``functional_model_from_keras``).

    The forward pass is ``keras_model.stateless_call(trainable,
    non_trainable, x, training=...)``: no variables are made or read, so the
    model runs eagerly as well as inside any computation (TFF's works in
    graphs only). The initial weights are the model's current values.

    Args:
      keras_model: a built `keras.Model`, or a no-argument callable making one.
      loss_fn: a Keras loss (its default `sample_weight` must be None).
      input_spec: ``(x, y)`` of `tf.TensorSpec`.
      metrics_constructor: optional, as `tff.learning.metrics.create_functional_metric_fns`
        takes it (e.g. ``OrderedDict(accuracy=keras.metrics.SparseCategoricalAccuracy)``).

    Raises:
      KerasFunctionalModelError: a batch normalization layer (its statistics
        would not update), or a loss whose default sample weight is not None.
      ValueError: `keras_model` is neither a model nor a callable.
    """
    model = keras_model if isinstance(keras_model, keras_kinds.models()) else None
    if model is None and callable(keras_model):
        model = keras_model()
    if model is None or keras_kinds.is_tf_keras(model):
        raise SimharnessValueError(
            '`keras_model` must be a `keras.Model` or a no-arg callable that returns a '
            '`keras.Model`'
            + (
                ' (a Keras 3 model: a functional model runs its stateless calls, which '
                'tf_keras models have not; from_keras_model takes tf_keras models)'
                if model is not None
                else ''
            )
            + '.'
        )
    if any(isinstance(layer, keras.layers.BatchNormalization) for layer in model.layers):
        raise KerasFunctionalModelError(
            'Keras model contains a batch normalization layer, which is incompatible with '
            '`tff.learning.models.FunctionalModel`. Consider using group normalization '
            'instead.'
        )
    params = inspect.signature(loss_fn).parameters
    if 'sample_weight' in params and params['sample_weight'].default is not None:
        raise KerasFunctionalModelError(
            'Received a non-None sample_weight default; only losses whose sample_weight '
            'defaults to None are supported.'
        )
    initial_weights = (
        tuple(np.array(v.numpy()) for v in model.trainable_variables),
        tuple(np.array(v.numpy()) for v in keras_seeds.KerasSeeds.weights_of(model)),
    )
    seeds = keras_seeds.KerasSeeds(model)  # random layers' seeds: set per step, not weights

    @tf.function(autograph=False)
    def predict_on_batch(
        model_weights: ModelWeights, x: TensorStructure, training: bool = True
    ) -> TensorStructure:
        trainable, non_trainable = model_weights
        out, _ = model.stateless_call(
            list(trainable),
            seeds.merge(non_trainable, trainable, x, training),
            x,
            training=training,
        )
        return out

    def loss(
        output: TensorStructure,
        label: TensorStructure,
        sample_weight: Optional[TensorStructure] = None,
    ) -> tf.Tensor:
        return loss_fn(y_true=label, y_pred=output, sample_weight=sample_weight)

    if metrics_constructor is not None:
        metrics_fns = keras_utils.create_functional_metric_fns(metrics_constructor)
    else:
        metrics_fns = (empty_metrics_state, noop_update_metrics, noop_finalize_metrics)
    return FunctionalModel(
        initial_weights=initial_weights,
        predict_on_batch_fn=predict_on_batch,
        loss_fn=loss,
        metrics_fns=metrics_fns,
        input_spec=input_spec,
    )
