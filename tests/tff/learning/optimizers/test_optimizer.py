"""TFF's learning/optimizers/optimizer_test.py and nest_utils_test.py (map_at_leaves),
renamed. Left out: none."""

import collections

import numpy as np
import pytest
import tensorflow as tf

import simharness as tff
from simharness.learning.optimizers import optimizer


class _TestOptimizer(tff.learning.optimizers.Optimizer):
    def initialize(self, specs):
        del specs
        return (0, 1)

    def next(self, state, weights, gradients):
        del gradients
        return state, weights


def test_get_hparams_returns_empty_dict():
    opt = _TestOptimizer()
    assert opt.get_hparams(opt.initialize(specs=())) == collections.OrderedDict()


def test_set_hparams_returns_input_state():
    opt = _TestOptimizer()
    state = opt.initialize(specs=())
    assert opt.set_hparams(state, collections.OrderedDict(a=1, b=2)) == state


_BAD = {
    'bad_shape': (tf.zeros([2], tf.float32), tf.zeros([3], tf.float32)),
    'bad_dtype': (tf.zeros([2], tf.float32), tf.zeros([2], tf.float64)),
    'bad_structure': ([tf.zeros([2]), tf.zeros([3])], [tf.zeros([2]), [tf.zeros([3])]]),
}


@pytest.mark.parametrize('weights, gradients', list(_BAD.values()), ids=list(_BAD))
def test_check_weights_gradients_match(weights, gradients):
    with pytest.raises(ValueError):
        tff.learning.optimizers.check_weights_gradients_match(weights, gradients)


@pytest.mark.parametrize('weights, state', list(_BAD.values()), ids=list(_BAD))
def test_check_weights_state_match(weights, state):
    with pytest.raises(ValueError, match='foo'):
        optimizer.check_weights_state_match(weights, state, name='foo')


def test_only_check_non_none_gradients():
    tff.learning.optimizers.check_weights_gradients_match(
        [tf.zeros([2]), tf.zeros([3])], [None, tf.zeros([3])]
    )


def _slices():
    return tf.IndexedSlices(
        values=tf.constant([[0.0, 1.0], [1.0, 3.0]]),
        indices=tf.constant([0, 2]),
        dense_shape=tf.constant([4, 2]),
    )


def test_handle_indexed_slices_single_value():
    gradients = tff.learning.optimizers.handle_indexed_slices_gradients(_slices())
    assert isinstance(gradients, tf.Tensor)
    np.testing.assert_allclose(gradients, [[0.0, 1.0], [0.0, 0.0], [1.0, 3.0], [0.0, 0.0]])


def test_handle_indexed_slices_struct():
    gradients = tff.learning.optimizers.handle_indexed_slices_gradients(
        [tf.constant([4.0, 5.5]), _slices()]
    )
    assert all(isinstance(g, tf.Tensor) for g in gradients)
    np.testing.assert_allclose(gradients[0], [4.0, 5.5])
    np.testing.assert_allclose(gradients[1], [[0.0, 1.0], [0.0, 0.0], [1.0, 3.0], [0.0, 0.0]])


# nest_utils_test.py: map_at_leaves


def test_map_at_leaves_several_outputs():
    a, b = optimizer.map_at_leaves(
        lambda x, y: (x + y, x * y), {'u': 2, 'v': [3]}, {'u': 4, 'v': [5]}
    )
    assert a == {'u': 6, 'v': [8]} and b == {'u': 8, 'v': [15]}


def test_map_at_leaves_one_output():
    assert optimizer.map_at_leaves(lambda x: x + 1, [1, (2,)]) == [2, (3,)]


def test_map_at_leaves_empty_structures():
    assert optimizer.map_at_leaves(lambda x: x, [], num_outputs=1) == []
    assert optimizer.map_at_leaves(lambda x: (x, x), {}, num_outputs=2) == ({}, {})
    with pytest.raises(ValueError, match='num_outputs'):
        optimizer.map_at_leaves(lambda x: x, [])


def test_map_at_leaves_structure_mismatch_raises():
    with pytest.raises((ValueError, TypeError)):
        optimizer.map_at_leaves(lambda x, y: x, [1, 2], [1])
