"""TFF 0.88's ``docs/tutorials/custom_federated_algorithms_2.ipynb``, renamed.

MNIST (``tf.keras.datasets.mnist.load_data()``, a download) is replaced by
`synthetic.mnist_like` arrays of the same dtypes and shapes; 20 examples per
user in batches of 10 (tutorial: 1000 in batches of 100), 2 training steps and
2 rounds (tutorial: 5). Default context.

Left out / changed:
- ``!pip`` and the matplotlib cell (plotting).
- Cell 32: ``tf.keras.optimizers.SGD(learning_rate)`` with a tensor fails under
  Keras 3 (TFF 0.88 pins keras 3.12: the tutorial fails there too); here
  ``SGD(lambda: learning_rate)``.
- Nothing else: cell 44's ``accumulate_evaluation`` (a
  ``tff.tensorflow.computation``) calls ``batch_loss`` (another one), which
  runs inline, as TFF inlines the callee's graph.
"""

import collections

import numpy as np
import pytest
import tensorflow as tf

import simharness as federated_language
import simharness as tff
from tests.tff.tutorials.synthetic import mnist_like

NUM_EXAMPLES_PER_USER = 20
BATCH_SIZE = 10
LN10 = float(np.log(10.0))


def get_data_for_digit(source, digit):
    output_sequence = []
    all_samples = [i for i, d in enumerate(source[1]) if d == digit]
    for i in range(0, min(len(all_samples), NUM_EXAMPLES_PER_USER), BATCH_SIZE):
        batch_samples = all_samples[i:i + BATCH_SIZE]
        output_sequence.append({
            'x': np.array([source[0][i].flatten() / 255.0 for i in batch_samples], dtype=np.float32),
            'y': np.array([source[1][i] for i in batch_samples], dtype=np.int32),
        })
    return output_sequence


def test_custom_federated_algorithms_2():
    mnist_train, mnist_test = mnist_like(200), mnist_like(100, seed=1)
    assert [(x.dtype, x.shape) for x in mnist_train] == [(np.uint8, (200, 28, 28)), (np.uint8, (200,))]
    federated_train_data = [get_data_for_digit(mnist_train, d) for d in range(10)]
    federated_test_data = [get_data_for_digit(mnist_test, d) for d in range(10)]
    assert list(federated_train_data[5][-1]['y']) == [5] * BATCH_SIZE

    BATCH_SPEC = collections.OrderedDict(
        x=tf.TensorSpec(shape=[None, 784], dtype=tf.float32),
        y=tf.TensorSpec(shape=[None], dtype=tf.int32))
    BATCH_TYPE = tff.tensorflow.to_type(BATCH_SPEC)
    assert str(BATCH_TYPE) == '<x=float32[?,784],y=int32[?]>'
    MODEL_SPEC = collections.OrderedDict(
        weights=tf.TensorSpec(shape=[784, 10], dtype=tf.float32),
        bias=tf.TensorSpec(shape=[10], dtype=tf.float32))
    MODEL_TYPE = tff.tensorflow.to_type(MODEL_SPEC)
    assert str(MODEL_TYPE) == '<weights=float32[784,10],bias=float32[10]>'

    @tf.function
    def forward_pass(model, batch):
        predicted_y = tf.nn.softmax(tf.matmul(batch['x'], model['weights']) + model['bias'])
        return -tf.reduce_mean(tf.reduce_sum(tf.one_hot(batch['y'], 10) * tf.math.log(predicted_y), axis=[1]))

    @tff.tensorflow.computation(MODEL_TYPE, BATCH_TYPE)
    def batch_loss(model, batch):
        return forward_pass(model, batch)

    assert str(batch_loss.type_signature) == (
        '(<model=<weights=float32[784,10],bias=float32[10]>,batch=<x=float32[?,784],y=int32[?]>> -> float32)')
    initial_model = collections.OrderedDict(
        weights=np.zeros([784, 10], dtype=np.float32), bias=np.zeros([10], dtype=np.float32))
    sample_batch = federated_train_data[5][-1]
    assert batch_loss(initial_model, sample_batch) == pytest.approx(LN10, rel=1e-6)

    @tff.tensorflow.computation(MODEL_TYPE, BATCH_TYPE, np.float32)
    def batch_train(initial_model, batch, learning_rate):
        model_vars = collections.OrderedDict([
            (name, tf.Variable(name=name, initial_value=value)) for name, value in initial_model.items()])
        optimizer = tf.keras.optimizers.SGD(lambda: learning_rate)  # tutorial: SGD(learning_rate)

        @tf.function
        def _train_on_batch(model_vars, batch):
            with tf.GradientTape() as tape:
                loss = forward_pass(model_vars, batch)
            grads = tape.gradient(loss, model_vars)
            optimizer.apply_gradients(zip(tf.nest.flatten(grads), tf.nest.flatten(model_vars)))
            return model_vars

        return _train_on_batch(model_vars, batch)

    model = initial_model
    losses = []
    for _ in range(2):
        model = batch_train(model, sample_batch, 0.1)
        losses.append(batch_loss(model, sample_batch))
    assert LN10 > losses[0] > losses[1]
    # One SGD step by hand: the gradient of the mean cross-entropy at zero weights.
    x, y = sample_batch['x'], sample_batch['y']
    grad_w = x.T @ (np.full((len(y), 10), 0.1, np.float32) - np.eye(10, dtype=np.float32)[y]) / len(y)
    first = batch_train(initial_model, sample_batch, 0.1)
    np.testing.assert_allclose(first['weights'], -0.1 * grad_w, rtol=1e-4, atol=1e-6)

    LOCAL_DATA_TYPE = federated_language.SequenceType(BATCH_TYPE)

    @federated_language.federated_computation(MODEL_TYPE, np.float32, LOCAL_DATA_TYPE)
    def local_train(initial_model, learning_rate, all_batches):
        @federated_language.federated_computation((MODEL_TYPE, np.float32), BATCH_TYPE)
        def batch_fn(model_with_lr, batch):
            model, lr = model_with_lr
            return batch_train(model, batch, lr), lr

        trained_model, _ = federated_language.sequence_reduce(
            all_batches, (initial_model, learning_rate), batch_fn)
        return trained_model

    locally_trained_model = local_train(initial_model, 0.1, federated_train_data[5])

    @federated_language.federated_computation(MODEL_TYPE, LOCAL_DATA_TYPE)
    def local_eval(model, all_batches):
        @tff.tensorflow.computation((MODEL_TYPE, np.float32), BATCH_TYPE)
        def accumulate_evaluation(model_and_accumulator, batch):
            model, accumulator = model_and_accumulator
            return model, accumulator + batch_loss(model, batch)

        _, total_loss = federated_language.sequence_reduce(all_batches, (model, 0.0), accumulate_evaluation)
        return total_loss

    assert str(local_eval.type_signature) == (
        '(<model=<weights=float32[784,10],bias=float32[10]>,all_batches=<x=float32[?,784],y=int32[?]>*> -> float32)')
    assert local_eval(initial_model, federated_train_data[5]) == pytest.approx(2 * LN10, rel=1e-6)
    assert local_eval(locally_trained_model, federated_train_data[5]) < 2 * LN10

    SERVER_MODEL_TYPE = federated_language.FederatedType(MODEL_TYPE, federated_language.SERVER)
    CLIENT_DATA_TYPE = federated_language.FederatedType(LOCAL_DATA_TYPE, federated_language.CLIENTS)

    @federated_language.federated_computation(SERVER_MODEL_TYPE, CLIENT_DATA_TYPE)
    def federated_eval(model, data):
        return federated_language.federated_mean(
            federated_language.federated_map(local_eval, [federated_language.federated_broadcast(model), data]))

    assert federated_eval(initial_model, federated_train_data) == pytest.approx(2 * LN10, rel=1e-6)

    SERVER_FLOAT_TYPE = federated_language.FederatedType(np.float32, federated_language.SERVER)

    @federated_language.federated_computation(SERVER_MODEL_TYPE, SERVER_FLOAT_TYPE, CLIENT_DATA_TYPE)
    def federated_train(model, learning_rate, data):
        return federated_language.federated_mean(federated_language.federated_map(local_train, [
            federated_language.federated_broadcast(model),
            federated_language.federated_broadcast(learning_rate),
            data]))

    model = initial_model
    learning_rate = 0.1
    round_losses = []
    for _ in range(2):
        model = federated_train(model, learning_rate, federated_train_data)
        learning_rate = learning_rate * 0.9
        round_losses.append(federated_eval(model, federated_train_data))
    assert round_losses[-1] < 2 * LN10
    assert federated_eval(initial_model, federated_test_data) == pytest.approx(LN10, rel=1e-6)
    assert federated_eval(model, federated_test_data) < LN10


def test_tf_computation_calls_tf_computation():
    @tff.tensorflow.computation(np.float32)
    def inner(x):
        return x + 1.0

    @tff.tensorflow.computation(np.float32)
    def outer(x):
        return inner(x) * 2.0

    assert outer(1.0) == 4.0


def test_a_tf_computation_inlined_in_a_mapped_one_runs_on_every_stack(tff_stack):
    @tff.tensorflow.computation(np.float32)
    def inner(x):
        return x + 1.0

    @tff.tensorflow.computation(np.float32)
    def outer(x):
        return inner(x) * 2.0

    @federated_language.federated_computation(
        federated_language.FederatedType(np.float32, federated_language.CLIENTS))
    def total(xs):
        return federated_language.federated_sum(federated_language.federated_map(outer, xs))

    assert total([1.0, 2.0, 3.0]) == 18.0
