"""TFF material ported by renaming `tff.` to `simharness.`: what a QA pass found.

Tutorial and executor-test snippets of TFF 0.17-0.19 that failed once, kept
as regression tests on every stack of the registry.
"""

from __future__ import annotations

import asyncio
import collections

import numpy as np
import pytest
import tensorflow as tf

import simharness as sh
from simharness.core.structure import Struct
from simharness.framework import (
    EagerTFExecutor,
    ReferenceResolvingExecutor,
    ThreadDelegatingExecutor,
)


def run(coro):
    return asyncio.run(coro)


def test_eager_value_internal_representation():
    # TFF's eager_tf_executor_test: `val.internal_representation` is the tensor / Struct held.
    ex = EagerTFExecutor()
    val = run(ex.create_value(10, tf.int32))
    assert isinstance(val.internal_representation, tf.Tensor)
    assert val.internal_representation.numpy() == 10
    val = run(
        ex.create_value(
            collections.OrderedDict([('a', 10), ('b', 20)]), [('a', tf.int32), ('b', tf.int32)]
        )
    )
    assert isinstance(val.internal_representation, Struct)
    assert str(val.type_signature) == '<a=int32,b=int32>'
    assert val.internal_representation.b.numpy() == 20
    ex.close()


def test_delegating_values_internal_representation():
    inner = EagerTFExecutor()
    threaded = ThreadDelegatingExecutor(inner)
    ex = ReferenceResolvingExecutor(threaded)
    try:
        a = run(ex.create_value(3, tf.int32))
        b = run(ex.create_value(4.0, tf.float32))
        target = a.internal_representation
        assert target.internal_representation.internal_representation.numpy() == 3
        s = run(ex.create_struct([a, b]))
        rep = s.internal_representation
        assert isinstance(rep, Struct) and len(rep) == 2
        assert rep[1] is b
    finally:
        ex.close()


def test_stack_values_have_internal_representation(stack):
    ex = stack.factory.create_executor({sh.CLIENTS: 3})
    val = run(ex.create_value([1.0, 2.0, 3.0], sh.type_at_clients(tf.float32)))
    assert val.internal_representation is not None
    assert [float(x) for x in run(val.compute())] == [1.0, 2.0, 3.0]


def test_mapreduce_temperature_sensor_example(stack):
    # backends/mapreduce/test_utils.get_temperature_sensor_example, composed as its iterative process.
    server_state_type = collections.OrderedDict(num_rounds=tf.int32)
    accumulator_type = collections.OrderedDict(num_total=tf.int32, num_over=tf.int32)

    @sh.tf_computation
    def initialize():
        return collections.OrderedDict(num_rounds=tf.constant(0))

    @sh.tf_computation(server_state_type)
    def prepare(state):
        return collections.OrderedDict(
            max_temperature=32.0 + tf.cast(state['num_rounds'], tf.float32)
        )

    @sh.tf_computation(
        sh.SequenceType(tf.float32), collections.OrderedDict(max_temperature=tf.float32)
    )
    def work(data, state):
        reduced = data.reduce(
            {'num': np.int32(0), 'max': np.float32(-459.67)},
            lambda s, x: {'num': s['num'] + 1, 'max': tf.maximum(s['max'], x)},
        )
        return (
            collections.OrderedDict(is_over=reduced['max'] > state['max_temperature']),
            [],
            [],
            [],
        )

    @sh.tf_computation
    def zero():
        return collections.OrderedDict(num_total=tf.constant(0), num_over=tf.constant(0))

    @sh.tf_computation(accumulator_type, collections.OrderedDict(is_over=tf.bool))
    def accumulate(acc, update):
        return collections.OrderedDict(
            num_total=acc['num_total'] + 1,
            num_over=acc['num_over'] + tf.cast(update['is_over'], tf.int32),
        )

    @sh.tf_computation(accumulator_type, accumulator_type)
    def merge(a, b):
        return collections.OrderedDict(
            num_total=a['num_total'] + b['num_total'], num_over=a['num_over'] + b['num_over']
        )

    @sh.tf_computation(merge.type_signature.result)
    def report(acc):
        return collections.OrderedDict(
            ratio_over_threshold=(
                tf.cast(acc['num_over'], tf.float32) / tf.cast(acc['num_total'], tf.float32)
            )
        )

    @sh.tf_computation(
        server_state_type, (collections.OrderedDict(ratio_over_threshold=tf.float32), ())
    )
    def update(state, upd):
        return collections.OrderedDict(num_rounds=state['num_rounds'] + 1), upd[0]

    @sh.federated_computation
    def init_fn():
        return sh.federated_value(initialize(), sh.SERVER)

    @sh.federated_computation(
        sh.type_at_server(server_state_type), sh.type_at_clients(sh.SequenceType(tf.float32))
    )
    def next_fn(state, data):
        out = sh.federated_map(
            work, [data, sh.federated_broadcast(sh.federated_map(prepare, state))]
        )
        agg = sh.federated_aggregate(out[0], zero(), accumulate, merge, report)
        new_state, metrics = sh.federated_map(
            update, [state, sh.federated_zip([agg, sh.federated_value((), sh.SERVER)])]
        )
        return new_state, metrics

    process = sh.templates.IterativeProcess(init_fn, next_fn)
    data = [[30.0, 33.0], [31.0], [35.0, 29.0, 32.5], [32.0], [34.0, 36.0]]
    state = process.initialize()
    for r in range(4):
        state, metrics = process.next(state, data)
        want = np.mean([max(d) > 32.0 + r for d in data])
        np.testing.assert_allclose(metrics['ratio_over_threshold'], want, rtol=1e-6)
        assert state['num_rounds'] == r + 1


def test_create_selection_by_name_on_every_executor(stack):
    # TFF 0.17's executors take create_selection(source, index=None, name=None).
    ex = stack.factory.create_executor({sh.CLIENTS: 2})
    t = [('a', tf.int32), ('b', tf.float32)]
    server = run(ex.create_value(collections.OrderedDict(a=1, b=2.5), sh.type_at_server(t)))
    b = run(ex.create_selection(server, name='b'))
    assert str(b.type_signature) == 'float32@SERVER' and float(run(b.compute())) == 2.5
    assert int(run(run(ex.create_selection(server, index=0)).compute())) == 1
    with pytest.raises(ValueError, match='exactly one of index and name'):
        run(ex.create_selection(server, 0, name='a'))
    with pytest.raises(ValueError, match='exactly one of index and name'):
        run(ex.create_selection(server))
    raw = EagerTFExecutor()
    v = run(raw.create_value(collections.OrderedDict(a=1, b=2.5), t))
    assert float(run(run(raw.create_selection(v, name='b')).compute())) == 2.5
    with pytest.raises(ValueError, match="no element named 'c'"):
        run(raw.create_selection(v, name='c'))
    raw.close()


def test_lambda_executor_is_tffs_earlier_name_with_create_tuple():
    from simharness.framework import LambdaExecutor

    assert LambdaExecutor is ReferenceResolvingExecutor
    ex = LambdaExecutor(EagerTFExecutor())
    try:
        a = run(ex.create_value(1, tf.int32))
        b = run(ex.create_value(2.0, tf.float32))
        t = run(ex.create_tuple([('a', a), ('b', b)]))
        assert str(t.type_signature) == '<a=int32,b=float32>'
        assert float(run(run(ex.create_selection(t, name='b')).compute())) == 2.0
    finally:
        ex.close()


def test_aggregate_with_dataset_accumulators_keeps_client_order(stack):
    # TFF 0.88's backend_test (dataset concat aggregation): datasets as the values and the
    # accumulator of federated_aggregate. 40 clients span three reduction chunks and, on
    # the process stacks, several blocks and workers: the concatenation is in client order.
    element = sh.TensorType(np.float32, [2])

    @sh.tensorflow.computation
    def zero():
        return tf.data.Dataset.from_tensor_slices(tf.zeros([0, 2], tf.float32))

    @sh.tensorflow.computation
    def concat(a, b):
        return a.concatenate(b)

    @sh.tensorflow.computation
    def identity(ds):
        return ds

    @sh.federated_computation(sh.FederatedType(sh.SequenceType(element), sh.CLIENTS))
    def gather(client_ds):
        return sh.federated_aggregate(client_ds, zero(), concat, concat, identity)

    n = 40
    data = [
        tf.data.Dataset.from_tensor_slices(np.full([1 + i % 3, 2], i, np.float32)) for i in range(n)
    ]
    out = gather(data)
    expected = [np.full([2], i, np.float32) for i in range(n) for _ in range(1 + i % 3)]
    assert len(out) == len(expected)
    for got, want in zip(out, expected):
        np.testing.assert_array_equal(got, want)
