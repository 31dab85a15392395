"""How `simharness run` stops: SIGTERM / SIGHUP as Ctrl-C, SIGKILL, a full disk.

In-process tests (thread stack: the behaviour does not depend on the stack)
cover the exit codes, the summary and the restored signal handlers; two
tests run the CLI as a subprocess on the process stack: one SIGTERMs it
(no worker process and no shared-memory segment may outlive it), one
SIGKILLs it and checks that `reap_orphaned_segments` reclaims what it left
(and that its run directory's lock went with it).
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from simharness.errors import RunInProgressError
from simharness.experiments import atomic
from simharness.experiments.config import dumps_toml
from simharness.experiments.runner import rounds as seam  # the module of the run_round seam
from simharness.experiments.runner.lock import check_not_running
from simharness.runtime.local.shm import list_leaked_segments, reap_orphaned_segments

from experiment_helpers import TINY, read_json, temp_files

pytestmark = pytest.mark.timeout(120)


def _write_config(tmp_path: Path, raw, name: str = 'exp.toml') -> Path:
    path = tmp_path / name
    path.write_text(dumps_toml(raw), encoding='utf-8')
    return path


def _signal_at_round(signum: int, at: int = 1):
    """A runner.run_round that sends `signum` to this process on call number `at`."""
    real = seam.run_round
    calls = []

    def next_(fedavg, state, data):
        calls.append(None)
        if len(calls) - 1 == at:
            os.kill(os.getpid(), signum)
            time.sleep(5)  # the handler raises here, long before this ends
        return real(fedavg, state, data)

    return next_


# ------------------------------------------------------------ SIGTERM, SIGHUP


@pytest.mark.parametrize('signum,code', [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_signal_stops_like_ctrl_c_and_restores_handlers(
    tmp_path, capsys, monkeypatch, signum, code
):
    from simharness.cli import main

    monkeypatch.setattr(seam, 'run_round', _signal_at_round(signum, at=1))
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
    cfg = _write_config(tmp_path, {**TINY, 'training': {**TINY['training'], 'rounds': 5}})
    t0 = time.monotonic()
    assert main(['run', str(cfg), '--results', str(tmp_path / 'r'), '--no-progress']) == code
    assert time.monotonic() - t0 < 60
    err = capsys.readouterr().err
    assert f'interrupted ({signal.Signals(signum).name})' in err and 'Traceback' not in err
    s = read_json(tmp_path / 'r' / 'tiny' / 'default' / 'summary.json')
    assert s['status'] == 'interrupted' and s['rounds_completed'] == 1
    assert s['finished_at'] is not None
    assert not temp_files(tmp_path / 'r')
    assert {s: signal.getsignal(s) for s in before} == before


def test_signal_handlers_are_installed_only_while_main_runs(tmp_path):
    # Importing the library (the CLI module included) changes no signal handler.
    code = (
        'import signal; d = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)};'
        'import simharness, simharness.cli, simharness.experiments.runner;'
        'assert {s: signal.getsignal(s) for s in d} == d, d'
    )
    subprocess.run(
        [sys.executable, '-c', code],
        check=True,
        timeout=100,
        env={**os.environ, 'TF_CPP_MIN_LOG_LEVEL': '2'},
    )


# ---------------------------------------------------------- a full results disk


def _fail_writes(monkeypatch, err: int, names, where: str = 'fsync'):
    """Makes writes of files named in `names` fail with `err` at `where` ('fsync' of an
    atomic write, or 'open' of an append)."""
    real_fsync, real_open = os.fsync, os.open
    failed = []

    def matches(path: str) -> bool:
        return any(f'.{n}.' in os.path.basename(path) or os.path.basename(path) == n for n in names)

    def fsync(fd):
        if where == 'fsync' and matches(os.readlink(f'/proc/self/fd/{fd}')):
            failed.append(fd)
            raise OSError(err, os.strerror(err))
        return real_fsync(fd)

    def open_(path, flags, *args, **kwargs):
        if where == 'open' and flags & os.O_APPEND and matches(str(path)):
            failed.append(path)
            raise OSError(err, os.strerror(err), str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(atomic.os, 'fsync', fsync)
    monkeypatch.setattr(atomic.os, 'open', open_)
    return failed


@pytest.mark.parametrize(
    'err,where', [(errno.ENOSPC, 'fsync'), (errno.EROFS, 'open'), (errno.EACCES, 'open')]
)
def test_unwritable_metrics_fail_with_one_line_and_a_failed_summary(
    tmp_path, capsys, monkeypatch, err, where
):
    from simharness.cli import main

    monkeypatch.delenv('SIMHARNESS_TRACEBACK', raising=False)
    failed = _fail_writes(monkeypatch, err, ['metrics.jsonl'], where)
    cfg = _write_config(tmp_path, TINY)
    assert main(['run', str(cfg), '--results', str(tmp_path / 'r'), '--no-progress']) == 1
    assert failed
    run_dir = tmp_path / 'r' / 'tiny' / 'default'
    err_lines = capsys.readouterr().err.strip().splitlines()
    assert err_lines == [
        f'error: {run_dir / "metrics.jsonl"}: {os.strerror(err)} ({errno.errorcode[err]})'
    ]
    s = read_json(run_dir / 'summary.json')
    assert s['status'] == 'failed' and os.strerror(err) in s['error']
    assert str(run_dir / 'metrics.jsonl') in s['error']
    # metrics.jsonl is appended to: at most whole lines (written, not synced) are there.
    path = run_dir / 'metrics.jsonl'
    if path.exists():
        assert all(json.loads(line)['round'] == 0 for line in path.read_text().splitlines())
    assert not temp_files(tmp_path)


def test_when_even_the_summary_cannot_be_written_no_stale_running_summary_is_left(
    tmp_path, capsys, monkeypatch
):
    from simharness.cli import main

    monkeypatch.delenv('SIMHARNESS_TRACEBACK', raising=False)
    cfg = _write_config(tmp_path, TINY)
    real_next = seam.run_round

    def next_then_disk_full(fedavg, state, data):  # the first summary ('running') is written
        _fail_writes(monkeypatch, errno.ENOSPC, ['metrics.jsonl', 'summary.json'])
        return real_next(fedavg, state, data)

    monkeypatch.setattr(seam, 'run_round', next_then_disk_full)
    assert main(['run', str(cfg), '--results', str(tmp_path / 'r'), '--no-progress']) == 1
    run_dir = tmp_path / 'r' / 'tiny' / 'default'
    err_lines = capsys.readouterr().err.strip().splitlines()
    assert len(err_lines) == 1, err_lines
    assert err_lines[0].startswith(f'error: {run_dir / "metrics.jsonl"}: No space left')
    assert f'{run_dir / "summary.json"} could not be written either' in err_lines[0]
    assert not (run_dir / 'summary.json').exists()
    assert (run_dir / 'config.toml').exists() and not temp_files(tmp_path)


@pytest.mark.parametrize('how', ['--verbose', 'env'])
def test_verbose_or_env_adds_the_traceback(tmp_path, capsys, monkeypatch, how):
    from simharness.cli import main

    args = []
    if how == 'env':
        monkeypatch.setenv('SIMHARNESS_TRACEBACK', '1')
    else:
        monkeypatch.delenv('SIMHARNESS_TRACEBACK', raising=False)
        args = ['--verbose']
    _fail_writes(monkeypatch, errno.ENOSPC, ['summary.json'])
    cfg = _write_config(tmp_path, TINY)
    assert main(['run', str(cfg), '--results', str(tmp_path / 'r'), '--no-progress', *args]) == 1
    err = capsys.readouterr().err
    assert 'Traceback' in err and err.rstrip().splitlines()[-1].startswith('error: ')
    if how == '--verbose':  # INFO logs too
        assert 'reclaimed' in err and 'orphaned shared-memory segment' in err


def test_atomic_write_failure_keeps_the_old_file_and_names_the_target(tmp_path, monkeypatch):
    target = tmp_path / 'summary.json'
    atomic.write_json(target, {'status': 'running'})
    _fail_writes(monkeypatch, errno.ENOSPC, ['summary.json'])
    with pytest.raises(OSError) as info:
        atomic.write_json(target, {'status': 'complete'})
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(target)
    assert read_json(target) == {'status': 'running'} and not temp_files(tmp_path)


# ------------------------------------------------ the process stack, for real

PROCESS = {
    **TINY,
    'training': {**TINY['training'], 'rounds': 10_000},
    'stack': {'kind': 'process', 'num_workers': 2},
}


def _start_cli(tmp_path: Path):
    cfg = _write_config(tmp_path, PROCESS)
    log = open(tmp_path / 'cli.log', 'wb')  # pylint: disable=consider-using-with
    proc = subprocess.Popen(
        [
            sys.executable,
            '-m',
            'simharness.cli',
            'run',
            str(cfg),
            '--results',
            str(tmp_path / 'r'),
            '--no-progress',
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, 'CI': '1', 'TF_CPP_MIN_LOG_LEVEL': '2'},
    )
    log.close()
    run_dir = tmp_path / 'r' / 'tiny' / 'default'
    deadline = time.monotonic() + 90
    while not (run_dir / 'metrics.jsonl').exists():  # a round finished: workers are up
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            pytest.fail(f'the CLI did not get to a round: {(tmp_path / "cli.log").read_text()}')
        time.sleep(0.1)
    return proc, run_dir


def _descendants(pid: int):
    return psutil.Process(pid).children(recursive=True)


def _gone(p: psutil.Process) -> bool:
    try:
        return not p.is_running() or p.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _segments_of(pids):
    return [n for n in list_leaked_segments() for pid in pids if n.startswith(f'simharness_{pid}_')]


def _wait_until(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_sigterm_on_the_process_stack_exits_143_and_leaves_nothing(tmp_path):
    proc, run_dir = _start_cli(tmp_path)
    children = _descendants(proc.pid)
    pids = [proc.pid] + [c.pid for c in children]
    assert len(children) >= 2, children  # the forkserver and 2 workers
    assert _segments_of(pids), 'the process stack should use shared memory'
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 143, (tmp_path / 'cli.log').read_text()
    output = (tmp_path / 'cli.log').read_text()
    assert 'interrupted (SIGTERM)' in output and 'Traceback' not in output
    s = read_json(run_dir / 'summary.json')
    assert s['status'] == 'interrupted' and s['rounds_completed'] >= 1
    assert _wait_until(lambda: all(_gone(c) for c in children), 10), [
        c for c in children if not _gone(c)
    ]
    assert not _segments_of(pids)
    assert not temp_files(tmp_path / 'r')
    assert not (run_dir / 'run.lock').exists()  # released (and removed) on the way out


def test_segments_of_a_sigkilled_cli_are_reaped(tmp_path):
    proc, run_dir = _start_cli(tmp_path)
    children = _descendants(proc.pid)
    mine = _segments_of([proc.pid])
    assert mine
    with pytest.raises(RunInProgressError):  # its run directory is locked while it runs
        check_not_running(run_dir)
    proc.kill()
    proc.wait(timeout=30)
    # The kernel dropped the driver's lock with it, at once: its workers (maybe still
    # alive) never had the lock file open. The stale run.lock blocks no later run.
    assert (run_dir / 'run.lock').exists()
    check_not_running(run_dir)
    # The driver had no chance to clean up; its workers see it die (their lifeline),
    # unlink its segments and their own, and leave. Whatever a worker could not reach
    # is reaped by the next pool (`reap_orphaned_segments`).
    assert _wait_until(lambda: all(_gone(c) for c in children), 20), [
        c for c in children if not _gone(c)
    ]
    reap_orphaned_segments()
    assert not _segments_of([proc.pid] + [c.pid for c in children])
