"""Client values held by an `EagerTFExecutor`, and blocks of them.

A `ClientBlock` holds the values of n clients leaf by leaf, stacked along a
leading client dimension or shared by all (broadcast weights), so that
block operations run one TF call for all of them; an `EagerValue` is one
value (a tensor, `Struct`, dataset or function), possibly a client's slice
of a block, taken lazily.
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from simharness.core import types as T
from simharness.core.reduction import Partial
from simharness.core.sequences import TensorBatches
from simharness.core.structure import Struct, map_structure, pack_as
from simharness.executors.base import ExecutorValue
from simharness.executors.leaf.tf_values import as_dataset, fast_numpy


class ClientBlock:
    """The values of n clients stored leaf by leaf: stacked [n, ...] or shared.

    A leaf is ('stacked', tensor with a leading client dimension) or
    ('shared', one tensor every client sees, e.g. broadcast weights). ClientBlock
    operations (map, zip, select, compute, reduce) work on the leaves
    directly; a client's own value is sliced out only when asked for.
    """

    __slots__ = ('type', 'n', 'leaves', '_numpy')

    def __init__(self, type_spec: T.Type, n: int, leaves: List[Tuple[str, Any]]):
        self.type = type_spec
        self.n = n
        self.leaves = leaves
        self._numpy: Optional[List[Any]] = None

    def values(self) -> List['EagerValue']:
        return [EagerValue(None, self.type, self, i) for i in range(self.n)]

    def slice(self, i: int) -> Any:
        return pack_as(self.type, [x if kind == 'shared' else x[i] for kind, x in self.leaves])

    def numpy_leaves(self) -> List[Any]:
        if self._numpy is None:
            self._numpy = [(kind, fast_numpy(x)) for kind, x in self.leaves]
        return self._numpy

    def sub_leaves(self, lo: int, hi: int) -> List[Tuple[str, Any]]:
        """The leaves of clients [lo, hi) (shared leaves unchanged)."""
        if lo == 0 and hi == self.n:
            return list(self.leaves)
        return [(k, x if k == 'shared' else x[lo:hi]) for k, x in self.leaves]


class EagerValue(ExecutorValue):
    """A value held by an `EagerTFExecutor`: tensor, Struct, dataset or function.

    A client value made by a block operation refers to its `ClientBlock` and index
    and is sliced out lazily.
    """

    __slots__ = ('_value', '_type', '_block', '_index')

    def __init__(
        self, value: Any, type_spec: T.Type, block: Optional[ClientBlock] = None, index: int = 0
    ):
        self._value = value
        self._type = type_spec
        self._block = block
        self._index = index

    @property
    def block_slot(self) -> Optional[Tuple[ClientBlock, int]]:
        """The block this client value is a (lazy) slice of, and its index there; None for
        a value of its own."""
        return None if self._block is None else (self._block, self._index)

    @property
    def internal(self) -> Any:
        if self._value is None and self._block is not None:
            self._value = self._block.slice(self._index)
        return self._value

    @property
    def internal_representation(self) -> Any:
        """TFF's name of `internal`: the tensor, `Struct`, dataset or function held.

        A sequence held as in-memory tensors (`TensorBatches`) shows as the
        `tf.data.Dataset` it stands for, as in TFF.
        """
        return self._public()

    def _public(self) -> Any:
        v = self.internal
        if isinstance(v, TensorBatches) or (
            isinstance(v, Struct)
            and any(isinstance(t, T.SequenceType) for t in T.flatten_type(self._type))
        ):
            return map_structure(as_dataset, v)
        return v

    @property
    def type_signature(self) -> T.Type:
        return self._type

    async def compute(self) -> Any:
        return self._public()  # sequences leave as datasets

    def __repr__(self) -> str:
        return f'EagerValue({self._type})'


def runs(values: Sequence[Any]) -> List[Tuple[int, int, Optional[ClientBlock], int]]:
    """Splits `values` into runs of consecutive clients of one block.

    Returns (begin, end, block, first index in block) per run; `block` is
    None for values that belong to no block (each such value is its own run).
    """
    out: List[Tuple[int, int, Optional[ClientBlock], int]] = []
    slots = [v.block_slot if isinstance(v, EagerValue) else None for v in values]
    i, n = 0, len(values)
    while i < n:
        slot = slots[i]
        if slot is None:
            out.append((i, i + 1, None, 0))
            i += 1
            continue
        b, lo = slot
        j = i + 1
        while j < n and (s := slots[j]) is not None and s[0] is b and s[1] == lo + (j - i):
            j += 1
        out.append((i, j, b, lo))
        i = j
    return out


class Row:
    """Row `index` of the stacked tensor `stacked` (which is `tensor`)."""

    __slots__ = ('tensor', 'stacked', 'index')

    def __init__(self, tensor: Any, stacked: Any, index: int):
        self.tensor, self.stacked, self.index = tensor, stacked, index


def plain_leaves(leaves: List[Any]) -> List[Any]:
    return [x.tensor if isinstance(x, Row) else x for x in leaves]


def stack_columns(rows: List[List[Any]], device_scope) -> Optional[List[Tuple[str, Any]]]:
    """Leaves of several clients as block leaves: shared (one object) or stacked."""
    out: List[Tuple[str, Any]] = []
    for j in range(len(rows[0])):
        col = [r[j] for r in rows]
        if isinstance(col[0], Row) and all(
            isinstance(c, Row) and c.stacked is col[0].stacked and c.index == col[0].index + k
            for k, c in enumerate(col)
        ):
            lo, whole = col[0].index, col[0].stacked
            out.append(
                (
                    'stacked',
                    whole if lo == 0 and len(col) == whole.shape[0] else whole[lo : lo + len(col)],
                )
            )
            continue
        col = plain_leaves(col)
        if all(c is col[0] for c in col):
            out.append(('shared', col[0]))
        elif all(
            isinstance(c, tf.Tensor) and c.dtype != tf.variant and c.shape == col[0].shape
            for c in col
        ):
            with device_scope():
                out.append(('stacked', tf.stack(col)))
        else:
            return None
    if not any(k == 'stacked' for k, _ in out):
        return None
    return out


def rows_to_values(partial: Partial, head_type: T.Type, acc_type: T.Type) -> Partial:
    """Turns the one-row leaf lists of a partial into numpy values of their types."""

    def value(leaf_list, t):
        vals = [np.asarray(x)[0] for x in leaf_list]
        return pack_as(t, vals) if isinstance(t, T.StructType) else vals[0]

    return Partial(
        partial.start,
        partial.stop,
        [value(v, head_type) for v in partial.head],
        {k: value(v, acc_type) for k, v in partial.nodes.items()},
        partial.open_chunk,
        None if partial.open_chunk is None else value(partial.open_acc, acc_type),
    )
