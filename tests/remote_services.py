"""Executor services as subprocesses of the test session (`simharness serve`), always cleaned up.

`ServiceProcess` starts ``python -m simharness.cli serve --port P ...`` and
reads its address from the "listening on" line; `stop()` sends SIGTERM (a
clean stop), `kill()` SIGKILL. `ServicePair` is the conformance suite's
session resource: two loopback services and one shared `RemoteServices`.
No TensorFlow is imported here.
"""

from __future__ import annotations

import os
import re
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, List, Optional, Sequence

_LISTENING = re.compile(r'listening on (\S+)')


class ServiceProcess:
    """One `simharness serve` subprocess."""

    def __init__(
        self,
        port: int = 0,
        args: Sequence[str] = (),
        env: Optional[dict] = None,
        start_timeout: float = 120.0,
    ):
        self.port = port
        self.args = list(args)
        self.env = env
        self.start_timeout = start_timeout
        self.proc: Optional[subprocess.Popen] = None
        self.address: Optional[str] = None
        self._stderr: Any = None
        self.start()

    def start(self) -> 'ServiceProcess':
        env = dict(os.environ if self.env is None else self.env)
        env.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
        self._stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [sys.executable, '-m', 'simharness.cli', 'serve', '--port', str(self.port), *self.args],
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
        )
        line = self._read_line(self.start_timeout)
        m = _LISTENING.search(line or '')
        if m is None:
            err = self.stderr_text()
            self.kill()
            raise RuntimeError(f'simharness serve did not start (stdout {line!r}):\n{err[-3000:]}')
        self.address = m.group(1)
        self.port = int(self.address.rsplit(':', 1)[1])
        return self

    def _read_line(self, timeout: float) -> Optional[str]:
        assert self.proc is not None and self.proc.stdout is not None
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout
        buf = b''
        try:
            while time.monotonic() < deadline:
                if not sel.select(max(0.0, deadline - time.monotonic())):
                    continue
                chunk = os.read(self.proc.stdout.fileno(), 4096)
                if not chunk:
                    return buf.decode(errors='replace') or None
                buf += chunk
                if b'\n' in buf:
                    return buf.decode(errors='replace')
            return None
        finally:
            sel.close()

    def stderr_text(self) -> str:
        if self._stderr is None:
            return ''
        self._stderr.seek(0)
        return self._stderr.read().decode(errors='replace')

    @property
    def pid(self) -> Optional[int]:
        return None if self.proc is None else self.proc.pid

    def kill(self) -> None:
        """SIGKILL (kill -9), then reap."""
        self._end(signal.SIGKILL)

    def stop(self) -> None:
        """SIGTERM (a clean stop); SIGKILL after 15 s."""
        self._end(signal.SIGTERM)

    def _end(self, sig: int) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(sig)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(15)
        if proc.stdout is not None:
            proc.stdout.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def restart(self) -> 'ServiceProcess':
        """Starts it again on the same port (after `kill` or `stop`)."""
        self._end(signal.SIGTERM)
        return self.start()

    def close(self) -> None:
        self.stop()


class ServicePair:
    """Two loopback services and one `RemoteServices` connected to both (a session resource)."""

    def __init__(self, n: int = 2, args: Sequence[str] = ()):
        self.procs: List[ServiceProcess] = []
        self.services: Any = None
        try:
            for _ in range(n):
                self.procs.append(ServiceProcess(args=args))
            from simharness.runtime.grpc.client import RemoteServices

            self.services = RemoteServices(self.addresses)
            self.services.start()
        except BaseException:
            self.close()
            raise

    @property
    def addresses(self) -> List[str]:
        return [p.address for p in self.procs if p.address]

    def close(self) -> None:
        if self.services is not None:
            self.services.close()
            self.services = None
        for p in self.procs:
            p.stop()
        self.procs = []


def stop_and_check(procs: List[ServiceProcess]) -> None:
    """Stops the services; then neither they nor any process they started may be running."""
    import psutil

    pids = []
    for p in procs:
        if p.pid is not None:
            pids.append(p.pid)
            try:
                pids.extend(c.pid for c in psutil.Process(p.pid).children(recursive=True))
            except psutil.NoSuchProcess:
                pass
    for p in procs:
        p.stop()
    _, alive = psutil.wait_procs(
        [psutil.Process(q) for q in pids if psutil.pid_exists(q)], timeout=15
    )
    alive = [q for q in alive if q.status() != psutil.STATUS_ZOMBIE]
    assert not alive, f'processes of a stopped service still run: {alive}'
