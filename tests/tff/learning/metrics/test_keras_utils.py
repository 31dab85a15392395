"""TFF's learning/metrics/keras_utils_test.py (create_functional_metric_fns), renamed.

Left out: the checks that the traced functions hold no variable ops (ours are Keras 3
stateless calls: they make no variables by construction) and the graph-mode variant of
the binary-metric case (covered by test_functional_metrics_in_a_computation).
"""

import collections

import keras
import numpy as np
import pytest
import tensorflow as tf

import simharness as tff

BINARY_METRIC_NAMES = (
    'Accuracy',
    'BinaryAccuracy',
    'BinaryCrossentropy',
    'CategoricalAccuracy',
    'CategoricalCrossentropy',
    'CategoricalHinge',
    'CosineSimilarity',
    'FalseNegatives',
    'FalsePositives',
    'KLDivergence',
    'MeanAbsoluteError',
    'MeanSquaredError',
    'AUC',
)

_BatchOutput = collections.namedtuple('BatchOutput', ['predictions'], defaults=[None])


def _values(metric):
    return [np.asarray(v.numpy()) for v in metric.variables]


def _assert_equal(a, b):
    tf.nest.map_structure(
        lambda x, y: np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-6, atol=1e-7),
        a,
        b,
    )


def _check_against_keras(metrics_constructor, metrics_of):
    metrics = metrics_constructor()
    initialize, update, finalize = tff.learning.metrics.create_functional_metric_fns(
        metrics_constructor
    )
    state = initialize()
    _assert_equal(metrics_of(metrics, _values), state)
    for predictions, labels in (([0.0, 1.0], [1.0, 1.0]), ([0.0, 1.0, 0.0], [1.0, 1.0, 0.0])):
        tf.nest.map_structure(lambda m: m.update_state(y_pred=predictions, y_true=labels), metrics)
        state = update(state, batch_output=_BatchOutput(predictions=predictions), labels=labels)
        _assert_equal(metrics_of(metrics, _values), state)
        _assert_equal(metrics_of(metrics, lambda m: m.result()), finalize(state))


@pytest.mark.parametrize('name', BINARY_METRIC_NAMES)
def test_binary_metrics_eager(name):
    _check_against_keras(
        getattr(keras.metrics, name), lambda m, f: tuple(f(m)) if f is _values else f(m)
    )


def test_non_default_metric():
    _check_against_keras(
        lambda: keras.metrics.Precision(thresholds=[0.25, 0.5, 0.75]),
        lambda m, f: tuple(f(m)) if f is _values else f(m),
    )


def test_multiple_metrics_constructor():
    def metrics_constructor():
        return collections.OrderedDict(
            precisions=keras.metrics.Precision(thresholds=[0.25, 0.5, 0.75]),
            accuracy=keras.metrics.Accuracy(),
        )

    _check_against_keras(
        metrics_constructor,
        lambda ms, f: collections.OrderedDict(
            (k, tuple(f(m)) if f is _values else f(m)) for k, m in ms.items()
        ),
    )


@pytest.mark.parametrize(
    'metric_constructor', [keras.metrics.Sum, keras.metrics.Mean], ids=['sum', 'mean']
)
def test_unary_metrics(metric_constructor):
    initialize, update, _ = tff.learning.metrics.create_functional_metric_fns(metric_constructor)
    with pytest.raises(TypeError, match='got an unexpected keyword argument'):
        update(initialize(), batch_output=_BatchOutput(predictions=[0.0, 1.0]), labels=[1.0, 1.0])


def test_composite_metrics_fn():
    def metrics_constructor():
        return collections.OrderedDict(
            precision_at_5=keras.metrics.Precision(thresholds=[0.5]),
            num_batches=tff.learning.metrics.NumBatchesCounter(dtype=tf.int64),
            accuracy=keras.metrics.Accuracy(),
            num_examples=tff.learning.metrics.NumExamplesCounter(dtype=tf.int64),
        )

    initialize, update, finalize = tff.learning.metrics.create_functional_metric_fns(
        metrics_constructor
    )
    metrics = metrics_constructor()
    state = initialize()
    predictions, labels = np.asarray([0.25, 0.5, 1.0]), np.asarray([0.0, 0.0, 1.0])
    state = update(state, labels=labels, batch_output=_BatchOutput(predictions=predictions))
    for m in metrics.values():
        m.update_state(y_true=labels, y_pred=predictions)
    _assert_equal(
        state, collections.OrderedDict((k, tuple(_values(m))) for k, m in metrics.items())
    )
    _assert_equal(
        finalize(state), collections.OrderedDict((k, m.result()) for k, m in metrics.items())
    )


def test_ordereddict_of_constructors_and_errors():
    initialize, _, finalize = tff.learning.metrics.create_functional_metric_fns(
        collections.OrderedDict(acc=keras.metrics.Accuracy)
    )
    assert list(finalize(initialize())) == ['acc']
    with pytest.raises(TypeError, match='callable or `collections.OrderedDict`'):
        tff.learning.metrics.create_functional_metric_fns(0)
    with pytest.raises(TypeError, match='non-keras.metrics.Metric'):
        tff.learning.metrics.create_functional_metric_fns(lambda: collections.OrderedDict(a=0))
    with pytest.raises(TypeError, match='keyed by `str`'):
        tff.learning.metrics.create_functional_metric_fns(
            lambda: collections.OrderedDict([(1, keras.metrics.Accuracy())])
        )


def test_functional_metrics_in_a_computation(tff_stack):
    initialize, update, finalize = tff.learning.metrics.create_functional_metric_fns(
        collections.OrderedDict(acc=keras.metrics.BinaryAccuracy, auc=keras.metrics.AUC)
    )
    state_type = tff.tf_computation(initialize).type_signature.result
    f32 = tff.TensorType(np.float32, [None])

    @tff.tf_computation(f32)
    def init_comp_at(unused):
        del unused
        return initialize()

    @tff.tf_computation(state_type, f32, f32)
    def update_comp(state, labels, predictions):
        return update(state, labels, _BatchOutput(predictions=predictions))

    @tff.federated_computation(tff.type_at_clients(f32), tff.type_at_clients(f32))
    def run(labels, predictions):
        states = tff.federated_map(
            update_comp, (tff.federated_map(init_comp_at, labels), labels, predictions)
        )
        return tff.learning.metrics.sum_then_finalize(finalize)(states)

    labels = [np.array([1.0, 0.0], np.float32), np.array([1.0, 1.0, 0.0], np.float32)]
    preds = [np.array([0.9, 0.2], np.float32), np.array([0.1, 0.8, 0.6], np.float32)]
    got = run(labels, preds)
    acc = keras.metrics.BinaryAccuracy()
    auc = keras.metrics.AUC()
    for y, p in zip(labels, preds):
        acc.update_state(y, p)
        auc.update_state(y, p)
    np.testing.assert_allclose(got['acc'], acc.result().numpy(), rtol=1e-6)
    np.testing.assert_allclose(got['auc'], auc.result().numpy(), rtol=1e-6)
