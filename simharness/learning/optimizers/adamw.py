"""AdamW (decoupled weight decay): ``tff.learning.optimizers.build_adamw``."""

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
_WEIGHT_DECAY_KEY = 'weight_decay'
_HPARAMS_KEYS = [base.LEARNING_RATE_KEY, _BETA_1_KEY, _BETA_2_KEY, _EPSILON_KEY, _WEIGHT_DECAY_KEY]


class _AdamW(base.Optimizer):
    """AdamW, see `build_adamw`."""

    def __init__(
        self,
        learning_rate: base.Float,
        beta_1: base.Float = 0.9,
        beta_2: base.Float = 0.999,
        epsilon: base.Float = 1e-7,
        weight_decay: base.Float = 0.004,
    ):
        base.check_nonnegative('AdamW', 'learning_rate', learning_rate)
        base.check_unit_interval('AdamW', 'beta_1', beta_1)
        base.check_unit_interval('AdamW', 'beta_2', beta_2)
        base.check_nonnegative('AdamW', 'epsilon', epsilon)
        base.check_nonnegative('AdamW', 'weight_decay', weight_decay)
        self._lr = learning_rate
        self._beta_1 = beta_1
        self._beta_2 = beta_2
        self._epsilon = epsilon
        self._weight_decay = weight_decay

    def initialize(self, specs: SpecStructure) -> collections.OrderedDict:
        def zeros() -> TensorStructure:
            return tf.nest.map_structure(lambda s: tf.zeros(s.shape, s.dtype), specs)

        return collections.OrderedDict(
            [
                (base.LEARNING_RATE_KEY, self._lr),
                (_BETA_1_KEY, self._beta_1),
                (_BETA_2_KEY, self._beta_2),
                (_EPSILON_KEY, self._epsilon),
                (_STEP_KEY, 0),
                (_ACCUMULATOR_KEY, zeros()),
                (_PRECONDITIONER_KEY, zeros()),
                (_WEIGHT_DECAY_KEY, self._weight_decay),
            ]
        )

    def next(
        self, state: base.OptimizerState, weights: TensorStructure, gradients: TensorStructure
    ) -> tuple[base.OptimizerState, TensorStructure]:
        gradients = base.handle_indexed_slices_gradients(gradients)
        base.check_weights_gradients_match(weights, gradients)
        lr, beta_1, beta_2 = state[base.LEARNING_RATE_KEY], state[_BETA_1_KEY], state[_BETA_2_KEY]
        epsilon, weight_decay = state[_EPSILON_KEY], state[_WEIGHT_DECAY_KEY]
        step = state[_STEP_KEY] + 1
        accumulator, preconditioner = state[_ACCUMULATOR_KEY], state[_PRECONDITIONER_KEY]
        base.check_weights_state_match(weights, accumulator, 'accumulator')
        base.check_weights_state_match(weights, preconditioner, 'preconditioner')
        t = tf.cast(step, beta_1.dtype) if tf.is_tensor(beta_1) else step
        normalization = tf.math.sqrt(1.0 - tf.math.pow(beta_2, t)) / (1.0 - tf.math.pow(beta_1, t))

        def adamw(
            w: tf.Tensor, a: tf.Tensor, p: tf.Tensor, g: tf.Tensor
        ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
            if g is None:
                return w, a, p
            a = a + (g - a) * (1.0 - tf.cast(beta_1, g.dtype))
            p = p + (tf.math.square(g) - p) * (1.0 - tf.cast(beta_2, g.dtype))
            w = w - tf.cast(lr, g.dtype) * (
                tf.cast(normalization, g.dtype) * a / (tf.math.sqrt(p) + tf.cast(epsilon, g.dtype))
                + weight_decay * w
            )
            return w, a, p

        new_w, new_a, new_p = base.map_at_leaves(
            adamw, weights, accumulator, preconditioner, gradients, num_outputs=3
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
                (_WEIGHT_DECAY_KEY, weight_decay),
            ]
        ), new_w

    def get_hparams(self, state: base.OptimizerState) -> collections.OrderedDict:
        return collections.OrderedDict((k, state[k]) for k in _HPARAMS_KEYS)

    def set_hparams(
        self, state: base.OptimizerState, hparams: Mapping[str, tf.Tensor]
    ) -> base.OptimizerState:
        return base.update_state(state, hparams)


def build_adamw(
    learning_rate: base.Float,
    beta_1: base.Float = 0.9,
    beta_2: base.Float = 0.999,
    epsilon: base.Float = 1e-7,
    weight_decay: base.Float = 0.004,
) -> base.Optimizer:
    """AdamW (Loshchilov & Hutter), as TFF's ``build_adamw``::

        acc = beta_1 * acc + (1 - beta_1) * g
        s = beta_2 * s + (1 - beta_2) * g**2
        normalization = sqrt(1 - beta_2**t) / (1 - beta_1**t)
        w = w - lr * (normalization * acc / (sqrt(s) + eps) + weight_decay * w)

    `weight_decay` 0 is Adam. State: ``OrderedDict(learning_rate, beta_1,
    beta_2, epsilon, step, accumulator, preconditioner, weight_decay)``.

    Raises:
      ValueError: a hyper-parameter out of range.
    """
    return _AdamW(learning_rate, beta_1, beta_2, epsilon, weight_decay)
