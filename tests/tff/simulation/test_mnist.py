"""Tests of `simharness.simulation.models.mnist` (TFF has no test module for it; the examples'
tests use it). Checks the models' shapes and sizes and the EMNIST conversion."""

import collections

import numpy as np
import tensorflow as tf

import simharness as tff

mnist = tff.simulation.models.mnist


def test_keras_dataset_from_emnist():
    ds = mnist.keras_dataset_from_emnist(
        tf.data.Dataset.from_tensor_slices(
            collections.OrderedDict(label=[[5]], pixels=[np.full((28, 28), 0.5, np.float32)])
        )
    )
    (x,) = list(ds.as_numpy_iterator())
    assert list(x) == ['x', 'y'] and x['x'].shape == (784,) and x['y'].tolist() == [5]


def test_simple_keras_model():
    model = mnist.create_simple_keras_model(learning_rate=0.5)
    assert model.count_params() == 784 * 10 + 10
    assert all(not np.any(w) for w in model.get_weights())
    x = np.ones((3, 784), np.float32)
    np.testing.assert_allclose(model(x).numpy(), np.full((3, 10), 0.1), rtol=1e-6)


def test_keras_model_is_deterministic():
    a, b = mnist.create_keras_model(), mnist.create_keras_model(compile_model=True)
    assert a.count_params() == b.count_params() == 3274634
    for wa, wb in zip(a.get_weights(), b.get_weights()):
        np.testing.assert_array_equal(wa, wb)
    assert a(np.zeros((2, 784), np.float32)).shape == (2, 10)
