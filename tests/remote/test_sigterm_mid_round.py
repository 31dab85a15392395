"""A service stopped by SIGTERM mid-round: the driver's call fails as unavailable (retryable,
naming the address), and a context with retries moves on to the restarted service.

The services run worker pools (``--num-workers 1``): the pool is what SIGTERM closes
while the round's request is in it (an in-process service finishes its request
within the stop's grace). The blocking client is released only once the service
has exited, so the request cannot finish before the stop lands, however loaded
the machine.
"""

from __future__ import annotations

import signal
import threading

import numpy as np
import pytest

import simharness as sh
from simharness.errors import RetryableError, ServiceUnavailableError
from simharness.runtime.grpc.client import RemoteServices
from simharness.stacks import remote_executor_factory

from fault_injection import blocking_computation, when_started  # tests/fault_injection.py
from remote_services import ServiceProcess, stop_and_check  # tests/remote_services.py

pytestmark = [pytest.mark.remote, pytest.mark.slow]  # ~20 s: pool services started and stopped

#: One client: the service's one worker is inside the blocking computation once it started.
DATA = [1.0]


@pytest.fixture(scope='module')
def services():
    """Two pool services, started side by side (a test may append the successor it starts);
    all stopped at the end, and nothing of theirs left running."""
    procs: list = []
    errors: list = []

    def start() -> None:
        try:
            procs.append(ServiceProcess(args=('--num-workers', '1')))
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=start) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        if errors:
            raise errors[0]
        yield procs
    finally:
        stop_and_check(procs)


def _sigterm_and_wait(svc: ServiceProcess) -> int:
    """SIGTERM, then the service's exit status (the blocking client is released after it)."""
    assert svc.proc is not None
    svc.proc.send_signal(signal.SIGTERM)
    return svc.proc.wait(30)


def _incarnation(address: str) -> str:
    with RemoteServices([address], connect_timeout=10) as s:
        return s.info()[0]['incarnation']


def test_sigterm_mid_round_is_a_retryable_error_naming_the_address(services, tmp_path):
    svc = services[0]
    factory = remote_executor_factory([svc.address], connect_timeout=2)
    blocking = blocking_computation(tmp_path)
    exit_status = []
    with factory, sh.execution_context(factory):
        fault = threading.Thread(
            target=when_started,
            args=(tmp_path, DATA, lambda: exit_status.append(_sigterm_and_wait(svc))),
        )
        fault.start()
        try:
            with pytest.raises(ServiceUnavailableError) as e:
                blocking(DATA)
        finally:
            fault.join()
    assert isinstance(e.value, RetryableError)
    assert e.value.address == svc.address and svc.address in str(e.value)
    assert e.value.status == 'UNAVAILABLE'
    assert 'shutting down' in str(e.value)  # the service said so (not a dropped connection)
    assert exit_status == [0]  # SIGTERM is still a clean stop


def test_retries_move_on_to_the_service_restarted_after_a_sigterm(services, tmp_path):
    svc = services[1]
    port = svc.port
    factory = remote_executor_factory([svc.address], connect_timeout=60)
    blocking = blocking_computation(tmp_path)
    incarnation = _incarnation(svc.address)

    def stop_then_restart() -> None:
        assert _sigterm_and_wait(svc) == 0
        svc.stop()  # reaps it
        # The successor on the same port runs clients in-process (it starts faster).
        services.append(ServiceProcess(port=port))

    with factory, sh.execution_context(factory, retries=1):
        fault = threading.Thread(target=when_started, args=(tmp_path, DATA, stop_then_restart))
        fault.start()
        try:
            # The retry runs once `release` exists (after the restart): it does not block.
            assert blocking(DATA) == np.float32(1.0)
        finally:
            fault.join()
    assert _incarnation(f'127.0.0.1:{port}') != incarnation  # the successor answered
