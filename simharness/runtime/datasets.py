"""`tf.data.Dataset`s across the worker seam: as serialized graphs, never as Python objects."""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from simharness.core import types as T
from simharness.core.structure import tensor_to_numpy
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
