"""Unit tests of tracing: the building blocks of traced computations, and trace-time type errors."""

from __future__ import annotations

import collections

import numpy as np
import pytest
import tensorflow as tf

import simharness as sh
from simharness.core import building_blocks as bb
from simharness.core import tracing
from simharness.core import types as T
from simharness.errors import SimharnessTypeError

F32_AT_C = sh.type_at_clients(tf.float32)
F32_AT_S = sh.type_at_server(tf.float32)


@sh.tf_computation(tf.float32)
def add_one(x):
    return x + 1.0


@sh.tf_computation(tf.int32)
def int_plus_one(x):
    return x + 1


@sh.tf_computation(tf.float32, tf.float32)
def add(a, b):
    return a + b


@sh.federated_computation(F32_AT_C)
def fed_sum(xs):
    return sh.federated_sum(xs)


@sh.federated_computation(F32_AT_C)
def map_then_mean(xs):
    ys = sh.federated_map(add_one, xs)
    return [sh.federated_mean(ys), ys]


def test_federated_computation_is_a_lambda_over_a_block():
    comp = fed_sum.to_building_block()
    assert isinstance(comp, bb.Lambda)
    assert comp.parameter_type == F32_AT_C
    assert str(comp.type_signature) == '({float32}@CLIENTS -> float32@SERVER)'
    block = comp.result
    assert isinstance(block, bb.Block) and len(block.locals) == 1
    name, call = block.locals[0]
    assert isinstance(call, bb.Call) and isinstance(call.fn, bb.Intrinsic)
    assert call.fn.uri == 'federated_sum'
    assert str(call.fn.type_signature) == '({float32}@CLIENTS -> float32@SERVER)'
    assert isinstance(call.arg, bb.Reference) and call.arg.name == comp.parameter_name
    assert isinstance(block.result, bb.Reference) and block.result.name == name
    assert bb.free_references(comp) == set()


def test_locals_in_program_order_and_results_refer_to_them():
    comp = map_then_mean.to_building_block()
    locals_ = comp.result.locals
    assert [c.fn.uri for _, c in locals_] == ['federated_map', 'federated_mean']
    map_name = locals_[0][0]
    fn, value = locals_[0][1].arg.elements
    assert isinstance(fn[1], bb.CompiledComputation)
    assert fn[1].type_signature == add_one.type_signature
    assert locals_[1][1].arg.name == map_name  # the mean reads the map's local
    result = comp.result.result
    assert isinstance(result, bb.Struct)
    assert [e.name for _, e in result.elements] == [locals_[1][0], map_name]
    assert str(map_then_mean.type_signature.result) == '<float32@SERVER,{float32}@CLIENTS>'


def test_nested_federated_computation_is_called_once():
    @sh.federated_computation(F32_AT_C)
    def outer(xs):
        m = fed_sum(xs)
        return [m, m]

    comp = outer.to_building_block()
    ((name, call),) = comp.result.locals
    assert isinstance(call.fn, bb.Lambda) and call.fn is fed_sum.to_building_block()
    assert [e.name for _, e in comp.result.result.elements] == [name, name]
    assert 'federated_sum' in comp.compact()


def test_closures_leave_free_references_in_the_inner_lambda():
    @sh.federated_computation(F32_AT_C)
    def outer(xs):
        @sh.federated_computation(F32_AT_S)
        def inner(s):
            return sh.federated_zip([s, sh.federated_sum(xs)])

        return inner(sh.federated_sum(xs))

    comp = outer.to_building_block()
    inner = comp.result.locals[-1][1].fn
    assert isinstance(inner, bb.Lambda)
    assert bb.free_references(inner) == {comp.parameter_name}
    assert bb.free_references(comp) == set()


def test_python_constants_become_no_parameter_tf_calls():
    @sh.federated_computation
    def value():
        return sh.federated_value(np.float32(2.5), sh.SERVER)

    comp = value.to_building_block()
    assert comp.parameter_name is None and comp.type_signature.parameter is None
    const_name, const = comp.result.locals[0]
    assert isinstance(const, bb.Call) and const.arg is None
    assert isinstance(const.fn, bb.CompiledComputation)
    assert str(const.fn.type_signature) == '( -> float32)'
    assert comp.result.locals[1][1].fn.uri == 'federated_value_at_server'
    assert comp.result.locals[1][1].arg.name == const_name


def test_static_arguments_of_intrinsics():
    @sh.federated_computation(sh.type_at_clients(tf.int32))
    def secure(xs):
        return sh.federated_secure_sum_bitwidth(xs, 6)

    intrinsic = secure.to_building_block().result.locals[0][1].fn
    assert intrinsic.uri == 'federated_secure_sum_bitwidth' and intrinsic.static == {'bitwidth': 6}


def test_multiple_parameters_become_a_named_struct():
    @sh.federated_computation(F32_AT_C, F32_AT_S)
    def two(xs, s):
        return [s, xs]

    assert (
        str(two.type_signature)
        == '(<xs={float32}@CLIENTS,s=float32@SERVER> -> <float32@SERVER,{float32}@CLIENTS>)'
    )
    result = two.to_building_block().result
    assert isinstance(result, bb.Struct)
    assert [e.index for _, e in result.elements] == [1, 0]
    assert all(isinstance(e, bb.Selection) for _, e in result.elements)


def test_tf_computation_is_a_serialized_graph():
    comp = add.to_building_block()
    assert isinstance(comp, bb.CompiledComputation)
    assert str(comp.type_signature) == '(<a=float32,b=float32> -> float32)'
    assert isinstance(comp.graph.graph_def, bytes) and len(comp.graph.input_names) == 2
    assert len(comp.graph.output_names) == 1
    assert comp.fingerprint != add_one.to_building_block().fingerprint
    graph_def = tf.compat.v1.GraphDef()
    graph_def.ParseFromString(comp.graph.graph_def)
    names = {n.name for n in graph_def.node}
    assert {n.split(':')[0] for n in comp.graph.input_names + comp.graph.output_names} <= names


def _looping_square():
    """A tf_computation whose graph has library functions (a while loop, a tf.function)."""

    @tf.function
    def scale(x):
        return x * 1.0000001

    @sh.tf_computation(tf.float32, tf.int32)
    def looping_square(x, n):
        _, acc = tf.while_loop(
            lambda i, a: i < n, lambda i, a: (i + 1, scale(a)), [tf.constant(0), x]
        )
        return acc * 0.0 + x * x

    return looping_square


def test_the_same_computation_traced_again_has_the_same_bytes():
    # TF names traced functions after a process-wide counter: without renaming them after
    # their content, every trace (every driver of one executor service) gave new bytes, a new
    # fingerprint, a new entry in the service's function cache and new TF function
    # definitions (issue 27: a service's memory grew with every driver).
    first = _looping_square().to_building_block()
    add.to_building_block()  # other tracing in between moves TF's counters
    second = _looping_square().to_building_block()
    graph_def = tf.compat.v1.GraphDef()
    graph_def.ParseFromString(first.graph.graph_def)
    assert len(graph_def.library.function) >= 3, [
        f.signature.name for f in graph_def.library.function
    ]
    assert first.graph.graph_def == second.graph.graph_def
    assert first.fingerprint == second.fingerprint
    assert _looping_square()(3.0, 5) == pytest.approx(9.0)


def test_traced_values():
    seen = {}

    @sh.federated_computation(sh.type_at_clients(collections.OrderedDict(a=tf.float32, b=tf.int32)))
    def select(xs):
        assert tracing.is_tracing()
        seen['len'] = len(xs)
        seen['dir'] = dir(xs)
        seen['a'] = xs.a
        seen['items'] = list(xs)
        with pytest.raises(SimharnessTypeError, match='no truth value'):
            bool(xs)
        with pytest.raises(AttributeError, match="no element 'c'"):
            xs.c
        return xs['b']

    assert not tracing.is_tracing()
    assert seen['len'] == 2 and seen['dir'] == ['a', 'b']
    assert isinstance(seen['a'].comp, bb.Selection) and seen['a'].comp.index == 0
    assert str(seen['a'].type_signature) == '{float32}@CLIENTS'
    assert len(seen['items']) == 2
    assert str(select.type_signature.result) == '{int32}@CLIENTS'


# ---------------------------------------------------------------- trace-time type errors


def _trace(param, body):
    return sh.federated_computation(param)(body)


def test_map_parameter_mismatch_names_both_types():
    with pytest.raises(SimharnessTypeError, match='int32 is not assignable from float32') as e:
        _trace(F32_AT_C, lambda xs: sh.federated_map(int_plus_one, xs))
    assert e.value.expected == T.TensorType(tf.int32) and e.value.actual == T.TensorType(tf.float32)


def test_call_argument_mismatch_names_both_types():
    with pytest.raises(
        SimharnessTypeError,
        match=r'\{float32\}@CLIENTS is not assignable to the expected type float32',
    ):
        _trace(F32_AT_C, lambda xs: add_one(xs))
    with pytest.raises(
        SimharnessTypeError, match=r'float32@SERVER is not assignable .* \{float32\}@CLIENTS'
    ):
        _trace(F32_AT_S, lambda s: fed_sum(s))


def test_aggregate_type_errors():
    with pytest.raises(SimharnessTypeError, match='accumulate.*int32'):
        _trace(F32_AT_C, lambda xs: sh.federated_aggregate(xs, 0, int_plus_one, add, add_one))
    with pytest.raises(
        SimharnessTypeError, match='zero must be unplaced or at the server.*CLIENTS'
    ):
        _trace(F32_AT_C, lambda xs: sh.federated_aggregate(xs, xs, add, add, add_one))


@pytest.mark.parametrize(
    'param, body, message',
    [
        (
            F32_AT_C,
            lambda xs: sh.federated_broadcast(xs),
            r'federated_broadcast.*SERVER.*\{float32\}@CLIENTS',
        ),
        (
            F32_AT_S,
            lambda s: sh.federated_collect(s),
            r'federated_collect.*CLIENTS.*float32@SERVER',
        ),
        (
            F32_AT_C,
            lambda xs: sh.federated_value(xs, sh.SERVER),
            r'federated_value.*unplaced.*\{float32\}@CLIENTS',
        ),
        (
            F32_AT_C,
            lambda xs: sh.federated_value(1.0, 'server'),
            'placement must be CLIENTS or SERVER',
        ),
        (
            F32_AT_C,
            lambda xs: sh.federated_eval(add_one, sh.CLIENTS),
            r'takes no parameter|no parameter',
        ),
        ([F32_AT_C, F32_AT_S], lambda p: sh.federated_zip([p[0], p[1]]), 'same placement'),
        (F32_AT_C, lambda xs: sh.federated_zip([]), 'non-empty struct'),
        (sh.type_at_clients(tf.bool), lambda xs: sh.federated_sum(xs), 'numeric tensors.*bool'),
        (sh.SequenceType(tf.string), lambda s: sh.sequence_sum(s), 'numeric tensors.*str'),
        (F32_AT_C, lambda xs: sh.sequence_sum(xs), r'expected a sequence .*\{float32\}@CLIENTS'),
        (F32_AT_C, lambda xs: None, 'returned None'),
    ],
)
def test_intrinsic_type_errors(param, body, message):
    with pytest.raises(SimharnessTypeError, match=message):
        _trace(param, body)


def test_weighted_mean_needs_a_numeric_scalar_weight():
    with pytest.raises(SimharnessTypeError, match=r'weight must be a numeric scalar.*float32\[2\]'):
        _trace(
            [F32_AT_C, sh.type_at_clients((tf.float32, [2]))],
            lambda p: sh.federated_mean(p[0], p[1]),
        )


def test_select_keys_must_be_int32_vectors():
    @sh.tf_computation(tf.float32, tf.int32)
    def pick(s, k):
        return s

    with pytest.raises(SimharnessTypeError, match=r'int32 vectors.*\{int64\[\?\]\}@CLIENTS'):
        _trace(
            [sh.type_at_clients((tf.int64, [None])), F32_AT_S],
            lambda p: sh.federated_select(p[0], 3, p[1], pick),
        )


def test_tf_computation_errors():
    with pytest.raises(SimharnessTypeError, match='cannot take a parameter of type'):
        sh.tf_computation(F32_AT_C)(lambda x: x)
    with pytest.raises(SimharnessTypeError, match='returned None'):
        sh.tf_computation(tf.float32)(lambda x: None)
    with pytest.raises(SimharnessTypeError, match='takes 2 parameters but 3 specs'):
        sh.tf_computation(tf.float32, tf.float32, tf.float32)(lambda a, b: a)


def _graph_def(comp):
    g = tf.compat.v1.GraphDef()
    g.ParseFromString(comp.to_building_block().graph.graph_def)
    return g


def test_variables_and_tables_are_created_afresh_by_every_call():
    @sh.tf_computation(tf.string)
    def f(k):
        v = tf.Variable(1.0)
        v.assign_add(2.0)
        table = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(['a'], [1.0]), -1.0)
        return table.lookup(k) + v

    assert str(f.type_signature) == '(str -> float32)'
    nodes = {n.name: n for n in _graph_def(f).node}
    handles = [n for n in nodes.values() if n.op == 'VarHandleOp']
    assert len(handles) == 1
    # ResourceHandle::ANONYMOUS_NAME: a new variable per execution, owned by its handle
    assert handles[0].attr['shared_name'].s == b'cd2c89b7-88b7-44c8-ad83-06c2a9158347'
    assert not [n for n in nodes.values() if n.op == 'HashTableV2']
    assert len([n for n in nodes.values() if n.op == 'AnonymousHashTable']) == 1
    # Automatic control dependencies: the assignment runs before the result
    assign = next(n for n in nodes.values() if n.op == 'AssignAddVariableOp')
    ancestors, todo = set(), ['result_0']
    while todo:
        name = todo.pop().lstrip('^').split(':')[0]
        if name not in ancestors:
            ancestors.add(name)
            todo.extend(nodes[name].input)
    assert assign.name in ancestors


def test_control_dependencies_on_arguments_are_dropped():
    @sh.tf_computation(tf.float32, tf.float32)
    def f(a, b):
        with tf.control_dependencies([a, b]):
            return tf.identity(a) + 1.0

    assert all(not i.startswith('^arg_') for n in _graph_def(f).node for i in n.input)
    assert f(1.0, 2.0) == 2.0


def test_what_needs_a_placeholder_no_one_feeds_is_dropped_and_the_order_kept():
    """Keras 2's set_weights in a graph assigns from placeholders it feeds in its own
    session: such ops never run (as in TFF's graphs); the ops around them keep their order."""

    @sh.tf_computation(tf.float32)
    def f(x):
        v = tf.Variable(1.0)
        v.assign_add(x)
        v.assign(tf.compat.v1.placeholder(tf.float32, shape=[]) * x)  # takes the input too
        v.assign(v.read_value() * 10.0)
        return v.read_value()

    assert not [n for n in _graph_def(f).node if n.op == 'Placeholder' and 'arg' not in n.name]
    assert f(2.0) == 30.0  # (1 + 2) * 10: the placeholder's assignment left out, in order

    # an op after the dropped one that takes one tensor twice keeps both data inputs
    @sh.tf_computation
    def h():
        counts = tf.Variable([1, 1])
        counts.assign(tf.cast(tf.compat.v1.placeholder(tf.float32, [2]), tf.int32))
        one = tf.constant([1])
        tf.raw_ops.ResourceScatterAdd(resource=counts.handle, indices=one, updates=one)
        return counts.read_value()

    np.testing.assert_array_equal(h(), [1, 2])
    # a result that takes such a placeholder keeps TensorFlow's own error, which names it
    g = sh.tf_computation(lambda: tf.compat.v1.placeholder(tf.float32, [], name='lonely') + 1.0)
    with pytest.raises(Exception, match='lonely'):
        g()


def test_polymorphic_computations_trace_per_type():
    @sh.tf_computation
    def double(x):
        return x * 2

    assert isinstance(double, sh.PolymorphicComputation)
    with pytest.raises(SimharnessTypeError, match='polymorphic'):
        double.type_signature

    @sh.federated_computation(sh.type_at_clients(tf.int32))
    def ints(xs):
        return sh.federated_map(double, xs)

    @sh.federated_computation(sh.type_at_clients((tf.float64, [3])))
    def floats(xs):
        return sh.federated_map(double, xs)

    assert str(ints.type_signature.result) == '{int32}@CLIENTS'
    assert str(floats.type_signature.result) == '{float64[3]}@CLIENTS'
    assert double.concrete(T.TensorType(tf.int32)) is double.concrete(T.TensorType(np.int32))


def test_tracing_records_no_op_tracebacks_and_restores_tf_afterwards():
    """Ops traced into a computation carry no Python traceback (the GraphDef keeps none:
    TF's per-op stack walk was wasted); TF's own graphs keep theirs."""
    import tensorflow as tf
    import simharness as sh

    seen = []

    @sh.tf_computation(tf.float32)
    def plus_one(x):
        y = x + 1.0
        seen.append(len(y.op.traceback))
        return y

    assert plus_one(np.float32(1.0)) == 2.0
    assert seen == [0]
    g = tf.Graph()
    with g.as_default():
        c = tf.constant(1.0)
    assert len(c.op.traceback) > 0


def test_variables_nothing_reads_leave_the_graph():
    """An anonymous variable lives one call: one that is only initialized or assigned has no
    effect, and leaves the graph with its initializer (here a stateful random op)."""

    @sh.tf_computation(tf.float32)
    def f(x):
        tf.Variable(tf.random.uniform([3]))
        written = tf.Variable(0.0)
        written.assign(x)
        kept = tf.Variable(1.0)
        kept.assign_add(x)
        return x * 2.0 + kept

    ops = [n.op for n in _graph_def(f).node]
    assert ops.count('VarHandleOp') == 1, ops
    assert 'RandomUniform' not in ops and ops.count('AssignVariableOp') == 1, ops  # kept's init
    assert f(3.0) == 10.0


def test_a_variable_read_by_a_called_function_stays():
    @tf.function
    def bump(v, x):
        v.assign_add(x)
        return v.read_value()

    @sh.tf_computation(tf.float32)
    def f(x):
        v = tf.Variable(1.0)
        return bump(v, x)

    assert [n.op for n in _graph_def(f).node].count('VarHandleOp') == 1
    assert f(2.0) == 3.0
