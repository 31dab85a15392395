"""Unit tests of ThreadDelegatingExecutor: its thread, its loop, and close()."""

from __future__ import annotations

import asyncio
import threading

import pytest
import tensorflow as tf

import simharness as sh
from simharness.core import types as T
from simharness.errors import SimharnessTypeError
from simharness.executors.leaf.eager_tf import EagerTFExecutor
from simharness.executors.thread_delegating import ThreadDelegatingExecutor, ThreadDelegatingValue


def run(coro):
    return asyncio.run(coro)


@sh.tf_computation(tf.float32)
def add_one(x):
    return x + 1.0


class ThreadRecordingEager(EagerTFExecutor):
    """Records the thread each operation (and close) runs on."""

    def __init__(self):
        super().__init__()
        self.threads = []
        self.close_threads = []

    async def create_value(self, value, type_spec=None):
        self.threads.append(threading.current_thread().name)
        return await super().create_value(value, type_spec)

    async def create_map(self, fn, args, count=None):
        self.threads.append(threading.current_thread().name)
        return await super().create_map(fn, args, count)

    def close(self):
        self.close_threads.append(threading.current_thread().name)
        super().close()


def _threads_named(name):
    return [t for t in threading.enumerate() if t.name == name and t.is_alive()]


def test_operations_run_on_the_executor_thread():
    target = ThreadRecordingEager()
    with ThreadDelegatingExecutor(target, name='simharness-test-ops') as ex:
        fn = run(ex.create_value(add_one.to_building_block()))
        args = run(ex.create_values([1.0, 2.0], tf.float32))
        out = run(ex.create_map(fn, args))
        assert all(isinstance(v, ThreadDelegatingValue) for v in out)
        assert [float(v) for v in run(ex.compute_many(out))] == [2.0, 3.0]
        single = run(ex.create_call(fn, args[0]))
        assert single.type_signature == T.TensorType(tf.float32)
        assert float(run(single.compute()).numpy()) == 2.0
        assert target.threads and set(target.threads) == {'simharness-test-ops'}


def test_errors_of_the_target_propagate():
    with ThreadDelegatingExecutor(EagerTFExecutor(), name='simharness-test-errors') as ex:
        with pytest.raises(SimharnessTypeError, match='float64 is not assignable to int32'):
            run(ex.create_value(1.5, tf.int32))
        assert float(run(run(ex.create_value(1.5, tf.float32)).compute()).numpy()) == 1.5


def test_close_stops_the_thread_and_closes_the_target_on_it():
    target = ThreadRecordingEager()
    ex = ThreadDelegatingExecutor(target, name='simharness-test-close')
    assert len(_threads_named('simharness-test-close')) == 1
    run(ex.create_value(1.0, tf.float32))
    ex.close()
    assert _threads_named('simharness-test-close') == []
    assert target.close_threads == ['simharness-test-close']
    # As TFF's executors: the next use starts a new thread; close() stops it again.
    again = run(ex.create_value(2.0, tf.float32))
    assert float(run(again.compute()).numpy()) == 2.0
    assert len(_threads_named('simharness-test-close')) == 1
    ex.close()
    assert _threads_named('simharness-test-close') == []


def test_close_is_idempotent():
    target = ThreadRecordingEager()
    ex = ThreadDelegatingExecutor(target, name='simharness-test-idempotent')
    ex.close()
    ex.close()
    with ex:
        pass  # __exit__ closes again
    assert target.close_threads == ['simharness-test-idempotent']
    assert _threads_named('simharness-test-idempotent') == []


def test_concurrent_close_from_two_threads():
    target = ThreadRecordingEager()
    ex = ThreadDelegatingExecutor(target, name='simharness-test-concurrent')
    closers = [threading.Thread(target=ex.close) for _ in range(2)]
    for t in closers:
        t.start()
    for t in closers:
        t.join()
    assert target.close_threads == ['simharness-test-concurrent']
    assert _threads_named('simharness-test-concurrent') == []
