r"""Chunkers: strings <-> integer chunk tensors for IBLTs (TFF's ``iblt/chunkers.py``).

* `UTF8Chunker` (`CharacterEncoding.UTF8`): the string's bytes, zero padded to
  a whole number of chunks, ``bytes_per_chunk`` little-endian bytes a chunk
  (``dtype.size`` bytes, or ``floor(log2(max_chunk_value) / 8)``); decoding
  drops the ``\\x00`` padding.
* `BinaryChunker` (`CharacterEncoding.UNKNOWN`): a header chunk with the
  (trimmed) byte length, then the bytes bit-packed into chunks of
  ``floor(log2(max_chunk_value))`` bits (`_bitpacking`).
"""

from __future__ import annotations

import abc
import enum
import logging
import math
from typing import Optional

import numpy as np
import tensorflow as tf

from simharness.analytics.heavy_hitters.iblt._bitpacking import (
    _expand_to_binary_form,
    _pack_binary_form,
    _pack_into_int,
    _pack_into_int_6_28,
    _pack_into_int_7_28,
    _pack_into_int_8_28,
    _pack_into_int_12_28,
    _unpack_from_int,
    _unpack_from_int_6_28,
    _unpack_from_int_7_28,
    _unpack_from_int_8_28,
    _unpack_from_int_12_28,
)

__all__ = ['BinaryChunker', 'CharacterEncoding', 'Chunker', 'UTF8Chunker', 'create_chunker']

_LOG = logging.getLogger(__name__)

# TFF's bit-packing helpers live in `_bitpacking`; they stay importable here, as in TFF.
_BITPACKING_HELPERS = (
    _expand_to_binary_form,
    _pack_binary_form,
    _pack_into_int_6_28,
    _pack_into_int_7_28,
    _pack_into_int_8_28,
    _pack_into_int_12_28,
    _unpack_from_int_6_28,
    _unpack_from_int_7_28,
    _unpack_from_int_8_28,
    _unpack_from_int_12_28,
)


def _check_type(value, kind, label):
    if not isinstance(value, kind):
        raise TypeError(
            f'Expected {label} to be of type {kind.__name__}, found {type(value).__name__}.'
        )


class Chunker(abc.ABC):
    """Encodes strings into integer chunk tensors and decodes them back."""

    @property
    @abc.abstractmethod
    def dtype(self) -> tf.dtypes.DType:
        """The dtype of the encoded chunks."""

    @abc.abstractmethod
    def get_num_chunks(self) -> int:
        """The number of chunks each string is encoded into."""

    @abc.abstractmethod
    def encode_tensorflow(self, input_strings: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """``(num_strings,)`` strings -> ``(encoded (num_strings, num_chunks), trimmed strings)``."""

    @abc.abstractmethod
    def decode_tensorflow(self, encoded_chunks: tf.Tensor) -> tf.Tensor:
        """``(num_strings, num_chunks)`` chunks -> ``(num_strings,)`` strings."""


class CharacterEncoding(enum.Enum):
    """Character encodings of IBLT strings."""

    UNKNOWN = 0  # Unknown encoding, or binary non-character data.
    UTF8 = enum.auto()


_DEFAULT_DTYPE = tf.int64
# The DType `BinaryChunker` uses internally for string lengths.
_BINARY_CHUNKER_STRING_LEN_DTYPE = tf.int32


def create_chunker(
    *,
    string_max_bytes: int,
    encoding: CharacterEncoding = CharacterEncoding.UTF8,
    max_chunk_value: Optional[int] = None,
    dtype: tf.dtypes.DType = _DEFAULT_DTYPE,
) -> Chunker:
    """The `Chunker` for `encoding`: `UTF8Chunker` (UTF8) or `BinaryChunker` (UNKNOWN).

    Raises:
      ValueError: an unsupported `encoding`, or arguments the chunker rejects.
    """
    if encoding == CharacterEncoding.UTF8:
        return UTF8Chunker(
            string_max_bytes=string_max_bytes, max_chunk_value=max_chunk_value, dtype=dtype
        )
    if encoding == CharacterEncoding.UNKNOWN:
        return BinaryChunker(
            string_max_bytes=string_max_bytes, max_chunk_value=max_chunk_value, dtype=dtype
        )
    raise ValueError(f'Unsupported encoding: {encoding}')


class BinaryChunker(Chunker):
    """Encodes binary strings (any encoding) into chunks in ``[0, max_chunk_value]``.

    A header chunk holds each string's byte length (to strip the padding on
    decoding), followed by the bytes packed ``floor(log2(max_chunk_value))``
    bits a chunk.

    Args:
      string_max_bytes: the longest string, in bytes (longer ones are trimmed).
      max_chunk_value: the largest chunk value; defaults to ``dtype.max``.
      dtype: `tf.int32` or `tf.int64` (default).

    Raises:
      TypeError: an argument of the wrong type.
      ValueError: `string_max_bytes` not in ``[1, max_chunk_value]``, a bad
        `dtype`, or `max_chunk_value` not in ``[255, dtype.max]``.
    """

    def __init__(
        self,
        *,
        string_max_bytes: int,
        max_chunk_value: Optional[int] = None,
        dtype: tf.dtypes.DType = _DEFAULT_DTYPE,
    ):
        _check_type(string_max_bytes, int, 'string_max_bytes')
        _check_type(dtype, tf.dtypes.DType, 'dtype')
        if max_chunk_value is None:
            max_chunk_value = dtype.max
        _check_type(max_chunk_value, int, 'max_chunk_value')
        if string_max_bytes <= 0 or string_max_bytes > max_chunk_value:
            raise ValueError(
                f'string_max_bytes must be between [1, {max_chunk_value=}]. '
                f'Found: {string_max_bytes}'
            )
        if dtype not in (tf.int32, tf.int64):
            raise ValueError(f'`dtype` must be either `tf.int32` or `tf.int64`.Found: {dtype}')
        if max_chunk_value < tf.uint8.max or max_chunk_value > dtype.max:
            raise ValueError(
                f'`max_chunk_value must be between [{tf.uint8.max}, {dtype.max=}]. '
                f'Found: {max_chunk_value}'
            )
        self._string_max_bytes = string_max_bytes
        self._dtype = dtype
        self._max_chunk_value = max_chunk_value
        self._chunk_value_bitrange = math.floor(math.log2(max_chunk_value))
        self._num_data_chunks = math.ceil(string_max_bytes * 8 / self._chunk_value_bitrange)
        self._num_header_chunks = (
            1  # the length fits one chunk: string_max_bytes <= max_chunk_value
        )
        _LOG.debug(
            'BinaryChunker: string_max_bytes=%s dtype=%s max_chunk_value=%s bitrange=%s '
            'data_chunks=%s',
            string_max_bytes,
            dtype,
            max_chunk_value,
            self._chunk_value_bitrange,
            self._num_data_chunks,
        )

    @property
    def dtype(self) -> tf.dtypes.DType:
        return self._dtype

    def get_num_chunks(self) -> int:
        return self._num_data_chunks + self._num_header_chunks

    @tf.function(input_signature=[tf.TensorSpec(shape=[None], dtype=tf.string)])
    def encode_tensorflow(self, input_strings: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """``(num_strings,)`` strings -> ``([length, packed bytes...] chunks, trimmed strings)``."""
        trimmed = tf.strings.substr(input_strings, pos=0, len=self._string_max_bytes, unit='BYTE')
        lengths = tf.strings.length(trimmed, unit='BYTE')
        split_bytes = tf.io.decode_raw(
            trimmed, out_type=tf.uint8, fixed_length=self._string_max_bytes
        )

        def pack(string_bytes):
            return _pack_into_int(
                string_bytes, input_bitrange=8, target_bitrange=self._chunk_value_bitrange
            )

        data_chunks = tf.squeeze(tf.map_fn(pack, elems=tf.cast(split_bytes, self._dtype)), axis=-1)
        header = tf.expand_dims(tf.cast(lengths, self._dtype), axis=1)
        encoding = tf.concat((header, tf.cast(data_chunks, self._dtype)), axis=1)

        tf.debugging.assert_type(encoding, self._dtype)
        tf.debugging.assert_shapes(
            [
                (input_strings, ('$NUM_STRINGS',)),
                (encoding, ('$NUM_STRINGS', self.get_num_chunks())),
            ]
        )
        if self._max_chunk_value < self._dtype.max:
            tf.debugging.assert_less_equal(
                encoding,
                tf.cast(self._max_chunk_value, self._dtype),
                message='Encoded chunk values must be less than `max_chunk_value.',
            )
        if self._dtype.min < 0:
            tf.debugging.assert_non_negative(
                encoding, message='Encoded chunk values must be non-negative'
            )
        return encoding, trimmed

    @tf.function
    def decode_tensorflow(self, encoded_chunks: tf.Tensor) -> tf.Tensor:
        """``(num_strings, num_chunks)`` (or one ``(num_chunks,)``) chunks -> strings.

        Raises:
          ValueError: `encoded_chunks` is not convertible to a `dtype` tensor,
            or not of shape ``(None, num_chunks)``.
        """
        try:
            encoded_chunks = tf.convert_to_tensor(encoded_chunks, dtype=self._dtype)
        except Exception as e:
            raise ValueError(
                f'`encoded_chunks` must be a {self._dtype} tensor. Found: {encoded_chunks}'
            ) from e
        if len(encoded_chunks.shape) == 1 and encoded_chunks.shape[0] == self.get_num_chunks():
            encoded_chunks = tf.expand_dims(encoded_chunks, axis=0)
        tf.debugging.assert_shapes(
            [(encoded_chunks, (None, self.get_num_chunks()))],
            message=(
                '`encoded_chunks` must be a 2-D vector with second dimension size '
                f'`{self.get_num_chunks()}`.'
            ),
        )
        header, encoded_data = tf.split(
            encoded_chunks,
            axis=1,
            num_or_size_splits=[self._num_header_chunks, self._num_data_chunks],
        )

        def unpack(string_chunks):
            return _unpack_from_int(
                string_chunks,
                original_bitrange=8,
                target_bitrange=self._chunk_value_bitrange,
                shape=[self._string_max_bytes],
            )

        decoded_bytes = tf.map_fn(unpack, elems=tf.expand_dims(encoded_data, axis=-1))
        int_to_byte_map = tf.constant([bytes([i]) for i in range(256)], tf.string)
        byte_strings = tf.nn.embedding_lookup(int_to_byte_map, decoded_bytes)
        string_lengths = tf.squeeze(tf.cast(header, _BINARY_CHUNKER_STRING_LEN_DTYPE))
        padded = tf.strings.reduce_join(byte_strings, axis=1)
        decoded = tf.strings.substr(
            padded, pos=tf.zeros_like(string_lengths), len=string_lengths, unit='BYTE'
        )
        tf.debugging.assert_type(decoded, tf.string)
        return decoded


class UTF8Chunker(Chunker):
    """Encodes UTF-8 strings into integer chunks, `bytes_per_chunk` bytes each.

    Args:
      string_max_bytes: the longest string in bytes; rounded up to a whole
        number of chunks (longer strings are trimmed, maybe mid-character).
      max_chunk_value: the largest chunk value; defaults to ``dtype.max``.
      dtype: `tf.int32` or `tf.int64` (default).

    Raises:
      ValueError: arguments out of range, or a bad `dtype`.
    """

    def __init__(
        self,
        string_max_bytes: int,
        *,
        max_chunk_value: Optional[int] = None,
        dtype: tf.dtypes.DType = _DEFAULT_DTYPE,
    ):
        if string_max_bytes < 1:
            raise ValueError('string_max_bytes must be at least 1.')
        if dtype not in [tf.int32, tf.int64]:
            raise ValueError('If set, dtype must be tf.int32 or tf.int64.')
        self._dtype = dtype
        self._np_dtype = dtype.as_numpy_dtype
        self._utf8_size_bits = 8
        self._max_chunk_value = max_chunk_value
        if max_chunk_value is not None:
            if max_chunk_value < 1:
                raise ValueError('If set, max_chunk_value must be at least 1.')
            if max_chunk_value > dtype.max:
                raise ValueError(f'max_chunk_value {max_chunk_value} cannot fit in dtype {dtype}')
            self._dtype_size_bytes = math.floor(math.log2(max_chunk_value) / self._utf8_size_bits)
        else:
            self._dtype_size_bytes = dtype.size
        self._num_chunks = math.ceil(float(string_max_bytes) / self._dtype_size_bytes)
        self._max_length = self._num_chunks * self._dtype_size_bytes
        self._bit_lengths = [self._utf8_size_bits * i for i in range(self._dtype_size_bytes)]
        # Byte 0 is the padding: it decodes to b''.
        self._int_to_byte_map = [b''] + [i.tobytes() for i in np.arange(1, 256, dtype=np.uint8)]

    @property
    def dtype(self) -> tf.dtypes.DType:
        return self._dtype

    def get_num_chunks(self) -> int:
        return self._num_chunks

    def encode_tensorflow(self, input_strings: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """``(num_strings,)`` strings -> ``(chunks (num_strings, num_chunks), trimmed strings)``.

        Trimming is on bytes, so a multi-byte character may be cut: decode
        with ``s.decode('utf-8', 'ignore')``.
        """
        string_bytes = tf.io.decode_raw(
            input_strings, out_type=tf.uint8, fixed_length=self._max_length
        )
        as_chunk_bytes = tf.cast(
            tf.reshape(string_bytes, (-1, self._dtype_size_bytes)), self._dtype
        )
        multipliers = tf.constant([[2**bit] for bit in self._bit_lengths], dtype=self._dtype)
        encoded = tf.matmul(as_chunk_bytes, multipliers)
        if self._max_chunk_value:
            tf.assert_less(encoded, tf.constant(self._max_chunk_value, dtype=self._dtype))
        encoded_strings = tf.reshape(encoded, (-1, self._num_chunks))
        int_to_char_map = tf.constant(self._int_to_byte_map, dtype=tf.string)
        trimmed = tf.nn.embedding_lookup(int_to_char_map, tf.cast(string_bytes, dtype=tf.int32))
        return encoded_strings, tf.strings.reduce_join(trimmed, axis=1)

    @tf.function
    def decode_tensorflow(self, encoded_chunks: tf.Tensor) -> tf.Tensor:
        """``(num_strings, num_chunks)`` chunks of `dtype` -> ``(num_strings,)`` strings."""
        tiled = tf.tile(tf.reshape(encoded_chunks, (-1, 1)), [1, self._dtype_size_bytes])
        shifted = tf.bitwise.right_shift(tiled, tf.constant(self._bit_lengths, dtype=self._dtype))
        as_bytes = tf.cast(
            tf.reshape(shifted % 2**self._utf8_size_bits, (-1, self._max_length)), dtype=tf.int32
        )
        int_to_char_map = tf.constant(self._int_to_byte_map, dtype=tf.string)
        return tf.strings.reduce_join(tf.nn.embedding_lookup(int_to_char_map, as_bytes), axis=1)

    def decode_python(self, encoded_chunks: np.ndarray) -> np.ndarray:
        """`decode_tensorflow` in numpy: ``(n, num_chunks)`` -> ``(n,)`` byte strings."""
        tiled = np.tile(encoded_chunks.reshape((-1, 1)), [1, self._dtype_size_bytes])
        as_bytes = np.right_shift(tiled, self._bit_lengths) % 2**self._utf8_size_bits
        byte_map = dict(enumerate(self._int_to_byte_map))
        # otypes: numpy cannot infer the type of an all-empty result.
        chars = np.vectorize(byte_map.get, otypes=(np.bytes_,))(as_bytes)
        return np.apply_along_axis(
            lambda r: r.tobytes(), arr=chars.reshape(-1, self._max_length), axis=1
        )
