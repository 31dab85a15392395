"""Checks of ``simharness.backends.native``'s contexts over executor services and TFF's older
local names (TFF 0.88's ``core/backends/native/cpp_execution_contexts.py`` remote contexts,
and TFF 0.30-0.44's ``execution_contexts.py`` localhost / remote Python / thread-debugging
ones).

TFF's tests of these (``cpp_execution_contexts_test.py``,
``execution_contexts_test.py`` of 0.44) start or mock its C++ worker binary and gRPC stub
and are left out; in their place, these tests run computations on each context against
simharness's executor service (in this process, on a loopback port) and check the
service's lifetime and the argument checks.
"""

from __future__ import annotations

import asyncio

import grpc
import numpy as np
import pytest

import simharness as federated_language
import simharness as tff
from simharness.core import context_stack
from simharness.hosts.grpc_service import start_executor_service


@pytest.fixture
def restore_default():
    yield
    context_stack.replace_default(None, owned=True)


@pytest.fixture(scope='module')
def service():
    server = start_executor_service(0, '127.0.0.1')  # clients run in this process
    yield server
    server.stop()


@tff.tensorflow.computation
def _return_one():
    return 1


@federated_language.federated_computation
def _at_clients():
    return federated_language.federated_eval(_return_one, federated_language.CLIENTS)


@federated_language.federated_computation(
    federated_language.FederatedType(np.float32, federated_language.CLIENTS)
)
def _mean(xs):
    return federated_language.federated_mean(xs)


def test_localhost_cpp_context_starts_and_stops_its_service(restore_default):
    tff.backends.native.set_localhost_cpp_execution_context(default_num_clients=2)
    ctx = context_stack.get_context()
    assert ctx.max_concurrent_calls == 1  # TFF's set_ default: one call at a time
    factory = ctx.factory
    assert isinstance(factory, tff.backends.native.LocalhostExecutorFactory)
    assert factory.server is None, 'the service starts on the first call, as in TFF'
    assert factory.num_workers >= 1  # one per usable core
    # The service runs its clients in this process here: starting worker processes
    # costs seconds and is tested with the process stack (test_execution_contexts.py).
    factory.num_workers = 0
    assert _at_clients() == [1, 1]
    server = factory.server
    assert server.host == '127.0.0.1' and server.address.startswith('127.0.0.1:')
    assert _mean([np.float32(1.0), np.float32(2.0), np.float32(6.0)]) == np.float32(3.0)
    tff.backends.test.set_sync_test_cpp_execution_context()
    assert factory.server is None and server.wait(0), 'replacing the context stops the service'
    with pytest.raises(RuntimeError, match='closed'):
        factory.create_executor({})
    assert (
        tff.backends.native.create_localhost_cpp_execution_context(
            max_concurrent_computation_calls=0
        ).max_concurrent_calls
        is None
    )


def test_remote_cpp_contexts_on_channels(service, restore_default):
    channel = grpc.insecure_channel(service.address)
    try:
        tff.backends.native.set_sync_remote_cpp_execution_context([channel], default_num_clients=3)
        assert _at_clients() == [1, 1, 1]
        assert _mean([np.float32(2.0), np.float32(4.0)]) == np.float32(3.0)
        ctx = tff.backends.native.create_async_remote_cpp_execution_context([channel])

        async def main():
            pending = ctx.invoke(_mean, [np.float32(1.0), np.float32(3.0)])
            return await pending

        try:
            assert asyncio.run(main()) == np.float32(2.0)
        finally:
            ctx.close()
    finally:
        context_stack.replace_default(None, owned=True)  # before the channel goes
        channel.close()


def test_remote_python_contexts_of_tff_0_19(service, restore_default):
    tff.backends.native.set_remote_python_execution_context(
        [service.address], dispose_batch_size=5, max_fanout=10, default_num_clients=2
    )
    assert _at_clients() == [1, 1]
    ctx = tff.backends.native.create_remote_async_python_execution_context([service.address])
    try:
        assert asyncio.run(ctx.invoke(_mean, [np.float32(5.0)])) == np.float32(5.0)
    finally:
        ctx.close()


def test_local_async_and_thread_debugging_contexts(restore_default):
    tff.backends.native.set_thread_debugging_execution_context(default_num_clients=2)
    assert _at_clients() == [1, 1]
    tff.backends.native.set_local_async_python_execution_context(default_num_clients=1)

    async def main():
        pending = _at_clients()
        assert asyncio.iscoroutine(pending)
        return await pending

    assert asyncio.run(main()) == [1]


@pytest.mark.parametrize(
    'call, error',
    [
        (
            lambda: tff.backends.native.create_sync_remote_cpp_execution_context('localhost:1'),
            TypeError,
        ),
        (lambda: tff.backends.native.create_sync_remote_cpp_execution_context([]), ValueError),
        (
            lambda: tff.backends.native.create_sync_remote_cpp_execution_context(
                ['localhost:1'], default_num_clients=-1
            ),
            ValueError,
        ),
        (
            lambda: tff.backends.native.create_remote_python_execution_context(
                ['localhost:1'], dispose_batch_size=0
            ),
            ValueError,
        ),
        (
            lambda: tff.backends.native.create_localhost_cpp_execution_context(
                default_num_clients=1.5
            ),
            TypeError,
        ),
        (
            lambda: tff.backends.native.create_thread_debugging_execution_context(
                clients_per_thread=0
            ),
            ValueError,
        ),
    ],
)
def test_bad_arguments_are_refused(call, error):
    with pytest.raises(error):
        call()
