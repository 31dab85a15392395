"""Behaviour of the intrinsics and computations, on every stack of the registry.

Each test taking `stack` runs inside ``execution_context`` of every stack in
`tests/stacks.py`. Computations are defined once, at module level.
"""

from __future__ import annotations

import asyncio
import collections

import attrs
import numpy as np
import pytest
import tensorflow as tf

import simharness as sh
from computations import listed  # tests/computations.py
from simharness.core.reduction import Reducer

XS = [10.0, 11.0, 12.0]

F32_AT_C = sh.type_at_clients(tf.float32)
F32_AT_S = sh.type_at_server(tf.float32)
I32_AT_C = sh.type_at_clients(tf.int32)
I32_AT_S = sh.type_at_server(tf.int32)


def _is_f32(x):
    return isinstance(x, np.floating) and x.dtype == np.float32


# ---------------------------------------------------------------- tf computations


@sh.tf_computation(tf.float32)
def add_one(x):
    return x + 1.0


@sh.tf_computation(tf.float32)
def identity(x):
    return tf.identity(x)


@sh.tf_computation(tf.float32, tf.float32)
def add(a, b):
    return a + b


@sh.tf_computation([tf.float32, tf.float32])
def add_pair(p):
    return p[0] + p[1]


@sh.tf_computation
def five():
    return tf.constant(5.0)


@sh.tf_computation
def random_scalar():
    return tf.random.uniform([])


# ---------------------------------------------------------------- sums and means


@sh.federated_computation(F32_AT_C)
def fed_sum(xs):
    return sh.federated_sum(xs)


@sh.federated_computation(F32_AT_C)
def fed_mean(xs):
    return sh.federated_mean(xs)


@sh.federated_computation(F32_AT_C)
def fed_self_weighted_mean(xs):
    return sh.federated_mean(xs, xs)


@sh.federated_computation(F32_AT_C, I32_AT_C)
def fed_int_weighted_mean(xs, ws):
    return sh.federated_mean(xs, ws)


STRUCT = collections.OrderedDict(a=tf.float32, b=(tf.int32, [2]))


@sh.federated_computation(sh.type_at_clients(STRUCT))
def fed_struct_sum(xs):
    return sh.federated_sum(xs)


@sh.federated_computation(sh.type_at_clients([tf.float32, (tf.float64, [2])]))
def fed_struct_mean(xs):
    return sh.federated_mean(xs)


@sh.federated_computation(F32_AT_C)
def fed_sum_and_mean(xs):
    return [sh.federated_sum(xs), sh.federated_mean(xs)]


def test_federated_sum(stack):
    out = fed_sum(XS)
    assert _is_f32(out) and out == 33.0


def test_federated_mean(stack):
    out = fed_mean(XS)
    assert _is_f32(out) and out == 11.0


def test_federated_weighted_mean_exact_float32(stack):
    out = fed_self_weighted_mean(XS)
    expected = np.float32(365.0) / np.float32(33.0)
    assert _is_f32(out)
    assert out.tobytes() == expected.tobytes()
    assert out == np.float32(365 / 33)


def test_federated_weighted_mean_with_int_weights(stack):
    assert fed_int_weighted_mean([1.0, 2.0, 4.0], [3, 1, 0]) == np.float32(5.0 / 4.0)


def test_federated_sum_and_mean_of_structs(stack):
    total = fed_struct_sum(
        [
            dict(a=1.0, b=[1, 2]),
            dict(a=2.0, b=[3, 4]),
            collections.OrderedDict(a=3.0, b=np.array([5, 6], np.int32)),
        ]
    )
    assert isinstance(total, collections.OrderedDict) and list(total) == ['a', 'b']
    assert total['a'] == 6.0 and total['b'].dtype == np.int32
    np.testing.assert_array_equal(total['b'], [9, 12])
    mean = fed_struct_mean([[1.0, [1.0, 2.0]], [2.0, [3.0, 5.0]]])
    assert isinstance(mean, list) and mean[0] == np.float32(1.5)
    assert mean[1].dtype == np.float64
    np.testing.assert_array_equal(mean[1], [2.0, 3.5])


def test_sum_over_zero_clients_is_zero(stack):
    out = fed_struct_sum([])
    assert out['a'] == 0.0
    np.testing.assert_array_equal(out['b'], [0, 0])


# ---------------------------------------------------------------- aggregate


@sh.federated_computation(F32_AT_C)
def fed_aggregate_add(xs):
    return sh.federated_aggregate(xs, 10.0, add, add, identity)


@sh.tf_computation([tf.float32, tf.int32], tf.float32)
def acc_sum_count(acc, x):
    return [acc[0] + x, acc[1] + 1]


@sh.tf_computation([tf.float32, tf.int32], [tf.float32, tf.int32])
def merge_sum_count(a, b):
    return [a[0] + b[0], a[1] + b[1]]


@sh.tf_computation([tf.float32, tf.int32])
def report_mean(acc):
    return acc[0] / tf.cast(acc[1], tf.float32)


@sh.federated_computation(F32_AT_C)
def fed_aggregate_mean(xs):
    return sh.federated_aggregate(xs, [0.0, 0], acc_sum_count, merge_sum_count, report_mean)


@sh.federated_computation(F32_AT_C, sh.type_at_server([tf.float32, tf.int32]))
def fed_aggregate_server_zero(xs, zero):
    return sh.federated_aggregate(xs, zero, acc_sum_count, merge_sum_count, report_mean)


def test_federated_aggregate(stack):
    out = fed_aggregate_add(XS)
    assert _is_f32(out) and out == 43.0


def test_federated_aggregate_with_accumulator_of_another_type(stack):
    # 20 clients: more than one chunk of the canonical tree, and blocks that
    # begin inside a chunk on the multi-client stacks.
    values = [float(i) for i in range(20)]
    assert fed_aggregate_mean(values) == np.float32(9.5)
    assert fed_aggregate_server_zero(values, [0.0, 0]) == np.float32(9.5)


# ---------------------------------------------------------------- map, broadcast, value, eval


@sh.federated_computation(F32_AT_C)
def fed_map_identity(xs):
    return sh.federated_map(identity, xs)


@sh.federated_computation(F32_AT_S)
def fed_broadcast_plus_one(x):
    return sh.federated_map(add_one, sh.federated_broadcast(x))


@sh.federated_computation(F32_AT_S)
def fed_broadcast(x):
    return sh.federated_broadcast(x)


@sh.federated_computation(F32_AT_S)
def fed_apply(x):
    return [sh.federated_map(add_one, x), sh.federated_apply(add_one, x)]


@sh.federated_computation
def fed_eval_clients():
    return sh.federated_eval(five, sh.CLIENTS)


@sh.federated_computation
def fed_eval_server():
    return sh.federated_eval(five, sh.SERVER)


@sh.federated_computation
def fed_value_clients():
    return sh.federated_value(3, sh.CLIENTS)


@sh.federated_computation
def fed_value_server():
    return sh.federated_value(3.5, sh.SERVER)


def test_federated_map_identity(stack):
    out = fed_map_identity(XS)
    assert isinstance(out, list) and len(out) == 3
    assert all(_is_f32(x) for x in out) and out == XS


def test_broadcast_then_map(stack):
    with stack.clients(3):
        out = fed_broadcast_plus_one(10.0)
        assert fed_broadcast_plus_one.type_signature.result == F32_AT_C
        assert isinstance(out, list) and out == [11.0, 11.0, 11.0]
        # An all-equal client value comes back as one value, as in TFF.
        assert str(fed_broadcast.type_signature.result) == 'float32@CLIENTS'
        assert fed_broadcast(10.0) == 10.0


def test_map_and_apply_at_server(stack):
    assert fed_apply(1.0) == [2.0, 2.0]


def test_federated_eval(stack):
    with stack.clients(3):
        assert fed_eval_clients() == [5.0, 5.0, 5.0]
        assert fed_eval_server() == 5.0


def test_federated_value(stack):
    with stack.clients(3):
        out = fed_value_clients()
        assert out == 3 and out.dtype == np.int32
        out = fed_value_server()
        assert out == 3.5 and _is_f32(out)


# ---------------------------------------------------------------- zip


@sh.federated_computation(F32_AT_C, I32_AT_C)
def fed_zip_clients(a, b):
    return sh.federated_zip([a, b])


@sh.federated_computation(F32_AT_C, I32_AT_C)
def fed_zip_clients_nested(a, b):
    return sh.federated_zip(collections.OrderedDict(x=a, y=[b, a]))


@sh.federated_computation(F32_AT_S, I32_AT_S)
def fed_zip_server(a, b):
    return sh.federated_zip((a, {'q': b}))


@sh.federated_computation(F32_AT_S, F32_AT_C)
def fed_zip_broadcast_and_map(s, c):
    return sh.federated_map(add_pair, sh.federated_zip([sh.federated_broadcast(s), c]))


def test_federated_zip_at_clients(stack):
    out = fed_zip_clients(XS, [1, 2, 3])
    assert out == [[10.0, 1], [11.0, 2], [12.0, 3]]
    assert out[0][1].dtype == np.int32
    nested = fed_zip_clients_nested(XS, [1, 2, 3])
    assert (
        str(fed_zip_clients_nested.type_signature.result)
        == '{<x=float32,y=<int32,float32>>}@CLIENTS'
    )
    assert nested == [collections.OrderedDict(x=x, y=[i, x]) for x, i in zip(XS, [1, 2, 3])]
    assert all(isinstance(v, collections.OrderedDict) for v in nested)


def test_federated_zip_at_server(stack):
    out = fed_zip_server(1.5, 2)
    assert str(fed_zip_server.type_signature.result) == '<float32,<q=int32>>@SERVER'
    assert isinstance(out, tuple) and isinstance(out[1], dict)
    assert out == (1.5, {'q': 2})


def test_zip_of_broadcast_and_client_values(stack):
    assert fed_zip_broadcast_and_map(1.0, XS) == [11.0, 12.0, 13.0]


# ---------------------------------------------------------------- collect, select


@sh.federated_computation(F32_AT_C)
def fed_collect(xs):
    return sh.federated_collect(xs)


@sh.tf_computation(tf.TensorSpec([4], tf.float32), tf.int32)
def select_element(server_val, key):
    return server_val[key] * 10.0


@sh.federated_computation(
    sh.type_at_clients(tf.TensorSpec([None], tf.int32)),
    sh.type_at_server(tf.TensorSpec([4], tf.float32)),
)
def fed_select(keys, server_val):
    return sh.federated_select(keys, 4, server_val, select_element)


def test_federated_collect(stack):
    out = listed(fed_collect(XS))
    assert str(fed_collect.type_signature.result) == 'float32*@SERVER'
    assert out == XS


def test_federated_select(stack):
    keys = [np.array([0, 1], np.int32), np.array([3], np.int32), np.array([], np.int32)]
    out = listed(fed_select(keys, np.array([1.0, 2.0, 3.0, 4.0], np.float32)))
    assert out == [[10.0, 20.0], [40.0], []]


@sh.federated_computation(
    sh.type_at_clients(tf.TensorSpec([None], tf.int32)),
    sh.type_at_server(tf.TensorSpec([4], tf.float32)),
)
def fed_select_max_key_1(keys, server_val):
    return sh.federated_select(keys, 1, server_val, select_element)


def test_federated_select_keys_above_max_key_are_selected(stack):
    # TFF's runtime does not read max_key (federating_executor.cc); TFF's
    # sparse_federated_learning tutorial selects keys above it.
    keys = [np.array([3, 0], np.int32), np.array([2], np.int32), np.array([1], np.int32)]
    out = listed(fed_select_max_key_1(keys, np.array([1.0, 2.0, 3.0, 4.0], np.float32)))
    assert out == [[40.0, 10.0], [30.0], [20.0]]


def test_federated_select_rejects_negative_keys(stack):
    keys = [np.array([0], np.int32), np.array([-1], np.int32), np.array([1], np.int32)]
    with pytest.raises(ValueError, match=r'client 1.*\[-1\].*non-negative'):
        fed_select(keys, np.zeros(4, np.float32))


# ---------------------------------------------------------------- sequences

F32_SEQ = sh.SequenceType(tf.float32)


@sh.tf_computation(tf.float32)
def double(x):
    return x * 2.0


@sh.federated_computation(F32_SEQ)
def seq_ops(ds):
    return [sh.sequence_map(double, ds), sh.sequence_reduce(ds, 0.5, add), sh.sequence_sum(ds)]


@sh.federated_computation(sh.type_at_clients(F32_SEQ))
def fed_seq_ops(ds):
    return [sh.sequence_map(double, ds), sh.sequence_reduce(ds, 0.5, add), sh.sequence_sum(ds)]


@sh.tf_computation(F32_SEQ)
def reduce_dataset(ds):
    return ds.reduce(tf.constant(0.0), lambda acc, x: acc + x * x)


@sh.federated_computation(sh.type_at_clients(F32_SEQ))
def fed_reduce_client_datasets(ds):
    return sh.federated_map(reduce_dataset, ds)


@sh.tf_computation(tf.float32)
def make_dataset(x):
    return tf.data.Dataset.range(3).map(lambda i: tf.cast(i, tf.float32) + x)


@sh.federated_computation(F32_AT_C)
def fed_make_datasets(xs):
    return sh.federated_map(make_dataset, xs)


CLIENT_SEQS = [[1.0, 2.0], [3.0], [4.0, 5.0, 6.0]]


def test_sequence_ops_unplaced(stack):
    ds = tf.data.Dataset.from_tensor_slices(np.array([1.0, 2.0, 3.0], np.float32))
    mapped, reduced, total = seq_ops(ds)
    assert listed(mapped) == [2.0, 4.0, 6.0]
    assert reduced == 6.5 and total == 6.0
    assert listed(seq_ops([1.0, 2.0, 3.0])) == [[2.0, 4.0, 6.0], 6.5, 6.0]  # lists become datasets


def test_sequence_ops_at_clients(stack):
    mapped, reduced, total = fed_seq_ops(CLIENT_SEQS)
    assert (
        str(fed_seq_ops.type_signature.result)
        == '<{float32*}@CLIENTS,{float32}@CLIENTS,{float32}@CLIENTS>'
    )
    assert listed(mapped) == [[2.0, 4.0], [6.0], [8.0, 10.0, 12.0]]
    assert reduced == [3.5, 3.5, 15.5]
    assert total == [3.0, 3.0, 15.0]


def test_client_datasets_reduced_in_a_tf_computation(stack):
    as_lists = fed_reduce_client_datasets(CLIENT_SEQS)
    as_datasets = fed_reduce_client_datasets(
        [tf.data.Dataset.from_tensor_slices(np.array(c, np.float32)) for c in CLIENT_SEQS]
    )
    assert as_lists == as_datasets == [5.0, 9.0, 77.0]


def test_datasets_made_at_clients(stack):
    assert listed(fed_make_datasets([0.0, 10.0])) == [[0.0, 1.0, 2.0], [10.0, 11.0, 12.0]]


# ---------------------------------------------------------------- secure sums


@sh.federated_computation(I32_AT_C)
def secure_bitwidth_4(xs):
    return sh.federated_secure_sum_bitwidth(xs, 4)


@sh.federated_computation(sh.type_at_clients(tf.int8))
def secure_bitwidth_int8(xs):
    return sh.federated_secure_sum_bitwidth(xs, 7)


@sh.federated_computation(sh.type_at_clients([tf.int32, (tf.int64, [2])]))
def secure_bitwidth_struct(xs):
    return sh.federated_secure_sum_bitwidth(xs, [2, 8])


@sh.federated_computation(I32_AT_C)
def secure_modular_5(xs):
    return sh.federated_secure_modular_sum(xs, 5)


@sh.federated_computation(sh.type_at_clients((tf.int32, [2])))
def secure_modular_vector(xs):
    return sh.federated_secure_modular_sum(xs, 7)


def test_secure_sum_bitwidth(stack):
    out = secure_bitwidth_4([15, 15, 15])
    assert out == 45 and out.dtype == np.int32
    # 3 * 127 = 381 fits the secure modulus 2**(7 + 2); the int8 result wraps.
    out = secure_bitwidth_int8([127, 127, 127])
    assert out.dtype == np.int8 and out == 381 - 256 == np.array(381).astype(np.int8)
    small, vec = secure_bitwidth_struct([[3, [255, 0]], [1, [1, 7]], [0, [255, 255]]])
    assert small == 4 and small.dtype == np.int32
    assert vec.dtype == np.int64
    np.testing.assert_array_equal(vec, [511, 262])


@pytest.mark.parametrize('values, client, value', [([1, 16, 2], 1, 16), ([1, 2, -1], 2, -1)])
def test_secure_sum_bitwidth_bounds_name_the_client(stack, values, client, value):
    with pytest.raises(ValueError, match=rf'client {client}\b.*= {value} .*\[0, 15\]'):
        secure_bitwidth_4(values)


def test_secure_sum_bitwidth_checks_every_element(stack):
    with pytest.raises(ValueError, match=r'client 2: element \(1,\) = 256'):
        secure_bitwidth_struct([[3, [255, 0]], [1, [1, 7]], [0, [255, 256]]])


def test_secure_modular_sum(stack):
    out = secure_modular_5([4, 4, 4])
    assert out == 2 and out.dtype == np.int32
    assert secure_modular_5([-1, 3, 4]) == (4 + 3 + 4) % 5  # -1 mod 5 == 4
    assert secure_modular_5([2**31 - 1, 2**31 - 1, 0]) == (2 * (2**31 - 1)) % 5  # no int32 overflow
    np.testing.assert_array_equal(
        secure_modular_vector(
            [np.array([6, -1], np.int32), np.array([6, 20], np.int32), np.array([0, 0], np.int32)]
        ),
        [5, 5],
    )


# ---------------------------------------------------------------- composition


@sh.federated_computation(F32_AT_C)
def inner_mean(xs):
    return sh.federated_mean(xs)


@sh.federated_computation(F32_AT_C)
def outer_calls_inner(xs):
    m = inner_mean(xs)
    return [m, sh.federated_sum(xs), m]


@sh.federated_computation(F32_AT_C)
def uses_closure(xs):
    @sh.federated_computation(F32_AT_S)
    def plus_client_sum(s):
        return sh.federated_map(add_pair, sh.federated_zip([s, sh.federated_sum(xs)]))

    return plus_client_sum(sh.federated_mean(xs))


@sh.federated_computation
def random_used_twice():
    v = sh.federated_eval(random_scalar, sh.SERVER)
    return [v, v, sh.federated_eval(random_scalar, sh.SERVER)]


def test_nested_federated_computations(stack):
    assert outer_calls_inner(XS) == [11.0, 33.0, 11.0]


def test_closure_over_enclosing_parameter(stack):
    assert uses_closure(XS) == 44.0


def test_value_used_twice_is_computed_once(stack):
    a, b, c = random_used_twice()
    assert a == b  # one evaluation, referenced twice
    assert a != c  # a second evaluation draws again


# ---------------------------------------------------------------- structs and containers

Point = collections.namedtuple('Point', ['x', 'y'])


@attrs.define
class Pair:
    a: object
    b: object


@sh.tf_computation(Point(tf.float32, tf.int32))
def swap_point(p):
    return Point(tf.cast(p.y, tf.float32), tf.cast(p.x, tf.int32))


@sh.tf_computation(collections.OrderedDict(a=tf.float32, b=tf.float32))
def sum_and_product(d):
    return collections.OrderedDict(s=d['a'] + d['b'], p=d['a'] * d['b'])


@sh.tf_computation({'a': tf.float32, 'b': tf.int32})
def double_dict(d):
    return {'a': d['a'] * 2, 'b': d['b'] * 2}


@sh.tf_computation(Pair(a=tf.float32, b=tf.int32))
def swap_pair(v):
    return Pair(a=v.b, b=v.a)


@sh.federated_computation(sh.type_at_clients(Point(tf.float32, tf.int32)))
def fed_swap_sum(ps):
    return sh.federated_sum(sh.federated_map(swap_point, ps))


@sh.federated_computation(sh.type_at_clients(Pair(a=tf.float32, b=tf.int32)))
def fed_swap_pairs(ps):
    return sh.federated_map(swap_pair, ps)


@sh.federated_computation(F32_AT_C, F32_AT_S)
def named_results(xs, y):
    return collections.OrderedDict(total=sh.federated_sum(xs), y=y, xs=xs)


@sh.federated_computation([F32_AT_C, F32_AT_S])
def struct_parameter(pair):
    return Point(sh.federated_sum(pair[0]), pair[1])


def test_tf_computation_containers_round_trip(stack):
    out = swap_point(Point(1.5, 2))
    assert type(out) is Point and out == (2.0, 1) and out.y.dtype == np.int32
    out = sum_and_product(collections.OrderedDict(a=2.0, b=3.0))
    assert type(out) is collections.OrderedDict and list(out.items()) == [('s', 5.0), ('p', 6.0)]
    assert sum_and_product({'b': 3.0, 'a': 2.0})['s'] == 5.0  # dicts match by name
    out = double_dict({'a': 1.0, 'b': 2})
    assert type(out) is dict and out == {'a': 2.0, 'b': 4}
    out = swap_pair(Pair(a=1.0, b=2))
    assert type(out) is Pair and out.a == 2 and out.a.dtype == np.int32 and out.b == 1.0


def test_federated_containers_round_trip(stack):
    out = fed_swap_sum([Point(1.0, 2), Point(3.0, 4)])
    assert type(out) is Point and out == (6.0, 4)
    out = fed_swap_pairs([Pair(a=1.0, b=2), Pair(a=3.0, b=4)])
    assert all(type(p) is Pair for p in out) and [(p.a, p.b) for p in out] == [(2, 1.0), (4, 3.0)]
    out = named_results(XS, 3.0)
    assert type(out) is collections.OrderedDict and list(out) == ['total', 'y', 'xs']
    assert out == collections.OrderedDict(total=33.0, y=3.0, xs=XS)
    assert named_results(xs=XS, y=3.0) == out  # keyword arguments
    out = struct_parameter([XS, 3.0])
    assert type(out) is Point and out == (33.0, 3.0)


# ---------------------------------------------------------------- no argument, polymorphism


@sh.tf_computation
def constant_vector():
    return tf.constant([1, 2], tf.int32)


@sh.federated_computation
def fed_no_argument():
    return sh.federated_value(constant_vector(), sh.SERVER)


@sh.tf_computation
def times_two(x):
    return x * 2


@sh.tf_computation
def poly_add(a, b):
    return a + b


@sh.federated_computation(I32_AT_C)
def fed_poly_map(xs):
    return sh.federated_map(times_two, xs)


def test_no_argument_computations(stack):
    assert constant_vector.type_signature.parameter is None
    np.testing.assert_array_equal(constant_vector(), [1, 2])
    out = fed_no_argument()
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, [1, 2])
    with pytest.raises(TypeError, match='takes no argument'):
        fed_no_argument(1)


def test_polymorphic_tf_computations(stack):
    with pytest.raises(TypeError, match='polymorphic'):
        times_two.type_signature
    out = times_two(1.5)
    assert _is_f32(out) and out == 3.0
    out = times_two(3)
    assert out.dtype == np.int32 and out == 6
    out = times_two(np.array([1, 2], np.int64))
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out, [2, 4])
    traced = {str(t) for t in times_two._cache}
    assert {'float32', 'int32', 'int64[2]'} <= traced
    assert fed_poly_map([1, 2, 3]) == [2, 4, 6]
    assert str(times_two.concrete(sh.TensorType(tf.int32)).type_signature) == '(int32 -> int32)'
    assert poly_add(1.0, 2.0) == 3.0
    assert poly_add(1, 2) == 3


# ---------------------------------------------------------------- reproducibility

N_MANY = 1000


def _many_values():
    rng = np.random.default_rng(1234)
    signs = rng.choice(np.array([-1.0, 1.0]), N_MANY)
    return (signs * 10.0 ** rng.uniform(-8, 8, N_MANY)).astype(np.float32)


MANY = _many_values()


def _canonical(values):
    reducer = Reducer(lambda v: v, np.add, np.add, len(values))
    total = reducer.combine([reducer.partial([np.float32(v) for v in values], 0)])
    return total, total / np.float32(len(values))


def test_the_data_is_sensitive_to_the_summation_order():
    total, _ = _canonical(MANY)
    sequential = np.float32(0)
    for v in MANY:
        sequential = sequential + v
    assert total.dtype == np.float32
    assert total.tobytes() != sequential.tobytes()


def test_sum_and_mean_are_bit_identical_run_to_run(stack):
    total, mean = _canonical(MANY)
    values = list(MANY)
    for _ in range(3):
        s, m = fed_sum_and_mean(values)
        assert _is_f32(s) and _is_f32(m)
        assert s.tobytes() == total.tobytes()
        assert m.tobytes() == mean.tobytes()


@pytest.mark.parametrize('clients_per_thread', [1, 7, N_MANY])
def test_sum_and_mean_do_not_depend_on_clients_per_thread(clients_per_thread):
    total, mean = _canonical(MANY)
    factory = sh.framework.thread_debugging_executor_factory(clients_per_thread=clients_per_thread)
    with sh.execution_context(factory):
        s, m = fed_sum_and_mean(list(MANY))
    assert s.tobytes() == total.tobytes()
    assert m.tobytes() == mean.tobytes()


# ---------------------------------------------------------------- execution contexts


def test_sync_call_inside_a_running_event_loop(stack):
    async def main():
        # As in Jupyter: a loop is running in this thread, and the user calls synchronously.
        asyncio.get_running_loop()
        return fed_sum(XS), fed_mean(XS)

    assert asyncio.run(main()) == (33.0, 11.0)
