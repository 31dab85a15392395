"""TFF's learning/optimizers/keras_optimizer_test.py, renamed (Keras 3 optimizers).
Left out: test_disjoint_init_and_next_false_keras_state_updated (reads the private
variables of a Keras 2 optimizer back through ``set_weights``, which Keras 3 lacks)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import simharness as tff
from simharness.learning.optimizers import keras_optimizer

from . import optimizer_test_utils as u


@pytest.mark.parametrize('momentum', [0.0, 0.5])
def test_disjoint_init_and_next_true(momentum):
    init_w, fn, grad_fn = u.test_quadratic_problem()
    weights = init_w().numpy()
    assert fn(weights) > 5.0
    optimizer_fn = lambda: keras.optimizers.SGD(0.1, momentum=momentum)  # noqa: E731

    @tff.tf_computation()
    def initialize_fn():
        variables = tf.Variable(tf.zeros([5, 1]))
        optimizer = keras_optimizer.KerasOptimizer(
            optimizer_fn, variables, disjoint_init_and_next=True
        )
        return optimizer.initialize(tf.TensorSpec(variables.shape, variables.dtype))

    @tff.tf_computation(initialize_fn.type_signature.result, tff.TensorType(np.float32, [5, 1]))
    def next_fn(state, initial_weights):
        variables = tf.Variable(initial_weights)
        optimizer = keras_optimizer.KerasOptimizer(
            optimizer_fn, variables, disjoint_init_and_next=True
        )
        new_state, _ = optimizer.next(list(state), variables, grad_fn(variables))
        return new_state, tf.identity(variables)

    state = initialize_fn()
    for _ in range(100):
        state, weights = next_fn(state, weights)
    assert fn(weights) < 0.005
    assert int(state[0]) == 100  # the first variable of a Keras optimizer counts its steps


@pytest.mark.parametrize('momentum', [0.0, 0.5])
def test_disjoint_init_and_next_false(momentum):
    init_w, fn, grad_fn = u.test_quadratic_problem()
    weights = init_w().numpy()
    optimizer_fn = lambda: keras.optimizers.SGD(0.1, momentum=momentum)  # noqa: E731

    @tff.tf_computation(tff.TensorType(np.float32, [5, 1]))
    def local_training(initial_weights):
        variables = tf.Variable(initial_weights)
        optimizer = keras_optimizer.KerasOptimizer(
            optimizer_fn, variables, disjoint_init_and_next=False
        )
        state = optimizer.initialize(tf.TensorSpec(variables.shape, variables.dtype))
        for _ in range(100):
            state, _ = optimizer.next(state, variables, grad_fn(variables))
        return tf.identity(variables)

    assert fn(local_training(weights)) < 0.005


def test_build_tff_optimizer_keras():
    variables = [tf.Variable(tf.zeros([2]))]
    opt = keras_optimizer.build_or_verify_tff_optimizer(
        lambda: keras.optimizers.SGD(0.1), variables, True
    )
    assert isinstance(opt, tff.learning.optimizers.Optimizer)


def test_build_tff_optimizer_tff():
    opt = tff.learning.optimizers.build_sgdm(0.1)
    assert keras_optimizer.build_or_verify_tff_optimizer(opt) is opt


def test_build_tff_optimizer_raise():
    with pytest.raises(TypeError, match='`optimizer_fn` must be a callable'):
        keras_optimizer.build_or_verify_tff_optimizer(None, None, True)
