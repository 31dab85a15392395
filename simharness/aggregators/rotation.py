"""TFF's `HadamardTransformFactory` and `DiscreteFourierTransformFactory` (``aggregators/rotation.py``).

```
clients: each tensor -> flat float32 -> zero-padded (to 2**k | to even) -> x num_repeats:
         random signs (Rademacher) + fast Walsh-Hadamard | random phases + FFT
inner_agg_factory aggregates the rotated vectors
server:  the inverse rotations in reverse order -> unpadded, reshaped, cast back (ints rounded)
state    <inner state, global seed int64[2]>      measurements <hd|dft = inner measurements>
```
The seed starts from a timestamp (as TFF) at `initialize`; `next` moves its
counter on, so the rotations are a function of the state: the same bits on
every stack. Padded sizes are computed from the static shapes.
"""

from __future__ import annotations

import collections
import math
from typing import Any, List, Optional

import numpy as np
import tensorflow as tf

from simharness.aggregators import factory, sum_factory
from simharness.aggregators import tensor_utils as tu
from simharness.core import intrinsics
from simharness.core import types as T
from simharness.core.computation import federated_computation, tf_computation
from simharness.errors import SimharnessTypeError, SimharnessValueError
from simharness.templates import AggregationProcess, MeasuredProcessOutput

__all__ = [
    'DiscreteFourierTransformFactory',
    'HadamardTransformFactory',
    'SEED_TFF_TYPE',
    'TensorShapeError',
    'fast_walsh_hadamard_transform',
    'sample_cis',
    'sample_rademacher',
]

SEED_TF_DTYPE = tf.int64
SEED_TFF_TYPE = T.TensorType(np.int64, [2])
OUTPUT_TF_DTYPE = tf.float32


class TensorShapeError(SimharnessValueError):
    """A tensor of a shape the Hadamard transform does not take (TFF's class of that name)."""


def fast_walsh_hadamard_transform(x: Any) -> tf.Tensor:
    """The normalized Walsh-Hadamard transform of each row of `x` (shape [a, 2**k]).

    Raises:
      TensorShapeError: `x` is not of rank 2 or its statically known last
        dimension is not a power of two.
    """
    x = tf.convert_to_tensor(x)
    if x.shape.ndims != 2:
        raise TensorShapeError(f'Number of dimensions of x must be 2. Shape of x: {x.shape}')
    dim = x.shape.as_list()[-1]
    if dim is None or not (dim and (dim & (dim - 1)) == 0):
        raise TensorShapeError(
            f'The dimension of x must be a statically known power of two. Provided dimension '
            f'is: {dim}'
        )
    y, h = x, 1
    while h < dim:  # butterflies over pairs (i, i + h)
        y = tf.reshape(y, [-1, dim // (2 * h), 2, h])
        a, b = y[:, :, 0, :], y[:, :, 1, :]
        y = tf.stack([a + b, a - b], axis=2)
        h *= 2
    y = tf.reshape(y, [-1, dim])
    return y / tf.sqrt(tf.cast(dim, x.dtype))


def sample_rademacher(shape: Any, dtype: Any, seed: Any) -> tf.Tensor:
    """Uniform random +1/-1 values of `shape` and `dtype` (stateless, from `seed`)."""
    return tf.cast(tf.sign(tf.random.stateless_uniform(shape=shape, seed=seed) - 0.5), dtype)


def sample_cis(shape: Any, seed: Any, inverse: bool = False) -> tf.Tensor:
    """``e^(i theta)`` for theta uniform in [0, 2 pi) (``-theta`` when `inverse`), complex64."""
    theta = tf.random.stateless_uniform(shape, seed, minval=0, maxval=2) * math.pi
    if inverse:
        theta = -theta
    return tf.exp(tf.complex(real=0.0, imag=theta))


def _check_value_type(value_type: Any) -> None:
    if not (
        isinstance(value_type, T.TensorType)
        or (
            isinstance(value_type, T.StructType)
            and value_type.container is not None
            and factory.is_structure_of_tensors(value_type)
        )
    ):
        raise SimharnessTypeError(
            'Expected `value_type` to be `TensorType` or a struct with a Python container '
            f'containing only `TensorType`. Found type: {value_type!r}',
            actual=value_type,
        )
    if not (
        factory.is_structure_of_floats(value_type) or factory.is_structure_of_integers(value_type)
    ):
        raise SimharnessTypeError(
            'Component dtypes of `value_type` must be all integers or all floats. Found '
            f'{value_type}.',
            actual=value_type,
        )
    for leaf in T.flatten_type(value_type):
        if not leaf.is_fully_defined:
            raise SimharnessTypeError(
                f'rotations need statically known shapes, got {leaf}', actual=leaf
            )


def _num_elements(t: Any) -> int:
    return int(np.prod(t.shape)) if t.shape else 1


def _pow2(n: int) -> int:
    return 1 if n <= 1 else 2 ** math.ceil(math.log2(n))


def _seed_at(global_seed: Any, offset: int) -> tf.Tensor:
    return tf.stack([global_seed[0], global_seed[1] + offset])


def _unpad(x: tf.Tensor, t: T.TensorType) -> tf.Tensor:
    y = tf.reshape(x[: _num_elements(t)], t.shape)
    dtype = tf.as_dtype(t.dtype)
    if dtype.is_integer:
        y = tf.round(y)
    return tf.cast(y, dtype)


class _RotationFactory(factory.UnweightedAggregationFactory):
    """A rotation of each tensor before `inner_agg_factory` and its inverse after."""

    _name = ''

    def __init__(
        self,
        inner_agg_factory: Optional[factory.UnweightedAggregationFactory] = None,
        num_repeats: int = 1,
    ):
        if inner_agg_factory is None:
            inner_agg_factory = sum_factory.SumFactory()
        if not isinstance(inner_agg_factory, factory.UnweightedAggregationFactory):
            raise SimharnessTypeError(
                'Provided `inner_agg_factory` must be an UnweightedAggregationFactory. Found '
                f'{type(inner_agg_factory)}.',
                actual=type(inner_agg_factory),
            )
        if isinstance(num_repeats, bool) or not isinstance(num_repeats, int) or num_repeats < 1:
            raise SimharnessValueError(
                f'`num_repeats` should be a positive integer. Found {num_repeats}.'
            )
        self._inner_agg_factory = inner_agg_factory
        self._num_repeats = num_repeats

    def _padded_size(self, n: int) -> int:
        raise NotImplementedError  # each rotation pads its own way

    def _forward(self, x: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
        raise NotImplementedError

    def _backward(self, x: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
        raise NotImplementedError

    def create(self, value_type: factory.ValueType) -> AggregationProcess:
        _check_value_type(value_type)
        leaves: List[T.TensorType] = T.flatten_type(value_type)
        repeats = self._num_repeats
        stride = repeats * len(leaves)

        @tf_computation(value_type, SEED_TFF_TYPE)
        def client_transform(value, global_seed):
            out = []
            for i, (x, t) in enumerate(zip(tu.flatten(value), leaves)):
                x = tf.reshape(tf.cast(x, OUTPUT_TF_DTYPE), [-1])
                n = _num_elements(t)
                x = tf.concat([x, tf.zeros([self._padded_size(n) - n], OUTPUT_TF_DTYPE)], 0)
                for r in range(repeats):
                    x = self._forward(x, _seed_at(global_seed, i * repeats + r))
                out.append(x)
            return tu.pack_sequence_as(value, out)

        inner = self._inner_agg_factory.create(client_transform.type_signature.result)

        @tf_computation(client_transform.type_signature.result, SEED_TFF_TYPE)
        def server_transform(value, global_seed):
            out = []
            for i, (x, t) in enumerate(zip(tu.flatten(value), leaves)):
                for r in reversed(range(repeats)):
                    x = self._backward(x, _seed_at(global_seed, i * repeats + r))
                out.append(_unpad(x, t))
            return tu.pack_sequence_as(value, out)

        @tf_computation(SEED_TFF_TYPE)
        def next_global_seed(global_seed):
            return tf.stack([global_seed[0], global_seed[1] + stride])

        init_seed = tf_computation(
            lambda: tf.stack(
                [tf.cast(tf.timestamp() * 10**6, SEED_TF_DTYPE), tf.constant(0, SEED_TF_DTYPE)]
            )
        )
        name = self._name

        @federated_computation()
        def init_fn():
            return intrinsics.federated_zip(
                (inner.initialize(), intrinsics.federated_eval(init_seed, T.SERVER))
            )

        @federated_computation(
            init_fn.type_signature.result, T.FederatedType(value_type, T.CLIENTS)
        )
        def next_fn(state, value):
            inner_state, seed = state
            projected = intrinsics.federated_map(
                client_transform, (value, intrinsics.federated_broadcast(seed))
            )
            inner_output = inner.next(inner_state, projected)
            result = intrinsics.federated_map(server_transform, (inner_output.result, seed))
            new_state = (inner_output.state, intrinsics.federated_map(next_global_seed, seed))
            return MeasuredProcessOutput(
                state=intrinsics.federated_zip(new_state),
                result=result,
                measurements=intrinsics.federated_zip(
                    collections.OrderedDict([(name, inner_output.measurements)])
                ),
            )

        return AggregationProcess(init_fn, next_fn)


class HadamardTransformFactory(_RotationFactory):
    """Randomized fast Walsh-Hadamard transform of each tensor around `inner_agg_factory`.

    Each tensor is flattened, zero-padded to the next power of two, multiplied
    by random signs and transformed (`num_repeats` times); the inner factory
    aggregates float32 vectors; the server inverts the steps.

    Args:
      inner_agg_factory: an `UnweightedAggregationFactory` (default `SumFactory`).
      num_repeats: how many independent rotations (>= 1).

    Raises:
      TypeError: `inner_agg_factory` is not an unweighted factory.
      ValueError: `num_repeats` is not a positive int.
    """

    _name = 'hd'

    def _padded_size(self, n: int) -> int:
        return _pow2(n)

    def _forward(self, x: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
        x = x * sample_rademacher(tf.shape(x), x.dtype, seed)
        return tf.squeeze(fast_walsh_hadamard_transform(tf.expand_dims(x, 0)), 0)

    def _backward(self, x: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
        x = tf.squeeze(fast_walsh_hadamard_transform(tf.expand_dims(x, 0)), 0)
        return x * sample_rademacher(tf.shape(x), x.dtype, seed)


class DiscreteFourierTransformFactory(_RotationFactory):
    """Randomized discrete Fourier transform of each tensor around `inner_agg_factory`.

    Each tensor is flattened, padded to an even size, packed into d/2 complex
    values, rotated by random phases, transformed by `tf.signal.fft`,
    unpacked and scaled by ``1/sqrt(d/2)`` (`num_repeats` times).

    Args and Raises are those of `HadamardTransformFactory`.
    """

    _name = 'dft'

    def _padded_size(self, n: int) -> int:
        return n + n % 2

    def _forward(self, x: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
        x = tf.reshape(x, [2, -1])
        c = tf.complex(real=x[0], imag=x[1])
        c = tf.signal.fft(c * sample_cis(tf.shape(c), seed, inverse=False))
        x = tf.concat([tf.math.real(c), tf.math.imag(c)], axis=0)
        return x / tf.cast(tf.sqrt(tf.cast(tf.size(x), tf.float32) / 2.0), OUTPUT_TF_DTYPE)

    def _backward(self, x: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
        x = x * tf.sqrt(tf.cast(tf.size(x), x.dtype) / 2.0)
        x = tf.reshape(x, [2, -1])
        c = tf.signal.ifft(tf.complex(real=x[0], imag=x[1]))
        c = c * sample_cis(tf.shape(c), seed, inverse=True)
        return tf.concat([tf.math.real(c), tf.math.imag(c)], axis=0)
