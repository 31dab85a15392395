"""One run at a time per run directory: the flock on <run dir>/run.lock.

A second run of a directory in use (another process, or another call in this
one) is refused at once with `RunInProgressError` naming the directory and
the holder's pid, before it touches a file there; the CLI says so in one
line (exit 2) before TensorFlow loads. The kernel drops the lock with its
holder, so a SIGKILLed run blocks nothing: the next run resumes it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from simharness.errors import RunInProgressError
from simharness.experiments import checkpoints as CK
from simharness.experiments.runner import run_experiment, run_sweep
from simharness.experiments.runner.lock import LOCK_FILE, check_not_running, is_running, run_lock

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / 'integration'))
from experiment_helpers import make_config, read_json, read_metrics  # noqa: E402

pytestmark = pytest.mark.timeout(120)

_ENV = {**os.environ, 'CI': '1', 'TF_CPP_MIN_LOG_LEVEL': '2'}


def _config(rounds: int = 3, **sweep):
    tables = {'training': {'rounds': rounds, 'checkpoint_every': 1, 'tensorboard': False}}
    if sweep:
        tables['sweep'] = sweep
    return make_config(**tables)


def _files(run_dir: Path):
    """Every file under `run_dir` with its size and modification time."""
    return {
        p.relative_to(run_dir).as_posix(): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(run_dir.rglob('*'))
        if p.is_file()
    }


def test_a_second_lock_is_refused_naming_the_directory_and_the_holder(tmp_path):
    with run_lock(tmp_path):
        assert (tmp_path / LOCK_FILE).exists()
        t0 = time.monotonic()
        with pytest.raises(RunInProgressError) as refused:
            with run_lock(tmp_path):
                pytest.fail('a second holder of the same run directory')
        assert time.monotonic() - t0 < 2
        with pytest.raises(RunInProgressError) as probed:
            check_not_running(tmp_path)
    for e in (refused.value, probed.value):
        assert e.run_dir == str(tmp_path) and e.pid == os.getpid()
        assert str(e).startswith(
            f'{tmp_path}: another run of it is in progress (pid {os.getpid()}, since '
        )
    assert not (tmp_path / LOCK_FILE).exists()  # released: removed, and free again
    check_not_running(tmp_path)
    with run_lock(tmp_path):
        pass


@pytest.mark.slow  # a real run (and a CLI start, or a second run)
def test_a_second_run_is_refused_while_the_first_runs_and_its_rows_stay_its_own(tmp_path):
    config = _config(rounds=3)
    run_dir = tmp_path / 'r' / config.name / 'default'
    cfg_file = tmp_path / 'exp.toml'
    cfg_file.write_text(config.to_toml(), encoding='utf-8')
    seen = {}

    class SecondRunAtRound1(CK.Callback):
        def on_round_end(self, round_num, row, weights):
            if round_num != 1:
                return False
            before = _files(run_dir)
            t0 = time.monotonic()
            with pytest.raises(RunInProgressError) as e:  # in this process
                run_experiment(config, tmp_path / 'r', progress=False)
            seen['seconds'] = time.monotonic() - t0
            seen['error'] = e.value
            t0 = time.monotonic()
            seen['cli'] = subprocess.run(  # the CLI, as a second terminal would start it
                [
                    sys.executable,
                    '-m',
                    'simharness.cli',
                    'run',
                    str(cfg_file),
                    '--results',
                    str(tmp_path / 'r'),
                    '--no-progress',
                ],
                capture_output=True,
                text=True,
                timeout=60,
                env=_ENV,
                check=False,
            )
            seen['cli_seconds'] = time.monotonic() - t0
            seen['untouched'] = _files(run_dir) == before
            return False

    result = run_experiment(config, tmp_path / 'r', progress=False, callbacks=[SecondRunAtRound1()])
    assert seen['seconds'] < 2 and seen['error'].pid == os.getpid()
    assert str(run_dir) in str(seen['error'])
    cli = seen['cli']
    assert cli.returncode == 2, cli.stdout + cli.stderr
    assert cli.stderr.splitlines() == [f'error: {seen["error"]}'], (
        cli.stderr
    )  # one line: the directory and our pid
    assert cli.stdout == ''
    assert seen['cli_seconds'] < 20  # refused before TensorFlow loads (a few s on a busy CI)
    assert seen['untouched']
    assert result.status == 'complete'
    assert [r['round'] for r in read_metrics(run_dir)] == [0, 1, 2]
    assert read_json(run_dir / 'summary.json')['rounds_completed'] == 3
    assert not (run_dir / LOCK_FILE).exists()


@pytest.mark.slow  # a real run (and a CLI start, or a second run)
def test_the_lock_of_a_sigkilled_run_does_not_block_its_resume(tmp_path):
    config = _config(rounds=4)
    run_dir = tmp_path / config.name / 'default'

    class InterruptAtRound2(CK.Callback):
        def on_round_end(self, round_num, row, weights):
            if round_num == 2:
                raise KeyboardInterrupt
            return False

    with pytest.raises(KeyboardInterrupt):  # rounds 0-1 checkpointed
        run_experiment(config, tmp_path, progress=False, callbacks=[InterruptAtRound2()])
    # A run that is SIGKILLed while it holds the lock (here: a process that only holds it).
    holder = subprocess.Popen(
        [
            sys.executable,
            '-c',
            'import sys, time\n'
            'from simharness.experiments.runner.lock import run_lock\n'
            'with run_lock(sys.argv[1]):\n'
            '    print("locked", flush=True)\n'
            '    time.sleep(60)\n',
            str(run_dir),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=_ENV,
    )
    try:
        assert holder.stdout.readline() == 'locked\n'
        with pytest.raises(RunInProgressError) as e:
            run_experiment(config, tmp_path, progress=False)
        assert e.value.pid == holder.pid
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
        holder.stdout.close()
    assert (run_dir / LOCK_FILE).exists()  # left behind, but no longer held
    check_not_running(run_dir)
    resumed = run_experiment(config, tmp_path, progress=False)
    assert resumed.status == 'complete'
    assert resumed.summary['resumed_from_round'] == 2
    assert [r['round'] for r in read_metrics(run_dir)] == [0, 1, 2, 3]
    assert not (run_dir / LOCK_FILE).exists()


def test_a_sweep_stops_at_a_point_another_run_holds(tmp_path, capsys):
    from simharness.cli import main

    config = _config(rounds=2, grid={'training.seed': [0, 1]})
    point = tmp_path / 'r' / config.name / 'seed=0'
    point.mkdir(parents=True)
    cfg_file = tmp_path / 'exp.toml'
    cfg_file.write_text(config.to_toml(), encoding='utf-8')
    with run_lock(point):
        with pytest.raises(RunInProgressError) as e:
            run_sweep(config, tmp_path / 'r', progress=False)
        assert e.value.run_dir == str(point)
        t0 = time.monotonic()
        assert (
            main(['sweep', str(cfg_file), '--results', str(tmp_path / 'r'), '--no-progress']) == 2
        )
        assert time.monotonic() - t0 < 5
    err = capsys.readouterr().err
    assert err.splitlines() == [
        f'error: {point}: another run of it is in progress (pid '
        f'{os.getpid()}, {str(e.value).split(", ", 1)[1]}'
    ]
    assert [p.name for p in (tmp_path / 'r' / config.name).iterdir()] == ['seed=0']
    assert list(point.iterdir()) == []


def test_a_running_summary_whose_lock_no_one_holds_reads_as_interrupted(tmp_path):
    from simharness.experiments.report import DIED, load_runs, write_report

    run_dir = tmp_path / 'exp' / 'default'
    run_dir.mkdir(parents=True)
    summary = {'status': 'running', 'experiment': 'exp', 'run_id': 'default', 'stack': 'thread'}
    (run_dir / 'summary.json').write_text(json.dumps(summary), encoding='utf-8')
    row = {'round': 0, 'loss': 2.0, 'accuracy': 0.5, 'round_seconds': 0.1}
    (run_dir / 'metrics.jsonl').write_text(json.dumps(row) + '\n', encoding='utf-8')

    def status():
        (run,) = load_runs(tmp_path)
        return run.summary['status'], run.summary.get('error')

    with run_lock(run_dir):  # a live run: as it says
        assert is_running(run_dir) is True
        assert status() == ('running', None)
        assert 'Interrupted without a final status' not in write_report(tmp_path)[0].read_text()
    # Its process killed (SIGKILL: the lock file stays, no one holds it), or no lock file.
    (run_dir / LOCK_FILE).write_text('{"pid": 1}', encoding='utf-8')
    for _ in range(2):
        assert is_running(run_dir) is False
        assert status() == ('interrupted', DIED)
        md = write_report(tmp_path)[0].read_text(encoding='utf-8')
        assert f'Interrupted without a final status: exp/default: {DIED}.' in md
        assert '| exp/default | interrupted |' in md
        (run_dir / LOCK_FILE).unlink(missing_ok=True)
    assert json.loads((run_dir / 'summary.json').read_text())['status'] == 'running'  # untouched
