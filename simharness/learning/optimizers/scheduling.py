"""Learning-rate schedules: ``tff.learning.optimizers.schedule_learning_rate``."""

from __future__ import annotations

import collections
from typing import Callable

import tensorflow as tf

from simharness.errors import SimharnessTypeError
from simharness.learning._typing import SpecStructure, TensorStructure
from simharness.learning.optimizers import optimizer as base


def _check_lr_exists(optimizer_state: base.OptimizerState) -> None:
    if base.LEARNING_RATE_KEY not in optimizer_state:
        raise KeyError(
            'Optimizer to be scheduled must have learning rate under '
            '`tff.learning.optimizers.LEARNING_RATE_KEY` key in its state. Found optimizer '
            f'state: {optimizer_state}'
        )


class _ScheduledLROptimizer(base.Optimizer):
    """An optimizer whose learning rate is ``schedule_fn(round_num)``."""

    def __init__(self, optimizer: base.Optimizer, schedule_fn: Callable[[base.Int], base.Float]):
        self._optimizer = optimizer
        self._schedule_fn = schedule_fn

    def initialize(self, specs: SpecStructure) -> collections.OrderedDict:
        optimizer_state = self._optimizer.initialize(specs)
        _check_lr_exists(optimizer_state)
        round_num = tf.constant(0, tf.int32)
        optimizer_state[base.LEARNING_RATE_KEY] = self._schedule_fn(round_num)
        return collections.OrderedDict(round_num=round_num, optimizer=optimizer_state)

    def next(
        self, state: base.OptimizerState, weights: TensorStructure, gradients: TensorStructure
    ) -> tuple[base.OptimizerState, TensorStructure]:
        optimizer_state, weights = self._optimizer.next(state['optimizer'], weights, gradients)
        round_num = state['round_num'] + 1
        optimizer_state[base.LEARNING_RATE_KEY] = self._schedule_fn(round_num)
        return collections.OrderedDict(round_num=round_num, optimizer=optimizer_state), weights


def schedule_learning_rate(
    optimizer: base.Optimizer, schedule_fn: Callable[[base.Int], base.Float]
) -> base.Optimizer:
    """`optimizer` with learning rate ``schedule_fn(i)`` at its ``i``-th `next` (from 0).

    State: ``OrderedDict(round_num=int32, optimizer=<optimizer's state>)``. As in TFF,
    `get_hparams` / `set_hparams` are the base class' (no hyper-parameters: the
    schedule sets the learning rate).

    Args:
      optimizer: an `Optimizer` whose state keeps ``'learning_rate'``.
      schedule_fn: round number (an int32 tensor, traced) -> learning rate.

    Raises:
      TypeError: `optimizer` is not an `Optimizer`.
      KeyError: (at `initialize`) its state has no learning rate.
    """
    if not isinstance(optimizer, base.Optimizer):
        raise SimharnessTypeError(
            f'Found optimizer {optimizer}. To apply `schedule_learning_rate`, you must pass a '
            '`tff.learning.optimizers.Optimizer`.',
            expected=base.Optimizer,
            actual=type(optimizer),
        )
    return _ScheduledLROptimizer(optimizer, schedule_fn)
