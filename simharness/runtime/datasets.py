"""`tf.data.Dataset`s across the worker seam: as serialized graphs, never as Python objects."""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from simharness.core import types as T
from simharness.core.tf_serialization import element_spec_for
from simharness.runtime.codec import DatasetBlob


def dataset_to_blob(ds: Any) -> DatasetBlob:
    """Serializes a dataset (its graph; fails on datasets with Python state)."""
    graph = ds._as_serialized_graph(
        external_state_policy=tf.data.experimental.ExternalStatePolicy.FAIL).numpy()
    return DatasetBlob(graph, T._from_tf_structure(ds.element_spec))


def dataset_from_blob(blob: DatasetBlob) -> Any:
    """Rebuilds a dataset from its `DatasetBlob`."""
    variant = tf.raw_ops.DatasetFromGraph(graph_def=blob.graph)
    return tf.data.experimental.from_variant(variant, element_spec_for(blob.element_type))
