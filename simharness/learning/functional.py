"""Models as functions of a weights list: the built-in architectures and Keras models.

A `FunctionalModel` is what every algorithm of `simharness.learning.algorithms`
trains (TFF's ``tff.learning.models.FunctionalModel``)::

    weights      = trainable + non_trainable        a list of tensors, fixed order
    predict(weights, x, training) -> (predictions, new non_trainable)   TF ops only
    loss(y, predictions)          -> per-example loss [B]               TF ops only
    metrics                          Keras metrics, run statelessly: their variables
                                     (sums and counts) are summed over clients, then
                                     finalized at the server (TFF's sum_then_finalize)

The weights travel as tensors; the forward pass is traced into the TF graph
of a client computation, so that a worker runs it without the user's code
(no pickle): a Keras 3 model runs through ``keras_model.stateless_call``.

::

    from_keras_model(keras_model, loss, input_spec, metrics)   as tff.learning.models
    from_model_spec(spec)                                      logreg / mlp / cnn
    keras_builder('package.module:function')                   [model] keras = "..."
"""

from __future__ import annotations

import abc
import dataclasses
import importlib
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from simharness.errors import ConfigError, SimharnessTypeError, SimharnessValueError


@dataclasses.dataclass(frozen=True)
class InputSpec:
    """Shapes and dtypes of one example (no batch dimension).

    Attributes:
      x_shape, x_dtype: the model input.
      y_shape, y_dtype: the label (``()`` for a class id).
    """

    x_shape: Tuple[int, ...]
    x_dtype: Any
    y_shape: Tuple[int, ...] = ()
    y_dtype: Any = np.int32


class Metric(abc.ABC):
    """A metric whose state is a list of additive arrays (summed over clients).

    Attributes:
      name: the metric's name in the round's metrics.
    """

    name: str = ''

    @abc.abstractmethod
    def initial_state(self) -> List[np.ndarray]:
        """The additive state before any example."""

    @abc.abstractmethod
    def update(self, state: List[Any], y: Any, predictions: Any, weights: Any) -> List[Any]:
        """TF: the state after a batch (`weights`: 1 for the labels that count, 0 for
        padding; shape [B], or the labels' shape for a sequence model)."""

    @abc.abstractmethod
    def result(self, state: Sequence[np.ndarray]) -> float:
        """The value of the summed state (numpy, at the server)."""


class SparseAccuracy(Metric):
    """Fraction of examples whose argmax prediction is the label: state (correct, count)."""

    name = 'accuracy'

    def initial_state(self) -> List[np.ndarray]:
        return [np.zeros((), np.float32), np.zeros((), np.float32)]

    def update(self, state: List[Any], y: Any, predictions: Any, weights: Any) -> List[Any]:
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        pred = tf.argmax(predictions, axis=-1, output_type=tf.int32)
        hit = tf.cast(tf.equal(pred, tf.cast(y, tf.int32)), tf.float32)
        return [state[0] + tf.reduce_sum(hit * weights), state[1] + tf.reduce_sum(weights)]

    def result(self, state: Sequence[np.ndarray]) -> float:
        n = float(state[1])
        return float(state[0]) / n if n else float('nan')


class KerasMetric(Metric):
    """A Keras 3 metric run statelessly (`stateless_update_state` / `stateless_result`).

    Its variables must be additive over clients (true of Keras' Mean-, Sum-,
    count- and confusion-matrix-based metrics: accuracy, MSE, AUC, precision,
    recall ...), as for TFF's default ``sum_then_finalize`` aggregation.
    """

    def __init__(self, metric: Any):
        self.metric = metric
        self.name = metric.name

    def initial_state(self) -> List[np.ndarray]:
        return [np.asarray(v.numpy()) for v in self.metric.variables]

    def update(self, state: List[Any], y: Any, predictions: Any, weights: Any) -> List[Any]:
        return list(self.metric.stateless_update_state(list(state), y, predictions,
                                                       sample_weight=weights))

    def result(self, state: Sequence[np.ndarray]) -> float:
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        with tf.device('/CPU:0'):
            return float(np.asarray(self.metric.stateless_result(
                [tf.constant(s) for s in state])))


class FunctionalModel:
    """A model for the algorithms: weights in, predictions and losses out.

    Args:
      initial_weights: ``seed -> list of arrays`` (trainable first).
      weight_specs: ``[(shape, dtype), ...]`` of all weights.
      num_trainable: how many of the weights (the first ones) are trained.
      predict: ``(weights, x, training) -> (predictions, non_trainable)`` in TF.
      loss: ``(y, predictions) -> per-example losses [B]`` in TF.
      input_spec: `InputSpec` of one example.
      metrics: `Metric` s besides the loss.
      name: a label for logs.
      ignore_label: for sequence labels, the label of padding positions (e.g. 0):
        left out of the loss and the metrics (None: every position counts).
    """

    def __init__(self, initial_weights: Callable[[int], List[np.ndarray]],
                 weight_specs: Sequence[Tuple[Tuple[int, ...], Any]], num_trainable: int,
                 predict: Callable[..., Any], loss: Callable[[Any, Any], Any],
                 input_spec: InputSpec, metrics: Sequence[Metric] = (), name: str = 'model',
                 ignore_label: Optional[int] = None):
        self.ignore_label = ignore_label
        self._initial_weights = initial_weights
        self.weight_specs = [(tuple(int(d) for d in s), np.dtype(d)) for s, d in weight_specs]
        self.num_trainable = int(num_trainable)
        self.predict = predict
        self.loss = loss
        self.input_spec = input_spec
        self.metrics = list(metrics)
        self.name = name
        names = [m.name for m in self.metrics]
        if len(set(names)) != len(names) or 'loss' in names:
            raise SimharnessValueError(f'metric names must be distinct and not "loss", got '
                                       f'{names}')

    def initial_weights(self, seed: int = 0) -> List[np.ndarray]:
        w = [np.asarray(v) for v in self._initial_weights(seed)]
        got = [(tuple(v.shape), v.dtype) for v in w]
        if got != self.weight_specs:
            raise SimharnessValueError(f'model {self.name!r}: initial weights {got} do not match '
                                       f'the weight specs {self.weight_specs}')
        return w

    def per_example_loss(self, y: Any, predictions: Any) -> Any:
        """TF: [B] losses; a sequence's positions are averaged (its padding left out
        when `ignore_label` is set)."""
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        losses = tf.cast(self.loss(y, predictions), tf.float32)
        if losses.shape.rank is None or losses.shape.rank <= 1:
            return losses
        axes = list(range(1, losses.shape.rank))
        if self.ignore_label is None:
            return tf.reduce_mean(losses, axis=axes)
        w = tf.cast(tf.not_equal(y, tf.cast(self.ignore_label, y.dtype)), tf.float32)
        return tf.reduce_sum(losses * w, axis=axes) / tf.maximum(tf.reduce_sum(w, axis=axes),
                                                                 1.0)

    def label_weights(self, y: Any, mask: Any) -> Any:
        """TF: the metrics' weights: `mask` [B] (1: a real example), broadcast over a
        sequence's positions, 0 at padding positions when `ignore_label` is set."""
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        if y.shape.rank is None or y.shape.rank <= 1:
            return mask
        w = tf.reshape(mask, [-1] + [1] * (y.shape.rank - 1)) * tf.ones(tf.shape(y), tf.float32)
        if self.ignore_label is not None:
            w = w * tf.cast(tf.not_equal(y, tf.cast(self.ignore_label, y.dtype)), tf.float32)
        return w

    @property
    def num_parameters(self) -> int:
        return int(sum(np.prod(s, dtype=np.int64) for s, _ in self.weight_specs))

    def evaluate(self, weights: Sequence[Any], x: np.ndarray, y: np.ndarray,
                 batch_size: int = 1024) -> Dict[str, float]:
        """Central evaluation (driver, eager TF, in batches): loss and every metric."""
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        w = [tf.constant(v) for v in weights]
        loss_sum, count = 0.0, 0.0
        states = [m.initial_state() for m in self.metrics]
        with tf.device('/CPU:0'):
            for start in range(0, len(y), batch_size):
                xb = tf.constant(x[start:start + batch_size], self.input_spec.x_dtype)
                yb = tf.constant(y[start:start + batch_size], self.input_spec.y_dtype)
                pred, _ = self.predict(w, xb, False)
                per = self.per_example_loss(yb, pred)
                loss_sum += float(np.sum(per.numpy().astype(np.float64)))
                count += int(per.shape[0])
                weights = self.label_weights(yb, tf.ones([tf.shape(yb)[0]], tf.float32))
                states = [[np.asarray(t) for t in m.update([tf.constant(s) for s in st], yb,
                                                           pred, weights)]
                          for m, st in zip(self.metrics, states)]
        out = {'loss': loss_sum / count if count else float('nan')}
        out.update({m.name: m.result(st) for m, st in zip(self.metrics, states)})
        return out


# ------------------------------------------------------------ built-in models

def from_model_spec(spec: Any) -> FunctionalModel:
    """The built-in ``logreg`` / ``mlp`` / ``cnn`` (`simharness.learning.models`)."""
    from simharness.learning import models as M  # pylint: disable=import-outside-toplevel

    def predict(weights: Sequence[Any], x: Any, training: bool) -> Tuple[Any, list]:
        del training
        return M.forward(spec, list(weights), x), []

    def loss(y: Any, logits: Any) -> Any:
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.cast(y, tf.int32),
                                                              logits=logits)

    return FunctionalModel(lambda seed: M.init_weights(spec, seed),
                           [(s, np.float32) for s in spec.weight_shapes],
                           len(spec.weight_shapes), predict, loss,
                           InputSpec(tuple(spec.input_shape), np.float32), [SparseAccuracy()],
                           name=spec.name)


# --------------------------------------------------------------------- Keras

def _spec_parts(input_spec: Any) -> InputSpec:
    """TFF's input_spec: (x, y) or {'x': ..., 'y': ...} of tf.TensorSpec (batch dim first)."""
    if isinstance(input_spec, InputSpec):
        return input_spec
    if isinstance(input_spec, Mapping):
        if set(input_spec) != {'x', 'y'}:
            raise SimharnessValueError(f"input_spec as a mapping needs exactly the keys 'x' and "
                                       f"'y', got {sorted(input_spec)}")
        x, y = input_spec['x'], input_spec['y']
    elif isinstance(input_spec, (tuple, list)) and len(input_spec) == 2:
        x, y = input_spec
    else:
        raise SimharnessTypeError(
            f'input_spec must be (x_spec, y_spec) or {{"x": x_spec, "y": y_spec}} of '
            f'tf.TensorSpec, got {type(input_spec).__name__}', expected=tuple,
            actual=type(input_spec))
    parts = []
    for what, s in (('x', x), ('y', y)):
        shape, dtype = getattr(s, 'shape', None), getattr(s, 'dtype', None)
        if shape is None or dtype is None:
            raise SimharnessTypeError(f'input_spec {what} must be a tf.TensorSpec (shape and '
                                      f'dtype), got {s!r}', actual=type(s))
        dims = list(shape)
        if not dims or any(d is None for d in dims[1:]):
            raise SimharnessValueError(f'input_spec {what}: the shape must be [batch, ...] with '
                                       f'every non-batch dimension known, got {shape}')
        dt = getattr(dtype, 'as_numpy_dtype', dtype)
        parts.append((tuple(int(d) for d in dims[1:]), np.dtype(dt)))
    return InputSpec(parts[0][0], parts[0][1], parts[1][0], parts[1][1])


def _keras_loss(loss: Any) -> Callable[[Any, Any], Any]:
    """A per-example loss function from a Keras loss object, name or function."""
    import keras  # pylint: disable=import-outside-toplevel
    if isinstance(loss, str):
        try:
            loss = keras.losses.get(loss)
        except (ValueError, TypeError) as e:
            raise SimharnessValueError(f'unknown Keras loss {loss!r}: {e}') from None
    if isinstance(loss, keras.losses.Loss):
        return loss.call  # unreduced: one value per example (per position of a sequence)
    if callable(loss):
        return loss
    raise SimharnessTypeError(f'loss must be a Keras loss (object, name or function), got '
                              f'{type(loss).__name__}', actual=type(loss))


def _keras_metrics(metrics: Any) -> List[Metric]:
    import keras  # pylint: disable=import-outside-toplevel
    if metrics is None:
        return []
    if not isinstance(metrics, (list, tuple)):
        metrics = [metrics]
    out: List[Metric] = []
    for m in metrics:
        if isinstance(m, str):
            if m in ('accuracy', 'acc', 'sparse_categorical_accuracy'):
                m = keras.metrics.SparseCategoricalAccuracy(name='accuracy')
            else:
                m = keras.metrics.get(m)
                if not isinstance(m, keras.metrics.Metric):
                    m = keras.metrics.MeanMetricWrapper(m, name=getattr(m, '__name__', 'metric'))
        if not isinstance(m, keras.metrics.Metric):
            raise SimharnessTypeError(f'metrics must be Keras metrics or their names, got '
                                      f'{type(m).__name__}', expected=keras.metrics.Metric,
                                      actual=type(m))
        out.append(KerasMetric(m))
    return out


def from_keras_model(keras_model: Any, loss: Any, input_spec: Any,
                     metrics: Optional[Sequence[Any]] = None,
                     initial_weights: Optional[Callable[[int], List[np.ndarray]]] = None,
                     ignore_label: Optional[int] = None) -> FunctionalModel:
    """Wraps a built Keras 3 model, as ``tff.learning.models.from_keras_model``.

    The forward pass is ``keras_model.stateless_call(trainable, non_trainable,
    x, training=...)``: traced into each client computation's graph, so the
    weights are plain tensors and the model runs on every stack (workers
    need neither Keras nor the user's code).

    Args:
      keras_model: a built `keras.Model` (its variables exist).
      loss: a Keras loss (object, name or function ``(y_true, y_pred)``);
        the per-example values are averaged over each batch's real examples.
      input_spec: ``(x_spec, y_spec)`` or ``{'x': ..., 'y': ...}`` of
        `tf.TensorSpec` with a leading batch dimension (as TFF's).
      metrics: Keras metrics (or names such as ``'accuracy'``).
      initial_weights: ``seed -> weights``; default: the model's current
        variable values (for every seed).
      ignore_label: sequence labels equal to it (padding) count in neither the
        loss nor the metrics (see `FunctionalModel`).

    Returns:
      A `FunctionalModel`.

    Raises:
      SimharnessTypeError: not a Keras model, or a bad loss, spec or metric.
      SimharnessValueError: an unbuilt model, or a spec with unknown dimensions.
    """
    import keras  # pylint: disable=import-outside-toplevel
    if not isinstance(keras_model, keras.Model):
        raise SimharnessTypeError(f'from_keras_model needs a keras.Model, got '
                                  f'{type(keras_model).__name__}', expected=keras.Model,
                                  actual=type(keras_model))
    if not keras_model.built or not keras_model.trainable_variables:
        raise SimharnessValueError('from_keras_model: the Keras model is not built (call it on a '
                                   'batch or give it an Input layer first)')
    spec = _spec_parts(input_spec)
    trainable = list(keras_model.trainable_variables)
    non_trainable = list(keras_model.non_trainable_variables)
    variables = trainable + non_trainable
    specs = [(tuple(v.shape), np.dtype(v.dtype)) for v in variables]
    loss_fn = _keras_loss(loss)
    current = [np.array(v.numpy()) for v in variables]
    n_train = len(trainable)

    def predict(weights: Sequence[Any], x: Any, training: bool) -> Tuple[Any, list]:
        w = list(weights)
        out, nt = keras_model.stateless_call(w[:n_train], w[n_train:], x, training=training)
        return out, list(nt)

    init = initial_weights or (lambda seed: [a.copy() for a in current])
    return FunctionalModel(init, specs, n_train, predict, loss_fn, spec,
                           _keras_metrics(metrics), name=keras_model.name,
                           ignore_label=ignore_label)


def functional_model_from_keras(keras_model: Any, loss_fn: Any, input_spec: Any,
                                 metrics_constructor: Optional[Any] = None) -> FunctionalModel:
    """TFF's ``functional_model_from_keras`` spelling of `from_keras_model`
    (`metrics_constructor`: a callable returning the metrics, or the metrics)."""
    metrics = metrics_constructor() if callable(metrics_constructor) else metrics_constructor
    return from_keras_model(keras_model, loss_fn, input_spec, metrics)


def keras_builder(ref: str) -> Callable[..., Any]:
    """The function ``'package.module:function'`` names (``[model] keras = ...``).

    Raises:
      ConfigError: a malformed reference, a module that cannot be imported,
        or a missing / non-callable attribute.
    """
    if not isinstance(ref, str) or ref.count(':') != 1 or not all(ref.split(':')):
        raise ConfigError(f'model.keras must look like "package.module:function", got {ref!r}',
                          key='model.keras', value=ref)
    mod_name, attr = ref.split(':')
    try:
        mod = importlib.import_module(mod_name)
    except ImportError as e:
        raise ConfigError(f'model.keras = {ref!r}: cannot import {mod_name!r} ({e})',
                          key='model.keras', value=ref) from None
    fn = getattr(mod, attr, None)
    if not callable(fn):
        raise ConfigError(f'model.keras = {ref!r}: {mod_name} has no function {attr!r}',
                          key='model.keras', value=ref)
    return fn


def from_keras_builder(ref: str, input_shape: Sequence[int], num_classes: int,
                       y_shape: Sequence[int] = (), x_dtype: Any = np.float32,
                       y_dtype: Any = np.int32, ignore_label: Optional[int] = None
                       ) -> FunctionalModel:
    """A `FunctionalModel` from a builder ``fn(input_shape, num_classes)``.

    The builder returns a `keras.Model` (compiled or not: the loss is then
    its compiled loss, else sparse categorical cross-entropy from logits;
    metrics: accuracy) or a ready `FunctionalModel`. Initial weights for
    seed s: ``keras.utils.set_random_seed(s)`` then a fresh build.
    """
    import keras  # pylint: disable=import-outside-toplevel
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    fn = keras_builder(ref)

    def build(seed: int) -> Any:
        keras.utils.set_random_seed(int(seed))
        m = fn(tuple(input_shape), int(num_classes))
        if isinstance(m, keras.Model) and not m.built:
            m(np.zeros((1,) + tuple(input_shape), np.dtype(x_dtype)))
        return m

    model = build(0)
    if isinstance(model, FunctionalModel):
        return model
    if not isinstance(model, keras.Model):
        raise ConfigError(f'model.keras = {ref!r} returned {type(model).__name__}, not a '
                          'keras.Model or FunctionalModel', key='model.keras', value=ref)
    loss = getattr(model, 'loss', None) or keras.losses.SparseCategoricalCrossentropy(
        from_logits=True)
    spec = (tf.TensorSpec((None,) + tuple(input_shape), tf.as_dtype(np.dtype(x_dtype))),
            tf.TensorSpec((None,) + tuple(y_shape), tf.as_dtype(np.dtype(y_dtype))))

    def init(seed: int) -> List[np.ndarray]:
        m = build(seed)
        return [np.array(v.numpy()) for v in m.trainable_variables + m.non_trainable_variables]

    return from_keras_model(model, loss, spec, metrics=['accuracy'], initial_weights=init,
                            ignore_label=ignore_label)


__all__ = ['FunctionalModel', 'InputSpec', 'KerasMetric', 'Metric', 'SparseAccuracy',
           'from_keras_builder', 'from_keras_model', 'from_model_spec',
           'functional_model_from_keras', 'keras_builder']
