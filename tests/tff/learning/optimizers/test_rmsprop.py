"""TFF's learning/optimizers/rmsprop_test.py, renamed.
Left out: none (TFF has no mixed-dtype case for RMSprop: it does not cast)."""

import keras
import pytest
import tensorflow as tf

import simharness as tff

from . import optimizer_test_utils as u

BUILD = tff.learning.optimizers.build_rmsprop


def test_state_structure():
    state = BUILD(0.01).initialize(u.SCALAR_SPEC)
    assert list(state) == ['learning_rate', 'decay', 'epsilon', 'preconditioner']


def test_math():
    optimizer = BUILD(learning_rate=0.01, decay=0.5, epsilon=0.0)
    got = u.history(optimizer, u.SCALAR_SPEC, tf.constant([1.0]), tf.constant([2.0]))
    u.assert_history(got, [[1.0], [0.98585784], [0.97431080], [0.96362036], [0.95329240]])


@pytest.mark.parametrize('spec', list(u.SPECS.values()), ids=list(u.SPECS))
def test_executes_with(spec):
    u.check_executes_with(BUILD(0.01), spec)


@pytest.mark.parametrize('spec', list(u.SPECS.values()), ids=list(u.SPECS))
def test_skips_none_gradients(spec):
    u.check_skips_none_gradients(BUILD(0.01), spec)


@pytest.mark.parametrize('structure', list(u.EMPTY_TREES.values()), ids=list(u.EMPTY_TREES))
def test_behavior_on_empty_tree(structure):
    u.check_empty_tree(BUILD(0.01), structure)


def test_executes_with_indexed_slices():
    u.check_indexed_slices(BUILD(0.5, decay=0.0), [[0.5, 0.5], [1.0, 1.0], [0.5, 0.5], [1.0, 1.0]])


def test_convergence():
    u.check_convergence(BUILD(0.02), steps=200)


def test_build_rmsprop():
    assert isinstance(BUILD(0.01), tff.learning.optimizers.Optimizer)


def test_match_keras():
    u.assert_optimizers_numerically_close(
        lambda: BUILD(0.01, decay=0.9), lambda: keras.optimizers.RMSprop(0.01, rho=0.9)
    )


@pytest.mark.parametrize(
    'args, regex',
    [
        ((-1.0, 0.9, 1e-07), 'learning_rate'),
        ((1.0, -0.9, 1e-07), 'decay'),
        ((1.0, 1.1, 1e-07), 'decay'),
        ((1.0, 0.1, -1e-07), 'epsilon'),
    ],
)
def test_invalid_args_raises(args, regex):
    with pytest.raises(ValueError, match=regex):
        BUILD(*args)


def test_weights_gradients_and_state_mismatch_raise():
    u.check_mismatch_raises(BUILD(0.1))


@pytest.mark.parametrize('spec', list(u.SPECS.values()), ids=list(u.SPECS))
def test_get_set_hparams(spec):
    u.check_hparams(
        BUILD(**dict(learning_rate=0.1, decay=0.9, epsilon=0.01)),
        spec,
        dict(learning_rate=0.1, decay=0.9, epsilon=0.01),
        dict(learning_rate=0.5, decay=0.51, epsilon=2.0),
    )
