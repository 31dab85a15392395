"""Sequences held as in-memory tensors: the plain-data form of a sliced, batched dataset.

Most client datasets of a simulation are ``from_tensor_slices(arrays)``,
maybe ``.batch(b)``: arrays in memory, cut into elements. `TensorBatches`
records exactly that (the arrays and how they are cut), so that

* it crosses to a worker or a service as plain arrays (no dataset graph),
* a client update that iterates it (``dataset.reduce``, ``for batch in
  dataset``) runs as a tensor loop over the arrays (see
  `simharness.executors.leaf.sequence_lowering`), and
* anything else gets the very same elements from the `tf.data.Dataset` it
  stands for (`simharness.executors.leaf.tensor_sequences.to_dataset`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from simharness.core import types as T

__all__ = ['TensorBatches', 'stack_layout']


@dataclasses.dataclass(eq=False)
class TensorBatches:
    """A sequence whose elements are rows, or batches of rows, of in-memory arrays.

    Attributes:
      components: one array (numpy, or a tensor inside an executor) per leaf
        of the element type, in the type's leaf order, all with the same
        number of rows.
      batch_size: None when element i is row i of every component (a dataset
        from ``from_tensor_slices``); b when element i holds rows
        ``[i * b, (i + 1) * b)`` (``.batch(b)``).
      drop_remainder: with a batch size, whether a last partial batch is dropped.
      element_type: the element type of the sequence.
      passes: the rows are this many consecutive passes of equal length, each
        batched on its own (``.batch(b).repeat(k)``, or a pipeline read once:
        no batch spans two passes); with no batch size it changes nothing.
    """

    components: List[Any]
    batch_size: Optional[int]
    drop_remainder: bool
    element_type: Any
    passes: int = 1

    def __post_init__(self) -> None:
        #: Views derived from this sequence by the executor that holds it, by name
        #: ('dataset': the dataset it stands for; 'checked': its checked form;
        #: 'rows': the stacked tensor it is a row of). Not a field: never encoded.
        self.derived: Dict[str, Any] = {}

    @property
    def num_rows(self) -> int:
        return int(self.components[0].shape[0])

    @property
    def num_elements(self) -> int:
        rows, b = self.num_rows, self.batch_size
        if b is None:
            return rows
        per_pass = rows // self.passes
        return self.passes * (per_pass // b if self.drop_remainder else -(-per_pass // b))

    def with_components(self, components: List[Any]) -> 'TensorBatches':
        """The same sequence over other arrays (e.g. tensors in place of numpy)."""
        return TensorBatches(
            list(components), self.batch_size, self.drop_remainder, self.element_type, self.passes
        )

    def __repr__(self) -> str:
        how = 'rows' if self.batch_size is None else f'batches of {self.batch_size}'
        if self.passes > 1:
            how += f' in {self.passes} passes'
        return f'TensorBatches({T.SequenceType(self.element_type)}, {self.num_rows} rows, {how})'


def stack_layout(
    sequences: Sequence[TensorBatches], components: Optional[Sequence[Sequence[Any]]] = None
) -> Optional[List[np.ndarray]]:
    """The sequences' components stacked, ``[n, rows, ...]`` each (sequence i at index i),
    when all are cut alike (batch size, drop_remainder, passes) and their components
    (`components`, one list per sequence, if given in place of theirs) are numpy arrays of
    one shape and dtype; else None (the caller takes them one by one)."""
    if not sequences:
        return None
    comps = [
        list(tb.components) if components is None else list(components[i])
        for i, tb in enumerate(sequences)
    ]
    first, f = sequences[0], comps[0]
    if not f or not all(isinstance(c, np.ndarray) for c in f):
        return None
    for tb, cs in zip(sequences, comps):
        if (
            tb.batch_size != first.batch_size
            or tb.drop_remainder != first.drop_remainder
            or tb.passes != first.passes
            or len(cs) != len(f)
            or not all(
                isinstance(c, np.ndarray) and c.dtype == a.dtype and c.shape == a.shape
                for c, a in zip(cs, f)
            )
        ):
            return None
    return [np.stack([cs[j] for cs in comps]) for j in range(len(f))]
