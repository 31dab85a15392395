"""A Keras optimizer as an `Optimizer` (TFF's internal ``keras_optimizer``).

TFF's learning builders took (up to v0.86; ours still do) a no-argument function
returning a Keras optimizer where they take an `Optimizer`;
`build_or_verify_tff_optimizer` turns one into the other inside the computation
that uses it, and `build_keras_optimizer` makes a Keras optimizer's variables.

Keras 3 (TF 2.16+), unlike the Keras 2 of TFF's time, makes an optimizer's slot
variables lazily on its first ``apply_gradients``, which cannot run inside a
dataset loop's function: they are built ahead (`build_keras_optimizer`), with
its step (``iterations``) left at 0, as TFF's ``KerasOptimizer`` did by tracing
a zero step. A Keras 3 optimizer's ``variables`` also hold its learning rate
(a variable, unless it is a ``LearningRateSchedule``) after ``iterations``:
the state of a server `KerasOptimizer` is ``[iteration, learning_rate, slots...]``
where TFF's Keras 2 had ``[iteration, slots...]``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Optional, TypeAlias, Union

import tensorflow as tf

from simharness.errors import SimharnessTypeError
from simharness.learning._typing import SpecStructure, TensorStructure
from simharness.learning.optimizers import optimizer as base

if TYPE_CHECKING:  # Keras is imported by whoever makes a Keras optimizer
    import keras

#: A Keras optimizer (an instance).
KerasOptimizerLike: TypeAlias = 'keras.optimizers.Optimizer'

#: A no-argument function making a Keras optimizer.
KerasOptimizerFn = Callable[[], 'keras.optimizers.Optimizer']

#: What the learning builders take as an optimizer: an `Optimizer`, or (TFF's older form)
#: a no-argument function making a Keras optimizer.
OptimizerOrKerasFn = Union[base.Optimizer, KerasOptimizerFn]

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
        build_keras_optimizer(self._optimizer, weights)

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


def build_keras_optimizer(
    optimizer: keras.optimizers.Optimizer, trainable_variables: TensorStructure
) -> None:
    """Makes `optimizer`'s variables for `trainable_variables` now, if not yet made.

    Call it where variables may be created (a `tf_computation`'s graph, not the
    function of a dataset loop); its step stays 0.
    """
    if not getattr(optimizer, 'built', False):
        optimizer.build(tf.nest.flatten(trainable_variables))


def check_optimizer_or_keras_fn(optimizer: object, name: str) -> None:
    """Raises unless `optimizer` is an `Optimizer` or a callable (TFF up to v0.86)."""
    if not isinstance(optimizer, base.Optimizer) and not callable(optimizer):
        raise SimharnessTypeError(
            f'{name} must be a tff.learning.optimizers.Optimizer or a no-arg callable '
            f'returning a Keras optimizer, got {optimizer!r} of type {type(optimizer).__name__}',
            expected=base.Optimizer,
            actual=type(optimizer),
        )


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
