"""A Keras model as a `VariableModel`: ``tff.learning.models.from_keras_model``.

Call it inside ``model_fn`` (TFF traces ``model_fn`` into each computation
that uses the model): the Keras model's variables and the metrics' variables
are then made in that computation's graph.
"""

from __future__ import annotations

import collections
import re
import logging
from typing import Callable, Mapping, Optional, Sequence, Union, cast
import warnings

import keras
import tensorflow as tf

from simharness.core import types as T
from simharness.errors import SimharnessTypeError, SimharnessValueError
from simharness.learning._typing import Batch, InputSpec, SpecStructure, TensorStructure
from simharness.learning.metrics import counters, keras_finalizer
from simharness.learning import keras_kinds
from simharness.learning.models import keras_seeds, variable

#: A Keras loss (a `keras.losses.Loss` or a loss function), or one per model output.
Loss = Union[
    keras.losses.Loss,
    Callable[..., tf.Tensor],
    Sequence[Union[keras.losses.Loss, Callable[..., tf.Tensor]]],
]


def _spec_from_type(t: T.Type) -> SpecStructure:
    """`tf.TensorSpec` s of a structure of tensor types (containers kept)."""
    if isinstance(t, T.TensorType):
        return tf.TensorSpec(t.shape, t.dtype)
    if isinstance(t, T.StructType):
        names = [n for n, _ in t.items()]
        values = [_spec_from_type(e) for _, e in t.items()]
        if all(names):
            return collections.OrderedDict(zip(names, values))
        return tuple(values)
    raise SimharnessTypeError(
        'Expected a `federated_language.Type` with all the leaf nodes being '
        f'`federated_language.TensorType`s, found an input spec {t}.',
        expected=T.TensorType,
        actual=t,
    )


def from_keras_model(
    keras_model: keras.Model,
    loss: Loss,
    input_spec: Union[InputSpec, T.StructType],
    loss_weights: Optional[list] = None,
    metrics: Optional[list] = None,
) -> variable.VariableModel:
    """A `VariableModel` running `keras_model` (TFF's ``from_keras_model``).

    Besides `metrics` the model reports ``loss`` (the example-weighted mean
    loss), and ``num_examples`` and ``num_batches`` unless `metrics` has
    metrics of those names.

    Args:
      keras_model: a `keras.Model` (functional or Sequential).
      loss: a Keras loss, or a list of losses, one per model output.
      input_spec: ``(x, y)`` or ``{'x': ..., 'y': ...}`` of `tf.TensorSpec`
        (batch dimension first), or a simharness type of that structure.
      loss_weights: with a list of losses, the weight of each (floats).
      metrics: Keras metrics, or no-argument callables each making one (not
        both); callables let the server rebuild them for finalizing.

    Raises:
      TypeError: a bad model, loss, loss weight, input spec or metric.
      ValueError: mismatched numbers of losses / outputs / weights, loss
        weights without a list of losses, or an input spec without x and y.
    """
    if not isinstance(keras_model, keras_kinds.models()):
        raise SimharnessTypeError(
            f'keras_model must be a keras.Model, got {type(keras_model).__name__}',
            expected=keras.Model,
            actual=type(keras_model),
        )
    if not isinstance(loss, list):
        if not isinstance(loss, keras_kinds.losses()):
            raise SimharnessTypeError(
                f'loss must be a keras.losses.Loss or a list of them, got {type(loss).__name__}',
                expected=keras.losses.Loss,
                actual=type(loss),
            )
        if loss_weights is not None:
            raise SimharnessValueError('`loss_weights` cannot be used if `loss` is not a list.')
        loss, loss_weights = [loss], [1.0]
    else:
        if len(loss) != len(keras_model.outputs):
            raise SimharnessValueError(
                'If a loss list is provided, `keras_model` must have equal number of outputs '
                f'to the losses.\nloss: {loss}\nof length: {len(loss)}.\noutputs: '
                f'{keras_model.outputs}\nof length: {len(keras_model.outputs)}.'
            )
        for fn in loss:
            if not isinstance(fn, keras_kinds.losses()):
                raise SimharnessTypeError(
                    f'every loss must be a keras.losses.Loss, got {type(fn).__name__}',
                    expected=keras.losses.Loss,
                    actual=type(fn),
                )
        if loss_weights is None:
            loss_weights = [1.0] * len(loss)
        else:
            if len(loss) != len(loss_weights):
                raise SimharnessValueError(
                    '`keras_model` must have equal number of losses and loss_weights.\nloss: '
                    f'{loss}\nof length: {len(loss)}.\nloss_weights: {loss_weights}\nof '
                    f'length: {len(loss_weights)}.'
                )
            for w in loss_weights:
                if not isinstance(w, float):
                    raise SimharnessTypeError(
                        f'loss weights must be floats, got {w!r}', expected=float, actual=type(w)
                    )
    if len(input_spec) != 2:
        raise SimharnessValueError(
            'The top-level structure in `input_spec` must contain exactly two top-level '
            'elements, as it must specify type information for both inputs to and predictions '
            f'from the model. You passed input spec {input_spec}.'
        )
    if isinstance(input_spec, T.Type):
        # A struct of two elements: the specs come back as a mapping or a tuple.
        input_spec = cast(InputSpec, _spec_from_type(input_spec))
    else:

        def check(s: object) -> None:
            if not isinstance(s, (tf.TensorSpec, tf.RaggedTensorSpec)):
                raise SimharnessTypeError(
                    f'Expected input spec member to be of type '
                    f'tf.TensorSpec, found {type(s).__name__}',
                    expected=tf.TensorSpec,
                    actual=type(s),
                )

        tf.nest.map_structure(check, input_spec)
    if isinstance(input_spec, Mapping):
        for key, what in (
            (variable.MODEL_ARG_NAME, 'the input(s) to the Keras model'),
            (variable.MODEL_LABEL_NAME, 'the label(s) to be used in the Keras loss(es)'),
        ):
            if key not in input_spec:
                raise SimharnessValueError(
                    'The `input_spec` is a collections.abc.Mapping (e.g., a dict), so it must '
                    f"contain an entry with key `'{key}'`, representing {what}."
                )
    if metrics is None:
        metrics = []
    elif not isinstance(metrics, list):
        raise SimharnessTypeError(
            f'metrics must be a list, got {type(metrics).__name__}',
            expected=list,
            actual=type(metrics),
        )
    if not keras_model.built:
        _build_from_spec(keras_model, input_spec)
    if any(
        isinstance(layer, tuple(m.layers.BatchNormalization for m in keras_kinds.modules()))
        for layer in keras_model.layers
    ):
        warnings.warn(
            "Batch Normalization contains non-trainable variables that won't be "
            'updated during the training. Consider using Group Normalization '
            'instead.',
            UserWarning,
        )
    return KerasModel(keras_model, input_spec, loss, loss_weights, metrics)


def _build_from_spec(keras_model: keras.Model, input_spec: InputSpec) -> None:
    """Builds a Keras model that has no weights yet for the inputs `input_spec` describes.

    Keras 2 built ``Sequential([Embedding(...), ...])`` when it was made (its first layer
    gave an input shape); Keras 3 builds it at its first call. TFF reads the model's
    weights before any call: an unbuilt model would train no weight, silently.
    """
    x_spec = (
        input_spec[variable.MODEL_ARG_NAME] if isinstance(input_spec, Mapping) else input_spec[0]
    )

    def example(spec: tf.TensorSpec) -> tf.Tensor:  # one example's batch: unknown dims as 1
        return tf.zeros([1 if d is None else d for d in spec.shape], spec.dtype)

    try:
        keras_model(tf.nest.map_structure(example, x_spec))
    except Exception as e:  # pylint: disable=broad-exception-caught  # Keras' errors vary
        said = ' '.join(re.sub(r'\x1b\[[0-9;]*m', '', str(e)).split())[:300]  # one line
        raise SimharnessValueError(
            f'the Keras model has no weights yet (it was never built or called) and could not '
            f'be built from input_spec {x_spec}: {said}. Give it an input shape (a first '
            f'keras.Input or InputLayer layer) or build it before from_keras_model.'
        ) from e
    if not keras_model.built:
        keras_model.built = True  # called once: its weights exist


def _snake_case(name: str) -> str:
    """Keras' default name of a metric class (``AUC`` -> ``auc``, ``MeanIoU`` -> ``mean_io_u``)."""
    name = re.sub(r'\W+', '', name)
    name = re.sub('(.)([A-Z][a-z]+)', r'\1_\2', name)
    return re.sub('([a-z])([A-Z])', r'\1_\2', name).lower()


def per_model_metric_names(metrics: Sequence[keras.metrics.Metric]) -> list:
    """The names of one model's metrics as TFF reports them: as each metric names itself,
    except Keras' default names (those of metrics made without ``name=``), numbered within
    the model (``auc``, ``auc_1``, ...).

    Keras 3 numbers default names across the whole process: the ``AUC()`` of a model's
    second build is ``auc_1``, of its third ``auc_2``. TFF (Keras 2, a new graph for each
    build of the model) always names it ``auc``; `tff.learning` matches the metric names of
    one build against another's, so Keras 3's numbering would break it (and change the
    metrics' names from TFF's)."""
    names: list = []
    seen: collections.Counter = collections.Counter()
    for metric in metrics:
        default = _snake_case(type(metric).__name__)
        name = metric.name
        if default and re.fullmatch(re.escape(default) + r'(_\d+)?', name):
            count = seen[default]
            seen[default] += 1
            name = default if count == 0 else f'{default}_{count}'
        names.append(name)
    return names


def _weighted_mean_loss_metric(loss_fns: list, loss_weights: list) -> type:
    """A Keras ``Mean`` of the batch losses weighted by batch size (TFF's loss metric)."""

    class _WeightedMeanLossMetric(keras.metrics.Mean):
        def __init__(self, name: str = 'loss', dtype: tf.DType = tf.float32):
            super().__init__(name=name, dtype=dtype)

        def update_state(
            self,
            y_true: TensorStructure,
            y_pred: TensorStructure,
            sample_weight: TensorStructure = None,
        ) -> None:
            batch_size = tf.shape(tf.nest.flatten(y_pred)[0])[0]
            if len(loss_fns) == 1:
                batch_loss = loss_fns[0](y_true, y_pred)
            else:  # a loss per output: labels and predictions are sequences, one per output
                labels, outputs = (
                    cast(Sequence[TensorStructure], y_true),
                    cast(Sequence[TensorStructure], y_pred),
                )
                batch_loss = tf.zeros(())
                for i, fn in enumerate(loss_fns):
                    batch_loss += loss_weights[i] * fn(labels[i], outputs[i])
            return super().update_state(batch_loss, batch_size)

    return _WeightedMeanLossMetric


def _inputs_and_labels(batch_input: Batch) -> tuple[TensorStructure, TensorStructure]:
    """``(x, y)`` of a batch given as ``(x, y)`` or ``{'x': ..., 'y': ...}`` (y may be None)."""
    if isinstance(batch_input, Mapping):
        inputs, y_true = batch_input.get('x'), batch_input.get('y')
    else:
        inputs, y_true = batch_input
    if inputs is None:
        # (a mapping without `x`: an `x` of None in a pair fails at `.keys`)
        keys = cast(Mapping[str, TensorStructure], batch_input).keys()
        raise KeyError(
            'Received a batch_input that is missing required key `x`. Instead '
            f'have keys {list(keys)}'
        )
    return inputs, y_true


def _num_examples(inputs: TensorStructure) -> tf.Tensor:
    first = tf.nest.flatten(inputs)[0]
    return first.nrows() if isinstance(first, tf.RaggedTensor) else tf.shape(first)[0]


class KerasModel(variable.VariableModel):
    """A `VariableModel` over a Keras model (see `from_keras_model`)."""

    def __init__(
        self,
        keras_model: keras.Model,
        input_spec: InputSpec,
        loss_fns: list,
        loss_weights: list,
        metrics: list,
    ):
        self._keras_model = keras_model
        self._seeds = keras_seeds.KerasSeeds(keras_model)
        self._input_spec = input_spec
        self._loss_fns = loss_fns
        self._loss_weights = loss_weights
        self._metrics: list = []
        constructors: list = []  # the metric's constructor, or None, for each of `_metrics`
        names = set()
        has_metric = has_constructor = False
        for metric in metrics:
            if isinstance(metric, keras_kinds.metrics()):
                self._metrics.append(metric)
                constructors.append(None)
                names.add(metric.name)
                has_metric = True
            elif callable(metric):
                made = metric()
                if not isinstance(made, keras_kinds.metrics()):
                    raise SimharnessTypeError(
                        f'Metric constructor {metric} is not a no-arg callable that creates a '
                        f'`keras.metrics.Metric`, it created a {type(made).__name__}.',
                        expected=keras.metrics.Metric,
                        actual=type(made),
                    )
                names.add(made.name)
                constructors.append(metric)
                self._metrics.append(made)
                has_constructor = True
            else:
                raise SimharnessTypeError(
                    'Expected the input metric to be either a `keras.metrics.Metric` or a no-arg '
                    'callable that constructs a `keras.metrics.Metric`, found a non-callable '
                    f'{type(metric).__name__}.',
                    expected=keras.metrics.Metric,
                    actual=type(metric),
                )
        if has_metric and has_constructor:
            raise SimharnessTypeError(
                'Expected the input `metrics` to be either a list of `keras.metrics.Metric` '
                'objects or a list of no-arg callables that each constructs a '
                f'`keras.metrics.Metric`, found both types in the `metrics`: {metrics}.'
            )
        extra: list = [_weighted_mean_loss_metric(loss_fns, loss_weights)]
        if 'num_examples' not in names:
            logging.info('Adding default num_examples metric to model')
            extra.append(counters.NumExamplesCounter)
        if 'num_batches' not in names:
            logging.info('Adding default num_batches metric to model')
            extra.append(counters.NumBatchesCounter)
        self._metrics.extend(m() for m in extra)
        if not metrics or has_constructor:
            constructors.extend(extra)
        else:
            constructors.extend([None] * len(extra))
        self._metric_names = per_model_metric_names(self._metrics)
        self._metric_constructors: collections.OrderedDict = collections.OrderedDict(
            (name, ctor) for name, ctor in zip(self._metric_names, constructors) if ctor is not None
        )

    @property
    def trainable_variables(self) -> list:
        return self._keras_model.trainable_variables

    @property
    def non_trainable_variables(self) -> list:
        """The Keras model's non-trainable weights: not its random layers' seed states
        (`keras_seeds`), as TFF's (Keras 2) models have none."""
        return keras_seeds.KerasSeeds.weights_of(self._keras_model)

    @property
    def seed_variables(self) -> list:
        """The random layers' seed states (not weights: `keras_seeds`)."""
        return self._seeds.states

    @property
    def local_variables(self) -> list:
        return [v for m in self._metrics for v in m.variables]

    def get_metrics(self) -> list:
        """The Keras metrics (the user's, then loss, num_examples, num_batches)."""
        return self._metrics

    def reset_metrics(self) -> None:
        for metric in self._metrics:
            metric.reset_state()

    @property
    def input_spec(self) -> InputSpec:
        return self._input_spec

    def predict_on_batch(self, x: TensorStructure, training: bool = True) -> TensorStructure:
        self._seeds.assign(self.trainable_variables, x, training)
        return self._keras_model(x, training=training)

    def forward_pass(self, batch_input: Batch, training: bool = True) -> variable.BatchOutput:
        inputs, y_true = _inputs_and_labels(batch_input)
        predictions = self.predict_on_batch(inputs, training)
        batch_loss = self._batch_loss(y_true, predictions, self._keras_model.losses)
        for metric in self._metrics:
            metric.update_state(y_true=y_true, y_pred=predictions)
        return variable.BatchOutput(
            loss=batch_loss, predictions=predictions, num_examples=_num_examples(inputs)
        )

    def _batch_loss(
        self,
        y_true: TensorStructure,
        predictions: TensorStructure,
        regularization: Sequence[tf.Tensor],
    ) -> Optional[tf.Tensor]:
        """The losses of the outputs, weighted, plus the layers' regularization losses (as
        Keras' own training step adds them); None without labels."""
        if y_true is None:
            return None
        if len(self._loss_fns) == 1:
            terms = [self._loss_fns[0](y_true, predictions)]
        else:  # a loss per output: labels and predictions are sequences, one per output
            labels, outputs = (
                cast(Sequence[TensorStructure], y_true),
                cast(Sequence[TensorStructure], predictions),
            )
            terms = [
                self._loss_weights[i] * fn(labels[i], outputs[i])
                for i, fn in enumerate(self._loss_fns)
            ]
        return tf.add_n(terms + list(regularization))

    def runs_stateless(self) -> bool:
        """True when `stateless_forward_pass` can stand in for `forward_pass`: a built Keras 3
        model with Keras 3 metrics (``tf_keras``'s have no stateless calls)."""
        return bool(self._keras_model.built) and not any(
            keras_kinds.is_tf_keras(x) for x in [self._keras_model, *self._metrics]
        )

    def stateless_metrics_state(self) -> tuple:
        """The metrics' variable values after a reset (a tuple per metric, as
        `report_local_unfinalized_metrics` orders them), computed without a variable."""
        return tuple(tuple(m.stateless_reset_state()) for m in self._metrics)

    def stateless_forward_pass(
        self,
        trainable: Sequence[tf.Tensor],
        non_trainable: Sequence[tf.Tensor],
        metrics_state: tuple,
        batch_input: Batch,
        training: bool = True,
    ) -> tuple:
        """`forward_pass` on weights and metric values given as tensors (Keras 3's
        ``stateless_call`` and ``stateless_update_state``): no variable is read or written.

        Returns:
          ``(BatchOutput, non_trainable after the call, metrics_state after it)``: the
          values the variables of `forward_pass` would hold after it.
        """
        inputs, y_true = _inputs_and_labels(batch_input)
        predictions, all_non_trainable, regularization = self._keras_model.stateless_call(
            list(trainable),
            self._seeds.merge(non_trainable, trainable, inputs, training),
            inputs,
            training=training,
            return_losses=True,
        )
        non_trainable = self._seeds.weights_part(all_non_trainable)
        batch_loss = self._batch_loss(y_true, predictions, regularization)
        metrics_state = tuple(
            tuple(m.stateless_update_state(list(values), y_true=y_true, y_pred=predictions))
            for m, values in zip(self._metrics, metrics_state)
        )
        return (
            variable.BatchOutput(
                loss=batch_loss, predictions=predictions, num_examples=_num_examples(inputs)
            ),
            tuple(non_trainable),
            metrics_state,
        )

    def unfinalized_metrics_of(self, metrics_state: tuple) -> 'collections.OrderedDict[str, list]':
        """`report_local_unfinalized_metrics` of metric values held as tensors."""
        return collections.OrderedDict(
            (name, [tf.identity(v) for v in values])
            for name, values in zip(self._metric_names, metrics_state)
        )

    def report_local_unfinalized_metrics(self) -> collections.OrderedDict[str, TensorStructure]:
        """Metric name -> the values of its variables (tensors)."""
        return collections.OrderedDict(
            (
                name,
                [tf.identity(v.value if isinstance(v, keras.Variable) else v) for v in m.variables],
            )
            for name, m in zip(self._metric_names, self._metrics)
        )

    def metric_finalizers(self) -> 'collections.OrderedDict[str, Callable]':
        """Metric name -> `keras_finalizer.create_keras_metric_finalizer` of the metric."""
        if self._metric_constructors:
            return collections.OrderedDict(
                (name, keras_finalizer.create_keras_metric_finalizer(ctor))
                for name, ctor in self._metric_constructors.items()
            )
        return collections.OrderedDict(
            (name, keras_finalizer.create_keras_metric_finalizer(m))
            for name, m in zip(self._metric_names, self._metrics)
        )
