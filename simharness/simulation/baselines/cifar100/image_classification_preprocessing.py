"""Client dataset preprocessing of the CIFAR-100 tasks (TFF's
``image_classification_preprocessing``)."""

from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

import tensorflow as tf

from simharness.simulation.baselines import client_spec
from simharness.simulation.baselines.client_spec import shuffle_repeat_take

__all__ = [
    'CIFAR_SHAPE',
    'NUM_EXAMPLES_PER_CLIENT',
    'TOTAL_FEATURE_SIZE',
    'build_image_map',
    'create_preprocess_fn',
]

CIFAR_SHAPE = (32, 32, 3)
TOTAL_FEATURE_SIZE = 32 * 32 * 3
#: Every CIFAR-100 client holds 500 training images: the default shuffle buffer.
NUM_EXAMPLES_PER_CLIENT = 500


def build_image_map(crop_shape: Sequence[int], distort: bool = False) -> Callable[[Any], tuple]:
    """A map from an element ``{'image', 'label', ...}`` to ``(image, label)``.

    The image is cast to float32, cropped to `crop_shape` (``(height, width,
    3)``) — a random crop and a random left-right flip with `distort`, else a
    central crop or pad (`tf.image.resize_with_crop_or_pad`) — then
    standardized (`tf.image.per_image_standardization`).
    """
    if distort:

        def crop(image: Any) -> Any:
            return tf.image.random_flip_left_right(tf.image.random_crop(image, size=crop_shape))
    else:

        def crop(image: Any) -> Any:
            return tf.image.resize_with_crop_or_pad(
                image, target_height=crop_shape[0], target_width=crop_shape[1]
            )

    def image_map(example: Any) -> tuple:
        image = crop(tf.cast(example['image'], tf.float32))
        return tf.image.per_image_standardization(image), example['label']

    return image_map


def create_preprocess_fn(
    preprocess_spec: client_spec.ClientSpec,
    crop_shape: Sequence[int] = CIFAR_SHAPE,
    distort_image: bool = False,
    num_parallel_calls: Any = tf.data.experimental.AUTOTUNE,
) -> Callable[[Any], Any]:
    """A function preprocessing a CIFAR-100 client dataset.

    In order: shuffle (unless the buffer is 1; default
    `NUM_EXAMPLES_PER_CLIENT`), repeat `num_epochs` times, take `max_elements`,
    map each image (`build_image_map`: per image, before batching, so crops
    differ within a batch), batch.

    Raises:
      TypeError: `crop_shape` is not iterable.
      ValueError: `crop_shape` is not of length 3.
    """
    if not isinstance(crop_shape, Iterable):
        raise TypeError('Argument crop_shape must be an iterable.')
    crop_shape = tuple(crop_shape)
    if len(crop_shape) != 3:
        raise ValueError(
            'The crop_shape must have length 3, corresponding to a tensor of shape '
            '[height, width, channels].'
        )
    shuffle_buffer_size = preprocess_spec.shuffle_buffer_size or NUM_EXAMPLES_PER_CLIENT
    image_map = build_image_map(crop_shape, distort_image)

    def preprocess_fn(dataset: Any) -> Any:
        dataset = shuffle_repeat_take(dataset, preprocess_spec, shuffle_buffer_size)
        dataset = dataset.map(image_map, num_parallel_calls=num_parallel_calls)
        return dataset.batch(preprocess_spec.batch_size)

    return preprocess_fn
