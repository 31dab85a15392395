"""TFF's learning/optimizers/adafactor_test.py, renamed. Left out: none (Keras 3's Adafactor
is the reference of the compare_to_keras cases)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import simharness as tff

from . import optimizer_test_utils as u

BUILD = tff.learning.optimizers.build_adafactor

_CASES = {
    'defaults': dict(
        learning_rate=0.1, beta_2_decay=-0.8, epsilon_1=1e-30, epsilon_2=1e-3, clip_threshold=1.0
    ),
    'non_default': dict(
        learning_rate=0.001, beta_2_decay=-0.6, epsilon_1=1e-10, epsilon_2=1e-2, clip_threshold=0.5
    ),
    'no_lr_decay': dict(
        learning_rate=0.001,
        beta_2_decay=-0.6,
        epsilon_1=1e-10,
        epsilon_2=1e-2,
        clip_threshold=0.5,
        relative_step=False,
    ),
    'use_decayed_lr': dict(
        learning_rate=10.0, beta_2_decay=0.8, epsilon_1=1e-30, epsilon_2=1e-3, clip_threshold=1.0
    ),
}


def test_skips_none_gradients():
    spec = [tf.TensorSpec([2, 3]), tf.TensorSpec([3])]
    optimizer = BUILD(0.01)
    weights = u.ones(spec)
    state = optimizer.initialize(spec)
    _, new_weights = optimizer.next(state, weights, [None, None])
    u.assert_all_close(weights, new_weights, 0, 0)


@pytest.mark.parametrize('structure', list(u.EMPTY_TREES.values()), ids=list(u.EMPTY_TREES))
def test_behavior_on_empty_tree(structure):
    optimizer = BUILD(0.01)
    state = optimizer.initialize(structure)
    _, new_weights = optimizer.next(state, structure, structure)
    assert new_weights == structure


def _f(x):
    return tf.reduce_sum(x**2.0)


def _check_shapes(state):
    assert len(state['moments']) == 1
    m = state['moments'][0]
    assert (list(m.r.shape), list(m.c.shape), list(m.v.shape)) == ([1], [3], [1, 3])


def test_initialization_and_step_in_eager_mode():
    optimizer = BUILD(learning_rate=0.003)
    weights = tf.constant([[1.0, 2.0, 3.0]])
    state = optimizer.initialize(tf.TensorSpec.from_tensor(weights))
    _check_shapes(state)
    for expected in [13.92, 13.84, 13.76, 13.70, 13.61]:
        with tf.GradientTape() as tape:
            tape.watch(weights)
            y = _f(weights)
        state, weights = optimizer.next(state, weights, tape.gradient(y, weights))
        assert abs(float(_f(weights)) - expected) <= 0.01


def test_initialization_and_step_in_traced_computation():
    optimizer = BUILD(learning_rate=0.003)
    weights = np.array([[1.0, 2.0, 3.0]], np.float32)

    @tff.tf_computation
    def init():
        return optimizer.initialize(tf.TensorSpec([1, 3], tf.float32))

    state = init()
    _check_shapes(state)

    @tff.tf_computation(init.type_signature.result, tff.TensorType(np.float32, [1, 3]))
    def step(state, weights):
        with tf.GradientTape() as tape:
            tape.watch(weights)
            y = _f(weights)
        return optimizer.next(state, weights, tape.gradient(y, weights))

    for expected in [13.92, 13.84, 13.76, 13.70, 13.61]:
        state, weights = step(state, weights)
        assert abs(float(_f(weights)) - expected) <= 0.01


@pytest.mark.parametrize('kwargs', list(_CASES.values()), ids=list(_CASES))
@pytest.mark.parametrize('shape', [[1], [10, 20]], ids=['single_rank', 'double_rank'])
def test_compare_to_keras(kwargs, shape):
    optimizer = BUILD(**kwargs)
    state = optimizer.initialize(tf.TensorSpec(shape, tf.float32))
    m = state['moments'][0]
    if len(shape) < 2:
        assert (list(m.r.shape), list(m.c.shape)) == ([0], [0])
    else:
        assert (list(m.r.shape), list(m.c.shape)) == (shape[:1], shape[1:])
    weights = tf.zeros(shape)
    keras_optimizer = keras.optimizers.Adafactor(**kwargs)
    variable = keras.Variable(weights)
    for i in range(10):
        gradient = tf.ones_like(weights) * -0.1 * (i if len(shape) > 1 else 1)
        state, weights = optimizer.next(state, weights, gradient)
        keras_optimizer.apply_gradients([(gradient, variable)])
        np.testing.assert_allclose(weights, variable.numpy(), rtol=1e-6, atol=1e-6)


def test_set_hparams_replaces_the_hyper_parameters():
    optimizer = BUILD(0.1)
    state = optimizer.initialize(tf.TensorSpec([2]))
    new = optimizer.set_hparams(state, {'learning_rate': 0.5})
    assert optimizer.get_hparams(new)['learning_rate'] == 0.5
    assert set(new) == {'steps', 'moments', 'hparams'}
