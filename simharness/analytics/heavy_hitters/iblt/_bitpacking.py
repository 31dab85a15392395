"""Bit packing of small integers into 28-bit-or-wider chunks (TFF's ``chunkers.py`` helpers).

`BinaryChunker` packs each string byte (8 bits) into chunks of
``floor(log2(max_chunk_value))`` bits. The ranges (6|7|8|12 -> 28) have
column-wise special cases without memory overhead; any other pair goes through
a binary expansion. `chunkers` re-exports every name here.
"""

from __future__ import annotations

import logging

import tensorflow as tf

_LOG = logging.getLogger(__name__)
_OVERHEAD_WARNING = (
    'This code path can temporarily allocate extra memory. If memory footprint '
    'is a problem, consider different bitpacking method or turning this '
    'functionality off. See b/161433177'
)


def _pack_into_int(value, input_bitrange, target_bitrange):
    """Packs integers in ``[0, 2**input_bitrange - 1]`` into `target_bitrange`-bit values."""
    special = _PACKERS.get((input_bitrange, target_bitrange))
    if special is not None:
        return special(value)
    _LOG.warning(_OVERHEAD_WARNING)
    if input_bitrange > 1:
        value = _expand_to_binary_form(tf.reshape(value, [-1, 1]), input_bitrange)
    return _pack_binary_form(value, target_bitrange)


def _unpack_from_int(value, original_bitrange, target_bitrange, shape):
    """Inverse of `_pack_into_int`: `shape`-shaped integers of `original_bitrange` bits."""
    special = _UNPACKERS.get((original_bitrange, target_bitrange))
    if special is not None:
        return special(value, shape)
    _LOG.warning(_OVERHEAD_WARNING)
    value = _expand_to_binary_form(value, target_bitrange)
    value = tf.slice(value, [0], [tf.reduce_prod(shape) * original_bitrange])
    if original_bitrange > 1:
        return tf.reshape(_pack_binary_form(value, original_bitrange), shape)
    return tf.reshape(value, shape)


def _pack_binary_form(value, target_bits):
    """Bits (rank 1) -> column of `target_bits`-bit integers (zero padded)."""
    packing_vector = tf.constant([[2**i] for i in range(target_bits)], value.dtype)
    extra_zeros = tf.zeros(tf.math.mod(-tf.shape(value), target_bits), value.dtype)
    reshaped = tf.reshape(tf.concat([value, extra_zeros], 0), [-1, target_bits])
    return tf.matmul(reshaped, packing_vector)


def _expand_to_binary_form(value, input_bits):
    """Integers -> their `input_bits` low bits, least significant first, flattened."""
    expand_vector = tf.constant([2**i for i in range(input_bits)], value.dtype)
    bits = tf.math.mod(tf.math.floordiv(value, expand_vector), 2)
    return tf.reshape(bits, [-1])


def _columns(value, width):
    """`value` flattened, zero padded to a multiple of `width`, as `width` columns."""
    value = tf.reshape(value, [-1])
    extra_zeros = tf.zeros(tf.math.mod(-tf.shape(value), width), value.dtype)
    return tf.reshape(tf.concat([value, extra_zeros], 0), [-1, width]), extra_zeros


def _drop_padding(packed, extra_zeros, drops):
    """Drops the trailing packed words that hold only padding (`drops`: pad size -> words)."""
    n = extra_zeros.shape[0]
    for sizes, words in drops:
        if n in sizes:
            packed = tf.slice(packed, [0, 0], [packed.shape[0] - words, 1])
    return packed


def _pack_into_int_6_28(value):
    """14 six-bit values -> 3 words of 28 bits."""
    val, extra_zeros = _columns(value, 14)
    mod, div = tf.math.mod, tf.math.floordiv
    a = (
        val[:, 0]
        + val[:, 1] * 2**6
        + val[:, 2] * 2**12
        + val[:, 3] * 2**18
        + mod(val[:, 4], 2**4) * 2**24
    )
    b = (
        div(val[:, 4], 2**4)
        + val[:, 5] * 2**2
        + val[:, 6] * 2**8
        + val[:, 7] * 2**14
        + val[:, 8] * 2**20
        + mod(val[:, 9], 2**2) * 2**26
    )
    c = (
        div(val[:, 9], 2**2)
        + val[:, 10] * 2**4
        + val[:, 11] * 2**10
        + val[:, 12] * 2**16
        + val[:, 13] * 2**22
    )
    packed = tf.reshape(tf.stack([a, b, c], 1), [-1, 1])
    return _drop_padding(packed, extra_zeros, [((5, 6, 7, 8, 9), 1), ((10, 11, 12, 13), 2)])


def _pack_into_int_7_28(value):
    """4 seven-bit values -> 1 word of 28 bits."""
    val, _ = _columns(value, 4)
    packed = val[:, 0] + val[:, 1] * 2**7 + val[:, 2] * 2**14 + val[:, 3] * 2**21
    return tf.reshape(packed, [-1, 1])


def _pack_into_int_8_28(value):
    """7 bytes -> 2 words of 28 bits."""
    val, extra_zeros = _columns(value, 7)
    mod, div = tf.math.mod, tf.math.floordiv
    a = val[:, 0] + val[:, 1] * 2**8 + val[:, 2] * 2**16 + mod(val[:, 3], 2**4) * 2**24
    b = div(val[:, 3], 2**4) + val[:, 4] * 2**4 + val[:, 5] * 2**12 + val[:, 6] * 2**20
    packed = tf.reshape(tf.stack([a, b], 1), [-1, 1])
    return _drop_padding(packed, extra_zeros, [((4, 5, 6), 1)])


def _pack_into_int_12_28(value):
    """7 twelve-bit values -> 3 words of 28 bits."""
    val, extra_zeros = _columns(value, 7)
    mod, div = tf.math.mod, tf.math.floordiv
    a = val[:, 0] + val[:, 1] * 2**12 + mod(val[:, 2], 2**4) * 2**24
    b = div(val[:, 2], 2**4) + val[:, 3] * 2**8 + mod(val[:, 4], 2**8) * 2**20
    c = div(val[:, 4], 2**8) + val[:, 5] * 2**4 + val[:, 6] * 2**16
    packed = tf.reshape(tf.stack([a, b, c], 1), [-1, 1])
    return _drop_padding(packed, extra_zeros, [((3, 4), 1), ((5, 6), 2)])


def _finish_unpack(parts, shape):
    unpacked = tf.reshape(tf.stack(parts, 1), [-1])
    unpacked = tf.slice(unpacked, [0], [tf.reduce_prod(shape)])
    return tf.reshape(unpacked, shape)


def _fields(word, offsets, bits):
    """The `bits`-bit fields of `word` starting at each of `offsets`."""
    return [tf.math.mod(tf.math.floordiv(word, 2**o), 2**bits) for o in offsets]


def _unpack_from_int_6_28(value, shape):
    """Inverse of `_pack_into_int_6_28`."""
    val, _ = _columns(value, 3)
    div, mod = tf.math.floordiv, tf.math.mod
    w0, w1, w2 = val[:, 0], val[:, 1], val[:, 2]
    parts = (
        _fields(w0, (0, 6, 12, 18), 6)
        + [div(w0, 2**24) + mod(w1, 2**2) * 2**4]
        + _fields(w1, (2, 8, 14, 20), 6)
        + [div(w1, 2**26) + mod(w2, 2**4) * 2**2]
        + _fields(w2, (4, 10, 16, 22), 6)
    )
    return _finish_unpack(parts, shape)


def _unpack_from_int_7_28(value, shape):
    """Inverse of `_pack_into_int_7_28`."""
    val = tf.reshape(value, [-1, 1])
    parts = _fields(val[:, 0], (0, 7, 14, 21), 7)
    return _finish_unpack(parts, shape)


def _unpack_from_int_8_28(value, shape):
    """Inverse of `_pack_into_int_8_28`."""
    val, _ = _columns(value, 2)
    div, mod = tf.math.floordiv, tf.math.mod
    w0, w1 = val[:, 0], val[:, 1]
    parts = (
        _fields(w0, (0, 8, 16), 8)
        + [div(w0, 2**24) + mod(w1, 2**4) * 2**4]
        + _fields(w1, (4, 12), 8)
        + [div(w1, 2**20)]
    )
    return _finish_unpack(parts, shape)


def _unpack_from_int_12_28(value, shape):
    """Inverse of `_pack_into_int_12_28`."""
    val, _ = _columns(value, 3)
    div, mod = tf.math.floordiv, tf.math.mod
    w0, w1, w2 = val[:, 0], val[:, 1], val[:, 2]
    parts = (
        _fields(w0, (0, 12), 12)
        + [div(w0, 2**24) + mod(w1, 2**8) * 2**4]
        + _fields(w1, (8,), 12)
        + [div(w1, 2**20) + mod(w2, 2**4) * 2**8]
        + _fields(w2, (4, 16), 12)
    )
    return _finish_unpack(parts, shape)


_PACKERS = {
    (6, 28): _pack_into_int_6_28,
    (7, 28): _pack_into_int_7_28,
    (8, 28): _pack_into_int_8_28,
    (12, 28): _pack_into_int_12_28,
}
_UNPACKERS = {
    (6, 28): _unpack_from_int_6_28,
    (7, 28): _unpack_from_int_7_28,
    (8, 28): _unpack_from_int_8_28,
    (12, 28): _unpack_from_int_12_28,
}
