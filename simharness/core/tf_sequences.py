"""Recognizing the in-memory tensors behind a `tf.data.Dataset` (`TensorBatches`).

`recognize` finds the arrays behind a ``tf.data.Dataset`` built as
``from_tensor_slices(arrays)`` with an optional ``.batch(b[, drop_remainder])``
and optional ``.prefetch(...)`` / ``.with_options(...)`` (which do not change
the elements), by reading the dataset objects' own fields: no element is
produced. Anything else is left a dataset.

Every other dataset is read as TFF's executors read one: a copy rebuilt from
its serialized graph for each call (`fresh_copy`, `read_fresh`). TFF
serializes a dataset argument (``DatasetToGraphV2``) and its executor builds
the dataset anew from that graph, in a runtime that shares no state with the
user's object, so a ``shuffle(b, seed=s)`` reads in its first seeded order on
every call, however often the same object is passed, while iterating the
user's object itself draws a new order each time. The graph names the seed
generators (and caches) of the user's object; a copy rebuilt from it in the
same process would share them, so `serialized_graph` detaches every resource
handle first: a copy rebuilt here reads as one rebuilt in a worker process.
"""

from __future__ import annotations

import collections
import threading
from typing import Any, List, Optional, cast

import tensorflow as tf

from simharness.core import types as T
from simharness.core.sequences import TensorBatches
from simharness.core.structure import Struct

__all__ = [
    'detach_resources',
    'element_leaves',
    'fresh_copy',
    'graph_is_repeatable',
    'keep_recipe',
    'materialize',
    'pure_node',
    'read_all',
    'read_all_eagerly',
    'read_fresh',
    'readable_as_batches',
    'recipe_known',
    'recognize',
    'repeatable',
    'serialize_detached',
    'serialized_graph',
]

# Dataset classes that pass elements through unchanged.
_PASS_THROUGH = (
    '_PrefetchDataset',
    '_OptionsDataset',
    'PrefetchDataset',
    '_ModelDataset',
    '_OptimizeDataset',
)


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
    elif (
        isinstance(elem, Struct)
        or not all(n is not None for n in names)
        or isinstance(elem, (list, tuple))
        and not T.is_namedtuple(elem)
    ):
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
    """``from_tensor_slices(...)``, then optionally ``.repeat(k)``, ``.batch(b)`` and
    ``.repeat(k)`` (counts known: a user's epochs, before or after batching), read from
    the dataset's ops without running it."""
    try:
        node = _through(ds)
        passes = 1  # a repeat after the batch: each pass batched on its own
        if type(node).__name__ == '_RepeatDataset':
            passes = _repeat_count(node)
            node = _through(node._input_dataset)
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
            node = _through(node._input_dataset)
        inner = 1  # a repeat before the batch (or with none): batches span the passes
        if type(node).__name__ == '_RepeatDataset':
            inner = _repeat_count(node)
            node = _through(node._input_dataset)
        if not passes or not inner or type(node).__name__ != '_TensorSliceDataset':
            return None  # forever (or an unknown count), or not slices of tensors
        tensors = list(node._tensors)
        if not tensors or not all(hasattr(x, 'numpy') for x in tensors):
            return None
        element = T.from_tf_structure(ds.element_spec)
        if t is not None and not t.element.is_assignable_from(element):
            return None  # the caller reports the type error
        nested = tf.nest.pack_sequence_as(node._structure, tensors)
        comps = element_leaves(nested, element)
        if any(c.dtype == tf.variant or c.shape.rank is None or c.shape.rank < 1 for c in comps):
            return None
        copies = passes * inner
        if copies > 1:
            size = sum(int(c.shape.num_elements() or 0) * c.dtype.size for c in comps)
            if size * copies > MATERIALIZE_MAX_BYTES:
                return None
            comps = [tf.concat([c] * copies, 0) for c in comps]
        return TensorBatches(
            comps,
            batch_size,
            drop,
            t.element if t is not None else element,
            passes if batch_size is not None else 1,
        )
    except (AttributeError, TypeError, ValueError):  # a TF version with other fields
        return None


def _through(node: tf.data.Dataset) -> tf.data.Dataset:
    """`node`, or the first dataset under it that is not a pass-through (prefetch, options)."""
    while type(node).__name__ in _PASS_THROUGH:
        node = node._input_dataset
    return node


def _repeat_count(node: tf.data.Dataset) -> int:
    """The count of a ``repeat`` (>= 1), or 0 when it repeats forever or is not known."""
    count = getattr(node, '_count', None)
    if not isinstance(count, tf.Tensor) or not hasattr(count, 'numpy'):
        return 0  # a symbolic count (a dataset made inside a tf.function)
    return max(int(count.numpy()), 0)


#: Most elements / bytes a dataset may have to be read into a `TensorBatches`.
MATERIALIZE_MAX_ELEMENTS = 4096
MATERIALIZE_MAX_BYTES = 64 << 20


def materialize(ds: Any, t: T.SequenceType, unknown_size: bool = False) -> Optional[TensorBatches]:
    """The elements of a small finite dataset, read once, as a `TensorBatches`.

    For pipelines `recognize` cannot read without running them (``repeat``,
    ``shuffle``, ``map``, ``batch`` after them, as TFF's tutorials build
    client data): the dataset is iterated once, as the computation would, and
    its elements become components. Batches of one size b (the last may be
    smaller) become batches of b; elements of one shape become rows. Each call
    reads the dataset afresh, so a pipeline with randomness gives new draws
    per call as it would under `tf.data`.

    With `unknown_size`, a dataset whose size TF cannot tell (``unbatch``,
    ``filter``: the text tutorials' pipelines) is read too, up to the limits
    below: only a fresh copy (`read_fresh`) is read so, which a second read
    gives again as a computation would read it.

    None when the dataset is infinite, of unknown size (unless `unknown_size`) or
    large (more than `MATERIALIZE_MAX_ELEMENTS` elements or `MATERIALIZE_MAX_BYTES` bytes),
    empty, not of element type ``t.element``, or has elements that fit
    neither layout.
    """
    if not isinstance(ds, tf.data.Dataset) or not isinstance(t, T.SequenceType):
        return None
    try:
        count = int(ds.cardinality())
        unknown = unknown_size and count == int(tf.data.UNKNOWN_CARDINALITY)
        if not unknown and (count < 1 or count > MATERIALIZE_MAX_ELEMENTS):
            return None  # empty, infinite (-1) or unknown (-2): left to tf.data
        if not t.element.is_assignable_from(T.from_tf_structure(ds.element_spec)):
            return None
        leaf_types = T.flatten_type(t.element)
        if not all(isinstance(l, T.TensorType) and l.shape is not None for l in leaf_types):
            return None
        # one traced call reads every element: batches of open leading size, or elements of
        # one static shape each (``batch(b, drop_remainder=True)``, as the text tutorials)
        if (
            all(len(l.shape) >= 1 and l.shape[0] is None for l in leaf_types)
            or all(len(l.shape) >= 1 and l.is_fully_defined for l in leaf_types)
        ) and all(
            s.shape.rank is not None and s.shape.rank >= 1 for s in tf.nest.flatten(ds.element_spec)
        ):
            fast = _read_batches(ds, t)
            if fast is not None:
                return fast
        rows: List[List[Any]] = []
        nbytes = 0
        for elem in ds:
            if len(rows) >= MATERIALIZE_MAX_ELEMENTS:
                return None  # a dataset of unknown size larger than the limit
            leaves = element_leaves(elem, t.element)
            nbytes += sum(int(x.shape.num_elements() or 0) * x.dtype.size for x in leaves)
            if nbytes > MATERIALIZE_MAX_BYTES or any(x.dtype == tf.variant for x in leaves):
                return None
            rows.append(leaves)
    except (tf.errors.OpError, TypeError, ValueError):
        return None  # the dataset path reports what is wrong, when it runs
    if not rows:
        return None
    nleaves = len(rows[0])
    # batches of b (the type leaves the batch size open): every leaf of an element has
    # the same leading size; all b but the last
    if all(len(l.shape) >= 1 and l.shape[0] is None for l in leaf_types) and all(
        x.shape.rank >= 1 for x in rows[0]
    ):
        sizes = []
        for r in rows:
            lead = {int(x.shape[0]) for x in r}
            sizes.append(lead.pop() if len(lead) == 1 else -1)
        b = sizes[0]
        if (
            b >= 1
            and all(s == b for s in sizes[:-1])
            and 1 <= sizes[-1] <= b
            and all(r[j].shape[1:] == rows[0][j].shape[1:] for r in rows for j in range(nleaves))
        ):
            comps = [
                tf.concat([r[j] for r in rows], 0) if len(rows) > 1 else rows[0][j]
                for j in range(nleaves)
            ]
            return TensorBatches(comps, b, False, t.element)
        passes = _passes(sizes)
        if passes > 1 and all(
            r[j].shape[1:] == rows[0][j].shape[1:] for r in rows for j in range(nleaves)
        ):
            comps = [tf.concat([r[j] for r in rows], 0) for j in range(nleaves)]
            return TensorBatches(comps, sizes[0], False, t.element, passes)
    if all(r[j].shape == rows[0][j].shape for r in rows for j in range(nleaves)):
        return TensorBatches(
            [tf.stack([r[j] for r in rows]) for j in range(nleaves)], None, False, t.element
        )
    return None


def _passes(sizes: List[int]) -> int:
    """k when batch sizes `sizes` are k > 1 equal passes of ``[b, ..., b, r]`` (r < b: a
    ``.batch(b).repeat(k)``), else 1."""
    b = sizes[0]
    if b < 1:
        return 1
    m = next((i + 1 for i, s in enumerate(sizes) if s != b), None)
    if m is None or not 1 <= sizes[m - 1] < b or len(sizes) % m:
        return 1
    k = len(sizes) // m
    return k if k > 1 and sizes == sizes[:m] * k else 1


_READERS: dict = {}
_READERS_LOCK = threading.Lock()


#: Dataset ops whose elements depend on their inputs alone: no randomness, no files, no
#: other state. (The parallel ones only with ``deterministic`` not ``'false'``.)
PURE_DATASET_OPS = frozenset(
    {
        'TensorSliceDataset',
        'TensorDataset',
        'RangeDataset',
        'BatchDataset',
        'BatchDatasetV2',
        'PaddedBatchDataset',
        'PaddedBatchDatasetV2',
        'MapDataset',
        'ParallelMapDataset',
        'ParallelMapDatasetV2',
        'FilterDataset',
        'TakeDataset',
        'SkipDataset',
        'RepeatDataset',
        'PrefetchDataset',
        'ConcatenateDataset',
        'ZipDataset',
        'FlatMapDataset',
        'TakeWhileDataset',
        'ScanDataset',
        'UnbatchDataset',
        'OptionsDataset',
        'ModelDataset',
        'OptimizeDatasetV2',
        'MaxIntraOpParallelismDataset',
        'PrivateThreadPoolDataset',
        'AssertCardinalityDataset',
        'FinalizeDataset',
        'WindowDataset',
    }
)
#: Ops TF's registry calls stateful that compute the same values on every read.
PURE_STATEFUL_OPS = frozenset(
    {
        'TensorSliceDataset',
        'TensorDataset',
        '_Arg',
        '_Retval',
        'StatefulPartitionedCall',
        'Assert',
        'NoOp',
    }
)
_IMPURE_WORDS = ('Random', 'Shuffle', 'Sampling', 'Seed')
#: Shuffles whose order their ``seed`` and ``seed2`` inputs (2 and 3) fix when they do not
#: reshuffle: the same order on every read unless both are 0 (no seed: random per read).
_SEEDED_SHUFFLES = frozenset(
    {'ShuffleDataset', 'ShuffleDatasetV3', 'ShuffleAndRepeatDataset', 'ShuffleAndRepeatDatasetV2'}
)


def _seeded(node: Any, consts: Any) -> bool:
    """Whether a shuffle node of a fresh copy shuffles in an order its seeds fix: seeds that
    are constants, not both 0 (no seed: a random order per copy). A copy rebuilt from a
    detached graph (`serialized_graph`) starts its seed generator anew, so a reshuffling
    stage gives the same orders on every fresh read too (its first order, and the next
    ones within a read when a ``repeat`` follows it)."""
    seeds = []
    for name in node.input[2:4]:
        c = consts.get(name.split(':')[0])
        if c is None:
            return False
        try:
            seeds.append(int(tf.make_ndarray(c.attr['value'].tensor)))
        except (TypeError, ValueError, KeyError):
            return False
    return len(seeds) == 2 and any(seeds)


def repeatable(graph_def: Any) -> bool:
    """Whether every read of a fresh dataset of the serialized graph `graph_def` (a
    ``GraphDef``, as `serialized_graph` gives) yields the same elements.

    Yes for a shuffle with a seed (``shuffle(b, seed=s)``, reshuffling or not: every
    fresh copy shuffles in the same orders, as TFF's executors read it on every call).
    No: a shuffle without a seed (a new order per copy), a sampling stage, a random op in a function (even a seeded or stateless one: the answer
    errs on the side of reading again), an op TF calls stateful other than the in-memory
    sources, a dataset op outside the pure ones above (files, SQL, ...), a parallel stage
    allowed to reorder (``deterministic='false'``), an op TF does not know.
    """
    functions = {f.signature.name for f in graph_def.library.function}
    consts = {n.name: n for n in graph_def.node if n.op == 'Const'}
    top = [(n, True) for n in graph_def.node]
    inner = [(n, False) for f in graph_def.library.function for n in f.node_def]
    for n, at_top in top + inner:
        op = n.op
        if op in functions:
            continue  # a call of a function of the library: its nodes are checked too
        if op in _SEEDED_SHUFFLES and at_top:
            if not _seeded(n, consts):
                return False
            continue
        if not pure_node(n):
            return False
    return True


def pure_node(node: 'tf.compat.v1.NodeDef') -> bool:
    """Whether a dataset graph's node (not a call of its library's functions) computes the
    same values on every read: no random, shuffling or sampling op, only the pure dataset
    stages, no parallel stage allowed to reorder, no op TF calls stateful but the in-memory
    sources, no op TF does not know."""
    from tensorflow.python.framework import op_def_registry  # pylint: disable=import-outside-toplevel

    op = node.op
    if any(w in op for w in _IMPURE_WORDS) or ('Dataset' in op and op not in PURE_DATASET_OPS):
        return False
    if 'deterministic' in node.attr and node.attr['deterministic'].s == b'false':
        return False
    od = op_def_registry.get(op)
    return od is not None and not (od.is_stateful and op not in PURE_STATEFUL_OPS)


def _plain_options() -> Any:
    """No graph rewrites or autotuning: a read of a few elements pays for neither."""
    opts = tf.data.Options()
    opts.experimental_optimization.apply_default_optimizations = False
    opts.autotune.enabled = False
    return opts


def _reader_key(spec: Any) -> Any:
    return (repr(tf.nest.map_structure(lambda _: 0, spec)), tuple(tf.nest.flatten(spec)))


def _batch_reader(spec: Any) -> Any:
    """A `tf.function` from a dataset variant of element spec `spec` to its batches' leading
    sizes ``[elements, leaves]`` and their rows concatenated (one call, one pass over the
    dataset, no Python loop); None for a spec whose trace failed before."""
    key = _reader_key(spec)
    with _READERS_LOCK:
        if key in _READERS:
            return _READERS[key]

        @tf.function(input_signature=[tf.TensorSpec([], tf.variant)], autograph=False)
        def fn(variant):
            return read_all(tf.data.experimental.from_variant(variant, spec))

        _READERS[key] = fn
        return fn


def read_all(ds: Any) -> Any:
    """In a TF function: the batches of `ds`, read in one pass, as their leading sizes
    ``[elements, leaves]`` and each leaf's rows concatenated (`_sizes_and_rows`)."""
    ds = ds.with_options(_plain_options())
    # each leaf's batches as one ragged tensor: its rows and the batch sizes; an empty
    # dataset gives one of no rows (what a client without data holds), more elements than
    # the limit an error (the caller reads such a dataset otherwise); one pass, read once
    batches = ds.ragged_batch(MATERIALIZE_MAX_ELEMENTS + 1)
    empty = tf.data.Dataset.from_tensors(tf.nest.map_structure(_empty_batch, batches.element_spec))
    first = batches.concatenate(empty).take(1).get_single_element()
    leaves = tf.nest.flatten(first)
    count = tf.shape(
        leaves[0].row_lengths() if isinstance(leaves[0], tf.RaggedTensor) else leaves[0],
        out_type=tf.int64,
    )[0]
    # the plain Assert op (tf.debugging's asserts build a cond around it: ~0.05 s more to
    # trace each reader); its error is an OpError, which the callers take as "read
    # otherwise"
    too_many = tf.raw_ops.Assert(
        condition=count <= MATERIALIZE_MAX_ELEMENTS,
        data=[tf.constant(f'more than {MATERIALIZE_MAX_ELEMENTS} elements')],
    )
    with tf.control_dependencies([too_many]):
        leaves = [x if isinstance(x, tf.RaggedTensor) else tf.identity(x) for x in leaves]
    sizes, rows = zip(*[_sizes_and_rows(r) for r in leaves])
    return tf.stack(sizes, axis=1), list(rows)


def _empty_batch(spec: tf.TypeSpec) -> tf.Tensor:
    """A batch of no elements of `spec` (a `ragged_batch` leaf: ragged, or dense)."""
    ragged = isinstance(spec, tf.RaggedTensorSpec)
    zeros = tf.zeros([0] + [d or 0 for d in spec.shape[2 if ragged else 1 :].as_list()], spec.dtype)
    return (
        # no rows, no lengths: valid as made (a validated one adds ~0.1 s of asserts to
        # every reader's trace)
        tf.RaggedTensor.from_row_lengths(
            zeros, tf.zeros([0], spec.row_splits_dtype), validate=False
        )
        if ragged
        else zeros
    )


def _sizes_and_rows(leaf: Any) -> Any:
    """One leaf of ``ragged_batch``'s single element: its batches' leading sizes and their
    rows concatenated. A leaf whose batches have a static shape (``batch(b,
    drop_remainder=True)``) comes back dense ``[n, b, ...]``, not ragged; a leaf ragged
    below the rows (ragged_rank > 1: rows of other shapes) has no dense rows (ValueError,
    traced once: the caller reads such a dataset element by element)."""
    if isinstance(leaf, tf.RaggedTensor):
        if leaf.ragged_rank != 1:
            raise ValueError(
                f'batches of rows of differing shapes (ragged rank '
                f'{leaf.ragged_rank}) have no dense rows'
            )
        return leaf.row_lengths(), leaf.values
    shape = tf.shape(leaf, out_type=tf.int64)
    return (tf.fill(shape[:1], shape[1]), tf.reshape(leaf, tf.concat([[-1], shape[2:]], 0)))


def read_all_eagerly(ds: Any) -> Any:
    """`read_all`'s answer for `ds`, by the traced reader of its element spec."""
    reader = _batch_reader(ds.element_spec)
    if reader is None:
        raise ValueError('the elements are not batches of dense rows')
    return reader(tf.data.experimental.to_variant(ds))


def _read_batches(ds: Any, t: T.SequenceType) -> Optional[TensorBatches]:
    """`materialize` of a dataset of batches in one TF call: batches of b (the last may be
    smaller), or k equal passes of them; None otherwise (or when the call fails)."""
    spec = ds.element_spec
    reader = _batch_reader(spec)
    if reader is None:
        return None  # a spec whose trace failed before
    try:
        sizes_t, flat = reader(tf.data.experimental.to_variant(ds))
    except (tf.errors.OpError, TypeError, ValueError) as e:
        if not isinstance(e, tf.errors.OpError):  # failed at trace: fails for the spec
            with _READERS_LOCK:
                _READERS[_reader_key(spec)] = None
        return None  # uneven leaves, batches of other trailing shapes, too many rows
    return _batches_of(sizes_t, flat, spec, t)


def _batches_of(sizes_t: Any, flat: Any, spec: Any, t: T.SequenceType) -> Optional[TensorBatches]:
    """The `TensorBatches` of a batch reader's answer: each element's leading size per leaf
    ``[elements, leaves]`` and each leaf's rows concatenated; None unless they are batches
    of b (the last may be smaller) or k equal passes of them, within the size limits."""
    per_leaf = sizes_t.numpy()
    if per_leaf.ndim != 2 or not len(per_leaf) or (per_leaf != per_leaf[:, :1]).any():
        return None
    sizes = [int(s) for s in per_leaf[:, 0]]
    if len(sizes) > MATERIALIZE_MAX_ELEMENTS:
        return None
    if sum(int(x.shape.num_elements() or 0) * x.dtype.size for x in flat) > MATERIALIZE_MAX_BYTES:
        return None
    specs = tf.nest.flatten(spec)
    if all(isinstance(l, T.TensorType) and l.is_fully_defined for l in T.flatten_type(t.element)):
        # elements of a static shape asked for (``batch(b, drop_remainder=True)`` read as
        # its own type): element i is row i of the elements stacked, as `materialize`
        # reads them
        rows = [tf.reshape(x, [len(sizes)] + s.shape.as_list()) for x, s in zip(flat, specs)]
        return TensorBatches(
            element_leaves(tf.nest.pack_sequence_as(spec, rows), t.element), None, False, t.element
        )
    comps = element_leaves(tf.nest.pack_sequence_as(spec, list(flat)), t.element)
    b = sizes[0]
    if b >= 1 and all(s == b for s in sizes[:-1]) and 1 <= sizes[-1] <= b:
        return TensorBatches(comps, b, False, t.element)
    passes = _passes(sizes)
    if passes > 1:
        return TensorBatches(comps, b, False, t.element, passes)
    return None


_GRAPH_ATTR = '_simharness_graph'
_READ_ATTR = '_simharness_fresh_reads'
_DETACHED = '/simharness-detached'


#: Ops that call back into this process's Python: a graph holding one means nothing
#: elsewhere (another process has no such function), so the dataset is not serializable.
PYTHON_OPS = frozenset({'PyFunc', 'PyFuncStateless', 'EagerPyFunc'})


def serialize_detached(ds: Any) -> bytes:
    """``ds``'s graph with its resource handles detached; raises what TF raises for a
    dataset that holds Python state (``from_generator``, ``py_function``).

    Other state is left out, as TFF's serialization (``DatasetToGraphV2``'s default
    policy) leaves it out: a stateful random op in a ``map`` starts anew from its seed in
    every copy, as it does in TFF's executors.
    """
    policy = tf.data.experimental.ExternalStatePolicy
    try:
        graph = ds._as_serialized_graph(external_state_policy=policy.FAIL).numpy()
    except tf.errors.FailedPreconditionError:
        graph = ds._as_serialized_graph(external_state_policy=policy.IGNORE).numpy()
        graph_def = tf.compat.v1.GraphDef()
        graph_def.ParseFromString(graph)
        ops = {n.op for n in graph_def.node} | {
            n.op for f in graph_def.library.function for n in f.node_def
        }
        if ops & PYTHON_OPS:
            raise  # Python state: the FAIL policy's own error
    return detach_resources(graph)


def detach_resources(graph: bytes) -> bytes:
    """`graph` (a serialized dataset ``GraphDef``) with every resource handle it holds as a
    constant (the seed generator of a ``shuffle``, the store of a ``cache``) renamed to one
    no resource manager holds: a dataset rebuilt from it makes its own, as it does in
    another process, and shares no state with the dataset it was serialized from."""
    graph_def = tf.compat.v1.GraphDef()
    graph_def.ParseFromString(graph)
    changed = False
    for node in graph_def.node:
        if node.op != 'Const' or node.attr['dtype'].type != tf.resource.as_datatype_enum:
            continue
        for handle in node.attr['value'].tensor.resource_handle_val:
            if not handle.name.endswith(_DETACHED):
                handle.name += _DETACHED
                changed = True
    return graph_def.SerializeToString(deterministic=True) if changed else graph


def serialized_graph(ds: Any) -> Optional[bytes]:
    """The detached serialized graph of `ds` (kept on the object, which is immutable), or
    None when `ds` holds Python state and has no graph (then only the object itself can
    be read)."""
    graph = getattr(ds, _GRAPH_ATTR, None)
    if graph is None:
        try:
            graph = serialize_detached(ds)
        except (tf.errors.OpError, TypeError, ValueError):
            graph = b''
        try:
            setattr(ds, _GRAPH_ATTR, graph)
        except AttributeError:  # a dataset class with slots: no cache
            pass
    return graph or None


def graph_is_repeatable(graph: bytes) -> bool:
    """`repeatable` of a serialized graph."""
    graph_def = tf.compat.v1.GraphDef()
    graph_def.ParseFromString(graph)
    return repeatable(graph_def)


def fresh_copy(ds: Any) -> Any:
    """`ds` as TFF's executors read it on a call: a dataset rebuilt from its detached graph
    (`ds` itself when it has none)."""
    graph = serialized_graph(ds)
    if graph is None:
        return ds
    variant = tf.raw_ops.DatasetFromGraph(graph_def=graph)
    return tf.data.experimental.from_variant(variant, ds.element_spec)


def read_fresh(ds: Any, t: T.SequenceType) -> Optional[TensorBatches]:
    """`materialize` of a fresh copy of `ds` (`fresh_copy`): the elements a call reads.

    When every fresh read gives the same elements (`repeatable`), the answer is kept on
    the object: a program that passes the same datasets every round reads each once.
    """
    reads = getattr(ds, _READ_ATTR, None)
    if reads is not None and t in reads:
        return reads[t]
    by_recipe = _read_recipe(ds, t)
    if by_recipe is not None and by_recipe[0] is not None:
        tb, keep = by_recipe
    else:
        graph = serialized_graph(ds)
        if graph is None:
            return materialize(ds, t)
        tb = materialize(fresh_copy(ds), t, unknown_size=True)
        keep = tb is not None and graph_is_repeatable(graph)
    if tb is not None and keep:
        if reads is None:
            reads = {}
            try:
                setattr(ds, _READ_ATTR, reads)
            except AttributeError:
                return tb
        reads[t] = tb
    return tb


_RECIPE_ATTR = '_simharness_recipe'


def readable_as_batches(spec: Any) -> bool:
    """Whether elements of `spec` can be read by `read_all`: every leaf a batch (rank >= 1,
    leading size unknown), or every leaf of a fully known shape of rank >= 1 (batches of
    a static size, read as rows)."""
    specs = tf.nest.flatten(spec)
    if all(
        s.shape.rank is not None and s.shape.rank >= 1 and s.shape.is_fully_defined() for s in specs
    ):
        return True
    return all(s.shape.rank is not None and s.shape.rank >= 1 and s.shape[0] is None for s in specs)


def recipe_known(ds: Any) -> bool:
    """Whether `ds` carries a recipe, or the answer that it has none (`keep_recipe`)."""
    return getattr(ds, _RECIPE_ATTR, None) is not None


def keep_recipe(ds: Any, recipe: Any) -> None:
    """Keeps on `ds` its recipe ``(TracedPipeline, arrays)``, or None: known to have none."""
    try:
        setattr(ds, _RECIPE_ATTR, recipe or False)
    except AttributeError:  # a dataset class with slots: no cache
        pass


def _recipe(ds: Any, t: Optional[T.SequenceType]) -> Any:
    """``(traced, leaves)`` of a dataset a `SlicesPipeline` built whose recipe can read it as
    `t` (None: as its own type), else None."""
    recipe = getattr(ds, _RECIPE_ATTR, None)
    if not recipe:  # None, or False: known to have none
        return None
    traced, leaves = recipe
    element = t.element if t is not None else T.from_tf_structure(traced.spec)
    if (
        traced.read is None
        or not element.is_assignable_from(T.from_tf_structure(traced.spec))
        or not all(
            isinstance(l, T.TensorType) and l.shape is not None and len(l.shape) >= 1
            for l in T.flatten_type(element)
        )
    ):
        return None
    return recipe


def recipe_of(ds: Any) -> Any:
    """What a process that does not hold `ds` needs to read it as a fresh copy does: ``(key,
    read computation, element type, the client's arrays, repeatable)`` when a
    `SlicesPipeline` built it and can read it, else None."""
    recipe = _recipe(ds, None)
    if recipe is None:
        return None
    traced, leaves = recipe
    comp = traced.compiled()
    return comp.fingerprint, comp, T.from_tf_structure(traced.spec), leaves, traced.repeatable


def batches_from_read(out: List[Any], element_type: T.Type) -> Any:
    """The elements a recipe's read function gave (``[sizes] + rows``, leaves in ``tf.nest``
    order of the element spec): a `TensorBatches`, or a dataset of them when they are not
    batches of one size (the last may be smaller)."""
    from simharness.core.tf_serialization import element_spec_for  # pylint: disable=import-outside-toplevel

    spec = element_spec_for(element_type)
    sizes_t, rows = out[0], list(out[1:])
    tb = _batches_of(sizes_t, rows, spec, T.SequenceType(element_type))
    if tb is not None:
        return tb
    if int(sizes_t.shape[0]) == 0 and all(s.shape.rank is not None for s in tf.nest.flatten(spec)):
        return tf.data.Dataset.from_tensor_slices(
            tf.nest.map_structure(
                lambda s: tf.zeros([0] + [d or 0 for d in s.shape.as_list()], s.dtype), spec
            )
        )  # no element
    ragged = [tf.RaggedTensor.from_row_lengths(r, sizes_t[:, j]) for j, r in enumerate(rows)]
    return tf.data.Dataset.from_tensor_slices(tuple(ragged)).map(
        lambda *leaves: tf.nest.pack_sequence_as(spec, list(leaves))
    )


def _read_recipe(ds: Any, t: T.SequenceType) -> Any:
    """`read_fresh` of a dataset a `SlicesPipeline` built: ``(TensorBatches or None,
    repeatable)``, or None when it has no recipe (or the recipe cannot read it)."""
    recipe = _recipe(ds, t)
    if recipe is None:
        return None
    traced, leaves = recipe
    try:
        sizes_t, flat = traced.read_all(leaves)
    except (tf.errors.OpError, TypeError, ValueError):
        return None  # too many elements, uneven leaves: the generic path says what it can
    return _batches_of(sizes_t, flat, traced.spec, t), traced.repeatable
