"""The remote stack: bit-identical to the thread stack; TFF's RemoteExecutor API on a service."""

from __future__ import annotations

import asyncio
import collections

import numpy as np
import pytest
import tensorflow as tf

import simharness as sh
from simharness.executors.remote import RemoteExecutor
from simharness.stacks import local_executor_factory, remote_executor_factory

from computations import round_data, run_round  # tests/computations.py

pytestmark = pytest.mark.remote


def test_bit_identical_to_the_thread_stack_over_1000_clients(remote_pair):
    args = round_data(1000)
    thread = run_round(local_executor_factory(), args)
    remote = run_round(remote_executor_factory(services=remote_pair.services), args)
    for a, b in zip(thread, remote):
        a, b = np.asarray(a), np.asarray(b)
        assert a.dtype == b.dtype and a.shape == b.shape
        assert a.tobytes() == b.tobytes(), (a, b)
    # Not a trivial agreement: another client order gives other bits.
    xs, ws, s = args
    shuffled = run_round(local_executor_factory(), (xs[::-1], ws[::-1], s))
    assert np.asarray(shuffled[0]).tobytes() != np.asarray(thread[0]).tobytes()


def test_clients_are_spread_over_both_services(remote_pair):
    before = [i['requests'] for i in remote_pair.services.info()]
    run_round(remote_executor_factory(services=remote_pair.services), round_data(40))
    after = [i['requests'] for i in remote_pair.services.info()]
    assert all(a > b for a, b in zip(after, before)), (before, after)


def test_factory_from_addresses_owns_and_closes_its_connections(remote_pair):
    factory = remote_executor_factory(remote_pair.addresses)
    with factory:
        with sh.execution_context(factory):
            assert np.allclose(_run_mean(), 2.0)
        assert [s['address'] for s in factory.stats()['services']] == remote_pair.addresses
    assert factory.group.closed
    with pytest.raises(sh.errors.ExecutorClosedError):
        factory.create_executor({sh.CLIENTS: 3})


@sh.federated_computation(sh.type_at_clients(tf.float32))
def _mean(xs):
    return sh.federated_mean(xs)


def _run_mean():
    return _mean([1.0, 2.0, 3.0])


def test_remote_executor_factory_checks_its_arguments():
    with pytest.raises(TypeError, match='dispose_batch_size'):
        remote_executor_factory(['127.0.0.1:1'], dispose_batch_size=1.5)
    with pytest.raises(ValueError, match='dispose_batch_size'):
        remote_executor_factory(['127.0.0.1:1'], dispose_batch_size=0)
    with pytest.raises(ValueError, match='at least one service'):
        remote_executor_factory([])
    with pytest.raises(TypeError, match="address 'host:port'"):
        remote_executor_factory([42])
    with pytest.raises(ValueError, match="'host:port'"):
        remote_executor_factory(['nohost'])


# ---------------------------------------------------------------- RemoteExecutor, as in TFF


def _values_held(address):
    from simharness.runtime.grpc.client import RemoteServices

    with RemoteServices([address]) as s:
        return s.info()[0]['values']


@sh.tf_computation(tf.float32)
def _double(x):
    return x * 2.0


def test_remote_executor_tff_methods(remote_pair):
    import grpc
    from simharness.runtime.proto.executor_service_pb2_grpc import ExecutorServiceStub

    address = remote_pair.addresses[1]
    base = _values_held(address)  # other tests' stacks are closed: nothing else changes it
    channel = grpc.insecure_channel(address)
    ex = RemoteExecutor(ExecutorServiceStub(channel))
    try:

        async def body():
            ex.set_cardinalities({sh.CLIENTS: 3})
            v = await ex.create_value(3.0, tf.float32)
            fn = await ex.create_value(
                _double.to_building_block() if hasattr(_double, 'to_building_block') else _double
            )
            r = await ex.create_call(fn, v)
            s = await ex.create_struct(collections.OrderedDict(a=r, b=v))
            a = await ex.create_selection(s, name='a')
            b = await ex.create_selection(s, index=1)
            return await a.compute(), await b.compute()

        a, b = asyncio.run(body())
        assert a == np.float32(6.0) and b == np.float32(3.0)
        assert _values_held(address) > base
    finally:
        ex.close()
    # close() released everything it held in the service; the user's channel stays open.
    assert _eventually(lambda: _values_held(address) == base)
    channel.close()


def test_remote_executor_set_cardinalities_bounds_block_operations(remote_pair):
    ex = RemoteExecutor(remote_pair.addresses[1])
    try:
        ex.set_cardinalities({sh.CLIENTS: 2})
        with pytest.raises(ValueError, match='3 clients.*set_cardinalities fixed 2'):
            asyncio.run(ex.create_values([1.0, 2.0, 3.0], tf.float32))
        with pytest.raises(TypeError, match='cardinalities'):
            ex.set_cardinalities([2])
    finally:
        ex.close()


def test_stream_structs_sends_element_by_element(remote_pair):
    address = remote_pair.addresses[1]
    big = collections.OrderedDict(
        w=np.arange(300_000, dtype=np.float32),
        b=np.ones(3, np.float32),
        inner=[np.full(10, 2, np.int32), np.float32(5)],
    )
    t = sh.to_type(
        collections.OrderedDict(
            w=sh.TensorType(tf.float32, [300_000]),
            b=sh.TensorType(tf.float32, [3]),
            inner=[sh.TensorType(tf.int32, [10]), tf.float32],
        )
    )
    requests = {}
    for stream in (False, True):
        ex = RemoteExecutor(address, stream_structs=stream)
        try:
            before = _requests(address)
            out = asyncio.run(_create_and_compute(ex, big, t))
            requests[stream] = _requests(address) - before
            assert np.array_equal(out['w'], big['w']) and out['inner'][1] == 5
            assert out['inner'][0].dtype == np.int32
        finally:
            ex.close()
    # streamed: one message per leaf (4) and per struct (2) instead of one for the whole value
    assert requests[True] == requests[False] + 5, requests


def _requests(address):
    from simharness.runtime.grpc.client import RemoteServices

    with RemoteServices([address]) as s:
        return s.info()[0]['requests']


async def _create_and_compute(ex, value, t):
    v = await ex.create_value(value, t)
    return await v.compute()


def _eventually(fn, timeout=20.0):
    import time

    deadline = time.monotonic() + timeout
    while True:
        got = fn()
        if got or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


def test_dispose_batch_size_frees_dropped_values_in_batches(remote_pair):
    import time

    address = remote_pair.addresses[1]
    base = _values_held(address)
    ex = RemoteExecutor(address, dispose_batch_size=5)
    held = lambda: _values_held(address) - base  # noqa: E731
    try:

        async def make(n):
            out = [await ex.create_value(float(i), tf.float32) for i in range(n)]
            await out[-1].compute()  # the service has stored them all
            return out

        vals = asyncio.run(make(4))
        assert held() == 4
        del vals[:]  # 4 dropped: fewer than the batch, nothing sent on its own
        time.sleep(0.5)
        assert held() == 4
        more = asyncio.run(make(1))
        assert held() == 1  # the next request carried the 4 dropped ids
        del more[:]
        vals = asyncio.run(make(6))  # frees the 1 dropped
        assert held() == 6
        del vals[:]  # the 5th dropped id sends a FREE of 5 at once; the 6th waits
        assert _eventually(lambda: held() == 1)
    finally:
        ex.close()


@pytest.mark.parametrize('stream_structs', [False, True])
def test_a_round_broadcast_crosses_as_the_executor_sends_it(remote_pair, stream_structs):
    # Small: inside the round's plan; big: alone first (gRPC places no prefix of a request);
    # with stream_structs the executor sends it its own way first. The bits of the thread stack.
    from computations import broadcast_scaled_sum  # tests/computations.py
    from simharness.executors.wire_values import BROADCAST_MIN_BYTES

    xs = [np.float32(k) / 7 for k in range(9)]
    for n in (8, BROADCAST_MIN_BYTES // 4):
        comp = broadcast_scaled_sum(n)
        w = np.linspace(-1, 1, n, dtype=np.float32)
        with sh.execution_context(local_executor_factory()):
            want = comp(w, xs)
        factory = remote_executor_factory(
            services=remote_pair.services, stream_structs=stream_structs
        )
        with sh.execution_context(factory):
            got = comp(w, xs)
        assert np.asarray(got).tobytes() == np.asarray(want).tobytes()


def test_custom_ops_load_in_the_services(remote_pair):
    # tensorflow_text's ops in a client dataset's graph: each service (`simharness serve`,
    # which never imported tensorflow_text) loads the driver's op libraries, named by package,
    # from its own installation when the graph needs them.
    tf_text = pytest.importorskip('tensorflow_text')

    def words(line):
        tokens = tf_text.WhitespaceTokenizer().tokenize(tf.constant([line]))[0]
        return tf.data.Dataset.from_tensor_slices(tokens).map(tf_text.case_fold_utf8)

    @sh.tf_computation(sh.SequenceType(np.str_))
    def count_the(ws):
        return ws.reduce(np.int32(0), lambda n, w: n + tf.cast(tf.equal(w, 'the'), tf.int32))

    @sh.federated_computation(sh.type_at_clients(sh.SequenceType(np.str_)))
    def total(clients):
        return sh.federated_sum(sh.federated_map(count_the, clients))

    data = [words('The cat and THE hat'), words('the end'), words('none here'), words('The')]
    with sh.execution_context(remote_executor_factory(services=remote_pair.services)):
        assert total(data) == 4
