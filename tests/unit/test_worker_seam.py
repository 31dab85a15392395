"""The driver side of the worker seam on the in-process loopback transport (no process).

`WorkerDelegatingExecutor` over `runtime.loopback.LoopbackGroup`: every request
goes through the codec both ways to a `WorkerService` on a thread of its own,
so pipelining, poisoned ids, generation changes, leases and frees are tested
without starting a worker process; `WorkerGroupExecutorFactory` builds a
stack over the same group.
"""

import asyncio
import collections
import gc
import threading

import numpy as np
import pytest
import tensorflow as tf

import simharness as sh
from simharness.core import types as T
from simharness.errors import ExecutorClosedError, WorkerCrashedError
from simharness.executors.base import BatchExecutor
from simharness.executors.leaf.eager_tf import EagerTFExecutor
from simharness.executors.thread_delegating import ThreadDelegatingExecutor
from simharness.executors.wire_values import BROADCAST_MIN_BYTES
from simharness.executors.worker_delegating import WorkerDelegatingExecutor
from simharness.runtime import codec, protocol as P
from simharness.runtime.loopback import LoopbackGroup
from simharness.runtime.seam import WorkerGroup, WorkerHandle
from simharness.runtime.service import WorkerService
from simharness.stacks import WorkerGroupExecutorFactory, thread_debugging_executor_factory

F32 = T.TensorType(np.float32)


@sh.tf_computation(tf.float32)
def add_one(x):
    return x + 1.0


@sh.tf_computation(tf.float32)
def check_positive(x):
    with tf.control_dependencies([tf.debugging.assert_positive(x, message='must be positive')]):
        return tf.identity(x)


class GatedService(WorkerService):
    """A service that answers only once `gate` is set (the worker is busy until then)."""

    def __init__(self, gate: threading.Event):
        super().__init__(EagerTFExecutor(), worker_id=0)
        self.gate = gate

    def handle(self, req):
        assert self.gate.wait(60), 'the test never opened the gate'
        return super().handle(req)


@pytest.fixture
def group():
    g = LoopbackGroup(lambda k: WorkerService(EagerTFExecutor(), worker_id=k), num_workers=2)
    yield g
    g.close()


def run(coro):
    return asyncio.run(coro)


def ops(handle):
    # Without LOAD_OP_LIBRARIES: the driver sends it when this process has op libraries
    # (tensorflow_text, imported by another test of this process), whatever the test does.
    return [P.Op(r.op).name for r in handle.requests if r.op != P.Op.LOAD_OP_LIBRARIES]


def test_loopback_classes_implement_the_seam(group):
    assert isinstance(group, WorkerGroup)
    assert all(isinstance(h, WorkerHandle) for h in group.handles)


def test_pipelined_requests_return_before_the_worker_answers():
    gate = threading.Event()
    with LoopbackGroup(lambda k: GatedService(gate)) as g:
        ex = WorkerDelegatingExecutor(g.handles[0])

        async def main():
            fn = await ex.create_value(add_one.to_building_block())
            xs = await ex.create_values([np.float32(1), np.float32(2)], F32)
            ys = await ex.create_map(fn, xs)  # the worker has answered nothing yet
            assert not g.handles[0].answered
            assert [y.type_signature for y in ys] == [F32, F32]
            gate.set()
            return await ex.compute_many(ys)

        assert [float(v) for v in run(main())] == [2.0, 3.0]
        # One request per operation, in order, with one wait (COMPUTE_MANY).
        assert ops(g.handles[0]) == [
            'OPEN_SESSION',
            'CREATE_VALUE',
            'CREATE_VALUES_STACKED',
            'CREATE_MAP',
            'COMPUTE_MANY',
        ]
        ex.close()


def test_a_failed_pipelined_request_poisons_its_ids(group):
    ex = WorkerDelegatingExecutor(group.handles[0])

    async def main():
        fn = await ex.create_value(check_positive.to_building_block())
        bad = await ex.create_call(fn, await ex.create_value(np.float32(-1), F32))
        good = await ex.create_call(fn, await ex.create_value(np.float32(2), F32))
        # The failure of an earlier pipelined request surfaces at the next wait ...
        with pytest.raises(tf.errors.InvalidArgumentError, match='must be positive'):
            await ex.compute_many([good])
        # ... once: the session goes on, and the failed request's ids stay poisoned.
        assert float((await ex.compute_many([good]))[0]) == 2.0
        with pytest.raises(tf.errors.InvalidArgumentError, match='must be positive'):
            await ex.compute_many([bad])

    run(main())
    ex.close()


def test_a_replaced_worker_makes_old_values_fail_and_new_ones_work(group):
    ex = WorkerDelegatingExecutor(group.handles[0])
    h = group.handles[0]
    old = run(ex.create_value(np.float32(5), F32))
    assert h.generation == 1
    h.crash()
    with pytest.raises(WorkerCrashedError, match='replaced after a crash'):
        run(ex.compute_many([old]))  # the next use restarts the worker: generation 2
    assert h.generation == 2
    new = run(ex.create_value(np.float32(7), F32))
    assert float(run(ex.compute_many([new]))[0]) == 7.0
    # The session was opened again on the new worker.
    assert ops(h)[0] == 'OPEN_SESSION'
    ex.close()


def test_a_crash_fails_the_requests_in_flight():
    gate = threading.Event()
    with LoopbackGroup(lambda k: GatedService(gate)) as g:
        ex = WorkerDelegatingExecutor(g.handles[0])
        v = run(ex.create_value(np.float32(1), F32))

        async def main():
            task = asyncio.ensure_future(ex.compute_many([v]))
            await asyncio.sleep(0)  # the request is submitted
            g.handles[0].crash()
            gate.set()
            return await task

        with pytest.raises(WorkerCrashedError, match='died'):
            run(main())
        ex.close()


def test_dropped_values_are_freed_with_the_next_request(group):
    ex = WorkerDelegatingExecutor(group.handles[0])
    h = group.handles[0]
    xs = run(ex.create_values([np.float32(k) for k in range(4)], F32))
    run(ex.compute_many(xs[:1]))
    session = h.service.sessions[ex.session_id]
    assert len(session.values) == 4
    del xs
    gc.collect()
    sent = len(h.requests)
    keep = run(ex.create_value(np.float32(9), F32))
    # The create_value is pipelined: it returns before the worker has even decoded it. A
    # worker serves a session's requests in order, so once the compute (which waits) is
    # answered, the worker has run the create_value too: that is the barrier the checks
    # below need (they used to race with the worker's thread).
    assert float(run(ex.compute_many([keep]))[0]) == 9.0
    # The lease of the block, one range, rode on the first request after the drop.
    assert [(P.Op(r.op).name, r.free) for r in h.requests[sent:]] == [
        ('CREATE_VALUE', [[1, 4]]),
        ('COMPUTE_MANY', []),
    ]
    assert list(session.values) == [6]  # (ids 5 and 7 were the computes')
    ex.close()
    header, buffers = P.encode_message(P.Request(P.Op.PING, 0, []))
    assert (
        h.submit(header, buffers, P.Op.PING, h.generation).result(60).response.ok
    )  # in order: after it
    assert ex.session_id not in h.service.sessions  # CLOSE_SESSION disposed of the session


def test_broadcasts_go_through_the_arena_and_every_read_ends():
    gate = threading.Event()
    with LoopbackGroup(lambda k: GatedService(gate), num_workers=2) as g:
        g.start()
        ex = [WorkerDelegatingExecutor(h) for h in g.handles]
        w = np.arange(BROADCAST_MIN_BYTES // 4, dtype=np.float32)

        async def main():
            # Pipelined: both workers' requests are out before either answers.
            vals = [await e.create_value(w, T.TensorType(np.float32, w.shape)) for e in ex]
            assert g.broadcast.readers == 2
            gate.set()
            return await asyncio.gather(*[e.compute_many([v]) for e, v in zip(ex, vals)])

        for o in run(main()):
            np.testing.assert_array_equal(o[0], w)
        assert g.broadcast.bytes_written == w.nbytes  # one copy for both workers
        assert g.broadcast.readers == 0
        for e in ex:
            e.close()


def test_a_value_shared_by_workers_is_made_plain_and_encoded_once(monkeypatch):
    """`share_value` prepares a broadcast once; each worker gets the value (big: through the
    arena, small: inline)."""
    made = []
    real = codec.Packed.__init__

    def counting(self, value):
        made.append(value)
        real(self, value)

    monkeypatch.setattr(codec.Packed, '__init__', counting)
    with LoopbackGroup(lambda k: WorkerService(EagerTFExecutor(), worker_id=k), num_workers=3) as g:
        g.start()
        ex = [WorkerDelegatingExecutor(h) for h in g.handles]
        big = collections.OrderedDict(
            w=tf.constant(np.arange(BROADCAST_MIN_BYTES // 4, dtype=np.float32)), b=np.float32(3)
        )
        small = [np.int32(7), np.arange(5, dtype=np.float64)]
        for value in (big, small):
            t = T.infer_type(value)
            shared = {}
            forms = [e.share_value(value, t, shared) for e in ex]
            assert len(made) == 1 and all(f is forms[0] for f in forms)
            made.clear()

            async def main():
                vals = [await e.create_value(f, t) for e, f in zip(ex, forms)]
                return await asyncio.gather(*[e.compute_many([v]) for e, v in zip(ex, vals)])

            for out in run(main()):
                got = out[0]
                for x, y in zip(got, value.values() if isinstance(value, dict) else value):
                    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
        assert g.broadcast.bytes_written >= BROADCAST_MIN_BYTES  # big: through the arena
        assert [P.Op(r.op).name for r in g.handles[2].requests].count('CREATE_VALUE') == 2
        for e in ex:
            e.close()


def test_a_closed_group_refuses_requests(group):
    ex = WorkerDelegatingExecutor(group.handles[0])
    group.close()
    with pytest.raises(ExecutorClosedError, match='pool is closed'):
        run(ex.create_value(np.float32(1), F32))


def test_executors_say_their_abilities_without_probing():
    leaf = EagerTFExecutor()
    thread = ThreadDelegatingExecutor(leaf)
    try:
        assert leaf.can_stream and thread.can_stream
        assert thread.worker_id is None and leaf.worker_id is None
        with LoopbackGroup(lambda k: WorkerService(EagerTFExecutor(), worker_id=k)) as g:
            ex = WorkerDelegatingExecutor(g.handles[0])
            assert ex.can_stream and ex.worker_id == 0 and not ex.can_share(object())
            ex.close()

        class NoStream(ThreadDelegatingExecutor):
            create_streamed_reductions = BatchExecutor.create_streamed_reductions
            can_stream = BatchExecutor.can_stream

        plain = NoStream(EagerTFExecutor())
        try:
            assert plain.can_stream is False
            with pytest.raises(NotImplementedError, match='NoStream does not stream'):
                run(plain.create_streamed_reductions([], [], 0, 0, 0))
        finally:
            plain.close()
    finally:
        thread.close()


def test_one_stack_factory_over_a_loopback_group_gives_the_thread_stack_bits():
    @sh.tf_computation(tf.float32)
    def scale(x):
        return x * 0.1 + 0.3

    @sh.federated_computation(sh.type_at_clients(tf.float32))
    def mean_of_scaled(xs):
        return sh.federated_mean(sh.federated_map(scale, xs))

    data = [np.float32(k) / 7 for k in range(5)]
    with sh.execution_context(thread_debugging_executor_factory()):
        expected = mean_of_scaled(data)
    group = LoopbackGroup(lambda k: WorkerService(EagerTFExecutor(), worker_id=k), num_workers=2)
    factory = WorkerGroupExecutorFactory(group)
    with sh.execution_context(factory):
        got = mean_of_scaled(data)
    factory.close()
    assert np.asarray(got).tobytes() == np.asarray(expected).tobytes()
    assert group.closed  # the factory owned the group
    assert all(h.requests for h in group.handles)  # both workers hosted clients


def test_a_cohort_too_small_for_every_worker_goes_to_fewer_whole_chunks_same_bits():
    from simharness.stack_factories import split_for_workers

    # Fewer than a chunk (16 clients) per worker: one chunk per active worker, by the
    # numbers alone; two chunks or more per worker, or under two in all: as before.
    assert split_for_workers(100, 16) == split_for_workers(100, 8) == [16] * 6 + [4]
    assert split_for_workers(100, 4) == [25] * 4 and split_for_workers(100, 2) == [48, 52]
    assert split_for_workers(20, 4) == [5] * 4

    @sh.tf_computation(tf.float32)
    def square(x):
        return x * x + 0.1

    @sh.federated_computation(sh.type_at_clients(tf.float32))
    def mean_of_squares(xs):
        return sh.federated_mean(sh.federated_map(square, xs))

    data = [np.float32(np.sin(k)) * 3 for k in range(40)]
    with sh.execution_context(thread_debugging_executor_factory()):
        expected = mean_of_squares(data)
    group = LoopbackGroup(lambda k: WorkerService(EagerTFExecutor(), worker_id=k), num_workers=5)
    factory = WorkerGroupExecutorFactory(group)
    with sh.execution_context(factory):
        got = mean_of_squares(data)
    factory.close()
    assert np.asarray(got).tobytes() == np.asarray(expected).tobytes()
    # 40 clients on 5 workers: 16 + 16 + 8 on three of them; the other two got nothing.
    assert [bool(h.requests) for h in group.handles] == [True] * 3 + [False] * 2
    # What the CLI's metrics rows report as the round's active workers.
    assert factory.active_workers(40) == 3 and factory.active_workers(200) == 5
    assert factory.active_workers(3) == 3 and factory.active_workers(0) == 0


@pytest.mark.parametrize('size', ['small', 'big'])
def test_a_broadcast_goes_inside_the_plan_unless_big_where_a_prefix_is_not_placed(size):
    from computations import broadcast_scaled_sum  # tests/computations.py

    n = 8 if size == 'small' else BROADCAST_MIN_BYTES // 4
    comp = broadcast_scaled_sum(n)
    w = np.linspace(-1, 1, n, dtype=np.float32)
    xs = [np.float32(k) / 7 for k in range(6)]
    with sh.execution_context(thread_debugging_executor_factory()):
        want = comp(w, xs)
    group = LoopbackGroup(lambda k: WorkerService(EagerTFExecutor(), worker_id=k), num_workers=2)
    assert not group.handles[0].places_prefix
    factory = WorkerGroupExecutorFactory(group)
    with sh.execution_context(factory):
        comp(w, xs)  # ships the computation
        seen = len(group.handles[0].requests)
        got = comp(w, xs)
        ops = [P.Op(r.op).name for r in group.handles[0].requests[seen:]]
    factory.close()
    assert np.asarray(got).tobytes() == np.asarray(want).tobytes()
    # Small: inside the round's one request. Big, on a transport that does not place it
    # once for all workers inside a request: sent alone first, through its arena.
    assert ops == (['STREAM_REDUCE'] if size == 'small' else ['CREATE_VALUE', 'STREAM_REDUCE'])


def test_the_local_grpc_and_ray_transports_implement_the_seam():
    # Nothing is started: the classes are checked, not the workers.
    from simharness.runtime.grpc.client import RemoteServices
    from simharness.runtime.ray.handle import RayWorkerHandle
    from simharness.runtime.ray.workers import RayWorkers
    from simharness.hosts.ray_actor import RayWorker
    from simharness.stacks import create_worker_pool

    with create_worker_pool(num_workers=1) as pool:
        assert isinstance(pool, WorkerGroup) and isinstance(pool.handles[0], WorkerHandle)
        assert pool.handles[0].lends
    workers = RayWorkers(1, actor=RayWorker)
    try:
        assert isinstance(workers, WorkerGroup)
        handle = RayWorkerHandle(workers, 0)
        assert isinstance(handle, WorkerHandle) and not handle.lends
    finally:
        workers.close()
    services = RemoteServices(['127.0.0.1:1'])
    try:
        assert isinstance(services, WorkerGroup) and not services.started
    finally:
        services.close()


DS = sh.SequenceType(sh.TensorType(tf.float32, [None, 3]))


@sh.tf_computation(DS)
def ds_total(ds):
    return ds.reduce(0.0, lambda a, b: a + tf.reduce_sum(b))


def _datasets(rows, seed):
    rng = np.random.default_rng(seed)
    return [
        tf.data.Dataset.from_tensor_slices(rng.random((n, 3)).astype(np.float32)).batch(2)
        for n in rows
    ]


def _totals(ex, datasets):
    """`ds_total` of each dataset, computed by `ex`'s worker."""

    async def main():
        fn = await ex.create_value(ds_total.to_building_block())
        return [
            float(v)
            for v in await ex.compute_many(
                await ex.create_map(fn, await ex.create_values(datasets, DS))
            )
        ]

    return run(main())


def test_client_datasets_of_one_layout_cross_stacked_and_serve_again(group):
    h = group.handles[0]
    ex = WorkerDelegatingExecutor(h)
    same = _datasets([5, 5, 5, 5], seed=1)
    ragged = _datasets([5, 4, 5], seed=2)

    def totals(datasets):
        return _totals(ex, datasets)

    def expected(datasets):
        return [float(sum(tf.reduce_sum(b) for b in d)) for d in datasets]

    assert totals(same) == pytest.approx(expected(same), rel=1e-6)
    assert ops(h).count('CREATE_VALUES_STACKED') == 1  # one array per component, not per client
    assert totals(same) == pytest.approx(expected(same), rel=1e-6)
    assert totals(list(same)) == pytest.approx(expected(same), rel=1e-6)  # another list of them
    assert ops(h).count('CREATE_VALUES_STACKED') == 1  # the same datasets: the same values
    assert totals(same[::-1]) == pytest.approx(expected(same[::-1]), rel=1e-6)  # reordered
    assert ops(h).count('CREATE_VALUES_STACKED') == 2
    assert totals(ragged) == pytest.approx(expected(ragged), rel=1e-6)  # not one layout
    assert ops(h).count('CREATE_VALUES') == 1
    assert totals(same) == pytest.approx(expected(same), rel=1e-6)  # other datasets came between
    assert ops(h).count('CREATE_VALUES_STACKED') == 3
    h.crash()  # a replaced worker: its values are gone; the next call starts it again
    # first, embeds the function there anew and sends the datasets again
    assert totals(same) == pytest.approx(expected(same), rel=1e-6)
    assert ops(h).count('CREATE_VALUES_STACKED') == 4
    ex.close()


def test_repeatable_pipelines_serve_again_and_others_are_read_anew(group):
    h = group.handles[0]
    ex = WorkerDelegatingExecutor(h)
    rng = np.random.default_rng(3)
    arrays = [rng.random((6, 3)).astype(np.float32) for _ in range(3)]
    mapped = [tf.data.Dataset.from_tensor_slices(a).batch(2).map(lambda b: b * 2.0) for a in arrays]
    unseeded = [tf.data.Dataset.from_tensor_slices(a).shuffle(6).batch(2) for a in arrays]

    def totals(datasets):
        return _totals(ex, datasets)

    want = [float(2.0 * a.sum()) for a in arrays]
    assert totals(mapped) == pytest.approx(want, rel=1e-6)
    assert ops(h).count('CREATE_VALUES') == 1
    assert totals(mapped) == pytest.approx(want, rel=1e-6)
    assert ops(h).count('CREATE_VALUES') == 1  # repeatable: the worker's values serve again
    assert totals(unseeded) == pytest.approx([float(a.sum()) for a in arrays], rel=1e-5)
    assert totals(unseeded) == pytest.approx([float(a.sum()) for a in arrays], rel=1e-5)
    assert ops(h).count('CREATE_VALUES') == 3  # an unseeded shuffle: sent (and read) anew
    ex.close()


def test_the_driver_names_its_op_libraries_once_per_change(group, monkeypatch, caplog):
    from simharness.runtime import op_libraries

    first = (('not_installed_pkg', 'ops/_a.so'),)
    second = first + (('not_installed_pkg', 'ops/_b.so'),)
    listed = [first]
    monkeypatch.setattr(op_libraries, 'loaded', lambda: listed[0])
    h = group.handles[0]
    ex = WorkerDelegatingExecutor(h)

    async def main():
        await ex.create_values([np.float32(1)], F32)
        await ex.create_values([np.float32(2)], F32)  # the same tuple: nothing more to say
        listed[0] = second
        (v,) = await ex.create_values([np.float32(3)], F32)
        # Pipelined: the worker thread logs a request when it decodes it; the value's
        # answer comes after every request before it was decoded.
        assert await v.compute() == np.float32(3)

    run(main())
    loads = [r.args[0] for r in h.requests if r.op == P.Op.LOAD_OP_LIBRARIES]
    assert loads == [[list(x) for x in first], [list(x) for x in second]]
    ex.close()
    # The worker loads them only when a graph needs an op it does not know: an unrelated
    # error leaves them expected; 'Op type not registered' loads them (here: not installed,
    # logged) and asks for the operation to run again.
    op_libraries.expect(second)
    assert not op_libraries.load_expected_for(ValueError('something else'))
    with caplog.at_level('WARNING', logger=op_libraries.__name__):
        assert op_libraries.load_expected_for(
            RuntimeError("Op type not registered 'X>Y' in binary running on vm")
        )
    assert 'not_installed_pkg' in caplog.text
    assert not op_libraries.load_expected_for(RuntimeError('Op type not registered'))
