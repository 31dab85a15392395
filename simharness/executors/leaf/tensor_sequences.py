"""`TensorBatches` in the TF runtime: checked, fed to lowered functions, turned back into datasets."""

from __future__ import annotations

import functools
from typing import Any, List, Optional, Tuple

import numpy as np
import tensorflow as tf

from simharness.core import types as T
from simharness.core.sequences import TensorBatches
from simharness.core.tf_sequences import element_leaves, recognize
from simharness.core.tf_serialization import element_spec_for, tf_dtype
from simharness.errors import SimharnessTypeError, SimharnessValueError
from simharness.executors.leaf.sequence_lowering import UNROLL_LIMIT, SourceSpec

__all__ = ['element_leaves', 'recognize', 'to_dataset', 'checked', 'source_spec', 'component_types']


def to_dataset(tb: TensorBatches) -> tf.data.Dataset:
    """The `tf.data.Dataset` `tb` stands for (built once per object)."""
    ds = tb.derived.get('dataset')
    if ds is None:
        spec = element_spec_for(tb.element_type)
        flat = tf.nest.flatten(spec)
        # element_spec_for's containers and the type's leaf order can differ (dicts)
        order = element_leaves(
            tf.nest.pack_sequence_as(spec, list(range(len(flat)))), tb.element_type
        )
        by_flat = [None] * len(flat)
        for comp, pos in zip(tb.components, order):
            by_flat[pos] = comp
        k = tb.passes if tb.batch_size is not None else 1
        per_pass = tb.num_rows // k
        ds = None
        for e in range(k):  # each pass batched on its own: no batch spans two passes
            part = tf.data.Dataset.from_tensor_slices(
                tf.nest.pack_sequence_as(
                    spec, [c[e * per_pass : (e + 1) * per_pass] if k > 1 else c for c in by_flat]
                )
            )
            if tb.batch_size is not None:
                part = part.batch(tb.batch_size, drop_remainder=tb.drop_remainder)
            ds = part if ds is None else ds.concatenate(part)
        tb.derived['dataset'] = ds
    return ds


def component_types(
    t: T.SequenceType, batched: bool, rows: Optional[int] = None
) -> Optional[List[T.TensorType]]:
    """The tensor types of the components of a `TensorBatches` of `t` (None: not expressible),
    with `rows` rows (None: any number)."""
    types = _component_types(t, batched, rows)
    return None if types is None else list(types)


@functools.lru_cache(maxsize=256)
def _component_types(
    t: T.SequenceType, batched: bool, rows: Optional[int]
) -> Optional[Tuple[T.TensorType, ...]]:
    out = []
    for leaf in T.flatten_type(t.element):
        if not isinstance(leaf, T.TensorType) or leaf.shape is None:
            return None
        shape = list(leaf.shape)
        if batched:
            if not shape:
                return None
            shape = shape[1:]
        out.append(T.TensorType(leaf.dtype, [rows] + shape))
    return tuple(out)


def checked(tb: Any, t: T.SequenceType, to_tensor) -> TensorBatches:
    """`tb` (e.g. decoded from a peer) checked against `t`, its components as tensors."""
    done = tb.derived.get('checked') if isinstance(tb, TensorBatches) else None
    if done is not None and done[0] == t:
        return done[1]
    out = _checked(tb, t, to_tensor)
    if isinstance(tb, TensorBatches) and tb is not out:
        tb.derived['checked'] = (t, out)  # e.g. kept with a dataset's recognized arrays
    return out


def _checked(tb: Any, t: T.SequenceType, to_tensor) -> TensorBatches:
    if not isinstance(tb, TensorBatches):
        raise SimharnessTypeError(f'{type(tb).__name__} is not a TensorBatches', expected=t)
    b = tb.batch_size
    if b is not None and (isinstance(b, bool) or not isinstance(b, (int, np.integer)) or b < 1):
        raise SimharnessValueError(f'batch size {b!r} of a sequence must be a positive int')
    if not isinstance(tb.drop_remainder, (bool, np.bool_)):
        raise SimharnessTypeError(f'drop_remainder {tb.drop_remainder!r} must be a bool')
    k = tb.passes
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise SimharnessValueError(f'passes {k!r} of a sequence must be a positive int')
    types = component_types(t, b is not None)
    comps = list(tb.components) if isinstance(tb.components, (list, tuple)) else None
    if types is None or comps is None or len(comps) != len(types) or not comps:
        raise SimharnessTypeError(f'{tb!r:.200} does not hold the components of {t}', expected=t)
    out = []
    rows = 0
    for j, (c, ct) in enumerate(zip(comps, types)):
        x = c if isinstance(c, tf.Tensor) else to_tensor(np.asarray(c), ct)
        want = tuple(ct.shape or ())  # component types have known ranks
        if (
            x.dtype != tf_dtype(ct.dtype)
            or x.shape.rank != len(want)
            or any(d is not None and d != s for d, s in zip(want[1:], x.shape[1:]))
        ):
            raise SimharnessTypeError(
                f'component of dtype {x.dtype.name} and shape {x.shape} does not fit {ct} '
                f'(sequence of {t.element})',
                expected=t,
            )
        if j == 0:
            rows = int(x.shape[0])
        elif x.shape[0] != rows:
            raise SimharnessValueError(
                f'components of a sequence have {rows} and {x.shape[0]} rows'
            )
        out.append(x)
    if b is not None and tb.drop_remainder:
        # a fixed batch dimension in the type needs batches of exactly that size
        first = [
            l.shape[0] for l in T.flatten_type(t.element) if isinstance(l, T.TensorType) and l.shape
        ]
        if any(d is not None and d != b for d in first):
            raise SimharnessTypeError(f'batches of {b} do not fit {t}', expected=t)
    elif b is not None:
        first = [
            l.shape[0] for l in T.flatten_type(t.element) if isinstance(l, T.TensorType) and l.shape
        ]
        if any(d is not None for d in first) and rows % b != 0:
            raise SimharnessTypeError(
                f'a last batch of {rows % b} rows does not fit {t}', expected=t
            )
    if b is not None and k > 1 and rows % k:
        raise SimharnessValueError(f'{rows} rows do not split into {k} passes of equal length')
    return TensorBatches(
        out,
        None if b is None else int(b),
        bool(tb.drop_remainder),
        t.element,
        int(k) if b is not None else 1,
    )


def _unrolled_elements(tb: TensorBatches, unroll: bool = True) -> Optional[int]:
    """`tb`'s number of elements when its loop is unrolled (at most `UNROLL_LIMIT`, and
    `unroll`: the function's body is small enough to be traced once per count), else None.

    It depends on the sequence and the function alone (never on the clients it is
    batched with), so that a client runs the same graph on every stack.
    """
    n = tb.num_elements
    return n if unroll and n <= UNROLL_LIMIT else None


def static_rows(tb: TensorBatches, unroll: bool = True) -> Optional[int]:
    """`tb`'s number of rows when a function lowered for it is specialized to it, else None.

    That is when its loop is unrolled and every element is a full batch (or a
    row): the number of rows is then fixed by the number of elements and the
    batch size, which the lowering is specialized to anyway, so a computation
    gets at most `UNROLL_LIMIT` such forms. Its components then have fully
    known shapes, and the rule of `simharness.core.xla` can compile the
    lowered function. Like `_unrolled_elements`, it depends on the sequence
    and the function alone.
    """
    n = _unrolled_elements(tb, unroll)
    if n is None:
        return None
    if tb.batch_size is None:
        return tb.num_rows
    return tb.num_rows if tb.num_rows == n * tb.batch_size else None


def source_spec(tb: TensorBatches, unroll: bool = True) -> SourceSpec:
    return SourceSpec(
        [c.dtype for c in tb.components],
        tb.batch_size,
        tb.drop_remainder,
        _unrolled_elements(tb, unroll),
        tb.passes,
        static_rows(tb, unroll),
    )


def lowering_key(tb: TensorBatches, unroll: bool = True) -> Tuple:
    """What a function lowered for `tb` depends on (equal to `source_spec(tb, unroll).key()`).

    Kept in ``tb.derived`` (a map runs it per client and round; reading a
    tensor's shape costs microseconds); the rows of one stacked block share it.
    """
    name = 'lowering_key' if unroll else 'lowering_key_rolled'
    key = tb.derived.get(name)
    if key is None:
        key = tb.derived[name] = (
            tuple(c.dtype.name for c in tb.components),
            tb.batch_size,
            tb.drop_remainder,
            _unrolled_elements(tb, unroll),
            tb.passes,
            static_rows(tb, unroll),
        )
    return key
