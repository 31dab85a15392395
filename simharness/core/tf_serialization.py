"""Traces Python functions into serialized TF graphs (`CompiledComputation`).

The function runs once in a fresh `tf.Graph` with one placeholder per
parameter leaf (a variant placeholder for each sequence, turned back into a
`tf.data.Dataset`). Its result leaves become named identity tensors. The
graph is stored as `GraphDef` bytes plus the input and output tensor names,
so that any process can run it without the user's Python code.

State (`tf.Variable`s, Keras weights, `tf.lookup` tables) lives inside one
call, as in TFF (whose runtime runs a computation's initializer before each
call and clears its resource container after): the function is traced under
automatic control dependencies (as in `tf.function`), so that initializers,
assignments and reads run in program order and every stateful op runs before
the results; then each variable handle and table of the graph becomes an
anonymous resource, created afresh by every execution and freed with it. A
`tf_computation` thus stays a pure function (``v = tf.Variable(1.0);
v.assign_add(x)`` gives ``1 + x`` on every call), concurrent calls share no
state, and the graph needs no separate initializer.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import re
import threading
from typing import Any, Callable, List, Optional, Tuple, cast

import attrs
import numpy as np
import tensorflow as tf

from tensorflow.core.framework import graph_pb2

# tf.function's automatic control dependencies, on a plain graph (no public API)
from tensorflow.python.framework import auto_control_deps
from tensorflow.python.util import _tf_stack, tf_stack

from simharness.core import determinism
from simharness.core import building_blocks as bb
from simharness.core import types as T
from simharness.core.structure import Struct, call_unpacked, from_container
from simharness.errors import SimharnessTypeError


def tf_dtype(dtype: np.dtype) -> tf.DType:
    if dtype == np.dtype(object):
        return tf.string
    return tf.as_dtype(dtype)


def element_spec_for(t: T.Type) -> Any:
    """A `tf.data` element structure (TensorSpecs in containers) for type `t`."""
    return _element_structure(t, lambda leaf: tf.TensorSpec(leaf.shape, tf_dtype(leaf.dtype)))


def _element_structure(t: T.Type, leaf_fn: Callable[[T.TensorType], object]) -> object:
    """`t`'s structure in `tf.data`'s containers, `leaf_fn` of each tensor type in `t`'s order."""
    if isinstance(t, T.TensorType):
        return leaf_fn(t)
    if isinstance(t, T.StructType):
        elems = [_element_structure(e, leaf_fn) for e in t]
        names = t.names
        c: Any = t.container  # a user class: its constructor is not typed
        if c is not None:
            if T.is_namedtuple_class(c):
                return c(*elems)
            if attrs.has(c):
                # an attrs container's element names are its field names, all str
                return c(**dict(zip(cast(Tuple[str, ...], names), elems)))
            if issubclass(c, collections.abc.Mapping):
                return (
                    collections.OrderedDict(zip(names, elems))
                    if c is not dict
                    else dict(zip(names, elems))
                )
            if issubclass(c, list):
                return tuple(elems)  # tf.data has no list structure
            if issubclass(c, tuple):
                return tuple(elems)
        if names and all(n is not None for n in names):
            return collections.OrderedDict(zip(names, elems))
        return tuple(elems)
    raise SimharnessTypeError(f'{t} cannot be an element of a sequence')


def _to_python_struct(value: Any, t: T.Type) -> Any:
    """Repackages flat-built Structs into the container the user expects."""
    if not isinstance(t, T.StructType):
        return value
    elems = [_to_python_struct(v, e) for v, e in zip(value, t)]
    c: Any = t.container  # a user class: its constructor is not typed
    if c is not None:
        if T.is_namedtuple_class(c):
            return c(*elems)
        if attrs.has(c):
            # an attrs container's element names are its field names, all str
            return c(**dict(zip(cast(Tuple[str, ...], t.names), elems)))
        if issubclass(c, collections.abc.Mapping):
            try:
                return c(zip(t.names, elems))
            except TypeError:
                return dict(zip(t.names, elems))
        if issubclass(c, (list, tuple)):
            return c(elems)
    return Struct(zip(t.names, elems))


def _placeholders(t: T.Type, counter: List[int], inputs: List[tf.Tensor]) -> Any:
    if isinstance(t, T.TensorType):
        ph = tf.compat.v1.placeholder(tf_dtype(t.dtype), t.shape, name=f'arg_{counter[0]}')
        counter[0] += 1
        inputs.append(ph)
        return ph
    if isinstance(t, T.SequenceType):
        ph = tf.compat.v1.placeholder(tf.variant, (), name=f'arg_{counter[0]}')
        counter[0] += 1
        inputs.append(ph)
        return tf.data.experimental.from_variant(ph, element_spec_for(t.element))
    if isinstance(t, T.StructType):
        return Struct((n, _placeholders(e, counter, inputs)) for n, e in t.items())
    raise SimharnessTypeError(
        f'a tf_computation cannot take a parameter of type {t}; expected '
        'tensors, structs and sequences'
    )


def _is_dataset(x: Any) -> bool:
    return isinstance(x, tf.data.Dataset)


def _result_type_and_leaves(result: Any) -> Tuple[T.Type, List[Any]]:
    """Flattens a traced result into (type, leaves); datasets become variants."""
    if _is_dataset(result):
        elem = T.from_tf_structure(result.element_spec)
        return T.SequenceType(elem), [tf.data.experimental.to_variant(result)]
    if isinstance(result, Struct):
        items = result.items()
        container = None
    elif T.is_namedtuple(result):
        items = [(f, getattr(result, f)) for f in result._fields]
        container = type(result)
    elif attrs.has(type(result)):
        items = [(a.name, getattr(result, a.name)) for a in attrs.fields(type(result))]
        container = type(result)
    elif isinstance(result, collections.abc.Mapping):
        items = [(str(k), v) for k, v in result.items()]
        container = type(result)
    elif isinstance(result, (list, tuple)):
        items = [(None, v) for v in result]
        container = type(result)
    elif isinstance(result, tf.RaggedTensor):
        # TFF's form of a ragged result: <flat_values, nested_row_splits=<row splits...>>
        items = [
            ('flat_values', result.flat_values),
            ('nested_row_splits', tuple(result.nested_row_splits)),
        ]
        container = None
    elif isinstance(result, tf.sparse.SparseTensor):
        # TFF's form of a sparse result: <indices, values, dense_shape>
        items = [
            ('indices', result.indices),
            ('values', result.values),
            ('dense_shape', result.dense_shape),
        ]
        container = None
    else:
        if isinstance(result, tf.Variable):
            result = tf.identity(result)
        try:
            t = tf.convert_to_tensor(result)
        except (TypeError, ValueError) as e:
            raise SimharnessTypeError(
                f'a tf_computation returned {result!r} ({type(result).__name__}); expected '
                'tensors, datasets or containers of these'
            ) from e
        return T.TensorType(t.dtype, t.shape), [t]
    types, leaves = [], []
    for name, v in items:
        t, l = _result_type_and_leaves(v)
        types.append((name, t))
        leaves.extend(l)
    return T.StructType(types, container=container), leaves


def call_with_param(fn: Callable, param_type: Optional[T.Type], arg: Any, unpack: bool) -> Any:
    if param_type is None:
        return fn()
    if unpack:
        # unpack is only set for a struct parameter (see computation._param_type_and_unpack)
        st = cast(T.StructType, param_type)
        return call_unpacked(fn, st, [_to_python_struct(v, t) for v, t in zip(arg, st)])
    return fn(_to_python_struct(arg, param_type))


#: Ops creating a named (shared) resource -> the op creating the same resource
#: anonymously: a fresh one per execution, owned by its handle.
_ANONYMOUS_RESOURCE_OPS = {
    'HashTableV2': 'AnonymousHashTable',
    'MutableHashTableV2': 'AnonymousMutableHashTable',
    'MutableHashTableOfTensorsV2': 'AnonymousMutableHashTableOfTensors',
    'MutableDenseHashTableV2': 'AnonymousMutableDenseHashTable',
}
#: `shared_name` that makes a `VarHandleOp` create a fresh variable per
#: execution (`ResourceHandle::ANONYMOUS_NAME`, as eager variables use).
_ANONYMOUS_NAME = b'cd2c89b7-88b7-44c8-ad83-06c2a9158347'
_NAMED_RESOURCE_ATTRS = ('container', 'shared_name', 'use_node_name_sharing')


def _state_per_call(nodes: Any) -> None:
    """Makes the variables and tables created by `nodes` anonymous (per execution)."""
    for node in nodes:
        if node.op == 'VarHandleOp':
            node.attr['shared_name'].s = _ANONYMOUS_NAME
        elif node.op in _ANONYMOUS_RESOURCE_OPS:
            node.op = _ANONYMOUS_RESOURCE_OPS[node.op]
            for a in _NAMED_RESOURCE_ATTRS:
                if a in node.attr:
                    del node.attr[a]


#: Seeded stateful random ops -> (their stateless op, the stateful op's inputs in the
#: stateless op's order with 'seed' where the seed goes, {stateless attr: stateful attr}).
_STATELESS_RANDOM = {
    'RandomStandardNormal': (
        'StatelessRandomNormal',
        ('shape', 'seed'),
        {'dtype': 'dtype', 'T': 'T'},
    ),
    'RandomUniform': ('StatelessRandomUniform', ('shape', 'seed'), {'dtype': 'dtype', 'T': 'T'}),
    'TruncatedNormal': (
        'StatelessTruncatedNormal',
        ('shape', 'seed'),
        {'dtype': 'dtype', 'T': 'T'},
    ),
    'RandomUniformInt': (
        'StatelessRandomUniformInt',
        ('shape', 'seed', 'minval', 'maxval'),
        {'dtype': 'Tout', 'T': 'T'},
    ),
    'Multinomial': (
        'StatelessMultinomial',
        ('logits', 'num_samples', 'seed'),
        {'T': 'T', 'output_dtype': 'output_dtype'},
    ),
}
#: The stateful op's data inputs, in order.
_STATEFUL_INPUTS = {
    'RandomStandardNormal': ('shape',),
    'RandomUniform': ('shape',),
    'TruncatedNormal': ('shape',),
    'RandomUniformInt': ('shape', 'minval', 'maxval'),
    'Multinomial': ('logits', 'num_samples'),
}


def _seeded_random_stateless(nodes: Any, in_function: bool) -> list:
    """Turns seeded stateful random ops into their stateless twins; the seed constants to add.

    TFF's semantics (its random noise tutorial): an op given a seed (an op
    seed, or a graph seed set inside the computation) draws the same values on
    every call and every client, as a fresh TF1 session of the graph does;
    unseeded ops (seed = seed2 = 0) draw fresh values every time. An eager
    runtime keeps a stateful kernel alive between calls, so a seeded op would
    go on drawing new values (and which ones would depend on how clients are
    spread over threads and workers). The stateless op with the seed pair
    ``(seed, seed2)`` draws the same values every time, on every stack.
    Gamma, Poisson and shuffle ops have no stateless twin of the same shape
    semantics and are left as they are.

    Returns:
      the `NodeDef`s of the seed constants the rewritten nodes now read.
    """
    added = []
    for node in nodes:
        spec = _STATELESS_RANDOM.get(node.op)
        if spec is None:
            continue
        seed, seed2 = node.attr['seed'].i, node.attr['seed2'].i
        if seed == 0 and seed2 == 0:
            continue  # unseeded: fresh values on every run, as in TFF
        op, order, attr_map = spec
        const = tf.compat.v1.NodeDef()
        const.name = f'{node.name}/simharness_seed'
        const.op = 'Const'
        const.attr['dtype'].type = tf.int64.as_datatype_enum
        const.attr['value'].tensor.CopyFrom(
            tf.make_tensor_proto(np.array([seed, seed2], dtype=np.int64))
        )
        if node.device:
            const.device = node.device
        added.append(const)
        data = [i for i in node.input if not i.startswith('^')]
        control = [i for i in node.input if i.startswith('^')]
        by_name = dict(zip(_STATEFUL_INPUTS[node.op], data))
        by_name['seed'] = f'{const.name}:output:0' if in_function else const.name
        attrs_ = {new: node.attr[old] for new, old in attr_map.items()}
        node.op = op
        del node.input[:]
        node.input.extend([by_name[n] for n in order] + control)
        for key in list(node.attr):
            del node.attr[key]
        for key, value in attrs_.items():
            node.attr[key].CopyFrom(value)
        node.attr['Tseed'].type = tf.int64.as_datatype_enum
    return added


def _called_functions(f: Any) -> set:
    """The names of the functions the body of the FunctionDef `f` refers to."""
    out = set()
    for node in f.node_def:
        out.add(node.op)
        for attr in node.attr.values():
            if attr.HasField('func'):
                out.add(attr.func.name)
            if attr.HasField('list'):
                out.update(fn.name for fn in attr.list.func)
    return out


def _rename_callers(graph_def: Any, renamed: dict) -> None:
    """Adds to `renamed` every function that calls a renamed one (its body changes too)."""
    changed = True
    while changed:
        changed = False
        for f in graph_def.library.function:
            name = f.signature.name
            if name in renamed.values() or name in renamed:
                continue
            if _called_functions(f) & set(renamed):
                renamed[name] = name + '_simharness_stateless'
                f.signature.name = renamed[name]
                changed = True


def _rename_functions(graph_def: Any, renamed: dict) -> None:
    """Points every reference to a function of `renamed` (old -> new name) at its new name."""
    nodes = list(graph_def.node)
    for f in graph_def.library.function:
        nodes.extend(f.node_def)
    _rename_in_nodes(nodes, renamed)
    for g in graph_def.library.gradient:
        if g.function_name in renamed:
            g.function_name = renamed[g.function_name]
        if g.gradient_func in renamed:
            g.gradient_func = renamed[g.gradient_func]


_UID_SUFFIX = re.compile(r'(_\d+)+$')


def _canonical_function_names(graph_def: Any) -> None:
    """Names each function of the graph's library after its content.

    TF names a traced function after a process-wide counter
    (``while_body_1234``), so the same computation traced by two processes
    (two drivers of one executor service) gave two graphs, two fingerprints,
    two entries of a service's function cache and two definitions in its TF
    runtime: memory that grew with every driver. Renamed bottom-up (a
    function after the functions it calls) to ``<name without counter>_<hash
    of its body>``, the same computation gives the same bytes in every
    process; two functions with one name have one body, so importing never
    meets a conflicting definition.
    """
    funcs = {f.signature.name: f for f in graph_def.library.function}
    if not funcs:
        return
    renamed: dict = {}
    done: set = set()

    def visit(name: str, path: tuple) -> None:
        if name in done or name in path:  # a function cannot call itself in TF; be safe
            return
        f = funcs[name]
        for callee in sorted(_called_functions(f) & set(funcs)):
            visit(callee, path + (name,))
        _rename_in_nodes(f.node_def, renamed)
        body = type(f)()
        body.CopyFrom(f)
        body.signature.name = ''
        digest = hashlib.sha256(body.SerializeToString(deterministic=True)).hexdigest()[:16]
        renamed[name] = f'{_UID_SUFFIX.sub("", name) or "fn"}_{digest}'
        f.signature.name = renamed[name]
        done.add(name)

    for name in sorted(funcs):
        visit(name, ())
    _rename_functions(graph_def, renamed)
    # the library in name order: the bytes do not depend on the order of tracing
    ordered = sorted(graph_def.library.function, key=lambda f: f.signature.name)
    copies = [type(f)() for f in ordered]
    for c, f in zip(copies, ordered):
        c.CopyFrom(f)
    del graph_def.library.function[:]
    graph_def.library.function.extend(copies)


def _rename_in_nodes(nodes: Any, renamed: dict) -> None:
    """Points the function references of `nodes` at their new names (`renamed`: old -> new)."""
    for node in nodes:
        if node.op in renamed:
            node.op = renamed[node.op]
        for attr in node.attr.values():
            if attr.HasField('func') and attr.func.name in renamed:
                attr.func.name = renamed[attr.func.name]
            if attr.HasField('list'):
                for fn in attr.list.func:
                    if fn.name in renamed:
                        fn.name = renamed[fn.name]


def _finish_graph_def(graph_def: Any, input_ops: set, output_ops: Optional[set] = None) -> None:
    """Rewrites a traced graph for import: state per call, seeded random ops stateless
    (`_seeded_random_stateless`), no control edges from inputs, no variable that nothing
    reads (`_drop_unread_variables`, when `output_ops` are given).

    The importer feeds the inputs through ``input_map``, which remaps data
    edges only: a control edge from a placeholder (``tf.control_dependencies``
    on an argument, or on Keras' ``assign`` that returns its argument) would
    run the unfed placeholder. An input is ready before any op, so the edge
    is dropped.
    """
    for node in graph_def.node:
        if any(i.startswith('^') and i[1:] in input_ops for i in node.input):
            kept = [i for i in node.input if not (i.startswith('^') and i[1:] in input_ops)]
            del node.input[:]
            node.input.extend(kept)
    _drop_what_needs_an_unfed_placeholder(graph_def, input_ops, output_ops or set())
    _state_per_call(graph_def.node)
    graph_def.node.extend(_seeded_random_stateless(graph_def.node, in_function=False))
    _drop_unread_variables(graph_def, input_ops, output_ops)
    renamed = {}
    for f in graph_def.library.function:
        _state_per_call(f.node_def)
        seeds = _seeded_random_stateless(f.node_def, in_function=True)
        if seeds:
            f.node_def.extend(seeds)
            # A new name: the process that traced the graph may hold the original
            # function under its name, and TF refuses two definitions of one name.
            renamed[f.signature.name] = f.signature.name + '_simharness_stateless'
            f.signature.name = renamed[f.signature.name]
    if renamed:
        _rename_callers(graph_def, renamed)
        _rename_functions(graph_def, renamed)
    _canonical_function_names(graph_def)


def _drop_what_needs_an_unfed_placeholder(
    graph_def: graph_pb2.GraphDef, input_ops: set, output_ops: set
) -> None:
    """Removes the ops that take, by a data edge, a placeholder which is not an input.

    No one feeds such a placeholder: Keras 2's ``set_weights`` (``tf_keras``) in a graph
    makes one per weight, assigns it to the variable and runs the assignments in its own
    session while the computation is traced. TFF's graphs never run those assignments
    (its results do not depend on them, and TFF adds no control edges): a model's
    ``set_weights`` in a ``model_fn`` leaves TFF's initial weights those of the
    initializers. Here the automatic control dependencies make every stateful op an
    input of the results, so they would run and fail ("You must feed a value for
    placeholder tensor"). They are dropped instead, as TFF never runs them: a control
    edge to one is replaced by the control edges of what it waited for, so that the ops
    around it keep their order. A result that needs such a placeholder is left as it is
    (TensorFlow's error names the placeholder).
    """
    by_name = {n.name: n for n in graph_def.node}
    foreign = [n.name for n in graph_def.node if n.op == 'Placeholder' and n.name not in input_ops]
    if not foreign:
        return
    takers: dict = collections.defaultdict(list)  # node name -> nodes taking it by a data edge
    for node in graph_def.node:
        for ref in node.input:
            if not ref.startswith('^'):
                takers[ref.split(':')[0]].append(node.name)
    tainted, todo = set(), list(foreign)
    while todo:
        name = todo.pop()
        if name not in tainted:
            tainted.add(name)
            todo.extend(takers.get(name, ()))
    if tainted & output_ops:
        return
    waits: dict = {}  # tainted node -> the untainted nodes it waited for, as control inputs

    def waited_for(name: str) -> List[str]:
        if name not in waits:
            waits[name] = []  # a cycle (none in a graph) ends here
            sources = (ref.lstrip('^').split(':')[0] for ref in by_name[name].input)
            refs = (r for s in sources for r in (waited_for(s) if s in tainted else ['^' + s]))
            # an input is ready before any op; a control edge from it would run it unfed
            waits[name] = [r for r in dict.fromkeys(refs) if r[1:] not in input_ops]
        return waits[name]

    kept_nodes = []
    for node in graph_def.node:
        if node.name in tainted:
            continue
        if any(r.startswith('^') and r[1:] in tainted for r in node.input):
            data = [r for r in node.input if not r.startswith('^')]  # repeats kept: x + x
            controls = dict.fromkeys(
                c
                for r in node.input
                if r.startswith('^')
                for c in (waited_for(r[1:]) if r[1:] in tainted else [r])
            )
            del node.input[:]
            node.input.extend(data + list(controls))
        kept_nodes.append(node)
    del graph_def.node[:]
    graph_def.node.extend(kept_nodes)


def _drop_unread_variables(graph_def: Any, input_ops: set, output_ops: Optional[set]) -> None:
    """Removes the variables of the top-level graph that nothing reads, with their writes.

    Every variable is created afresh by each execution (`_state_per_call`), so one whose
    value nothing reads (only initialized or assigned, e.g. the weights of a Keras model
    that the computation runs through ``stateless_call``) has no effect a result can see.
    Removing it lets the rest run where a variable cannot (XLA, `simharness.core.xla`).
    The graph is then pruned to the nodes its inputs and results need, which are the
    nodes that ran anyway: every stateful op is a control input of the results.
    """
    if not output_ops:
        return
    users: dict = collections.defaultdict(list)  # node name -> [(user, via a data edge)]
    for node in graph_def.node:
        for ref in node.input:
            users[ref.lstrip('^').split(':')[0]].append((node, not ref.startswith('^')))
    drop = set()
    for node in graph_def.node:
        if node.op != 'VarHandleOp':
            continue
        writes = []
        for user, data in users.get(node.name, ()):
            if not data:
                continue
            if user.op == 'AssignVariableOp' and all(
                r.lstrip('^').split(':')[0] != node.name for r in user.input[1:]
            ):
                writes.append(user.name)
            elif user.op in ('VarIsInitializedOp', 'ReadVariableOp') and not any(
                d for _, d in users.get(user.name, ())
            ):  # a value nothing takes
                writes.append(user.name)
            else:  # read, or handed on (a call, a control-flow op, an identity)
                break
        else:
            drop.add(node.name)
            drop.update(writes)
    if not drop:
        return
    colocated = {f'loc:@{n}'.encode() for n in drop}
    for node in graph_def.node:
        if any(r.startswith('^') and r[1:] in drop for r in node.input):
            kept = [r for r in node.input if not (r.startswith('^') and r[1:] in drop)]
            del node.input[:]
            node.input.extend(kept)
        if '_class' in node.attr and colocated & set(node.attr['_class'].list.s):
            left = [c for c in node.attr['_class'].list.s if c not in colocated]
            del node.attr['_class'].list.s[:]
            node.attr['_class'].list.s.extend(left)
    by_name = {n.name: n for n in graph_def.node if n.name not in drop}
    needed, todo = set(), [n for n in output_ops | input_ops if n in by_name]
    while todo:  # what the results and inputs need, by data and control edges
        name = todo.pop()
        if name not in needed:
            needed.add(name)
            todo.extend(r.lstrip('^').split(':')[0] for r in by_name[name].input)
    kept_nodes = [n for n in graph_def.node if n.name in needed]
    del graph_def.node[:]
    graph_def.node.extend(kept_nodes)


#: An empty op traceback (`tf_stack.StackTrace` of no frame).
_NO_FRAMES = _tf_stack.extract_stack(
    tf_stack.SentinelMapper().internal_map, tf_stack.SentinelFilter().internal_set, 1 << 30
)
_ORIGINAL_EXTRACT_STACK = tf_stack.extract_stack
_TRACEBACKS_LOCK = threading.Lock()
_TRACEBACKS_OFF = 0  # blocks of `_no_op_tracebacks` open (tracing can nest, and run in threads)


def _empty_traceback(stacklevel: int = 1) -> Any:
    return _NO_FRAMES


@contextlib.contextmanager
def _no_op_tracebacks():
    """Within the block, TF records no Python traceback per op it creates.

    TF walks the Python stack for every op it adds to a graph (``tf_stack.extract_stack``
    in ``ops._create_c_op``: 10-25 % of tracing) so that a runtime error can say where the
    op was defined. A traced computation is serialized to a GraphDef and imported again
    where it runs, which keeps no traceback: the walk is wasted. Errors raised while
    tracing are Python exceptions with their own tracebacks, unchanged. Ops created
    meanwhile by other threads get no traceback either (their error messages lose the
    "defined at" lines, nothing else).
    """
    global _TRACEBACKS_OFF
    with _TRACEBACKS_LOCK:
        _TRACEBACKS_OFF += 1
        tf_stack.extract_stack = _empty_traceback
    try:
        yield
    finally:
        with _TRACEBACKS_LOCK:
            _TRACEBACKS_OFF -= 1
            if _TRACEBACKS_OFF == 0:
                tf_stack.extract_stack = _ORIGINAL_EXTRACT_STACK


def serialize_tf_function(
    fn: Callable, param_type: Optional[T.Type], unpack: bool, name: str = ''
) -> bb.CompiledComputation:
    """Traces `fn` with a parameter of `param_type` into a `CompiledComputation`.

    Raises:
      SimharnessTypeError: if the parameter or result types are not supported.
    """
    # Tracing may run TF's first op in this process (gradients, datasets): pin
    # its thread count before, so that driver-side results match the workers'.
    determinism.pin_tensorflow_threads()
    graph = tf.Graph()
    inputs: List[tf.Tensor] = []
    with _no_op_tracebacks(), graph.as_default():
        arg = None if param_type is None else _placeholders(param_type, [0], inputs)
        # Stateful ops run in program order and all before the results (the
        # results are read inside the scope: reads of variables come last).
        with auto_control_deps.AutomaticControlDependencies() as deps:
            result = call_with_param(fn, param_type, arg, unpack)
            if result is None:
                raise SimharnessTypeError(
                    f'tf_computation {name or fn!r} returned None; it must '
                    'return tensors, datasets or containers of these'
                )
            result_type, leaves = _result_type_and_leaves(result)
            leaves = [deps.mark_as_return(t) for t in leaves]
        outputs = [tf.identity(t, name=f'result_{i}') for i, t in enumerate(leaves)]
    # Result leaves may have shapes only known at run time; the type keeps what
    # the graph knows.
    proto = graph.as_graph_def()
    _finish_graph_def(proto, {t.op.name for t in inputs}, {t.op.name for t in outputs})
    graph_def = proto.SerializeToString(deterministic=True)  # maps in key order: one text
    compiled = bb.CompiledComputation(
        bb.TFGraph(graph_def, [t.name for t in inputs], [t.name for t in outputs]),
        T.FunctionType(param_type, result_type),
        name=name,
    )
    return compiled


def constant_computation(value: Any, type_spec: Optional[T.Type] = None) -> bb.CompiledComputation:
    """A no-parameter `CompiledComputation` returning the constant `value`.

    Raises:
      SimharnessTypeError: `value` does not fit `type_spec` (a float for an
        int, an int out of range, a string for a number, another shape).
      SimharnessValueError: without `type_spec`, a Python int beyond int64.
    """

    def check(v, t):  # eagerly, before tracing: errors name the value, not a graph op
        if isinstance(t, T.StructType):
            return Struct((n, check(x, e)) for (n, e), x in zip(t.items(), v))
        if not isinstance(t, T.TensorType):
            raise SimharnessTypeError(
                f'constant {v!r} of type {type(v).__name__} cannot have '
                f'the type {t}; expected a tensor type',
                expected=t,
                actual=type(v),
            )
        return T.check_constant(v, t)

    t = type_spec if type_spec is not None else T.infer_type(value)
    arrays = check(from_container(value, t) if isinstance(t, T.StructType) else value, t)

    def make():
        def build(a, t):
            if isinstance(t, T.StructType):
                return Struct((n, build(x, e)) for (n, e), x in zip(t.items(), a))
            return tf.constant(a, dtype=tf_dtype(t.dtype))

        return build(arrays, t)

    return serialize_tf_function(make, None, False, name='constant')
