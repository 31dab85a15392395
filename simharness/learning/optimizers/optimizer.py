"""The optimizer contract of ``tff.learning.optimizers``: state in, state out.

An `Optimizer` is two pure functions of tensors::

    initialize(specs)                  -> state   (a structure of tensors / Python numbers)
    next(state, weights, gradients)    -> (state, weights)

`specs` is a (nested) structure of `tf.TensorSpec` that `weights` and
`gradients` must match. `next` creates no `tf.Variable`: it is traced into
the client or server computation (a `tf_computation`) that calls it, and
whatever carries from one step to the next lives in the state, so a server
optimizer's state is part of the server state. Hyper-parameters live in the
state too (the learning rate under `LEARNING_RATE_KEY`) and are read and
replaced with `get_hparams` / `set_hparams`.
"""

from __future__ import annotations

import abc
import collections
from collections.abc import Mapping
from typing import Callable, Dict, Generic, TypeVar, Union, overload

import numpy as np
import tensorflow as tf

from simharness.errors import SimharnessValueError
from simharness.learning._typing import SpecStructure, TensorStructure

Int = Union[int, tf.Tensor, np.number]
Float = Union[float, tf.Tensor, np.number]
State = TypeVar('State')
Weights = TypeVar('Weights')
Gradients = TensorStructure
Hparams = TypeVar('Hparams', bound=Mapping)

#: The state of the optimizers of this package: an (ordered) dict of hyper-parameters
#: and step counts (scalar tensors or Python numbers) and of per-weight terms
#: (structures of tensors like the weights: momentum accumulators, ...).
OptimizerState = Dict[str, tf.Tensor]

#: The key of the learning rate in an optimizer's state (TFF's name).
LEARNING_RATE_KEY = 'learning_rate'


class Optimizer(abc.ABC, Generic[State, Weights, Hparams]):
    """An optimizer for federated learning (``tff.learning.optimizers.Optimizer``).

    Its pair `initialize` / `next` defines the algorithm; `next` is one step.
    Both are traced once into a TF graph, so they must not create or use
    `tf.Variable` objects: whatever one step leaves for the next (a momentum
    accumulator, a step count) is a tensor of the state. Store the learning
    rate, if any, under `LEARNING_RATE_KEY`.
    """

    @abc.abstractmethod
    def initialize(self, specs: SpecStructure) -> State:
        """The initial state.

        Args:
          specs: a (nested) structure of `tf.TensorSpec` of the weights to
            optimize; `next`'s weights and gradients must match it.

        Returns:
          The state: a (nested) structure of tensors.
        """

    @abc.abstractmethod
    def next(self, state: State, weights: Weights, gradients: Gradients) -> tuple[State, Weights]:
        """One step: returns ``(updated state, updated weights)``.

        Args:
          state: a state of the structure `initialize` returns.
          weights: tensors of the structure of `initialize`'s specs.
          gradients: tensors (or None: left alone) of the same structure.
        """

    def get_hparams(self, state: State) -> Hparams:
        """The hyper-parameters in `state` as an `OrderedDict` (none by default)."""
        del state
        return collections.OrderedDict()  # type: ignore[return-value]

    def set_hparams(self, state: State, hparams: Hparams) -> State:
        """`state` with the hyper-parameters of `hparams` (a `get_hparams` result)."""
        del hparams
        return state


def _check_shape_dtype_match(x: tf.Tensor, y: tf.Tensor | None) -> None:
    if y is None:
        return
    if not x.shape.is_compatible_with(y.shape) or x.dtype != y.dtype:
        raise TypeError('Provided tensors do not have the same shapes and dtypes.')


def _shapes_and_dtypes(nest: TensorStructure) -> object:
    return tf.nest.map_structure(
        lambda x: (getattr(x, 'shape', None), getattr(x, 'dtype', None)), nest
    )


def check_weights_gradients_match(weights: TensorStructure, gradients: Gradients) -> None:
    """Raises if `weights` and the non-None leaves of `gradients` do not match.

    As Keras optimizers, a None gradient leaf is skipped.

    Raises:
      ValueError: different structures, or a leaf with another shape or dtype.
    """
    try:
        tf.nest.assert_same_structure(weights, gradients, check_types=True)
        tf.nest.map_structure(_check_shape_dtype_match, weights, gradients)
    except (TypeError, ValueError) as e:
        raise SimharnessValueError(
            'Provided weights and gradients must be collections of tensors of the same '
            'structure and the tensors must have the same shapes and dtypes.\n'
            f'Provided weights have type {_shapes_and_dtypes(weights)}, value {weights}\n'
            f'Provided gradients have type {_shapes_and_dtypes(gradients)}, value '
            f'{gradients}\n'
        ) from e


def check_weights_state_match(weights: TensorStructure, state: TensorStructure, name: str) -> None:
    """Raises if a per-weight term of the state (`name`) does not match `weights`.

    Raises:
      ValueError: different structures, shapes or dtypes (usually `initialize`
        was given specs other than the weights being optimized).
    """
    try:
        tf.nest.assert_same_structure(state, weights, check_types=True)
        tf.nest.map_structure(_check_shape_dtype_match, weights, state)
    except (TypeError, ValueError) as e:
        raise SimharnessValueError(
            f'Provided {name} and weights do not match. The {name} term in the state and '
            'the weights must be collections of tensors of the same structure, shapes and '
            'dtypes; was `initialize` called with specs other than the weights being '
            f'optimized?\nProvided {name}: {state}\nProvided weights: {weights}'
        ) from e


def handle_indexed_slices_gradients(gradients: Gradients) -> Gradients:
    """`gradients` with every `tf.IndexedSlices` (a sparse gradient) made dense."""
    return tf.nest.map_structure(
        lambda g: tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g, gradients
    )


@overload
def map_at_leaves(
    fn: Callable[..., tuple], *args: TensorStructure, num_outputs: int = 0
) -> tuple[TensorStructure, ...]: ...
@overload
def map_at_leaves(
    fn: Callable[..., TensorStructure], *args: TensorStructure, num_outputs: int = 0
) -> TensorStructure: ...
def map_at_leaves(
    fn: Callable[..., TensorStructure], *args: TensorStructure, num_outputs: int = 0
) -> TensorStructure:
    """Applies `fn` leaf-wise to structures of one shape; one structure per output.

    ``fn(X, Y) -> (A, B)`` gives ``map_at_leaves(fn, S[X], S[Y]) -> (S[A],
    S[B])`` (a single output is returned bare). `num_outputs` tells how many
    structures to return when the structures have no leaves.

    Raises:
      ValueError: structures differ, or empty structures without `num_outputs`.
    """
    for other in args[1:]:
        tf.nest.assert_same_structure(args[0], other)
    if not tf.nest.flatten(args[0]):
        if num_outputs < 1:
            raise SimharnessValueError(
                f'Found empty arguments of structure {args[0]}, but `num_outputs` was set to '
                f'non-positive value {num_outputs}; set `num_outputs` to use empty '
                'structures.'
            )
        return args[0] if num_outputs == 1 else (args[0],) * num_outputs
    flat = [tf.nest.flatten(a) for a in args]
    results = [r if isinstance(r, tuple) else (r,) for r in (fn(*leaves) for leaves in zip(*flat))]
    packed = tuple(tf.nest.pack_sequence_as(args[0], list(col)) for col in zip(*results))
    return packed[0] if len(packed) == 1 else packed


def update_state(state: Mapping, hparams: Mapping) -> OptimizerState:
    """A copy of the state dict `state` with the keys of `hparams` replaced.

    Raises:
      KeyError: a key of `hparams` is not in `state`.
    """
    missing = [k for k in hparams if k not in state]
    if missing:
        raise KeyError(
            f'the optimizer state has no hyper-parameters {missing}; its keys: {list(state)}'
        )
    out = type(state)(state) if isinstance(state, dict) else collections.OrderedDict(state)
    out.update(hparams)
    return out


def check_nonnegative(owner: str, name: str, value: Float) -> None:
    """Raises ValueError if the hyper-parameter `value` (not a symbolic tensor) is < 0."""
    if not tf.is_symbolic_tensor(value) and value < 0.0:
        raise SimharnessValueError(f'{owner} `{name}` must be nonnegative, found {value}.')


def check_unit_interval(owner: str, name: str, value: Float) -> None:
    """Raises ValueError if `value` (not a symbolic tensor) is outside [0, 1]."""
    if not tf.is_symbolic_tensor(value) and (value < 0.0 or value > 1.0):
        raise SimharnessValueError(
            f'{owner} `{name}` must be in the range [0.0, 1.0], found {value}.'
        )


__all__ = [
    'Float',
    'Int',
    'LEARNING_RATE_KEY',
    'Optimizer',
    'OptimizerState',
    'check_nonnegative',
    'check_unit_interval',
    'check_weights_gradients_match',
    'check_weights_state_match',
    'handle_indexed_slices_gradients',
    'map_at_leaves',
    'update_state',
]
