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

import psutil
import pytest

import simharness as sh
from simharness.errors import RetryableError, ServiceUnavailableError, WorkerTimeoutError
from simharness.runtime.grpc.client import RemoteServices
from simharness.stacks import remote_executor_factory

from fault_injection import blocking_computation, when_started  # tests/fault_injection.py

pytestmark = pytest.mark.remote


@pytest.mark.timeout(120)
@pytest.mark.faults
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
    # liveness_timeout: the service is frozen mid-round. The stop lands while the client
    # computation runs (its started file exists, its release does not), and the release is
    # written only once the service is seen stopped ('T'): it cannot answer before SIGCONT.
    factory = remote_executor_factory([service.address], connect_timeout=10, liveness_timeout=3)
    services = factory.group
    stopper_errors: list = []

    def freeze() -> None:
        os.kill(service.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 30
        while psutil.Process(service.pid).status() != psutil.STATUS_STOPPED:
            assert time.monotonic() < deadline, 'the service did not stop'
            time.sleep(0.01)

    def stop_mid_computation() -> None:
        try:
            when_started(tmp_path, data, freeze)
        except BaseException as e:  # reported by the test, not lost in the thread
            stopper_errors.append(e)

    stopper = threading.Thread(target=stop_mid_computation, daemon=True)
    try:
        with factory, sh.execution_context(factory):
            t0 = time.monotonic()
            stopper.start()
            try:
                blocking_computation(tmp_path)(data)
            except ServiceUnavailableError as e:
                error = e
            else:
                error = None
            waited = time.monotonic() - t0
            stopper.join(30)
            assert not stopper_errors, stopper_errors  # the fault did not land mid-call
            assert error is not None, 'the call to a stopped service answered'
            assert isinstance(error, RetryableError)
            assert error.address == service.address and service.address in str(error)
            assert waited < 15, (waited, str(error))
    finally:
        os.kill(service.pid, signal.SIGCONT)
        services.close()
