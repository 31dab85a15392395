"""`tf.data.Dataset`s across the worker seam: as serialized graphs, never as Python objects."""

from __future__ import annotations

from typing import Any, List, Optional, Sequence

import numpy as np

import tensorflow as tf

from simharness.core import types as T
from simharness.core.structure import tensor_to_numpy
from simharness.core.sequences import TensorBatches, stack_layout
from simharness.core.tf_sequences import recognize
from simharness.core.tf_serialization import element_spec_for
from simharness.runtime.codec import DatasetBlob


def dataset_to_blob(ds: Any) -> DatasetBlob:
    """Serializes a dataset (its graph; fails on datasets with Python state)."""
    graph = ds._as_serialized_graph(
        external_state_policy=tf.data.experimental.ExternalStatePolicy.FAIL).numpy()
    return DatasetBlob(graph, T.from_tf_structure(ds.element_spec))


def dataset_to_wire(ds: Any, t: Any = None) -> Any:
    """A dataset as plain data: its arrays (`TensorBatches`) when it is slices of
    in-memory tensors, else its serialized graph (`DatasetBlob`; the worker
    reads a small finite one into arrays itself, in parallel with the others:
    reading a pipeline costs milliseconds of `tf.data` set-up per dataset)."""
    tb = recognize(ds, t if isinstance(t, T.SequenceType) else None)
    if tb is not None:
        return tb.with_components([tensor_to_numpy(c) for c in tb.components])
    return dataset_to_blob(ds)


def dataset_from_blob(blob: DatasetBlob) -> Any:
    """Rebuilds a dataset from its `DatasetBlob`."""
    variant = tf.raw_ops.DatasetFromGraph(graph_def=blob.graph)
    return tf.data.experimental.from_variant(variant, element_spec_for(blob.element_type))


def stacked_batches(values: Sequence[Any], t: T.SequenceType) -> Optional[TensorBatches]:
    """Many clients' in-memory datasets of one layout as one `TensorBatches` of stacked arrays.

    Component j of the result is ``[n, rows, ...]``: client i's component j
    at index i. None unless every value is a dataset of slices of in-memory
    tensors (or a `TensorBatches`) of `t`, all cut the same way (batch size,
    drop_remainder, passes) with components of the same shapes and dtypes:
    the per-value path takes the rest (and reports what does not fit `t`).
    One array per component crosses the seam, not one per client.
    """
    seqs: List[TensorBatches] = []
    comps: List[List[np.ndarray]] = []
    for v in values:
        tb = v if isinstance(v, TensorBatches) else recognize(v, t)
        if tb is None or not isinstance(tb.components, (list, tuple)):
            return None
        arrays = tb.derived.get('numpy')
        if arrays is None:  # kept: a program passes the same datasets every round
            arrays = tb.derived['numpy'] = [tensor_to_numpy(c) for c in tb.components]
        seqs.append(tb)
        comps.append(arrays)
    stacked = stack_layout(seqs, comps)
    if stacked is None:
        return None
    return TensorBatches(stacked, seqs[0].batch_size, seqs[0].drop_remainder, t.element,
                         seqs[0].passes)
