"""Port of TFF's ``analytics/heavy_hitters/iblt/chunkers_test.py``.

TFF's cases and data, condensed: `BinaryChunker` round trips run for two of
TFF's six (dtype, max_chunk_value) pairs (int32/1000, int64/default; all six
take the general bit-packing path) and ``long_strings`` for the int32/1000 one only (10**6-byte
strings are slow); the UTF-8 round trips for (10, int32) and (20, int64) of
TFF's four (size, dtype) pairs, and the trim cases for lengths 5 and 10.
Added: the packing special cases (6, 7, 8, 12 -> 28 bits) against the general
bit expansion, and one exact UTF-8 encoding.
"""

import numpy as np
import pytest
import tensorflow as tf

from simharness.analytics.heavy_hitters.iblt import chunkers

_INVALID_UNICODE_CODEPOINT = bytes.fromhex('FF')
_BINARY_INPUTS = [
    b'lmnop',
    b'QQQQQqqqqq',
    b' a b c ',
    '😍😻'.encode(),
    'अ'.encode(),
    b'',
    _INVALID_UNICODE_CODEPOINT * 8,
]
_UTF8_INPUTS = [
    '',
    'some',
    'unicodes',
    'अ',
    'क',
    'æ',
    '☺️',
    '☺️',
    '☺️',
    '😇',
    ' has space ',
    'has, comma',
]
_TRIM_INPUTS = [
    '',
    'some',
    'interesting',
    'unicodes',
    ' has more space ',
    'has, some, comma',
    '新年快乐',
    '☺️😇',
]
_BINARY_PARAMS = [(tf.int32, 1000), (tf.int64, None)]


def test_create_chunker():
    chunker = chunkers.create_chunker(
        string_max_bytes=1234, encoding=chunkers.CharacterEncoding.UTF8
    )
    assert isinstance(chunker, chunkers.UTF8Chunker) and chunker.dtype == tf.int64
    assert chunkers.create_chunker(string_max_bytes=1234, dtype=tf.int32).dtype == tf.int32
    assert isinstance(
        chunkers.create_chunker(string_max_bytes=1234, encoding=chunkers.CharacterEncoding.UNKNOWN),
        chunkers.BinaryChunker,
    )
    with pytest.raises(ValueError, match='dtype'):
        chunkers.create_chunker(
            string_max_bytes=1234, encoding=chunkers.CharacterEncoding.UNKNOWN, dtype=tf.uint16
        )


@pytest.mark.parametrize(
    'string_max_bytes, error',
    [
        (None, TypeError),
        (object(), TypeError),
        (0, ValueError),
        (-1, ValueError),
        (tf.int32.max + 1, ValueError),
    ],
)
def test_binary_invalid_string_max_bytes_raises(string_max_bytes, error):
    with pytest.raises(error, match='string_max_bytes'):
        chunkers.BinaryChunker(string_max_bytes=string_max_bytes, dtype=tf.int32)


@pytest.mark.parametrize(
    'max_chunk_value, error',
    [(object(), TypeError), (-1, ValueError), (100, ValueError), (tf.int32.max + 1, ValueError)],
)
def test_binary_invalid_max_chunk_value_raises(max_chunk_value, error):
    with pytest.raises(error, match='max_chunk_value'):
        chunkers.BinaryChunker(string_max_bytes=10, max_chunk_value=max_chunk_value, dtype=tf.int32)


@pytest.mark.parametrize(
    'dtype, error', [(None, TypeError), (object(), TypeError), (tf.int16, ValueError)]
)
def test_binary_invalid_dtype_raises(dtype, error):
    with pytest.raises(error, match='dtype'):
        chunkers.BinaryChunker(string_max_bytes=1234, dtype=dtype)


@pytest.mark.parametrize('input_strings', [None, object(), [1, 2, 3], [['foo', 'bar']]])
def test_binary_encode_invalid_input_raises(input_strings):
    chunker = chunkers.BinaryChunker(string_max_bytes=1234, dtype=tf.int32)
    with pytest.raises((TypeError, ValueError)):
        chunker.encode_tensorflow(input_strings)


@pytest.mark.parametrize(
    'encoded',
    [
        None,
        object(),
        np.array([[[1, 7]]], dtype=np.int32),
        np.array([[1, 2, 3], [4, 5, 6]], dtype=np.int32),
    ],
)
def test_binary_decode_invalid_input_raises(encoded):
    chunker = chunkers.BinaryChunker(string_max_bytes=1, dtype=tf.int32)
    with pytest.raises(ValueError, match='encoded_chunks'):
        chunker.decode_tensorflow(encoded)


@pytest.mark.parametrize('dtype, max_chunk_value', _BINARY_PARAMS)
def test_binary_encode_and_decode(dtype, max_chunk_value):
    for string_max_bytes in (10, 5):  # TFF's as_expected and trim_strings cases
        chunker = chunkers.BinaryChunker(
            string_max_bytes=string_max_bytes, dtype=dtype, max_chunk_value=max_chunk_value
        )
        assert chunker.dtype == dtype
        encoded, trimmed = chunker.encode_tensorflow(tf.constant(_BINARY_INPUTS))
        decoded = chunker.decode_tensorflow(encoded).numpy().tolist()
        assert decoded == [x[:string_max_bytes] for x in _BINARY_INPUTS]
        assert trimmed.numpy().tolist() == decoded
    # One string as a 1-D tensor, as `IbltDecoder` decodes.
    single = tf.squeeze(encoded[2:3])
    assert single.shape == [chunker.get_num_chunks()]
    assert chunker.decode_tensorflow(single).numpy().tolist() == [b' a b ']


def test_binary_long_strings():
    chunker = chunkers.BinaryChunker(string_max_bytes=1000, dtype=tf.int32, max_chunk_value=1000)
    encoded, trimmed = chunker.encode_tensorflow(tf.constant([b'x' * 1000]))
    assert chunker.decode_tensorflow(encoded).numpy().tolist() == [b'x' * 1000]
    assert trimmed.numpy().tolist() == [b'x' * 1000]


@pytest.mark.parametrize('dtype', [tf.int32, tf.int64])
def test_utf8_dtype(dtype):
    assert chunkers.UTF8Chunker(string_max_bytes=1234, dtype=dtype).dtype == dtype


@pytest.mark.parametrize('string_max_bytes, dtype', [(10, tf.int32), (20, tf.int64)])
@pytest.mark.parametrize('max_chunk_value', [None, 2**31 - 1])
def test_utf8_encode_and_decode(string_max_bytes, dtype, max_chunk_value):
    chunker = chunkers.UTF8Chunker(string_max_bytes, max_chunk_value=max_chunk_value, dtype=dtype)
    encoded, trimmed = chunker.encode_tensorflow(tf.constant(_UTF8_INPUTS))
    if max_chunk_value:
        assert np.all(encoded.numpy() < max_chunk_value)
    for decoded in (
        chunker.decode_tensorflow(encoded).numpy(),
        chunker.decode_python(encoded.numpy()),
    ):
        assert sorted(s.decode('utf-8', 'ignore') for s in decoded) == sorted(_UTF8_INPUTS)
        assert sorted(trimmed.numpy().tolist()) == sorted(decoded.tolist())


@pytest.mark.parametrize(
    'string_max_bytes, expected',
    [
        (5, ['', 'some', 'interest', 'unicodes', ' has mor', 'has, som', '新年', '☺️']),
        (10, _TRIM_INPUTS),
    ],
)
def test_utf8_trim_strings(string_max_bytes, expected):
    chunker = chunkers.UTF8Chunker(string_max_bytes, dtype=tf.int64)
    encoded, trimmed = chunker.encode_tensorflow(tf.constant(_TRIM_INPUTS))
    for decoded in (
        chunker.decode_tensorflow(encoded).numpy(),
        chunker.decode_python(encoded.numpy()),
    ):
        assert sorted(s.decode('utf-8', 'ignore') for s in decoded) == sorted(expected)
        assert sorted(trimmed.numpy().tolist()) == sorted(decoded.tolist())


def test_utf8_exact_encoding():
    # 3 little-endian bytes a chunk under max_chunk_value 2**31 - 1 (as the IBLTs use).
    chunker = chunkers.UTF8Chunker(5, max_chunk_value=2**31 - 1, dtype=tf.int64)
    encoded, trimmed = chunker.encode_tensorflow(tf.constant(['abcd']))
    assert encoded.numpy().tolist() == [[97 + 98 * 256 + 99 * 65536, 100]]
    assert trimmed.numpy().tolist() == [b'abcd']


@pytest.mark.parametrize('bits', [6, 7, 8, 12])
@pytest.mark.parametrize('size', [1, 5, 13, 14, 29])
def test_packing_special_cases_match_general_form(bits, size):
    values = tf.constant(np.random.RandomState(bits * size).randint(0, 2**bits, size), tf.int64)
    general = chunkers._pack_binary_form(
        chunkers._expand_to_binary_form(tf.reshape(values, [-1, 1]), bits), 28
    )
    packed = chunkers._pack_into_int(values, bits, 28)
    np.testing.assert_array_equal(packed.numpy(), general.numpy())
    np.testing.assert_array_equal(
        chunkers._unpack_from_int(packed, bits, 28, [size]).numpy(), values.numpy()
    )


@pytest.mark.parametrize(
    'kwargs',
    [
        dict(string_max_bytes=-1),
        dict(max_chunk_value=-1),
        dict(max_chunk_value=tf.int32.max + 1, dtype=tf.int32),
        dict(dtype=tf.int16),
        dict(dtype=tf.float32),
    ],
)
def test_utf8_argument_errors(kwargs):
    with pytest.raises(ValueError):
        chunkers.UTF8Chunker(**{'string_max_bytes': 10, 'dtype': tf.int64, **kwargs})
