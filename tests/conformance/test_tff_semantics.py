"""TFF programs that run unchanged (issue 11): implicit zips and federated_computations as functions.

Every test taking `stack` runs on each stack of `tests/stacks.py`. The
programs are written as in TFF's tutorials (`custom_federated_algorithms`
1 and 2, `building_your_own_federated_learning_algorithm`), with `tff.`
renamed to `sh.`.
"""

from __future__ import annotations

import collections

import numpy as np
import pytest
import tensorflow as tf

import simharness as sh
from simharness.core import building_blocks as bb

F32_AT_C = sh.type_at_clients(tf.float32)
F32_AT_S = sh.type_at_server(tf.float32)
I32_AT_C = sh.type_at_clients(tf.int32)


@sh.tf_computation(tf.float32)
def add_one(x):
    return x + 1.0


@sh.tf_computation(tf.float32, tf.float32)
def add(a, b):
    return a + b


@sh.tf_computation(tf.float32, tf.float32)
def exceeds_threshold_fn(reading, threshold):
    return tf.cast(reading > threshold, tf.float32)


# ---------------------------------------------------------------- implicit zip


@sh.federated_computation(F32_AT_C, F32_AT_S)
def fraction_above_threshold(readings, threshold):
    # custom_federated_algorithms_1, verbatim but for the prefix.
    return sh.federated_mean(
        sh.federated_map(exceeds_threshold_fn, [readings, sh.federated_broadcast(threshold)])
    )


@sh.federated_computation(F32_AT_C, F32_AT_C)
def map_over_a_tuple(a, b):
    return sh.federated_map(add, (a, b))


@sh.tf_computation(collections.OrderedDict(x=tf.float32, y=tf.float32))
def x_minus_y(d):
    return d['x'] - d['y']


@sh.federated_computation(F32_AT_C, F32_AT_C)
def map_over_a_dict(a, b):
    return sh.federated_map(x_minus_y, collections.OrderedDict(x=a, y=b))


@sh.federated_computation(F32_AT_S, F32_AT_S)
def apply_over_a_list(a, b):
    return [sh.federated_map(add, [a, b]), sh.federated_apply(add, [a, b])]


@sh.federated_computation(F32_AT_C, F32_AT_C)
def sum_and_mean_of_a_list(a, b):
    return [sh.federated_sum([a, b]), sh.federated_mean((a, b))]


@sh.federated_computation(F32_AT_S, F32_AT_S)
def broadcast_a_list(a, b):
    return sh.federated_broadcast([a, b])


@sh.tf_computation([tf.float32, tf.float32], [tf.float32, tf.float32])
def add_pairs(acc, x):
    return [acc[0] + x[0], acc[1] + x[1]]


@sh.tf_computation([tf.float32, tf.float32])
def pair_identity(acc):
    return acc


@sh.federated_computation(F32_AT_C, F32_AT_C)
def aggregate_a_list(a, b):
    return sh.federated_aggregate([a, b], [0.0, 0.0], add_pairs, add_pairs, pair_identity)


@sh.federated_computation(I32_AT_C, I32_AT_C)
def secure_sums_of_a_tuple(a, b):
    return [
        sh.federated_secure_sum_bitwidth((a, b), 8),
        sh.federated_secure_modular_sum((a, b), 100),
    ]


@sh.federated_computation(F32_AT_C, F32_AT_C)
def collect_a_list(a, b):
    return sh.federated_collect([a, b])


def test_federated_map_zips_a_list_of_federated_values(stack):
    assert fraction_above_threshold([68.0, 70.0, 80.0], 69.0) == pytest.approx(2.0 / 3.0)


def test_federated_map_zips_tuples_and_dicts(stack):
    assert map_over_a_tuple([1.0, 2.0], [10.0, 20.0]) == [11.0, 22.0]
    assert map_over_a_dict([1.0, 2.0], [10.0, 20.0]) == [-9.0, -18.0]


def test_federated_map_and_apply_zip_server_values(stack):
    assert apply_over_a_list(1.0, 2.0) == [3.0, 3.0]
    ts = apply_over_a_list.type_signature.result
    assert str(ts) == '<float32@SERVER,float32@SERVER>'


def test_aggregations_zip_their_value(stack):
    total, mean = sum_and_mean_of_a_list([1.0, 2.0, 3.0], [10.0, 20.0, 30.0])
    assert list(total) == [6.0, 60.0]
    assert list(mean) == [2.0, 20.0]
    assert list(aggregate_a_list([1.0, 2.0], [3.0, 4.0])) == [3.0, 7.0]
    bitwidth, modular = secure_sums_of_a_tuple([1, 2, 3], [50, 60, 70])
    assert list(bitwidth) == [6, 180] and list(modular) == [6, 80]
    assert [list(x) for x in collect_a_list([1.0, 2.0], [3.0, 4.0])] == [[1.0, 3.0], [2.0, 4.0]]


def test_federated_broadcast_zips_server_values(stack):
    assert str(broadcast_a_list.type_signature.result) == '<float32,float32>@CLIENTS'
    with stack.clients(2):
        assert list(broadcast_a_list(1.0, 2.0)) == [1.0, 2.0]  # all equal: one value, as in TFF


def test_implicit_zip_needs_one_placement_and_federated_values():
    with pytest.raises(TypeError, match='same placement'):

        @sh.federated_computation(F32_AT_C, F32_AT_S)
        def mixed(a, b):
            return sh.federated_map(add, [a, b])

    with pytest.raises(TypeError, match='federated_map: expected a federated value'):

        @sh.federated_computation(F32_AT_C)
        def unplaced_member(a):
            return sh.federated_map(add, [a, 1.0])


def test_federated_select_does_not_zip():
    # TFF checks client_keys and server_val as they are: no implicit zip.
    @sh.tf_computation(tf.float32, tf.int32)
    def select(s, k):
        return s

    with pytest.raises(TypeError, match='server_val'):

        @sh.federated_computation(sh.type_at_clients((tf.int32, [1])), F32_AT_S)
        def sel(keys, s):
            return sh.federated_select(keys, sh.federated_value(3, sh.SERVER), [s, s], select)


# ---------------------------------------------------------------- federated computations as functions


@sh.federated_computation(tf.float32)
def add_one_twice(x):
    return add_one(add_one(x))


@sh.federated_computation(F32_AT_C)
def map_a_federated_computation(xs):
    return sh.federated_map(add_one_twice, xs)


@sh.federated_computation(F32_AT_S)
def apply_a_federated_computation(x):
    return sh.federated_map(add_one_twice, x)


@sh.federated_computation(tf.float32, tf.float32)
def sum_plus_one(acc, x):
    return add_one(add(acc, x))


@sh.federated_computation(F32_AT_C)
def aggregate_with_federated_computations(xs):
    return sh.federated_aggregate(xs, 0.0, sum_plus_one, add, add_one_twice)


@sh.federated_computation
def five_fc():
    return add_one(sh.tf_computation(lambda: tf.constant(4.0))())


@sh.federated_computation
def eval_a_federated_computation():
    return sh.federated_eval(five_fc, sh.CLIENTS)


def test_federated_map_of_a_federated_computation(stack):
    assert map_a_federated_computation([1.0, 2.0, 3.0]) == [3.0, 4.0, 5.0]
    assert apply_a_federated_computation(1.0) == 3.0


def test_a_federated_computation_passed_to_an_intrinsic_is_compiled_into_tf():
    body = map_a_federated_computation.to_building_block().result
    call = body.locals[0][1]
    assert isinstance(call.arg.elements[0][1], bb.CompiledComputation)


def test_other_intrinsics_take_federated_computations(stack):
    with stack.clients(3):
        # accumulate: +1 per client; merge: +; report: +2
        assert aggregate_with_federated_computations([1.0, 2.0, 3.0]) == 11.0
        assert eval_a_federated_computation() == [5.0, 5.0, 5.0]


# ------ custom_federated_algorithms_2: local training with a nested computation capturing the rate

BATCH_SPEC = collections.OrderedDict(
    x=sh.TensorType(tf.float32, [None]), y=sh.TensorType(tf.float32, [None])
)
MODEL_SPEC = collections.OrderedDict(w=tf.float32, b=tf.float32)
LOCAL_DATA = sh.SequenceType(BATCH_SPEC)


@sh.tf_computation(MODEL_SPEC, BATCH_SPEC, tf.float32)
def batch_train(model, batch, learning_rate):
    err = model['w'] * batch['x'] + model['b'] - batch['y']
    return collections.OrderedDict(
        w=model['w'] - learning_rate * tf.reduce_mean(err * batch['x']),
        b=model['b'] - learning_rate * tf.reduce_mean(err),
    )


@sh.tf_computation(MODEL_SPEC, BATCH_SPEC)
def batch_loss(model, batch):
    return tf.reduce_mean((model['w'] * batch['x'] + model['b'] - batch['y']) ** 2)


@sh.federated_computation(MODEL_SPEC, tf.float32, LOCAL_DATA)
def local_train(initial_model, learning_rate, all_batches):
    @sh.federated_computation(MODEL_SPEC, BATCH_SPEC)
    def batch_fn(model, batch):
        return batch_train(model, batch, learning_rate)

    return sh.sequence_reduce(all_batches, initial_model, batch_fn)


@sh.federated_computation(MODEL_SPEC, LOCAL_DATA)
def local_eval(model, all_batches):
    return sh.sequence_sum(
        sh.sequence_map(
            sh.federated_computation(lambda b: batch_loss(model, b), BATCH_SPEC), all_batches
        )
    )


@sh.federated_computation(sh.type_at_server(MODEL_SPEC), F32_AT_S, sh.type_at_clients(LOCAL_DATA))
def federated_train(model, learning_rate, data):
    return sh.federated_mean(
        sh.federated_map(
            local_train,
            [sh.federated_broadcast(model), sh.federated_broadcast(learning_rate), data],
        )
    )


@sh.federated_computation(sh.type_at_server(MODEL_SPEC), sh.type_at_clients(LOCAL_DATA))
def federated_eval(model, data):
    return sh.federated_mean(sh.federated_map(local_eval, [sh.federated_broadcast(model), data]))


def _batches(k):
    x = np.arange(3, dtype=np.float32) + k
    return [collections.OrderedDict(x=x, y=2.0 * x + k) for _ in range(2)]


def _local_train_np(k, lr=0.1):
    w = b = 0.0
    for batch in _batches(k):
        err = w * batch['x'] + b - batch['y']
        w, b = w - lr * np.mean(err * batch['x']), b - lr * np.mean(err)
    return w, b


def test_nested_computation_capturing_an_outer_parameter_in_sequence_reduce(stack):
    out = local_train(collections.OrderedDict(w=0.0, b=0.0), 0.1, _batches(0))
    assert [out['w'], out['b']] == pytest.approx(_local_train_np(0), rel=1e-6)


def test_sequence_map_of_a_lambda_capturing_an_outer_parameter(stack):
    # w=1, b=0, y=2x: the squared error of a batch is mean(x^2) = 5/3; two batches.
    assert local_eval(collections.OrderedDict(w=1.0, b=0.0), _batches(0)) == pytest.approx(10 / 3)


def test_federated_training_and_evaluation_of_tutorial_2(stack):
    with stack.clients(3):
        out = federated_train(
            collections.OrderedDict(w=0.0, b=0.0), 0.1, [_batches(k) for k in range(3)]
        )
        expected = np.mean([_local_train_np(k) for k in range(3)], axis=0)
        assert [out['w'], out['b']] == pytest.approx(list(expected), rel=1e-5)
        loss = federated_eval(
            collections.OrderedDict(w=2.0, b=0.0), [_batches(k) for k in range(3)]
        )
        # y - pred = k for every example of client k: 2 * k^2 per client.
        assert loss == pytest.approx(np.mean([2.0 * k * k for k in range(3)]))


F32_SEQ = sh.SequenceType(tf.float32)


@sh.federated_computation(F32_SEQ, tf.float32)
def scaled_sum(ds, scale):
    @sh.federated_computation(tf.float32, tf.float32)
    def op(acc, x):
        return add(acc, exceeds_threshold_fn(x, scale))

    return sh.sequence_reduce(ds, 0.0, op)


@sh.federated_computation(sh.type_at_clients(F32_SEQ), tf.float32)
def count_above_unplaced_threshold(ds, threshold):
    @sh.federated_computation(tf.float32, tf.float32)
    def op(acc, x):
        return add(acc, exceeds_threshold_fn(x, threshold))

    return [
        sh.sequence_reduce(ds, 0.0, op),
        sh.sequence_sum(
            sh.sequence_map(
                sh.federated_computation(lambda x: exceeds_threshold_fn(x, threshold), tf.float32),
                ds,
            )
        ),
    ]


@sh.federated_computation(F32_AT_C, tf.float32)
def map_capturing_an_unplaced_parameter(xs, offset):
    return sh.federated_map(sh.federated_computation(lambda x: add(x, offset), tf.float32), xs)


def test_capturing_reduction_of_an_unplaced_sequence(stack):
    assert scaled_sum([1.0, 2.0, 3.0, 4.0], 2.5) == 2.0


def test_capturing_functions_over_federated_sequences(stack):
    seqs = [[1.0, 2.0], [3.0], [4.0, 5.0, 6.0]]
    reduced, mapped = count_above_unplaced_threshold(seqs, 2.5)
    assert reduced == [0.0, 1.0, 3.0] and mapped == [0.0, 1.0, 3.0]


def test_federated_map_of_a_function_capturing_an_unplaced_value(stack):
    assert map_capturing_an_unplaced_parameter([1.0, 2.0], 10.0) == [11.0, 12.0]


def test_capturing_a_federated_value_is_refused_with_a_clear_error():
    with pytest.raises(
        TypeError, match=r'refers to .* of type \{float32\}@CLIENTS.*unplaced values only'
    ):

        @sh.federated_computation(F32_AT_C)
        def captures_client_values(xs):
            @sh.federated_computation(tf.float32)
            def inner(x):
                return sh.federated_sum(xs)

            return sh.federated_map(inner, xs)


def test_a_function_calling_a_federated_intrinsic_is_refused_with_a_clear_error():
    with pytest.raises(TypeError, match='federated_map: cannot compile .*federated'):

        @sh.federated_computation(F32_AT_C)
        def bad(xs):
            @sh.federated_computation(tf.float32)
            def inner(x):
                return sh.federated_map(add_one, sh.federated_value(x, sh.CLIENTS))

            return sh.federated_map(inner, xs)


def test_capturing_functions_are_refused_where_tff_takes_values():
    with pytest.raises(TypeError, match='federated_aggregate accumulate: the function refers to'):

        @sh.federated_computation(F32_AT_C, tf.float32)
        def agg(xs, c):
            @sh.federated_computation(tf.float32, tf.float32)
            def acc(a, x):
                return add(a, add(x, c))

            return sh.federated_aggregate(xs, 0.0, acc, add, add_one)
