"""Stacking of client values into per-leaf arrays: the rule shared by drivers and workers."""

from __future__ import annotations

from typing import Any, List, Optional

import numpy as np

from simharness.core import types as T
from simharness.core.structure import Struct, flatten, from_container
from simharness.errors import SimharnessTypeError


def stack_python_values(values: List[Any], t: T.Type) -> Optional[List[np.ndarray]]:
    """Client values (Python/numpy) stacked leaf by leaf into arrays [n, ...] of `t`'s dtypes.

    Returns None when they cannot be stacked exactly (ragged shapes, tensors,
    or values `types.array_refusal` refuses: lossy casts, out of range, another
    shape): the per-value path then gives the precise error.
    """
    if isinstance(t, T.StructType):
        try:
            per = [flatten(from_container(v, t)) for v in values]
        except SimharnessTypeError:
            return None
    else:
        per = [[v] for v in values]
    out = []
    for j, lt in enumerate(T.flatten_type(t)):
        if not isinstance(lt, T.TensorType) or not lt.is_fully_defined or lt.dtype == np.dtype(object):
            return None
        col = [p[j] for p in per]
        if any(isinstance(c, (Struct, dict, list, tuple)) or hasattr(c, 'element_spec')
               or (hasattr(c, 'numpy') and not isinstance(c, np.ndarray)) for c in col):
            return None
        try:
            arr = np.asarray(col)
        except ValueError:
            return None
        if arr.dtype.kind not in 'biuf' or T.array_refusal(arr, lt, batched=True) is not None:
            return None  # the per-value path names the value and the reason
        out.append(np.ascontiguousarray(arr.astype(lt.dtype, copy=False)))
    return out
