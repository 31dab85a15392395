"""ResNet v2 Keras models with group (or batch) normalization (TFF's
``tff.simulation.models.resnet_models``), used by the CIFAR-100 tasks.

The architecture of He et al., "Identity Mappings in Deep Residual Networks"
(arXiv:1603.05027), as TFF builds it: an initial convolution (+ max pooling),
stages of basic or bottleneck blocks with pre-activation (norm, ReLU, conv),
1x1 projection shortcuts where shapes differ, a final norm + ReLU, global
average pooling and a softmax dense layer; L2 weight decay 1e-4 on kernels.
"""

from __future__ import annotations

import enum
from typing import Any, Callable, Iterable, Optional, Sequence

import tensorflow as tf

__all__ = [
    'NormLayer',
    'ResidualBlock',
    'create_resnet',
    'create_resnet18',
    'create_resnet34',
    'create_resnet50',
    'create_resnet101',
    'create_resnet152',
]

BATCH_NORM_DECAY = 0.997
BATCH_NORM_EPSILON = 1e-5
L2_WEIGHT_DECAY = 1e-4


class ResidualBlock(enum.Enum):
    BASIC = 'basic'
    BOTTLENECK = 'bottleneck'


class NormLayer(enum.Enum):
    GROUP_NORM = 'group_norm'
    BATCH_NORM = 'batch_norm'


def _positive_ints(value: Any, length: Optional[int] = None) -> bool:
    if not isinstance(value, Iterable):
        return False
    items = list(value)
    if length is not None and len(items) != length:
        return False
    return all(isinstance(a, int) and a > 0 for a in items)


def _normalize(x: Any, norm: NormLayer) -> Any:
    if norm is NormLayer.GROUP_NORM:
        return tf.keras.layers.GroupNormalization(axis=-1)(x)
    if norm is NormLayer.BATCH_NORM:
        return tf.keras.layers.BatchNormalization(
            axis=-1, momentum=BATCH_NORM_DECAY, epsilon=BATCH_NORM_EPSILON
        )(x)
    raise ValueError('The norm argument must be of type `NormLayer`.')


def _conv(
    x: Any,
    filters: int,
    kernel_size: Sequence[int],
    strides: Sequence[int] = (1, 1),
    padding: str = 'same',
) -> Any:
    return tf.keras.layers.Conv2D(
        filters,
        kernel_size,
        strides=strides,
        padding=padding,
        use_bias=False,
        kernel_initializer='he_normal',
        kernel_regularizer=tf.keras.regularizers.l2(L2_WEIGHT_DECAY),
    )(x)


def _norm_relu(x: Any, norm: NormLayer) -> Any:
    return tf.keras.layers.Activation('relu')(_normalize(x, norm))


def _norm_relu_conv(
    x: Any,
    filters: int,
    kernel_size: Sequence[int],
    norm: NormLayer,
    strides: Sequence[int] = (1, 1),
) -> Any:
    return _conv(_norm_relu(x, norm), filters, kernel_size, strides)


def _shortcut(inputs: Any, residual: Any, norm: NormLayer) -> Any:
    """``inputs + residual``, `inputs` first projected (1x1 conv + norm) when the shapes differ."""
    in_shape, res_shape = inputs.shape, residual.shape
    stride_rows = int(round(in_shape[1] / res_shape[1]))
    stride_cols = int(round(in_shape[2] / res_shape[2]))
    shortcut = inputs
    if stride_rows > 1 or stride_cols > 1 or in_shape[-1] != res_shape[-1]:
        shortcut = _conv(
            inputs, res_shape[-1], (1, 1), strides=(stride_rows, stride_cols), padding='valid'
        )
        shortcut = _normalize(shortcut, norm)
    return tf.keras.layers.add([shortcut, residual])


def _first_conv(
    x: Any,
    filters: int,
    kernel_size: Sequence[int],
    norm: NormLayer,
    strides: Sequence[int],
    normalize_first: bool,
) -> Any:
    if normalize_first:
        return _norm_relu_conv(x, filters, kernel_size, norm, strides)
    return _conv(x, filters, kernel_size, strides)


def _basic_block(
    inputs: Any,
    filters: int,
    norm: NormLayer,
    strides: Sequence[int] = (1, 1),
    normalize_first: bool = True,
) -> Any:
    """Two 3x3 convolutions (pre-activated), then the shortcut."""
    x = _first_conv(inputs, filters, (3, 3), norm, strides, normalize_first)
    x = _norm_relu_conv(x, filters, (3, 3), norm, strides)
    return _shortcut(inputs, x, norm)


def _bottleneck_block(
    inputs: Any,
    filters: int,
    norm: NormLayer,
    strides: Sequence[int] = (1, 1),
    normalize_first: bool = True,
) -> Any:
    """1x1, 3x3 and 1x1 (4 x `filters`) convolutions (pre-activated), then the shortcut."""
    x = _first_conv(inputs, filters, (1, 1), norm, strides, normalize_first)
    x = _norm_relu_conv(x, filters, (3, 3), norm, strides)
    x = _norm_relu_conv(x, filters * 4, (1, 1), norm, strides)
    return _shortcut(inputs, x, norm)


def create_resnet(
    input_shape: Sequence[int],
    num_classes: int = 10,
    residual_block: ResidualBlock = ResidualBlock.BOTTLENECK,
    repetitions: Optional[list] = None,
    initial_filters: int = 64,
    initial_strides: Sequence[int] = (2, 2),
    initial_kernel_size: Sequence[int] = (7, 7),
    initial_max_pooling: bool = True,
    norm_layer: NormLayer = NormLayer.GROUP_NORM,
) -> Any:
    """A ResNet v2 (channels-last images) with group or batch normalization.

    Args:
      input_shape: ``(rows, cols, channels)``, positive integers.
      num_classes: the outputs of the softmax layer.
      residual_block: `ResidualBlock.BASIC` or `ResidualBlock.BOTTLENECK`.
      repetitions: blocks per stage (filters doubling each stage); `None`:
        ``[3, 4, 6, 3]`` (ResNet-50's).
      initial_filters, initial_strides, initial_kernel_size: the first
        convolution; `initial_max_pooling`: a 3x3 max pooling after it.
      norm_layer: `NormLayer.GROUP_NORM` or `NormLayer.BATCH_NORM`.

    Returns:
      An uncompiled `tf.keras.Model`.

    Raises:
      ValueError: any argument outside the above (TFF's messages), or a
        ``channels_first`` Keras image data format.
    """
    if not _positive_ints(input_shape, 3):
        raise ValueError(
            'input_shape must be an iterable of length 3 containing only positive integers.'
        )
    if tf.keras.backend.image_data_format() != 'channels_last':
        raise ValueError(
            'Image data needs to be represented in the `channels_last` format with '
            'a three-dimensional array where the last channel represents the color '
            'channel. '
        )
    if num_classes < 1:
        raise ValueError('num_classes must be a positive integer.')
    blocks: dict = {ResidualBlock.BASIC: _basic_block, ResidualBlock.BOTTLENECK: _bottleneck_block}
    if not isinstance(residual_block, ResidualBlock):
        raise ValueError('residual_block must be of type `ResidualBlock`.')
    block_fn: Callable[..., Any] = blocks[residual_block]
    if not repetitions:
        repetitions = [3, 4, 6, 3]
    elif not _positive_ints(repetitions):
        raise ValueError('repetitions must be None or an iterable containing positive integers')
    if initial_filters < 1:
        raise ValueError('initial_filters must be a positive integer.')
    if not _positive_ints(initial_strides, 2):
        raise ValueError(
            'initial_strides must be an iterable of length 2 containing only positive integers.'
        )
    if not _positive_ints(initial_kernel_size, 2):
        raise ValueError(
            'initial_kernel_size must be an iterable of length 2 containing only positive integers.'
        )
    if not isinstance(norm_layer, NormLayer):
        raise ValueError('norm_layer must be of type `NormLayer`.')

    image = tf.keras.layers.Input(shape=tuple(input_shape))
    x = _norm_relu(_conv(image, initial_filters, initial_kernel_size, initial_strides), norm_layer)
    if initial_max_pooling:
        x = tf.keras.layers.MaxPooling2D(pool_size=(3, 3), strides=initial_strides, padding='same')(
            x
        )
    filters = initial_filters
    for stage, num_blocks in enumerate(repetitions):
        for i in range(num_blocks):
            # The very first block follows the initial convolution's own norm + ReLU.
            x = block_fn(
                x, filters=filters, norm=norm_layer, normalize_first=not (stage == 0 and i == 0)
            )
        filters *= 2
    x = _norm_relu(x, norm_layer)
    x = tf.keras.layers.GlobalAveragePooling2D()(x)
    x = tf.keras.layers.Dense(
        num_classes,
        activation='softmax',
        kernel_initializer=tf.keras.initializers.RandomNormal(stddev=0.01),
        kernel_regularizer=tf.keras.regularizers.l2(L2_WEIGHT_DECAY),
        bias_regularizer=tf.keras.regularizers.l2(L2_WEIGHT_DECAY),
    )(x)
    return tf.keras.models.Model(image, x)


def _variant(residual_block: ResidualBlock, repetitions: list, name: str) -> Callable[..., Any]:
    def create(
        input_shape: Sequence[int], num_classes: int, norm_layer: NormLayer = NormLayer.GROUP_NORM
    ) -> Any:
        return create_resnet(
            input_shape,
            num_classes,
            residual_block=residual_block,
            repetitions=repetitions,
            norm_layer=norm_layer,
        )

    create.__name__ = create.__qualname__ = name
    create.__doc__ = (
        f'A {name[len("create_") :].replace("resnet", "ResNet-")} '
        f'({residual_block.value} blocks, stages {repetitions}); see '
        '`create_resnet`.'
    )
    return create


create_resnet18 = _variant(ResidualBlock.BASIC, [2, 2, 2, 2], 'create_resnet18')
create_resnet34 = _variant(ResidualBlock.BASIC, [3, 4, 6, 3], 'create_resnet34')
create_resnet50 = _variant(ResidualBlock.BOTTLENECK, [3, 4, 6, 3], 'create_resnet50')
create_resnet101 = _variant(ResidualBlock.BOTTLENECK, [3, 4, 23, 3], 'create_resnet101')
create_resnet152 = _variant(ResidualBlock.BOTTLENECK, [3, 8, 36, 3], 'create_resnet152')
