"""Yogi: ``tff.learning.optimizers.build_yogi``."""

from __future__ import annotations

import collections
from collections.abc import Mapping

import tensorflow as tf

from simharness.learning._typing import SpecStructure, TensorStructure
from simharness.learning.optimizers import optimizer as base

_BETA_1_KEY = 'beta_1'
_BETA_2_KEY = 'beta_2'
_EPSILON_KEY = 'epsilon'
_STEP_KEY = 'step'
_ACCUMULATOR_KEY = 'accumulator'
_PRECONDITIONER_KEY = 'preconditioner'
_HPARAMS_KEYS = [base.LEARNING_RATE_KEY, _BETA_1_KEY, _BETA_2_KEY, _EPSILON_KEY]


class _Yogi(base.Optimizer):
    """Yogi, see `build_yogi`."""

    def __init__(
        self,
        learning_rate: base.Float,
        beta_1: base.Float = 0.9,
        beta_2: base.Float = 0.999,
        epsilon: base.Float = 1e-3,
        initial_preconditioner_value: base.Float = 1e-6,
    ):
        base.check_nonnegative('Yogi', 'learning_rate', learning_rate)
        base.check_unit_interval('Yogi', 'beta_1', beta_1)
        base.check_unit_interval('Yogi', 'beta_2', beta_2)
        base.check_nonnegative('Yogi', 'epsilon', epsilon)
        base.check_nonnegative('Yogi', 'initial_preconditioner_value', initial_preconditioner_value)
        self._lr = learning_rate
        self._beta_1 = beta_1
        self._beta_2 = beta_2
        self._epsilon = epsilon
        self._initial_preconditioner_value = initial_preconditioner_value

    def initialize(self, specs: SpecStructure) -> collections.OrderedDict:
        accumulator = tf.nest.map_structure(lambda s: tf.zeros(s.shape, s.dtype), specs)
        preconditioner = tf.nest.map_structure(
            lambda s: (
                tf.ones(s.shape, s.dtype) * tf.cast(self._initial_preconditioner_value, s.dtype)
            ),
            specs,
        )
        return collections.OrderedDict(
            [
                (base.LEARNING_RATE_KEY, self._lr),
                (_BETA_1_KEY, self._beta_1),
                (_BETA_2_KEY, self._beta_2),
                (_EPSILON_KEY, self._epsilon),
                (_STEP_KEY, 0),
                (_ACCUMULATOR_KEY, accumulator),
                (_PRECONDITIONER_KEY, preconditioner),
            ]
        )

    def next(
        self, state: base.OptimizerState, weights: TensorStructure, gradients: TensorStructure
    ) -> tuple[base.OptimizerState, TensorStructure]:
        gradients = base.handle_indexed_slices_gradients(gradients)
        base.check_weights_gradients_match(weights, gradients)
        lr, beta_1, beta_2 = state[base.LEARNING_RATE_KEY], state[_BETA_1_KEY], state[_BETA_2_KEY]
        epsilon = state[_EPSILON_KEY]
        step = state[_STEP_KEY] + 1
        accumulator, preconditioner = state[_ACCUMULATOR_KEY], state[_PRECONDITIONER_KEY]
        base.check_weights_state_match(weights, accumulator, 'accumulator')
        base.check_weights_state_match(weights, preconditioner, 'preconditioner')
        t = tf.cast(step, tf.float32)
        normalized_lr = (
            lr * tf.math.sqrt(1.0 - tf.math.pow(beta_2, t)) / (1.0 - tf.math.pow(beta_1, t))
        )

        def yogi(
            w: tf.Tensor, a: tf.Tensor, p: tf.Tensor, g: tf.Tensor
        ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
            if g is None:
                return w, a, p
            a = a + (g - a) * (1.0 - tf.cast(beta_1, g.dtype))
            g2 = tf.math.square(g)
            p = p + (1 - tf.cast(beta_2, g.dtype)) * tf.sign(g2 - p) * g2
            w = w - tf.cast(normalized_lr, g.dtype) * a / (
                tf.math.sqrt(p) + tf.cast(epsilon, g.dtype)
            )
            return w, a, p

        new_w, new_a, new_p = base.map_at_leaves(
            yogi, weights, accumulator, preconditioner, gradients, num_outputs=3
        )
        return collections.OrderedDict(
            [
                (base.LEARNING_RATE_KEY, lr),
                (_BETA_1_KEY, beta_1),
                (_BETA_2_KEY, beta_2),
                (_EPSILON_KEY, epsilon),
                (_STEP_KEY, step),
                (_ACCUMULATOR_KEY, new_a),
                (_PRECONDITIONER_KEY, new_p),
            ]
        ), new_w

    def get_hparams(self, state: base.OptimizerState) -> collections.OrderedDict:
        return collections.OrderedDict((k, state[k]) for k in _HPARAMS_KEYS)

    def set_hparams(
        self, state: base.OptimizerState, hparams: Mapping[str, tf.Tensor]
    ) -> base.OptimizerState:
        return base.update_state(state, hparams)


def build_yogi(
    learning_rate: base.Float,
    beta_1: base.Float = 0.9,
    beta_2: base.Float = 0.999,
    epsilon: base.Float = 1e-3,
    initial_preconditioner_value: base.Float = 1e-6,
) -> base.Optimizer:
    """Yogi (Zaheer et al. 2018), as TFF's ``build_yogi``::

        acc = beta_1 * acc + (1 - beta_1) * g
        s = s + (1 - beta_2) * sign(g**2 - s) * g**2
        normalized_lr = lr * sqrt(1 - beta_2**t) / (1 - beta_1**t)
        w = w - normalized_lr * acc / (sqrt(s) + eps)

    State: as Adam's, the preconditioner starting at
    `initial_preconditioner_value`.

    Raises:
      ValueError: a hyper-parameter out of range.
    """
    return _Yogi(learning_rate, beta_1, beta_2, epsilon, initial_preconditioner_value)
