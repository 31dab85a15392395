"""A Keras optimizer as an `Optimizer` (TFF's internal ``keras_optimizer``).

TFF's learning builders still take a no-argument function returning a Keras
optimizer where they take an `Optimizer`; `build_or_verify_tff_optimizer`
turns one into the other inside the computation that uses it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Optional, Union

import tensorflow as tf

from simharness.errors import SimharnessTypeError
from simharness.learning._typing import SpecStructure, TensorStructure
from simharness.learning.optimizers import optimizer as base

if TYPE_CHECKING:  # Keras is imported by whoever makes a Keras optimizer
    import keras

#: What the learning builders take as an optimizer: an `Optimizer`, or (TFF's older form)
#: a no-argument function making a Keras optimizer.
OptimizerOrKerasFn = Union[base.Optimizer, Callable[[], 'keras.optimizers.Optimizer']]

#: A Keras optimizer's variables, the state of a server `KerasOptimizer` (else ``()``).
KerasOptimizerState = Union[list, tuple]


class KerasOptimizer(base.Optimizer):
    """A Keras optimizer behind the `Optimizer` contract.

    Made inside the `tf_computation` that uses it: `optimizer_fn` is called
    and the optimizer's variables built for `weights` (its step stays 0).
    As a server optimizer (`disjoint_init_and_next`: `initialize` and
    `next` run in different computations) the state is the optimizer's
    variables, assigned before each step; as a client optimizer the state
    is ``()``.

    Args:
      optimizer_fn: no-argument callable returning a Keras optimizer.
      weights: a structure of the `tf.Variable` s it will update.
      disjoint_init_and_next: see above.
    """

    def __init__(
        self,
        optimizer_fn: Callable[[], keras.optimizers.Optimizer],
        weights: TensorStructure,
        disjoint_init_and_next: bool,
    ):
        self._optimizer = optimizer_fn()
        self._disjoint_init_and_next = disjoint_init_and_next
        self._optimizer.build(tf.nest.flatten(weights))

    def initialize(self, specs: SpecStructure) -> KerasOptimizerState:
        del specs
        return list(self._optimizer.variables) if self._disjoint_init_and_next else ()

    def next(
        self, state: KerasOptimizerState, weights: TensorStructure, gradients: TensorStructure
    ) -> tuple[KerasOptimizerState, TensorStructure]:
        if self._disjoint_init_and_next:
            tf.nest.map_structure(
                lambda v, s: v.assign(s), list(self._optimizer.variables), list(state)
            )
        self._optimizer.apply_gradients(
            list(zip(tf.nest.flatten(gradients), tf.nest.flatten(weights)))
        )
        if self._disjoint_init_and_next:
            return list(self._optimizer.variables), weights
        return (), weights


def build_or_verify_tff_optimizer(
    optimizer_fn: Union[Callable[[], keras.optimizers.Optimizer], base.Optimizer],
    trainable_weights: Optional[TensorStructure] = None,
    disjoint_init_and_next: Optional[bool] = None,
) -> base.Optimizer:
    """`optimizer_fn` if it is an `Optimizer`, else a `KerasOptimizer` of it.

    Raises:
      TypeError: neither an `Optimizer` nor a callable.
    """
    if isinstance(optimizer_fn, base.Optimizer):
        return optimizer_fn
    if callable(optimizer_fn):
        return KerasOptimizer(optimizer_fn, trainable_weights, bool(disjoint_init_and_next))
    raise SimharnessTypeError(
        '`optimizer_fn` must be a callable or `tff.learning.optimizers.Optimizer`, got '
        f'{type(optimizer_fn)}',
        expected=base.Optimizer,
        actual=type(optimizer_fn),
    )
