"""Keras 2 models (``tf_keras``: TFF 0.87's ``tf.keras``, and TensorFlow's under
``TF_USE_LEGACY_KERAS=1``) in ``tff.learning``: from_keras_model, FedAvg, federated
evaluation, on the thread and process stacks."""

from __future__ import annotations

import collections

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

import simharness as tff
from simharness.stacks import process_executor_factory

pytestmark = pytest.mark.process

OD = collections.OrderedDict


def _clients():
    rng = np.random.default_rng(5)
    out = []
    for n in (7, 12, 9):
        x = rng.normal(size=(n, 5)).astype(np.float32)
        y = (x.sum(axis=1, keepdims=True) > 0).astype(np.int32)
        out.append(tf.data.Dataset.from_tensor_slices((x, y)).batch(4))
    return out


def _weights():
    rng = np.random.default_rng(11)
    return [rng.normal(size=s).astype(np.float32) * 0.5 for s in [(5, 3), (3,), (3, 2), (2,)]]


def _model_fn(keras_module, spec):
    def model_fn():
        w = [keras_module.initializers.Constant(v) for v in _weights()]
        model = keras_module.Sequential(
            [
                keras_module.Input(shape=(5,)),
                keras_module.layers.Dense(
                    3, activation='relu', kernel_initializer=w[0], bias_initializer=w[1]
                ),
                keras_module.layers.Dense(2, kernel_initializer=w[2], bias_initializer=w[3]),
            ]
        )
        return tff.learning.models.from_keras_model(
            model,
            input_spec=spec,
            loss=keras_module.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=[keras_module.metrics.SparseCategoricalAccuracy()],
        )

    return model_fn


def _run(keras_module, stack=None):
    clients = _clients()
    model_fn = _model_fn(keras_module, clients[0].element_spec)
    process = tff.learning.algorithms.build_weighted_fed_avg(
        model_fn,
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1, momentum=0.5),
        server_optimizer_fn=tff.learning.optimizers.build_adam(0.05),
    )
    evaluation = tff.learning.algorithms.build_fed_eval(model_fn)

    def rounds():
        state = process.initialize()
        losses = []
        for _ in range(3):
            out = process.next(state, clients)
            state = out.state
            train = out.metrics['client_work']['train']
            losses.append((float(train['loss']), float(train['sparse_categorical_accuracy'])))
        weights = process.get_model_weights(state)
        ev = evaluation.set_model_weights(evaluation.initialize(), weights)
        metrics = evaluation.next(ev, clients).metrics['client_work']['eval']
        return losses, [np.asarray(w) for w in weights.trainable], metrics

    if stack is None:
        return rounds()
    with stack, tff.execution_context(stack):
        return rounds()


def test_a_tf_keras_model_trains_as_keras_3_s_and_gives_one_answer_on_every_stack():
    losses, weights, metrics = _run(tf_keras)
    assert losses[-1][0] < losses[0][0]
    assert int(metrics['current_round_metrics']['num_examples']) == 28
    # Keras 3's layers compute the same, to the last bits
    k3_losses, k3_weights, _ = _run(tf.keras)
    np.testing.assert_allclose(losses, k3_losses, rtol=1e-5)
    for a, b in zip(weights, k3_weights):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    # the same bits on the process stack (the graphs cross; tf_keras stays in the driver)
    p_losses, p_weights, p_metrics = _run(
        tf_keras, process_executor_factory(num_workers=2, clients_per_worker=2)
    )
    assert p_losses == losses
    for a, b in zip(weights, p_weights):
        np.testing.assert_array_equal(a, b)
    assert float(p_metrics['current_round_metrics']['loss']) == float(
        metrics['current_round_metrics']['loss']
    )


def test_a_tf_keras_model_in_a_bad_argument_is_named():
    spec = _clients()[0].element_spec
    model = tf_keras.Sequential([tf_keras.Input(shape=(5,)), tf_keras.layers.Dense(2)])
    with pytest.raises(TypeError, match='loss must be a keras.losses.Loss'):
        tff.learning.models.from_keras_model(model, input_spec=spec, loss='mse')
    with pytest.raises(ValueError, match='tf_keras models have not'):
        tff.learning.models.functional_model_from_keras(
            model, tf_keras.losses.MeanSquaredError(), input_spec=spec
        )


def test_set_weights_in_a_model_fn_leaves_tff_s_initial_weights():
    """A tf_keras model whose ``model_fn`` calls ``set_weights``: TFF 0.87 (TF 2.14, whose
    ``tf.keras`` is Keras 2) runs it, and its initial weights are the initializers' (the
    assignments run in Keras' own session while tracing, never in TFF's graphs). The
    losses of this program were recorded under TFF 0.87 (2026-12-01, /tmp script)."""
    rng = np.random.default_rng(0)
    init = [np.full((4, 3), 0.1, np.float32), np.zeros(3, np.float32)]
    data = [
        tf.data.Dataset.from_tensor_slices(
            OD(
                x=rng.normal(size=(8, 4)).astype(np.float32),
                y=rng.integers(0, 3, 8).astype(np.int32),
            )
        ).batch(4)
        for _ in range(3)
    ]

    def model_fn():
        model = tf_keras.Sequential(
            [
                tf_keras.layers.InputLayer(input_shape=(4,)),
                tf_keras.layers.Dense(3, kernel_initializer='zeros'),
            ]
        )
        model.set_weights(init)
        return tff.learning.models.from_keras_model(
            model,
            loss=tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            input_spec=data[0].element_spec,
        )

    process = tff.learning.algorithms.build_weighted_fed_avg(
        model_fn, client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1)
    )
    state = process.initialize()
    np.testing.assert_array_equal(process.get_model_weights(state).trainable[0], 0.0)
    losses = []
    for _ in range(2):
        out = process.next(state, data)
        state = out.state
        losses.append(float(out.metrics['client_work']['train']['loss']))
    np.testing.assert_allclose(losses, [1.1137058, 1.1055993], rtol=0, atol=5e-8)
