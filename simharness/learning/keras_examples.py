"""Small Keras models for configs: ``[model] name = "keras", keras = "module:function"``.

A builder takes ``(input_shape, num_classes)`` and returns a `keras.Model`
whose outputs are logits; write your own the same way in any importable
module. ::

    [model]
    name = "keras"
    keras = "simharness.learning.keras_examples:dense"
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:  # Keras is imported when a model is built
    import keras


def dense(input_shape: Sequence[int], num_classes: int) -> keras.Model:
    """Flatten -> Dense(64, relu) -> Dense(num_classes): logits."""
    import keras  # pylint: disable=import-outside-toplevel

    return keras.Sequential(
        [
            keras.Input(tuple(input_shape)),
            keras.layers.Flatten(),
            keras.layers.Dense(64, activation='relu'),
            keras.layers.Dense(num_classes),
        ],
        name='dense',
    )


def small_cnn(input_shape: Sequence[int], num_classes: int) -> keras.Model:
    """Conv(16, 3x3) -> MaxPool -> Flatten -> Dense(num_classes), for [H, W, C] images
    (a flat input of a square number of features is read as one-channel images)."""
    import keras  # pylint: disable=import-outside-toplevel

    shape = tuple(input_shape)
    layers = [keras.Input(shape)]
    if len(shape) == 1:
        side = int(math.isqrt(shape[0]))
        if side * side != shape[0]:
            raise ValueError(f'small_cnn needs images or a square number of features, got {shape}')
        layers.append(keras.layers.Reshape((side, side, 1)))
    layers += [
        keras.layers.Conv2D(16, 3, padding='same', activation='relu'),
        keras.layers.MaxPooling2D(2),
        keras.layers.Flatten(),
        keras.layers.Dense(num_classes),
    ]
    return keras.Sequential(layers, name='small_cnn')


def next_token(input_shape: Sequence[int], num_classes: int) -> keras.Model:
    """For sequences of token ids (shakespeare, stackoverflow): Embedding(16) -> Dense(32,
    relu) -> Dense(num_classes) at every position (logits [B, L, num_classes])."""
    import keras  # pylint: disable=import-outside-toplevel

    return keras.Sequential(
        [
            keras.Input(tuple(input_shape)),
            keras.layers.Embedding(num_classes, 16),
            keras.layers.Dense(32, activation='relu'),
            keras.layers.Dense(num_classes),
        ],
        name='next_token',
    )
