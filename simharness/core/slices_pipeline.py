"""Client datasets built and read by traced functions: `SlicesPipeline` (TFF's
``ClientData.preprocess`` over in-memory slices, traced once per layout) and
`TracedPipeline` (one such trace: arrays -> dataset, arrays -> every element), the recipe
`tf_sequences.read_fresh` and the wire (`runtime.datasets.dataset_to_wire`) read a dataset
by. `dataset_templates` makes the same recipe from a dataset's graph.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, List, Optional

import numpy as np
import tensorflow as tf

from simharness.core import types as T
from simharness.core.first_calls import FirstCall
from simharness.core.tf_sequences import (
    graph_is_repeatable,
    keep_recipe,
    read_all,
    readable_as_batches,
    serialize_detached,
)

__all__ = ['SlicesPipeline', 'TracedPipeline']

#: What gives a layout's build function (a `tf.function`'s concrete function, or
#: `wrap_function`'s): called on its first use.
BuildFn = Callable[[], tf.types.experimental.ConcreteFunction]


class SlicesPipeline:
    """``preprocess_fn(from_tensor_slices(slices))`` for any client's slices, traced once.

    TFF's ``ClientData.preprocess`` makes each client's dataset by applying the
    user's function to ``from_tensor_slices`` of the client's arrays. Built
    eagerly, every such dataset traces the pipeline's functions again (a
    ``map`` of the tutorials' batch format: ~5-10 ms a client, most of a round's
    time on the driver when a program builds a new cohort every round). Here
    the whole pipeline is traced once per layout of the slices (structure,
    dtypes, trailing shapes; any number of rows) into a `tf.function` that
    returns the dataset's variant: a client's dataset is one call.

    A dataset built here carries its recipe (this pipeline and the client's
    arrays), so that a read of a fresh copy (`read_fresh`) is one call of a
    second traced function that builds the dataset and reads every element,
    with no graph to serialize and rebuild: the elements a copy rebuilt from
    the dataset's graph would give (the same ops, the same seeds, new seed
    generators).

    The traced pipeline must give the elements of the eager one: its seeds are
    checked against those of one dataset built eagerly, once per layout (and
    global seed). A random op without a seed of its own under a global seed
    (``tf.random.set_seed``) gets a seed per dataset in eager code: then, and
    for a function that does not trace (one that reads the dataset in Python),
    `build` declines (None) and the caller builds every dataset eagerly.
    """

    def __init__(self, preprocess_fn: Any):
        self._fn = preprocess_fn
        self._lock = threading.Lock()
        # layout key -> its `TracedPipeline`, or None: the pipeline did not trace for that layout
        # (or draws other seeds than the eager one)
        self._traced: dict = {}

    @staticmethod
    def _key(leaves: List[Any]) -> Any:
        return tuple((a.dtype.str, a.shape[1:]) for a in leaves)

    def _entry(self, slices: Any, leaves: List[Any]) -> Any:
        from tensorflow.python.eager import context  # pylint: disable=import-outside-toplevel

        key = (
            repr(tf.nest.map_structure(lambda _: 0, slices)),
            self._key(leaves),
            context.global_seed(),
        )
        with self._lock:
            if key in self._traced:
                return self._traced[key]
            self._traced[key] = entry = self._trace(slices, leaves)
            return entry

    def _trace(self, slices: Any, leaves: List[Any]) -> Any:
        sig = [tf.TensorSpec([None] + list(a.shape[1:]), tf.as_dtype(a.dtype)) for a in leaves]
        fn = self._fn

        def dataset(leaf_tensors: Any) -> Any:
            return fn(
                tf.data.Dataset.from_tensor_slices(
                    tf.nest.pack_sequence_as(slices, list(leaf_tensors))
                )
            )

        specs: List[Any] = []

        def build_body(*leaf_tensors: Any) -> Any:
            ds = dataset(leaf_tensors)
            specs.append(ds.element_spec)
            return tf.data.experimental.to_variant(ds)

        try:
            build = tf.function(
                build_body, input_signature=sig, autograph=False
            ).get_concrete_function()
            spec = specs[-1]
            sample = tf.data.experimental.from_variant(build(*leaves), spec)
            graph = serialize_detached(sample)
            # The traced pipeline must draw the seeds the eager one draws: not so for a
            # random op without its own seed under a global seed (eager code takes its
            # seed from a counter, per dataset): then every dataset is built eagerly.
            if _seeds(graph) != _seeds(serialize_detached(dataset(leaves))):
                return None
            repeatable_pipeline = graph_is_repeatable(graph)
            finite = int(sample.cardinality()) != int(tf.data.INFINITE_CARDINALITY)
        except Exception:  # pylint: disable=broad-except  # any failure: build eagerly
            return None
        read = None
        if finite and readable_as_batches(spec):
            read = tf.function(
                lambda *leaf_tensors: read_all(dataset(leaf_tensors)),
                input_signature=sig,
                autograph=False,
            )
            try:
                read = read.get_concrete_function()
            except (TypeError, ValueError):  # rows of differing shapes: read element-wise
                read = None
        return TracedPipeline(lambda: build, spec, read, repeatable_pipeline, sig)

    def build(self, slices: Any) -> Optional[Any]:
        """The client's dataset, or None when it must be built eagerly (see the class)."""
        leaves = [np.asarray(a) for a in tf.nest.flatten(slices)]
        entry = self._entry(slices, leaves)
        if entry is None:
            return None
        ds = tf.data.experimental.from_variant(entry.variant(leaves), entry.spec)
        keep_recipe(ds, (entry, leaves))
        return ds


def _seeds(graph: bytes) -> List[Any]:
    """What decides a dataset graph's random draws: its int64 scalar constants (the seeds of
    its shuffles and samplings, with its sizes and counts) and the seed attributes of the ops
    of its functions, sorted."""
    graph_def = tf.compat.v1.GraphDef()
    graph_def.ParseFromString(graph)
    out: List[Any] = []
    for n in graph_def.node:
        if n.op == 'Const' and n.attr['dtype'].type == tf.int64.as_datatype_enum:
            value = tf.make_ndarray(n.attr['value'].tensor)
            if value.ndim == 0:
                out.append(('const', int(value)))
    for f in graph_def.library.function:
        for n in f.node_def:
            for name in ('seed', 'seed2'):
                if name in n.attr:
                    out.append((n.op, name, int(n.attr[name].i)))
    return sorted(out)


class TracedPipeline:
    """A `SlicesPipeline` traced for one layout: `build` (arrays -> dataset variant), the
    element `spec`, `read` (arrays -> `read_all`'s answer; None when its elements are not
    batches or it is infinite), whether every fresh read gives the same elements, and
    `read` as a serialized graph for other processes (`compiled`, made on first use). The
    first call of `build` and of `read` runs alone (`FirstCall`)."""

    def __init__(
        self, build: BuildFn, spec: Any, read: Any, repeatable_reads: bool, sig: List[Any]
    ):
        # `build` gives the concrete function on the first `variant` (traced then, where
        # it was not yet: a dataset that is only read never needs it)
        self._make_build: Optional[BuildFn] = build
        self._build: Optional[tf.types.experimental.ConcreteFunction] = None
        self.spec, self.read = spec, read
        self.repeatable = repeatable_reads
        self._sig = sig
        self._compiled: Any = None
        self._first_build, self._first_read = FirstCall(), FirstCall()
        self._build_lock = threading.Lock()

    @staticmethod
    def _call(concrete: Any, leaves: List[Any]) -> Any:
        """`concrete` on the client's arrays, as tensors of its signature's dtypes, called on
        the flat list (a `tf.function`'s own dispatch binds and checks every argument
        against the signature again: half of a dataset's 0.5 ms)."""
        flat = [tf.convert_to_tensor(a, dtype=s.dtype) for a, s in zip(leaves, concrete.inputs)]
        call_flat = getattr(concrete, '_call_flat', None)
        if call_flat is None:
            return concrete(*flat)
        out = call_flat(flat, concrete.captured_inputs)
        return (
            concrete.structured_outputs
            if out is None
            else tf.nest.pack_sequence_as(
                concrete.structured_outputs, tf.nest.flatten(out), expand_composites=True
            )
        )

    @property
    def build(self) -> tf.types.experimental.ConcreteFunction:
        """The concrete function arrays -> dataset variant (traced on first use)."""
        with self._build_lock:
            if self._make_build is not None:
                self._build, self._make_build = self._make_build(), None
        assert self._build is not None
        return self._build

    def variant(self, leaves: List[Any]) -> Any:
        """The client's dataset variant (`build` on its arrays)."""
        return self._first_build(lambda: self._call(self.build, leaves))

    def read_all(self, leaves: List[Any]) -> Any:
        """`read_all`'s answer for the client's arrays (`read` on them)."""
        return self._first_read(lambda: self._call(self.read, leaves))

    def compiled(self) -> Any:
        """`read` as a `CompiledComputation` (graph, input and output names, types)."""
        if self._compiled is None:
            from simharness.core import building_blocks as bb  # pylint: disable=import-outside-toplevel

            graph_def = self.read.graph.as_graph_def().SerializeToString(deterministic=True)
            param = T.StructType(
                [(None, T.TensorType(s.dtype.as_numpy_dtype, s.shape.as_list())) for s in self._sig]
            )
            result = T.StructType(
                [
                    (None, T.TensorType(o.dtype.as_numpy_dtype, o.shape.as_list()))
                    for o in self.read.outputs
                ]
            )
            self._compiled = bb.CompiledComputation(
                bb.TFGraph(
                    graph_def,
                    [t.name for t in self.read.inputs],
                    [t.name for t in self.read.outputs],
                ),
                T.FunctionType(param, result),
                name='dataset_read',
            )
        return self._compiled
