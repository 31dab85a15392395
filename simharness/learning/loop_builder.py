"""How a client iterates its dataset (TFF's ``tff.learning.LoopImplementation``).

Both loops reach the same tensor loop on our runtime: when a client's dataset
is in-memory tensors, the graph's ``ReduceDataset`` (from ``dataset.reduce``,
or from autograph's ``for batch in dataset``) is lowered to a
``tf.while_loop`` over batches (`simharness.executors.leaf.sequence_lowering`).
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Callable, Protocol, TypeVar

if TYPE_CHECKING:  # TensorFlow is imported when a loop first runs
    import tensorflow as tf

    from simharness.learning._typing import Batch

__all__ = ['LoopImplementation', 'TrainingLoop', 'build_training_loop']

#: The state a training loop carries from batch to batch.
LoopState = TypeVar('LoopState')


@enum.unique
class LoopImplementation(enum.Enum):
    """The loop of a client's training.

    Attributes:
      DATASET_ITERATOR: ``for batch in iter(dataset)`` (a Python loop that
        autograph converts inside a `tf.function`).
      DATASET_REDUCE: ``dataset.reduce(initial_state, reduce_fn)``.
    """

    DATASET_ITERATOR = enum.auto()
    DATASET_REDUCE = enum.auto()


class TrainingLoop(Protocol):
    """``loop(reduce_fn, dataset, initial_state_fn) -> final state``: folds
    ``reduce_fn(state, batch) -> state`` over `dataset` from ``initial_state_fn()``."""

    def __call__(
        self,
        reduce_fn: Callable[[LoopState, Batch], LoopState],
        dataset: tf.data.Dataset,
        initial_state_fn: Callable[[], LoopState] = ...,
    ) -> LoopState: ...


def _zero() -> tf.Tensor:
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    return tf.constant(0)


def _dataset_reduce_fn(
    reduce_fn: Callable[[LoopState, Batch], LoopState],
    dataset: tf.data.Dataset,
    initial_state_fn: Callable[[], LoopState] = _zero,
) -> LoopState:
    return dataset.reduce(initial_state=initial_state_fn(), reduce_func=reduce_fn)


def _for_iter_dataset_fn(
    reduce_fn: Callable[[LoopState, Batch], LoopState],
    dataset: tf.data.Dataset,
    initial_state_fn: Callable[[], LoopState] = _zero,
) -> LoopState:
    update_state = initial_state_fn()
    # `for batch in dataset` (TFF writes `iter(dataset)`: the same elements in
    # the same order). Autograph makes it a reduction over the dataset, which
    # the runtime lowers to a tensor loop; an explicit iterator it cannot.
    for batch in dataset:
        update_state = reduce_fn(update_state, batch)
    return update_state


def build_training_loop(loop_implementation: LoopImplementation) -> TrainingLoop:
    """The loop ``fn(reduce_fn, dataset, initial_state_fn) -> final state``.

    Raises:
      NotImplementedError: an unknown `loop_implementation` (TFF's error).
    """
    if loop_implementation == LoopImplementation.DATASET_ITERATOR:
        return _for_iter_dataset_fn
    if loop_implementation == LoopImplementation.DATASET_REDUCE:
        return _dataset_reduce_fn
    raise NotImplementedError(f'Unknown implementation requested: {loop_implementation}')
