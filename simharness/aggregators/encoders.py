"""The tensor encoders `EncodedSumFactory` uses: identity and uniform quantization.

TFF builds these from ``tensorflow_model_optimization``'s tensor_encoding
(``te.encoders.as_gather_encoder(te.encoders.uniform_quantization(bits), spec)``).
That package does not import under TF 2.21 / Keras 3 (its top-level
``__init__`` imports its Keras modules, which need ``tf_keras``), so the two
encoders TFF's factory methods use are written here, with te's
`GatherEncoder` interface:

```
initial_state() -> state             get_params(state) -> (encode, decode_before_sum, decode_after_sum)
encode(x, params) -> (encoded_x, state_update_tensors)
decode_before_sum(encoded_x, params) (per client, in the accumulate of federated_aggregate)
decode_after_sum(summed, params, num_summands)  update_state(state, state_update_tensors)
```

uniform_quantization(bits, min_max=None, stochastic=True) (te's Flatten ->
UniformQuantization -> Bitpacking): ``x`` flattened, ``min_x, max_x`` its
extremes (or `min_max`, with ``x`` clipped to it), ``q = (x - min_x) /
(max_x - min_x) * (2**bits - 1)`` (0 where ``max_x == min_x``), rounded
stochastically (up with probability ``q - floor(q)``) or to nearest;
decoded as ``q / (2**bits - 1) * (max_x - min_x) + min_x``. Without
`min_max` the decode does not commute with sum, so it runs per client before
the sum; with `min_max` the ints are summed and ``min_x * num_summands`` added.

Differences from te: the quantized ints travel as ``uint8`` (bits <= 8) or
``uint16`` rather than te's 28-bits-per-int32 bit packing (the same values,
lossless either way); the stochastic rounding is seeded with a fingerprint of
the client's value (as our `StochasticDiscretizationFactory`), not an
unseeded op, so its bits match on every stack and rerun.
"""

from __future__ import annotations

import collections
import enum
from typing import Any, Optional, Sequence

import numpy as np
import tensorflow as tf

from simharness.aggregators import tensor_utils as tu

__all__ = [
    'GatherEncoder',
    'StateAggregationMode',
    'as_gather_encoder',
    'identity',
    'uniform_quantization',
]


class StateAggregationMode(enum.Enum):
    """How the state update tensors of the clients combine (te's modes)."""

    SUM = 1
    MIN = 2
    MAX = 3
    STACK = 4


class _Encoder:
    """An encoder not yet bound to a value spec (what te's ``encoders.*`` return)."""

    name = 'encoder'
    commutes_with_sum = True

    def params(self) -> Any:
        return ()

    def encode(self, x: tf.Tensor, params: Any) -> Any:
        raise NotImplementedError

    def decode(self, encoded: Any, params: Any, num_summands: Optional[tf.Tensor]) -> tf.Tensor:
        raise NotImplementedError


class _Identity(_Encoder):
    name = 'identity'

    def encode(self, x, params):
        del params
        return tf.identity(x)

    def decode(self, encoded, params, num_summands):
        del params, num_summands
        return tf.identity(encoded)


def _value_seed(x: tf.Tensor) -> tf.Tensor:
    return tf.stack([tu.fingerprint([x]), tf.constant(0x5EED, tf.int64)])


class _UniformQuantization(_Encoder):
    name = 'uniform_quantization'

    def __init__(self, bits: int, min_max: Optional[Sequence[float]], stochastic: bool):
        if isinstance(bits, bool) or not isinstance(bits, int) or not 1 <= bits <= 16:
            raise ValueError(
                f'The bits argument must be an integer between 1 and 16, got {bits!r}.'
            )
        if min_max is not None:
            if not isinstance(min_max, (list, tuple)) or len(min_max) != 2:
                raise ValueError(
                    f'The min_max argument must be a list with two elements, got {min_max!r}.'
                )
            if min_max[0] >= min_max[1]:
                raise ValueError(
                    'The first element of the min_max argument must be smaller '
                    f'than the second element, got {min_max!r}.'
                )
        if not isinstance(stochastic, bool):
            raise TypeError(f'The stochastic argument must be a bool, got {stochastic!r}.')
        self.bits = bits
        self.min_max = None if min_max is None else [float(v) for v in min_max]
        self.stochastic = stochastic
        self.commutes_with_sum = min_max is not None
        self.int_dtype = tf.uint8 if bits <= 8 else tf.uint16

    def params(self):
        params = collections.OrderedDict(max_value=np.float32(2**self.bits - 1))
        if self.min_max is not None:
            params['min_max'] = np.array(self.min_max, np.float32)
        return params

    def encode(self, x, params):
        flat = tf.reshape(x, [-1])
        if self.min_max is not None:
            mm = tf.cast(params['min_max'], flat.dtype)
            min_x, max_x = mm[0], mm[1]
            flat = tf.clip_by_value(flat, min_x, max_x)
        else:
            min_x, max_x = tf.reduce_min(flat), tf.reduce_max(flat)
        max_value = tf.cast(params['max_value'], flat.dtype)
        scaled = tf.math.divide_no_nan(flat - min_x, max_x - min_x) * max_value
        if self.stochastic:
            floored = tf.floor(scaled)
            rand = tf.random.stateless_uniform(
                tf.shape(scaled), seed=_value_seed(x), dtype=scaled.dtype
            )
            quantized = floored + tf.cast(rand < scaled - floored, scaled.dtype)
        else:
            quantized = tf.round(scaled)
        encoded = collections.OrderedDict(quantized_values=tf.cast(quantized, self.int_dtype))
        if self.min_max is None:
            encoded['min_max'] = tf.stack([min_x, max_x])
        return encoded

    def decode(self, encoded, params, num_summands):
        q = encoded['quantized_values']
        if self.min_max is None:
            mm = encoded['min_max']
        else:
            mm = tf.cast(params['min_max'], q.dtype)
        min_x, max_x = mm[0], mm[1]
        max_value = tf.cast(params['max_value'], q.dtype)
        shift = min_x if num_summands is None else min_x * tf.cast(num_summands, min_x.dtype)
        return q / max_value * (max_x - min_x) + shift


def identity() -> _Encoder:
    """te's ``encoders.identity()``: values pass unchanged."""
    return _Identity()


def uniform_quantization(
    bits: int, min_max: Optional[Sequence[float]] = None, stochastic: bool = True, **kwargs: Any
) -> _Encoder:
    """te's ``encoders.uniform_quantization(bits, **kwargs)`` (see the module docstring).

    Args:
      bits: the bits to quantize to, 1 to 16.
      min_max: an optional ``[min, max]`` range to clip to and quantize over.
      stochastic: stochastic (unbiased) rounding, else round to nearest.
      **kwargs: te's ``reduce_memory_use_by_forcing_random_op_after_clipping``
        is accepted (it changes no value); anything else is an error.
    """
    unknown = set(kwargs) - {'reduce_memory_use_by_forcing_random_op_after_clipping'}
    if unknown:
        raise TypeError(f'uniform_quantization got unexpected keyword arguments {sorted(unknown)}.')
    return _UniformQuantization(bits, min_max, stochastic)


class GatherEncoder:
    """An encoder bound to one `tf.TensorSpec`, with te's `GatherEncoder` methods."""

    def __init__(self, encoder: _Encoder, spec: tf.TensorSpec):
        if not isinstance(encoder, _Encoder):
            raise TypeError(
                'Expected an encoder from `encoders.identity()` or '
                f'`encoders.uniform_quantization(...)`, got {type(encoder)!r}.'
            )
        if not isinstance(spec, tf.TensorSpec) or not spec.shape.is_fully_defined():
            raise TypeError(f'Expected a `tf.TensorSpec` of fully defined shape, got {spec!r}.')
        if isinstance(encoder, _UniformQuantization) and not spec.dtype.is_floating:
            raise TypeError(f'Uniform quantization needs a float tensor, got {spec!r}.')
        self._encoder = encoder
        self._spec = spec

    @property
    def name(self) -> str:
        return self._encoder.name

    @property
    def tensorspec(self) -> tf.TensorSpec:
        return self._spec

    @property
    def fully_commutes_with_sum(self) -> bool:
        return self._encoder.commutes_with_sum

    @property
    def state_update_aggregation_modes(self) -> tuple:
        return ()

    def initial_state(self) -> Any:
        return ()

    def get_params(self, state: Any) -> tuple:
        del state
        params = self._encoder.params()
        after = params if self._encoder.commutes_with_sum else ()
        return params, params, after

    def encode(self, x: tf.Tensor, encode_params: Any) -> tuple:
        return self._encoder.encode(x, encode_params), ()

    def decode_before_sum(self, encoded_x: Any, decode_before_sum_params: Any) -> tf.Tensor:
        if self._encoder.commutes_with_sum:
            if isinstance(self._encoder, _UniformQuantization):
                return tf.cast(encoded_x['quantized_values'], self._spec.dtype)
            return tf.identity(encoded_x)
        decoded = self._encoder.decode(encoded_x, decode_before_sum_params, None)
        return tf.cast(tf.reshape(decoded, self._spec.shape), self._spec.dtype)

    def decode_after_sum(
        self, x: tf.Tensor, decode_after_sum_params: Any, num_summands: tf.Tensor
    ) -> tf.Tensor:
        if isinstance(self._encoder, _UniformQuantization) and self._encoder.commutes_with_sum:
            decoded = self._encoder.decode(
                collections.OrderedDict(quantized_values=x), decode_after_sum_params, num_summands
            )
            return tf.cast(tf.reshape(decoded, self._spec.shape), self._spec.dtype)
        return tf.identity(x)

    def update_state(self, state: Any, state_update_tensors: Any) -> Any:
        del state_update_tensors
        return state


def as_gather_encoder(encoder: _Encoder, spec: tf.TensorSpec) -> GatherEncoder:
    """te's ``encoders.as_gather_encoder``: `encoder` bound to `spec`."""
    return GatherEncoder(encoder, spec)
