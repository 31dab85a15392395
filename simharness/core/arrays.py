"""federated_language's array, shape and dtype helpers, and two small interfaces.

What ``import simharness as federated_language`` programs call at the top
level: `Array` (the values a tensor leaf may hold), the `ArrayShape`
helpers (``array_shape_is_compatible_with`` ...), the dtype helpers
(`infer_dtype`, `can_cast_dtype`, `is_valid_dtype`), the array checks
(``array_is_compatible_dtype`` / ``_shape``), and the `TypedObject` and
`Serializable` interfaces. The proto conversions (``*_to_proto``,
``*_from_proto``) are left out: simharness has no federated_language protos.
"""

from __future__ import annotations

import abc
import functools
import operator
import warnings
from typing import Any, Optional, Tuple, Union

import ml_dtypes
import numpy as np

from simharness.core import types as T
from simharness.errors import SimharnessValueError

#: A value a tensor leaf may hold: Python and numpy scalars and numpy arrays.
Array = Union[bool, int, float, complex, str, bytes, np.generic, np.ndarray]

#: A shape: a tuple of dimensions (None: unknown size), or None (unknown rank).
ArrayShape = Optional[Tuple[Optional[int], ...]]

#: The dtypes federated_language's types allow.
_VALID_DTYPES = frozenset(
    np.dtype(d)
    for d in (
        np.bool_,
        np.int8,
        np.int16,
        np.int32,
        np.int64,
        np.uint8,
        np.uint16,
        np.uint32,
        np.uint64,
        np.float16,
        np.float32,
        np.float64,
        np.complex64,
        np.complex128,
        np.str_,
        ml_dtypes.bfloat16,
    )
)


def array_shape_is_fully_defined(shape: ArrayShape) -> bool:
    """Whether `shape` has a known rank and known dimensions."""
    return shape is not None and all(d is not None for d in shape)


def array_shape_is_scalar(shape: ArrayShape) -> bool:
    """Whether `shape` is the scalar shape ``()``."""
    return shape is not None and not shape


def array_shape_is_compatible_with(target: ArrayShape, other: ArrayShape) -> bool:
    """Whether one fully-defined shape could be both `target` and `other`."""
    if target is None or other is None:
        return True
    if len(target) != len(other):
        return False
    return all(x is None or y is None or x == y for x, y in zip(target, other))


def num_elements_in_array_shape(shape: ArrayShape) -> Optional[int]:
    """The number of elements of `shape`, or None when it is not fully defined."""
    if not array_shape_is_fully_defined(shape):
        return None
    return functools.reduce(operator.mul, shape or (), 1)


def _dtype_type(dtype: Any) -> Any:
    if hasattr(dtype, 'as_numpy_dtype') or isinstance(dtype, np.dtype):
        return T.to_numpy_dtype(dtype).type
    return dtype


def is_valid_dtype(dtype: Any) -> bool:
    """Whether `dtype` is a dtype federated_language's tensor types allow."""
    try:
        dt = np.dtype(dtype)
    except TypeError:
        return False
    return dt in _VALID_DTYPES


def can_cast_dtype(value: Union[bool, int, float, complex, str, bytes], dtype: Any) -> bool:
    """Whether `dtype` can hold the Python scalar `value` (no overflow)."""
    with warnings.catch_warnings():
        warnings.simplefilter('error', RuntimeWarning)
        try:
            np.asarray(value, dtype=dtype)
            return True
        except (OverflowError, RuntimeWarning, ValueError):
            return False


def infer_dtype(obj: Union[bool, int, float, complex, str, bytes]) -> Any:
    """The numpy scalar type of a Python scalar, as federated_language infers it.

    Raises:
      SimharnessValueError: an int outside int64.
      NotImplementedError: not a Python scalar (as federated_language).
    """
    if isinstance(obj, bool):
        return np.bool_
    if isinstance(obj, int):
        if can_cast_dtype(obj, np.int32):
            return np.int32
        if can_cast_dtype(obj, np.int64):
            return np.int64
        raise SimharnessValueError(
            f'expected an int in the range [{np.iinfo(np.int64).min}, '
            f'{np.iinfo(np.int64).max}], found {obj}'
        )
    if isinstance(obj, float):
        return np.float32
    if isinstance(obj, complex):
        return np.complex128
    if isinstance(obj, (str, bytes)):
        return np.str_
    raise NotImplementedError(f'unexpected obj found: {type(obj)}')


def array_is_compatible_dtype(value: Array, dtype: Any) -> bool:
    """Whether `value` has `dtype`'s kind (integer, floating ...) and fits its size."""
    dtype = _dtype_type(dtype)
    value_dtype = value.dtype.type if isinstance(value, (np.generic, np.ndarray)) else type(value)
    if value_dtype is dtype:
        return True
    if np.issubdtype(value_dtype, np.bool_):
        return dtype is np.bool_
    for kind in (np.integer, np.floating, np.complexfloating):
        if np.issubdtype(value_dtype, kind):
            if not np.issubdtype(dtype, kind):
                return False
            break
    else:
        if np.issubdtype(value_dtype, np.character) or np.issubdtype(value_dtype, np.object_):
            return dtype is np.str_
        return False
    if isinstance(value, (np.generic, np.ndarray)):
        return bool(np.can_cast(value.dtype, dtype))
    if isinstance(value, (int, float, complex)):
        return can_cast_dtype(value, dtype)
    return False


def array_is_compatible_shape(value: Array, shape: ArrayShape) -> bool:
    """Whether `value` (an array, or a scalar) has a shape compatible with `shape`."""
    if isinstance(value, np.ndarray):
        return array_shape_is_compatible_with(value.shape, shape)
    return array_shape_is_scalar(shape)


class TypedObject(abc.ABC):
    """An object with a `type_signature` (federated_language's interface)."""

    @property
    @abc.abstractmethod
    def type_signature(self) -> T.Type:
        """The object's type."""


class Serializable(abc.ABC):
    """An object that converts to and from bytes (federated_language's interface)."""

    @classmethod
    @abc.abstractmethod
    def from_bytes(cls, buffer: bytes) -> 'Serializable':
        """The object `buffer` holds."""

    @abc.abstractmethod
    def to_bytes(self) -> bytes:
        """The object as bytes."""


__all__ = [
    'Array',
    'ArrayShape',
    'Serializable',
    'TypedObject',
    'array_is_compatible_dtype',
    'array_is_compatible_shape',
    'array_shape_is_compatible_with',
    'array_shape_is_fully_defined',
    'array_shape_is_scalar',
    'can_cast_dtype',
    'infer_dtype',
    'is_valid_dtype',
    'num_elements_in_array_shape',
]
