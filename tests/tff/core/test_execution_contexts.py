"""Port of TFF's ``core/backends/native/execution_contexts_test.py`` and ``backends/test/
execution_contexts_test.py``, and checks of the mapping ``simharness.backends`` makes.

``DatasetsTest`` runs as TFF's, on `set_sync_local_cpp_execution_context()` (the
process stack; inside the test that sets that context twice, to start fewer pools). Left out: ``SyncLocalCPPExecutionContextTest`` (it mocks TFF's C++
worker binary and its gRPC stub, which simharness does not have); in its place,
tests that the contexts run computations with TFF's defaults, that the async
context's call is awaitable, that `max_concurrent_computation_calls` limits
concurrent calls, and that setting a context again closes the previous one's
worker processes.
"""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import psutil
import pytest
import tensorflow as tf

import simharness as federated_language
import simharness as tff
from simharness.core import context_stack


@pytest.fixture
def restore_default():
    """Puts back a default context simharness makes (closing the one a test set)."""
    yield
    context_stack.replace_default(None, owned=True)


@tff.tensorflow.computation
def _return_one():
    return 1


def _workers() -> set:
    """Worker processes: the forkserver's children (not it, not the resource tracker)."""
    me = psutil.Process()
    direct = {p.pid for p in me.children()}
    return {p.pid for p in me.children(recursive=True)} - direct


def _check_datasets_pass_through():
    """TFF's ``DatasetsTest``: datasets reach TF and come back as lists of elements."""

    @tff.tensorflow.computation
    def identity(ds):
        return ds

    assert identity(tf.data.Dataset.range(10)) == list(range(10))

    @tff.tensorflow.computation
    def returns_sequence():
        return tf.data.Dataset.range(10)

    assert returns_sequence() == list(range(10))

    @tff.tensorflow.computation
    def returns_two():
        return [tf.data.Dataset.range(5), tf.data.Dataset.range(10)]

    assert returns_two() == [list(range(5)), list(range(10))]

    @tff.tensorflow.computation
    def returns_dataset_and_tensor():
        return [tf.data.Dataset.range(5), 5]

    assert returns_dataset_and_tensor() == [list(range(5)), 5]


def test_default_num_clients(restore_default):
    @federated_language.federated_computation
    def at_clients():
        return federated_language.federated_eval(_return_one, federated_language.CLIENTS)

    tff.backends.test.set_sync_test_cpp_execution_context(default_num_clients=3)
    assert at_clients() == [1, 1, 1]
    tff.backends.test.set_sync_test_cpp_execution_context()  # TFF's default: 0 clients
    assert at_clients() == []


def test_setting_a_context_again_closes_the_previous_one(restore_default):
    """The previous default context is closed; its workers go on for the new one (TFF's
    local C++ contexts of a process share one pool, `simharness.local_cpp`), and the
    last context closed stops them."""
    before = _workers()
    tff.backends.native.set_sync_local_cpp_execution_context(default_num_clients=2)

    @federated_language.federated_computation
    def at_clients():
        return federated_language.federated_eval(_return_one, federated_language.CLIENTS)

    assert at_clients() == [1, 1]
    previous = federated_language.framework.get_context_stack().current
    first = _workers() - before
    assert first, 'the native context runs clients in worker processes'
    tff.backends.native.set_sync_local_cpp_execution_context(default_num_clients=2)
    assert previous.factory.group.closed is False and previous.factory.closed
    assert at_clients() == [1, 1]
    assert _workers() - before == first, 'the new context starts no second set of workers'
    _check_datasets_pass_through()
    federated_language.framework.get_context_stack().current.close()
    assert previous.factory.group.closed, 'the last context closed stops the shared pool'


def test_async_context_returns_awaitables(restore_default):
    tff.backends.test.set_async_test_cpp_execution_context(
        default_num_clients=2, max_concurrent_computation_calls=1
    )

    @federated_language.federated_computation(
        federated_language.FederatedType(np.float32, federated_language.CLIENTS)
    )
    def total(xs):
        return federated_language.federated_sum(xs)

    async def main():
        pending = total([np.float32(1.0), np.float32(2.0)])
        assert asyncio.iscoroutine(pending)
        return await asyncio.gather(pending, total([np.float32(3.0)] * 3))

    assert asyncio.run(main()) == [np.float32(3.0), np.float32(9.0)]


def test_max_concurrent_computation_calls_limits_calls(restore_default):
    ctx = tff.backends.test.create_sync_test_cpp_execution_context(
        max_concurrent_computation_calls=1
    )
    assert ctx.max_concurrent_calls == 1
    assert (
        tff.backends.test.create_sync_test_cpp_execution_context(
            max_concurrent_computation_calls=0
        ).max_concurrent_calls
        is None
    )
    inside, most = [0], [0]
    lock = threading.Lock()
    real = ctx._submit

    def counting_submit(*args):
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        try:
            fut = real(*args)
            fut.result()
            return fut
        finally:
            with lock:
                inside[0] -= 1

    ctx._submit = counting_submit
    context_stack.replace_default(ctx, owned=True)  # the default: every thread sees it
    threads = [threading.Thread(target=_return_one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most[0] == 1


@pytest.mark.parametrize(
    'kwargs, error',
    [
        ({'default_num_clients': -1}, ValueError),
        ({'default_num_clients': 1.5}, TypeError),
        ({'stream_structs': 1}, TypeError),
        ({'max_concurrent_computation_calls': 'x'}, TypeError),
    ],
)
def test_bad_arguments_are_refused(kwargs, error):
    with pytest.raises(error):
        tff.backends.native.create_sync_local_cpp_execution_context(**kwargs)
    with pytest.raises(error):
        tff.backends.test.create_sync_test_cpp_execution_context(**kwargs)


def test_local_python_context_of_tff_0_19(restore_default):
    tff.backends.native.set_local_python_execution_context(default_num_clients=2)

    @federated_language.federated_computation
    def at_clients():
        return federated_language.federated_eval(_return_one, federated_language.CLIENTS)

    assert at_clients() == [1, 1]
    with pytest.raises(ValueError, match='devices'):
        tff.backends.native.create_local_python_execution_context(server_tf_device='/CPU:0')
