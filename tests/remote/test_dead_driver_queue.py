"""A driver killed with requests queued behind a long one: the service drops them (issue 27).

The service runs in this process (`start_executor_service`, one thread runs
every request), so that its handled-request count can be read. The driver, a
subprocess, sends one session's requests: a computation, its argument and
six calls of about a second each, pipelined (sent without waiting), then is
killed with SIGKILL. Before, the service ran all six for a driver that was
gone; now the stream's end cancels the requests not yet started: at most
the running call (and the one the thread took next) runs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

from simharness.hosts.grpc_service import start_executor_service

pytestmark = pytest.mark.remote

CALLS = 6
TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

DRIVER = textwrap.dedent(f"""
    import asyncio, sys, time
    import tensorflow as tf
    from simharness.executors.remote import RemoteExecutor
    sys.path.insert(0, sys.argv[3])
    from fault_injection import slow_square  # tests/fault_injection.py

    ex = RemoteExecutor(sys.argv[1])
    n = int(sys.argv[2])

    async def queue_calls():
        comp = await ex.create_value(slow_square.to_building_block())
        x = await ex.create_value(2.0, tf.float32)
        k = await ex.create_value(n, tf.int32)
        arg = await ex.create_struct([x, k])
        return [await ex.create_call(comp, arg) for _ in range({CALLS})]

    calls = asyncio.run(queue_calls())
    print('queued', flush=True)
    time.sleep(600)
""")


def _loop_steps_per_second() -> int:
    """Steps of the driver's loop that take about a second here (a rough, generous guess)."""
    import tensorflow as tf

    n = 200_000
    body = tf.function(
        lambda n: tf.while_loop(
            lambda i, a: i < n,
            lambda i, a: (i + 1, a * 1.0000001),
            [tf.constant(0), tf.constant(1.0)],
        )
    )
    body(tf.constant(10))
    t0 = time.perf_counter()
    body(tf.constant(n))
    return max(10_000, int(n / max(time.perf_counter() - t0, 1e-3)))


@pytest.mark.faults
def test_a_killed_driver_s_queued_requests_are_dropped():
    server = start_executor_service(0)
    service = server.service
    leaf = service.backend._service  # the in-process backend's WorkerService
    driver = None
    try:
        steps = _loop_steps_per_second()
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3')
        driver = subprocess.Popen(
            [sys.executable, '-c', DRIVER, server.address, str(steps), TESTS],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        assert driver.stdout.readline().strip() == b'queued', driver.stderr.read()[-3000:]
        deadline = time.monotonic() + 60
        while service._requests < CALLS + 4 and time.monotonic() < deadline:
            time.sleep(0.02)  # every request of the driver has reached the service
        received = service._requests
        assert received >= CALLS + 4, received
        driver.kill()  # SIGKILL: the stream ends without a goodbye
        driver.wait(30)
        deadline = time.monotonic() + 60
        while len(leaf.sessions) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not leaf.sessions, "the dead driver's session was not closed"
        handled = leaf.requests  # requests the service ran, the session close included
        assert received + 1 - handled >= CALLS - 2, (received, handled)
    finally:
        if driver is not None:
            if driver.poll() is None:
                driver.kill()
                driver.wait(30)
            driver.stdout.close()
            driver.stderr.close()
        server.stop()
