"""RMSprop: ``tff.learning.optimizers.build_rmsprop``."""

from __future__ import annotations

import collections
from collections.abc import Mapping

import tensorflow as tf

from simharness.learning._typing import SpecStructure, TensorStructure
from simharness.learning.optimizers import optimizer as base

_DECAY_KEY = 'decay'
_PRECONDITIONER_KEY = 'preconditioner'
_EPSILON_KEY = 'epsilon'
_HPARAMS_KEYS = [base.LEARNING_RATE_KEY, _DECAY_KEY, _EPSILON_KEY]


class _RmsProp(base.Optimizer):
    """RMSprop, see `build_rmsprop`."""

    def __init__(
        self, learning_rate: base.Float, decay: base.Float = 0.9, epsilon: base.Float = 1e-7
    ):
        base.check_nonnegative('RMSProp', 'learning_rate', learning_rate)
        base.check_unit_interval('RMSProp', 'decay', decay)
        base.check_nonnegative('RMSProp', 'epsilon', epsilon)
        self._lr = learning_rate
        self._decay = decay
        self._epsilon = epsilon

    def initialize(self, specs: SpecStructure) -> collections.OrderedDict:
        preconditioner = tf.nest.map_structure(lambda s: tf.zeros(s.shape, s.dtype), specs)
        return collections.OrderedDict(
            [
                (base.LEARNING_RATE_KEY, self._lr),
                (_DECAY_KEY, self._decay),
                (_EPSILON_KEY, self._epsilon),
                (_PRECONDITIONER_KEY, preconditioner),
            ]
        )

    def next(
        self, state: base.OptimizerState, weights: TensorStructure, gradients: TensorStructure
    ) -> tuple[base.OptimizerState, TensorStructure]:
        gradients = base.handle_indexed_slices_gradients(gradients)
        base.check_weights_gradients_match(weights, gradients)
        lr, decay, epsilon = state[base.LEARNING_RATE_KEY], state[_DECAY_KEY], state[_EPSILON_KEY]
        preconditioner = state[_PRECONDITIONER_KEY]
        base.check_weights_state_match(weights, preconditioner, 'preconditioner')

        def rmsprop(w: tf.Tensor, p: tf.Tensor, g: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
            if g is None:
                return w, p
            p = p + (tf.math.square(g) - p) * (1 - decay)
            return w - lr * g / (tf.math.sqrt(p) + epsilon), p

        new_w, new_p = base.map_at_leaves(
            rmsprop, weights, preconditioner, gradients, num_outputs=2
        )
        return collections.OrderedDict(
            [
                (base.LEARNING_RATE_KEY, lr),
                (_DECAY_KEY, decay),
                (_EPSILON_KEY, epsilon),
                (_PRECONDITIONER_KEY, new_p),
            ]
        ), new_w

    def get_hparams(self, state: base.OptimizerState) -> collections.OrderedDict:
        return collections.OrderedDict((k, state[k]) for k in _HPARAMS_KEYS)

    def set_hparams(
        self, state: base.OptimizerState, hparams: Mapping[str, tf.Tensor]
    ) -> base.OptimizerState:
        return base.update_state(state, hparams)


def build_rmsprop(
    learning_rate: base.Float, decay: base.Float = 0.9, epsilon: base.Float = 1e-7
) -> base.Optimizer:
    """RMSprop (Tieleman & Hinton 2012), as TFF's ``build_rmsprop``::

        s = decay * s + (1 - decay) * g**2
        w = w - lr * g / (sqrt(s) + eps)

    State: ``OrderedDict(learning_rate, decay, epsilon, preconditioner)``.

    Raises:
      ValueError: a hyper-parameter out of range.
    """
    return _RmsProp(learning_rate, decay, epsilon)
