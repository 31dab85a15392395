"""A frozen service (SIGSTOP) fails the call within `liveness_timeout`, naming its address;
a request past `request_timeout` fails with the retryable `WorkerTimeoutError`, naming it.

The service is stopped while its worker runs the round's client computation
(tests/fault_injection.py's file barriers); the driver's channel keepalive
(`RemoteServices(liveness_timeout=...)`) finds it unresponsive. Before
keepalive, the call hung until the service was continued.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

import simharness as sh
from simharness.errors import RetryableError, ServiceUnavailableError, WorkerTimeoutError
from simharness.runtime.grpc.client import RemoteServices
from simharness.stacks import remote_executor_factory

from fault_injection import blocking_computation, when_started  # tests/fault_injection.py

pytestmark = pytest.mark.remote


@pytest.mark.timeout(120)
def test_a_stopped_service_fails_the_call_within_the_liveness_timeout(start_service, tmp_path):
    service = start_service()
    data = [1.0]
    # request_timeout: the service computes (it is not frozen) but answers too late.
    slow = tmp_path / 'slow'
    slow.mkdir()
    timed = RemoteServices([service.address], connect_timeout=10, request_timeout=1.0)
    try:
        with remote_executor_factory(services=timed) as f, sh.execution_context(f):
            t0 = time.monotonic()
            with pytest.raises(WorkerTimeoutError) as e:
                blocking_computation(slow)(data)
            assert time.monotonic() - t0 < 10
            assert isinstance(e.value, RetryableError) and e.value.reason == 'timeout'
            assert service.address in str(e.value) and 'request_timeout=1.0' in str(e.value)
    finally:
        (slow / 'release').write_text('go')
        timed.close()
    # liveness_timeout: the service is frozen mid-round.
    factory = remote_executor_factory([service.address], connect_timeout=10, liveness_timeout=3)
    services = factory.group
    stopper = threading.Thread(target=when_started,
                               args=(tmp_path, data, lambda: os.kill(service.pid, signal.SIGSTOP)))
    try:
        with factory, sh.execution_context(factory):
            t0 = time.monotonic()
            stopper.start()
            with pytest.raises(ServiceUnavailableError) as e:
                blocking_computation(tmp_path)(data)
            waited = time.monotonic() - t0
            stopper.join()
            assert isinstance(e.value, RetryableError)
            assert e.value.address == service.address and service.address in str(e.value)
            assert waited < 15, (waited, str(e.value))
    finally:
        os.kill(service.pid, signal.SIGCONT)
        services.close()
