"""Packing program values as bytes (``tff.program``'s serialization_utils), for `Serializable` s.

Each ``pack_*`` gives bytes; the matching ``unpack_*_from(buffer, offset)``
gives ``(value, size)``, size the number of bytes it read from `offset`.
Types and datasets go through the worker seam's codec
(`simharness.runtime.codec`), which builds only plain data and
simharness's own types when it decodes (no pickle).
"""

from __future__ import annotations

import struct
from typing import Any, Callable, Sequence

import numpy as np

from simharness.core import types as T
from simharness.errors import SimharnessTypeError
from simharness.runtime import codec

__all__ = [
    'pack_codec_value',
    'pack_dataset',
    'pack_sequence',
    'pack_str',
    'pack_type_spec',
    'unpack_codec_value_from',
    'unpack_dataset_from',
    'unpack_sequence_from',
    'unpack_str_from',
    'unpack_type_spec_from',
]

_LENGTH = '!Q'
_LENGTH_SIZE = struct.calcsize(_LENGTH)


def _pack_length(value: bytes) -> bytes:
    return struct.pack(_LENGTH, len(value))


def _unpack_length_from(buffer: bytes, offset: int = 0) -> tuple[int, int]:
    (length,) = struct.unpack_from(_LENGTH, buffer, offset=offset)
    return length, _LENGTH_SIZE


def _pack_bytes(value: bytes) -> bytes:
    return _pack_length(value) + value


def _unpack_bytes_from(buffer: bytes, offset: int = 0) -> tuple[bytes, int]:
    length, size = _unpack_length_from(buffer, offset)
    start = offset + size
    return bytes(buffer[start : start + length]), size + length


def pack_codec_value(obj: Any) -> bytes:
    """A value of the kinds the worker seam's codec encodes (types, computations' building
    blocks, arrays, plain data) as bytes (simharness's own; TFF packs protos).

    Raises:
        CodecError: `obj` holds a kind the codec does not encode.
    """
    return _pack_encoded(obj)


def unpack_codec_value_from(buffer: bytes, offset: int = 0) -> tuple[Any, int]:
    """The value `pack_codec_value` packed at `offset`, and its size."""
    return _unpack_encoded_from(buffer, offset)


def _pack_encoded(obj: Any) -> bytes:
    header, buffers = codec.encode(obj)
    parts = [header] + [np.ascontiguousarray(b).tobytes() for b in buffers]
    return struct.pack(_LENGTH, len(parts)) + b''.join(_pack_bytes(p) for p in parts)


def _unpack_encoded_from(buffer: bytes, offset: int = 0) -> tuple[Any, int]:
    count, size = _unpack_length_from(buffer, offset)
    parts = []
    for _ in range(count):
        part, part_size = _unpack_bytes_from(buffer, offset + size)
        parts.append(part)
        size += part_size
    return codec.decode(parts[0], parts[1:]), size


def pack_str(value: str) -> bytes:
    """`value` (UTF-8) with its length."""
    return _pack_bytes(value.encode('utf-8'))


def unpack_str_from(buffer: bytes, offset: int = 0) -> tuple[str, int]:
    value, size = _unpack_bytes_from(buffer, offset)
    return value.decode('utf-8'), size


def pack_type_spec(type_spec: T.Type) -> bytes:
    """A simharness `Type` as bytes.

    Raises:
        SimharnessTypeError: `type_spec` is not a `Type`.
    """
    if not isinstance(type_spec, T.Type):
        raise SimharnessTypeError(
            f'expected a simharness Type, got {type_spec!r} of type {type(type_spec).__name__}',
            expected=T.Type,
            actual=type(type_spec),
        )
    return _pack_encoded(type_spec)


def unpack_type_spec_from(buffer: bytes, offset: int = 0) -> tuple[T.Type, int]:
    return _unpack_encoded_from(buffer, offset)


def pack_dataset(dataset: Any) -> bytes:
    """A `tf.data.Dataset` as bytes: its serialized graph and element type.

    Raises:
        SimharnessTypeError: `dataset` is not a `tf.data.Dataset`.
        tf.errors.FailedPreconditionError: the dataset holds Python state
            (``from_generator``) and cannot be serialized.
    """
    import tensorflow as tf

    from simharness.runtime.datasets import dataset_to_blob

    if not isinstance(dataset, tf.data.Dataset):
        raise SimharnessTypeError(
            f'expected a tf.data.Dataset, got {type(dataset).__name__}',
            expected=tf.data.Dataset,
            actual=type(dataset),
        )
    return _pack_encoded(dataset_to_blob(dataset))


def unpack_dataset_from(buffer: bytes, offset: int = 0) -> tuple[Any, int]:
    from simharness.runtime.datasets import dataset_from_blob

    blob, size = _unpack_encoded_from(buffer, offset)
    return dataset_from_blob(blob), size


def pack_sequence(fn: Callable[[Any], bytes], sequence: Sequence[Any]) -> bytes:
    """The elements of `sequence`, each packed by `fn`, with their count."""
    return struct.pack(_LENGTH, len(sequence)) + b''.join(fn(x) for x in sequence)


def unpack_sequence_from(
    fn: Callable[[bytes, int], tuple[Any, int]], buffer: bytes, offset: int = 0
) -> tuple[list, int]:
    count, size = _unpack_length_from(buffer, offset)
    out = []
    for _ in range(count):
        value, value_size = fn(buffer, offset + size)
        out.append(value)
        size += value_size
    return out, size
