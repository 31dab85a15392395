"""TFF's learning/optimizers/scheduling_test.py, renamed. Left out: none (Keras 3's SGD is
the Keras optimizer refused)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import simharness as tff

O = tff.learning.optimizers


@tf.function
def _example_schedule_fn(round_num):
    if round_num < 2:
        return 0.1
    return 0.01


def test_scheduled_sgd_computes_correctly():
    scheduled = O.schedule_learning_rate(O.build_sgdm(1.0), _example_schedule_fn)
    weight, gradient = tf.constant(1.0), tf.constant(1.0)
    state = scheduled.initialize(tf.TensorSpec((), tf.float32))
    for expected in (0.9, 0.8, 0.79, 0.78):  # 0.1, 0.1, then 0.01
        state, weight = scheduled.next(state, weight, gradient)
        np.testing.assert_allclose(weight, expected, rtol=1e-6)


@pytest.mark.parametrize(
    'optimizer',
    [
        O.build_adagrad(1.0),
        O.build_adam(1.0),
        O.build_rmsprop(1.0),
        O.build_sgdm(1.0),
        O.build_sgdm(1.0, momentum=0.9),
        O.build_yogi(1.0),
    ],
    ids=['adagrad', 'adam', 'rmsprop', 'sgd', 'sgdm', 'yogi'],
)
def test_schedule_learning_rate_integrates_with(optimizer):
    scheduled = O.schedule_learning_rate(optimizer, _example_schedule_fn)
    assert isinstance(scheduled, O.Optimizer)
    state = scheduled.initialize(tf.TensorSpec([2], tf.float32))
    assert list(state) == ['round_num', 'optimizer']
    state, _ = scheduled.next(state, tf.ones([2]), tf.ones([2]))
    assert int(state['round_num']) == 1


def test_keras_optimizer_raises():
    with pytest.raises(TypeError):
        O.schedule_learning_rate(keras.optimizers.SGD(1.0), _example_schedule_fn)


def test_scheduling_scheduled_optimizer_raises():
    twice = O.schedule_learning_rate(
        O.schedule_learning_rate(O.build_sgdm(1.0), _example_schedule_fn), _example_schedule_fn
    )
    with pytest.raises(KeyError, match='must have learning rate'):
        twice.initialize(tf.TensorSpec((), tf.float32))


def test_scheduled_optimizer_has_no_hparams_as_tff():
    scheduled = O.schedule_learning_rate(O.build_sgdm(1.0), _example_schedule_fn)
    state = scheduled.initialize(tf.TensorSpec((), tf.float32))
    assert scheduled.get_hparams(state) == {}
    assert scheduled.set_hparams(state, {'learning_rate': 0.5}) is state
