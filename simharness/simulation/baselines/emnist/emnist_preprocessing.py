"""Client dataset preprocessing of the EMNIST tasks (TFF's ``emnist_preprocessing``)."""

from __future__ import annotations

from typing import Any, Callable, Optional

import tensorflow as tf

from simharness.simulation.baselines import client_spec
from simharness.simulation.baselines.client_spec import shuffle_repeat_take

__all__ = ['MAX_CLIENT_DATASET_SIZE', 'create_preprocess_fn']

#: The largest EMNIST client dataset: the default shuffle buffer.
MAX_CLIENT_DATASET_SIZE = 418


def _to_image_and_label(element: Any) -> tuple:
    return tf.expand_dims(element['pixels'], axis=-1), element['label']


def _to_autoencoder_pair(element: Any) -> tuple:
    x = 1 - tf.reshape(element['pixels'], (-1, 28 * 28))
    return x, x


_MAPPINGS = {'character_recognition': _to_image_and_label, 'autoencoder': _to_autoencoder_pair}


def create_preprocess_fn(
    preprocess_spec: client_spec.ClientSpec,
    emnist_task: str = 'character_recognition',
    num_parallel_calls: Any = tf.data.experimental.AUTOTUNE,
    debug_seed: Optional[int] = None,
) -> Callable[[Any], Any]:
    """A function preprocessing an EMNIST client dataset.

    In order: shuffle (unless the buffer is 1; default `MAX_CLIENT_DATASET_SIZE`),
    repeat `num_epochs` times, take `max_elements`, batch, then map each batch to
    ``(pixels[..., None], label)`` (``'character_recognition'``) or to
    ``(x, x)`` with ``x = 1 - pixels`` flattened to 784 (``'autoencoder'``).

    Args:
      preprocess_spec: the `ClientSpec`.
      emnist_task: ``'character_recognition'`` or ``'autoencoder'``.
      num_parallel_calls: for `tf.data.Dataset.map`.
      debug_seed: seeds the shuffle and makes the map deterministic, for tests.

    Raises:
      ValueError: an unknown `emnist_task`.
    """
    if emnist_task not in _MAPPINGS:
        raise ValueError('emnist_task must be one of "character_recognition" or "autoencoder".')
    mapping_fn = _MAPPINGS[emnist_task]
    shuffle_buffer_size = preprocess_spec.shuffle_buffer_size or MAX_CLIENT_DATASET_SIZE

    def preprocess_fn(dataset: Any) -> Any:
        dataset = shuffle_repeat_take(
            dataset, preprocess_spec, shuffle_buffer_size, seed=debug_seed
        )
        dataset = dataset.batch(preprocess_spec.batch_size, drop_remainder=False)
        return dataset.map(
            mapping_fn, num_parallel_calls=num_parallel_calls, deterministic=debug_seed is not None
        )

    return preprocess_fn
