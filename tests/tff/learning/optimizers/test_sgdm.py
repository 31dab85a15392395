"""TFF's learning/optimizers/sgdm_test.py, renamed. Left out: none (Keras 3's SGD is the
reference of test_match_keras)."""

import collections

import keras
import pytest
import tensorflow as tf

import simharness as tff
from simharness.learning.optimizers import sgdm

from . import optimizer_test_utils as u


def test_state_structure():
    state = tff.learning.optimizers.build_sgdm(0.01).initialize(u.SCALAR_SPEC)
    assert len(state) == 1 and tff.learning.optimizers.LEARNING_RATE_KEY in state


@pytest.mark.parametrize('momentum', [None, 0.0])
def test_get_hparams_momentum(momentum):
    optimizer = tff.learning.optimizers.build_sgdm(0.01, momentum=momentum)
    state = optimizer.initialize(u.SCALAR_SPEC)
    assert sgdm._MOMENTUM_KEY not in state
    assert len(optimizer.get_hparams(state)) == 1


def test_state_structure_momentum():
    state = tff.learning.optimizers.build_sgdm(0.01, momentum=0.9).initialize(u.SCALAR_SPEC)
    assert list(state) == ['learning_rate', 'momentum', 'accumulator']


@pytest.mark.parametrize(
    'kwargs, expected',
    [
        ({}, [[1.0], [0.98], [0.96], [0.94], [0.92]]),
        ({'momentum': 0.5}, [[1.0], [0.98], [0.95], [0.915], [0.8775]]),
        ({'momentum': 0.5, 'nesterov': True}, [[1.0], [0.97], [0.935], [0.8975], [0.85875]]),
    ],
)
def test_math(kwargs, expected):
    optimizer = tff.learning.optimizers.build_sgdm(0.01, **kwargs)
    got = u.history(optimizer, u.SCALAR_SPEC, tf.constant([1.0]), tf.constant([2.0]))
    u.assert_history(got, expected)


@pytest.mark.parametrize('momentum', [None, 0.5])
@pytest.mark.parametrize('spec', list(u.SPECS.values()), ids=list(u.SPECS))
def test_executes_with(spec, momentum):
    u.check_executes_with(tff.learning.optimizers.build_sgdm(0.01, momentum=momentum), spec)


@pytest.mark.parametrize('spec', list(u.SPECS.values()), ids=list(u.SPECS))
def test_skips_none_gradients(spec):
    u.check_skips_none_gradients(tff.learning.optimizers.build_sgdm(0.01, momentum=0.5), spec)


@pytest.mark.parametrize('structure', list(u.EMPTY_TREES.values()), ids=list(u.EMPTY_TREES))
def test_behavior_on_empty_tree(structure):
    u.check_empty_tree(tff.learning.optimizers.build_sgdm(0.01), structure)


def test_executes_with_indexed_slices():
    u.check_indexed_slices(
        tff.learning.optimizers.build_sgdm(0.5), [[0.5, 0.5], [1.0, 1.0], [0.5, 0.5], [1.0, 1.0]]
    )


@pytest.mark.parametrize('momentum', [None, 0.5])
def test_convergence(momentum):
    u.check_convergence(tff.learning.optimizers.build_sgdm(0.1, momentum=momentum))


@pytest.mark.parametrize(
    'lr, momentum, nesterov', [(0.1, None, False), (0.01, 0.9, False), (0.01, 0.9, True)]
)
def test_build_sgdm(lr, momentum, nesterov):
    optimizer = tff.learning.optimizers.build_sgdm(lr, momentum, nesterov)
    assert isinstance(optimizer, tff.learning.optimizers.Optimizer)
    assert (optimizer._lr, optimizer._momentum, optimizer._nesterov) == (lr, momentum, nesterov)


@pytest.mark.parametrize(
    'lr, momentum, nesterov', [(0.1, 0.0, False), (0.01, 0.9, False), (0.01, 0.9, True)]
)
def test_match_keras(lr, momentum, nesterov):
    u.assert_optimizers_numerically_close(
        lambda: tff.learning.optimizers.build_sgdm(lr, momentum, nesterov=nesterov),
        lambda: keras.optimizers.SGD(lr, momentum, nesterov=nesterov),
    )


@pytest.mark.parametrize(
    'lr, momentum, nesterov, regex',
    [
        (-1.0, 0.9, False, 'learning_rate'),
        (1.0, -0.9, False, 'momentum'),
        (1.0, 1.1, False, 'momentum'),
        (0.1, None, True, 'Nesterov'),
    ],
)
def test_invalid_args_raises(lr, momentum, nesterov, regex):
    with pytest.raises(ValueError, match=regex):
        tff.learning.optimizers.build_sgdm(lr, momentum, nesterov)


def test_weights_gradients_mismatch_raises():
    optimizer = tff.learning.optimizers.build_sgdm(0.1)
    with pytest.raises(ValueError):
        optimizer.next(optimizer.initialize(u.SCALAR_SPEC), tf.zeros([1]), tf.zeros([2]))


def test_initialize_next_weights_mismatch_raises():
    optimizer = tff.learning.optimizers.build_sgdm(0.1, momentum=0.9)
    with pytest.raises(ValueError):
        optimizer.next(optimizer.initialize(u.SCALAR_SPEC), tf.zeros([2]), tf.zeros([2]))


@pytest.mark.parametrize('spec', list(u.SPECS.values()), ids=list(u.SPECS))
@pytest.mark.parametrize(
    'momentum, expected, new',
    [
        (None, {'learning_rate': 0.1}, {'learning_rate': 0.5}),
        (0.0, {'learning_rate': 0.1}, {'learning_rate': 0.5}),
        (0.9, {'learning_rate': 0.1, 'momentum': 0.9}, {'learning_rate': 0.5, 'momentum': 0.8}),
    ],
)
def test_get_set_hparams(spec, momentum, expected, new):
    optimizer = tff.learning.optimizers.build_sgdm(learning_rate=0.1, momentum=momentum)
    u.check_hparams(optimizer, spec, expected, new)


def test_set_hparams_unknown_key_raises():
    optimizer = tff.learning.optimizers.build_sgdm(0.1)
    with pytest.raises(KeyError, match='momentum'):
        optimizer.set_hparams(
            optimizer.initialize(u.SCALAR_SPEC), collections.OrderedDict(momentum=0.9)
        )


def test_lr_with_different_weight_dtypes():
    u.check_different_weight_dtypes(lambda lr: tff.learning.optimizers.build_sgdm(lr))
