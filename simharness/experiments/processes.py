"""The config layer's algorithm table, built through TFF's learning API (issue 25).

::

    [model]       logreg / mlp / cnn  -> model_from_spec: a tff.learning.models.FunctionalModel
                  keras = "mod:fn"    -> model_from_keras_builder: functional_model_from_keras
    [algorithm]   fedavg fedavgm fedadam fedyogi fedadagrad
                                      -> learning.algorithms.build_weighted_fed_avg
                                         (build_unweighted_fed_avg when aggregator.weighted = false)
                  fedprox             -> build_weighted_fed_prox / build_unweighted_fed_prox
                  fedsgd              -> build_fed_sgd
                  client_optimizer / server_optimizer
                                      -> learning.optimizers.build_sgdm / build_adam /
                                         build_yogi / build_adagrad
    [aggregator]  (nothing)           -> aggregators.MeanFactory / UnweightedMeanFactory
                  clip [adaptive_clip]-> aggregators.clipping_factory (fixed norm, or a
                                         PrivateQuantileEstimationProcess.no_noise)
                  noise_multiplier    -> DifferentiallyPrivateFactory.gaussian_fixed /
                                         gaussian_adaptive (noise_seed = aggregator.seed)
                  secure + quantize_bits
                                      -> UnweightedMeanFactory over SecureSumFactory(range)
    [training] federated_eval
                  federated_evaluation: learning.algorithms.build_fed_eval(model), the weights
                  set with set_model_weights, current_round_metrics of client_work/eval
    clients       client_datasets: from_tensor_slices((x, y)).batch(b).repeat(local_epochs)
                  by id: compose_with_client_data (ClientData.preprocess(...).dataset_computation
                  composed with the process: ids travel, each executor builds its datasets)

`build_learning_process(config, model)` returns a
``tff.learning.templates.LearningProcess``: ``state = process.initialize()``,
``state, metrics = process.next(state, datasets)``; `round_metrics` flattens
TFF's nested metrics into the runner's row (``loss``, ``accuracy``,
``num_examples`` and the aggregator's measurements).
"""

from __future__ import annotations

import collections
import importlib
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

import keras
import numpy as np
import tensorflow as tf

from simharness import aggregators
from simharness.core import types as T
from simharness.core.sequences import TensorBatches
from simharness.simulation import iterative_process_compositions
from simharness.errors import ConfigError
from simharness.learning import algorithms, metrics, optimizers
from simharness.learning.models import specs
from simharness.learning.models.functional import FunctionalModel, functional_model_from_keras
from simharness.learning.models.variable import BatchOutput

__all__ = [
    'build_learning_process',
    'build_model_aggregator',
    'build_optimizer',
    'central_evaluation',
    'client_datasets',
    'compose_with_client_data',
    'federated_evaluation',
    'keras_builder',
    'model_from_keras_builder',
    'model_from_spec',
    'round_metrics',
]

#: ``[algorithm] name`` -> the server optimizer it implies.
_SERVER_OPTIMIZER = {'fedadam': 'adam', 'fedyogi': 'yogi', 'fedadagrad': 'adagrad'}
#: The default epsilon of each optimizer (TFF's builders' defaults, yogi's 1e-3).
_EPSILON = {'adam': 1e-7, 'yogi': 1e-3, 'adagrad': 1e-7}


def _metric_constructors() -> 'collections.OrderedDict[str, Callable[[], Any]]':
    """The metrics every config model reports (as ``from_keras_model`` adds them)."""
    return collections.OrderedDict(
        loss=lambda: keras.metrics.SparseCategoricalCrossentropy(name='loss', from_logits=True),
        accuracy=lambda: keras.metrics.SparseCategoricalAccuracy(name='accuracy'),
        num_examples=metrics.NumExamplesCounter,
        num_batches=metrics.NumBatchesCounter,
    )


def model_from_spec(spec: specs.ModelSpec, seed: int) -> FunctionalModel:
    """A built-in architecture (logreg / mlp / cnn) as TFF's `FunctionalModel`.

    Args:
      spec: the architecture (`simharness.learning.models.get_model`).
      seed: seed of the initial weights (`init_weights(spec, seed)`).

    Returns:
      A `FunctionalModel`: weights ``(trainable, ())``, predictions the
      logits, loss the batch mean of the sparse softmax cross-entropy,
      metrics ``loss``, ``accuracy``, ``num_examples``, ``num_batches``.
    """
    weights = tuple(np.asarray(w, np.float32) for w in specs.init_weights(spec, seed))

    @tf.function
    def predict_on_batch(model_weights: Any, x: Any, training: bool = True) -> Any:
        del training
        return specs.forward(spec, list(model_weights[0]), x)

    def loss(output: Any, label: Any, sample_weight: Any = None) -> Any:
        del sample_weight
        return tf.reduce_mean(
            tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=tf.cast(label, tf.int32), logits=output
            )
        )

    input_spec = (
        tf.TensorSpec([None] + list(spec.input_shape), tf.float32),
        tf.TensorSpec([None], tf.int32),
    )
    return FunctionalModel(
        initial_weights=(weights, ()),
        predict_on_batch_fn=predict_on_batch,
        loss_fn=loss,
        metrics_fns=metrics.create_functional_metric_fns(_metric_constructors()),
        input_spec=input_spec,
    )


def keras_builder(ref: str) -> Callable[..., Any]:
    """The function ``'package.module:function'`` names (``[model] keras = ...``).

    Raises:
      ConfigError: a malformed reference, a module that cannot be imported,
        or a missing / non-callable attribute.
    """
    if not isinstance(ref, str) or ref.count(':') != 1 or not all(ref.split(':')):
        raise ConfigError(
            f'model.keras must look like "package.module:function", got {ref!r}',
            key='model.keras',
            value=ref,
        )
    mod_name, attr = ref.split(':')
    try:
        mod = importlib.import_module(mod_name)
    except ImportError as e:
        raise ConfigError(
            f'model.keras = {ref!r}: cannot import {mod_name!r} ({e})', key='model.keras', value=ref
        ) from None
    fn = getattr(mod, attr, None)
    if not callable(fn):
        raise ConfigError(
            f'model.keras = {ref!r}: {mod_name} has no function {attr!r}',
            key='model.keras',
            value=ref,
        )
    return fn


def model_from_keras_builder(
    builder: Callable[..., Any],
    input_shape: Sequence[int],
    num_classes: int,
    seed: int,
    *,
    y_shape: Sequence[int] = (),
    x_dtype: Any = np.float32,
    ignore_label: Any = None,
) -> FunctionalModel:
    """A ``[model] keras = "module:function"`` model as TFF's `FunctionalModel`.

    The builder ``fn(input_shape, num_classes) -> keras.Model`` runs after
    ``keras.utils.set_random_seed(seed)``; the loss is the model's compiled
    loss, else sparse categorical cross-entropy from logits.

    Args:
      builder: the function.
      input_shape, num_classes: of the data.
      seed: seed of the initial weights.
      y_shape: the label shape of one example (``(T,)`` for next-token
        prediction).
      x_dtype: the inputs' dtype (int32 for token ids).
      ignore_label: sequence labels equal to it (padding) count in neither
        the loss (each example's loss is the mean over its other positions)
        nor the metrics.

    A builder that returns a ready ``tff.learning.models.FunctionalModel``
    is taken as it is.

    Raises:
      ConfigError: the builder returns neither a `keras.Model` nor a
        `FunctionalModel`.
    """
    keras.utils.set_random_seed(int(seed))
    model = builder(tuple(input_shape), int(num_classes))
    if isinstance(model, FunctionalModel):
        return model
    if not isinstance(model, keras.Model):
        name = getattr(builder, '__qualname__', repr(builder))
        raise ConfigError(
            f'model.keras ({name}) returned {type(model).__name__}, not a '
            'keras.Model or FunctionalModel',
            key='model.keras',
            value=type(model).__name__,
        )
    if not model.built:
        model(np.zeros((1,) + tuple(input_shape), np.dtype(x_dtype)))
    loss = getattr(model, 'loss', None) or keras.losses.SparseCategoricalCrossentropy(
        from_logits=True
    )
    input_spec = (
        tf.TensorSpec([None] + list(input_shape), tf.as_dtype(np.dtype(x_dtype))),
        tf.TensorSpec([None] + list(y_shape), tf.int32),
    )
    fm = functional_model_from_keras(
        model, loss, input_spec, metrics_constructor=_metric_constructors()
    )
    if ignore_label is None:
        return fm
    return _masked(fm, loss, ignore_label)


def _masked(fm: FunctionalModel, loss: Any, ignore_label: Any) -> FunctionalModel:
    """`fm` with labels equal to `ignore_label` left out of its loss and metrics."""
    initialize, update, finalize = metrics.create_functional_metric_fns(_metric_constructors())

    def mask_of(label: Any) -> Any:
        return tf.cast(tf.not_equal(label, tf.cast(ignore_label, label.dtype)), tf.float32)

    @tf.function
    def predict_on_batch(model_weights: Any, x: Any, training: bool = True) -> Any:
        return fm.predict_on_batch(model_weights, x, training)

    def masked_loss(output: Any, label: Any, sample_weight: Any = None) -> Any:
        del sample_weight
        per_position = tf.cast(loss.call(label, output), tf.float32)
        w = mask_of(label)
        axes = list(range(1, per_position.shape.rank))
        per_example = tf.reduce_sum(per_position * w, axis=axes) / tf.maximum(
            tf.reduce_sum(w, axis=axes), 1.0
        )
        return tf.reduce_mean(per_example)

    def masked_update(state: Any, labels: Any, batch_output: Any, sample_weight: Any = None) -> Any:
        w = mask_of(labels)
        if sample_weight is not None:
            w = w * tf.cast(sample_weight, tf.float32)
        return update(state, labels, batch_output, sample_weight=w)

    return FunctionalModel(
        initial_weights=fm.initial_weights,
        predict_on_batch_fn=predict_on_batch,
        loss_fn=masked_loss,
        metrics_fns=(initialize, masked_update, finalize),
        input_spec=fm.input_spec,
    )


def build_optimizer(
    name: str,
    learning_rate: float,
    *,
    momentum: float = 0.0,
    beta_1: float = 0.9,
    beta_2: float = 0.999,
    epsilon: Any = None,
) -> optimizers.Optimizer:
    """``'sgd'`` / ``'adam'`` / ``'yogi'`` / ``'adagrad'`` as TFF's ``build_*`` optimizer.

    Raises:
      ConfigError: an unknown name.
    """
    if name == 'sgd':
        return optimizers.build_sgdm(learning_rate, momentum=momentum or None)
    eps = _EPSILON.get(name) if epsilon is None else epsilon
    if name == 'adam':
        return optimizers.build_adam(learning_rate, beta_1=beta_1, beta_2=beta_2, epsilon=eps)
    if name == 'yogi':
        return optimizers.build_yogi(learning_rate, beta_1=beta_1, beta_2=beta_2, epsilon=eps)
    if name == 'adagrad':
        return optimizers.build_adagrad(learning_rate, epsilon=eps)
    raise ConfigError(
        f"unknown optimizer {name!r}; allowed: 'adagrad', 'adam', 'sgd', 'yogi'",
        key='algorithm.client_optimizer',
        value=name,
    )


def build_model_aggregator(aggregator: Any, clients_per_round: int) -> Any:
    """The ``[aggregator]`` table as a TFF aggregation factory (weighted or unweighted).

    Args:
      aggregator: an `AggregatorConfig`.
      clients_per_round: the DP mean's denominator.

    Raises:
      ConfigError: ``quantize_bits`` without ``secure`` (no TFF aggregator
        quantizes a mean without summing it securely: set ``secure = true``).
    """
    a = aggregator
    if a.quantize_bits is not None and not a.secure:
        raise ConfigError(
            'aggregator.quantize_bits without aggregator.secure has no TFF aggregator: set '
            'secure = true (SecureSumFactory quantizes within quantize_range) or drop '
            'quantize_bits',
            key='aggregator.quantize_bits',
            value=a.quantize_bits,
        )
    if a.noise_multiplier > 0:
        if a.adaptive_clip:
            return aggregators.DifferentiallyPrivateFactory.gaussian_adaptive(
                a.noise_multiplier,
                clients_per_round,
                initial_l2_norm_clip=a.clip,
                target_unclipped_quantile=a.target_quantile,
                learning_rate=a.clip_learning_rate,
                clipped_count_stddev=a.clipped_count_stddev,
                noise_seed=a.seed,
            )
        return aggregators.DifferentiallyPrivateFactory.gaussian_fixed(
            a.noise_multiplier, clients_per_round, a.clip, noise_seed=a.seed
        )
    if a.secure:
        bound = float(a.quantize_range if a.quantize_range is not None else a.clip)
        inner: Any = aggregators.UnweightedMeanFactory(
            value_sum_factory=aggregators.SecureSumFactory(bound)
        )
    elif a.weighted:
        inner = aggregators.MeanFactory()
    else:
        inner = aggregators.UnweightedMeanFactory()
    if a.clip is None:
        return inner
    norm: Any = float(a.clip)
    if a.adaptive_clip:
        norm = aggregators.PrivateQuantileEstimationProcess.no_noise(
            initial_estimate=float(a.clip),
            target_quantile=a.target_quantile,
            learning_rate=a.clip_learning_rate,
        )
    return aggregators.clipping_factory(norm, inner)


def build_learning_process(config: Any, model: FunctionalModel) -> Any:
    """The ``tff.learning`` process of an `ExperimentConfig`'s algorithm and aggregator.

    Args:
      config: the `ExperimentConfig`.
      model: its model (`model_from_spec` / `model_from_keras_builder`).

    Returns:
      A ``tff.learning.templates.LearningProcess``.
    """
    a = config.algorithm
    sname = a.server_optimizer or _SERVER_OPTIMIZER.get(a.name, 'sgd')
    momentum = 0.9 if a.name == 'fedavgm' and a.server_momentum == 0 else a.server_momentum
    server = build_optimizer(
        sname,
        a.server_learning_rate,
        momentum=momentum,
        beta_1=a.beta_1,
        beta_2=a.beta_2,
        epsilon=a.epsilon,
    )
    client = build_optimizer(a.client_optimizer, a.client_learning_rate, momentum=a.client_momentum)
    agg = build_model_aggregator(config.aggregator, config.training.clients_per_round)
    weighted = isinstance(agg, aggregators.WeightedAggregationFactory)
    if a.name == 'fedsgd':
        if not weighted:
            agg = aggregators.as_weighted_aggregator(agg)
        return algorithms.build_fed_sgd(model, server_optimizer_fn=server, model_aggregator=agg)
    if a.name == 'fedprox':
        build = (
            algorithms.build_weighted_fed_prox if weighted else algorithms.build_unweighted_fed_prox
        )
        return build(model, a.proximal_strength, client, server, model_aggregator=agg)
    build = algorithms.build_weighted_fed_avg if weighted else algorithms.build_unweighted_fed_avg
    return build(model, client, server, model_aggregator=agg)


def client_datasets(
    arrays: Sequence[Mapping[str, np.ndarray]],
    batch_size: int,
    local_epochs: int = 1,
    x_key: str = 'x',
    y_key: str = 'y',
    x_dtype: Any = np.float32,
) -> List[Any]:
    """Each client's ``tf.data`` dataset: its examples in stored order in batches of
    ``batch_size`` (the last one partial), repeated for ``local_epochs`` passes: a client of
    n examples takes ``ceil(n / batch_size)`` steps per epoch (batch, then repeat: no batch
    spans two epochs)."""
    out = []
    for a in arrays:
        ds = tf.data.Dataset.from_tensor_slices(
            (np.asarray(a[x_key], x_dtype), np.asarray(a[y_key], np.int32))
        ).batch(batch_size)
        out.append(ds.repeat(local_epochs) if local_epochs > 1 else ds)
    return out


def compose_with_client_data(
    process: Any,
    client_data: Any,
    batch_size: int,
    local_epochs: int = 1,
    x_key: str = 'x',
    y_key: str = 'y',
    x_dtype: Any = np.float32,
) -> Any:
    """`process` taking client ids: each executor builds its clients' datasets itself.

    ``client_data.preprocess`` makes each client's dataset as `client_datasets`
    does (``(x, y)`` in stored order, batches of `batch_size`, repeated for
    ``local_epochs`` passes); its ``dataset_computation`` is composed with the process
    (``tff.simulation.compose_dataset_computation_with_learning_process``),
    so ``next(state, client_ids)`` ships ids, not examples.
    """
    by_id = client_data.preprocess(_xy_batches(batch_size, local_epochs, x_key, y_key, x_dtype))
    return iterative_process_compositions.compose_dataset_computation_with_learning_process(
        by_id.dataset_computation, process
    )


def _xy_batches(
    batch_size: int, local_epochs: int, x_key: str, y_key: str, x_dtype: Any
) -> Callable[[Any], Any]:
    """The preprocess of a client's dataset of dicts: ``(x, y)`` cast, batched, repeated."""

    def preprocess(ds: Any) -> Any:
        x_tf = tf.as_dtype(np.dtype(x_dtype))
        ds = ds.map(lambda e: (tf.cast(e[x_key], x_tf), tf.cast(e[y_key], tf.int32)))
        ds = ds.batch(batch_size)
        return ds.repeat(local_epochs) if local_epochs > 1 else ds

    return preprocess


def client_batches(
    client_data: Any,
    batch_size: int,
    local_epochs: int = 1,
    x_key: str = 'x',
    y_key: str = 'y',
    x_dtype: Any = np.float32,
) -> Optional[Callable[[Sequence[str]], List[TensorBatches]]]:
    """For in-memory client data: a function from client ids to the clients' values, the
    elements of `compose_with_client_data`'s datasets, built from the stored arrays.

    ``(x, y)`` cast to `x_dtype` and int32, in batches of `batch_size`, `local_epochs`
    passes each batched on its own: exactly what ``preprocess`` makes of the client's
    slices, as `TensorBatches` (the form an executor reads such a dataset into). No
    dataset is built or read on either side, and the worker stacks send a round's
    clients as one array per component through shared memory, where ids made every
    worker run the data set's dataset computation and read its dataset, per client.
    None when `client_data` is not in-memory slices (`ClientData.tensor_slices`), or not
    of dicts holding `x_key` and `y_key`: then clients go by id.
    """
    ids = client_data.client_ids
    if not ids or local_epochs < 1:
        return None
    probe = client_data.tensor_slices(ids[0])
    if not isinstance(probe, Mapping) or x_key not in probe or y_key not in probe:
        return None
    x_np = np.dtype(x_dtype)
    if (
        np.asarray(probe[x_key]).dtype.kind not in 'biuf'
        or np.asarray(probe[y_key]).dtype.kind not in 'biu'
    ):
        return None
    # the element type of the preprocessed datasets, as the ids path makes them
    element = T.from_tf_structure(
        tf.data.Dataset.from_tensor_slices(dict(probe))
        .apply(_xy_batches(batch_size, local_epochs, x_key, y_key, x_dtype))
        .element_spec
    )

    def batches(client_ids: Sequence[str]) -> List[TensorBatches]:
        out = []
        for cid in client_ids:
            s = client_data.tensor_slices(cid)
            x = np.asarray(s[x_key]).astype(x_np, copy=False)
            y = np.asarray(s[y_key]).astype(np.int32, copy=False)
            if local_epochs > 1:
                x, y = np.concatenate([x] * local_epochs), np.concatenate([y] * local_epochs)
            out.append(TensorBatches([x, y], batch_size, False, element, local_epochs))
        return out

    return batches


def federated_evaluation(eval_process: Any, model_weights: Any, client_data: Any) -> Dict[str, Any]:
    """The metrics of `model_weights` over `client_data` by a ``build_fed_eval`` process.

    Args:
      eval_process: ``learning.algorithms.build_fed_eval(model)`` (composed
        with a dataset computation when `client_data` are ids).
      model_weights: a ``tff.learning.models.ModelWeights`` (e.g.
        ``process.get_model_weights(state)`` of the training process).
      client_data: the clients' evaluation datasets (batched), or their ids.

    Returns:
      ``current_round_metrics`` of ``client_work/eval`` as floats (``loss``,
      ``accuracy``, ``num_examples``, ...).
    """
    state = eval_process.set_model_weights(eval_process.initialize(), model_weights)
    _, out = eval_process.next(state, client_data)
    current = out['client_work']['eval']['current_round_metrics']
    return {k: float(v) for k, v in current.items()}


def central_evaluation(
    model: FunctionalModel, model_weights: Any, x: Any, y: Any, batch_size: int = 1024
) -> Dict[str, float]:
    """The model's loss and metrics on held-out examples, in the driver (eager, in batches).

    Args:
      model: a `FunctionalModel` (`model_from_spec`, `model_from_keras_builder`).
      model_weights: ``(trainable, non_trainable)`` or a ``ModelWeights``.
      x, y: the examples (arrays, or anything sliceable into arrays).
      batch_size: examples per forward pass.

    Returns:
      ``loss`` (the mean of the model's batch losses weighted by the batch
      sizes) and the model's finalized metrics (``accuracy``, ...).
    """
    if hasattr(model_weights, 'trainable'):
        model_weights = (model_weights.trainable, model_weights.non_trainable)
    weights = (
        tuple(tf.constant(w) for w in model_weights[0]),
        tuple(tf.constant(w) for w in model_weights[1]),
    )
    x_dtype, y_dtype = (s.dtype for s in model.input_spec)
    state = model.initialize_metrics_state()
    loss_sum, count = 0.0, 0
    with tf.device('/CPU:0'):
        for start in range(0, len(y), batch_size):
            xb = tf.constant(np.asarray(x[start : start + batch_size]), x_dtype)
            yb = tf.constant(np.asarray(y[start : start + batch_size]), y_dtype)
            out = model.predict_on_batch(weights, xb, training=False)
            n = int(yb.shape[0])
            loss_sum += float(model.loss(output=out, label=yb)) * n
            count += n
            state = model.update_metrics_state(
                state,
                labels=yb,
                batch_output=BatchOutput(loss=None, predictions=out, num_examples=n),
            )
        finalized = model.finalize_metrics(state)
    result = {k: float(v) for k, v in finalized.items() if k not in ('loss', 'num_batches')}
    result['loss'] = loss_sum / count if count else float('nan')
    return result


def round_metrics(process_metrics: Mapping[str, Any]) -> Dict[str, Any]:
    """TFF's nested round metrics as the runner's flat row.

    ``client_work/train/{loss, accuracy, num_examples}`` become ``loss``,
    ``accuracy``, ``num_examples``; the aggregator's scalar measurements keep
    their (``/``-joined) names.
    """
    train = process_metrics['client_work']['train']
    row: Dict[str, Any] = {
        'loss': float(train['loss']),
        'accuracy': float(train['accuracy']) if 'accuracy' in train else None,
        'num_examples': float(train['num_examples']),
    }

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, Mapping):
            for k, v in value.items():
                walk(f'{prefix}/{k}' if prefix else str(k), v)
        elif np.ndim(value) == 0:
            row[prefix] = float(value)

    walk('', process_metrics.get('aggregator', {}))
    return row
