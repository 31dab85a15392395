"""Which client computations run XLA-compiled, and why the others do not.

A serialized TF computation runs in TF's graph runtime or, compiled, through
XLA (``tf.function(jit_compile=True)``). On this project's CPUs XLA runs a
block of client updates of the reference MLP faster (the compiled client computations'
runs in docs/benchmarks-history.md), but compiling costs about a second per computation and per block size, and a
compiled result may differ in the last bits from the graph runtime's. So the
choice must be the same in every process and every run, whatever the layout:
it is made by `decide` from the computation alone, never from a timing.

**The rule** (``auto``), in order:

1. forced off: a marker in the graph (`with_jit_compile`: per computation, by
   ``tf_computation(..., jit_compile=...)``, or per stack, by
   ``execution_context(factory, jit_compile=...)``) says so;
2. not compiled when it takes or returns a dataset (where its loops run as
   tensor loops, on the workers, that lowered form is decided by this rule)
   or strings;
3. not compiled with a stateful op: a stateful random op (TFF's semantics:
   an unseeded ``tf.random`` op gives fresh values per client and call, and
   XLA ignores such ops' seeds) or another (XLA would drop or reorder its
   effect, e.g. an ``Assert``);
4. forced on: compiled, if XLA lowers it (7);
5. not compiled with a convolution: on CPU, oneDNN's conv kernels are faster
   than XLA's on the CNN of `simharness.learning.models` (measured in
   docs/benchmarks.md); force it to compile anyway;
6. not compiled without dense work (no ``MatMul``/``BatchMatMul``/
   ``Einsum``: elementwise and reduction graphs gain nothing measurable), or
   when the call is small: its parameters and results hold fewer than
   `MIN_ELEMENTS` tensor elements, or some of unknown size (a compile costs
   ~1 s per computation and per block size and would not pay back);
7. otherwise compiled, unless XLA cannot lower it (an op without an XLA
   kernel): then not, with XLA's reason.

Compiled results keep the determinism guarantee among themselves: a block of
clients runs in one compiled call whose per-client results are the bits of one
compiled call per client (checked in tests/conformance/test_xla_bits.py on every
stack and layout), so the bits do not depend on how clients are cut into
blocks (XLA's loop-invariant code motion, which made a Keras client update's
bits depend on the block, is off: `determinism.XLA_DISABLED_PASSES`).
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any, Dict, Optional, Tuple

from simharness.core import building_blocks as bb
from simharness.core import types as T
from simharness.errors import SimharnessTypeError

__all__ = [
    'Decision',
    'MARKER',
    'MIN_ELEMENTS',
    'check_jit_compile',
    'decide',
    'forced',
    'force_tree',
    'import_concrete',
    'report',
    'with_jit_compile',
]

#: The name of the graph node that carries a forced choice (a bool ``Const`` nothing reads).
MARKER = 'simharness_jit_compile'
_ATTR = 'value'
#: Auto compiles calls whose parameter and result tensors hold at least this many elements.
MIN_ELEMENTS = 65536
DENSE_OPS = frozenset({'MatMul', 'BatchMatMul', 'BatchMatMulV2', 'BatchMatMulV3', 'Einsum'})
CONV_OPS = frozenset(
    {
        'Conv2D',
        'Conv3D',
        'DepthwiseConv2dNative',
        'Conv2DBackpropInput',
        'Conv2DBackpropFilter',
        'Conv3DBackpropInputV2',
        'Conv3DBackpropFilterV2',
        'DepthwiseConv2dNativeBackpropInput',
        'DepthwiseConv2dNativeBackpropFilter',
        'Conv',
    }
)
#: Stateful ops that are only control flow around their bodies (whose ops are checked too).
_CONTROL_FLOW = frozenset(
    {'While', 'If', 'Case', 'StatefulPartitionedCall', 'PartitionedCall', 'NoOp'}
)


@dataclasses.dataclass(frozen=True)
class Decision:
    """Whether a computation runs XLA-compiled, and why (or why not)."""

    compiled: bool
    reason: str

    def as_dict(self) -> Dict[str, Any]:
        return {'compiled': self.compiled, 'reason': self.reason}


def _graph_def(comp: bb.CompiledComputation) -> Any:
    import tensorflow as tf

    gd = tf.compat.v1.GraphDef()
    gd.ParseFromString(comp.graph.graph_def)
    return gd


def forced(graph_def: Any) -> Optional[bool]:
    """The choice forced by `MARKER` in `graph_def`, or None."""
    for node in graph_def.node:
        if node.name == MARKER and node.op == 'Const':
            return bool(node.attr[_ATTR].tensor.bool_val[0])
    return None


def check_jit_compile(on: Any) -> Optional[bool]:
    """`on` if it is True, False or None, else a `SimharnessTypeError` naming it."""
    if on is not None and not isinstance(on, bool):
        raise SimharnessTypeError(
            f'jit_compile must be True, False or None, got {on!r} of type {type(on).__name__}',
            expected='bool or None',
            actual=type(on),
        )
    return on


def with_jit_compile(comp: bb.CompiledComputation, on: Optional[bool]) -> bb.CompiledComputation:
    """`comp` with its XLA choice forced to `on` (None: the rule decides)."""
    check_jit_compile(on)
    if not isinstance(comp, bb.CompiledComputation):
        raise SimharnessTypeError(
            f'jit_compile applies to TF computations, got {type(comp).__name__}',
            expected='CompiledComputation',
            actual=type(comp),
        )
    gd = _graph_def(comp)
    if forced(gd) == on:
        return comp
    kept = [n for n in gd.node if n.name != MARKER]
    del gd.node[:]
    gd.node.extend(kept)
    if on is not None:  # a constant nothing reads: the graph computes what it computed
        import tensorflow as tf

        node = gd.node.add()
        node.name, node.op = MARKER, 'Const'
        node.attr['dtype'].type = tf.bool.as_datatype_enum
        node.attr[_ATTR].tensor.CopyFrom(tf.make_tensor_proto(on, tf.bool))
    graph = bb.TFGraph(gd.SerializeToString(), comp.graph.input_names, comp.graph.output_names)
    return bb.CompiledComputation(graph, comp.type_signature, comp.name)


def _ops(graph_def: Any) -> set:
    """The op types of `graph_def` and its function library (calls of its functions left out)."""
    ops = {n.op for n in graph_def.node}
    for f in graph_def.library.function:
        ops.update(n.op for n in f.node_def)
    return ops - {f.signature.name for f in graph_def.library.function}


def _elements(t: T.Type) -> Optional[int]:
    total = 0
    for leaf in T.flatten_type(t) if t is not None else []:
        if not isinstance(leaf, T.TensorType) or not leaf.is_fully_defined:
            return None
        n = 1
        for d in leaf.shape:
            n *= int(d)
        total += n
    return total


def _static(comp: bb.CompiledComputation, graph_def: Any) -> Optional[Decision]:
    """The rule's steps 1-5: a decision, or None when XLA must be asked (step 6)."""
    from tensorflow.python.framework import op_def_registry

    on = forced(graph_def)
    if on is False:
        return Decision(False, 'forced off')
    for leaf in [
        *T.flatten_type(comp.type_signature.parameter or T.StructType([])),
        *T.flatten_type(comp.type_signature.result),
    ]:
        if isinstance(leaf, T.SequenceType):
            return Decision(
                False,
                'takes or returns a dataset (where its loops run as tensor '
                'loops, that lowered form is decided by this rule on the workers)',
            )
        if not isinstance(leaf, T.TensorType):
            return Decision(False, f'takes or returns a {type(leaf).__name__}')
        if leaf.dtype is not None and str(leaf.dtype) in ('object', 'str', '<U0', 'bytes'):
            return Decision(False, 'takes or returns strings')
    ops = _ops(graph_def)
    stateful = sorted(
        op
        for op in ops - _CONTROL_FLOW
        if (op_def_registry.get(op) is None or op_def_registry.get(op).is_stateful)
    )
    random = [op for op in stateful if any(n in op.encode() for n in bb.STATEFUL_RANDOM_OP_NAMES)]
    if random:  # even when forced: XLA would change what the computation means
        return Decision(
            False,
            f'stateful random op {random[0]} (fresh values per call, as in '
            'TFF; XLA ignores the seeds of stateful random ops)',
        )
    if stateful:
        return Decision(False, f'stateful op {stateful[0]} (XLA would drop or reorder its effect)')
    if on:
        return None
    conv = sorted(ops & CONV_OPS)
    if conv:
        return Decision(False, f'convolution {conv[0]} (oneDNN is faster on CPU)')
    if not ops & DENSE_OPS:
        return Decision(False, 'no matmul (nothing for XLA to gain)')
    n = _elements(comp.type_signature.parameter) if comp.type_signature.parameter else 0
    m = _elements(comp.type_signature.result)
    if n is None or m is None:
        return Decision(False, 'a tensor of unknown shape')
    if n + m < MIN_ELEMENTS:
        return Decision(False, f'small: {n + m} tensor elements per call (< {MIN_ELEMENTS})')
    return None


def lowering_error(fn: Any) -> Optional[str]:
    """None when XLA lowers the concrete function `fn`, else XLA's reason (its first line)."""
    import tensorflow as tf

    # A dimension of unknown size (a forced computation over a sequence's components) is
    # lowered at size 1 here; each size met at run time is compiled when it comes.
    specs = [
        tf.TensorSpec([1 if d is None else d for d in s.shape], s.dtype)
        if s.shape.rank is not None
        else s
        for s in fn.structured_input_signature[0]
    ]
    try:
        tf.function(
            lambda *a: fn(*a), jit_compile=True, autograph=False
        ).experimental_get_compiler_ir(*specs)(stage='hlo')
    except Exception as e:  # pylint: disable=broad-except  # XLA's errors are of many types
        text = str(e)
        for key in ('Detected unsupported operations', 'No registered'):
            if key in text:
                text = text[text.index(key) :]
                break
        text = text.split(' (No registered')[0]
        return text.splitlines()[0][:300] if text else type(e).__name__
    return None


#: Decisions and forced copies kept per process (cleared when full: they are made again).
_CACHE_SIZE = 4096
_CACHE: Dict[str, Decision] = {}
_LOCK = threading.Lock()


def import_concrete(comp: bb.CompiledComputation, graph_def: Any = None) -> Any:
    """`comp`'s graph (`graph_def`: already parsed) imported as a concrete function of its flat
    parameter leaves (graph runtime), with a real positional signature: calls bind directly (a pruned function would
    fail structured binding on every call and format the arguments into an error message
    before falling back)."""
    import tensorflow as tf
    from simharness.core.tf_serialization import tf_dtype

    graph = comp.graph
    graph_def = _graph_def(comp) if graph_def is None else graph_def
    param = comp.type_signature.parameter
    leaves = [] if param is None else T.flatten_type(param)
    specs = [
        tf.TensorSpec(t.shape, tf_dtype(t.dtype))
        if isinstance(t, T.TensorType)
        else tf.TensorSpec([], tf.variant)
        for t in leaves
    ]
    input_names, output_names = list(graph.input_names), list(graph.output_names)

    def _import(*args: Any) -> Any:
        return tf.graph_util.import_graph_def(
            graph_def,
            input_map=dict(zip(input_names, args)),
            return_elements=output_names,
            name='imported',
        )

    return tf.compat.v1.wrap_function(_import, specs)


def decide(comp: bb.CompiledComputation, fn: Any = None) -> Decision:
    """The `Decision` for `comp` (cached per graph). `fn`: its `import_concrete` function
    (made here when XLA must be asked and it is not given)."""
    key = comp.fingerprint
    found = _CACHE.get(key)
    if found is not None:
        return found
    gd = _graph_def(comp)
    decision = _static(comp, gd)
    if decision is None:
        if fn is None:
            fn = import_concrete(comp)
        error = lowering_error(fn)
        on = forced(gd)
        if error is not None:
            decision = Decision(False, f'XLA cannot compile it: {error}')
        else:
            decision = Decision(
                True,
                'forced on'
                if on
                else f'matmul, no stateful op, >= {MIN_ELEMENTS} tensor elements per call',
            )
    with _LOCK:
        if len(_CACHE) > _CACHE_SIZE:
            _CACHE.clear()
        _CACHE[key] = decision
    return decision


_FORCED: Dict[Tuple[str, bool], bb.CompiledComputation] = {}


def _force_one(comp: bb.CompiledComputation, on: bool) -> bb.CompiledComputation:
    key = (comp.fingerprint, on)
    out = _FORCED.get(key)
    if out is None:
        out = comp if forced(_graph_def(comp)) is not None else with_jit_compile(comp, on)
        with _LOCK:
            if len(_FORCED) > _CACHE_SIZE:
                _FORCED.clear()
            _FORCED[key] = out
    return out


#: (id of a root, on) -> (the root, its forced tree): a context forces the same computation on
#: every call; the root is held, so its id is not reused while the entry lives.
_FORCED_TREES: Dict[Tuple[int, bool], Tuple[Any, Any]] = {}


def force_tree(comp: bb.ComputationBuildingBlock, on: bool) -> bb.ComputationBuildingBlock:
    """`comp` with every TF computation in it forced to `on`, except those forced already
    (per computation: the more specific choice wins). Remembered per `comp`."""
    hit = _FORCED_TREES.get((id(comp), on))
    if hit is not None and hit[0] is comp:
        return hit[1]
    out = _force(comp, on)
    with _LOCK:
        if len(_FORCED_TREES) > _CACHE_SIZE:
            _FORCED_TREES.clear()
        _FORCED_TREES[(id(comp), on)] = (comp, out)
    return out


def _force(comp: bb.ComputationBuildingBlock, on: bool) -> bb.ComputationBuildingBlock:
    if isinstance(comp, bb.CompiledComputation):
        return _force_one(comp, on)
    return _map_children(comp, lambda c: _force(c, on))


def _map_children(comp: bb.ComputationBuildingBlock, f: Any) -> bb.ComputationBuildingBlock:
    """`comp` with `f` applied to its children (itself when none changed)."""
    if isinstance(comp, bb.Selection):
        src = f(comp.source)
        return comp if src is comp.source else bb.Selection(src, index=comp.index)
    if isinstance(comp, bb.Struct):
        elems = [(n, f(e)) for n, e in comp.elements]
        if all(e is o for (_, e), (_, o) in zip(elems, comp.elements)):
            return comp
        return bb.Struct(elems, container=comp.type_signature.container)
    if isinstance(comp, bb.Call):
        fn = f(comp.fn)
        arg = None if comp.arg is None else f(comp.arg)
        return comp if fn is comp.fn and arg is comp.arg else bb.Call(fn, arg)
    if isinstance(comp, bb.Lambda):
        body = f(comp.result)
        return (
            comp
            if body is comp.result
            else bb.Lambda(comp.parameter_name, comp.parameter_type, body)
        )
    if isinstance(comp, bb.Block):
        locals_ = [(n, f(v)) for n, v in comp.locals]
        result = f(comp.result)
        if result is comp.result and all(v is o for (_, v), (_, o) in zip(locals_, comp.locals)):
            return comp
        return bb.Block(locals_, result)
    return comp


def report(comp: Any) -> Dict[str, Dict[str, Any]]:
    """Per TF computation in `comp` (a computation or building block): its `Decision`.

    Keys: ``name#fingerprint-prefix``; values: ``{'compiled': bool, 'reason': str}``.
    """
    root = comp if isinstance(comp, bb.ComputationBuildingBlock) else comp.to_building_block()
    out: Dict[str, Dict[str, Any]] = {}

    def walk(c: bb.ComputationBuildingBlock) -> None:
        if isinstance(c, bb.CompiledComputation):
            out[f'{c.name or "tf"}#{c.graph.fingerprint[:8]}'] = decide(c).as_dict()
        for child in c.children():
            walk(child)

    walk(root)
    return out
