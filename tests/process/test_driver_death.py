"""A driver that dies by any signal mid-round leaves no shared-memory segment, no process and no
temporary directory (multiprocess's ``pymp-*``, which holds the forkserver's socket).

Three subprocess drivers (started together, to share their start-up time) each
run a blocking federated sum on 1 worker (tests/fault_injection.py's file
barriers: the worker is inside its client computation); then one gets
SIGKILL, one SIGTERM and one SIGINT. SIGKILL: the workers' lifelines see the
driver die and remove its segments and theirs. SIGTERM: the driver's handler
closes its pool, then dies by SIGTERM as without it. SIGINT: KeyboardInterrupt,
and the pool closes as the interpreter exits.
"""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time

import psutil
import pytest

from simharness.runtime.local.shm import SEGMENT_PREFIX, list_leaked_segments


TESTS = pathlib.Path(__file__).resolve().parents[1]

DRIVER = f"""
import sys, pathlib
sys.path.insert(0, {str(TESTS)!r})
import numpy as np
import simharness as sh
from simharness.stacks import process_executor_factory
from fault_injection import blocking_computation
directory = pathlib.Path(sys.argv[1])
factory = process_executor_factory(num_workers=1, clients_per_worker=1, start=True)
from multiprocess import util
(directory / 'tempdir').write_text(util.get_temp_dir())  # the forkserver's listener lives there
with sh.execution_context(factory):
    blocking_computation(directory)([np.float32(1)])
"""

SIGNALS = {'SIGKILL': signal.SIGKILL, 'SIGTERM': signal.SIGTERM, 'SIGINT': signal.SIGINT}


def _segments_of(pids) -> list:
    return [
        n
        for n in list_leaked_segments()
        if any(n.startswith(f'{SEGMENT_PREFIX}{pid}_') for pid in pids)
    ]


def _wait_for_barrier(directory: pathlib.Path, proc: subprocess.Popen, deadline: float) -> None:
    while not {'started-1'} <= {p.name for p in directory.iterdir()}:
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline, 'the drivers did not start their computations'
        time.sleep(0.02)


def _interruptible() -> None:
    # A driver as a terminal starts it: SIGINT at its default, so that Python turns it into
    # KeyboardInterrupt. A shell without job control starts background commands with SIGINT
    # ignored, and the children of such a pytest run (CI's) would inherit that and ignore it.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.timeout(180)
def test_no_segment_or_process_outlives_a_driver_killed_by_any_signal(tmp_path):
    drivers = {}
    try:
        for name in SIGNALS:
            d = tmp_path / name
            d.mkdir()
            drivers[name] = (
                d,
                subprocess.Popen(
                    [sys.executable, '-c', DRIVER, str(d)],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    preexec_fn=_interruptible,
                ),
            )
        deadline = time.monotonic() + 150
        family = {}
        for name, (d, proc) in drivers.items():
            _wait_for_barrier(d, proc, deadline)
            family[name] = [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
            assert len(family[name]) >= 2, family  # the forkserver and the worker
            assert _segments_of([proc.pid]), 'the driver has no segment: nothing is tested'
        for name, (d, proc) in drivers.items():
            os.kill(proc.pid, SIGNALS[name])
            proc.wait(60)
            (d / 'release').write_text('go')  # lets workers without a lifeline finish
            assert proc.returncode == -SIGNALS[name], (
                name,
                proc.returncode,
                proc.stderr.read()[-3000:],
            )
        end = time.monotonic() + 60  # a bound, not a speed: the loop ends once all are gone
        for name, (d, proc) in drivers.items():
            pids = [proc.pid] + family[name]
            tempdir = pathlib.Path((d / 'tempdir').read_text())
            while True:
                left = _segments_of(pids)
                alive = [
                    p
                    for p in family[name]
                    if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
                ]
                if not left and not alive and not tempdir.exists():
                    break
                assert time.monotonic() < end, (
                    f'after {name} of the driver: segments {left}, processes {alive}, '
                    f'its temporary directory {tempdir if tempdir.exists() else None} remain'
                )
                time.sleep(0.05)
    finally:
        for d, proc in drivers.values():
            if proc.poll() is None:
                proc.kill()
            (d / 'release').write_text('go')


IDLE_DRIVER = """
import pathlib, sys, time
from multiprocess import util
from simharness.stacks import process_executor_factory
directory = pathlib.Path(sys.argv[1])
factory = process_executor_factory(num_workers=1, clients_per_worker=1, start=True)
(directory / 'tempdir').write_text(util.get_temp_dir())
(directory / 'ready').write_text('')
time.sleep(300)
"""


@pytest.mark.timeout(120)
@pytest.mark.faults
def test_an_idle_driver_killed_by_sigkill_leaves_no_temporary_directory(tmp_path):
    # Its idle worker sees the driver die on its pipe first (EOF), not only on the lifeline.
    proc = subprocess.Popen(
        [sys.executable, '-c', IDLE_DRIVER, str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 90
        while not (tmp_path / 'ready').exists():
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, 'the driver did not start its pool'
            time.sleep(0.05)
        tempdir = pathlib.Path((tmp_path / 'tempdir').read_text())
        children = psutil.Process(proc.pid).children(recursive=True)
        assert tempdir.exists() and children
        proc.kill()
        proc.wait(30)
        end = time.monotonic() + 30  # a bound, not a speed
        while tempdir.exists() or any(
            c.is_running() and c.status() != psutil.STATUS_ZOMBIE for c in children
        ):
            assert time.monotonic() < end, f'{tempdir} or a worker outlived the driver'
            time.sleep(0.05)
        assert not _segments_of([proc.pid] + [c.pid for c in children])
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


EOF_WORKER = """
import sys
import tempfile
from simharness.runtime.local.lifeline import DRIVER_GONE, run_worker
run_worker(lambda *args: DRIVER_GONE, int(sys.argv[1]), None, 0, None, {}, sys.argv[2])
"""


@pytest.mark.timeout(120)
def test_a_worker_that_sees_its_driver_pipe_end_before_the_driver_exits_cleans_up(tmp_path):
    # A driver killed by SIGKILL closes its files before it exits: its idle worker reads EOF
    # while the driver still runs. The worker must wait for the driver to be gone, then
    # remove what it left (its segments, its temporary directory), not leave at once.
    dying = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(1.5)'])
    try:
        segment = pathlib.Path('/dev/shm') / f'{SEGMENT_PREFIX}{dying.pid}_eoftest'
        segment.write_bytes(b'\0' * 64)
        tempdir = pathlib.Path(tempfile.mkdtemp(prefix='pymp-'))
        worker = subprocess.run(
            [sys.executable, '-c', EOF_WORKER, str(dying.pid), str(tempdir)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert worker.returncode == 0, worker.stderr[-3000:]
        assert dying.poll() is not None, 'the worker left before its driver was gone'
        assert not segment.exists() and not tempdir.exists()
    finally:
        dying.kill()
        dying.wait()
        segment.unlink(missing_ok=True)


def test_a_temporary_directory_too_long_for_a_socket_is_named(monkeypatch, tmp_path):
    """No short directory to fall back on either: a clear error naming TMPDIR and the
    limit, before any process starts."""
    from multiprocess import process

    from simharness.errors import WorkerStartError
    from simharness.runtime.local import lifeline

    deep = str(tmp_path / ('d' * lifeline.SOCKET_PATH_MAX))
    monkeypatch.setattr(lifeline.tempfile, 'gettempdir', lambda: deep)
    monkeypatch.setattr(lifeline, 'SHORT_TEMP_DIRS', (str(tmp_path / 'missing'),))
    monkeypatch.delitem(process.current_process()._config, 'tempdir', raising=False)
    with pytest.raises(WorkerStartError, match=r'TMPDIR.*too long.*set TMPDIR') as e:
        lifeline.driver_temp_dir()
    assert deep in str(e.value) and str(lifeline.SOCKET_PATH_MAX) in str(e.value)


def test_temporary_directories_of_dead_drivers_are_reaped_and_only_those(monkeypatch, tmp_path):
    """A driver killed before any worker watched it leaves its directory (its forkserver's
    socket in it): the next pool's start removes it, never one of a live process, nor
    anything not named as a driver's directory."""
    from simharness.runtime.local import lifeline

    monkeypatch.setattr(lifeline.tempfile, 'gettempdir', lambda: str(tmp_path))
    monkeypatch.setattr(lifeline, 'SHORT_TEMP_DIRS', ())
    gone = subprocess.run(
        [sys.executable, '-c', 'import os; print(os.getpid())'],
        capture_output=True,
        text=True,
        check=True,
    )
    dead = tmp_path / f'pymp-{int(gone.stdout)}-abcd1234'
    alive = tmp_path / f'pymp-{os.getpid()}-abcd1234'
    other = tmp_path / 'pymp-abcd1234'  # multiprocess's own name: no maker to ask
    for d in (dead, alive, other):
        d.mkdir()
        (d / 'listener-abcd1234').write_text('')
    assert lifeline.reap_orphaned_temp_dirs() == [str(dead)]
    assert not dead.exists() and alive.exists() and other.exists()


TFF_DRIVER = """
import pathlib, sys, time
import simharness as tff
from multiprocess import util
directory = pathlib.Path(sys.argv[1])
tff.backends.native.set_sync_local_cpp_execution_context()  # its workers start meanwhile
(directory / 'tempdir').write_text(util.get_temp_dir())
(directory / 'ready').write_text('')
time.sleep(300)
"""


@pytest.mark.timeout(150)
@pytest.mark.faults
@pytest.mark.parametrize('when', ['starting', 'started'])
def test_a_tff_program_killed_by_sigterm_while_its_workers_start_leaves_nothing(tmp_path, when):
    """A TFF program's local C++ context starts its workers in the background: a SIGTERM
    while they start (or once they run) leaves no worker, segment or temporary directory."""
    tag = f'{os.getpid()}-{when}-{time.monotonic_ns()}'
    proc = subprocess.Popen(
        [sys.executable, '-c', TFF_DRIVER, str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, 'SIMHARNESS_TEST_TAG': tag},  # its descendants inherit it
    )

    def tagged() -> list:
        """Every process running with the tag (the driver's descendants, orphaned or not)."""
        out = []
        for p in psutil.process_iter():
            try:
                if p.environ().get('SIMHARNESS_TEST_TAG') == tag and p.status() != 'zombie':
                    out.append(p.pid)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                pass
        return out

    try:
        deadline = time.monotonic() + 120
        want = 1 if when == 'starting' else 1 + len(os.sched_getaffinity(0))
        while True:
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, f'the driver did not reach "{when}"'
            if (tmp_path / 'ready').exists():
                children = psutil.Process(proc.pid).children(recursive=True)
                if len(children) >= want:
                    break
            time.sleep(0.02)
        tempdir = pathlib.Path((tmp_path / 'tempdir').read_text())
        assert len(tagged()) >= 1 + want, 'the tag must find the driver and its children'
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(60)
        assert proc.returncode == -signal.SIGTERM, (proc.returncode, proc.stderr.read()[-3000:])
        end = time.monotonic() + 60  # a bound, not a speed
        while True:
            alive = tagged()
            late = _segments_of([proc.pid] + [c.pid for c in children] + alive)
            if not alive and not late and not tempdir.exists():
                break
            assert time.monotonic() < end, (alive, late, tempdir.exists())
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
