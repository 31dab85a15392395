"""Datasets that differ only in their data, read by one traced function per pipeline.

A TFF program that builds its clients' datasets itself (``from_tensor_slices`` per
client, ``ClientData.from_clients_and_tf_fn``, a ``map`` applied to each client's
dataset, as TFF's text tutorial does) hands over datasets whose graphs are all
alike: the same stages and functions, other function names, other source arrays.
A fresh copy of each (TFF's executors rebuild every dataset from its graph on every
call, and so do we: `tf_sequences.fresh_copy`) pays TensorFlow's set-up of every
function of the pipeline again, in a function library of its own: ~30 ms per dataset
for the text tutorial's pipeline, where reading the elements costs ~2 ms.

Here such a graph is split into a *template* (the graph with its source arrays
replaced by placeholders and its functions renamed in a canonical order) and the
*arrays* (the constants its ``TensorSliceDataset`` / ``TensorDataset`` sources
hold). The template is traced once into the two functions a `SlicesPipeline` recipe
has (arrays -> dataset variant, arrays -> every element), so the dataset gets the
same recipe as one built by ``ClientData.preprocess``: a read is one call, and a
worker process receives the arrays and the read function (sent once), not a graph.

Only graphs whose every read of a fresh copy a traced function reproduces are
templated: dataset stages without state other than shuffles (whose seed generators a
dataset made by a call owns, as a rebuilt copy does), static lookup tables (rebuilt
from the graph's own keys and values), no random op in a function (its kernel's
state would carry over between calls), no Python function. And the first dataset of
each template is read both ways, once: a template whose read differs is not used.
"""

from __future__ import annotations

import collections
import hashlib
import threading
from typing import Any, Dict, Iterator, List, Optional, Tuple

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import function_pb2, tensor_pb2

from simharness.core import tf_sequences as tseq
from simharness.core.slices_pipeline import TracedPipeline

__all__ = ['attach_template_recipe', 'template_recipe']

#: Dataset ops whose constant inputs are the client's data.
_SOURCE_OPS = frozenset({'TensorSliceDataset', 'TensorDataset'})
#: Ops of static lookup tables: built from the graph's constants on every read.
_TABLE_OPS = frozenset(
    {
        'HashTableV2',
        'LookupTableImportV2',
        'LookupTableFindV2',
        'LookupTableSizeV2',
        'InitializeTableV2',
    }
)
_SHUFFLES = frozenset(
    {
        'ShuffleDataset',
        'ShuffleDatasetV2',
        'ShuffleDatasetV3',
        'ShuffleAndRepeatDataset',
        'ShuffleAndRepeatDatasetV2',
    }
)
#: Most templates kept (least recently used out first).
MAX_TEMPLATES = 64


class _Split:
    """A dataset graph split into a template and its source arrays."""

    def __init__(
        self, key: bytes, template: bytes, output: str, names: List[str], arrays: List[np.ndarray]
    ):
        self.key, self.template, self.output = key, template, output
        self.names, self.arrays = names, arrays


def _func_names(attr: 'tf.compat.v1.AttrValue') -> Iterator[str]:
    """The function names an ``AttrValue`` refers to."""
    if attr.HasField('func'):
        yield attr.func.name
    elif attr.HasField('list'):
        for f in attr.list.func:
            yield f.name


def _canonical_order(graph_def: 'tf.compat.v1.GraphDef') -> List[str]:
    """The library's function names in the order a walk from the top-level nodes meets
    them (node order, attributes by name, bodies depth first): the same for graphs built
    by the same code, whatever names TF gave the functions."""
    funcs = {f.signature.name: f for f in graph_def.library.function}
    order: List[str] = []
    seen = set()

    def visit_nodes(nodes: Any) -> None:
        for n in nodes:
            refs = [n.op] if n.op in funcs else []
            for k in sorted(n.attr):
                refs.extend(_func_names(n.attr[k]))
            for name in refs:
                if name in funcs and name not in seen:
                    seen.add(name)
                    order.append(name)
                    visit_nodes(funcs[name].node_def)

    visit_nodes(graph_def.node)
    return order


def _rename(graph_def: 'tf.compat.v1.GraphDef', names: Dict[str, str]) -> None:
    """Renames the library's functions (and every reference to them) in place."""

    def fix_attr(attr: 'tf.compat.v1.AttrValue') -> None:
        if attr.HasField('func'):
            attr.func.name = names.get(attr.func.name, attr.func.name)
            for v in attr.func.attr.values():
                fix_attr(v)
        elif attr.HasField('list'):
            for f in attr.list.func:
                f.name = names.get(f.name, f.name)

    def fix_nodes(nodes: Any) -> None:
        for n in nodes:
            if n.op in names:
                n.op = names[n.op]
            for v in n.attr.values():
                fix_attr(v)

    fix_nodes(graph_def.node)
    for f in graph_def.library.function:
        f.signature.name = names.get(f.signature.name, f.signature.name)
        fix_nodes(f.node_def)
    for g in graph_def.library.gradient:
        g.function_name = names.get(g.function_name, g.function_name)
        g.gradient_func = names.get(g.gradient_func, g.gradient_func)


def _templatable(graph_def: 'tf.compat.v1.GraphDef') -> bool:
    """Whether a traced function reads what a fresh copy of the graph reads (see the
    module docstring)."""
    funcs = {f.signature.name for f in graph_def.library.function}
    nodes = list(graph_def.node) + [n for f in graph_def.library.function for n in f.node_def]
    # a shuffle and a static table as in a rebuilt copy; everything else pure
    return all(
        n.op in funcs or n.op in _SHUFFLES or n.op in _TABLE_OPS or tseq.pure_node(n) for n in nodes
    )


def _array(proto: tensor_pb2.TensorProto) -> np.ndarray:
    """A ``TensorProto``'s value (strings too, which `tf.make_ndarray` cannot read from
    packed content)."""
    if proto.dtype == tf.string.as_datatype_enum:
        return tf.io.parse_tensor(proto.SerializeToString(), tf.string).numpy()
    return tf.make_ndarray(proto)


def _split(graph: bytes) -> Optional[_Split]:
    """`graph` (a detached serialized dataset graph) as a template and its arrays, or None
    when it has no source array or is not `_templatable`."""
    graph_def = tf.compat.v1.GraphDef()
    graph_def.ParseFromString(graph)
    if not _templatable(graph_def):
        return None
    retvals = [n for n in graph_def.node if n.op == '_Retval']
    if len(retvals) != 1:
        return None
    output = retvals[0].input[0]
    consts = {n.name: n for n in graph_def.node if n.op == 'Const'}
    sources: List[str] = []
    for n in graph_def.node:
        if n.op in _SOURCE_OPS:
            for inp in n.input:
                name = inp.split(':')[0]
                if not inp.startswith('^') and name in consts and name not in sources:
                    sources.append(name)
    consumers: Dict[str, int] = collections.Counter(
        i.split(':')[0] for n in graph_def.node for i in n.input
    )
    # a source array used elsewhere too (as a size, say) stays a constant of the template
    sources = [
        s
        for s in sources
        if consumers[s] == 1 and consts[s].attr['dtype'].type != tf.resource.as_datatype_enum
    ]
    if not sources:
        return None
    arrays = [_array(consts[s].attr['value'].tensor) for s in sources]
    if any(a.ndim < 1 for a in arrays):
        return None
    # a shuffle's seed generator, which its graph names: a new one per dataset, as
    # Python's own ``shuffle`` makes (a rebuilt copy makes its own too)
    for n in graph_def.node:
        if n.op in _SHUFFLES:
            for inp in n.input:
                c = consts.get(inp.split(':')[0])
                if (
                    c is not None
                    and consumers[c.name] == 1
                    and c.attr['dtype'].type == tf.resource.as_datatype_enum
                ):
                    c.op = 'DummySeedGenerator'
                    c.ClearField('attr')
    kept = [n for n in graph_def.node if n.op != '_Retval']
    del graph_def.node[:]
    graph_def.node.extend(kept)
    for n in graph_def.node:
        if n.name in sources:
            dtype = n.attr['dtype'].type
            n.op = 'Placeholder'
            n.ClearField('attr')
            n.attr['dtype'].type = dtype
            n.attr['shape'].shape.unknown_rank = True
    # names and debugging labels TF numbers per process (functions, tables, the datasets'
    # metadata) are what differs between the graphs of two clients: made canonical
    for n in list(graph_def.node) + [n for f in graph_def.library.function for n in f.node_def]:
        if 'metadata' in n.attr:
            n.attr['metadata'].s = b''
    order = _canonical_order(graph_def)
    _rename(graph_def, {name: f'F{i}' for i, name in enumerate(order)})
    for f in graph_def.library.function:
        _canonical_function(f)
    functions = sorted(
        graph_def.library.function,
        key=lambda f: int(f.signature.name[1:]) if f.signature.name[1:].isdigit() else -1,
    )
    del graph_def.library.function[:]
    graph_def.library.function.extend(functions)
    nodes = {n.name: f'N{i}' for i, n in enumerate(graph_def.node)}
    _rename_nodes(graph_def, nodes)
    key = hashlib.sha1(graph_def.SerializeToString(deterministic=True)).digest()
    # names of this template's own: no two templates share a function or a table
    tag = key.hex()[:16]
    _rename(graph_def, {f'F{i}': f'__simharness_dataset_{tag}_{i}' for i in range(len(order))})
    final = {f'N{i}': f's{tag}/N{i}' for i in range(len(nodes))}
    _rename_nodes(graph_def, final)
    return _Split(
        key,
        graph_def.SerializeToString(deterministic=True),
        _renamed_input(_renamed_input(output, nodes), final),
        [final[nodes[s]] for s in sources],
        arrays,
    )


def _canonical_function(fdef: function_pb2.FunctionDef) -> None:
    """Names inside a ``FunctionDef`` (arguments, results, nodes) made canonical in place:
    TF's tracing puts counters in them (``map_while_cond_451___redundant_placeholder0``)."""
    sig = fdef.signature
    args = {a.name: f'a{i}' for i, a in enumerate(sig.input_arg)}
    outs = {a.name: f'o{i}' for i, a in enumerate(sig.output_arg)}
    controls = {name: f'c{i}' for i, name in enumerate(sig.control_output)}
    nodes = {n.name: f'n{i}' for i, n in enumerate(fdef.node_def)}

    def tensor(name: str) -> str:
        control = name.startswith('^')
        parts = name.lstrip('^').split(':')
        parts[0] = args.get(parts[0]) or nodes.get(parts[0], parts[0])
        return ('^' if control else '') + ':'.join(parts)

    for a in sig.input_arg:
        a.name = args[a.name]
    for a in sig.output_arg:
        a.name = outs[a.name]
    sig.control_output[:] = [controls[c] for c in sig.control_output]
    for n in fdef.node_def:
        n.name = nodes[n.name]
        n.input[:] = [tensor(i) for i in n.input]
        if '_class' in n.attr:  # colocation hints, by node name
            del n.attr['_class']
    ret = {outs.get(k, k): tensor(v) for k, v in fdef.ret.items()}
    fdef.ret.clear()
    fdef.ret.update(ret)
    control_ret = {controls.get(k, k): nodes.get(v, v) for k, v in fdef.control_ret.items()}
    fdef.control_ret.clear()
    fdef.control_ret.update(control_ret)
    for attrs in fdef.arg_attr.values():
        if '_user_specified_name' in attrs.attr:
            del attrs.attr['_user_specified_name']


def _renamed_input(name: str, names: Dict[str, str]) -> str:
    """A node input (``node``, ``node:k`` or ``^node``) with its node renamed."""
    control = name.startswith('^')
    node, sep, port = name.lstrip('^').partition(':')
    return ('^' if control else '') + names.get(node, node) + sep + port


def _rename_nodes(graph_def: 'tf.compat.v1.GraphDef', names: Dict[str, str]) -> None:
    """Renames the top-level nodes (and the inputs naming them) in place."""
    for n in graph_def.node:
        n.name = names.get(n.name, n.name)
        n.input[:] = [_renamed_input(i, names) for i in n.input]


_LOCK = threading.Lock()
#: template key -> its traced recipe, or None (not readable by a template)
_TRACED: 'collections.OrderedDict[bytes, Optional[TracedPipeline]]' = collections.OrderedDict()


def _trace(split: _Split, spec: Any, repeatable: bool) -> Optional[TracedPipeline]:
    """The template of `split` traced: (arrays -> variant, arrays -> elements); None when
    it does not trace, or does not read as a fresh copy of the graph does."""
    sig = [tf.TensorSpec([None] + list(a.shape[1:]), tf.as_dtype(a.dtype)) for a in split.arrays]
    names, template, output = list(split.names), split.template, split.output

    def dataset(*tensors: Any) -> Any:
        graph_def = tf.compat.v1.GraphDef()
        graph_def.ParseFromString(template)
        [variant] = tf.graph_util.import_graph_def(
            graph_def,
            input_map={f'{n}:0': x for n, x in zip(names, tensors)},
            return_elements=[output if ':' in output else f'{output}:0'],
            name='',
        )
        return tf.data.experimental.from_variant(variant, spec)

    if not tseq.readable_as_batches(spec):
        return None
    # wrap_function, not tf.function: TF's automatic control dependencies loop forever over
    # an imported table handle that the graph both writes (its import) and reads (lookups)
    try:
        read = tf.compat.v1.wrap_function(lambda *xs: tseq.read_all(dataset(*xs)), sig)
    except (TypeError, ValueError, tf.errors.OpError):
        return None
    # the dataset itself is traced when first asked for (a dataset that is only read, as on
    # a thread stack, never is): the import that read traced, so it traces too
    return TracedPipeline(
        lambda: tf.compat.v1.wrap_function(
            lambda *xs: tf.data.experimental.to_variant(dataset(*xs)), sig
        ),
        spec,
        read,
        repeatable,
        sig,
    )


def _same_reads(traced: TracedPipeline, arrays: List[np.ndarray], graph: bytes, spec: Any) -> bool:
    """Whether the template reads what a fresh copy of `graph` reads (checked once)."""
    try:
        mine = traced.read_all(arrays)
        copy = tf.data.experimental.from_variant(tf.raw_ops.DatasetFromGraph(graph_def=graph), spec)
        theirs = tseq.read_all_eagerly(copy)
    except (tf.errors.OpError, TypeError, ValueError):
        return False
    a = [np.asarray(x) for x in tf.nest.flatten(mine)]
    b = [np.asarray(x) for x in tf.nest.flatten(theirs)]
    return len(a) == len(b) and all(
        x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y) for x, y in zip(a, b)
    )


def template_recipe(ds: Any, graph: bytes) -> Optional[Tuple[TracedPipeline, List[np.ndarray]]]:
    """``(traced pipeline, the dataset's arrays)`` for `ds` (whose detached serialized
    graph is `graph`), the recipe `tf_sequences` reads a `SlicesPipeline`'s datasets by;
    None when its graph cannot be read by a template."""
    split = _split(graph)
    if split is None:
        return None
    spec = ds.element_spec
    key = split.key + repr(spec).encode()
    with _LOCK:
        if key in _TRACED:
            _TRACED.move_to_end(key)
            traced = _TRACED[key]
            return None if traced is None else (traced, split.arrays)
    traced = _trace(split, spec, tseq.graph_is_repeatable(graph))
    if traced is not None and not _same_reads(traced, split.arrays, graph, spec):
        traced = None
    with _LOCK:
        _TRACED[key] = traced
        while len(_TRACED) > MAX_TEMPLATES:
            _TRACED.popitem(last=False)
    return None if traced is None else (traced, split.arrays)


def attach_template_recipe(ds: Any) -> None:
    """Gives `ds` the recipe of its graph's template (`template_recipe`), once: a later
    read of a fresh copy (`tf_sequences.read_fresh`) and its trip to a worker
    (`runtime.datasets.dataset_to_wire`) use it. Nothing for a dataset that has a recipe
    (``ClientData.preprocess`` made it), has no graph, or is infinite."""
    if not isinstance(ds, tf.data.Dataset) or tseq.recipe_known(ds):
        return
    recipe = None
    if int(ds.cardinality()) != int(tf.data.INFINITE_CARDINALITY):
        graph = tseq.serialized_graph(ds)
        if graph is not None:
            recipe = template_recipe(ds, graph)
    tseq.keep_recipe(ds, recipe)
