"""MobileNetV2 with group normalization (TFF's `tff.simulation.models.mobilenet_v2`).

The same layers, names and order as TFF's (Sandler et al. 2018,
https://arxiv.org/abs/1801.04381, with ``GroupNormalization`` for batch
normalization), so a model has TFF's parameter count; TFF writes out the 17
inverted residual blocks one by one, here they are a table.
"""

from __future__ import annotations

import math
from typing import Optional

import tensorflow as tf

__all__ = ['compute_pad', 'create_mobilenet_v2']

#: The inverted residual blocks: (expansion factor, stride, filters), blocks 0 to 16.
_BLOCKS = (
    (1, 1, 16),
    (6, 2, 24),
    (6, 1, 24),
    (6, 2, 32),
    (6, 1, 32),
    (6, 1, 32),
    (6, 2, 64),
    (6, 1, 64),
    (6, 1, 64),
    (6, 1, 64),
    (6, 1, 96),
    (6, 1, 96),
    (6, 1, 96),
    (6, 2, 160),
    (6, 1, 160),
    (6, 1, 160),
    (6, 1, 320),
)


def _check_tuple_with_positive_ints(structure: object) -> bool:
    if not isinstance(structure, tuple):
        return False
    return all(isinstance(a, int) and a > 0 for a in structure)


def _make_divisible(value: float, divisor: int) -> int:
    """The larger of the divisible integer nearest `value` (at most ``value + divisor/2``)
    and the smallest divisible integer at least ``0.9 * value``."""
    a = divisor * math.floor((value + divisor / 2) / divisor)
    b = divisor * math.ceil((0.9 * value) / divisor)
    return max(a, b)


def compute_pad(
    image_shape: tuple[int, int], kernel_size: int, enforce_odd: bool = True
) -> tuple[tuple[int, int], tuple[int, int]]:
    """The (top/bottom, left/right) padding of a ``kernel_size`` convolution; with
    `enforce_odd`, one row/column less on the top/left of an even side."""
    padding = (kernel_size // 2, kernel_size // 2)
    adjust = (1 - image_shape[0] % 2, 1 - image_shape[1] % 2) if enforce_odd else (0, 0)
    return ((padding[0] - adjust[0], padding[0]), (padding[1] - adjust[1], padding[1]))


def _norm_dropout_relu(
    x: tf.Tensor, name: str, num_groups: int, dropout_prob: Optional[float], relu: bool = True
) -> tf.Tensor:
    x = tf.keras.layers.GroupNormalization(groups=num_groups, axis=-1, name=name + '_gn')(x)
    if dropout_prob:
        x = tf.keras.layers.Dropout(dropout_prob, name=name + '_dropout')(x)
    if relu:
        x = tf.keras.layers.ReLU(6.0, name=name + '_relu')(x)
    return x


def _inverted_res_block(
    input_tensor: tf.Tensor,
    expansion_factor: int,
    stride: int,
    filters: int,
    alpha: float,
    block_number: int,
    num_groups: int = 2,
    dropout_prob: Optional[float] = None,
    expansion_layer: bool = True,
) -> tf.Tensor:
    """Pointwise expansion (optional), 3x3 depthwise convolution, pointwise projection;
    a residual connection where the shapes agree."""
    image_shape = (input_tensor.shape[1], input_tensor.shape[2])
    num_input_channels = input_tensor.shape[-1]
    x = input_tensor
    prefix = f'block_{block_number}_'
    if expansion_layer:
        x = tf.keras.layers.Conv2D(
            expansion_factor * num_input_channels,
            kernel_size=1,
            padding='same',
            use_bias=False,
            activation=None,
            name=prefix + 'expand_conv',
        )(x)
        x = _norm_dropout_relu(x, prefix + 'expand', num_groups, dropout_prob)
    if stride % 2 == 0:
        padding = compute_pad(image_shape, 3, enforce_odd=True)
        x = tf.keras.layers.ZeroPadding2D(padding=padding, name=prefix + 'pad')(x)
    x = tf.keras.layers.DepthwiseConv2D(
        kernel_size=3,
        strides=stride,
        activation=None,
        use_bias=False,
        padding='same' if stride == 1 else 'valid',
        name=prefix + 'depthwise_conv',
    )(x)
    x = _norm_dropout_relu(x, prefix + 'depthwise', num_groups, dropout_prob)
    num_projection_filters = _make_divisible(int(filters * alpha), 8)
    x = tf.keras.layers.Conv2D(
        num_projection_filters,
        kernel_size=1,
        padding='same',
        use_bias=False,
        activation=None,
        name=prefix + 'project_conv',
    )(x)
    x = _norm_dropout_relu(x, prefix + 'project', num_groups, dropout_prob, relu=False)
    if num_input_channels == num_projection_filters and stride == 1:
        x = tf.keras.layers.add([input_tensor, x])
    return x


def _validate_input_args(
    input_shape: object,
    alpha: object,
    pooling: object,
    num_groups: int,
    dropout_prob: object,
    num_classes: int,
) -> None:
    if not (
        isinstance(input_shape, tuple)
        and _check_tuple_with_positive_ints(input_shape)
        and len(input_shape) == 3
    ):
        raise ValueError('input_shape must be a tuple of length 3 containing positive integers')
    if not isinstance(alpha, float) or alpha <= 0:
        raise ValueError(f'alpha must be positive, found nonpositive value {alpha}')
    if pooling not in ['avg', 'max']:
        raise ValueError(f'pooling must be one of avg or max, found {pooling}')
    if num_groups < 1:
        raise ValueError(f'num_groups must be a positive integer, found value {num_groups}')
    if dropout_prob and (
        not isinstance(dropout_prob, float) or dropout_prob < 0 or dropout_prob > 1
    ):
        raise ValueError(
            f'dropout_prob must be `None` or a float between 0 and 1, found {dropout_prob}'
        )
    if num_classes < 1:
        raise ValueError(f'num_classes must be a positive integer, found value {num_classes}')


def create_mobilenet_v2(
    input_shape: tuple[int, int, int],
    alpha: float = 1.0,
    pooling: str = 'avg',
    num_groups: int = 2,
    dropout_prob: Optional[float] = None,
    num_classes: int = 1000,
) -> tf.keras.Model:
    """A MobileNetV2 `tf.keras.Model` with group normalization and a softmax output.

    Args:
        input_shape: (rows, columns, channels), channels last.
        alpha: multiplier of the projection layers' filters (1.0: the paper's).
        pooling: 'avg' or 'max', before the last dense layer.
        num_groups: groups of the ``GroupNormalization`` layers.
        dropout_prob: None, or the rate of a dropout after each normalization.
        num_classes: the outputs.

    Raises:
        ValueError: an argument out of range (TFF's messages), or Keras images
            in ``channels_first`` format.
    """
    _validate_input_args(input_shape, alpha, pooling, num_groups, dropout_prob, num_classes)
    if tf.keras.backend.image_data_format() != 'channels_last':
        raise ValueError(
            'Image data needs to be represented in the `channels_last` format with a '
            'three-dimensional array where the last channel represents the color channel. '
        )
    img_input = tf.keras.layers.Input(shape=input_shape)
    initial_padding = compute_pad((input_shape[0], input_shape[1]), 3, enforce_odd=True)
    x = tf.keras.layers.ZeroPadding2D(initial_padding, name='initial_pad')(img_input)
    x = tf.keras.layers.Conv2D(
        _make_divisible(32 * alpha, 8),
        kernel_size=3,
        strides=(2, 2),
        padding='valid',
        use_bias=False,
        name='initial_conv',
    )(x)
    x = _norm_dropout_relu(x, 'initial', num_groups, dropout_prob)
    for block_number, (expansion_factor, stride, filters) in enumerate(_BLOCKS):
        x = _inverted_res_block(
            x,
            expansion_factor=expansion_factor,
            stride=stride,
            filters=filters,
            alpha=alpha,
            block_number=block_number,
            num_groups=num_groups,
            dropout_prob=dropout_prob,
            expansion_layer=block_number > 0,
        )
    # The paper keeps the last layer's 1280 filters for alpha < 1.
    last_block_filters = _make_divisible(1280 * alpha, 8) if alpha > 1.0 else 1280
    x = tf.keras.layers.Conv2D(last_block_filters, kernel_size=1, use_bias=False, name='last_conv')(
        x
    )
    x = _norm_dropout_relu(x, 'last', num_groups, dropout_prob)
    if pooling == 'avg':
        x = tf.keras.layers.GlobalAveragePooling2D()(x)
    else:
        x = tf.keras.layers.GlobalMaxPooling2D()(x)
    x = tf.keras.layers.Dense(num_classes, activation='softmax', use_bias=True, name='logits')(x)
    return tf.keras.models.Model(inputs=img_input, outputs=x)
