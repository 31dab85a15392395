"""Client dataset preprocessing of the GLDv2 task (TFF's ``landmark_preprocessing``).

Each image is transformed as TFF's Keras model does (`_create_model`): for
training a random 128 x 128 crop and a random horizontal flip, for evaluation
the central crop; then values rescaled to [-1, 1]. Then shuffle, repeat, take and batch, in
TFF's order.
"""

from __future__ import annotations

from typing import Callable, Mapping, Optional

import tensorflow as tf

from simharness.simulation.baselines import client_spec
from simharness.simulation.baselines.client_spec import shuffle_repeat_take

__all__ = ['IMAGE_SIZE', 'create_preprocess_fn']

#: The most images a GLDv2 client holds: the default shuffle buffer.
_MAX_CLIENT_DATASET_SIZE = 3500
IMAGE_SIZE = 128


def _smart_resize(image: tf.Tensor) -> tf.Tensor:
    """The largest central window of the target's aspect ratio, resized bilinearly to
    128 x 128 (Keras 2's ``smart_resize``, which its crop layers use for small images)."""
    shape = tf.shape(image)
    height, width = shape[0], shape[1]
    crop_height = tf.minimum(height, width)  # the target is square
    crop_width = tf.minimum(width, height)
    h_start = (height - crop_height) // 2
    w_start = (width - crop_width) // 2
    cropped = tf.slice(image, [h_start, w_start, 0], [crop_height, crop_width, -1])
    return tf.image.resize(cropped, [IMAGE_SIZE, IMAGE_SIZE], method='bilinear')


def _create_model(is_training: bool) -> Callable[[tf.Tensor], tf.Tensor]:
    """The transform of one image of any size, as TFF's Keras model computes it.

    TFF's is a ``tf.keras.Sequential`` of ``RandomCrop``, ``RandomFlip`` and
    ``Rescaling`` (``CenterCrop`` and ``Rescaling`` for evaluation) under Keras
    2. Keras 3's crop layers need the image's height and width known when the
    dataset is traced, which decoded JPEGs of many sizes never have, so the
    same steps are written with ``tf.image`` here: a random (central) 128 x 128
    crop, or Keras 2's ``smart_resize`` of an image smaller than that; a random
    left-right flip for training; values scaled to [-1, 1].
    """

    def transform(image: tf.Tensor) -> tf.Tensor:
        channels = image.shape[-1] if image.shape.rank == 3 else None
        image = tf.cast(image, tf.float32)
        shape = tf.shape(image)
        h_diff, w_diff = shape[0] - IMAGE_SIZE, shape[1] - IMAGE_SIZE
        fits = tf.logical_and(h_diff >= 0, w_diff >= 0)

        def crop() -> tf.Tensor:
            if is_training:
                rands = tf.random.uniform([2], 0, tf.int32.max, tf.int32)
                h_start, w_start = rands[0] % (h_diff + 1), rands[1] % (w_diff + 1)
            else:
                h_start, w_start = h_diff // 2, w_diff // 2
            return tf.image.crop_to_bounding_box(image, h_start, w_start, IMAGE_SIZE, IMAGE_SIZE)

        image = tf.cond(fits, crop, lambda: _smart_resize(image))
        if is_training:
            image = tf.image.random_flip_left_right(image)
        # An RGB model's input: a JPEG decoded without a channel count is checked to have 3.
        image = tf.ensure_shape(image, [IMAGE_SIZE, IMAGE_SIZE, channels or 3])
        return image * (2.0 / 255) - 1.0

    return transform


def _map_fn(
    element: Mapping[str, tf.Tensor], model: Callable[[tf.Tensor], tf.Tensor]
) -> tuple[tf.Tensor, tf.Tensor]:
    """``(model(image/decoded), class)``."""
    return model(element['image/decoded']), element['class']


def create_preprocess_fn(
    preprocess_spec: client_spec.ClientSpec,
    is_training: bool,
    num_parallel_calls: int = tf.data.experimental.AUTOTUNE,
    debug_seed: Optional[int] = None,
) -> Callable[[tf.data.Dataset], tf.data.Dataset]:
    """A function from a GLDv2 client dataset to its batches of ``(image, class)``.

    Args:
        preprocess_spec: the `ClientSpec` (shuffle buffer default 3,500).
        is_training: random crop and flip (True) or central crop (False).
        num_parallel_calls: of the image map.
        debug_seed: the shuffle's seed (tests).
    """
    shuffle_buffer_size = preprocess_spec.shuffle_buffer_size
    if shuffle_buffer_size is None:
        shuffle_buffer_size = _MAX_CLIENT_DATASET_SIZE

    def preprocess_fn(dataset: tf.data.Dataset) -> tf.data.Dataset:
        model = _create_model(is_training)
        dataset = dataset.map(
            lambda element: _map_fn(element, model), num_parallel_calls=num_parallel_calls
        )
        dataset = shuffle_repeat_take(dataset, preprocess_spec, shuffle_buffer_size, debug_seed)
        return dataset.batch(preprocess_spec.batch_size)

    return preprocess_fn
