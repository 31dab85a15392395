"""Lowering `tf.data` loops over in-memory client data into plain tensor loops.

A TFF client update iterates its dataset with ``dataset.reduce(...)`` or
``for batch in dataset:`` (which autograph turns into ``ScanDataset`` +
``ReduceDataset``). Run through `tf.data`, every call instantiates the
dataset functions and optimizes their graphs again: about 20 ms per client,
whatever the number of batches, where the same steps on tensors take 1 ms.

When a client's dataset is known to be in-memory tensors sliced into rows or
batches (`simharness.core.sequences.TensorBatches`), this module rewrites the
serialized graph of the computation (a pure GraphDef transformation, so it
applies to any user's ``tf_computation``): the dataset parameter becomes its
component tensors, and each ``ReduceDataset`` over it (after any chain of
``MapDataset``, ``ParallelMapDatasetV2``, ``ScanDataset``, ``FilterDataset``
and ``TakeWhileDataset``) becomes a call of a generated function that runs a
`tf.while_loop` over the batch index, slicing the components and calling the
user's own (unchanged) transformation and reduce functions on each element;
a source of at most `UNROLL_LIMIT` elements gets straight-line calls instead
of the loop (its lowered function is specialized to its number of elements)
unless a filter, take or skip may drop elements.
The dataset may reach the loop through ``Identity`` ops and through calls of
`tf.function`s (each such function is specialized to take the components).

The numbers are the same: the user's functions run on the same elements in
the same order. Anything else that touches the dataset (an iterator, a
``take``, returning it, a control-flow op carrying it) makes the rewrite
refuse (`NotLowerable`); the caller then runs the original graph on a
`tf.data.Dataset` built from the same tensors.
"""

from __future__ import annotations

import copy
import hashlib
from typing import Any, Dict, List, Optional, Sequence, Tuple

import tensorflow as tf
from tensorflow.core.framework import function_pb2, graph_pb2, types_pb2

__all__ = ['NotLowerable', 'SourceSpec', 'UNROLL_LIMIT', 'lower_graph']

_CALL_OPS = frozenset({'StatefulPartitionedCall', 'PartitionedCall'})
_IDENTITY_OPS = frozenset({'Identity'})
_MAP_OPS = frozenset({'MapDataset', 'ParallelMapDatasetV2', 'ParallelMapDataset'})
_PREDICATE_OPS = frozenset({'FilterDataset', 'TakeWhileDataset'})
_COUNT_OPS = {'TakeDataset': 'take', 'SkipDataset': 'skip'}
# Inputs of these ops after the dataset and the function's captured arguments
# that are not function arguments (``num_parallel_calls``).
_TRAILING_NON_ARGS = {'ParallelMapDatasetV2': 1, 'ParallelMapDataset': 1}


class NotLowerable(Exception):
    """The graph uses the dataset in a way the rewrite does not cover."""


#: A source of at most this many elements is lowered for its number of
#: elements: the loop over them is unrolled into straight-line calls of the
#: user's functions (a `tf.while_loop` costs per iteration: the reference
#: FedAvg client update of a `functional_model_from_keras` model, 5 batches,
#: takes 37 instead of 47 ms of CPU per 25 clients). It depends on the
#: client's own sequence, so a client runs the same graph on every stack.
#: Longer sources share one `tf.while_loop` whatever their length.
#: Each distinct count is a function of its own, traced (and compiled by XLA when
#: its batches are full) the first time a client of that count comes: 2-5 s
#: each on a 2-core machine. Real client data have many sizes, so the limit is
#: kept low: at 16, a TFF tutorial's loop over clients of 8-12 batches of 20
#: paid 1.8-2.1 s in its 2nd and 4th rounds and 5.4 s in its first, where one
#: shared loop takes 0.8 s in the first and none after, at the same median round;
#: at 8, its clients of exactly 8 full batches still cost a 2.5 s XLA compile per
#: worker in round 2. The reference workload's 5 batches stay unrolled.
UNROLL_LIMIT = 6


class SourceSpec:
    """How a lowered dataset parameter yields its elements from its components.

    ``batch_size`` None: element i is row i of every component (a dataset
    from ``from_tensor_slices``); else element i is rows
    ``[i * b, min((i + 1) * b, n))`` (``.batch(b)``), the last partial batch
    dropped when ``drop_remainder``. ``num_elements``: None, or the number of
    elements of every source the lowered function is called with (its loop
    is then unrolled, unless a stage may stop or drop elements). ``passes``:
    with a batch size, the rows are that many passes of equal length, each
    batched on its own (``.batch(b).repeat(k)``: no batch spans two passes).
    ``rows``: None, or the number of rows of every source the lowered function
    is called with (its components then have known shapes).
    """

    __slots__ = ('dtypes', 'batch_size', 'drop_remainder', 'num_elements', 'passes', 'rows')

    def __init__(
        self,
        dtypes: Sequence[tf.DType],
        batch_size: Optional[int],
        drop_remainder: bool,
        num_elements: Optional[int] = None,
        passes: int = 1,
        rows: Optional[int] = None,
    ):
        self.dtypes = [tf.as_dtype(d) for d in dtypes]
        self.batch_size = None if batch_size is None else int(batch_size)
        self.drop_remainder = bool(drop_remainder)
        self.num_elements = None if num_elements is None else int(num_elements)
        self.passes = 1 if batch_size is None else int(passes)
        self.rows = None if rows is None else int(rows)

    def key(self) -> Tuple:
        return (
            tuple(d.name for d in self.dtypes),
            self.batch_size,
            self.drop_remainder,
            self.num_elements,
            self.passes,
            self.rows,
        )


class _Stage:
    """One dataset transformation between the source and the reduce."""

    def __init__(
        self,
        kind: str,
        fn: str,
        nstate: int,
        arg_types: List[int],
        out_types: List[int],
        refs: List[str],
        controls: Sequence[str] = (),
    ):
        self.controls = list(controls)  # control inputs of the removed node
        self.kind = kind  # 'map' | 'scan' | 'filter' | 'take_while' | 'take' | 'skip'
        self.fn = fn
        self.nstate = nstate  # scan: number of state tensors (first refs)
        self.arg_types = arg_types  # DataType enums of `refs`
        self.out_types = out_types  # element DataTypes after the stage
        self.refs = refs  # the inputs it takes in the scope (states, captures)


# ------------------------------------------------------------------ scopes
class _Scope:
    """The nodes of the top-level graph or of one function body, with ref helpers."""

    def __init__(self, nodes: Any, is_function: bool, outputs: Sequence[str], ret: Any = None):
        self.nodes = nodes  # a repeated NodeDef field
        self.ret = ret  # a function's result map (name -> ref), or None
        self.is_function = is_function
        self.outputs = list(outputs)
        self.deleted: set = set()

    def canon(self, ref: str) -> str:
        if ref.startswith('^'):
            return ref
        if not self.is_function and ':' not in ref:
            return ref + ':0'
        return ref

    def out_ref(self, node, arg: str, index: int) -> str:
        if self.is_function:
            return f'{node.name}:{arg}:{index}'
        return f'{node.name}:{index}'

    def consumers(self, ref: str) -> List[Tuple[Any, int]]:
        want = self.canon(ref)
        out = []
        for node in self.nodes:
            if node.name in self.deleted:
                continue
            for i, inp in enumerate(node.input):
                if not inp.startswith('^') and self.canon(inp) == want:
                    out.append((node, i))
        return out

    def escapes(self, ref: str) -> bool:
        want = self.canon(ref)
        return any(self.canon(o) == want for o in self.outputs)


class _Rewriter:
    def __init__(self, library: function_pb2.FunctionDefLibrary, source: SourceSpec):
        self.functions: Dict[str, function_pb2.FunctionDef] = {
            f.signature.name: f for f in library.function
        }
        self.source = source
        self.new_functions: Dict[str, function_pb2.FunctionDef] = {}

    # -------------------------------------------------------------- walk
    def lower_ref(
        self,
        scope: _Scope,
        ref: str,
        comps: List[str],
        stages: List[_Stage],
        controls: Sequence[str] = (),
    ) -> None:
        """Lowers every use of the dataset `ref` of `scope`.

        `stages`: the transformations applied since the components;
        `controls`: control inputs of removed ``Identity`` ops, moved to the
        op that replaces the use.
        """
        if scope.escapes(ref):
            raise NotLowerable('the dataset is a result of the function')
        for node, idx in scope.consumers(ref):
            if node.name in scope.deleted:
                continue
            op = node.op
            own = [i for i in node.input if i.startswith('^')]
            if op in _IDENTITY_OPS:
                scope.deleted.add(node.name)
                self.lower_ref(
                    scope, scope.out_ref(node, 'output', 0), comps, stages, list(controls) + own
                )
            elif idx == 0 and (
                op in _MAP_OPS or op in _PREDICATE_OPS or op in _COUNT_OPS or op == 'ScanDataset'
            ):
                scope.deleted.add(node.name)
                stage = self._stage(node)
                stage.controls.extend(controls)
                self.lower_ref(scope, scope.out_ref(node, 'handle', 0), comps, stages + [stage])
            elif idx == 0 and op == 'ReduceDataset':
                self._replace_reduce(scope, node, comps, stages)
                node.input.extend(c for c in controls if c not in node.input)
            elif op in _CALL_OPS and not stages:
                self._specialize_call(scope, node, idx, comps)
                node.input.extend(c for c in controls if c not in node.input)
            else:
                raise NotLowerable(f'the dataset reaches a {op} op ({node.name})')

    def _data_inputs(self, node) -> List[str]:
        return [i for i in node.input if not i.startswith('^')]

    def _stage(self, node) -> _Stage:
        inputs = self._data_inputs(node)[1:]
        inputs = inputs[: len(inputs) - _TRAILING_NON_ARGS.get(node.op, 0)]
        # Automatic control dependencies put the ordering (after variable
        # assignments, say) on the first dataset op: the loop inherits it.
        controls = [i for i in node.input if i.startswith('^')]
        attr = node.attr
        out_types = list(attr['output_types'].list.type)
        if node.op in _COUNT_OPS:  # input: the count (int64)
            return _Stage(
                _COUNT_OPS[node.op], '', 0, [types_pb2.DT_INT64], out_types, inputs[:1], controls
            )
        targs = list(attr['Targuments'].list.type)
        if node.op == 'ScanDataset':
            tstate = list(attr['Tstate'].list.type)
            return _Stage(
                'scan',
                attr['f'].func.name,
                len(tstate),
                tstate + targs,
                out_types,
                inputs,
                controls,
            )
        if node.op in _PREDICATE_OPS:
            kind = 'filter' if node.op == 'FilterDataset' else 'take_while'
            return _Stage(kind, attr['predicate'].func.name, 0, targs, out_types, inputs, controls)
        return _Stage('map', attr['f'].func.name, 0, targs, out_types, inputs, controls)

    # -------------------------------------------------------------- reduce
    def _replace_reduce(self, scope: _Scope, node, comps: List[str], stages: List[_Stage]) -> None:
        attr = node.attr
        inputs = self._data_inputs(node)[1:]
        controls = [i for i in node.input if i.startswith('^')]
        for st in stages:
            controls.extend(c for c in st.controls if c not in controls)
        tstate = list(attr['Tstate'].list.type)
        targs = list(attr['Targuments'].list.type)
        out_types = list(attr['output_types'].list.type)
        out_shapes = [tf.TensorShape(s) for s in attr['output_shapes'].list.shape]
        loop_name = self._make_loop(
            stages, attr['f'].func.name, tstate, targs, out_types, out_shapes
        )
        args = list(comps) + [r for st in stages for r in st.refs] + inputs
        tin = (
            [d.as_datatype_enum for d in self.source.dtypes]
            + [t for st in stages for t in st.arg_types]
            + tstate
            + targs
        )
        if len(args) != len(tin):
            raise NotLowerable(f'unexpected inputs of {node.name}')
        old_name = node.name
        node.Clear()
        node.name = old_name
        node.op = 'StatefulPartitionedCall'
        node.input.extend(args + controls)
        node.attr['Tin'].list.type.extend(tin)
        node.attr['Tout'].list.type.extend(out_types)
        node.attr['f'].func.name = loop_name
        for k in ('config', 'config_proto', 'executor_type'):
            node.attr[k].s = b''
        if scope.is_function:  # outputs were named `components` and are `output` now
            prefix = old_name + ':components:'
            for other in scope.nodes:
                for i, inp in enumerate(other.input):
                    if inp.startswith(prefix):
                        other.input[i] = old_name + ':output:' + inp[len(prefix) :]
            ret = scope.ret
            if ret is not None:
                for k, v in list(ret.items()):
                    if v.startswith(prefix):
                        ret[k] = old_name + ':output:' + v[len(prefix) :]

    def _make_loop(
        self,
        stages: List[_Stage],
        reduce_fn: str,
        tstate: List[int],
        targs: List[int],
        out_types: List[int],
        out_shapes: List[tf.TensorShape],
    ) -> str:
        src = self.source
        m = len(src.dtypes)
        b, drop, passes = src.batch_size, src.drop_remainder, src.passes
        stage_sizes = [len(st.refs) for st in stages]
        # A known number of elements unrolls the loop when no stage can stop
        # or drop an element (map and scan only).
        unrolled = src.num_elements if all(st.kind in ('map', 'scan') for st in stages) else None
        sig = (
            [tf.TensorSpec(None, d) for d in src.dtypes]
            + [tf.TensorSpec(None, tf.as_dtype(t)) for st in stages for t in st.arg_types]
            + [tf.TensorSpec(None, tf.as_dtype(t)) for t in tstate + targs]
        )
        nstate = len(tstate)

        def call(fn: str, args: List[tf.Tensor], types: List[int]) -> List[tf.Tensor]:
            return list(
                tf.raw_ops.StatefulPartitionedCall(
                    args=args, Tout=[tf.as_dtype(t) for t in types], f=fn
                )
            )

        @tf.function(autograph=False, input_signature=sig)
        def loop(*flat):
            comps = list(flat[:m])
            pos = m
            stage_refs = []
            for size in stage_sizes:
                stage_refs.append(list(flat[pos : pos + size]))
                pos += size
            state0 = list(flat[pos : pos + nstate])
            captured = list(flat[pos + nstate :])
            rows = tf.shape(comps[0], out_type=tf.int64)[0]
            per_pass = rows // passes if passes > 1 else rows
            if b is None:
                count = rows
            elif drop:
                count = per_pass // b
            else:
                count = (per_pass + b - 1) // b
            per_pass_count = count
            if passes > 1:
                count = count * passes
            # Loop-carried state of the stages: a scan's states, a take's or
            # skip's count of the elements it has seen.
            carried0: List[tf.Tensor] = []
            for st, refs in zip(stages, stage_refs):
                if st.kind == 'scan':
                    carried0.extend(refs[: st.nstate])
                elif st.kind in ('take', 'skip'):
                    carried0.append(tf.constant(0, tf.int64))

            def element(i):
                if b is None:
                    return [c[i] for c in comps]
                if passes == 1:
                    lo = i * b
                    hi = tf.minimum(lo + b, rows)
                else:  # batch j of pass e
                    start = (i // per_pass_count) * per_pass
                    lo = start + (i % per_pass_count) * b
                    hi = tf.minimum(lo + b, start + per_pass)
                return [c[lo:hi] for c in comps]

            def carried_size(st: _Stage) -> int:
                return st.nstate if st.kind == 'scan' else 1 if st.kind in ('take', 'skip') else 0

            def run(
                k: int, elem: List[tf.Tensor], carried: List[tf.Tensor], state: List[tf.Tensor]
            ):
                """Stages k.. and the reduce on one element: (carried, state, stop).

                A stage that drops the element (filter, take_while, take,
                skip) skips everything after it, as tf.data does: later
                stages never see the element.
                """
                if k == len(stages):
                    new = call(reduce_fn, list(state) + elem + captured, out_types)
                    for t, shp in zip(new, out_shapes):
                        t.set_shape(shp)
                    return [], new, tf.constant(False)
                st, refs = stages[k], stage_refs[k]
                n = carried_size(st)
                mine, rest = carried[:n], carried[n:]
                unchanged = lambda: (
                    list(carried),
                    [tf.identity(x) for x in state],  # noqa: E731
                    tf.constant(False),
                )
                if st.kind == 'map':
                    return run(k + 1, call(st.fn, elem + refs, st.out_types), carried, state)
                if st.kind == 'scan':
                    out = call(
                        st.fn,
                        mine + elem + refs[st.nstate :],
                        st.arg_types[: st.nstate] + st.out_types,
                    )
                    c2, s2, stop = run(k + 1, out[st.nstate :], rest, state)
                    return out[: st.nstate] + c2, s2, stop
                if st.kind in ('filter', 'take_while'):
                    pred = tf.reshape(call(st.fn, elem + refs, [types_pb2.DT_BOOL])[0], [])
                    if st.kind == 'filter':
                        otherwise = unchanged
                    else:

                        def otherwise():
                            c, s_, _ = unchanged()
                            return c, s_, tf.constant(True)

                    return _cond(
                        pred, lambda: _prefixed(mine, run(k + 1, elem, rest, state)), otherwise
                    )
                seen = mine[0]
                limit = tf.cast(refs[0], tf.int64)
                if st.kind == 'take':

                    def passes():
                        return _prefixed([seen + 1], run(k + 1, elem, rest, state))

                    def ends():
                        c, s_, _ = unchanged()
                        return c, s_, tf.constant(True)

                    return _cond(tf.logical_or(limit < 0, seen < limit), passes, ends)

                # skip: the first `limit` elements are dropped (all when limit < 0)
                def dropped():
                    return (
                        [seen + 1] + list(rest),
                        [tf.identity(x) for x in state],
                        tf.constant(False),
                    )

                return _cond(
                    tf.logical_or(limit < 0, seen < limit),
                    dropped,
                    lambda: _prefixed([seen], run(k + 1, elem, rest, state)),
                )

            def body(i, go, carried, state):
                c2, s2, stop = run(0, element(i), list(carried), list(state))
                return i + 1, tf.logical_and(go, tf.logical_not(stop)), tuple(c2), tuple(s2)

            if unrolled is not None:
                # straight-line calls: no loop to run per element (the same
                # functions on the same elements in the same order)
                carried, state = list(carried0), list(state0)
                for j in range(unrolled):
                    carried, state, _ = run(0, element(tf.constant(j, tf.int64)), carried, state)
                return list(state)
            init = (tf.constant(0, tf.int64), tf.constant(True), tuple(carried0), tuple(state0))
            invariants = (
                tf.TensorShape([]),
                tf.TensorShape([]),
                tuple(tf.TensorShape(None) for _ in carried0),
                tuple(out_shapes),
            )
            _, _, _, final = tf.while_loop(
                lambda i, go, carried, state: tf.logical_and(i < count, go),
                body,
                init,
                shape_invariants=invariants,
                parallel_iterations=1,
            )
            return list(final)

        concrete = loop.get_concrete_function()
        fdef = copy.deepcopy(concrete.function_def)
        fdef.signature.name = ''
        # Function names are global in a process: name it by its content.
        name = 'simharness_lowered_loop_' + _digest(fdef)
        fdef.signature.name = name
        for f in concrete.graph.as_graph_def().library.function:
            self.new_functions[f.signature.name] = f
        self.new_functions[name] = fdef
        return name

    # -------------------------------------------------------------- calls
    def _specialize_call(self, scope: _Scope, node, idx: int, comps: List[str]) -> None:
        data_inputs = self._data_inputs(node)
        if data_inputs.count(node.input[idx]) > 1:
            raise NotLowerable(f'the dataset is passed twice to {node.name}')
        fname = node.attr['f'].func.name
        fdef = self.functions.get(fname) or self.new_functions.get(fname)
        if fdef is None:
            raise NotLowerable(f'function {fname} is not in the library')
        arg_pos = data_inputs.index(node.input[idx])
        new = function_pb2.FunctionDef()
        new.CopyFrom(fdef)
        new.signature.name = ''
        arg = new.signature.input_arg[arg_pos]
        if arg.type != types_pb2.DT_VARIANT:
            raise NotLowerable(f'argument {arg.name} of {fname} is not a dataset')
        base = arg.name
        new_args = []
        for j, d in enumerate(self.source.dtypes):
            new_args.append((f'{base}_sh_c{j}', d.as_datatype_enum))
        args = list(new.signature.input_arg)
        del new.signature.input_arg[:]
        for j, a in enumerate(args):
            if j == arg_pos:
                for nm, dt in new_args:
                    na = new.signature.input_arg.add()
                    na.name = nm
                    na.type = dt
            else:
                new.signature.input_arg.add().CopyFrom(a)
        shift = len(new_args) - 1
        for field in ('arg_attr', 'resource_arg_unique_id'):
            old = dict(getattr(new, field))
            getattr(new, field).clear()
            for k, v in old.items():
                if k == arg_pos:
                    continue
                key = k + shift if k > arg_pos else k
                if field == 'arg_attr':
                    new.arg_attr[key].CopyFrom(v)
                else:
                    new.resource_arg_unique_id[key] = v
        inner = _Scope(new.node_def, True, list(new.ret.values()), new.ret)
        self.lower_ref(inner, base, [nm for nm, _ in new_args], [])
        _drop_deleted(inner)
        new_name = f'{fname}__sh_lowered_{_digest(new)}'
        new.signature.name = new_name
        self.new_functions[new_name] = new
        # the call: the dataset input becomes the components
        old_inputs = list(node.input)
        del node.input[:]
        for j, inp in enumerate(old_inputs):
            if j == idx:
                node.input.extend(comps)
            else:
                node.input.append(inp)
        tin = list(node.attr['Tin'].list.type)
        tin[arg_pos : arg_pos + 1] = [d.as_datatype_enum for d in self.source.dtypes]
        del node.attr['Tin'].list.type[:]
        node.attr['Tin'].list.type.extend(tin)
        node.attr['f'].func.name = new_name


def _prefixed(head: List[tf.Tensor], result):
    carried, state, stop = result
    return list(head) + list(carried), state, stop


def _cond(pred, true_fn, false_fn):
    """`tf.cond` over two branches that give (carried list, state list, stop)."""

    def wrap(fn):
        def branch():
            carried, state, stop = fn()
            return tuple(carried), tuple(state), stop

        return branch

    carried, state, stop = tf.cond(pred, wrap(true_fn), wrap(false_fn))
    return list(carried), list(state), stop


def _digest(fdef: function_pb2.FunctionDef) -> str:
    return hashlib.sha1(fdef.SerializeToString(deterministic=True)).hexdigest()[:16]


def _drop_deleted(scope: _Scope) -> None:
    keep = [n for n in scope.nodes if n.name not in scope.deleted]
    for n in keep:
        ctrl = [i for i in n.input if i.startswith('^') and i[1:] in scope.deleted]
        for c in ctrl:
            n.input.remove(c)
    del scope.nodes[:]
    scope.nodes.extend(keep)


def lower_graph(
    graph_def: graph_pb2.GraphDef, placeholder: str, source: SourceSpec, output_names: Sequence[str]
) -> Tuple[graph_pb2.GraphDef, List[str]]:
    """Rewrites `graph_def` so that the dataset fed at `placeholder` comes as components.

    Returns the new graph and the names (``name:0``) of the component
    placeholders that replace `placeholder`. Raises `NotLowerable` when the
    dataset is used in a way the rewrite does not cover.
    """
    gd = graph_pb2.GraphDef()
    gd.CopyFrom(graph_def)
    pname = placeholder.split(':')[0]
    ph = next((n for n in gd.node if n.name == pname), None)
    if ph is None or ph.op != 'Placeholder' or ph.attr['dtype'].type != types_pb2.DT_VARIANT:
        raise NotLowerable(f'{placeholder} is not a dataset placeholder')
    rw = _Rewriter(gd.library, source)
    scope = _Scope(gd.node, False, output_names)
    comp_names = [f'{pname}_sh_c{j}' for j in range(len(source.dtypes))]
    if not scope.consumers(pname):
        raise NotLowerable('the dataset is not used')
    rw.lower_ref(scope, pname, comp_names, [])
    scope.deleted.add(pname)
    # control inputs on the old placeholder move to the first component
    for n in gd.node:
        for i, inp in enumerate(n.input):
            if inp == '^' + pname:
                n.input[i] = '^' + comp_names[0]
    _drop_deleted(scope)
    for nm, d in zip(comp_names, source.dtypes):
        node = gd.node.add()
        node.name = nm
        node.op = 'Placeholder'
        node.attr['dtype'].type = d.as_datatype_enum
    have = {f.signature.name for f in gd.library.function}
    for name, f in rw.new_functions.items():
        if name not in have:
            gd.library.function.add().CopyFrom(f)
            have.add(name)
    _prune_library(gd)
    return gd, [c + ':0' for c in comp_names]


def _functions_named_in(attrs, out: set) -> None:
    for value in attrs.values():
        if value.HasField('func'):
            out.add(value.func.name)
            _functions_named_in(value.func.attr, out)
        elif value.HasField('list'):
            for f in value.list.func:
                out.add(f.name)
                _functions_named_in(f.attr, out)


def _prune_library(gd: graph_pb2.GraphDef) -> None:
    """Drops the library functions no op can reach any more (the originals of
    specialized functions, the dataset functions of lowered pipelines)."""
    by_name = {f.signature.name: f for f in gd.library.function}
    reach: set = set()
    todo: set = set()
    for node in gd.node:
        _functions_named_in(node.attr, todo)
        if node.op in by_name:  # a function called as an op
            todo.add(node.op)
    while todo:
        name = todo.pop()
        if name in reach or name not in by_name:
            continue
        reach.add(name)
        f = by_name[name]
        found: set = set()
        for node in f.node_def:
            _functions_named_in(node.attr, found)
            if node.op in by_name:  # a function called as an op
                found.add(node.op)
        _functions_named_in(f.attr, found)
        todo |= found - reach
    keep = [f for f in gd.library.function if f.signature.name in reach]
    gradients = [g for g in gd.library.gradient if g.function_name in reach]
    del gd.library.function[:]
    gd.library.function.extend(keep)
    del gd.library.gradient[:]
    gd.library.gradient.extend(gradients)
