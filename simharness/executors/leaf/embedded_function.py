"""Serialized TF computations imported into the eager runtime, and a cache of them.

`EmbeddedFunction` wraps one `CompiledComputation` as a callable: called on
flat leaves, batched over a block of clients (`tf.vectorized_map` for
exactly-rounded elementwise graphs, else `tf.map_fn`), folded over rows in
one TF call, or lowered so that in-memory sequences are fed as tensors
(`sequence_lowering`). `FunctionCache` is the bounded, thread-safe LRU cache
the EagerTF executors of a stack share.
"""

from __future__ import annotations

import collections
import threading
from typing import Any, Dict, List, Optional, Sequence, Tuple, cast

import tensorflow as tf

from simharness.core import building_blocks as bb
from simharness.core import types as T
from simharness.core.sequences import TensorBatches
from simharness.core.structure import flatten, pack_as
from simharness.core.tf_sequences import materialize
from simharness.core.tf_serialization import element_spec_for, tf_dtype
from simharness.errors import SimharnessValueError
from simharness.executors.leaf import sequence_lowering as lowering
from simharness.executors.leaf import tensor_sequences as tseq
from simharness.core import xla
from simharness.core.first_calls import FirstCall
from simharness.core.xla import Decision
from simharness.executors.leaf.client_blocks import Row, VmappedModule, module_call_args
from simharness.executors.leaf.numpy_elementwise import scaling_of
from simharness.executors.leaf.tf_values import as_dataset
from simharness.validation import check_int

DEFAULT_CACHE_SIZE = 256


#: The most parameter and result leaves of a function run for a block of clients in one
#: batched TF call (`batchable`). Tracing the batched form costs time in the number of
#: leaves (a struct of 1,000 tensors: ~10 s per worker), while one call per client of such a
#: function is cheap; the same bits either way (the per-client path is the one-client-per-
#: worker layout's).
MAX_BATCHED_LEAVES = 256

#: Most nodes (its graph's and its functions') of a function whose loops over short
#: sequences are unrolled (`EmbeddedFunction.unrolls_loops`): TFF's tutorials' client
#: updates (a Keras MLP or small CNN, plain FedAvg: ~300-330) stay unrolled, a
#: character GRU's (~770) runs one loop for every length.
UNROLL_MAX_NODES = 500

#: Ops whose results are exactly rounded per element (IEEE-754 add, multiply,
#: divide, sqrt, ...), so that computing many clients at once with
#: `tf.vectorized_map` gives the same bits as one call per client.
EXACT_ELEMENTWISE_OPS = frozenset(
    {
        'Placeholder',
        'Const',
        'Identity',
        'IdentityN',
        'NoOp',
        'Add',
        'AddV2',
        'Sub',
        'Mul',
        'RealDiv',
        'Neg',
        'Abs',
        'Sqrt',
        'Maximum',
        'Minimum',
        'Relu',
        'Cast',
        'Square',
        'Select',
        'SelectV2',
        'Greater',
        'GreaterEqual',
        'Less',
        'LessEqual',
        'Equal',
        'NotEqual',
        'LogicalAnd',
        'LogicalOr',
        'LogicalNot',
        'ZerosLike',
        'OnesLike',
        'Floor',
        'Ceil',
        'Round',
        'Sign',
        'FloorDiv',
        'FloorMod',
        'TruncateDiv',
        'BitwiseAnd',
        'BitwiseOr',
        'BitwiseXor',
    }
)

#: Exactly-rounded ops that XLA computes as TF does, alone or next to each other: no add or
#: subtract (XLA fuses a multiply and an add into one FMA, one rounding), no divide (it may
#: multiply by a reciprocal), casts only to floating types (XLA and TF convert NaN and
#: overflowing floats to integers differently). Denormals are flushed in both. A function of
#: these ops alone runs batched as one XLA program (`_make_batched`): the bits of one
#: graph-runtime call per client, faster (TFF's weighted mean multiplies each client's
#: update by its weight: 48 clients of the reference MLP 1.05 -> 0.62 ms).
XLA_EXACT_OPS = frozenset(
    {'Placeholder', 'Const', 'Identity', 'IdentityN', 'NoOp', 'Mul', 'Neg', 'Cast'}
)
_FLOAT_TYPES = frozenset(
    {
        tf.float16.as_datatype_enum,
        tf.bfloat16.as_datatype_enum,
        tf.float32.as_datatype_enum,
        tf.float64.as_datatype_enum,
    }
)


def _xla_exact(nodes: List[Any]) -> bool:
    """True when every node is of `XLA_EXACT_OPS` and every cast is to a floating type."""
    return all(
        n.op in XLA_EXACT_OPS and (n.op != 'Cast' or n.attr['DstT'].type in _FLOAT_TYPES)
        for n in nodes
    )


def selection(graph: Any, graph_def: Any) -> Optional[Tuple[int, ...]]:
    """For a graph whose every output is a parameter passed through `Identity` ops only
    (no control inputs, nothing else in the graph that could run), the parameter's
    position of each output; else None."""
    if graph_def.library.function:
        return None
    by_name = {n.name: n for n in graph_def.node}
    params = {
        name.split(':')[0]: i for i, name in enumerate(graph.input_names) if name.endswith(':0')
    }
    out: List[int] = []
    used = set()
    for name in graph.output_names:
        node_name, _, port = name.partition(':')
        if port != '0':
            return None
        node = by_name.get(node_name)
        while node is not None and node.op == 'Identity':
            used.add(node.name)
            if len(node.input) != 1 or node.input[0].startswith('^'):
                return None
            base, _, port = node.input[0].partition(':')
            if port not in ('', '0'):
                return None
            node = by_name.get(base)
        if node is None or node.op != 'Placeholder' or node.name not in params:
            return None
        used.add(node.name)
        out.append(params[node.name])
    if any(n.name not in used and n.op != 'Placeholder' for n in graph_def.node):
        return None
    return tuple(out)


#: Ops after which a graph's reading of a dataset may end before the dataset does (or
#: fail instead of running forever): with one of them, an infinite dataset is not refused.
BOUNDING_OPS = frozenset(
    (
        'TakeDataset',
        'TakeWhileDataset',
        'ZipDataset',
        'DatasetToSingleElement',
        'DatasetCardinality',
        'AssertCardinalityDataset',
        'ExperimentalAssertCardinalityDataset',
        'AnonymousIterator',
        'AnonymousIteratorV2',
        'AnonymousIteratorV3',
        'Iterator',
        'IteratorV2',
        'MakeIterator',
        'OneShotIterator',
        'IteratorGetNext',
        'IteratorGetNextAsOptional',
        'IteratorGetNextSync',
    )
)


_MODULE_CALL = Decision(True, 'a JAX computation: one XlaCallModule call, compiled by XLA')


class EmbeddedFunction:
    """A `CompiledComputation` imported into the eager runtime."""

    def __init__(self, comp: bb.CompiledComputation):
        self.comp = comp
        self.type_signature: T.FunctionType = comp.type_signature
        graph_def = tf.compat.v1.GraphDef()
        graph_def.ParseFromString(comp.graph.graph_def)
        self._fn = xla.import_concrete(comp, graph_def)
        #: The imported graph as a concrete function (graph runtime).
        self.concrete = self._fn
        self._specs = self._fn.structured_input_signature[0]
        self._xla: Optional[Decision] = None
        self._jit_single: Any = None
        self._flat_single: Optional[_FlatCall] = None
        nodes = list(graph_def.node) + [n for f in graph_def.library.function for n in f.node_def]
        ops = {n.op for n in nodes}
        #: True when the graph reads a dataset to its end (``dataset.reduce``) and has no op
        #: that could stop earlier (`BOUNDING_OPS`): on an infinite dataset it never returns.
        self.reduces_to_end = 'ReduceDataset' in ops and not ops & BOUNDING_OPS
        #: True when every op is exactly rounded per element (see EXACT_ELEMENTWISE_OPS).
        self.exact_elementwise = {n.op for n in nodes} <= EXACT_ELEMENTWISE_OPS
        #: True when its batched form runs as one XLA program (see XLA_EXACT_OPS).
        self.xla_exact = self.exact_elementwise and _xla_exact(nodes)
        #: When every result is a parameter times one per-client weight (TFF's weighted
        #: mean's products): which (`numpy_elementwise.scaling_of`), else None.
        self.scaling = (
            scaling_of(graph_def, comp.graph.input_names, comp.graph.output_names)
            if self.xla_exact
            else None
        )
        #: When every result is one of the parameters passed through (`selection`): their
        #: positions (a call is then no TF call), else None.
        self.selection = selection(comp.graph, graph_def)
        #: A vectorized JAX computation's block module (`client_blocks.VmappedModule`):
        #: `call_batched` runs a block as one call of it. None for other functions.
        self.vmapped = VmappedModule.from_graph(
            graph_def, comp.graph.input_names, comp.graph.output_names
        )
        #: True for a JAX computation's graph (one ``XlaCallModule`` call): see `xla`.
        self.module_call = (
            module_call_args(graph_def, comp.graph.input_names, comp.graph.output_names) is not None
        )
        self._param_leaves = (
            []
            if self.type_signature.parameter is None
            else T.flatten_type(self.type_signature.parameter)
        )
        self._result_leaves = T.flatten_type(self.type_signature.result)
        # keys: a shared mask (tuple of bools), or ('fold', k, chunk)
        self._batched: Dict[Tuple[Any, ...], Any] = {}
        self._lock = threading.RLock()  # `xla` is first read under it by the batched forms
        #: Positions of the parameter leaves that are sequences.
        self.sequence_params = tuple(
            i for i, t in enumerate(self._param_leaves) if isinstance(t, T.SequenceType)
        )
        self._unrolls: Optional[bool] = None  # `unrolls_loops`, computed on first use
        # lowering key -> the lowered function, or None (not lowerable)
        self._lowered: Dict[Tuple[Any, ...], Optional['EmbeddedFunction']] = {}

    @property
    def xla(self) -> Decision:
        """Whether this function runs XLA-compiled, and why (`simharness.core.xla`)."""
        if self._xla is None:
            # A JAX computation's graph (one XlaCallModule call) is compiled by XLA either
            # way (the op compiles its module); compiled as a whole, a block of clients is
            # one XLA program (and a worker sums their results in it), with the bits of
            # one compiled call per client, as for TF graphs. Not a vectorized one: its
            # blocks run as calls of its block module (`call_batched`) on every stack,
            # never as a compiled loop summed in the call.
            jax_call = self.module_call and self.vmapped is None
            decision = _MODULE_CALL if jax_call else xla.decide(self.comp, self._fn)
            with self._lock:
                if self._xla is None:
                    if decision.compiled:
                        self._jit_single = _concrete(
                            tf.function(
                                self._fn,
                                jit_compile=True,
                                input_signature=self._specs,
                                autograph=False,
                            )
                        )
                    self._xla = decision
        return self._xla

    def _callable(self) -> Any:
        """The function one call runs: compiled by XLA or the graph runtime's (`xla`)."""
        return self._jit_single if self.xla.compiled else self._fn

    def _single(self) -> '_FlatCall':
        """`_callable()`, called on the flat list of tensors when they fit (`_FlatCall`)."""
        single = self._flat_single
        if single is None:
            single = self._flat_single = _FlatCall(self._callable())
        return single

    @property
    def unrolls_loops(self) -> bool:
        """Whether loops over short sequences are unrolled, one function per number of
        elements (`sequence_lowering.UNROLL_LIMIT`): only when this function's graph has at
        most `UNROLL_MAX_NODES` nodes. A larger body (a recurrent model's step: its own
        loop over time) costs more to trace and optimize once per count (~1 s each for a
        character GRU) than a `tf.while_loop` costs per element; a rule of the graph alone,
        so that a client runs the same graph on every stack."""
        if self._unrolls is None:
            gd = tf.compat.v1.GraphDef()
            gd.ParseFromString(self.comp.graph.graph_def)
            nodes = len(gd.node) + sum(len(f.node_def) for f in gd.library.function)
            self._unrolls = nodes <= UNROLL_MAX_NODES
        return self._unrolls

    def lowered(self, sources: Dict[int, TensorBatches]) -> Optional['EmbeddedFunction']:
        """This function with the sequence leaves `sources` (by position) fed as components.

        The `tf.data` loops over those sequences become tensor loops (see
        `sequence_lowering`); the function takes their components in place of
        each of them. None when the graph uses a sequence otherwise.
        """
        unroll = self.unrolls_loops
        key = tuple((i, tseq.lowering_key(tb, unroll)) for i, tb in sorted(sources.items()))
        found = self._lowered.get(key, self)
        if found is not self:
            return found
        with self._lock:
            if key not in self._lowered:
                specs = {i: tseq.source_spec(tb, unroll) for i, tb in sources.items()}
                self._lowered[key] = self._lower(specs, sources)
        return self._lowered[key]

    def _lower(
        self, specs: Dict[int, 'lowering.SourceSpec'], sources: Dict[int, TensorBatches]
    ) -> Optional['EmbeddedFunction']:
        graph = self.comp.graph
        gd = tf.compat.v1.GraphDef()
        gd.ParseFromString(graph.graph_def)
        input_names: List[Any] = [[n] for n in graph.input_names]
        leaves: List[Any] = [[t] for t in self._param_leaves]
        try:
            for i, spec in sorted(specs.items()):
                types = tseq.component_types(
                    cast(T.SequenceType, self._param_leaves[i]),
                    spec.batch_size is not None,
                    spec.rows,
                )
                if types is None:
                    return None
                gd, names = lowering.lower_graph(gd, graph.input_names[i], spec, graph.output_names)
                input_names[i], leaves[i] = names, types
        except lowering.NotLowerable:
            return None
        flat_names = [n for group in input_names for n in group]
        flat_types = [t for group in leaves for t in group]
        comp = bb.CompiledComputation(
            bb.TFGraph(gd.SerializeToString(), flat_names, graph.output_names),
            T.FunctionType(
                T.StructType([(None, t) for t in flat_types]), self.type_signature.result
            ),
            self.comp.name,
        )
        return EmbeddedFunction(comp)

    def __call__(self, arg: Any = None) -> Any:
        """TFF's embedded function: called with the structured argument (tensors and
        `Struct`s), returns the structured result."""
        leaves = [] if self.type_signature.parameter is None else flatten_arg(arg)
        return pack_result(self.call_flat(leaves), self.type_signature.result)

    def call_flat(self, leaves: Sequence[Any]) -> List[Any]:
        if self.selection is not None and all(
            isinstance(leaves[j], tf.Tensor) for j in self.selection
        ):
            # TF's Identity gives the input tensor's value: the same, without the
            # 0.3-0.5 ms of a function call (a server's `lambda s: s.weights`)
            return [leaves[j] for j in self.selection]
        out = self._single()(*leaves)
        if isinstance(out, (list, tuple)):
            return list(out)
        return [out]

    def batchable(self) -> bool:
        """True when every parameter and result leaf is a fully-defined tensor, and there are
        at most `MAX_BATCHED_LEAVES` of them."""
        return (
            len(self._param_leaves) + len(self._result_leaves) <= MAX_BATCHED_LEAVES
            and all(isinstance(t, T.TensorType) for t in self._param_leaves)
            and all(isinstance(t, T.TensorType) and t.is_fully_defined for t in self._result_leaves)
        )

    def call_batched(
        self, shared_mask: Tuple[bool, ...], shared: List[Any], stacked: List[Any], n: int
    ) -> List[Any]:
        """Runs `n` clients in one TF call; returns stacked result leaves."""
        vmapped = self.vmapped
        if vmapped is not None:
            fn, _ = self._block_fn(
                ('vmapped', shared_mask),
                lambda: _FlatCall(
                    _concrete(vmapped.make_block_fn(shared_mask, *self._block_sigs(shared_mask)))
                ),
            )
            return list(fn(tuple(shared), tuple(stacked)))
        fn, first_call = self._block_fn(
            shared_mask, lambda: _FlatCall(_concrete(self._make_batched(shared_mask)))
        )
        out = list(fn(tuple(shared), tuple(stacked)))
        if first_call and self.xla.compiled:
            trim_heap()  # after XLA compiled the block (its first call)
        return out

    def _block_fn(self, key: Any, make: Any) -> Tuple[Any, bool]:
        """The block function cached under `key` (made by `make()` if missing), and whether
        it was missing. Executors of a stack share this object from several threads: the
        first call traces, once, under the lock."""
        fn = self._batched.get(key)
        if fn is not None:
            return fn, False
        with self._lock:
            fn = self._batched.get(key)
            if fn is None:
                fn = self._batched[key] = make()
        return fn, True

    def _block_sigs(self, mask: Tuple[bool, ...]) -> Tuple[Tuple[Any, ...], Tuple[Any, ...]]:
        """The input signatures of a block call: the shared leaves (one value for every
        client, `mask` True) and the stacked ones (a leading client dimension)."""
        specs = [tf.TensorSpec(t.shape, tf_dtype(t.dtype)) for t in self._param_leaves]
        return (
            tuple(sp for sp, m in zip(specs, mask) if m),
            tuple(
                tf.TensorSpec([None] + list(sp.shape), sp.dtype)
                for sp, m in zip(specs, mask)
                if not m
            ),
        )

    def call_summed(
        self,
        shared_mask: Tuple[bool, ...],
        shared: List[Any],
        stacked: List[Any],
        first: List[bool],
        seg: List[int],
        nseg: int,
    ) -> List[Any]:
        """Runs the `len(first)` clients of a block in ONE compiled call and sums their results
        by segment: client k's result starts segment ``seg[k]`` when ``first[k]``, else is
        added to it. Returns the `nseg` sums of each result leaf (leaves [nseg, ...]), then a
        flag: nonzero when a float result held a NaN or a nonzero value below 2**-100
        (2**-960 for float64), where these sums could differ from numpy's (see
        `stream_eval.summed_map`)."""
        fn, first_call = self._block_fn(
            ('summed', shared_mask), lambda: _FlatCall(_concrete(self._make_summed(shared_mask)))
        )
        out = list(
            fn(
                tuple(shared),
                tuple(stacked),
                tf.constant(first, tf.bool),
                tf.constant(seg, tf.int32),
                tf.constant(nseg, tf.int32),
            )
        )
        if first_call:
            trim_heap()  # after XLA compiled the block (its first call)
        return out

    def _make_summed(self, mask: Tuple[bool, ...]):
        inner = self._fn
        res = [(list(t.shape), tf_dtype(t.dtype)) for t in self._result_leaves]
        shared_sig, stacked_sig = self._block_sigs(mask)

        @tf.function(
            autograph=False,
            jit_compile=True,
            input_signature=(
                shared_sig,
                stacked_sig,
                tf.TensorSpec([None], tf.bool),
                tf.TensorSpec([None], tf.int32),
                tf.TensorSpec([], tf.int32),
            ),
        )
        def summed(shared, stacked, first, seg, nseg):
            n = tf.shape(first)[0]

            def client(i):
                it_s, it_x = iter(shared), iter(stacked)
                leaves = [next(it_s) if m else next(it_x)[i] for m in mask]
                out = inner(*leaves)
                return tuple(out) if isinstance(out, (list, tuple)) else (out,)

            def fold(j, outs, prev, flags):
                # Client j's result `prev` joins its segment: its first client's value,
                # then sums in client order (numpy's additions, in XLA). A value that is
                # NaN or nonzero but below 2**-100 in magnitude (2**-960 for float64) is
                # flagged (the caller then folds the block with numpy instead): TF flushes
                # subnormal operands and sums to zero, numpy does not, and only such
                # values can make a subnormal sum.
                s = seg[j]
                new = []
                for o, p in zip(outs, prev):
                    row = tf.gather(o, s)
                    row = tf.where(first[j], p, row + p)
                    new.append(tf.tensor_scatter_nd_update(o, [[s]], row[None]))
                marks = []
                for k, f in zip(checked, flags):
                    p = prev[k]
                    a = tf.abs(p)
                    bad = tf.logical_or(
                        tf.logical_and(a < _TINY[p.dtype], a > 0), tf.math.is_nan(p)
                    )
                    marks.append(tf.maximum(f, tf.cast(bad, p.dtype)))
                return tuple(new), tuple(marks)

            def body(i, outs, prev, flags):
                outs, flags = fold(tf.maximum(i - 1, 0), outs, prev, flags)
                return i + 1, outs, client(i), flags

            outs = tuple(tf.zeros([nseg] + shape, dt) for shape, dt in res)
            zeros = tuple(tf.zeros(shape, dt) for shape, dt in res)
            checked = [k for k, (_, dt) in enumerate(res) if dt in _TINY]
            flags = tuple(tf.zeros(res[k][0], res[k][1]) for k in checked)
            _, outs, prev, flags = tf.while_loop(
                lambda i, *a: i < n,
                body,
                (tf.constant(0), outs, zeros, flags),
                parallel_iterations=1,
            )
            outs, flags = fold(n - 1, outs, prev, flags)
            flagged = [tf.reduce_max(tf.cast(f, tf.float32)) for f in flags]
            return outs + (tf.reduce_max(tf.stack(flagged)) if flagged else tf.constant(0.0),)

        return summed

    def fold_rows(self, zero: List[Any], rows: List[Any], chunk: Optional[int]) -> List[Any]:
        """Folds rows with this (accumulate) function in ONE TF call.

        With `chunk` None: ``acc = f(zero, r0); acc = f(acc, r1); ...`` over the
        k rows. With `chunk` L: rows are [c * L, ...]; the same fold runs for
        the c chunks at once (vectorized, so only for exactly-rounded
        elementwise functions) and the result has a leading c dimension.
        """
        fn, _ = self._block_fn(
            ('fold', chunk), lambda: _FlatCall(_concrete(self._make_fold(chunk, len(zero))))
        )
        return list(fn(tuple(zero), tuple(rows)))

    def _make_fold(self, chunk: Optional[int], nzero: int) -> Any:
        # compiled: each step is one call of the compiled function, the bits of `call_flat`
        inner = self._callable()

        def call(leaves):
            out = inner(*leaves)
            return list(out) if isinstance(out, (list, tuple)) else [out]

        leaves = self._param_leaves
        zero_sig = tuple(tf.TensorSpec(t.shape, tf_dtype(t.dtype)) for t in leaves[:nzero])
        row_sig = tuple(
            tf.TensorSpec([None] + list(t.shape), tf_dtype(t.dtype)) for t in leaves[nzero:]
        )

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

                _, acc = tf.while_loop(
                    lambda i, acc: i < n, body, (tf.constant(0), tuple(zero)), parallel_iterations=1
                )
                return tuple(acc)
            seg = [tf.reshape(r, tf.concat([[-1, chunk], tf.shape(r)[1:]], 0)) for r in rows]
            acc = tf.vectorized_map(
                lambda x: tuple(call(list(zero) + list(x))),
                tuple(s[:, 0] for s in seg),
                fallback_to_while_loop=False,
            )

            def vbody(i, acc):
                step = tf.vectorized_map(
                    lambda ax: tuple(call(list(ax[0]) + list(ax[1]))),
                    (tuple(acc), tuple(s[:, i] for s in seg)),
                    fallback_to_while_loop=False,
                )
                return i + 1, tuple(step)

            _, acc = tf.while_loop(
                lambda i, acc: i < chunk, vbody, (tf.constant(1), tuple(acc)), parallel_iterations=1
            )
            return tuple(acc)

        return fold

    def _make_batched(self, mask: Tuple[bool, ...]):
        inner = self._fn
        compiled = self.xla.compiled
        exact = self.exact_elementwise and not compiled
        out_sig = tuple(tf.TensorSpec(t.shape, tf_dtype(t.dtype)) for t in self._result_leaves)

        shared_sig, stacked_sig = self._block_sigs(mask)

        # Compiled: the whole block is one XLA computation (a loop over its clients), whose
        # per-client results are the bits of one compiled call per client (`call_flat`),
        # whatever the block's size (tests/conformance/test_xla_bits.py; XLA's loop-invariant
        # code motion is off for that: `determinism.XLA_DISABLED_PASSES`).
        @tf.function(
            autograph=False,
            input_signature=(shared_sig, stacked_sig),
            jit_compile=compiled or (exact and self.xla_exact),
        )
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


#: Below these magnitudes a summed result's value could make a subnormal sum (see
#: `EmbeddedFunction.call_summed`): every nonzero value at or above them is a multiple of
#: the smallest normal number, and so is any sum of such values.
_TINY = {tf.float32: 2.0**-100, tf.float64: 2.0**-960}


_LIBC: Any = None


def trim_heap() -> None:
    """Hands the C heap's free memory back to the OS (glibc's ``malloc_trim``).

    XLA's compiler frees most of what a compile allocates, but glibc keeps the freed
    pages: compiling and running a block of the reference MLP's client updates left a
    process 198 MB bigger, 126 MB after a trim (the block summed in the call: 251 -> 122
    MB). Called after a compiled block's first call. No-op where the C library has no
    ``malloc_trim`` (not glibc).
    """
    global _LIBC
    if _LIBC is None:
        import ctypes
        import ctypes.util

        try:
            lib = ctypes.CDLL(ctypes.util.find_library('c') or 'libc.so.6')
            _LIBC = lib if hasattr(lib, 'malloc_trim') else False
        except OSError:
            _LIBC = False
    if _LIBC:
        _LIBC.malloc_trim(0)


def _concrete(fn: Any) -> Any:
    """The one concrete function of a `tf.function` with an input signature (traced now).

    Called directly it skips the polymorphic function's per-call dispatch (binding and
    canonicalizing every argument against the signature): measured on a block call of 9
    tensors, 309 us a call against 147 us; it runs the same graph (XLA-compiled when
    `fn` is), so the same bits.
    """
    return fn.get_concrete_function()


class _FlatCall:
    """A concrete function called with the flat list of its argument's tensors.

    The concrete function's own call binds its structured arguments to the signature and
    casts each leaf (TF's `canonicalize_function_inputs`), for arguments that already
    match: a block call of 9 tensors 0.15 ms against 0.08 ms here, a server update of 21
    tensors 0.183 against 0.099 ms (2026-11-27). Here each leaf is checked against the
    signature's dtype and shape in a few compares and the function runs on the flat list
    (`_call_flat`, TF's own next step, so the same graph and bits); anything else (a numpy
    leaf, another shape, graph mode) takes the structured call, which converts or raises
    TF's error. The first call runs alone (`FirstCall`: a cohort's threads would each set
    the function up).
    """

    def __init__(self, concrete: Any):
        self._concrete = concrete
        self._first = FirstCall()
        specs = tf.nest.flatten(concrete.structured_input_signature[0])
        self._dtypes = [s.dtype for s in specs]
        self._shapes = [tuple(s.shape.as_list()) for s in specs]
        self._call_flat = getattr(concrete, '_call_flat', None)

    def _fits(self, flat: Sequence[Any]) -> bool:
        if self._call_flat is None or len(flat) != len(self._dtypes):
            return False
        for x, dtype, want in zip(flat, self._dtypes, self._shapes):
            if not isinstance(x, tf.Tensor) or x.dtype != dtype:
                return False
            got = x.shape
            if len(got) != len(want) or any(w is not None and w != g for w, g in zip(want, got)):
                return False
        return True

    def flat(self, flat: Sequence[Any], structured: Any) -> Any:
        """The function on `flat` (its argument's leaves); `structured()` when they do not fit."""
        if tf.executing_eagerly() and self._fits(flat):
            return self._first(lambda: self._call_flat(list(flat), self._concrete.captured_inputs))
        return self._first(structured)

    def __call__(self, *args: Any) -> Any:
        """The function on `args` (tensors, or tuples of them: their leaves in order)."""
        flat = [x for a in args for x in (a if isinstance(a, tuple) else (a,))]
        return self.flat(flat, lambda: self._concrete(*args))


def flatten_arg(value: Any) -> List[Any]:
    leaves = [as_dataset(l) for l in flatten(value)]
    return [
        tf.data.experimental.to_variant(l) if isinstance(l, tf.data.Dataset) else l for l in leaves
    ]


def lowered_leaves(
    fn: 'EmbeddedFunction', leaves: List[Any]
) -> Optional[Tuple['EmbeddedFunction', List[Any]]]:
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
            rows = tb.derived.get('rows')
            if rows is None:
                flat.extend(tb.components)
            else:  # slices of stacked components: the stacked tensor rides along
                flat.extend(Row(c, x, rows[1]) for c, x in zip(tb.components, rows[0]))
        elif isinstance(leaf, (tf.data.Dataset, TensorBatches)):
            flat.append(tf.data.experimental.to_variant(as_dataset(leaf)))
        else:
            flat.append(leaf)
    return lowered, flat


def pack_result(leaves: List[Any], t: T.Type) -> Any:
    types = T.flatten_type(t)
    out = []
    for leaf, lt in zip(leaves, types):
        if isinstance(lt, T.SequenceType):
            ds = tf.data.experimental.from_variant(leaf, element_spec_for(lt.element))
            # a small finite dataset (e.g. a dataset_computation's client dataset) read
            # once into tensors, so that the loops over it are lowered
            tb = materialize(ds, lt)
            out.append(ds if tb is None else tb)
        else:
            out.append(leaf)
    return pack_as(t, out)


class FunctionCache:
    """A bounded, thread-safe LRU cache of embedded functions.

    One cache may be shared by the EagerTF executors of a stack (they run in
    different threads of one process), so that each computation is imported
    and traced once per stack rather than once per client group.
    """

    def __init__(self, max_size: int = DEFAULT_CACHE_SIZE):
        self.max_size: int = check_int('cache size (max_size)', max_size, 1)
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
