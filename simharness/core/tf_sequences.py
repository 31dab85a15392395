"""Recognizing the in-memory tensors behind a `tf.data.Dataset` (`TensorBatches`).

`recognize` finds the arrays behind a ``tf.data.Dataset`` built as
``from_tensor_slices(arrays)`` with an optional ``.batch(b[, drop_remainder])``
and optional ``.prefetch(...)`` / ``.with_options(...)`` (which do not change
the elements), by reading the dataset objects' own fields: no element is
produced. Anything else is left a dataset.
"""

from __future__ import annotations

import collections
from typing import Any, List, Optional, cast

import tensorflow as tf

from simharness.core import types as T
from simharness.core.sequences import TensorBatches
from simharness.core.structure import Struct

__all__ = ['element_leaves', 'recognize']

# Dataset classes that pass elements through unchanged.
_PASS_THROUGH = ('_PrefetchDataset', '_OptionsDataset', 'PrefetchDataset', '_ModelDataset',
                 '_OptimizeDataset')


def element_leaves(elem: Any, t: T.Type) -> List[Any]:
    """The leaves of a dataset element in the order of its type `t`.

    Not `tf.nest.flatten`, which sorts dict keys: an element
    ``OrderedDict(y=..., x=...)`` has the leaves (y, x), as its type says.
    """
    if not isinstance(t, T.StructType):
        return [elem]
    names = t.names
    if isinstance(elem, collections.abc.Mapping) and all(n is not None for n in names):
        parts = [elem[n] for n in names]
    elif isinstance(elem, Struct) or not all(n is not None for n in names) or isinstance(
            elem, (list, tuple)) and not T._is_namedtuple(elem):
        parts = list(elem)
    else:  # a namedtuple or an attrs class: by name
        parts = [getattr(elem, cast(str, n)) for n in names]
    out: List[Any] = []
    for p, e in zip(parts, t):
        out.extend(element_leaves(p, e))
    return out


_CACHE_ATTR = '_simharness_tensor_batches'


def recognize(ds: Any, t: Optional[T.SequenceType] = None) -> Optional[TensorBatches]:
    """The `TensorBatches` behind `ds`, or None when it is not slices of in-memory tensors.

    The answer is kept on the dataset object (datasets are immutable), so a
    program that passes the same datasets every round pays once.
    """
    if not isinstance(ds, tf.data.Dataset):
        return None
    cache = getattr(ds, _CACHE_ATTR, None)
    if cache is None:
        cache = {}
        try:
            setattr(ds, _CACHE_ATTR, cache)
        except AttributeError:  # a dataset class with slots: no cache
            pass
    if t in cache:
        return cache[t]
    out = cache[t] = _recognize(ds, t)
    return out


def _recognize(ds: Any, t: Optional[T.SequenceType]) -> Optional[TensorBatches]:
    try:
        node = ds
        while type(node).__name__ in _PASS_THROUGH:
            node = node._input_dataset
        batch_size, drop = None, False
        if type(node).__name__ == '_BatchDataset':
            if getattr(node, '_num_parallel_calls', None) is not None:
                return None
            b, d = node._batch_size, node._drop_remainder
            if not (hasattr(b, 'numpy') and hasattr(d, 'numpy')):
                return None
            batch_size, drop = int(b.numpy()), bool(d.numpy())
            if batch_size < 1:
                return None
            node = node._input_dataset
        if type(node).__name__ != '_TensorSliceDataset':
            return None
        tensors = list(node._tensors)
        if not tensors or not all(hasattr(x, 'numpy') for x in tensors):
            return None
        element = T._from_tf_structure(ds.element_spec)
        if t is not None and not t.element.is_assignable_from(element):
            return None  # the caller reports the type error
        nested = tf.nest.pack_sequence_as(node._structure, tensors)
        comps = element_leaves(nested, element)
        if any(c.dtype == tf.variant or c.shape.rank is None or c.shape.rank < 1
               for c in comps):
            return None
        return TensorBatches(comps, batch_size, drop, t.element if t is not None else element)
    except (AttributeError, TypeError, ValueError):  # a TF version with other fields
        return None
