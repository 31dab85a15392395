"""`EagerTFExecutor`: runs serialized TF computations eagerly on one device.

What it does: embeds `CompiledComputation`s as callables (a bounded LRU
cache keyed by graph fingerprint), keeps values as eager tensors, Structs
of them, or `tf.data.Dataset`s between calls, validates argument types, and
implements the `BatchExecutor` block operations: a block of clients whose
inputs have equal shapes runs through ONE TF call (`tf.map_fn` over the
stacked per-client inputs, with broadcast inputs passed once), and
reductions follow the canonical tree of `simharness.core.reduction`.

What it leaves to other layers: placements and intrinsics (the federating
layer), lambdas and references (the reference-resolving layer), threads and
processes (the delegating executors).
"""

from __future__ import annotations

import collections
import inspect
import threading
import types
from typing import Any, Dict, List, Optional, Sequence, Tuple, cast

import numpy as np
import tensorflow as tf

from simharness.core import building_blocks as bb
from simharness.core import determinism
from simharness.core.computation import Computation
from simharness.core import types as T
from simharness.core.reduction import (CHUNK, Partial, Reducer, add_trees, add_trees_mod,
                                       fold_rows_into)
from simharness.core.structure import tensor_to_numpy, Struct, flatten, from_container, map_structure, pack_as
from simharness.core.batching import stack_python_values
from simharness.core.tf_serialization import element_spec_for, tf_dtype
from simharness.errors import (ExecutorClosedError, SimharnessTypeError, SimharnessValueError)
from simharness.core.sequences import TensorBatches
from simharness.executors import sequence_lowering as lowering
from simharness.executors import tensor_sequences as tseq
from simharness.core.tf_sequences import materialize
from simharness.executors.tensor_sequences import element_leaves as _element_leaves
from simharness.executors.base import (BatchExecutor, ExecutorValue, normalize_struct_elements,
                                       selection_index)
from simharness.validation import EagerModeError, check_int, check_type_spec_matches

_DEFAULT_CACHE_SIZE = 256


#: Ops whose results are exactly rounded per element (IEEE-754 add, multiply,
#: divide, sqrt, ...), so that computing many clients at once with
#: `tf.vectorized_map` gives the same bits as one call per client.
EXACT_ELEMENTWISE_OPS = frozenset({
    'Placeholder', 'Const', 'Identity', 'IdentityN', 'NoOp', 'Add', 'AddV2', 'Sub', 'Mul',
    'RealDiv', 'Neg', 'Abs', 'Sqrt', 'Maximum', 'Minimum', 'Relu', 'Cast', 'Square',
    'Select', 'SelectV2', 'Greater', 'GreaterEqual', 'Less', 'LessEqual', 'Equal', 'NotEqual',
    'LogicalAnd', 'LogicalOr', 'LogicalNot', 'ZerosLike', 'OnesLike', 'Floor', 'Ceil', 'Round',
    'Sign', 'FloorDiv', 'FloorMod', 'TruncateDiv', 'BitwiseAnd', 'BitwiseOr', 'BitwiseXor',
})


class EmbeddedFunction:
    """A `CompiledComputation` imported into the eager runtime."""

    def __init__(self, comp: bb.CompiledComputation):
        self.comp = comp
        self.type_signature: T.FunctionType = comp.type_signature
        graph = comp.graph
        graph_def = tf.compat.v1.GraphDef()
        graph_def.ParseFromString(graph.graph_def)

        param_leaves = ([] if comp.type_signature.parameter is None
                        else T.flatten_type(comp.type_signature.parameter))
        specs = [tf.TensorSpec(t.shape, tf_dtype(t.dtype)) if isinstance(t, T.TensorType)
                 else tf.TensorSpec([], tf.variant) for t in param_leaves]
        input_names, output_names = list(graph.input_names), list(graph.output_names)

        def _import(*args):
            return tf.graph_util.import_graph_def(
                graph_def, input_map=dict(zip(input_names, args)),
                return_elements=output_names, name='imported')

        # A function with a real positional signature: calls bind directly
        # (a pruned function would fail structured binding on every call and
        # format the arguments into an error message before falling back).
        self._fn = tf.compat.v1.wrap_function(_import, specs)
        ops = {node.op for node in graph_def.node}
        for f in graph_def.library.function:
            ops.update(n.op for n in f.node_def)
        #: True when every op is exactly rounded per element (see EXACT_ELEMENTWISE_OPS).
        self.exact_elementwise = ops <= EXACT_ELEMENTWISE_OPS
        self._param_leaves = ([] if self.type_signature.parameter is None
                              else T.flatten_type(self.type_signature.parameter))
        self._result_leaves = T.flatten_type(self.type_signature.result)
        # keys: a shared mask (tuple of bools), or ('fold', k, chunk)
        self._batched: Dict[Tuple[Any, ...], Any] = {}
        self._lock = threading.Lock()
        #: Positions of the parameter leaves that are sequences.
        self.sequence_params = tuple(i for i, t in enumerate(self._param_leaves)
                                     if isinstance(t, T.SequenceType))
        # lowering key -> the lowered function, or None (not lowerable)
        self._lowered: Dict[Tuple[Any, ...], Optional['EmbeddedFunction']] = {}

    def lowered(self, sources: Dict[int, TensorBatches]) -> Optional['EmbeddedFunction']:
        """This function with the sequence leaves `sources` (by position) fed as components.

        The `tf.data` loops over those sequences become tensor loops (see
        `sequence_lowering`); the function takes their components in place of
        each of them. None when the graph uses a sequence otherwise.
        """
        key = tuple((i, tseq.lowering_key(tb)) for i, tb in sorted(sources.items()))
        found = self._lowered.get(key, self)
        if found is not self:
            return found
        with self._lock:
            if key not in self._lowered:
                specs = {i: tseq.source_spec(tb) for i, tb in sources.items()}
                self._lowered[key] = self._lower(specs, sources)
        return self._lowered[key]

    def _lower(self, specs: Dict[int, 'lowering.SourceSpec'],
               sources: Dict[int, TensorBatches]) -> Optional['EmbeddedFunction']:
        graph = self.comp.graph
        gd = tf.compat.v1.GraphDef()
        gd.ParseFromString(graph.graph_def)
        input_names: List[Any] = [[n] for n in graph.input_names]
        leaves: List[Any] = [[t] for t in self._param_leaves]
        try:
            for i, spec in sorted(specs.items()):
                types = tseq.component_types(cast(T.SequenceType, self._param_leaves[i]),
                                             spec.batch_size is not None)
                if types is None:
                    return None
                gd, names = lowering.lower_graph(gd, graph.input_names[i], spec,
                                                 graph.output_names)
                input_names[i], leaves[i] = names, types
        except lowering.NotLowerable:
            return None
        flat_names = [n for group in input_names for n in group]
        flat_types = [t for group in leaves for t in group]
        comp = bb.CompiledComputation(
            bb.TFGraph(gd.SerializeToString(), flat_names, graph.output_names),
            T.FunctionType(T.StructType([(None, t) for t in flat_types]),
                           self.type_signature.result),
            self.comp.name)
        return EmbeddedFunction(comp)

    def call_flat(self, leaves: Sequence[Any]) -> List[Any]:
        out = self._fn(*leaves)
        if isinstance(out, (list, tuple)):
            return list(out)
        return [out]

    def batchable(self) -> bool:
        """True when every parameter and result leaf is a fully-defined tensor."""
        return (all(isinstance(t, T.TensorType) for t in self._param_leaves)
                and all(isinstance(t, T.TensorType) and t.is_fully_defined
                        for t in self._result_leaves))

    def call_batched(self, shared_mask: Tuple[bool, ...], shared: List[Any],
                     stacked: List[Any], n: int) -> List[Any]:
        """Runs `n` clients in one TF call; returns stacked result leaves."""
        fn = self._batched.get(shared_mask)
        if fn is None:
            # The first call traces; executors of a stack share this object
            # from several threads, so trace once under the lock.
            with self._lock:
                fn = self._batched.get(shared_mask)
                if fn is None:
                    fn = self._make_batched(shared_mask)
                    out = list(fn(tuple(shared), tuple(stacked)))
                    self._batched[shared_mask] = fn
                    return out
        return list(fn(tuple(shared), tuple(stacked)))

    def fold_rows(self, zero: List[Any], rows: List[Any], chunk: Optional[int]) -> List[Any]:
        """Folds rows with this (accumulate) function in ONE TF call.

        With `chunk` None: ``acc = f(zero, r0); acc = f(acc, r1); ...`` over the
        k rows. With `chunk` L: rows are [c * L, ...]; the same fold runs for
        the c chunks at once (vectorized, so only for exactly-rounded
        elementwise functions) and the result has a leading c dimension.
        """
        key = ('fold', chunk)
        fn = self._batched.get(key)
        if fn is None:
            with self._lock:
                fn = self._batched.get(key)
                if fn is None:
                    fn = self._make_fold(chunk, len(zero))
                    self._batched[key] = fn
        return list(fn(tuple(zero), tuple(rows)))

    def _make_fold(self, chunk: Optional[int], nzero: int) -> Any:
        inner = self._fn

        def call(leaves):
            out = inner(*leaves)
            return list(out) if isinstance(out, (list, tuple)) else [out]

        leaves = self._param_leaves
        zero_sig = tuple(tf.TensorSpec(t.shape, tf_dtype(t.dtype)) for t in leaves[:nzero])
        row_sig = tuple(tf.TensorSpec([None] + list(t.shape), tf_dtype(t.dtype))
                        for t in leaves[nzero:])

        # Each fold step is one iteration of a tf.while_loop whose body is ONE
        # call of the function: the graph optimizer sees the body alone (as in
        # a standalone call) and cannot re-associate a chain of steps (it
        # would turn ((a + b) + c) + d into an AddN of another order).
        @tf.function(autograph=False, input_signature=(zero_sig, row_sig))
        def fold(zero, rows):
            if chunk is None:
                n = tf.shape(rows[0])[0]

                def body(i, acc):
                    return i + 1, tuple(call(list(acc) + [r[i] for r in rows]))
                _, acc = tf.while_loop(lambda i, acc: i < n, body, (tf.constant(0), tuple(zero)),
                                       parallel_iterations=1)
                return tuple(acc)
            seg = [tf.reshape(r, tf.concat([[-1, chunk], tf.shape(r)[1:]], 0)) for r in rows]
            acc = tf.vectorized_map(lambda x: tuple(call(list(zero) + list(x))),
                                    tuple(s[:, 0] for s in seg), fallback_to_while_loop=False)

            def vbody(i, acc):
                step = tf.vectorized_map(lambda ax: tuple(call(list(ax[0]) + list(ax[1]))),
                                         (tuple(acc), tuple(s[:, i] for s in seg)),
                                         fallback_to_while_loop=False)
                return i + 1, tuple(step)
            _, acc = tf.while_loop(lambda i, acc: i < chunk, vbody, (tf.constant(1), tuple(acc)),
                                   parallel_iterations=1)
            return tuple(acc)
        return fold

    def _make_batched(self, mask: Tuple[bool, ...]):
        inner = self._fn
        exact = self.exact_elementwise
        out_sig = tuple(tf.TensorSpec(t.shape, tf_dtype(t.dtype)) for t in self._result_leaves)

        leaf_specs = [tf.TensorSpec(t.shape, tf_dtype(t.dtype)) for t in self._param_leaves]
        shared_sig = tuple(sp for sp, m in zip(leaf_specs, mask) if m)
        stacked_sig = tuple(tf.TensorSpec([None] + list(sp.shape), sp.dtype)
                            for sp, m in zip(leaf_specs, mask) if not m)

        @tf.function(autograph=False, input_signature=(shared_sig, stacked_sig))
        def batched(shared, stacked):
            def body(xs):
                it_s, it_x = iter(shared), iter(xs)
                leaves = [next(it_s) if m else next(it_x) for m in mask]
                out = inner(*leaves)
                return tuple(out) if isinstance(out, (list, tuple)) else (out,)
            if not stacked:
                raise SimharnessValueError('a batched call needs at least one per-client input')
            if exact:
                return tf.vectorized_map(body, stacked, fallback_to_while_loop=False)
            return tf.map_fn(body, stacked, fn_output_signature=out_sig, parallel_iterations=1)

        return batched


#: Clients a worker reduces at a time (a multiple of the reduction chunk): bounds the
#: memory of a partial reduction over a big block.
REDUCTION_SLICE = 16 * CHUNK  # 256 clients

#: Arrays at least this big move between numpy and TF through dlpack.
DLPACK_MIN_BYTES = 1 << 18


def fast_tensor(arr: np.ndarray) -> tf.Tensor:
    """A tensor holding a private copy of `arr`.

    Large numeric arrays are copied once into a 64-byte-aligned buffer that
    the tensor then adopts through dlpack (TF's own conversion is several
    times slower than a memcpy); small ones use `tf.convert_to_tensor`.
    """
    if arr.nbytes < DLPACK_MIN_BYTES or arr.dtype.kind not in 'fiu':
        return tf.convert_to_tensor(arr)
    buf = np.empty(arr.nbytes + 64, np.uint8)
    off = (-buf.ctypes.data) % 64  # a misaligned dlpack view would abort the process
    out = buf[off:off + arr.nbytes].view(arr.dtype).reshape(arr.shape)
    np.copyto(out, arr)
    return tf.experimental.dlpack.from_dlpack(out.__dlpack__())


def fast_numpy(t: Any) -> np.ndarray:
    """A read-only numpy view of a CPU tensor (no copy for large ones)."""
    if isinstance(t, np.ndarray):
        return t
    if not hasattr(t, 'numpy'):
        return np.asarray(t)
    if t.dtype.size * t.shape.num_elements() >= DLPACK_MIN_BYTES:
        return tensor_to_numpy(t)
    return t.numpy()


class Block:
    """The values of n clients stored leaf by leaf: stacked [n, ...] or shared.

    A leaf is ('stacked', tensor with a leading client dimension) or
    ('shared', one tensor every client sees, e.g. broadcast weights). Block
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

    A client value made by a block operation refers to its `Block` and index
    and is sliced out lazily.
    """

    __slots__ = ('_value', '_type', '_block', '_index')

    def __init__(self, value: Any, type_spec: T.Type, block: Optional[Block] = None, index: int = 0):
        self._value = value
        self._type = type_spec
        self._block = block
        self._index = index

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
        if isinstance(v, TensorBatches) or (isinstance(v, Struct) and any(
                isinstance(t, T.SequenceType) for t in T.flatten_type(self._type))):
            return map_structure(as_dataset, v)
        return v

    @property
    def type_signature(self) -> T.Type:
        return self._type

    async def compute(self) -> Any:
        return self._public()  # sequences leave as datasets

    def __repr__(self) -> str:
        return f'EagerValue({self._type})'


def runs(values: Sequence[Any]) -> List[Tuple[int, int, Optional[Block], int]]:
    """Splits `values` into runs of consecutive clients of one block.

    Returns (begin, end, block, first index in block) per run; `block` is
    None for values that belong to no block (each such value is its own run).
    """
    out: List[Tuple[int, int, Optional[Block], int]] = []
    i, n = 0, len(values)
    while i < n:
        b = getattr(values[i], '_block', None)
        if b is None:
            out.append((i, i + 1, None, 0))
            i += 1
            continue
        lo = values[i]._index
        j = i + 1
        while j < n and getattr(values[j], '_block', None) is b and values[j]._index == lo + (j - i):
            j += 1
        out.append((i, j, b, lo))
        i = j
    return out


def _check_shape(value_shape: Tuple[int, ...], t: T.TensorType, what: Any) -> None:
    if t.shape is None:
        return
    ok = len(value_shape) == len(t.shape) and all(
        d is None or d == s for d, s in zip(t.shape, value_shape))
    if not ok:
        raise SimharnessTypeError(
            f'value of shape {tuple(value_shape)} is not assignable to {t} ({what!r:.60})',
            expected=t, actual=tuple(value_shape))


def _ints_fit(src: np.ndarray, dtype: np.dtype) -> bool:
    """False when integer `src` holds values outside the range of integer `dtype`."""
    if not (src.size and np.issubdtype(src.dtype, np.integer) and np.issubdtype(dtype, np.integer)):
        return True
    info = np.iinfo(dtype)
    return int(src.min()) >= info.min and int(src.max()) <= info.max


def _is_ml_dtype(dt: np.dtype) -> bool:
    """True for the plain numeric dtypes of `ml_dtypes` (bfloat16, float8_*, int4, ...).

    numpy gives them kind 'V', as it does structured and raw void dtypes,
    which are not numbers.
    """
    return (dt.kind == 'V' and dt.names is None and not dt.shape
            and dt.type.__module__.startswith('ml_dtypes'))


def to_tensor(value: Any, t: T.TensorType) -> tf.Tensor:
    """Converts one leaf to an eager tensor of type `t`, with clear errors."""
    if isinstance(value, tf.Tensor):
        if value.dtype != tf_dtype(t.dtype):
            raise SimharnessTypeError(f'tensor of dtype {value.dtype.name} is not assignable to {t}',
                                      expected=t, actual=value.dtype.name)
        _check_shape(tuple(value.shape), t, value)
        return value
    if isinstance(value, (tf.data.Dataset, Struct, dict, list)) and not (
            isinstance(value, list) and t.shape):
        raise SimharnessTypeError(f'value {value!r:.80} ({type(value).__name__}) is not assignable '
                                  f'to tensor type {t}', expected=t, actual=type(value).__name__)
    if t.dtype == np.dtype(object):
        arr = np.asarray(value, dtype=object)
    else:
        src = np.asarray(value)
        if src.dtype == object or src.dtype.kind in 'US' or (
                src.dtype.kind == 'V' and not _is_ml_dtype(src.dtype)):
            raise SimharnessTypeError(f'value {value!r:.80} ({src.dtype}) is not assignable to {t}',
                                      expected=t, actual=str(src.dtype))
        if (np.issubdtype(src.dtype, np.floating) and np.issubdtype(t.dtype, np.integer)) or (
                src.dtype == np.bool_) != (t.dtype == np.bool_) and src.size:
            raise SimharnessTypeError(
                f'value of dtype {src.dtype} is not assignable to {t}', expected=t,
                actual=str(src.dtype))
        if not _ints_fit(src, t.dtype):
            info = np.iinfo(t.dtype)
            raise SimharnessValueError(
                f'value {value!r:.80} is out of the range [{info.min}, {info.max}] of {t}')
        arr = src.astype(t.dtype, copy=False)
    _check_shape(arr.shape, t, value)
    return fast_tensor(arr)


def dataset_from_value(value: Any, t: T.SequenceType) -> tf.data.Dataset:
    """A dataset of `t` from a dataset, a list of elements or a generator (function).

    A generator function (or generator) is drained into a list of elements,
    so that the dataset holds no Python state (it can then move to other
    executors and processes as a serialized graph).
    """
    value = elements_of_generator(value)
    if isinstance(value, tf.data.Dataset):
        actual = T._from_tf_structure(value.element_spec)
        if not t.element.is_assignable_from(actual):
            raise SimharnessTypeError(f'dataset of {actual}* is not assignable to {t}',
                                      expected=t, actual=T.SequenceType(actual))
        return value
    if isinstance(value, (list, tuple)):
        spec = element_spec_for(t.element)
        elems = [ingest(v, t.element) for v in value]
        if not elems:
            return tf.data.Dataset.from_tensor_slices(tf.nest.map_structure(
                lambda s: tf.zeros([0] + list(s.shape), s.dtype), spec))
        py = [_struct_to_spec_container(e, spec) for e in elems]
        stacked = tf.nest.map_structure(lambda *xs: tf.stack(xs), *py)
        return tf.data.Dataset.from_tensor_slices(stacked)
    raise SimharnessTypeError(f'value {value!r:.80} ({type(value).__name__}) is not a sequence; '
                              f'expected a tf.data.Dataset or a list for {t}', expected=t)


def sequence_from_value(value: Any, t: T.SequenceType) -> Any:
    """What an executor holds for a sequence: `TensorBatches` when its elements are
    slices of in-memory tensors (a list of elements, ``from_tensor_slices``,
    ``.batch``), else a `tf.data.Dataset`."""
    if isinstance(value, TensorBatches):
        return tseq.checked(value, t, to_tensor)
    if isinstance(value, tf.data.Dataset):
        tb = tseq.recognize(value, t)
        if tb is not None:
            try:
                out = tseq.checked(tb, t, to_tensor)
            except (SimharnessTypeError, SimharnessValueError):
                return dataset_from_value(value, t)  # the dataset path says what is wrong
            out._cache['dataset'] = value  # the user's own object, if it is asked for
            return out
        tb = materialize(value, t)  # a small finite pipeline: its elements, read once
        if tb is not None:
            return tseq.checked(tb, t, to_tensor)
        return dataset_from_value(value, t)
    value = elements_of_generator(value)
    if isinstance(value, (list, tuple)) and value:
        types = tseq.component_types(t, batched=False)
        if types is not None and all(l.is_fully_defined for l in T.flatten_type(t.element)):
            elems = [ingest(v, t.element) for v in value]
            leaves = [flatten(e) for e in elems]
            comps = [tf.stack([row[j] for row in leaves]) for j in range(len(types))]
            return TensorBatches(comps, None, False, t.element)
    return dataset_from_value(value, t)


def as_dataset(x: Any) -> Any:
    """A `tf.data.Dataset` for a `TensorBatches`; anything else unchanged."""
    return tseq.to_dataset(x) if isinstance(x, TensorBatches) else x


def elements_of_generator(value: Any) -> Any:
    """The elements of a generator function or generator, as a list; anything else unchanged."""
    if isinstance(value, types.GeneratorType):
        return list(value)
    if inspect.isgeneratorfunction(value) or (
            callable(value) and not isinstance(value, (tf.data.Dataset, type))
            and not hasattr(value, 'type_signature')):
        return list(value())
    return value


def _struct_to_spec_container(value: Any, spec: Any) -> Any:
    if isinstance(value, Struct):
        elems = [_struct_to_spec_container(v, s) for v, s in zip(value, _spec_children(spec))]
        if isinstance(spec, collections.abc.Mapping):
            return cast(Any, type(spec))(zip(spec.keys(), elems))  # a concrete Mapping class
        if T._is_namedtuple(spec):
            return type(spec)(*elems)
        return tuple(elems)
    return value


def _spec_children(spec: Any) -> list:
    if isinstance(spec, collections.abc.Mapping):
        return list(spec.values())
    return list(spec)


def ingest(value: Any, t: T.Type) -> Any:
    """Converts a Python/numpy/TF value into this executor's representation of type `t`."""
    if isinstance(value, bb.Data):  # external data: read here (see simharness.data.uri)
        from simharness.data.uri import resolve as resolve_data_uri
        if not t.is_assignable_from(value.type_signature):
            raise SimharnessTypeError(f'Data {value.uri!r} of type {value.type_signature} is not '
                                      f'assignable to {t}', expected=t, actual=value.type_signature)
        value = resolve_data_uri(value.uri, value.type_signature)
        if isinstance(t, T.SequenceType):
            value = tf.data.Dataset.from_tensor_slices(value)
    if isinstance(t, T.TensorType):
        return to_tensor(value, t)
    if isinstance(t, T.StructType):
        s = from_container(value, t)
        return Struct((n, ingest(v, e)) for (n, e), v in zip(t.items(), s))
    if isinstance(t, T.SequenceType):
        return sequence_from_value(value, t)
    raise SimharnessTypeError(f'an EagerTFExecutor cannot hold a value of type {t}', actual=t)


def _secure_bound_text(params: Dict[str, Any], bound: int) -> str:
    """What set a secure sum's bound, for its range error: max_input or bitwidth."""
    if params.get('bound_from') == 'max_input':
        return f' (max_input {int(bound) - 1})'
    if params.get('bound_from') == 'bitwidth':
        return f' (bitwidth {int(bound).bit_length() - 1})'
    return ''


def _flatten_arg(value: Any) -> List[Any]:
    leaves = [as_dataset(l) for l in flatten(value)]
    return [tf.data.experimental.to_variant(l) if isinstance(l, tf.data.Dataset) else l
            for l in leaves]


def _lowered_leaves(fn: 'EmbeddedFunction',
                    leaves: List[Any]) -> Optional[Tuple['EmbeddedFunction', List[Any]]]:
    """`fn` lowered for the in-memory sequences among `leaves`, and the leaves it takes."""
    sources = {i: leaves[i] for i in fn.sequence_params if isinstance(leaves[i], TensorBatches)}
    if not sources:
        return None
    lowered = fn.lowered(sources)
    if lowered is None:
        return None
    flat: List[Any] = []
    for i, leaf in enumerate(leaves):
        if i in sources:
            tb = sources[i]
            rows = tb._cache.get('rows')
            if rows is None:
                flat.extend(tb.components)
            else:  # slices of stacked components: the stacked tensor rides along
                flat.extend(_Row(c, x, rows[1]) for c, x in zip(tb.components, rows[0]))
        elif isinstance(leaf, (tf.data.Dataset, TensorBatches)):
            flat.append(tf.data.experimental.to_variant(as_dataset(leaf)))
        else:
            flat.append(leaf)
    return lowered, flat


class _Row:
    """Row `index` of the stacked tensor `stacked` (which is `tensor`)."""

    __slots__ = ('tensor', 'stacked', 'index')

    def __init__(self, tensor: Any, stacked: Any, index: int):
        self.tensor, self.stacked, self.index = tensor, stacked, index


def _plain_leaves(leaves: List[Any]) -> List[Any]:
    return [x.tensor if isinstance(x, _Row) else x for x in leaves]


def _stack_columns(rows: List[List[Any]], device_scope) -> Optional[List[Tuple[str, Any]]]:
    """Leaves of several clients as block leaves: shared (one object) or stacked."""
    out: List[Tuple[str, Any]] = []
    for j in range(len(rows[0])):
        col = [r[j] for r in rows]
        if isinstance(col[0], _Row) and all(
                isinstance(c, _Row) and c.stacked is col[0].stacked
                and c.index == col[0].index + k for k, c in enumerate(col)):
            lo, whole = col[0].index, col[0].stacked
            out.append(('stacked', whole if lo == 0 and len(col) == whole.shape[0]
                        else whole[lo:lo + len(col)]))
            continue
        col = _plain_leaves(col)
        if all(c is col[0] for c in col):
            out.append(('shared', col[0]))
        elif all(isinstance(c, tf.Tensor) and c.dtype != tf.variant and c.shape == col[0].shape
                 for c in col):
            with device_scope():
                out.append(('stacked', tf.stack(col)))
        else:
            return None
    if not any(k == 'stacked' for k, _ in out):
        return None
    return out


def _pack_result(leaves: List[Any], t: T.Type) -> Any:
    types = T.flatten_type(t)
    out = []
    for leaf, lt in zip(leaves, types):
        if isinstance(lt, T.SequenceType):
            out.append(tf.data.experimental.from_variant(leaf, element_spec_for(lt.element)))
        else:
            out.append(leaf)
    return pack_as(t, out)


def _np(x: Any) -> Any:
    def leaf(v):
        if isinstance(v, TensorBatches):
            v = as_dataset(v)
        if isinstance(v, tf.data.Dataset):  # datasets are materialized by the context
            return v
        return fast_numpy(v)
    return map_structure(leaf, x)


def _as_tensors(xs: Sequence[Any]) -> List[Any]:
    return [x if isinstance(x, tf.Tensor) else fast_tensor(np.asarray(x)) for x in xs]


def _rows_to_values(partial: Partial, head_type: T.Type, acc_type: T.Type) -> Partial:
    """Turns the one-row leaf lists of a partial into numpy values of their types."""
    def value(leaf_list, t):
        vals = [np.asarray(x)[0] for x in leaf_list]
        return pack_as(t, vals) if isinstance(t, T.StructType) else vals[0]
    return Partial(partial.start, partial.stop, [value(v, head_type) for v in partial.head],
                   {k: value(v, acc_type) for k, v in partial.nodes.items()}, partial.open_chunk,
                   None if partial.open_chunk is None else value(partial.open_acc, acc_type))


class FunctionCache:
    """A bounded, thread-safe LRU cache of embedded functions.

    One cache may be shared by the EagerTF executors of a stack (they run in
    different threads of one process), so that each computation is imported
    and traced once per stack rather than once per client group.
    """

    def __init__(self, max_size: int = _DEFAULT_CACHE_SIZE):
        if not isinstance(max_size, int) or max_size < 1:
            raise SimharnessValueError(f'cache size must be an int >= 1, got {max_size!r}')
        self.max_size = max_size
        self._items: 'collections.OrderedDict[str, EmbeddedFunction]' = collections.OrderedDict()
        self._lock = threading.Lock()

    def get_or_embed(self, comp: bb.CompiledComputation, device_scope) -> EmbeddedFunction:
        key = comp.fingerprint
        with self._lock:
            fn = self._items.get(key)
            if fn is not None:
                self._items.move_to_end(key)
                return fn
            with device_scope():
                fn = EmbeddedFunction(comp)
            self._items[key] = fn
            while len(self._items) > self.max_size:
                self._items.popitem(last=False)
            return fn

    def __len__(self) -> int:
        return len(self._items)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


def _check_device(device: str) -> None:
    """Raises a `SimharnessValueError` unless TF has a logical device matching `device`."""
    try:
        spec = tf.DeviceSpec.from_string(device)
    except ValueError as e:
        raise SimharnessValueError(
            f'device {device!r} is not a TF device name (such as \'/CPU:0\' or \'/GPU:1\'): '
            f'{e}') from None
    devices = tf.config.list_logical_devices()
    for d in devices:
        have = tf.DeviceSpec.from_string(d.name)
        if ((spec.device_type is None or spec.device_type.upper() == have.device_type.upper())
                and (spec.device_index is None or spec.device_index == have.device_index)):
            return
    raise SimharnessValueError(
        f'device {device!r} is not on this machine; its logical devices are '
        f'{[d.name for d in devices]} (tf.config.list_logical_devices())')


class EagerTFExecutor(BatchExecutor):
    """Runs serialized TF computations eagerly on `device` (TFF's EagerTFExecutor).

    Args:
      device: a TF device name ('/CPU:0', '/GPU:1') or a
        `tf.config.LogicalDevice` (TFF's spelling); None lets TF choose.
      cache_size: how many embedded functions to keep (least recently used
        ones are dropped), when no shared `function_cache` is given.
      function_cache: a `FunctionCache` shared with other executors.
      max_batch_size: the most clients run through one TF call (bounds the
        memory of a batched map); None: no bound.

    Raises:
      RuntimeError: not executing eagerly (inside a `tf.Graph().as_default()`
        block or a `tf.function`), as TFF's.
      TypeError: `device` is neither a str nor a `tf.config.LogicalDevice`.
      ValueError: this machine has no such device (see
        `tf.config.list_logical_devices()`).
    """

    def __init__(self, device: Optional[Any] = None, cache_size: int = _DEFAULT_CACHE_SIZE,
                 function_cache: Optional[FunctionCache] = None,
                 max_batch_size: Optional[int] = None):
        if not tf.executing_eagerly():
            raise EagerModeError(
                'EagerTFExecutor can only be constructed in eager mode; it was constructed '
                'inside a TF graph (a `tf.Graph().as_default()` block or a `tf.function`)')
        max_batch_size = check_int('max_batch_size', max_batch_size, 1, allow_none=True)
        if function_cache is None:
            check_int('cache_size', cache_size, 1)
        elif not isinstance(function_cache, FunctionCache):
            raise SimharnessTypeError(
                f'function_cache must be a FunctionCache or None, got {function_cache!r} of '
                f'type {type(function_cache).__name__}', expected=FunctionCache,
                actual=type(function_cache))
        if isinstance(device, tf.config.LogicalDevice):
            device = device.name
        elif device is not None and not isinstance(device, str):
            raise SimharnessTypeError(
                f'device must be a TF device name (a str such as \'/CPU:0\'), a '
                f'tf.config.LogicalDevice or None, got {device!r} of type {type(device).__name__}',
                expected=str, actual=type(device))
        # Bit-identical results on every stack: ops run on a fixed number of
        # intra-op threads in every process (see simharness.core.determinism).
        # Before the device check: listing devices starts the TF runtime.
        determinism.pin_tensorflow_threads()
        if device:
            _check_device(device)
        self._max_batch = max_batch_size
        self._device = device
        self._owns_cache = function_cache is None
        self._cache = function_cache if function_cache is not None else FunctionCache(cache_size)
        self._closed = False  # never set: close() releases resources, the next use rebuilds them

    # ------------------------------------------------------------ helpers
    def _check_open(self) -> None:
        if self._closed:
            raise ExecutorClosedError('this EagerTFExecutor is closed')

    def _device_scope(self):
        return tf.device(self._device) if self._device else _NullScope()

    def embed(self, comp: bb.CompiledComputation) -> EmbeddedFunction:
        return self._cache.get_or_embed(comp, self._device_scope)

    @property
    def cache_info(self) -> Dict[str, int]:
        return {'size': len(self._cache), 'max_size': self._cache.max_size}

    def _fn_of(self, v: ExecutorValue) -> EmbeddedFunction:
        fn = v.internal if isinstance(v, EagerValue) else None
        if not isinstance(fn, EmbeddedFunction):
            raise SimharnessTypeError(f'value of type {v.type_signature} is not a function embedded '
                                      'in this executor', actual=v.type_signature)
        return fn

    def call(self, fn: EmbeddedFunction, arg: Optional[EagerValue]) -> EagerValue:
        ft = fn.type_signature
        if ft.parameter is None:
            if arg is not None:
                raise SimharnessTypeError(f'function {ft} takes no argument, got {arg.type_signature}')
            leaves: List[Any] = []
        else:
            if arg is None:
                raise SimharnessTypeError(f'function {ft} needs an argument of type {ft.parameter}')
            ft.parameter.check_assignable_from(arg.type_signature, 'argument')
            if fn.sequence_params:
                lowered = _lowered_leaves(fn, flatten(arg.internal))
                if lowered is not None:
                    with self._device_scope():
                        out = lowered[0].call_flat(_plain_leaves(lowered[1]))
                    return EagerValue(_pack_result(out, ft.result), ft.result)
            leaves = _flatten_arg(arg.internal)
        with self._device_scope():
            out = fn.call_flat(leaves)
        return EagerValue(_pack_result(out, ft.result), ft.result)

    # ------------------------------------------------------------ Executor
    async def create_value(self, value: Any, type_spec: Any = None) -> EagerValue:
        self._check_open()
        if isinstance(value, Computation):  # a tf_computation given as is (TFF's raw API)
            hint = type_spec.parameter if isinstance(type_spec, T.FunctionType) else None
            value = value.to_building_block(hint)
        if isinstance(value, bb.CompiledComputation):
            check_type_spec_matches(type_spec, value.type_signature, 'computation')
            return EagerValue(self.embed(value), value.type_signature)
        if isinstance(value, EagerValue):
            check_type_spec_matches(type_spec, value.type_signature, 'value')
            return value
        if isinstance(value, bb.Data) and type_spec is None:
            type_spec = value.type_signature
        if isinstance(value, bb.ComputationBuildingBlock) and not isinstance(value, bb.Data):
            raise SimharnessTypeError(
                f'an EagerTFExecutor embeds compiled TF computations, not a '
                f'{type(value).__name__} building block (of type {value.type_signature}); '
                'put a ReferenceResolvingExecutor (and a FederatingExecutor) above it',
                actual=value.type_signature)
        t = T.to_type(type_spec) if type_spec is not None else T.infer_type(value)
        if isinstance(t, T.FunctionType):
            raise SimharnessTypeError(f'a function of type {t} must be given as a compiled '
                                      f'TF computation, got {type(value).__name__}', expected=t)
        with self._device_scope():
            return EagerValue(ingest(value, t), t)

    async def create_call(self, comp: ExecutorValue, arg: Optional[ExecutorValue] = None) -> EagerValue:
        self._check_open()
        return self.call(self._fn_of(comp), cast(Optional[EagerValue], arg))  # a value of ours

    async def create_struct(self, elements: Any) -> EagerValue:
        self._check_open()
        items = normalize_struct_elements(elements)
        return EagerValue(Struct((n, v.internal) for n, v in items),
                          T.StructType([(n, v.type_signature) for n, v in items]))

    async def create_selection(self, source: ExecutorValue, index: Optional[int] = None,
                               name: Optional[str] = None) -> EagerValue:
        self._check_open()
        index = selection_index(source, index, name)
        source = cast(EagerValue, source)  # a value of this executor
        t = source.type_signature
        if not isinstance(t, T.StructType) or not isinstance(source.internal, Struct):
            raise SimharnessTypeError(f'cannot select from a value of type {t}', actual=t)
        return EagerValue(source.internal[index], t[index])

    def close(self) -> None:
        """Releases the embedded functions of a private cache; the executor stays usable.

        As in TFF, using an executor after `close()` re-initializes it: the
        next computation is embedded again. A cache shared with other
        executors (`function_cache`) is left to its owner.
        """
        if self._owns_cache:
            self._cache.clear()

    # ------------------------------------------------------------ batches
    async def create_values(self, values: Sequence[Any], type_spec: Any) -> List[EagerValue]:
        self._check_open()
        t = T.to_type(type_spec)
        values = list(values)
        if len(values) >= 2 and T.contains_only_tensors(t) and all(
                l.is_fully_defined and l.dtype != np.dtype(object) for l in T.flatten_type(t)):
            block = self._stack_python(values, t)
            if block is not None:
                return block.values()
        if len(values) >= 2 and isinstance(t, T.SequenceType):
            stacked = self._stack_sequences(values, t)
            if stacked is not None:
                return stacked
        with self._device_scope():
            return [EagerValue(ingest(v, t), t) for v in values]

    def _stack_sequences(self, values: List[Any], t: T.SequenceType) -> Optional[List[EagerValue]]:
        """Many clients' in-memory sequences of one layout (as they come from the driver):
        each component converted once for all clients, and the clients' rows kept
        as slices of it, so that a batched map takes the stacked tensor as it is."""
        first = values[0]
        if not all(isinstance(v, TensorBatches) for v in values) or not isinstance(
                first.components, (list, tuple)):
            return None
        m = len(first.components)
        for v in values:
            if (v.batch_size != first.batch_size or v.drop_remainder != first.drop_remainder
                    or not isinstance(v.components, (list, tuple)) or len(v.components) != m
                    or not all(isinstance(c, np.ndarray) and c.dtype == f.dtype
                               and c.shape == f.shape
                               for c, f in zip(v.components, first.components))):
                return None
        with self._device_scope():
            checked = tseq.checked(first, t, to_tensor)  # one layout: one check
            stacked = [fast_tensor(np.stack([v.components[j] for v in values]))
                       for j in range(m)]
            rows = [tf.unstack(x) for x in stacked]
        out = []
        for i in range(len(values)):
            tb = TensorBatches([r[i] for r in rows], checked.batch_size, checked.drop_remainder,
                               t.element)
            tb._cache['checked'] = (t, tb)
            tb._cache['rows'] = (stacked, i)
            out.append(EagerValue(tb, t))
        return out

    async def create_values_stacked(self, leaves: Sequence[np.ndarray], type_spec: Any) -> List[EagerValue]:
        """Embeds n client values given leaf by leaf as arrays [n, ...] (already validated)."""
        self._check_open()
        t = T.to_type(type_spec)
        types = T.flatten_type(t)
        if len(leaves) != len(types) or not leaves:
            raise SimharnessTypeError(f'{len(leaves)} stacked leaves do not match {t}')
        n = leaves[0].shape[0]
        with self._device_scope():
            block = Block(t, n, [('stacked', fast_tensor(np.asarray(x, dtype=lt.dtype)))
                                 for x, lt in zip(leaves, types)])
        return block.values()

    def _stack_python(self, values: List[Any], t: T.Type) -> Optional[Block]:
        """Stacks Python/numpy client values leaf by leaf (None: use the slow path)."""
        arrays = stack_python_values(values, t)
        if arrays is None:
            return None  # the per-value path gives the precise error
        with self._device_scope():
            return Block(t, len(values), [('stacked', fast_tensor(a)) for a in arrays])

    async def create_map(self, fn: ExecutorValue, args: Optional[Sequence[ExecutorValue]],
                         count: Optional[int] = None) -> List[EagerValue]:
        self._check_open()
        return self.map_sync(self._fn_of(fn), cast(Optional[Sequence[EagerValue]], args), count)

    def map_sync(self, f: EmbeddedFunction, args: Optional[Sequence[EagerValue]],
                 count: Optional[int] = None) -> List[EagerValue]:
        if args is None:
            return [self.call(f, None) for _ in range(count or 0)]
        args = list(args)
        pt = f.type_signature.parameter
        if len(args) >= 2 and pt is not None and f.sequence_params:
            return self._map_lowered(f, args)
        if len(args) < 2 or pt is None or not f.batchable():
            return [self.call(f, a) for a in args]
        out: List[EagerValue] = []
        step = self._max_batch or len(args)
        for begin, end, block, lo in runs(args):
            if block is not None and pt.is_assignable_from(block.type):
                for a in range(begin, end, step):
                    b = min(end, a + step)
                    out.extend(self._map_leaves(f, block.sub_leaves(lo + a - begin, lo + b - begin), b - a)
                               or [self.call(f, x) for x in args[a:b]])
            else:
                out.extend(self._map_loose(f, args[begin:end], pt, step))
        return out

    def _map_lowered(self, f: EmbeddedFunction, args: List[EagerValue]) -> List[EagerValue]:
        """A map of a function over sequences, the sequences' loops lowered where they can be.

        Consecutive clients whose sequences lower the same way and whose
        components have the same shapes run in one batched TF call (as any
        map over tensors); others one call each.
        """
        pt = cast(T.Type, f.type_signature.parameter)
        rows: List[Optional[Tuple[EmbeddedFunction, List[Any]]]] = []
        checked_types: List[T.Type] = []  # argument types known to fit (zipped rows share one)
        for a in args:
            at = a.type_signature
            if not any(at is c for c in checked_types):
                pt.check_assignable_from(at, 'argument')
                checked_types.append(at)
            rows.append(_lowered_leaves(f, flatten(a.internal)))
        out: List[EagerValue] = []
        step = self._max_batch or len(args)
        i = 0
        while i < len(args):
            low = rows[i]
            if low is None:
                out.append(self.call(f, args[i]))
                i += 1
                continue
            j = i + 1
            while j < len(args) and j - i < step and rows[j] is not None and \
                    cast(Tuple, rows[j])[0] is low[0]:
                j += 1
            lf = low[0]
            group = [cast(Tuple, r)[1] for r in rows[i:j]]
            leaves = _stack_columns(group, self._device_scope) if (
                j - i >= 2 and lf.batchable()) else None
            res = self._map_leaves(lf, leaves, j - i) if leaves is not None else None
            if res is None:
                res = []
                for r in group:
                    with self._device_scope():
                        o = lf.call_flat(_plain_leaves(r))
                    res.append(EagerValue(_pack_result(o, f.type_signature.result),
                                          f.type_signature.result))
            out.extend(res)
            i = j
        return out

    def _map_loose(self, f: EmbeddedFunction, args: List[EagerValue], pt: T.Type,
                   step: int) -> List[EagerValue]:
        out: List[EagerValue] = []
        for a in range(0, len(args), step):
            chunk = args[a:a + step]
            leaves = self._block_leaves(chunk, pt) if len(chunk) >= 2 else None
            res = self._map_leaves(f, leaves, len(chunk)) if leaves is not None else None
            out.extend(res if res is not None else [self.call(f, x) for x in chunk])
        return out

    def _map_leaves(self, f: EmbeddedFunction, leaves: List[Tuple[str, Any]],
                    n: int) -> Optional[List[EagerValue]]:
        if not any(k == 'stacked' for k, _ in leaves):
            return None
        mask = tuple(k == 'shared' for k, _ in leaves)
        with self._device_scope():
            res = f.call_batched(mask, [x for k, x in leaves if k == 'shared'],
                                 [x for k, x in leaves if k == 'stacked'], n)
        return Block(f.type_signature.result, n, [('stacked', o) for o in res]).values()

    def _block_leaves(self, args: List[EagerValue], pt: T.Type) -> Optional[List[Tuple[str, Any]]]:
        """Stacks arbitrary same-shaped client values (slow path of a batched map)."""
        for a in args:
            pt.check_assignable_from(a.type_signature, 'argument')
        per_client = [flatten(a.internal) for a in args]
        out = []
        for i in range(len(per_client[0])):
            col = [pc[i] for pc in per_client]
            if all(c is col[0] for c in col):
                out.append(('shared', col[0]))
            elif all(isinstance(c, tf.Tensor) and c.shape == col[0].shape for c in col):
                with self._device_scope():
                    out.append(('stacked', tf.stack(col)))
            else:
                return None
        return out

    async def create_structs(self, rows: Sequence[Sequence[ExecutorValue]],
                             names: Sequence[Optional[str]]) -> List[EagerValue]:
        self._check_open()
        rows = [list(r) for r in rows]
        out = self._zip_blocks(rows, names) if len(rows) >= 2 and rows[0] else None
        if out is not None:
            return out
        if rows and rows[0] and all(len(r) == len(rows[0]) for r in rows):
            first = [v.type_signature for v in rows[0]]
            if all(all(v.type_signature is t for v, t in zip(r, first)) for r in rows):
                t = T.StructType(list(zip(names, first)))  # one type for all rows
                return [EagerValue(Struct(zip(names, [cast(EagerValue, v).internal for v in r])), t)
                        for r in rows]
        return [await self.create_struct(list(zip(names, row))) for row in rows]

    def _zip_blocks(self, rows: Sequence[Sequence[Any]],
                    names: Sequence[Optional[str]]) -> Optional[List[EagerValue]]:
        """Zips columns of block values run by run (None when they are not block-aligned)."""
        cols = [cast(List[EagerValue], [r[j] for r in rows]) for j in range(len(rows[0]))]
        types = [c[0].type_signature for c in cols]
        t = T.StructType(list(zip(names, types)))
        shared: Dict[int, List[Tuple[str, Any]]] = {}
        col_runs: Dict[int, List[Tuple[int, int, Optional[Block], int]]] = {}
        bounds = None
        for j, col in enumerate(cols):
            if all(c is col[0] for c in col) and not isinstance(
                    col[0].internal, (tf.data.Dataset, TensorBatches, EmbeddedFunction)):
                shared[j] = [('shared', x) for x in flatten(col[0].internal)]
                continue
            rs = runs(col)
            if any(block is None for _, _, block, _ in rs):
                return None
            b = [(begin, end) for begin, end, _, _ in rs]
            if bounds is not None and b != bounds:
                return None
            bounds = b
            col_runs[j] = rs
        if bounds is None:
            return None  # every column shared: nothing per client to stack
        out: List[EagerValue] = []
        for k, (begin, end) in enumerate(bounds):
            leaves: List[Tuple[str, Any]] = []
            for j in range(len(cols)):
                if j in shared:
                    leaves.extend(shared[j])
                else:
                    _, _, block, lo = col_runs[j][k]
                    # columns with a run outside a block were rejected above
                    leaves.extend(cast(Block, block).sub_leaves(lo, lo + end - begin))
            out.extend(Block(t, end - begin, leaves).values())
        return out

    async def create_selections(self, sources: Sequence[ExecutorValue], index: int) -> List[EagerValue]:
        self._check_open()
        sources = list(sources)
        out: List[EagerValue] = []
        for begin, end, block, lo in runs(sources):
            if block is not None and isinstance(block.type, T.StructType):
                counts = [len(T.flatten_type(e)) for e in block.type]
                first = sum(counts[:index])
                leaves = block.sub_leaves(lo, lo + end - begin)[first:first + counts[index]]
                out.extend(Block(block.type[index], end - begin, leaves).values())
            else:
                out.extend([await self.create_selection(s, index) for s in sources[begin:end]])
        return out

    async def compute_many(self, values: Sequence[ExecutorValue]) -> List[Any]:
        values = cast(List[EagerValue], list(values))  # values of this executor
        out: List[Any] = []
        for begin, end, block, lo in runs(values):
            if block is None:
                out.append(_np(values[begin].internal))
                continue
            npl = block.numpy_leaves()
            out.extend(pack_as(block.type, [x if k == 'shared' else x[i] for k, x in npl])
                       for i in range(lo, lo + end - begin))
        return out

    # ------------------------------------------------------------ reductions
    def _combine_reducer(self, kind: str, total: int, params: Dict[str, Any]) -> Reducer:
        """The reducer that joins partials (values: numpy for numpy kinds, EagerValues else)."""
        if kind in ('sum', 'mean', 'weighted_mean'):
            return Reducer(lambda v: v, add_trees, add_trees, total)
        if kind in ('secure_sum_bitwidth', 'secure_modular_sum'):
            moduli = params['moduli']

            def addmod(a, b):
                return add_trees_mod(a, b, moduli)
            return Reducer(lambda v: v, addmod, addmod, total)
        if kind == 'aggregate':
            acc_fn = self._fn_of(params['accumulate'])
            merge_fn = self._fn_of(params['merge'])
            at = acc_fn.type_signature.result

            vt = cast(T.StructType, acc_fn.type_signature.parameter)[1]  # <accumulator, value>
            vleaves = T.flatten_type(vt)

            def value(v):  # raw head values arrive as numpy: embed them on first use
                return v if isinstance(v, EagerValue) else EagerValue(ingest(v, vt), vt)

            def pair(x, y):
                y = value(y)
                return EagerValue(Struct([(None, x.internal), (None, y.internal)]),
                                  T.StructType([x.type_signature, y.type_signature]))

            def accumulate_many(acc, vs):
                # The raw head values of a block, folded in ONE TF call (the same
                # while-loop fold the workers use, so the same bits as one call each).
                if any(l.dtype == np.dtype(object) for l in vleaves) or \
                        any(isinstance(v, EagerValue) for v in vs):
                    for v in vs:
                        acc = self.call(acc_fn, pair(acc, v))
                    return acc
                flat = [flatten(v) for v in vs]
                rows = [fast_tensor(np.ascontiguousarray(np.stack([f[j] for f in flat]),
                                                         dtype=l.dtype))
                        for j, l in enumerate(vleaves)]
                out = acc_fn.fold_rows(_as_tensors(flatten(acc.internal)), rows, None)
                return EagerValue(_pack_result(list(out), at), at)
            return Reducer(lambda v: self.call(acc_fn, pair(params['zero'], v)),
                           lambda acc, v: self.call(acc_fn, pair(acc, v)),
                           lambda x, y: self.call(merge_fn, pair(x, y)), total,
                           accumulate_many=accumulate_many)
        raise SimharnessValueError(f'unknown reduction kind {kind!r}')

    def _numpy_rows(self, kind: str, values: Sequence[Any], start: int,
                    params: Dict[str, Any]) -> Tuple[T.Type, List[np.ndarray]]:
        """The reduction's leaf arrays [n, ...] for numpy kinds (validated, weighted)."""
        if kind == 'weighted_mean':
            vals = [v for v, _ in values]
            ws = [w for _, w in values]
            vt, vleaves = self._stacked_numpy(vals)
            _, wleaves = self._stacked_numpy(ws)
            w = wleaves[0]
            prods = [x * w.astype(x.dtype).reshape((-1,) + (1,) * (x.ndim - 1)) for x in vleaves]
            return T.StructType([vt, T.TensorType(w.dtype)]), prods + [w]
        t, leaves = self._stacked_numpy(values)
        if kind in ('secure_sum_bitwidth', 'secure_modular_sum'):
            bounds = flatten(params['bounds'])
            out = []
            for x, m in zip(leaves, bounds):
                if kind == 'secure_sum_bitwidth':
                    bad = (x < 0) | (x > m - 1)
                    if np.any(bad):
                        pos = tuple(int(p) for p in np.argwhere(bad)[0])
                        raise SimharnessValueError(
                            f'client {start + pos[0]}: element {pos[1:]} = {x[pos]} is outside '
                            f'[0, {m - 1}]{_secure_bound_text(params, m)}')
                    out.append(x.astype(np.uint64))
                else:
                    out.append(np.mod(x.astype(np.int64), np.int64(m)).astype(np.uint64))
            return t, out
        return t, leaves

    def _stacked_numpy(self, values: Sequence[Any]) -> Tuple[T.Type, List[np.ndarray]]:
        values = list(values)
        t = values[0].type_signature
        parts: List[List[np.ndarray]] = []
        for begin, end, block, lo in runs(values):
            if block is not None:
                hi = lo + end - begin
                parts.append([x[lo:hi] if k == 'stacked' else np.broadcast_to(x, (hi - lo,) + x.shape)
                              for k, x in block.numpy_leaves()])
            else:
                parts.append([np.asarray(x)[None] for x in flatten(_np(values[begin].internal))])
        if len(parts) == 1:
            return t, parts[0]
        return t, [np.concatenate([p[j] for p in parts]) for j in range(len(parts[0]))]

    def _row_fns(self, kind: str, params: Dict[str, Any]):
        """(start_rows, fold_rows, merge) on leaf lists with a leading row dimension."""
        if kind == 'aggregate':
            # Only single rows come this way (see `_aggregate_rows`): fold them in order.
            acc_fn = self._fn_of(params['accumulate'])
            merge_fn = self._fn_of(params['merge'])
            zero = flatten(params['zero'].internal)

            def fold(acc, x):
                out = acc_fn.fold_rows(_as_tensors(acc), _as_tensors(x), None)
                return [o.numpy()[None] for o in out]

            def merge(a, b):
                ins = [x[0] for x in a] + [x[0] for x in b]
                return [o.numpy()[None] for o in merge_fn.call_flat(_as_tensors(ins))]
            return (lambda x: fold(zero, x), lambda acc, x: fold([a[0] for a in acc], x), merge)
        if kind in ('secure_sum_bitwidth', 'secure_modular_sum'):
            mods = [np.uint64(m) for m in flatten(params['moduli'])]
            def fold_mod(acc, x):
                return [(a + b) % m for a, b, m in zip(acc, x, mods)]
            return (lambda x: list(x), fold_mod, fold_mod)
        if kind not in ('sum', 'mean', 'weighted_mean'):
            raise SimharnessValueError(f'unknown reduction kind {kind!r}')
        def fold_add(acc, x):
            return [np.add(a, b) for a, b in zip(acc, x)]
        return (lambda x: list(x), fold_add, fold_add)

    async def create_partial_reduction(self, kind: str, values: Sequence[Any], start: int,
                                       total: int, params: Dict[str, Any]) -> Partial:
        self._check_open()
        values = list(values)
        start_rows, fold_rows, merge = self._row_fns(kind, params)
        builder = Reducer(start_rows, fold_rows, merge, total).begin(start)
        if kind == 'aggregate':
            t, leaves = self._stacked_numpy(values)
            at = self._fn_of(params['accumulate']).type_signature.result
            with self._device_scope(), np.errstate(over='ignore'):
                self._aggregate_rows(builder, leaves, start, params)
            return _rows_to_values(builder.finish(), t, at)
        # Numpy kinds: in slices of REDUCTION_SLICE clients on absolute multiples of it
        # (whole chunks), so that a big block is never stacked (and weighted) at once.
        # The builder sees the same rows in the same order: the same bits.
        row_type: Any = None
        pos, i, end = start, 0, start + len(values)
        with self._device_scope(), np.errstate(over='ignore'):
            while i < len(values):
                stop = min(end, (pos // REDUCTION_SLICE + 1) * REDUCTION_SLICE)
                row_type, leaves = self._numpy_rows(kind, values[i:i + stop - pos], pos, params)
                fold_rows_into(builder, leaves, pos, start_rows, fold_rows)
                i, pos = i + stop - pos, stop
        return _rows_to_values(builder.finish(), row_type, row_type)

    def _aggregate_rows(self, builder: Any, leaves: List[np.ndarray], start: int,
                        params: Dict[str, Any]) -> None:
        """Feeds an aggregate's rows with a few TF calls: whole chunks at once, then the tail."""
        acc_fn = self._fn_of(params['accumulate'])
        zero = _as_tensors(flatten(params['zero'].internal))
        L = builder._r.chunk
        n = leaves[0].shape[0] if leaves else 0
        end = start + n
        h = start if start % L == 0 else min(end, (start // L + 1) * L)
        builder.feed([x[i - start:i - start + 1] for x in leaves] for i in range(start, h))
        pos = h
        nfull = (end - h) // L
        if nfull and acc_fn.exact_elementwise and acc_fn.batchable():
            rows = _as_tensors([x[h - start:h - start + nfull * L] for x in leaves])
            acc = [o.numpy() for o in acc_fn.fold_rows(zero, rows, L)]
            builder.feed_chunk_accumulators([[a[c:c + 1] for a in acc] for c in range(nfull)])
            pos = h + nfull * L
        while pos < end:  # one chunk (or its beginning) per TF call
            stop = min(end, (pos // L + 1) * L)
            rows = _as_tensors([x[pos - start:stop - start] for x in leaves])
            acc = [o.numpy()[None] for o in acc_fn.fold_rows(zero, rows, None)]
            builder.feed_folded(acc, stop - pos)
            pos = stop

    async def create_reduction_result(self, kind: str, partials: Sequence[Partial], total: int,
                                      params: Dict[str, Any], result_type: T.Type) -> EagerValue:
        self._check_open()
        reducer = self._combine_reducer(kind, total, params)
        if kind == 'aggregate':
            ft = self._fn_of(params['accumulate']).type_signature
            at = ft.result
            partials = [Partial(p.start, p.stop, list(p.head),  # numpy: see accumulate_many
                                {k: EagerValue(ingest(v, at), at) for k, v in p.nodes.items()},
                                p.open_chunk,
                                None if p.open_chunk is None else EagerValue(ingest(p.open_acc, at), at))
                        for p in partials]
        with self._device_scope(), np.errstate(over='ignore'):
            result = reducer.combine(partials)
        if kind == 'aggregate':
            return result
        if kind == 'mean':
            result = map_structure(lambda x: (x / np.asarray(total, dtype=x.dtype)).astype(x.dtype), result)
        elif kind == 'weighted_mean':
            num, den = result[0], result[1]
            result = map_structure(lambda x: (x / np.asarray(den).astype(x.dtype)).astype(x.dtype), num)
        elif kind in ('secure_sum_bitwidth', 'secure_modular_sum'):
            dtypes = params['dtypes']
            result = map_structure(lambda x, d: x.astype(d), result, dtypes)
        with self._device_scope():
            return EagerValue(ingest(result, result_type), result_type)

    # ------------------------------------------------------------ streaming
    def stream_slice(self, slice_size: Optional[int] = None) -> int:
        """Clients per streamed slice: `slice_size`, else the batch bound (or 256), in whole chunks."""
        n = slice_size or self._max_batch or REDUCTION_SLICE
        return max(CHUNK, n // CHUNK * CHUNK)

    async def create_streamed_reductions(self, nodes: Sequence[Sequence[Any]],
                                         reductions: Sequence[Sequence[Any]], start: int,
                                         count: int, total: int,
                                         slice_size: Optional[int] = None) -> List[Partial]:
        """Computes client values slice by slice and folds each slice into the reductions.

        The values of the clients ``[start, start + count)`` are described by
        `nodes`, a plan evaluated per slice of at most `stream_slice()`
        clients (slices end on absolute multiples of it, so every slice but
        the first starts a chunk): ``['values', [v, ...]]`` (one value per
        client), ``['same', v]`` (one value for all), ``['load', loader,
        type]`` (``loader(lo, hi)`` gives the Python values of clients
        ``lo .. hi-1`` of the block), ``['map', fn, i]``, ``['select', index,
        i]``, ``['zip', names, [i, ...]]`` (``i``: an earlier node). Each
        reduction ``[kind, i, params]`` (``[kind, [i, j], params]`` for a
        weighted mean: values, weights) folds node ``i``'s slice into its
        partial, and the slice's values are dropped before the next slice is
        computed: at most one slice of client values is alive. The partials
        are those `create_partial_reduction` gives for the whole block, bit
        for bit (`Reducer.join`).
        """
        self._check_open()
        step = self.stream_slice(slice_size)
        parts: List[Optional[Partial]] = [None] * len(reductions)
        joiners = [Reducer(lambda v: v, self._node_merge(r[0], r[2]),
                           self._node_merge(r[0], r[2]), total) for r in reductions]
        lo = 0
        while lo < count:
            hi = min(count, (start + lo) // step * step + step - start)
            cache: Dict[int, List[Any]] = {}
            for r, (kind, src, params) in enumerate(reductions):
                if kind == 'weighted_mean':
                    vs = list(zip(await self._plan_slice(nodes, src[0], lo, hi, cache),
                                  await self._plan_slice(nodes, src[1], lo, hi, cache)))
                else:
                    vs = await self._plan_slice(nodes, src, lo, hi, cache)
                p = await self.create_partial_reduction(kind, vs, start + lo, total, params)
                prev = parts[r]
                parts[r] = p if prev is None else joiners[r].join(prev, p)
            del cache
            lo = hi
        return [cast(Partial, p) for p in parts]

    async def _plan_slice(self, nodes: Sequence[Sequence[Any]], i: int, lo: int, hi: int,
                          cache: Dict[int, List[Any]]) -> List[Any]:
        """The values of plan node `i` for the clients ``lo .. hi-1`` of the block (memoized)."""
        got = cache.get(i)
        if got is not None:
            return got
        node = nodes[i]
        op = node[0]
        if op == 'values':
            out: List[Any] = list(node[1][lo:hi])
        elif op == 'same':
            out = [node[1]] * (hi - lo)
        elif op == 'load':
            out = await self.create_values(node[1](lo, hi), node[2])
        elif op == 'sourced_clients':  # a lazy SourcedClients: load this slice only
            out = await self.create_values(node[1][lo:hi], node[2])
        elif op == 'map':
            out = await self.create_map(node[1], await self._plan_slice(nodes, node[2], lo, hi, cache))
        elif op == 'select':
            out = await self.create_selections(await self._plan_slice(nodes, node[2], lo, hi, cache),
                                               int(node[1]))
        elif op == 'zip':
            cols = [await self._plan_slice(nodes, j, lo, hi, cache) for j in node[2]]
            out = await self.create_structs([list(r) for r in zip(*cols)], list(node[1]))
        else:
            raise SimharnessValueError(f'unknown streaming plan node {op!r}')
        cache[i] = out
        return out

    def _node_merge(self, kind: str, params: Dict[str, Any]) -> Any:
        """Merges two tree nodes of a partial (numpy values), as `create_reduction_result` does."""
        if kind in ('sum', 'mean', 'weighted_mean'):
            return add_trees
        if kind in ('secure_sum_bitwidth', 'secure_modular_sum'):
            moduli = params['moduli']
            return lambda a, b: add_trees_mod(a, b, moduli)
        if kind == 'aggregate':
            merge_fn = self._fn_of(params['merge'])
            at = merge_fn.type_signature.result

            def merge(a, b):
                with self._device_scope():
                    out = merge_fn.call_flat(_as_tensors(flatten(a) + flatten(b)))
                return _np(_pack_result(list(out), at))
            return merge
        raise SimharnessValueError(f'unknown reduction kind {kind!r}')

    # ------------------------------------------------------------ sequences
    async def create_sequence_op(self, op: str, values: Sequence[ExecutorValue],
                                 params: Dict[str, Any]) -> List[EagerValue]:
        self._check_open()
        out = []
        with self._device_scope():
            for v in cast(Sequence[EagerValue], values):  # values of this executor
                out.append(self._sequence_op(op, v, params))
        return out

    def _sequence_op(self, op: str, v: EagerValue, params: Dict[str, Any]) -> EagerValue:
        t = v.type_signature
        ds = as_dataset(v.internal)
        if not isinstance(t, T.SequenceType) or not isinstance(ds, tf.data.Dataset):
            raise SimharnessTypeError(f'{op} needs a sequence, got {t}', actual=t)
        et = t.element
        if op == 'sequence_map':
            fn = self._fn_of(params['fn'])
            rt = fn.type_signature.result
            spec = element_spec_for(rt)

            def mapper(*elem):
                elem = elem[0] if len(elem) == 1 else elem
                out = fn.call_flat(_element_leaves(elem, et))
                return tf.nest.pack_sequence_as(spec, out)
            return EagerValue(ds.map(mapper), T.SequenceType(rt))
        if op == 'sequence_reduce':
            fn = self._fn_of(params['op'])
            zero: EagerValue = params['zero']
            at = fn.type_signature.result
            zero_leaves = tuple(_flatten_arg(zero.internal))

            def reduce_fn(acc, elem):
                out = fn.call_flat(list(acc) + _element_leaves(elem, et))
                return tuple(out)
            res = ds.reduce(zero_leaves, reduce_fn)
            return EagerValue(_pack_result(list(res), at), at)
        if op == 'sequence_sum':
            leaves_t = T.flatten_type(et)
            zeros = tuple(tf.zeros(lt.shape, tf_dtype(lt.dtype)) for lt in leaves_t)
            res = ds.reduce(zeros, lambda acc, elem: tuple(
                a + e for a, e in zip(acc, _element_leaves(elem, et))))
            return EagerValue(pack_as(et, list(res)), et)
        raise SimharnessValueError(f'unknown sequence operation {op!r}')

    async def create_select(self, keys: Sequence[ExecutorValue], server_value: ExecutorValue,
                            select_fn: ExecutorValue, element_type: T.Type) -> List[EagerValue]:
        self._check_open()
        fn = self._fn_of(select_fn)
        server_value = cast(EagerValue, server_value)  # a value of this executor
        out = []
        spec = element_spec_for(element_type)
        with self._device_scope():
            for k in cast(Sequence[EagerValue], keys):  # values of this executor
                elems = []
                for key in tf.reshape(k.internal, [-1]):
                    arg = EagerValue(Struct([(None, server_value.internal), (None, key)]),
                                     T.StructType([server_value.type_signature,
                                                   T.TensorType(np.int32)]))
                    elems.append(self.call(fn, arg).internal)
                if elems:
                    py = [_struct_to_spec_container(e, spec) for e in elems]
                    ds = tf.data.Dataset.from_tensor_slices(
                        tf.nest.map_structure(lambda *xs: tf.stack(xs), *py))
                else:
                    ds = tf.data.Dataset.from_tensor_slices(tf.nest.map_structure(
                        lambda s: tf.zeros([0] + list(s.shape), s.dtype), spec))
                out.append(EagerValue(ds, T.SequenceType(element_type)))
        return out


class _NullScope:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
