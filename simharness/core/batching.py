"""Stacking of client values into per-leaf arrays: the rule shared by drivers and workers."""

from __future__ import annotations

import collections
from typing import Any, List, Optional

import numpy as np

from simharness.core import types as T
from simharness.core.structure import Struct, flatten, from_container
from simharness.errors import SimharnessTypeError


#: Leaf types that are plain numbers (checked by exact type first: the common case).
_PLAIN = frozenset({np.ndarray, int, float, bool} | {np.dtype(c).type for c in '?bhilqBHILQefdg'})


def stack_python_values(values: List[Any], t: T.Type) -> Optional[List[np.ndarray]]:
    """Client values (Python/numpy) stacked leaf by leaf into arrays [n, ...] of `t`'s dtypes.

    Returns None when they cannot be stacked exactly (ragged shapes, tensors,
    or values `types.array_refusal` refuses: lossy casts, out of range, another
    shape): the per-value path then gives the precise error.
    """
    columns = _dict_columns(values, t)
    if columns is None:
        if isinstance(t, T.StructType):
            try:
                per = [flatten(from_container(v, t)) for v in values]
            except SimharnessTypeError:
                return None
        else:
            per = [[v] for v in values]
        columns = [[p[j] for p in per] for j in range(len(T.flatten_type(t)))]
    out = []
    for lt, col in zip(T.flatten_type(t), columns):
        if (
            not isinstance(lt, T.TensorType)
            or not lt.is_fully_defined
            or lt.dtype == np.dtype(object)
        ):
            return None
        if not all(type(c) in _PLAIN for c in col) and any(
            isinstance(c, (Struct, dict, list, tuple))
            or hasattr(c, 'element_spec')
            or (hasattr(c, 'numpy') and not isinstance(c, np.ndarray))
            for c in col
        ):
            return None
        try:
            arr = np.asarray(col)
        except ValueError:
            return None
        if arr.dtype.kind not in 'biuf' or T.array_refusal(arr, lt, batched=True) is not None:
            return None  # the per-value path names the value and the reason
        out.append(np.ascontiguousarray(arr.astype(lt.dtype, copy=False)))
    return out


def _dict_columns(values: List[Any], t: T.Type) -> Optional[List[List[Any]]]:
    """The leaf columns of client values that are plain dicts of a flat struct type with
    names (what `from_container` would match by name), read without building a `Struct`
    per client; None for any other shape (the general path then decides)."""
    if not isinstance(t, T.StructType) or not values:
        return None
    names = t.names
    if any(n is None for n in names) or any(isinstance(e, T.StructType) for e in t):
        return None
    for v in values:
        if (
            type(v) not in (dict, collections.OrderedDict)
            or len(v) != len(names)
            or not all(type(k) is str for k in v)
        ):
            return None
    try:
        return [[v[n] for v in values] for n in names]
    except KeyError:
        return None
