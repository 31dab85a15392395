"""TFF's learning/optimizers/adagrad_test.py, renamed. Left out: none."""

import keras
import pytest
import tensorflow as tf

import simharness as tff

from . import optimizer_test_utils as u

BUILD = tff.learning.optimizers.build_adagrad


def test_state_structure():
    state = BUILD(0.01).initialize(u.SCALAR_SPEC)
    assert list(state) == ['learning_rate', 'epsilon', 'preconditioner']


def test_math_no_momentum():
    optimizer = BUILD(learning_rate=0.01, initial_preconditioner_value=0.0, epsilon=0.0)
    got = u.history(optimizer, u.SCALAR_SPEC, tf.constant([1.0]), tf.constant([2.0]))
    u.assert_history(got, [[1.0], [0.99], [0.9829289], [0.9771554], [0.9721554]])


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
    u.check_indexed_slices(
        BUILD(0.5, initial_preconditioner_value=0.0),
        [[0.5, 0.5], [1.0, 1.0], [0.5, 0.5], [1.0, 1.0]],
    )


def test_convergence():
    u.check_convergence(BUILD(0.5))


def test_build_adagrad():
    assert isinstance(BUILD(0.01), tff.learning.optimizers.Optimizer)


def test_match_keras():
    u.assert_optimizers_numerically_close(
        lambda: BUILD(0.01), lambda: keras.optimizers.Adagrad(0.01)
    )


@pytest.mark.parametrize(
    'args, regex',
    [
        ((-1.0, 0.1, 1e-07), 'learning_rate'),
        ((1.0, -0.1, 1e-07), 'initial_preconditioner_value'),
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
        BUILD(**dict(learning_rate=0.1, epsilon=0.01, initial_preconditioner_value=0.2)),
        spec,
        dict(learning_rate=0.1, epsilon=0.01),
        dict(learning_rate=0.5, epsilon=2.0),
    )


def test_lr_with_different_weight_dtypes():
    u.check_different_weight_dtypes(lambda lr: BUILD(lr))
