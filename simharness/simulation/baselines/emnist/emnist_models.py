"""EMNIST Keras models of the baseline tasks (TFF's ``baselines/emnist/emnist_models``).

Same layers, shapes and parameter counts as TFF's; inputs are declared with
`tf.keras.Input` (Keras 3).
"""

from __future__ import annotations

import random
from typing import Any, Optional

import tensorflow as tf

__all__ = [
    'create_autoencoder_model',
    'create_conv_dropout_model',
    'create_original_fedavg_cnn_model',
    'create_two_hidden_layer_model',
]


class _DeterministicInitializer:
    """Initializers of one type seeded base+1, base+2, ... (a random base when `None`)."""

    def __init__(self, initializer_type: Any, base_seed: Optional[int]):
        self._initializer_type = initializer_type
        self._base_seed = random.randint(1, 1_000_000_000) if base_seed is None else base_seed

    def __call__(self) -> Any:
        self._base_seed += 1
        return self._initializer_type(seed=self._base_seed)


def _glorot(debug_seed: Optional[int]) -> _DeterministicInitializer:
    return _DeterministicInitializer(tf.keras.initializers.GlorotUniform, debug_seed)


def _num_classes(only_digits: bool) -> int:
    return 10 if only_digits else 62


def create_conv_dropout_model(only_digits: bool = True, debug_seed: Optional[int] = None) -> Any:
    """Conv(32, 3x3) - Conv(64, 3x3) - MaxPool(2) - Dropout(.25) - Dense(128) - Dropout(.5) -
    Dense(10 or 62, softmax), on ``[28, 28, 1]`` images (1,199,882 parameters for digits).

    Args:
      only_digits: 10 output classes (else 62).
      debug_seed: seeds the initializers (deterministic weights), for tests.

    Returns:
      An uncompiled `tf.keras.Model`.
    """
    init = _glorot(debug_seed)
    return tf.keras.Sequential(
        [
            tf.keras.Input(shape=(28, 28, 1)),
            tf.keras.layers.Conv2D(
                32,
                kernel_size=(3, 3),
                activation='relu',
                data_format='channels_last',
                kernel_initializer=init(),
            ),
            tf.keras.layers.Conv2D(
                64,
                kernel_size=(3, 3),
                activation='relu',
                data_format='channels_last',
                kernel_initializer=init(),
            ),
            tf.keras.layers.MaxPool2D(pool_size=(2, 2), data_format='channels_last'),
            tf.keras.layers.Dropout(0.25),
            tf.keras.layers.Flatten(),
            tf.keras.layers.Dense(128, activation='relu', kernel_initializer=init()),
            tf.keras.layers.Dropout(0.5),
            tf.keras.layers.Dense(
                _num_classes(only_digits), activation=tf.nn.softmax, kernel_initializer=init()
            ),
        ]
    )


def create_original_fedavg_cnn_model(
    only_digits: bool = True, debug_seed: Optional[int] = None
) -> Any:
    """The CNN of the FedAvg paper (McMahan et al. 2017, arXiv:1602.05629): two 5x5 convs
    (32, 64 filters, same padding) each followed by 2x2 max pooling, Dense(512), then
    Dense(10 or 62, softmax); 1,663,370 parameters for digits.

    Args:
      only_digits: 10 output classes (else 62).
      debug_seed: seeds the initializers (deterministic weights), for tests.

    Returns:
      An uncompiled `tf.keras.Model`.
    """
    init = _glorot(debug_seed)

    def conv(filters: int) -> Any:
        return tf.keras.layers.Conv2D(
            filters,
            kernel_size=5,
            padding='same',
            data_format='channels_last',
            activation=tf.nn.relu,
            kernel_initializer=init(),
        )

    def pool() -> Any:
        return tf.keras.layers.MaxPooling2D(
            pool_size=(2, 2), padding='same', data_format='channels_last'
        )

    return tf.keras.Sequential(
        [
            tf.keras.Input(shape=(28, 28, 1)),
            conv(32),
            pool(),
            conv(64),
            pool(),
            tf.keras.layers.Flatten(),
            tf.keras.layers.Dense(512, activation=tf.nn.relu, kernel_initializer=init()),
            tf.keras.layers.Dense(
                _num_classes(only_digits), activation=tf.nn.softmax, kernel_initializer=init()
            ),
        ]
    )


def create_two_hidden_layer_model(
    only_digits: bool = True, hidden_units: int = 200, debug_seed: Optional[int] = None
) -> Any:
    """``[28, 28, 1]`` images flattened, two ReLU layers of `hidden_units`, then
    Dense(10 or 62, softmax) (199,210 parameters for digits with 200 units, as the
    FedAvg paper's 2NN).

    Raises:
      ValueError: `hidden_units` is not positive.
    """
    if hidden_units < 1:
        raise ValueError('hidden_units must be a positive integer.')
    init = _glorot(debug_seed)
    return tf.keras.Sequential(
        [
            tf.keras.Input(shape=(28, 28, 1)),
            tf.keras.layers.Reshape(target_shape=(28 * 28,)),
            tf.keras.layers.Dense(hidden_units, activation=tf.nn.relu, kernel_initializer=init()),
            tf.keras.layers.Dense(hidden_units, activation=tf.nn.relu, kernel_initializer=init()),
            tf.keras.layers.Dense(
                _num_classes(only_digits), activation=tf.nn.softmax, kernel_initializer=init()
            ),
        ]
    )


def create_autoencoder_model(debug_seed: Optional[int] = None) -> Any:
    """The bottleneck autoencoder of Hinton & Salakhutdinov (Science 2006) on 784 inputs:
    Dense widths 1000, 500, 250, 30 (linear), 250, 500, 1000, 784, sigmoid elsewhere;
    2,837,314 parameters.
    """
    init = _glorot(debug_seed)
    widths = [
        (1000, 'sigmoid'),
        (500, 'sigmoid'),
        (250, 'sigmoid'),
        (30, 'linear'),
        (250, 'sigmoid'),
        (500, 'sigmoid'),
        (1000, 'sigmoid'),
        (784, 'sigmoid'),
    ]
    return tf.keras.Sequential(
        [tf.keras.Input(shape=(784,))]
        + [tf.keras.layers.Dense(w, activation=a, kernel_initializer=init()) for w, a in widths]
    )
