"""A connection that goes silent mid-round (a blackholed link) fails the call within the
liveness timeout, naming the address, with the retryable error.

The driver reaches the service through a loopback TCP proxy (`_Proxy`) that, once
blackholed, drops every byte in both directions while every socket stays open: what a
switch or firewall that drops a link's packets does, where nothing resets the
connection. The blackhole lands while the service's worker runs the round's client
computation (tests/fault_injection.py's file barriers): the service computes and
answers, the answer never arrives, and only the driver's channel keepalive
(`liveness_timeout`) can tell.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import List, Tuple

import pytest

import simharness as sh
from simharness.errors import RetryableError, ServiceUnavailableError
from simharness.stacks import remote_executor_factory

from fault_injection import blocking_computation, when_started  # tests/fault_injection.py

pytestmark = pytest.mark.remote


class _Proxy:
    """Forwards 127.0.0.1:<port> to `target`; `blackhole()` drops all traffic from then on."""

    def __init__(self, target: Tuple[str, int]):
        self._target = target
        self._server = socket.create_server(('127.0.0.1', 0))
        self.address = f'127.0.0.1:{self._server.getsockname()[1]}'
        self._dropping = threading.Event()
        self._lock = threading.Lock()
        self._sockets: List[socket.socket] = [self._server]
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def blackhole(self) -> None:
        self._dropping.set()

    def _accept(self) -> None:
        while True:
            try:
                down, _ = self._server.accept()
                up = socket.create_connection(self._target)
            except OSError:
                return  # closed
            with self._lock:
                self._sockets += [down, up]
                for a, b in ((down, up), (up, down)):
                    t = threading.Thread(target=self._pump, args=(a, b), daemon=True)
                    self._threads.append(t)
                    t.start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        while True:
            try:
                data = src.recv(1 << 16)
            except OSError:
                return
            if not data:
                return
            if self._dropping.is_set():
                continue  # read and dropped: the sender sees an open, silent link
            try:
                dst.sendall(data)
            except OSError:
                return

    def close(self) -> None:
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for s in sockets:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
        for t in self._threads:
            t.join(5)


@pytest.mark.timeout(120)
def test_a_blackholed_connection_fails_the_call_within_the_liveness_timeout(
    start_service, tmp_path
):
    service = start_service()
    host, port = service.address.rsplit(':', 1)
    proxy = _Proxy((host, int(port)))
    data = [1.0]
    factory = remote_executor_factory([proxy.address], connect_timeout=10, liveness_timeout=3)
    try:
        with factory, sh.execution_context(factory):
            # Through the proxy, before the fault: the round gives its answer.
            release = tmp_path / 'before'
            release.mkdir()
            (release / 'release').write_text('go')
            assert blocking_computation(release)(data) == 1.0
            stopper = threading.Thread(
                target=when_started, args=(tmp_path, data, proxy.blackhole), daemon=True
            )
            t0 = time.monotonic()
            stopper.start()
            with pytest.raises(ServiceUnavailableError) as e:
                blocking_computation(tmp_path)(data)
            waited = time.monotonic() - t0
            stopper.join(30)
        assert isinstance(e.value, RetryableError)
        assert e.value.address == proxy.address and proxy.address in str(e.value)
        assert waited < 15, (waited, str(e.value))
    finally:
        proxy.close()
