"""The built-in architectures (``ModelSpec``): pure TensorFlow functions of a weights list.

(``simharness.learning.models`` re-exports these names beside TFF's model API.)

A model is a `ModelSpec` (a frozen dataclass: architecture name, input
shape, number of classes and a few sizes) plus module functions that take
the weights explicitly, as a list of tensors in a fixed order
(`weight_shapes`):

* ``logreg``: ``W [F, C], b [C]``, ``logits = x W + b``.
* ``mlp``: ``W0 [F, h0], b0, W1 [h0, h1], b1, ..., Wk [h_last, C], bk``, ReLU
  after every hidden layer (default hidden sizes (256, 256)).
* ``cnn`` (NHWC): ``K0 [k, k, C_in, f0], c0, K1 [k, k, f0, f1], c1,
  W [H/p * W/p * f1, C], b``: conv (SAME) -> ReLU -> max-pool p x p (VALID)
  -> conv (SAME) -> ReLU -> flatten -> dense. Default k=3, p=2,
  filters (16, 32).

Here F is the product of the input shape (dense models flatten their
input). `forward`, `loss` and `accuracy` use only TF ops and work eagerly
and inside `tf.function`; `init_weights` and `numpy_evaluate` are numpy.
There is no state: weights go in, tensors come out.
"""

from __future__ import annotations

import dataclasses
import math
import types
from typing import Any, Optional, Sequence, Union, cast

import numpy as np
import numpy.typing as npt
import tensorflow as tf

from simharness.errors import ConfigError, SimharnessTypeError, SimharnessValueError
from simharness.learning._typing import TensorLeaf

#: Examples or labels: a tensor, or anything numpy reads as an array.
ArrayLike = Union[tf.Tensor, npt.ArrayLike]

MODEL_NAMES = ('cnn', 'logreg', 'mlp')

# Options of each model (ModelSpec fields beyond name/input_shape/num_classes).
_OPTIONS = types.MappingProxyType(
    {
        'logreg': (),
        'mlp': ('hidden_sizes',),
        'cnn': ('conv_filters', 'kernel_size', 'pool_size'),
    }
)
_DEFAULTS = types.MappingProxyType(
    {
        'hidden_sizes': (256, 256),
        'conv_filters': (16, 32),
        'kernel_size': 3,
        'pool_size': 2,
    }
)


def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _int_tuple(key: str, value: Any, name: str) -> tuple[int, ...]:
    try:
        items = tuple(value)
    except TypeError:
        raise ConfigError(
            f'model {name!r}: {key} must be a sequence of positive ints, got {value!r}',
            key=key,
            value=value,
        ) from None
    if not all(_is_int(v) and v > 0 for v in items):
        raise ConfigError(
            f'model {name!r}: {key} must be a sequence of positive ints, got {value!r}',
            key=key,
            value=value,
        )
    return tuple(int(v) for v in items)


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """The architecture of a model; weights live outside, as a list.

    Options that a model does not use must be left as None; options it
    uses are filled with their defaults when None, so equal models have
    equal specs.

    Attributes:
        name: ``'logreg'``, ``'mlp'`` or ``'cnn'``.
        input_shape: shape of one example, e.g. ``(60,)`` or ``(8, 8, 1)``
            (``(H, W, C)`` for the cnn).
        num_classes: number of classes (>= 2).
        hidden_sizes: mlp only; widths of the hidden layers (non-empty).
        conv_filters: cnn only; filters of the two conv layers.
        kernel_size: cnn only; side of the square conv kernels.
        pool_size: cnn only; side and stride of the max pool.
    """

    name: str
    input_shape: tuple[int, ...]
    num_classes: int
    hidden_sizes: Optional[tuple[int, ...]] = None
    conv_filters: Optional[tuple[int, int]] = None
    kernel_size: Optional[int] = None
    pool_size: Optional[int] = None

    def __post_init__(self) -> None:
        if self.name not in _OPTIONS:
            raise ConfigError(
                f'unknown model {self.name!r}; allowed: {", ".join(repr(n) for n in MODEL_NAMES)}',
                key='name',
                value=self.name,
            )
        name = self.name
        shape = _int_tuple('input_shape', self.input_shape, name)
        if not shape:
            raise ConfigError(
                f'model {name!r}: input_shape must not be empty',
                key='input_shape',
                value=self.input_shape,
            )
        object.__setattr__(self, 'input_shape', shape)
        if not _is_int(self.num_classes) or self.num_classes < 2:
            raise ConfigError(
                f'model {name!r}: num_classes must be an int >= 2, got {self.num_classes!r}',
                key='num_classes',
                value=self.num_classes,
            )
        object.__setattr__(self, 'num_classes', int(self.num_classes))
        for key in _DEFAULTS:
            value = getattr(self, key)
            if key not in _OPTIONS[name]:
                if value is not None:
                    raise ConfigError(
                        f'model {name!r} has no option {key!r} (its options: '
                        f'{", ".join(_OPTIONS[name]) or "none"})',
                        key=key,
                        value=value,
                    )
                continue
            if value is None:
                value = _DEFAULTS[key]
            if key in ('hidden_sizes', 'conv_filters'):
                value = _int_tuple(key, value, name)
            elif not _is_int(value) or value < 1:
                raise ConfigError(
                    f'model {name!r}: {key} must be a positive int, got {value!r}',
                    key=key,
                    value=value,
                )
            object.__setattr__(self, key, value if isinstance(value, tuple) else int(value))
        if name == 'mlp' and not self.hidden_sizes:
            raise ConfigError(
                "model 'mlp' needs at least one hidden layer; use 'logreg' for none",
                key='hidden_sizes',
                value=self.hidden_sizes,
            )
        if name == 'cnn':
            filters = cast(tuple, self.conv_filters)
            pool = cast(int, self.pool_size)
            if len(shape) != 3:
                raise ConfigError(
                    f"model 'cnn' needs input_shape (H, W, C), got {shape}",
                    key='input_shape',
                    value=shape,
                )
            if len(filters) != 2:
                raise ConfigError(
                    f"model 'cnn' has two conv layers: conv_filters needs 2 values, got {filters}",
                    key='conv_filters',
                    value=filters,
                )
            if shape[0] < pool or shape[1] < pool:
                raise ConfigError(
                    f"model 'cnn': input {shape[:2]} is smaller than the pool size {pool}",
                    key='pool_size',
                    value=pool,
                )

    @property
    def num_features(self) -> int:
        """Number of input features (product of `input_shape`)."""
        return math.prod(self.input_shape)

    @property
    def weight_shapes(self) -> list[tuple[int, ...]]:
        """Shapes of the weights, in the order the functions expect them."""
        c = self.num_classes
        if self.name == 'logreg':
            return [(self.num_features, c), (c,)]
        if self.name == 'mlp':
            sizes = (self.num_features,) + cast(tuple, self.hidden_sizes) + (c,)
            shapes: list[tuple[int, ...]] = []
            for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
                shapes += [(fan_in, fan_out), (fan_out,)]
            return shapes
        h, w, cin = self.input_shape
        k, p = cast(int, self.kernel_size), cast(int, self.pool_size)
        f0, f1 = cast(tuple, self.conv_filters)
        flat = (h // p) * (w // p) * f1
        return [(k, k, cin, f0), (f0,), (k, k, f0, f1), (f1,), (flat, c), (c,)]

    @property
    def num_parameters(self) -> int:
        """Total number of scalar parameters."""
        return sum(math.prod(s) for s in self.weight_shapes)


def get_model(name: str, input_shape: Sequence[int], num_classes: int, **kwargs: Any) -> ModelSpec:
    """Builds a `ModelSpec` by name.

    Args:
        name: one of `MODEL_NAMES`: ``'logreg'``, ``'mlp'``, ``'cnn'``.
        input_shape: shape of one example.
        num_classes: number of classes.
        **kwargs: options of that model: ``hidden_sizes`` (mlp);
            ``conv_filters``, ``kernel_size``, ``pool_size`` (cnn).

    Returns:
        The validated spec.

    Raises:
        ConfigError: unknown name (the error lists the allowed ones), an
            option the model does not take, or an invalid value.
    """
    if name not in _OPTIONS:
        raise ConfigError(
            f'unknown model {name!r}; allowed: {", ".join(repr(n) for n in MODEL_NAMES)}',
            key='name',
            value=name,
        )
    for key in kwargs:
        if key not in _OPTIONS[name]:
            raise ConfigError(
                f'model {name!r} has no option {key!r} (its options: '
                f'{", ".join(_OPTIONS[name]) or "none"})',
                key=key,
                value=kwargs[key],
            )
    return ModelSpec(name, tuple(input_shape), num_classes, **kwargs)


def init_weights(spec: ModelSpec, seed: int) -> list[np.ndarray]:
    """Initial weights: Glorot-uniform kernels, zero biases, float32.

    One ``np.random.default_rng(seed)`` draws the kernels in order
    (biases draw nothing): kernel i is ``rng.uniform(-l, l, shape)`` in
    float64, then cast to float32, with ``l = sqrt(6 / (fan_in +
    fan_out))``. For a dense kernel ``[a, b]`` the fans are a and b; for a
    conv kernel ``[k, k, cin, cout]`` they are ``k*k*cin`` and ``k*k*cout``
    (the Keras convention).

    Args:
        spec: the model.
        seed: the seed (an int >= 0).

    Returns:
        A list of float32 arrays with `spec.weight_shapes`.

    Raises:
        SimharnessTypeError: `seed` is not an int.
        SimharnessValueError: `seed` is negative.
    """
    if not _is_int(seed):
        raise SimharnessTypeError(
            f'seed must be an int, got {seed!r}', expected=int, actual=type(seed)
        )
    if seed < 0:
        raise SimharnessValueError(f'seed must be >= 0, got {seed}')
    rng = np.random.default_rng(int(seed))
    weights = []
    for shape in spec.weight_shapes:
        if len(shape) == 1:
            weights.append(np.zeros(shape, np.float32))
            continue
        receptive = math.prod(shape[:-2])
        fan_in, fan_out = receptive * shape[-2], receptive * shape[-1]
        limit = math.sqrt(6.0 / (fan_in + fan_out))
        weights.append(rng.uniform(-limit, limit, size=shape).astype(np.float32))
    return weights


def reference_mlp_spec() -> ModelSpec:
    """The MLP 60 -> 256 -> 256 -> 10 of the FedAvg reference workload."""
    return ModelSpec('mlp', (60,), 10, hidden_sizes=(256, 256))


def reference_mlp_init() -> list[np.ndarray]:
    """Initial weights of the reference workload (fedavg-synthetic-mlp.md §2).

    Returns:
        ``[W0, b0, W1, b1, W2, b2]`` float32: Glorot uniform from
        ``np.random.default_rng(1)`` in the order W0, W1, W2; zero biases.
        83,978 parameters.
    """
    return init_weights(reference_mlp_spec(), seed=1)


def _shape_of(w: TensorLeaf) -> tf.TensorShape:
    shape = getattr(w, 'shape', None)
    return tf.TensorShape(shape if shape is not None else np.shape(w))


def _check_weights(spec: ModelSpec, weights: Sequence[TensorLeaf]) -> list[TensorLeaf]:
    if isinstance(weights, dict) or not isinstance(weights, (list, tuple)):
        raise SimharnessTypeError(
            f'model {spec.name!r}: weights must be a list of tensors in the '
            f'order of weight_shapes, got {type(weights).__name__}',
            expected=list,
            actual=type(weights),
        )
    expected = spec.weight_shapes
    if len(weights) != len(expected):
        raise SimharnessValueError(
            f'model {spec.name!r} has {len(expected)} weight tensors {expected}, got {len(weights)}'
        )
    for i, (w, shape) in enumerate(zip(weights, expected)):
        actual = _shape_of(w)
        if not actual.is_compatible_with(shape):
            raise SimharnessValueError(
                f'model {spec.name!r}: weight {i} must have shape {shape}, got {actual}'
            )
        dtype = getattr(w, 'dtype', None)
        if dtype is not None and tf.as_dtype(dtype) != tf.float32:
            raise SimharnessTypeError(
                f'model {spec.name!r}: weight {i} must be float32, got {tf.as_dtype(dtype).name}',
                expected=tf.float32,
                actual=dtype,
            )
    return list(weights)


def _flat_input(spec: ModelSpec, x: ArrayLike) -> tf.Tensor:
    """x as a float32 tensor [B, *input_shape] (cnn) or [B, F] (dense models)."""
    x = tf.convert_to_tensor(x)
    if not x.dtype.is_floating and not x.dtype.is_integer:
        raise SimharnessTypeError(
            f'model {spec.name!r}: x must be numeric, got {x.dtype.name}',
            expected=tf.float32,
            actual=x.dtype,
        )
    x = tf.cast(x, tf.float32)
    if x.shape.rank is not None:
        trailing = x.shape[1:]
        if not (
            trailing.is_compatible_with(spec.input_shape)
            or trailing.is_compatible_with((spec.num_features,))
        ):
            raise SimharnessValueError(
                f'model {spec.name!r}: x must have shape [batch, '
                f'{", ".join(map(str, spec.input_shape))}] or [batch, '
                f'{spec.num_features}], got {x.shape}'
            )
    if spec.name == 'cnn':
        return tf.reshape(x, (-1,) + spec.input_shape)
    return tf.reshape(x, (-1, spec.num_features))


def forward(spec: ModelSpec, weights: Sequence[TensorLeaf], x: ArrayLike) -> tf.Tensor:
    """The logits ``[B, num_classes]`` of a batch.

    Only TF ops: works eagerly and when traced by `tf.function`, and is
    differentiable in the weights.

    Args:
        spec: the model.
        weights: tensors (or arrays, variables) with `spec.weight_shapes`,
            float32.
        x: a batch ``[B, *input_shape]`` or ``[B, F]``; cast to float32.

    Returns:
        float32 logits.

    Raises:
        SimharnessTypeError: weights not a list, or not float32.
        SimharnessValueError: wrong number or shapes of weights, or a batch
            whose shape does not fit the model.
    """
    w = _check_weights(spec, weights)
    h = _flat_input(spec, x)
    if spec.name == 'cnn':
        p = cast(int, spec.pool_size)
        h = tf.nn.relu(tf.nn.conv2d(h, w[0], strides=1, padding='SAME') + w[1])
        h = tf.nn.max_pool2d(h, ksize=p, strides=p, padding='VALID')
        h = tf.nn.relu(tf.nn.conv2d(h, w[2], strides=1, padding='SAME') + w[3])
        h = tf.reshape(h, (-1, spec.weight_shapes[4][0]))
        return tf.matmul(h, w[4]) + w[5]
    for i in range(0, len(w) - 2, 2):
        h = tf.nn.relu(tf.matmul(h, w[i]) + w[i + 1])
    return tf.matmul(h, w[-2]) + w[-1]


def _labels(spec: ModelSpec, y: ArrayLike) -> tf.Tensor:
    y = tf.convert_to_tensor(y)
    if not y.dtype.is_integer:
        raise SimharnessTypeError(
            f'model {spec.name!r}: labels must be integers, got {y.dtype.name}',
            expected=tf.int32,
            actual=y.dtype,
        )
    if y.dtype not in (tf.int32, tf.int64):
        y = tf.cast(y, tf.int32)
    return tf.reshape(y, [-1])


def loss(spec: ModelSpec, weights: Sequence[TensorLeaf], x: ArrayLike, y: ArrayLike) -> tf.Tensor:
    """Mean sparse softmax cross-entropy of a batch (a float32 scalar).

    Args:
        spec: the model.
        weights: see `forward`.
        x: a batch, see `forward`.
        y: integer labels ``[B]`` in ``[0, num_classes)``.

    Returns:
        ``mean_i CE(logits_i, y_i)``.
    """
    logits = forward(spec, weights, x)
    return tf.reduce_mean(
        tf.nn.sparse_softmax_cross_entropy_with_logits(labels=_labels(spec, y), logits=logits)
    )


def accuracy(
    spec: ModelSpec, weights: Sequence[TensorLeaf], x: ArrayLike, y: ArrayLike
) -> tf.Tensor:
    """Fraction of the batch whose argmax logit equals the label (float32)."""
    logits = forward(spec, weights, x)
    y = _labels(spec, y)
    pred = tf.argmax(logits, axis=1, output_type=y.dtype)
    return tf.reduce_mean(tf.cast(tf.equal(pred, y), tf.float32))


# ------------------------------------------------------------ numpy evaluator


def _np_conv_same(x: np.ndarray, k: np.ndarray) -> np.ndarray:
    """NHWC convolution, stride 1, TF 'SAME' padding, float32 (im2col + matmul)."""
    kh, kw, cin, cout = k.shape
    ph, pw = kh - 1, kw - 1
    xp = np.pad(x, ((0, 0), (ph // 2, ph - ph // 2), (pw // 2, pw - pw // 2), (0, 0)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (kh, kw), axis=(1, 2))
    # win: [B, H, W, C, kh, kw] -> [B, H, W, kh, kw, C], matching k's layout.
    b, h, w = win.shape[:3]
    cols = win.transpose(0, 1, 2, 4, 5, 3).reshape(b * h * w, kh * kw * cin)
    return (cols @ k.reshape(kh * kw * cin, cout)).reshape(b, h, w, cout)


def _np_max_pool(x: np.ndarray, p: int) -> np.ndarray:
    """p x p max pool, stride p, TF 'VALID' padding (drops the remainder)."""
    b, h, w, c = x.shape
    hp, wp = h // p, w // p
    x = x[:, : hp * p, : wp * p, :].reshape(b, hp, p, wp, p, c)
    return x.max(axis=(2, 4))


def _np_logits(spec: ModelSpec, w: list[np.ndarray], x: np.ndarray) -> np.ndarray:
    if spec.name == 'cnn':
        h = np.maximum(_np_conv_same(x, w[0]) + w[1], 0)
        h = _np_max_pool(h, cast(int, spec.pool_size))
        h = np.maximum(_np_conv_same(h, w[2]) + w[3], 0)
        return h.reshape(h.shape[0], -1) @ w[4] + w[5]
    h = x
    for i in range(0, len(w) - 2, 2):
        h = np.maximum(h @ w[i] + w[i + 1], 0)
    return h @ w[-2] + w[-1]


def numpy_evaluate(
    spec: ModelSpec, weights: Sequence[TensorLeaf], x: Any, y: Any, batch_size: int = 8192
) -> tuple[float, float]:
    """The shared numpy evaluator (fedavg-synthetic-mlp.md §6).

    The forward pass runs in float32 numpy (the cnn through an im2col
    convolution, same math as `forward`); the log-sum-exp of the logits and
    the accumulation of the per-example losses run in float64. Examples are
    processed in chunks of `batch_size` to bound memory; the result does
    not depend on it beyond float32 rounding.

    Args:
        spec: the model.
        weights: arrays (or eager tensors) with `spec.weight_shapes`.
        x: examples ``[N, *input_shape]`` or ``[N, F]``: an array, or anything with a
            `shape` that gives rows by slices (`simharness.data.client_data.StackedRows`).
        y: integer labels ``[N]`` in ``[0, num_classes)``.
        batch_size: chunk size (>= 1).

    Returns:
        ``(mean cross-entropy, accuracy)`` as Python floats.

    Raises:
        SimharnessValueError: no examples, mismatched x and y, labels out of
            range, or weights / examples with the wrong shapes.
        SimharnessTypeError: non-integer labels.
    """
    w = [np.asarray(v) for v in _check_weights(spec, weights)]
    w = [v.astype(np.float32, copy=False) for v in w]
    if not (hasattr(x, 'shape') and hasattr(x, '__getitem__')):
        x = np.asarray(x)  # else an array, or rows read a batch at a time (`StackedRows`)
    y = np.asarray(y)
    if not np.issubdtype(y.dtype, np.integer):
        raise SimharnessTypeError(
            f'labels must be integers, got {y.dtype}', expected=np.int32, actual=y.dtype
        )
    y = y.reshape(-1)
    n = y.shape[0]
    if n == 0:
        raise SimharnessValueError('numpy_evaluate needs at least one example')
    if x.shape[0] != n:
        raise SimharnessValueError(f'x has {x.shape[0]} examples and y has {n}')
    if x.shape[1:] not in (spec.input_shape, (spec.num_features,)):
        raise SimharnessValueError(
            f'model {spec.name!r}: x must have shape [N, '
            f'{", ".join(map(str, spec.input_shape))}] or [N, {spec.num_features}], '
            f'got {x.shape}'
        )
    if y.min() < 0 or y.max() >= spec.num_classes:
        raise SimharnessValueError(
            f'labels must be in [0, {spec.num_classes}), got range [{y.min()}, {y.max()}]'
        )
    if not _is_int(batch_size) or batch_size < 1:
        raise SimharnessValueError(f'batch_size must be an int >= 1, got {batch_size!r}')
    total = 0.0
    correct = 0
    for start in range(0, n, batch_size):
        xb = np.asarray(x[start : start + batch_size]).astype(np.float32, copy=False)
        xb = xb.reshape((-1,) + spec.input_shape if spec.name == 'cnn' else (len(xb), -1))
        yb = y[start : start + batch_size]
        logits32 = _np_logits(spec, w, xb)
        correct += int(np.count_nonzero(np.argmax(logits32, axis=1) == yb))
        logits = logits32.astype(np.float64)
        m = logits.max(axis=1)
        lse = m + np.log(np.exp(logits - m[:, None]).sum(axis=1))
        total += float(np.sum(lse - logits[np.arange(len(yb)), yb]))
    return total / n, correct / n
