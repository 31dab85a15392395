"""The process runtime: bit-identity across layouts, faults, large values, batching."""

from __future__ import annotations

import collections
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

import simharness as sh
from fault_injection import (
    blocking_computation,
    kill_mid_computation,  # tests/fault_injection.py
    when_started,
    worker_failing_on_start,
)
from simharness.errors import WorkerCrashedError, WorkerStartError
from simharness.stacks import (
    create_worker_pool,
    process_executor_factory,
    thread_debugging_executor_factory,
)

pytestmark = pytest.mark.process

F32 = tf.float32
VEC_LEN = 2048  # float32[2048]: 8 KiB, above the transport's 4 KiB inline limit
VEC = sh.TensorType(np.float32, [VEC_LEN])


@sh.tf_computation(F32)
def wobble(x):
    # Not exactly-rounded elementwise ops (sin, exp): runs per client through tf.map_fn.
    return tf.sin(x) * tf.exp(-tf.abs(x) * 1e-3) + x


@sh.tf_computation(F32)
def triple(x):
    return x * 3.0 + 0.1  # exactly rounded: vectorized


@sh.tf_computation(F32, F32)
def add(a, b):
    return a + b


@sh.tf_computation(F32)
def ident(a):
    return a


@sh.federated_computation(sh.type_at_clients(F32))
def many_reductions(xs):
    w = sh.federated_map(wobble, xs)
    t = sh.federated_map(triple, xs)
    return (
        sh.federated_sum(w),
        sh.federated_mean(t),
        sh.federated_mean(w, sh.federated_map(triple, w)),
        sh.federated_aggregate(w, 0.0, add, add, ident),
        sh.federated_sum(t),
    )


def _values(n: int, seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    mags = 10.0 ** rng.uniform(-6, 6, size=n)
    signs = rng.choice([-1.0, 1.0], size=n)
    return list((mags * signs).astype(np.float32))


def _bits(result) -> tuple:
    return tuple(np.asarray(v, np.float32).tobytes() for v in result)


def test_bit_identical_across_thread_and_process_layouts(warm_pool, warm_pool_1):
    data = _values(1000)
    with sh.execution_context(thread_debugging_executor_factory(clients_per_thread=1000)):
        expected = _bits(many_reductions(data))
    with sh.execution_context(thread_debugging_executor_factory(clients_per_thread=7)):
        assert _bits(many_reductions(data)) == expected
    # The session's warm pools (1 x 256, 2 x 3), then private pools of other layouts.
    warm = {(1, 256): warm_pool_1, (2, 3): warm_pool}
    for workers, per_worker in [(1, 256), (2, 3), (2, 1), (2, 7), (3, 256), (3, 50)]:
        pool = warm.get((workers, per_worker))
        with process_executor_factory(
            num_workers=workers, clients_per_worker=per_worker, pool=pool
        ) as factory:
            assert (factory.group.num_workers, factory.group.options.clients_per_worker) == (
                workers,
                per_worker,
            )
            with sh.execution_context(factory):
                got = [_bits(many_reductions(data)) for _ in range(2)]
        assert got == [expected, expected], (workers, per_worker)


def test_one_request_per_worker_per_operation(warm_pool):
    @sh.federated_computation(sh.type_at_clients(F32))
    def map_sum(xs):
        return sh.federated_sum(sh.federated_map(triple, xs))

    # 2 workers of at most 3 clients per TF call: many calls per worker, still one request.
    with process_executor_factory(pool=warm_pool) as factory:
        with sh.execution_context(factory):
            counts = []
            for n in (100, 1000):
                map_sum(_values(n))  # warm up (ships the computation once)
                before = factory.stats()['requests']
                map_sum(_values(n))
                counts.append(factory.stats()['requests'] - before)
        stats = factory.stats()
    assert counts[0] == counts[1], counts  # messages grow with workers, not clients
    # The clients' values (Python floats, stacked), the map and the sum: one request per
    # worker (the values ride in the streamed request's plan: `PlanStacked`).
    assert counts[0] == 2, counts
    # A worker's share over INLINE_CLIENT_BYTES goes ahead in a request of its own.
    from simharness.executors.strategy.resolving_strategy import INLINE_CLIENT_BYTES

    with process_executor_factory(pool=warm_pool) as factory:
        with sh.execution_context(factory):
            big = [np.full(INLINE_CLIENT_BYTES // 4 // 20, k, np.float32) for k in range(100)]
            want = sh.federated_computation(
                sh.type_at_clients(sh.TensorType(np.float32, [len(big[0])]))
            )(lambda xs: sh.federated_sum(xs))
            want(big)
            before = factory.stats()['requests']
            got = want(big)
            assert factory.stats()['requests'] - before == 4
    assert np.array_equal(got, np.sum(np.stack(big), axis=0))
    assert stats['bytes_to_workers'] > 0
    assert [w['alive'] for w in stats['workers']] == [True, True]
    assert all(w['rss_bytes'] > 0 and w['cpu_seconds'] >= 0 for w in stats['workers'])


def test_a_broadcast_rides_in_the_round_request_and_is_written_once(warm_pool):
    from computations import broadcast_scaled_sum  # tests/computations.py
    from simharness.executors.wire_values import BROADCAST_MIN_BYTES

    n = BROADCAST_MIN_BYTES // 4 * 2  # big: the broadcast arena's
    comp = broadcast_scaled_sum(n)
    w = np.linspace(-1, 1, n, dtype=np.float32)
    xs = [np.float32(k) / 3 for k in range(10)]
    with sh.execution_context(sh.framework.thread_debugging_executor_factory()):
        want = comp(w, xs)
    with process_executor_factory(pool=warm_pool) as factory:
        with sh.execution_context(factory):
            comp(w, xs)  # warm up (ships the computation once)
            before = factory.stats()
            got = comp(w, xs)
            after = factory.stats()
    # The model inside the round's one request per worker (`PlanShared`), its bytes in
    # the broadcast arena once for both workers (the clients' floats go inline).
    assert after['requests'] - before['requests'] == 2
    sent = after['bytes_to_workers'] - before['bytes_to_workers']
    assert w.nbytes <= sent < 2 * w.nbytes, sent
    assert np.asarray(got).tobytes() == np.asarray(want).tobytes()
    assert warm_pool.broadcast.readers == 0  # every read of it ended


@pytest.mark.faults
def test_killed_worker_raises_then_retry_gives_the_answer(tmp_path):
    # One client per worker: while both clients' computations run, both workers are inside
    # the computation; the kill lands there, not before or after it (no timer).
    first, second = tmp_path / 'first', tmp_path / 'second'
    first.mkdir()
    second.mkdir()
    data = [np.float32(1), np.float32(2)]
    factory = process_executor_factory(num_workers=2, clients_per_worker=1, start=True)
    try:
        pool = factory.group
        with sh.execution_context(factory):
            killer = threading.Thread(target=kill_mid_computation, args=(pool, 1, first, data))
            killer.start()
            with pytest.raises(WorkerCrashedError) as e:
                blocking_computation(first)(data)
            killer.join()
            err = e.value
            assert err.worker_id == 1 and err.exitcode == -9 and 'SIGKILL' in err.likely_cause
            assert err.pid is not None
            # The pool replaced the worker: the next call works (`release` exists now).
            assert blocking_computation(first)(data) == 3.0
        with sh.execution_context(factory, retries=2):
            killer = threading.Thread(target=kill_mid_computation, args=(pool, 0, second, data))
            killer.start()
            # The first attempt cannot finish (worker 0 dies inside it): the answer is the retry's.
            assert blocking_computation(second)(data) == 3.0
            killer.join()
    finally:
        factory.close()


def test_worker_that_cannot_start_gives_a_clear_error():
    with create_worker_pool(num_workers=1) as pool:
        pool.worker_target = worker_failing_on_start
        with pytest.raises(WorkerStartError, match='could not start: RuntimeError: no such device'):
            with process_executor_factory(pool=pool, start=True):
                pass


def test_large_model_round_trip_and_broadcast():
    n = 32 * 1024 * 1024  # 128 MB of float32
    spec = sh.TensorType(np.float32, (n,))

    @sh.tf_computation(spec)
    def scale(w):
        return w * 2.0

    @sh.federated_computation(sh.type_at_server(spec))
    def round_trip(w):
        return sh.federated_mean(sh.federated_map(scale, sh.federated_broadcast(w)))

    w = np.arange(n, dtype=np.float32) % 1000
    # A pool of its own: the warm pool's arenas would keep this test's 128 MB for the session.
    with process_executor_factory(num_workers=2) as factory:
        with sh.execution_context(factory):
            out = round_trip(w)
    np.testing.assert_array_equal(out, w * 2.0)


def test_struct_of_many_small_tensors(warm_pool):
    spec = collections.OrderedDict((f't{i}', sh.TensorType(np.float32, (3,))) for i in range(1000))
    st = sh.to_type(spec)

    @sh.tf_computation(st)
    def bump(s):
        return collections.OrderedDict((k, v + 1.0) for k, v in s.items())

    @sh.federated_computation(sh.type_at_clients(st))
    def go(xs):
        return sh.federated_sum(sh.federated_map(bump, xs))

    value = collections.OrderedDict((f't{i}', np.full(3, i, np.float32)) for i in range(1000))
    with process_executor_factory(pool=warm_pool) as factory:
        with sh.execution_context(factory):
            out = go([value, value, value])
    assert list(out) == list(value)
    np.testing.assert_array_equal(out['t999'], np.full(3, 3 * 1000.0, np.float32))


def test_pool_is_shared_across_cardinalities_and_closes():
    @sh.federated_computation(sh.type_at_clients(F32))
    def s(xs):
        return sh.federated_sum(xs)

    factory = process_executor_factory(num_workers=2, max_cached_stacks=2)
    with sh.execution_context(factory):
        pids = None
        for n in (1, 2, 3, 5, 1):
            assert s([np.float32(1)] * n) == n
            now = [h.pid for h in factory.group.handles]
            pids = pids or now
            assert now == pids  # the same warm workers serve every cardinality
        assert len(factory.cached_cardinalities) == 2
    factory.close()
    factory.close()  # idempotent
    assert all(not h.alive for h in factory.group.handles)


def test_values_stay_in_workers_until_computed(warm_pool):
    @sh.tf_computation(VEC)
    def triple_vec(x):
        return x * 3.0 + 0.1

    @sh.federated_computation(sh.type_at_clients(VEC))
    def chain(xs):
        a = sh.federated_map(triple_vec, xs)
        b = sh.federated_map(triple_vec, a)
        return sh.federated_map(triple_vec, b)

    @sh.federated_computation(sh.type_at_clients(VEC))
    def chain_with_steps(xs):
        a = sh.federated_map(triple_vec, xs)
        b = sh.federated_map(triple_vec, a)
        return a, b, sh.federated_map(triple_vec, b)

    # Tensors above the inline limit: every value that comes back is counted in shared memory.
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(VEC_LEN).astype(np.float32) for _ in range(10)]
    value_bytes = 10 * VEC_LEN * 4
    with process_executor_factory(pool=warm_pool) as factory:
        with sh.execution_context(factory):
            chain(xs)
            before = factory.stats()
            out = chain(xs)
            after = factory.stats()
            steps = chain_with_steps(xs)
            last = factory.stats()
    # The two intermediate results never came back to the driver: only the final values did
    # (and when they are asked for, they do: the count sees them).
    assert after['bytes_from_workers'] - before['bytes_from_workers'] == value_bytes
    assert last['bytes_from_workers'] - after['bytes_from_workers'] == 3 * value_bytes
    want = [((x * 3.0 + 0.1) * 3.0 + 0.1) * 3.0 + 0.1 for x in xs]
    assert len(out) == 10
    np.testing.assert_allclose(np.stack(out), np.stack(want), rtol=1e-6)
    np.testing.assert_allclose(np.stack(steps[2]), np.stack(want), rtol=1e-6)


def test_close_during_a_running_computation_returns_promptly(tmp_path):
    # One client per worker: both run the blocking computation when all have started, so
    # the close lands during the run, every time (the file barrier, not a sleep).
    total = blocking_computation(tmp_path)
    data = [np.float32(1), np.float32(2)]
    factory = process_executor_factory(num_workers=2, start=True)
    errors = []

    def run():
        try:
            with sh.execution_context(factory):
                total(data)
        except Exception as e:  # the workers die under it
            errors.append(e)

    t = threading.Thread(target=run)
    t.start()
    took = []

    def close():
        t0 = time.monotonic()
        factory.close()
        took.append(time.monotonic() - t0)

    when_started(tmp_path, data, close)
    t.join(60)
    assert not t.is_alive()
    assert took and took[0] < 30  # a hang check: the close does not wait for the run
    assert errors and isinstance(errors[0], (WorkerCrashedError, sh.errors.ExecutorClosedError))


def test_a_deferred_request_goes_with_the_next_one(warm_pool):
    """`submit(..., defer=True)` queues without sending (the worker is not woken for it);
    the next request to the same worker takes it along, in order."""
    from simharness.runtime import protocol as P

    warm_pool.start()
    h = warm_pool.handles[0]
    header, buffers = P.encode_message(P.Request(P.Op.PING, 0, []))
    done = []
    first = h.submit(header, list(buffers), P.Op.PING, h.generation, defer=True)
    first.add_done_callback(lambda f: done.append('first'))
    time.sleep(0.3)
    assert not first.done(), 'a deferred request was sent on its own'
    second = h.submit(header, list(buffers), P.Op.PING, h.generation)
    second.add_done_callback(lambda f: done.append('second'))
    assert second.result(60).response.ok and first.result(60).response.ok
    assert done == ['first', 'second']
