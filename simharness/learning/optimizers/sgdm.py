"""SGD with optional (Nesterov) momentum: ``tff.learning.optimizers.build_sgdm``."""

from __future__ import annotations

import collections
from collections.abc import Mapping
from typing import Optional

import tensorflow as tf

from simharness.errors import SimharnessValueError
from simharness.learning._typing import SpecStructure, TensorStructure
from simharness.learning.optimizers import optimizer as base

_MOMENTUM_KEY = 'momentum'
_ACCUMULATOR_KEY = 'accumulator'


class _SGD(base.Optimizer):
    """Gradient descent, see `build_sgdm`."""

    def __init__(
        self,
        learning_rate: base.Float,
        momentum: Optional[base.Float] = None,
        nesterov: bool = False,
    ):
        base.check_nonnegative('SGD', 'learning_rate', learning_rate)
        if not momentum and nesterov:
            raise SimharnessValueError(
                'Nesterov momentum requires `momentum` to be set to a float > 0.'
            )
        if momentum:
            # Momentum is a hyper-parameter (with an accumulator) only when nonzero.
            if not tf.is_symbolic_tensor(momentum) and (momentum < 0.0 or momentum > 1.0):
                raise SimharnessValueError(
                    f'SGD `momentum` must be `None` or in the range [0, 1], found {momentum}.'
                )
            self._hparams_keys = [base.LEARNING_RATE_KEY, _MOMENTUM_KEY]
        else:
            self._hparams_keys = [base.LEARNING_RATE_KEY]
        self._lr = learning_rate
        self._momentum = momentum
        self._nesterov = nesterov

    def initialize(self, specs: SpecStructure) -> collections.OrderedDict:
        state: collections.OrderedDict = collections.OrderedDict(
            [(base.LEARNING_RATE_KEY, self._lr)]
        )
        if self._momentum is not None and self._momentum > 0:
            state[_MOMENTUM_KEY] = self._momentum
            state[_ACCUMULATOR_KEY] = tf.nest.map_structure(
                lambda s: tf.zeros(s.shape, s.dtype), specs
            )
        return state

    def next(
        self, state: base.OptimizerState, weights: TensorStructure, gradients: TensorStructure
    ) -> tuple[base.OptimizerState, TensorStructure]:
        gradients = base.handle_indexed_slices_gradients(gradients)
        base.check_weights_gradients_match(weights, gradients)
        lr = state[base.LEARNING_RATE_KEY]
        if _MOMENTUM_KEY not in state:

            def sgd(w: tf.Tensor, g: tf.Tensor) -> tf.Tensor:
                return w if g is None else w - tf.cast(lr, g.dtype) * g

            return (
                collections.OrderedDict([(base.LEARNING_RATE_KEY, lr)]),
                tf.nest.map_structure(sgd, weights, gradients),
            )
        momentum = state[_MOMENTUM_KEY]
        accumulator = state[_ACCUMULATOR_KEY]
        base.check_weights_state_match(weights, accumulator, 'accumulator')

        def sgdm(w: tf.Tensor, a: tf.Tensor, g: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
            if g is None:
                return w, a
            a = momentum * a + g
            if self._nesterov:
                return w - lr * (g + momentum * a), a
            return w - lr * a, a

        new_weights, new_accumulator = base.map_at_leaves(
            sgdm, weights, accumulator, gradients, num_outputs=2
        )
        return collections.OrderedDict(
            [
                (base.LEARNING_RATE_KEY, lr),
                (_MOMENTUM_KEY, momentum),
                (_ACCUMULATOR_KEY, new_accumulator),
            ]
        ), new_weights

    def get_hparams(self, state: base.OptimizerState) -> collections.OrderedDict:
        return collections.OrderedDict((k, state[k]) for k in self._hparams_keys)

    def set_hparams(
        self, state: base.OptimizerState, hparams: Mapping[str, tf.Tensor]
    ) -> base.OptimizerState:
        return base.update_state(state, hparams)


def build_sgdm(
    learning_rate: base.Float = 0.01, momentum: Optional[base.Float] = None, nesterov: bool = False
) -> base.Optimizer:
    """SGD, with momentum if `momentum` is set (TFF's ``build_sgdm``).

    Without momentum ``w = w - lr * g``; with momentum ``m`` ::

        v = m * v + g
        w = w - lr * v                 (nesterov: w = w - lr * (g + m * v))

    State: ``OrderedDict(learning_rate[, momentum, accumulator])``; momentum
    None or 0 keeps neither momentum nor an accumulator.

    Args:
      learning_rate: a nonnegative learning rate (default 0.01).
      momentum: None, or a float in [0, 1].
      nesterov: Nesterov momentum (needs `momentum` > 0).

    Raises:
      ValueError: a hyper-parameter out of range.
    """
    return _SGD(learning_rate=learning_rate, momentum=momentum, nesterov=nesterov)
