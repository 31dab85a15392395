"""Faults of the remote stack: a service killed mid-round, restarted, unreachable; a vanished driver."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

import simharness as sh
from simharness.errors import RetryableError, ServiceUnavailableError, WorkerCrashedError
from simharness.executors.remote import RemoteExecutor
from simharness.runtime.grpc.client import RemoteServices
from simharness.stacks import remote_executor_factory

from fault_injection import (
    blocking_computation,
    slow_square,
    when_started,
)  # tests/fault_injection.py

pytestmark = pytest.mark.remote


@sh.federated_computation(sh.type_at_clients(tf.float32), sh.type_at_server(tf.int32))
def sum_of_squares(xs, n):
    return sh.federated_sum(sh.federated_map(slow_square, [xs, sh.federated_broadcast(n)]))


@pytest.fixture(scope='module')
def pair():
    """Two services for the module's tests; a test that kills one restarts it."""
    from remote_services import ServiceProcess
    import psutil

    procs = []
    try:
        procs.append(ServiceProcess())
        procs.append(ServiceProcess())
        yield procs
    finally:
        pids = [p.pid for p in procs if p.pid is not None]
        for p in procs:
            p.kill()  # SIGKILL: these tests are about faults; clean stops are tested elsewhere
        # Nothing left running (the killed and restarted services included).
        assert not [
            q
            for q in pids
            if psutil.pid_exists(q) and psutil.Process(q).status() != psutil.STATUS_ZOMBIE
        ]


XS = [1.0, 2.0, 3.0, 4.0]
EXPECTED = np.float32(30.0)


def _info(address):
    with RemoteServices([address], connect_timeout=10) as s:
        return s.info()[0]


def _wait_until(fn, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not fn():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


#: One client per service: both are inside the blocking computation when all have started.
BLOCKING_DATA = [1.0, 2.0]


def _fault_mid_round(directory, fault):
    """A thread that injects `fault` once both services run the blocking round's clients."""
    return threading.Thread(target=when_started, args=(directory, BLOCKING_DATA, fault))


@pytest.mark.faults
def test_kill_9_mid_round_is_a_retryable_error_naming_the_address(pair, tmp_path):
    a, b = pair
    factory = remote_executor_factory([a.address, b.address], connect_timeout=2)
    lone = RemoteExecutor(b.address)  # a value held in b before it dies
    blocking = blocking_computation(tmp_path)
    try:
        held = asyncio.run(_create(lone, 2.0))
        with factory, sh.execution_context(factory):
            assert sum_of_squares(XS, 10) == EXPECTED
            killer = _fault_mid_round(tmp_path, b.kill)  # SIGKILL, then reaped
            killer.start()
            try:
                with pytest.raises(ServiceUnavailableError) as e:
                    blocking(BLOCKING_DATA)
            finally:
                killer.join()
            assert isinstance(e.value, RetryableError)
            assert b.address in str(e.value) and e.value.address == b.address
            # While it is down, a new call fails the same way (after connect_timeout), naming it.
            with pytest.raises(ServiceUnavailableError, match=b.address.replace('.', r'\.')):
                sum_of_squares(XS, 10)
            # Restarted on the same port: the next call works, on fresh sessions.
            b.restart()
            assert sum_of_squares(XS, 10) == EXPECTED
        # A value of the dead service is reported lost, never reused; new values work.
        with pytest.raises(WorkerCrashedError, match='run the computation again'):
            asyncio.run(held.compute())
        assert asyncio.run(_create(lone, 5.0)).type_signature == sh.TensorType(tf.float32)
        assert asyncio.run(_compute_new(lone)) == 5.0
    finally:
        lone.close()


async def _create(ex, x):
    v = await ex.create_value(x, tf.float32)
    assert await v.compute() == x
    return v


async def _compute_new(ex):
    v = await ex.create_value(5.0, tf.float32)
    return await v.compute()


def test_retries_rerun_the_computation_once_the_service_is_back(pair, tmp_path):
    a, b = pair
    factory = remote_executor_factory([a.address, b.address], connect_timeout=60)
    blocking = blocking_computation(tmp_path)
    with factory, sh.execution_context(factory, retries=2):
        assert sum_of_squares(XS, 10) == EXPECTED
        incarnation = _info(b.address)['incarnation']

        def kill_then_restart():
            b.kill()
            b.restart()

        t = _fault_mid_round(tmp_path, kill_then_restart)
        t.start()
        try:
            # The retry runs once `release` exists: it does not block again.
            assert blocking(BLOCKING_DATA) == np.float32(3.0)
        finally:
            t.join()
        assert _info(b.address)['incarnation'] != incarnation  # a new process answered


def test_unreachable_service_is_a_clear_retryable_error():
    import socket

    s = socket.socket()
    s.bind(('127.0.0.1', 0))
    port = s.getsockname()[1]
    s.close()  # nobody listens there now
    factory = remote_executor_factory([f'127.0.0.1:{port}'], connect_timeout=0.5)
    with factory:
        with pytest.raises(
            ServiceUnavailableError, match=rf'127\.0\.0\.1:{port} is unreachable.*simharness serve'
        ) as e:
            with sh.execution_context(factory):
                sum_of_squares(XS, 1)
        assert isinstance(e.value, RetryableError)


DRIVER = textwrap.dedent("""
    import asyncio, sys, time
    import tensorflow as tf
    from simharness.executors.remote import RemoteExecutor
    ex = RemoteExecutor(sys.argv[1])
    async def make():
        vs = [await ex.create_value(float(i), tf.float32) for i in range(5)]
        await vs[-1].compute()
        return vs
    vs = asyncio.run(make())
    print('holding', flush=True)
    time.sleep(600)
""")


def test_a_vanished_driver_does_not_leave_its_values_in_the_service(pair):
    svc = pair[0]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3')
    driver = subprocess.Popen(
        [sys.executable, '-c', DRIVER, svc.address],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        assert driver.stdout.readline().strip() == b'holding'
        info = _info(svc.address)
        assert info['values'] == 5 and info['sessions'] == 1, info
        driver.kill()  # kill -9: no close(), no goodbye
        driver.wait(10)
        assert _wait_until(lambda: _info(svc.address)['sessions'] == 0, timeout=30)
        assert _info(svc.address)['values'] == 0
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait(10)
        driver.stdout.close()
