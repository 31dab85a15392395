"""TFF's learning/optimizers/adamw_test.py, renamed. Left out: none."""

import keras
import pytest

import simharness as tff

from . import optimizer_test_utils as u

BUILD = tff.learning.optimizers.build_adamw


def test_state_structure():
    state = BUILD(0.01).initialize(u.SCALAR_SPEC)
    assert list(state) == [
        'learning_rate',
        'beta_1',
        'beta_2',
        'epsilon',
        'step',
        'accumulator',
        'preconditioner',
        'weight_decay',
    ]


@pytest.mark.parametrize('spec', list(u.SPECS.values()), ids=list(u.SPECS))
def test_executes_with(spec):
    u.check_executes_with(BUILD(0.01), spec)


@pytest.mark.parametrize('spec', list(u.SPECS.values()), ids=list(u.SPECS))
def test_skips_none_gradients(spec):
    u.check_skips_none_gradients(BUILD(0.01), spec, step_key='step')


@pytest.mark.parametrize('structure', list(u.EMPTY_TREES.values()), ids=list(u.EMPTY_TREES))
def test_behavior_on_empty_tree(structure):
    u.check_empty_tree(BUILD(0.01), structure, step_key='step')


def test_executes_with_indexed_slices():
    u.check_indexed_slices(
        BUILD(0.5, beta_1=0.0, beta_2=0.0),
        [[0.498, 0.498], [0.998, 0.998], [0.498, 0.498], [0.998, 0.998]],
    )


def test_convergence():
    u.check_convergence(BUILD(0.5))


def test_build_adamw():
    assert isinstance(BUILD(0.01), tff.learning.optimizers.Optimizer)


def test_match_keras():
    u.assert_optimizers_numerically_close(
        lambda: BUILD(learning_rate=0.01, beta_1=0.9, beta_2=0.999, weight_decay=0.004),
        lambda: keras.optimizers.AdamW(
            learning_rate=0.01, beta_1=0.9, beta_2=0.999, weight_decay=0.004
        ),
    )


@pytest.mark.parametrize(
    'args, regex',
    [
        ((-1.0, 0.9, 0.999, 1e-07, 0.001), 'learning_rate'),
        ((1.0, -0.9, 0.999, 1e-07, 0.001), 'beta_1'),
        ((1.0, 1.1, 0.999, 1e-07, 0.001), 'beta_1'),
        ((1.0, 0.9, -0.999, 1e-07, 0.001), 'beta_2'),
        ((1.0, 0.9, 1.1, 1e-07, 0.001), 'beta_2'),
        ((1.0, 0.9, 0.999, -1e-07, 0.001), 'epsilon'),
        ((1.0, 0.9, 0.999, 1e-07, -0.004), 'weight_decay'),
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
        BUILD(learning_rate=0.1, beta_1=0.92, beta_2=0.97, epsilon=0.01, weight_decay=0.002),
        spec,
        dict(learning_rate=0.1, beta_1=0.92, beta_2=0.97, epsilon=0.01, weight_decay=0.002),
        dict(learning_rate=0.5, beta_1=0.12, beta_2=0.56, epsilon=2.0, weight_decay=0.005),
    )


def test_lr_with_different_weight_dtypes():
    u.check_different_weight_dtypes(lambda lr: BUILD(lr))
