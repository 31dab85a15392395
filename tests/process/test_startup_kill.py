"""A driver SIGKILLed at any moment of its pool's start-up leaves no segment and no process.

A driver starts a pool of 2 workers (the forkserver preloads TensorFlow, each
worker reports ready, the driver makes each one's arena) and says so; it is
killed with SIGKILL at delays spread from 0 to a little past that moment, two
drivers at a time (each is the other's load). Whatever it had started by then
(the forkserver, the resource tracker, workers, segments of the driver's and of
the workers') must be gone a few seconds later, with nobody starting anything
after it (no `reap_orphaned_segments`).

The processes of a driver are known by a tag in their environment (inherited by
the forkserver and every worker forked from it), and while it runs by a watch on
its descendants (a worker's segments carry the worker's pid).
"""

from __future__ import annotations

import glob
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid

import psutil
import pytest

from simharness.runtime.local import lifeline
from simharness.runtime.local.shm import SEGMENT_PREFIX, list_leaked_segments


DRIVER = """
import pathlib, sys, time
from simharness.hosts.local_worker import pool_for
from simharness.runtime.local.options import PoolOptions
pool = pool_for(PoolOptions(num_workers=2, clients_per_worker=1, cpu_affinity=False))
pool.start()
pathlib.Path(sys.argv[1]).write_text('ready')
time.sleep(300)
"""

DRIVER_ARGS = ['-c', DRIVER]
KILLS = 16
#: Seconds after the kill within which everything must be gone (the workers' lifelines
#: and the forkserver's watch on its parent act within a fraction of a second here).
GRACE_S = 2.0
_TAG = 'SIMHARNESS_STARTUP_KILL_TAG'


def _tagged(tag: str) -> list:
    out = []
    for p in psutil.process_iter():
        try:
            if p.environ().get(_TAG) == tag and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except (psutil.Error, OSError):
            pass
    return out


class _Run:
    """One driver, killed `delay` seconds after its start."""

    def __init__(self, delay: float, directory: pathlib.Path):
        self.delay = delay
        self.tag = uuid.uuid4().hex
        self.seen: set = set()
        self._ready = directory / f'ready-{self.tag}'
        self._stop = threading.Event()
        # Its output goes to a file: a pipe closed after the kill would end the processes
        # that inherited it (the forkserver) by SIGPIPE, and hide what they leave.
        with open(directory / f'driver-{self.tag}.log', 'wb') as log:
            self.proc = subprocess.Popen(
                [sys.executable] + DRIVER_ARGS + [str(self._ready)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, _TAG: self.tag, 'TF_CPP_MIN_LOG_LEVEL': '2'},
            )
        self.started = time.monotonic()
        self.seen.add(self.proc.pid)
        self._watch = threading.Thread(target=self._watch_descendants, daemon=True)
        self._watch.start()

    @property
    def ready(self) -> bool:
        return self._ready.exists()

    def _watch_descendants(self) -> None:
        while not self._stop.is_set():
            try:
                self.seen.update(
                    c.pid for c in psutil.Process(self.proc.pid).children(recursive=True)
                )
            except psutil.Error:
                pass
            self._stop.wait(0.01)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.killed_at = time.monotonic()
        self.proc.wait(30)
        self._stop.set()
        self._watch.join()

    def leftovers(self):
        pids = self.seen | set(_tagged(self.tag))
        segments = [
            n
            for n in list_leaked_segments()
            if any(n.startswith(f'{SEGMENT_PREFIX}{pid}_') for pid in pids)
        ]
        alive = []
        for pid in self.seen - {self.proc.pid}:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
            except psutil.Error:
                pass
        return segments, sorted(set(alive) | set(_tagged(self.tag)))

    def wait_clean(self, seconds: float):
        """What is left `seconds` after the kill (or before, once nothing is)."""
        deadline = self.killed_at + seconds
        while True:
            segments, alive = self.leftovers()
            if (not segments and not alive) or time.monotonic() > deadline:
                for pid in alive:  # not left to the next run
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
                for name in segments:
                    try:
                        os.unlink(os.path.join('/dev/shm', name))
                    except OSError:
                        pass
                return segments, alive
            time.sleep(0.05)


def _describe(pids) -> list:
    out = []
    for pid in pids:
        try:
            p = psutil.Process(pid)
            out.append(f'{pid} ({p.status()}, parent {p.ppid()}): {" ".join(p.cmdline())[:120]}')
        except psutil.Error:
            out.append(f'{pid} (gone)')
    return out


def _kill_after(delays, directory, ready: float, drivers: list) -> list:
    """Starts one driver per delay (together), kills each at its delay; the failures.
    The drivers' pids are added to `drivers`."""
    runs = [_Run(d, directory) for d in delays]
    drivers.extend(r.proc.pid for r in runs)
    failures = []
    for run in sorted(runs, key=lambda r: r.delay):
        time.sleep(max(0.0, run.started + run.delay - time.monotonic()))
        run.kill()
    for run in runs:
        segments, alive = run.wait_clean(GRACE_S)
        if segments or alive:
            failures.append(
                f'killed at {run.delay:.2f} s (ready at {ready:.2f} s): '
                f'segments {segments}, processes {_describe(alive)}'
            )
    return failures


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_a_driver_sigkilled_during_start_up_leaves_nothing(tmp_path):
    # How long a start-up takes here: one driver that gets to "ready" (then is killed too).
    calibration = _Run(0.0, tmp_path)
    deadline = time.monotonic() + 60
    while not calibration.ready:
        assert calibration.proc.poll() is None, 'the driver died on its own'
        assert time.monotonic() < deadline, 'the driver did not start its pool'
        time.sleep(0.02)
    ready = time.monotonic() - calibration.started
    calibration.kill()
    failures = []
    segments, alive = calibration.wait_clean(GRACE_S)
    if segments or alive:
        failures.append(f'killed once ready: segments {segments}, processes {_describe(alive)}')
    delays = [ready * 1.1 * i / (KILLS - 1) for i in range(KILLS)]
    drivers = [calibration.proc.pid]
    for pair in range(0, KILLS, 2):
        failures += _kill_after(delays[pair : pair + 2], tmp_path, ready, drivers)
    assert not failures, '\n'.join(failures)
    # A driver killed before a worker watched it leaves its temporary directory (its
    # forkserver's socket): the next pool's start removes it.
    lifeline.reap_orphaned_temp_dirs()
    bases = {tempfile.gettempdir(), *lifeline.SHORT_TEMP_DIRS}
    left = [p for b in bases for pid in drivers for p in glob.glob(f'{b}/pymp-{pid}-*')]
    assert not left, left
