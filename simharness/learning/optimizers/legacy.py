"""The padded-array learning path's optimizers (flat list states).

They follow TFF's `Optimizer` contract (`simharness.learning.optimizers.
optimizer`) with a flat list for the state, as the padded path
(`simharness.learning.padded`) carries it; TFF's own optimizers are the
``build_*`` functions of this package. An optimizer here is a small frozen
object with two functions::

    initialize(weight_shapes or specs)   -> state: a list of float32 arrays (numpy)
    next(state, weights, gradients)      -> (state, weights)       TF ops only

so that its state is part of the server state (checkpointed, carried
between rounds) and its step is traced into a client or server
computation. Every state ends with a float32 step counter.

  sgd(lr, momentum=0)                  w -= lr * (m = momentum * m + g)
  adam(lr, beta_1, beta_2, epsilon)    Kingma & Ba, with bias correction
  yogi(lr, beta_1, beta_2, epsilon, initial_accumulator)   Zaheer et al. 2018
  adagrad(lr, initial_accumulator, epsilon)

As the server optimizer of FedAvg they give FedAvgM, FedAdam, FedYogi and
FedAdagrad (Reddi et al., "Adaptive Federated Optimization", 2021).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, List, Sequence, Tuple

import numpy as np

from simharness.errors import ConfigError
from simharness.learning.optimizers import optimizer as base

OPTIMIZERS = ('adagrad', 'adam', 'sgd', 'yogi')


def _positive(name: str, key: str, v: Any, below: float = math.inf, zero_ok: bool = False
              ) -> None:
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and (
        v >= 0 if zero_ok else v > 0) and v < below
    if not ok:
        rng = f'{">= 0" if zero_ok else "> 0"}' + (f' and < {below:g}' if below < math.inf
                                                  else '')
        raise ConfigError(f'{name}: {key} must be a number {rng}, got {v!r}', key=key, value=v)


@dataclasses.dataclass(frozen=True)
class LegacyOptimizer(base.Optimizer):
    """Base of the flat-state optimizers (see the module docstring)."""

    learning_rate: float

    def slots(self) -> int:  # accumulators per weight
        return 0

    def initialize(self, shapes: Sequence[Any]) -> List[np.ndarray]:
        """Zero accumulators (`slots` per weight) and a zero step counter.

        Args:
          shapes: the weights' shapes, or their `tf.TensorSpec` s (a flat list).
        """
        shapes = [tuple(getattr(s, 'shape', s)) for s in shapes]
        return [np.zeros(s, np.float32) for _ in range(self.slots()) for s in shapes] + [
            np.zeros((), np.float32)]

    def _split(self, state: Sequence[Any], n: int) -> Tuple[List[List[Any]], Any]:
        state = list(state)
        return [state[i * n:(i + 1) * n] for i in range(self.slots())], state[-1]

    def next(self, state: Sequence[Any], weights: Sequence[Any], grads: Sequence[Any]
             ) -> Tuple[List[Any], List[Any]]:
        """One step: returns (new state, new weights)."""
        slots, step = self._split(state, len(weights))
        new_slots, new_w = self._step(slots, step + 1.0, list(weights), list(grads))
        return [v for s in new_slots for v in s] + [step + 1.0], new_w

    def _step(self, slots: List[List[Any]], t: Any, w: List[Any], g: List[Any]
              ) -> Tuple[List[List[Any]], List[Any]]:
        raise ConfigError(f'{type(self).__name__} has no update rule')  # pragma: no cover


@dataclasses.dataclass(frozen=True)
class SGD(LegacyOptimizer):
    """SGD with heavy-ball momentum (``momentum = 0``: plain SGD, no slot)."""

    momentum: float = 0.0

    def __post_init__(self) -> None:
        _positive('sgd', 'learning_rate', self.learning_rate)
        _positive('sgd', 'momentum', self.momentum, below=1.0, zero_ok=True)

    def slots(self) -> int:
        return 1 if self.momentum > 0 else 0

    def _step(self, slots, t, w, g):
        lr = self.learning_rate
        if self.momentum > 0:
            m = [self.momentum * a + b for a, b in zip(slots[0], g)]
            return [m], [x - lr * a for x, a in zip(w, m)]
        return [], [x - lr * b for x, b in zip(w, g)]


@dataclasses.dataclass(frozen=True)
class Adam(LegacyOptimizer):
    """Adam (bias-corrected step size, epsilon outside the square root, as Keras)."""

    beta_1: float = 0.9
    beta_2: float = 0.999
    epsilon: float = 1e-7

    def __post_init__(self) -> None:
        _positive('adam', 'learning_rate', self.learning_rate)
        _positive('adam', 'beta_1', self.beta_1, below=1.0, zero_ok=True)
        _positive('adam', 'beta_2', self.beta_2, below=1.0, zero_ok=True)
        _positive('adam', 'epsilon', self.epsilon)

    def slots(self) -> int:
        return 2

    def _step(self, slots, t, w, g):
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        b1, b2 = self.beta_1, self.beta_2
        m = [b1 * a + (1 - b1) * b for a, b in zip(slots[0], g)]
        v = [b2 * a + (1 - b2) * tf.square(b) for a, b in zip(slots[1], g)]
        lr = self.learning_rate * tf.sqrt(1 - tf.pow(b2, t)) / (1 - tf.pow(b1, t))
        return [m, v], [x - lr * a / (tf.sqrt(b) + self.epsilon) for x, a, b in zip(w, m, v)]


@dataclasses.dataclass(frozen=True)
class Yogi(LegacyOptimizer):
    """Yogi: Adam with an additive, sign-controlled second-moment update."""

    beta_1: float = 0.9
    beta_2: float = 0.999
    epsilon: float = 1e-3
    initial_accumulator: float = 1e-6

    def __post_init__(self) -> None:
        _positive('yogi', 'learning_rate', self.learning_rate)
        _positive('yogi', 'beta_1', self.beta_1, below=1.0, zero_ok=True)
        _positive('yogi', 'beta_2', self.beta_2, below=1.0, zero_ok=True)
        _positive('yogi', 'epsilon', self.epsilon)
        _positive('yogi', 'initial_accumulator', self.initial_accumulator, zero_ok=True)

    def slots(self) -> int:
        return 2

    def initialize(self, shapes):
        shapes = [tuple(getattr(s, 'shape', s)) for s in shapes]
        state = super().initialize(shapes)
        n = len(shapes)
        for i in range(n, 2 * n):
            state[i] = np.full(shapes[i - n], self.initial_accumulator, np.float32)
        return state

    def _step(self, slots, t, w, g):
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        b1, b2 = self.beta_1, self.beta_2
        m = [b1 * a + (1 - b1) * b for a, b in zip(slots[0], g)]
        v = [a - (1 - b2) * tf.sign(a - tf.square(b)) * tf.square(b) for a, b in zip(slots[1], g)]
        lr = self.learning_rate * tf.sqrt(1 - tf.pow(b2, t)) / (1 - tf.pow(b1, t))
        return [m, v], [x - lr * a / (tf.sqrt(b) + self.epsilon) for x, a, b in zip(w, m, v)]


@dataclasses.dataclass(frozen=True)
class Adagrad(LegacyOptimizer):
    """Adagrad: ``acc += g^2; w -= lr * g / (sqrt(acc) + epsilon)``."""

    initial_accumulator: float = 0.1
    epsilon: float = 1e-7

    def __post_init__(self) -> None:
        _positive('adagrad', 'learning_rate', self.learning_rate)
        _positive('adagrad', 'initial_accumulator', self.initial_accumulator, zero_ok=True)
        _positive('adagrad', 'epsilon', self.epsilon)

    def slots(self) -> int:
        return 1

    def initialize(self, shapes):
        shapes = [tuple(getattr(s, 'shape', s)) for s in shapes]
        state = super().initialize(shapes)
        for i, s in enumerate(shapes):
            state[i] = np.full(s, self.initial_accumulator, np.float32)
        return state

    def _step(self, slots, t, w, g):
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        acc = [a + tf.square(b) for a, b in zip(slots[0], g)]
        return [acc], [x - self.learning_rate * b / (tf.sqrt(a) + self.epsilon)
                       for x, a, b in zip(w, acc, g)]


def build(name: str, learning_rate: float, *, momentum: float = 0.0, beta_1: float = 0.9,
          beta_2: float = 0.999, epsilon: float | None = None) -> LegacyOptimizer:
    """An optimizer by name (one of `OPTIMIZERS`).

    Raises:
      ConfigError: an unknown name or a hyper-parameter out of range.
    """
    if name == 'sgd':
        return SGD(learning_rate, momentum)
    if name == 'adam':
        return Adam(learning_rate, beta_1, beta_2, 1e-7 if epsilon is None else epsilon)
    if name == 'yogi':
        return Yogi(learning_rate, beta_1, beta_2, 1e-3 if epsilon is None else epsilon)
    if name == 'adagrad':
        return Adagrad(learning_rate, epsilon=1e-7 if epsilon is None else epsilon)
    raise ConfigError(f'unknown optimizer {name!r}; allowed: '
                      f'{", ".join(repr(o) for o in OPTIMIZERS)}', key='optimizer', value=name)
