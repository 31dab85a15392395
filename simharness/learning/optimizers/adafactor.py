"""Adafactor (Shazeer & Stern 2018): ``tff.learning.optimizers.build_adafactor``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import tensorflow as tf

from simharness.errors import SimharnessValueError
from simharness.learning._typing import SpecStructure, TensorStructure
from simharness.learning.optimizers import optimizer as base

_BETA_2_DECAY_KEY = 'beta_2_decay'
_EPSILON_1_KEY = 'epsilon_1'
_EPSILON_2_KEY = 'epsilon_2'
_CLIP_THRESHOLD_KEY = 'clip_threshold'
_RELATIVE_STEP_KEY = 'relative_step'


class _AdaFactorMoment(NamedTuple):
    """The factored second moment of one weight: row and column means, full estimate."""

    r: tf.Tensor
    c: tf.Tensor
    v: tf.Tensor


def _rms(t: tf.Tensor) -> tf.Tensor:
    return tf.math.sqrt(tf.math.reduce_mean(tf.math.square(t)))


class _Adafactor(base.Optimizer):
    """Adafactor, see `build_adafactor`."""

    def __init__(
        self,
        learning_rate: base.Float,
        beta_2_decay: base.Float,
        epsilon_1: base.Float,
        epsilon_2: base.Float,
        clip_threshold: base.Float,
        relative_step: bool,
    ):
        if not tf.is_symbolic_tensor(learning_rate) and learning_rate < 0.0:
            raise SimharnessValueError(
                f'Adafactor must have a learning_rate greater than 0.0, got {learning_rate=}'
            )
        self._hparams = {
            base.LEARNING_RATE_KEY: learning_rate,
            _BETA_2_DECAY_KEY: beta_2_decay,
            _EPSILON_1_KEY: epsilon_1,
            _EPSILON_2_KEY: epsilon_2,
            _CLIP_THRESHOLD_KEY: clip_threshold,
            _RELATIVE_STEP_KEY: relative_step,
        }

    def initialize(self, specs: SpecStructure) -> dict:
        def moment(spec: tf.TensorSpec) -> _AdaFactorMoment:
            if spec.shape.rank < 2:  # only matrices (and above) are factored
                r_shape, c_shape = (0,), (0,)
            else:
                r_shape, c_shape = spec.shape[:-1], spec.shape[:-2] + spec.shape[-1]
            return _AdaFactorMoment(
                tf.zeros(r_shape, spec.dtype),
                tf.zeros(c_shape, spec.dtype),
                tf.zeros(spec.shape, spec.dtype),
            )

        return {
            'steps': 0,
            'moments': tuple(moment(s) for s in tf.nest.flatten(specs)),
            'hparams': dict(self._hparams),
        }

    def next(
        self, state: base.OptimizerState, weights: TensorStructure, gradients: TensorStructure
    ) -> tuple[base.OptimizerState, TensorStructure]:
        step = tf.cast(state['steps'] + 1, tf.float32)
        hparams = self.get_hparams(state)
        lr = hparams[base.LEARNING_RATE_KEY]
        beta_2_decay, clip = hparams[_BETA_2_DECAY_KEY], hparams[_CLIP_THRESHOLD_KEY]
        epsilon_1, epsilon_2 = hparams[_EPSILON_1_KEY], hparams[_EPSILON_2_KEY]
        relative = hparams[_RELATIVE_STEP_KEY]
        if isinstance(relative, bool):
            if relative:
                lr = tf.math.minimum(lr, tf.math.rsqrt(step))
        else:  # a tensor once the state went through a computation
            lr = tf.where(
                tf.cast(relative, tf.bool),
                tf.math.minimum(tf.cast(lr, tf.float32), tf.math.rsqrt(step)),
                tf.cast(lr, tf.float32),
            )
        rho_t = tf.math.minimum(lr, 1.0 / tf.math.rsqrt(step))

        def update(
            m: _AdaFactorMoment, w: tf.Tensor, g: tf.Tensor
        ) -> tuple[_AdaFactorMoment, tf.Tensor]:
            if g is None:
                return m, w
            alpha_t = tf.math.maximum(epsilon_2, _rms(w)) * rho_t
            g2 = tf.math.square(g) + epsilon_1
            beta_2_t = 1.0 - tf.math.pow(step, beta_2_decay)
            if w.shape.rank < 2:
                r, c = m.r, m.c
                v = beta_2_t * m.v + (1.0 - beta_2_t) * g2
            else:
                r = beta_2_t * m.r + (1.0 - beta_2_t) * tf.reduce_mean(g2, axis=-1)
                c = beta_2_t * m.c + (1.0 - beta_2_t) * tf.reduce_mean(g2, axis=-2)
                v = tf.expand_dims(
                    r / tf.reduce_mean(r, axis=-1, keepdims=True), axis=-1
                ) * tf.expand_dims(c, axis=-2)
            u = g * tf.math.rsqrt(v)
            u_hat = u / tf.maximum(1.0, _rms(u) / clip)
            return _AdaFactorMoment(r, c, v), w + -alpha_t * u_hat

        flat_w = tf.nest.flatten(weights)
        if not flat_w:
            moments, new_weights = state['moments'], weights
        else:
            pairs = [
                update(m, w, g)
                for m, w, g in zip(state['moments'], flat_w, tf.nest.flatten(gradients))
            ]
            moments = tuple(p[0] for p in pairs)
            new_weights = tf.nest.pack_sequence_as(weights, [p[1] for p in pairs])
        # TFF returns the float step here (its state changes dtype after one step); the
        # count keeps its dtype, so the state has one type, as a process' state needs.
        return {'steps': state['steps'] + 1, 'moments': moments, 'hparams': hparams}, new_weights

    def get_hparams(self, state: base.OptimizerState) -> base.OptimizerState:
        return state['hparams']

    def set_hparams(
        self, state: base.OptimizerState, hparams: Mapping[str, tf.Tensor]
    ) -> base.OptimizerState:
        return {
            'steps': state['steps'],
            'moments': state['moments'],
            'hparams': base.update_state(state['hparams'], hparams),
        }


def build_adafactor(
    learning_rate: base.Float,
    *,
    beta_2_decay: base.Float = -0.8,
    epsilon_1: base.Float = 1e-30,
    epsilon_2: base.Float = 1e-3,
    clip_threshold: base.Float = 1.0,
    relative_step: bool = True,
) -> base.Optimizer:
    """Adafactor (https://arxiv.org/abs/1804.04235), as TFF's ``build_adafactor``.

    Second moments of matrices are factored into row and column means.
    State: ``{'steps', 'moments': one (r, c, v) per weight leaf, 'hparams'}``.

    Args:
      learning_rate: the initial learning rate.
      beta_2_decay: the decay rate of beta_2.
      epsilon_1: keeps the denominator away from zero.
      epsilon_2: keeps the step size from becoming too small.
      clip_threshold: the update clipping threshold.
      relative_step: learning rate ``min(lr, 1/sqrt(step))``.

    Raises:
      ValueError: a negative learning rate.
    """
    return _Adafactor(
        learning_rate, beta_2_decay, epsilon_1, epsilon_2, clip_threshold, relative_step
    )
