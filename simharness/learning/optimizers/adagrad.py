"""Adagrad: ``tff.learning.optimizers.build_adagrad``."""

from __future__ import annotations

import collections
from collections.abc import Mapping

import tensorflow as tf

from simharness.learning._typing import SpecStructure, TensorStructure
from simharness.learning.optimizers import optimizer as base

_EPSILON_KEY = 'epsilon'
_PRECONDITIONER_KEY = 'preconditioner'
_HPARAMS_KEYS = [base.LEARNING_RATE_KEY, _EPSILON_KEY]


class _Adagrad(base.Optimizer):
    """Adagrad, see `build_adagrad`."""

    def __init__(
        self,
        learning_rate: base.Float,
        initial_preconditioner_value: base.Float = 0.1,
        epsilon: base.Float = 1e-7,
    ):
        base.check_nonnegative('Adagrad', 'learning_rate', learning_rate)
        base.check_nonnegative(
            'Adagrad', 'initial_preconditioner_value', initial_preconditioner_value
        )
        base.check_nonnegative('Adagrad', 'epsilon', epsilon)
        self._lr = learning_rate
        self._initial_precond = initial_preconditioner_value
        self._epsilon = epsilon

    def initialize(self, specs: SpecStructure) -> collections.OrderedDict:
        preconditioner = tf.nest.map_structure(
            lambda s: tf.ones(s.shape, s.dtype) * tf.cast(self._initial_precond, s.dtype), specs
        )
        return collections.OrderedDict(
            [
                (base.LEARNING_RATE_KEY, self._lr),
                (_EPSILON_KEY, self._epsilon),
                (_PRECONDITIONER_KEY, preconditioner),
            ]
        )

    def next(
        self, state: base.OptimizerState, weights: TensorStructure, gradients: TensorStructure
    ) -> tuple[base.OptimizerState, TensorStructure]:
        gradients = base.handle_indexed_slices_gradients(gradients)
        base.check_weights_gradients_match(weights, gradients)
        lr, epsilon = state[base.LEARNING_RATE_KEY], state[_EPSILON_KEY]
        preconditioner = state[_PRECONDITIONER_KEY]
        base.check_weights_state_match(weights, preconditioner, 'preconditioner')

        def adagrad(w: tf.Tensor, p: tf.Tensor, g: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
            if g is None:
                return w, p
            p = p + tf.math.square(g)
            return w - tf.cast(lr, g.dtype) * g / tf.math.sqrt(p + tf.cast(epsilon, p.dtype)), p

        new_w, new_p = base.map_at_leaves(
            adagrad, weights, preconditioner, gradients, num_outputs=2
        )
        return collections.OrderedDict(
            [(base.LEARNING_RATE_KEY, lr), (_EPSILON_KEY, epsilon), (_PRECONDITIONER_KEY, new_p)]
        ), new_w

    def get_hparams(self, state: base.OptimizerState) -> collections.OrderedDict:
        return collections.OrderedDict((k, state[k]) for k in _HPARAMS_KEYS)

    def set_hparams(
        self, state: base.OptimizerState, hparams: Mapping[str, tf.Tensor]
    ) -> base.OptimizerState:
        return base.update_state(state, hparams)


def build_adagrad(
    learning_rate: base.Float,
    initial_preconditioner_value: base.Float = 0.1,
    epsilon: base.Float = 1e-7,
) -> base.Optimizer:
    """Adagrad (Duchi et al. 2011), as TFF's ``build_adagrad``::

        s = s + g**2
        w = w - lr * g / sqrt(s + eps)

    State: ``OrderedDict(learning_rate, epsilon, preconditioner)``.

    Raises:
      ValueError: a negative hyper-parameter.
    """
    return _Adagrad(learning_rate, initial_preconditioner_value, epsilon)
