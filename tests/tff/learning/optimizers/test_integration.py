"""TFF's learning/optimizers/integration_test.py, renamed: every optimizer gives the same
states and weights eagerly, in a `tf_computation` and in a federated computation (on the
thread and process stacks). Left out: none."""

import numpy as np
import pytest
import tensorflow as tf

import simharness as tff

from . import optimizer_test_utils as u

O = tff.learning.optimizers


@tf.function
def _example_schedule_fn(round_num):
    if round_num < 2:
        return 0.1
    return 0.01


def _optimizers():
    return {
        'adagrad': O.build_adagrad(0.1),
        'adam': O.build_adam(0.1),
        'adamw': O.build_adamw(0.1),
        'rmsprop': O.build_rmsprop(0.1),
        'scheduled_sgd': O.schedule_learning_rate(O.build_sgdm(0.1), _example_schedule_fn),
        'sgd': O.build_sgdm(0.1),
        'sgdm': O.build_sgdm(0.1, 0.9),
        'yogi': O.build_yogi(0.1),
    }


def _eager(optimizer, spec):
    weights, gradients = u.ones(spec), u.ones(spec)
    state = optimizer.initialize(spec)
    states, history = [state], [weights]
    for _ in range(3):
        state, weights = optimizer.next(state, weights, gradients)
        states.append(state)
        history.append(weights)
    return states, history


def _federated(optimizer, spec):
    weights = tf.nest.map_structure(lambda s: np.ones(s.shape, s.dtype.as_numpy_dtype), spec)
    init_tf = tff.tf_computation(lambda: optimizer.initialize(spec))

    @tff.federated_computation()
    def init_fn():
        return tff.federated_eval(init_tf, tff.SERVER)

    next_tf = tff.tf_computation(
        optimizer.next, init_tf.type_signature.result, tff.to_type(spec), tff.to_type(spec)
    )

    @tff.federated_computation(
        init_fn.type_signature.result,
        tff.type_at_server(tff.to_type(spec)),
        tff.type_at_server(tff.to_type(spec)),
    )
    def next_fn(state, weights, gradients):
        return tff.federated_map(next_tf, tff.federated_zip((state, weights, gradients)))

    gradients = tf.nest.map_structure(np.copy, weights)
    state = init_fn()
    states, history = [state], [weights]
    for _ in range(3):
        state, weights = next_fn(state, weights, gradients)
        states.append(state)
        history.append(weights)
    return states, history


def _leaves(x):
    return [
        np.asarray(v)
        for v in tf.nest.flatten(
            tff.structure.to_container_recursive(x) if isinstance(x, tff.Struct) else x
        )
    ]


@pytest.mark.parametrize('spec', [u.SCALAR_SPEC, u.NESTED_SPEC], ids=['scalar', 'nested'])
@pytest.mark.parametrize('name', sorted(_optimizers()))
def test_integration_produces_identical_results(tff_stack, name, spec):
    eager_states, eager_weights = _eager(_optimizers()[name], spec)
    fed_states, fed_weights = _federated(_optimizers()[name], spec)
    for a, b in zip(eager_weights, fed_weights):
        for x, y in zip(_leaves(a), _leaves(b)):
            np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-5)
    for a, b in zip(eager_states, fed_states):
        xs, ys = _leaves(a), _leaves(b)
        assert len(xs) == len(ys)
        for x, y in zip(xs, ys):
            np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-5)
