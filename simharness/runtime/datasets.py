"""`tf.data.Dataset`s across the worker seam: as serialized graphs, never as Python objects."""

from __future__ import annotations

import collections
import hashlib
import threading
from typing import Any, Callable, Hashable, List, Optional, Sequence, Set

import numpy as np

import tensorflow as tf

from simharness.core import types as T
from simharness.core.structure import tensor_to_numpy
from simharness.core.sequences import TensorBatches, stack_layout
from simharness.core.dataset_templates import attach_template_recipe
from simharness.core.tf_sequences import (
    batches_from_read,
    graph_is_repeatable,
    materialize,
    recipe_of,
    recognize,
    serialize_detached,
    serialized_graph,
)
from simharness.core.xla import import_concrete
from simharness.errors import SimharnessTypeError, SimharnessValueError
from simharness.core.tf_serialization import element_spec_for
from simharness.runtime.codec import DatasetBlob, DatasetRecipe


def dataset_to_blob(ds: Any) -> DatasetBlob:
    """Serializes a dataset: its graph, detached from the object's state
    (`tf_sequences.serialized_graph`: a worker, or the loopback's service in this
    process, rebuilds a fresh copy, as TFF's executors do); fails on datasets with Python
    state."""
    graph = serialized_graph(ds)
    if graph is None:
        graph = serialize_detached(ds)  # raises TF's error for a dataset with Python state
    return DatasetBlob(graph, T.from_tf_structure(ds.element_spec))


def dataset_to_wire(ds: Any, t: Any = None) -> Any:
    """A dataset as plain data: its arrays (`TensorBatches`) when it is slices of
    in-memory tensors; its recipe (`DatasetRecipe`: the client's arrays and the traced
    pipeline's read function) when a `ClientData.preprocess` pipeline built it or a
    template of its graph reads it (`core.dataset_templates`: datasets alike but for their
    arrays, as programs build them per client); else its
    serialized graph (`DatasetBlob`; the worker reads a small finite one into arrays
    itself, in parallel with the others: rebuilding and reading a pipeline costs
    milliseconds of `tf.data` set-up per dataset, where a recipe is one call)."""
    if isinstance(t, T.SequenceType):
        actual = T.from_tf_structure(ds.element_spec)
        if not t.element.is_assignable_from(actual):  # said here, before anything is sent
            raise SimharnessTypeError(
                f'dataset of {actual}* is not assignable to {t}',
                expected=t,
                actual=T.SequenceType(actual),
            )
    tb = recognize(ds, t if isinstance(t, T.SequenceType) else None)
    if tb is not None:
        return tb.with_components([tensor_to_numpy(c) for c in tb.components])
    wire = getattr(ds, _WIRE_ATTR, None)
    if wire is None:  # kept on the dataset (immutable): the same datasets come every round
        attach_template_recipe(ds)  # datasets alike but for their arrays: one read function
        recipe = recipe_of(ds)
        if recipe is not None:
            key, comp, element_type, leaves, _ = recipe
            wire = DatasetRecipe(key, comp, element_type, list(leaves))
        else:
            wire = dataset_to_blob(ds)
        try:
            setattr(ds, _WIRE_ATTR, wire)
        except AttributeError:  # a dataset class with slots: no cache
            pass
    return wire


_WIRE_ATTR = '_simharness_wire'
_REPEATABLE_ATTR = '_simharness_repeatable'


def repeatable_dataset(ds: Any) -> bool:
    """Whether every read of `ds` sent to a worker gives the same elements: slices of
    in-memory tensors, or a graph `tf_sequences.repeatable` says so of (kept on the object:
    the verdict of a dataset, which does not change, is computed once)."""
    verdict = getattr(ds, _REPEATABLE_ATTR, None)
    if verdict is None:
        recipe = recipe_of(ds)
        sent = dataset_to_wire(ds)
        verdict = isinstance(sent, TensorBatches) or (
            recipe[4] if recipe is not None else graph_is_repeatable(sent.graph)
        )
        try:
            setattr(ds, _REPEATABLE_ATTR, verdict)
        except AttributeError:
            pass
    return bool(verdict)


class BlobReader:
    """A worker's `dataset_from_blob` that keeps what it read of repeatable datasets.

    A dataset sent as its graph (a pipeline `recognize` cannot read: a ``map``,
    ``filter`` or ``repeat`` stage, as TFF's tutorials preprocess client data)
    costs ~2 ms to rebuild and read (``DatasetFromGraph``, then `materialize`),
    per client and round. TFF programs pass the same datasets every round, so
    a graph met a second time whose every read gives the same elements
    (`tf_sequences.repeatable`) is read into a `TensorBatches` and kept under
    the hash of its graph: the same graph again is that `TensorBatches`, the
    elements a fresh read would give (a graph met once costs a hash: programs
    that make new datasets every round pay nothing more). Other graphs
    (reshuffling shuffles, random ops, files), and ones `materialize` leaves
    to tf.data, are rebuilt every time, as before.

    Args:
      from_blob: rebuilds a dataset (`dataset_from_blob`).
      max_bytes / max_items: what is kept, least recently used out first.
    """

    def __init__(
        self,
        from_blob: Optional[Callable[[DatasetBlob], Any]] = None,
        max_bytes: int = 256 << 20,
        max_items: int = 4096,
    ):
        self._from_blob = from_blob or dataset_from_blob
        self.max_bytes, self.max_items = max_bytes, max_items
        # key -> (the TensorBatches read, its bytes)
        self._kept: 'collections.OrderedDict[Any, Any]' = collections.OrderedDict()
        self._bytes = 0
        self._other: Set[Hashable] = set()  # keys of graphs read afresh every time
        self._seen: Set[Hashable] = set()  # keys met once: checked and kept when they come again
        self._lock = threading.Lock()
        self.hits = 0

    def __call__(self, blob: DatasetBlob) -> Any:
        key = (hashlib.sha1(blob.graph).digest(), repr(blob.element_type))
        with self._lock:
            kept = self._kept.get(key)
            if kept is not None:
                self._kept.move_to_end(key)
                self.hits += 1
                return kept[0]
            other = key in self._other
            first = not other and key not in self._seen
            if first:  # a program that makes new datasets every round pays no check
                if len(self._seen) >= self.max_items:
                    self._seen.clear()
                self._seen.add(key)
        ds = self._from_blob(blob)
        if other or first:
            return ds
        tb = (
            materialize(ds, T.SequenceType(blob.element_type), unknown_size=True)
            if graph_is_repeatable(blob.graph)
            else None
        )
        with self._lock:
            if tb is None:
                if len(self._other) >= self.max_items:
                    self._other.clear()
                self._other.add(key)
                return ds
            size = sum(int(c.shape.num_elements() or 0) * c.dtype.size for c in tb.components)
            if size <= self.max_bytes:
                self._kept[key] = (tb, size)
                self._bytes += size
                while self._bytes > self.max_bytes or len(self._kept) > self.max_items:
                    self._bytes -= self._kept.popitem(last=False)[1][1]
        return tb


class RecipeReader:
    """A worker's reader of `DatasetRecipe`s: a recipe's read function is imported once
    (kept by its key, the most recent `max_items`) and each recipe is one call of it."""

    def __init__(self, max_items: int = 64):
        self.max_items = max_items
        self._fns: 'collections.OrderedDict[str, Any]' = collections.OrderedDict()
        self._lock = threading.Lock()

    def __call__(self, recipe: DatasetRecipe) -> Any:
        with self._lock:
            fn = self._fns.get(recipe.key)
            if fn is not None:
                self._fns.move_to_end(recipe.key)
        if fn is None:
            if recipe.read is None:
                raise SimharnessValueError(
                    f'a dataset recipe {recipe.key[:12]} came without its read function, '
                    'which this process has not received before'
                )
            fn = import_concrete(recipe.read)
            with self._lock:
                self._fns[recipe.key] = fn
                while len(self._fns) > self.max_items:
                    self._fns.popitem(last=False)
        out = fn(*[tf.convert_to_tensor(a) for a in recipe.leaves])
        return batches_from_read(list(out), recipe.element_type)


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
    return TensorBatches(
        stacked, seqs[0].batch_size, seqs[0].drop_remainder, t.element, seqs[0].passes
    )
