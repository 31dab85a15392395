"""MNIST models and EMNIST conversion for examples and tests (TFF's `tff.simulation.models.mnist`)."""

from __future__ import annotations

import collections
import importlib
import random
from typing import Any, Optional

import tensorflow as tf

__all__ = ['create_keras_model', 'create_simple_keras_model', 'keras_dataset_from_emnist']


def create_simple_keras_model(learning_rate: float = 0.1) -> Any:
    """One dense softmax layer over 784 inputs (zero kernel), compiled with SGD(`learning_rate`).

    Metrics: sparse categorical accuracy and `tff.learning.metrics.NumExamplesCounter`.
    """
    # reason: simharness.learning (Keras) is loaded only when this model is built, so that
    # importing simharness.simulation stays light.
    counters = importlib.import_module('simharness.learning.metrics.counters')
    model = tf.keras.models.Sequential(
        [
            tf.keras.layers.Input(shape=(784,)),
            tf.keras.layers.Flatten(),
            tf.keras.layers.Dense(10, tf.nn.softmax, kernel_initializer='zeros'),
        ]
    )
    model.compile(
        loss=tf.keras.losses.SparseCategoricalCrossentropy(),
        optimizer=tf.keras.optimizers.SGD(learning_rate),
        metrics=[tf.keras.metrics.SparseCategoricalAccuracy(), counters.NumExamplesCounter()],
    )
    return model


def keras_dataset_from_emnist(dataset: Any) -> Any:
    """EMNIST elements as ``OrderedDict(x=pixels flattened to [784], y=label)``."""

    def map_fn(example: Any) -> Any:
        return collections.OrderedDict(
            [('x', tf.reshape(example['pixels'], [-1])), ('y', example['label'])]
        )

    return dataset.map(map_fn)


class _DeterministicInitializer:
    """Initializers of one type with seeds base+1, base+2, ... (a fresh seed each call)."""

    def __init__(self, initializer_type: Any, base_seed: Optional[int]):
        self._initializer_type = initializer_type
        self._base_seed = random.randint(1, 10**9) if base_seed is None else base_seed

    def __call__(self) -> Any:
        self._base_seed += 1
        return self._initializer_type(seed=self._base_seed)


def create_keras_model(compile_model: bool = False) -> Any:
    """The convolutional MNIST model of TFF's example (two conv + pool, dense 1024, dropout, dense 10).

    Inputs are ``[784]`` (reshaped to 28 x 28 x 1); kernels are seeded normal
    initializers (seeds 1, 2, 3, 4). With `compile_model`, SGD(0.1) and sparse
    categorical cross-entropy.
    """
    initializer = _DeterministicInitializer(tf.keras.initializers.RandomNormal, base_seed=0)
    max_pool = tf.keras.layers.MaxPooling2D(
        (2, 2), (2, 2), padding='same', data_format='channels_last'
    )
    model = tf.keras.Sequential(
        [
            tf.keras.layers.Input(shape=(28 * 28,)),
            tf.keras.layers.Reshape(target_shape=[28, 28, 1]),
            tf.keras.layers.Conv2D(
                32,
                5,
                padding='same',
                data_format='channels_last',
                activation=tf.nn.relu,
                kernel_initializer=initializer(),
            ),
            max_pool,
            tf.keras.layers.Conv2D(
                64,
                5,
                padding='same',
                data_format='channels_last',
                activation=tf.nn.relu,
                kernel_initializer=initializer(),
            ),
            max_pool,
            tf.keras.layers.Flatten(),
            tf.keras.layers.Dense(1024, activation=tf.nn.relu, kernel_initializer=initializer()),
            tf.keras.layers.Dropout(0.4, seed=1),
            tf.keras.layers.Dense(10, kernel_initializer=initializer()),
        ]
    )
    if compile_model:
        model.compile(
            loss=tf.keras.losses.SparseCategoricalCrossentropy(),
            optimizer=tf.keras.optimizers.SGD(learning_rate=0.1),
        )
    return model
