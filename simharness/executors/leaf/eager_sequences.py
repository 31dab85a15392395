"""The leaf executor's sequences: clients' in-memory sequences taken in as rows of
stacked tensors, and the sequence intrinsics run on `tf.data` datasets.

What it does: many clients' sequences of one layout (`TensorBatches` from the driver,
or a block sent stacked, `runtime.datasets.stacked_batches`) become one tensor per
component with each client's rows a slice of it, checked once for all (a batched map
takes the stacked tensor as it is); `sequence_map`, `sequence_reduce` and
`sequence_sum` run on a value's dataset, and `federated_select` builds each client's
dataset from the selected elements.

`EagerTFExecutor` (`eager_tf`) calls these functions with itself as their host
(`SequenceHost`): they use its function values, one call and its device scope.
"""

from __future__ import annotations

import collections
from typing import (
    ContextManager,
    List,
    Mapping,
    NamedTuple,
    Optional,
    Protocol,
    Sequence,
    Tuple,
    cast,
)

import numpy as np
import tensorflow as tf

from simharness.core import types as T
from simharness.core.sequences import TensorBatches, stack_layout
from simharness.core.structure import Struct, pack_as
from simharness.core.tf_serialization import element_spec_for, tf_dtype
from simharness.errors import SimharnessTypeError, SimharnessValueError
from simharness.executors.base import ExecutorValue
from simharness.executors.leaf import tensor_sequences as tseq
from simharness.executors.leaf.client_blocks import EagerValue
from simharness.executors.leaf.embedded_function import EmbeddedFunction, flatten_arg, pack_result
from simharness.executors.leaf.tensor_sequences import element_leaves as _element_leaves
from simharness.executors.leaf.tf_values import (
    as_dataset,
    fast_tensor,
    struct_to_spec_container,
    to_tensor,
)

__all__ = [
    'SequenceHost',
    'select_datasets',
    'sequence_op',
    'sequence_rows',
    'stack_sequences',
    'stacked_sequences',
]


class SequenceHost(Protocol):
    """What these functions use of the leaf executor that calls them."""

    def fn_of(self, v: ExecutorValue) -> EmbeddedFunction:
        """The embedded function of a function value."""

    def call(self, fn: EmbeddedFunction, arg: Optional[EagerValue]) -> EagerValue:
        """`fn` on `arg` (one call)."""

    def device_scope(self) -> ContextManager[object]:
        """A context manager placing ops on the executor's device."""


# ------------------------------------------------------------ clients' sequences
def stack_sequences(
    host: SequenceHost, values: Sequence[object], t: T.SequenceType
) -> Optional[List[EagerValue]]:
    """Many clients' in-memory sequences of one layout (as they come from the driver):
    each component converted once for all clients, and the clients' rows kept
    as slices of it, so that a batched map takes the stacked tensor as it is."""
    batches = [v for v in values if isinstance(v, TensorBatches)]
    if len(batches) != len(values):
        return None
    stacked = stack_layout(batches)
    return None if stacked is None else sequence_rows(host, batches[0], stacked, t)


def stacked_sequences(host: SequenceHost, block: object, t: T.SequenceType) -> List[EagerValue]:
    """Client sequences sent stacked (`runtime.datasets.stacked_batches`): component j
    is ``[n, rows, ...]``, client i's rows at index i."""
    comps = block.components if isinstance(block, TensorBatches) else None
    if (
        not isinstance(block, TensorBatches)
        or not isinstance(comps, (list, tuple))
        or not comps
        or not all(isinstance(c, np.ndarray) and c.ndim >= 1 for c in comps)
        or len({c.shape[0] for c in comps}) != 1
    ):
        raise SimharnessTypeError(
            f'{block!r:.200} is not a block of stacked client sequences of {t}', expected=t
        )
    first = TensorBatches(
        [c[0] for c in comps],
        block.batch_size,
        block.drop_remainder,
        block.element_type,
        block.passes,
    )
    return sequence_rows(host, first, list(comps), t)


class _Layout(NamedTuple):
    """What checking a block's first client tells of every client of its layout."""

    dtypes: Tuple[np.dtype, ...]
    batch_size: Optional[int]
    drop_remainder: bool
    passes: int
    lowering_key: Tuple[object, ...]


#: Layouts checked (`_layout`), most recent last: a round's cohort has the last round's.
_LAYOUTS: 'collections.OrderedDict[Tuple[object, ...], _Layout]' = collections.OrderedDict()
_MAX_LAYOUTS = 64


def _layout(
    host: SequenceHost, first: TensorBatches, stacked_arrays: List[np.ndarray], t: T.SequenceType
) -> _Layout:
    """The checked layout of a block of stacked client sequences (`tseq.checked` of its
    first client, once per layout: the check converts that client's rows to tensors,
    ~0.5 ms of a worker's round)."""
    key = (
        t,
        first.batch_size,
        first.drop_remainder,
        first.passes,
        tuple((np.asarray(x).dtype.str, tuple(np.shape(x)[1:])) for x in stacked_arrays),
    )
    hit = _LAYOUTS.get(key)
    if hit is not None:
        return hit
    with host.device_scope():
        checked = tseq.checked(first, t, to_tensor)
    hit = _Layout(
        tuple(np.dtype(c.dtype.as_numpy_dtype) for c in checked.components),
        checked.batch_size,
        checked.drop_remainder,
        checked.passes,
        tseq.lowering_key(checked),
    )
    _LAYOUTS[key] = hit
    while len(_LAYOUTS) > _MAX_LAYOUTS:
        _LAYOUTS.popitem(last=False)
    return hit


def sequence_rows(
    host: SequenceHost,
    first: TensorBatches,
    stacked_arrays: List[np.ndarray],
    t: T.SequenceType,
) -> List[EagerValue]:
    """The clients of `stacked_arrays` (one layout, that of `first`, their row 0)."""
    layout = _layout(host, first, stacked_arrays, t)  # one layout: one check
    with host.device_scope():
        stacked = [
            fast_tensor(np.asarray(x, dtype=dt)) for x, dt in zip(stacked_arrays, layout.dtypes)
        ]
        rows = [tf.unstack(x) for x in stacked]
    out = []
    key = layout.lowering_key  # one layout: the rows' lowering key too
    for i in range(int(stacked_arrays[0].shape[0])):
        tb = TensorBatches(
            [r[i] for r in rows],
            layout.batch_size,
            layout.drop_remainder,
            t.element,
            layout.passes,
        )
        tb.derived['checked'] = (t, tb)
        tb.derived['rows'] = (stacked, i)
        tb.derived['lowering_key'] = key
        out.append(EagerValue(tb, t))
    return out


# ------------------------------------------------------------ sequence intrinsics
def sequence_op(
    host: SequenceHost, op: str, v: EagerValue, params: Mapping[str, object]
) -> EagerValue:
    """`op` (``sequence_map``, ``sequence_reduce`` or ``sequence_sum``) on the dataset of
    `v`, with its `params` (``fn``; ``op`` and ``zero``; none). Runs in the caller's
    device scope."""
    t = v.type_signature
    ds = as_dataset(v.internal)
    if not isinstance(t, T.SequenceType) or not isinstance(ds, tf.data.Dataset):
        raise SimharnessTypeError(f'{op} needs a sequence, got {t}', actual=t)
    et = t.element
    if op == 'sequence_map':
        fn = host.fn_of(cast(ExecutorValue, params['fn']))
        rt = fn.type_signature.result
        spec = element_spec_for(rt)

        def mapper(*elem):
            elem = elem[0] if len(elem) == 1 else elem
            out = fn.call_flat(_element_leaves(elem, et))
            return tf.nest.pack_sequence_as(spec, out)

        return EagerValue(ds.map(mapper), T.SequenceType(rt))
    if op == 'sequence_reduce':
        fn = host.fn_of(cast(ExecutorValue, params['op']))
        zero = cast(EagerValue, params['zero'])
        at = fn.type_signature.result
        zero_leaves = tuple(flatten_arg(zero.internal))

        def reduce_fn(acc, elem):
            out = fn.call_flat(list(acc) + _element_leaves(elem, et))
            return tuple(out)

        res = ds.reduce(zero_leaves, reduce_fn)
        return EagerValue(pack_result(list(res), at), at)
    if op == 'sequence_sum':
        leaves_t = T.flatten_type(et)
        zeros = tuple(tf.zeros(lt.shape, tf_dtype(lt.dtype)) for lt in leaves_t)
        res = ds.reduce(
            zeros,
            lambda acc, elem: tuple(a + e for a, e in zip(acc, _element_leaves(elem, et))),
        )
        return EagerValue(pack_as(et, list(res)), et)
    raise SimharnessValueError(f'unknown sequence operation {op!r}')


def select_datasets(
    host: SequenceHost,
    keys: Sequence[EagerValue],
    server_value: EagerValue,
    fn: EmbeddedFunction,
    element_type: T.Type,
) -> List[EagerValue]:
    """`federated_select` at the leaf: for each client's `keys`, the dataset of `fn` on
    (`server_value`, key) for each key, in order (an empty dataset for no keys)."""
    out = []
    spec = element_spec_for(element_type)
    with host.device_scope():
        for k in keys:
            elems = []
            for key in tf.reshape(k.internal, [-1]):
                arg = EagerValue(
                    Struct([(None, server_value.internal), (None, key)]),
                    T.StructType([server_value.type_signature, T.TensorType(np.int32)]),
                )
                elems.append(host.call(fn, arg).internal)
            if elems:
                py = [struct_to_spec_container(e, spec) for e in elems]
                ds = tf.data.Dataset.from_tensor_slices(
                    tf.nest.map_structure(lambda *xs: tf.stack(xs), *py)
                )
            else:
                ds = tf.data.Dataset.from_tensor_slices(
                    tf.nest.map_structure(lambda s: tf.zeros([0] + list(s.shape), s.dtype), spec)
                )
            out.append(EagerValue(ds, T.SequenceType(element_type)))
    return out
