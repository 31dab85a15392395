"""Shared pools stay correct (sessions), and every worker fault ends cleanly.

Signals go to real worker processes; every hang is bounded by the test's own
timeout. The autouse leak check (conftest) runs after each test.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

import simharness as sh
from fault_injection import (
    blocking_computation,
    kill_mid_computation,  # tests/fault_injection.py
    worker_killed_on_start,
)
from fault_workers import worker_hanging_on_stream_reduce  # tests/fault_workers.py
from simharness.errors import WorkerCrashedError, WorkerStartError, WorkerTimeoutError
from simharness.stacks import (
    create_worker_pool,
    process_executor_factory,
    thread_debugging_executor_factory,
)

pytestmark = [pytest.mark.process, pytest.mark.timeout(180)]

F32 = tf.float32


@sh.tf_computation(F32)
def wobble(x):
    return tf.sin(x) * 3.0 + x


@sh.tf_computation(F32, F32)
def add(a, b):
    return a + b


@sh.tf_computation(F32)
def ident(a):
    return a


@sh.federated_computation(sh.type_at_clients(F32))
def summary(xs):
    w = sh.federated_map(wobble, xs)
    return (
        sh.federated_sum(w),
        sh.federated_mean(xs),
        sh.federated_aggregate(w, 0.0, add, add, ident),
    )


@sh.federated_computation(sh.type_at_clients(F32))
def per_client(xs):
    return sh.federated_map(wobble, xs)


@sh.tf_computation(F32)
def slow(x):
    # ~0.3 s a client here: a request of 4 clients outlasts a 0.3 s request timeout by
    # more than the pool's 0.25 s liveness check interval (1,500 steps sometimes did not)
    m = tf.fill([200, 200], x * 1e-6)

    def body(i, a):
        return i + 1, tf.matmul(a, m) * 1e-3 + m

    _, a = tf.while_loop(lambda i, a: i < 4000, body, (0, m))
    return tf.reduce_sum(a) * 0.0 + x


@sh.federated_computation(sh.type_at_clients(F32))
def slow_total(xs):
    return sh.federated_sum(sh.federated_map(slow, xs))


def _data(n: int, seed: int) -> list:
    rng = np.random.default_rng(seed)
    return list(rng.standard_normal(n).astype(np.float32) * 10)


def _bits(x) -> bytes:
    return b''.join(
        np.asarray(v, np.float32).tobytes()
        for v in np.atleast_1d(np.asarray(x, dtype=object)).ravel()
    )


def _expected(fn, data):
    with sh.execution_context(thread_debugging_executor_factory(clients_per_thread=5)):
        return fn(data)


def test_stacks_of_many_cardinalities_and_factories_share_one_pool(warm_pool):
    """Train on 4 / evaluate on 6 / train on 4 / 9 ...: every call gets its own right answer."""
    sizes = [4, 6, 4, 9, 1, 6, 33, 4, 9, 2]
    ref = {}
    for n in sizes:
        d = _data(n, n)
        ref[n] = (_expected(summary, d), _expected(per_client, d))
    # The session's warm pool (2 workers, 3 clients per worker).
    pool = warm_pool
    assert [(st['sessions'], st['values']) for st in pool.ping()] == [(0, 0), (0, 0)]
    # Two factories on the pool; a small stack cache, so that stacks are evicted and rebuilt.
    fa = process_executor_factory(pool=pool, max_cached_stacks=2)
    fb = process_executor_factory(pool=pool, max_cached_stacks=3)
    ca, cb = sh.ExecutionContext(fa), sh.ExecutionContext(fb)
    for k, n in enumerate(sizes):
        d = _data(n, n)
        c = ca if k % 2 else cb
        s, c = c.invoke(summary, d), c.invoke(per_client, d)
        assert [np.float32(v).tobytes() for v in s] == [
            np.float32(v).tobytes() for v in ref[n][0]
        ], n
        assert [np.float32(v).tobytes() for v in c] == [
            np.float32(v).tobytes() for v in ref[n][1]
        ], n
    assert any(st and st['sessions'] > 0 for st in pool.ping())
    ca.close()
    cb.close()
    fa.close()
    fb.close()
    # Closing the stacks disposed of their sessions: no value is left in any worker.
    states = pool.ping()
    assert all(st is not None for st in states)
    assert [(st['sessions'], st['values']) for st in states] == [(0, 0), (0, 0)], states
    assert all(h.alive for h in pool.handles)  # closing the factories left the pool running


def test_calls_from_several_threads_on_one_context_are_all_right(warm_pool):
    d50, d70 = _data(50, 1), _data(70, 2)
    want = {50: _expected(summary, d50), 70: _expected(summary, d70)}
    errors: list = []
    with process_executor_factory(pool=warm_pool) as factory:
        with sh.execution_context(factory) as ctx:

            def worker(data, n):
                try:
                    for _ in range(6):
                        got = ctx.invoke(summary, data)
                        if [np.float32(v).tobytes() for v in got] != [
                            np.float32(v).tobytes() for v in want[n]
                        ]:
                            errors.append((n, got, want[n]))
                except Exception as e:  # pragma: no cover - reported below
                    errors.append(e)

            threads = [
                threading.Thread(target=worker, args=(d, len(d))) for d in (d50, d70, d50, d70)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
    assert not errors, errors[:3]


def test_worker_killed_between_two_requests_of_one_call_is_retryable(monkeypatch):
    from simharness.executors.strategy.resolving_strategy import FederatedResolvingStrategy
    from simharness.executors.worker_delegating import WorkerDelegatingExecutor

    data = _data(40, 3)
    want = _expected(summary, data)
    killed = []
    # The clients' values sent by a request of their own (as values that do not stack are;
    # stackable ones go inside the streamed request: `LazyLocal`), the call's first request
    # to each worker whose values a later one uses; its reductions then run in one streamed
    # request: kill worker 1 right after the first.
    monkeypatch.setattr(FederatedResolvingStrategy, '_local_rows', lambda *a: None)
    original = WorkerDelegatingExecutor.create_values

    async def kill_after_first_reduction(self, *args, **kwargs):
        out = await original(self, *args, **kwargs)
        if not killed and self.worker_id == 1:
            pid = self._handle.pid
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
            while self._handle._live:  # let the pool notice, as it would in real life
                time.sleep(0.01)
        return out

    monkeypatch.setattr(WorkerDelegatingExecutor, 'create_values', kill_after_first_reduction)
    with process_executor_factory(num_workers=2, clients_per_worker=7) as factory:
        with sh.execution_context(factory):
            with pytest.raises(WorkerCrashedError) as e:
                summary(data)
            assert e.value.worker_id == 1
        killed.clear()
        with sh.execution_context(factory, retries=3):
            got = summary(data)
        assert killed, 'the fault was not injected'
        assert [np.float32(v).tobytes() for v in got] == [np.float32(v).tobytes() for v in want]


@pytest.mark.timeout(120)
def test_sigterm_to_a_busy_worker_fails_the_call_cleanly(tmp_path):
    data = [np.float32(1), np.float32(2)]
    with process_executor_factory(num_workers=2, clients_per_worker=1, start=True) as factory:
        with sh.execution_context(factory):
            # The signal lands while both workers are inside the computation (no timer);
            # worker 0's SIGTERM handler runs as the op returns, before it answers.
            t = threading.Thread(
                target=kill_mid_computation,
                args=(factory.group, 0, tmp_path, data, signal.SIGTERM, False),
            )
            t.start()
            with pytest.raises(WorkerCrashedError) as e:
                blocking_computation(tmp_path)(data)
            t.join()
            err = e.value
            assert err.worker_id == 0 and err.exitcode == -signal.SIGTERM
            assert 'SIGTERM' in err.likely_cause and 'OOM' in err.likely_cause
            # The worker is replaced on next use.
            assert slow_total([np.float32(0), np.float32(1)]) == 1.0


@pytest.mark.timeout(120)
def test_a_stopped_worker_fails_the_call_after_the_liveness_timeout():
    data = _data(6, 4)
    with process_executor_factory(num_workers=2, liveness_timeout=1.5, start=True) as factory:
        pool = factory.group
        with sh.execution_context(factory):
            summary(data)
            pid = pool.handles[1].pid
            os.kill(pid, signal.SIGSTOP)
            t0 = time.monotonic()
            with pytest.raises(WorkerTimeoutError) as e:
                summary(data)
            waited = time.monotonic() - t0
            err = e.value
            assert err.worker_id == 1 and err.pid == pid and err.reason == 'stopped'
            assert 'worker 1' in str(err) and 'stopped' in str(err)
            assert waited < 30
            # It was killed (a stopped process cannot clean up) and is replaced.
            assert summary(data)[1] == pytest.approx(float(np.mean(data)), rel=1e-5)


@pytest.mark.timeout(120)
def test_request_timeout_names_the_worker_and_is_retryable():
    data = [np.float32(i) for i in range(4)]
    with process_executor_factory(num_workers=1, request_timeout=0.3, start=True) as factory:
        with sh.execution_context(factory):
            with pytest.raises(WorkerTimeoutError) as e:
                slow_total(data)
            err = e.value
            assert err.reason == 'timeout' and err.worker_id == 0 and err.op
            assert 'request_timeout=0.3' in str(err)
        factory.group.request_timeout = None
        with sh.execution_context(factory):
            assert slow_total(data) == 6.0


def test_after_a_failed_start_the_pool_recovers_and_broadcasts_work():
    big = np.arange(100_000, dtype=np.float32)  # 400 KB: through the broadcast arena

    @sh.tf_computation(sh.TensorType(F32, [100_000]), F32)
    def dot(w, x):
        return tf.reduce_sum(w) * 0.0 + x

    @sh.federated_computation(
        sh.type_at_server(sh.TensorType(F32, [100_000])), sh.type_at_clients(F32)
    )
    def use(w, xs):
        return sh.federated_sum(
            sh.federated_map(dot, sh.federated_zip((sh.federated_broadcast(w), xs)))
        )

    with process_executor_factory(num_workers=2, start_timeout=0.001) as factory:
        with sh.execution_context(factory) as ctx:
            with pytest.raises(WorkerStartError, match=r'worker 0 \(pid \d+\) did not start'):
                use(big, [1.0, 2.0, 3.0])
            factory.group.start_timeout = 120.0
            for _ in range(2):
                assert ctx.invoke(use, (big, [1.0, 2.0, 3.0])) == 6.0


def test_a_worker_killed_while_starting_is_reported_with_pid_and_signal():
    with create_worker_pool(num_workers=1) as pool:
        pool.worker_target = worker_killed_on_start
        with pytest.raises(WorkerStartError) as e:
            with process_executor_factory(pool=pool, start=True):
                pass
    msg = str(e.value)
    assert re_search(r'worker 0 \(pid \d+\) could not start', msg), msg
    assert 'SIGKILL' in msg, msg


def re_search(pattern: str, text: str):
    import re

    return re.search(pattern, text)


@sh.tf_computation(F32)
def must_be_positive(x):
    with tf.control_dependencies([tf.debugging.assert_positive(x, message='must be positive')]):
        return tf.identity(x)


@sh.federated_computation(sh.type_at_clients(F32))
def checked_sum(xs):
    return sh.federated_sum(sh.federated_map(must_be_positive, xs))


def test_a_failing_call_does_not_leak_its_error_into_a_concurrent_one(warm_pool):
    good = [np.float32(i + 1) for i in range(12)]
    bad = [np.float32(1.0)] * 11 + [np.float32(-1.0)]
    outcomes: dict = {'good': [], 'bad': []}
    with process_executor_factory(pool=warm_pool) as factory:
        with sh.execution_context(factory) as ctx:

            def run(kind, data):
                for _ in range(8):
                    try:
                        outcomes[kind].append(ctx.invoke(checked_sum, data))
                    except Exception as e:
                        outcomes[kind].append(e)

            threads = [
                threading.Thread(target=run, args=('good', good)),
                threading.Thread(target=run, args=('bad', bad)),
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
    assert outcomes['good'] == [78.0] * 8, outcomes['good']
    assert len(outcomes['bad']) == 8
    assert all(
        isinstance(e, tf.errors.InvalidArgumentError) and 'must be positive' in str(e)
        for e in outcomes['bad']
    ), outcomes['bad']


@pytest.mark.timeout(120)
@pytest.mark.faults
def test_a_deadlocked_worker_fails_the_call_after_the_liveness_timeout():
    data = _data(6, 5)
    with process_executor_factory(num_workers=2, liveness_timeout=1.5) as factory:
        factory.group.worker_target = worker_hanging_on_stream_reduce
        factory.group.start()
        with sh.execution_context(factory):
            t0 = time.monotonic()
            with pytest.raises(WorkerTimeoutError) as e:
                summary(data)
            err = e.value
            assert err.reason == 'no progress' and err.op == 'STREAM_REDUCE'
            assert 'used no CPU' in str(err) and f'worker {err.worker_id}' in str(err)
            assert time.monotonic() - t0 < 30


def test_pool_start_removes_segments_left_by_a_dead_driver():
    import _posixshmem

    with open('/proc/sys/kernel/pid_max', encoding='ascii') as f:
        dead_pid = int(f.read()) + 1  # no process can have it
    name = f'simharness_{dead_pid}_test{os.urandom(4).hex()}'
    fd = _posixshmem.shm_open('/' + name, os.O_CREAT | os.O_EXCL | os.O_RDWR, mode=0o600)
    os.close(fd)
    try:
        with create_worker_pool(num_workers=1) as pool:
            pool.start()
        assert not os.path.exists(os.path.join('/dev/shm', name))
    finally:
        if os.path.exists(os.path.join('/dev/shm', name)):
            os.unlink(os.path.join('/dev/shm', name))
