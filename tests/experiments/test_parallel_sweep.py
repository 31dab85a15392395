"""Sweeps whose points run side by side (`run_sweep(..., jobs=N)`, `simharness sweep
--jobs N`): each job a process of its own on its own cores, the same bits as one after
another, failures and stops as for a sequential sweep, nothing left running."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import psutil
import pytest

from simharness.errors import ConfigError, OversubscribedWarning
from simharness.experiments.runner import run_sweep
from simharness.experiments.runner import parallel

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / 'integration'))
from experiment_helpers import make_config, read_json, read_metrics  # noqa: E402

MATH = ('round', 'loss', 'accuracy', 'eval_loss', 'weights_sha256')


def _math(run_dir):
    return [{k: r.get(k) for k in MATH} for r in read_metrics(run_dir)]


def test_the_slots_are_disjoint_while_they_fit():
    slots, over = parallel.plan_slots(2, 2, [0, 1, 2, 3, 4])
    assert slots == [[0, 1], [2, 3]] and not over
    slots, over = parallel.plan_slots(3, 2, [0, 1, 2, 3])
    assert over and slots[2] == [0, 1]  # wrapped: shares the first job's cores
    assert parallel.plan_slots(2, 8, [0, 1])[0] == [[0, 1], [0, 1]]


@pytest.mark.parametrize('jobs', [0, -1, 1.5, True, 'auto'])
def test_a_bad_jobs_value_is_an_error_before_anything_runs(tmp_path, jobs):
    config = make_config(sweep={'grid': {'training.seed': [0, 1]}})
    with pytest.raises(ConfigError, match=r'jobs must be an int >= 1'):
        run_sweep(config, tmp_path, progress=False, jobs=jobs)
    assert not any(tmp_path.iterdir())


def test_the_cli_default_fits_the_machine(monkeypatch):
    """No --jobs (or "auto"): usable cores // a point's workers, at least 1; --jobs 1 is
    sequential; --jobs with --ray is an error."""
    from simharness import cli

    monkeypatch.setattr(parallel, 'usable_cores', lambda: list(range(8)))

    def jobs(stack, given=None, ray=None):
        config = make_config(stack=stack, sweep={'grid': {'training.seed': [0, 1]}})
        return cli._sweep_jobs(argparse.Namespace(jobs=given, ray=ray), config)  # pylint: disable=protected-access

    assert jobs({'kind': 'process', 'num_workers': 2}) == 4
    assert jobs({'kind': 'process', 'num_workers': 3}, 'auto') == 2
    assert jobs({'kind': 'process', 'num_workers': 16}) == 1
    assert jobs({'kind': 'process'}) == 1  # unset: one worker per core, one point at a time
    assert jobs({'kind': 'thread'}) == 8
    assert jobs({'kind': 'process', 'num_workers': 2}, '1') == 1
    with pytest.raises(ConfigError, match='--jobs and --ray do not go together'):
        jobs({'kind': 'thread'}, '2', ray='auto')
    assert jobs({'kind': 'thread'}, None, ray='auto') == 8  # not used on Ray


def test_more_jobs_than_cores_warns_as_one_run_does(caplog):
    """points x workers > usable cores: an OversubscribedWarning at the caller's line
    through the API, one log line through the CLI; none while they fit."""
    from simharness import cli

    with pytest.warns(OversubscribedWarning, match=r'3 jobs x 2 core\(s\) per point') as seen:
        parallel.warn_if_oversubscribed(3, 2, 4)
    assert len(seen) == 1 and seen[0].filename == __file__
    assert 'jobs=2 is the most' in str(seen[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        parallel.warn_if_oversubscribed(2, 2, 4)
    with caplog.at_level(logging.WARNING, logger='simharness'):
        with cli._oversubscription_logged():  # pylint: disable=protected-access
            parallel.warn_if_oversubscribed(3, 1, 2)
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(lines) == 1 and lines[0].startswith('sweep: 3 jobs x 1 core(s) per point')


BUILDERS = """\
import keras
def good(input_shape, num_classes):
    return keras.Sequential([keras.Input(input_shape), keras.layers.Dense(num_classes)])
def good2(input_shape, num_classes):
    return good(input_shape, num_classes)
def few_out(input_shape, num_classes):
    return keras.Sequential([keras.Input(input_shape), keras.layers.Dense(7)])
"""


@pytest.mark.slow
def test_points_side_by_side_give_the_sequential_bits_and_resume(tmp_path, monkeypatch):
    """Three points (the middle one's model does not fit the data: it fails at run time)
    on two jobs: the others complete with the bits of a sequential sweep, in sweep order;
    the builders' module, on this process' sys.path only, is found by the jobs too; a
    second call skips the complete ones."""
    (tmp_path / 'psmods41.py').write_text(BUILDERS)
    monkeypatch.setattr(sys, 'path', [str(tmp_path)] + sys.path)
    config = make_config(
        model={'name': 'keras', 'keras': 'psmods41:good'},
        sweep={'grid': {'model.keras': ['psmods41:good', 'psmods41:few_out', 'psmods41:good2']}},
    )
    seq = run_sweep(config, tmp_path / 'seq', progress=False, jobs=1)
    lines = []
    par = run_sweep(config, tmp_path / 'par', progress=False, jobs=2, log=lines.append)
    assert [r.run_id for r in par] == [r.run_id for r in seq]
    assert [r.status for r in par] == [r.status for r in seq] == ['complete', 'failed', 'complete']
    assert 'output(s)' in par[1].error, par[1].error
    for a, b in zip(par, seq):
        if a.status == 'complete':
            assert _math(a.run_dir) == _math(b.run_dir)
    assert sum(' run ' in ln and '(cores ' in ln for ln in lines) == 3, lines
    again = run_sweep(config, tmp_path / 'par', progress=False, jobs=2)
    assert [r.skipped for r in again] == [True, False, True]
    sys.modules.pop('psmods41', None)


SWEEP = """
name = "long"
[data]
dataset = "synthetic"
num_clients = 6
samples_per_client = 10
dim = 5
num_classes = 3
[model]
name = "mlp"
hidden_sizes = [8]
[algorithm]
batch_size = 5
[training]
rounds = 100000
clients_per_round = 4
eval_every = 0
[stack]
kind = "thread"
[sweep.grid]
"training.seed" = [0, 1, 2]
"""


def _children(pid):
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _started_sweep(tmp_path):
    """`simharness sweep --jobs 2` of `SWEEP` (its output piped), once both running points
    are past their first round: the process, the two points' run directories and the
    sweep's child processes then (two of them its jobs)."""
    cfg = tmp_path / 'long.toml'
    cfg.write_text(SWEEP)
    env = dict(os.environ, CI='1')
    proc = subprocess.Popen(
        [
            sys.executable,
            '-m',
            'simharness.cli',
            'sweep',
            str(cfg),
            '--results',
            str(tmp_path / 'r'),
            '--jobs',
            '2',
            '--no-progress',
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
    )
    run_dirs = [tmp_path / 'r' / 'long' / f'seed={s}' for s in (0, 1)]
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:  # both points past their first round
        if all(
            (d / 'metrics.jsonl').exists() and (d / 'metrics.jsonl').read_text().strip()
            for d in run_dirs
        ):
            break
        assert proc.poll() is None, proc.stdout.read().decode()
        time.sleep(0.2)
    else:
        proc.kill()
        pytest.fail('the points did not start')
    children = _children(proc.pid)
    assert len([c for c in children if 'parallel' in ' '.join(c.cmdline())]) == 2
    return proc, run_dirs, children


@pytest.mark.slow
def test_sigterm_stops_every_running_point_and_leaves_nothing(tmp_path):
    """SIGTERM to `simharness sweep --jobs 2`: exit 143, both running points say
    'interrupted' in their summaries, no process of the sweep is left."""
    proc, run_dirs, children = _started_sweep(tmp_path)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 143, out.decode()
    for d in run_dirs:
        assert read_json(d / 'summary.json')['status'] == 'interrupted'
    assert not (tmp_path / 'r' / 'long' / 'seed=2').exists()
    time.sleep(1.0)
    assert [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE] == []


@pytest.mark.parametrize('value', ['0', '-2', 'two'])
def test_cli_jobs_must_be_a_positive_int_or_auto(tmp_path, capsys, value):
    from simharness import cli

    cfg = tmp_path / 'long.toml'
    cfg.write_text(SWEEP)
    t = time.monotonic()
    rc = cli.main(['sweep', str(cfg), '--results', str(tmp_path / 'r'), '--jobs', value])
    err = capsys.readouterr().err
    assert rc == cli.EXIT_USAGE and time.monotonic() - t < 5
    assert err.strip() == f'error: --jobs must be an int >= 1 or "auto", got \'{value}\''
    assert not (tmp_path / 'r').exists()


@pytest.mark.slow
def test_a_point_whose_job_process_is_killed_fails_naming_the_signal(tmp_path):
    """kill -9 of the job process running one point of a `jobs=2` sweep: that point is
    'failed' with an error naming SIGKILL, and its summary.json says so too (not
    'running': nothing else would ever write it); the other points run to the end and no
    job process is left."""
    from simharness.experiments.config import load_config

    path = tmp_path / 'killed.toml'
    path.write_text(
        SWEEP.replace('"training.seed" = [0, 1, 2]', '"training.rounds" = [100000, 2, 3]')
    )
    config = load_config(path)
    root = tmp_path / 'r'
    out = {}

    def sweep():
        try:
            out['results'] = run_sweep(config, root, progress=False, jobs=2)
        except BaseException as e:  # pylint: disable=broad-exception-caught  # checked below
            out['error'] = e

    thread = threading.Thread(target=sweep, daemon=True)
    thread.start()
    long_run = root / 'long' / 'rounds=100000'
    deadline = time.monotonic() + 240
    while not ((long_run / 'metrics.jsonl').exists() and read_metrics(long_run)):
        assert thread.is_alive() and time.monotonic() < deadline, out
        time.sleep(0.2)
    job = psutil.Process(read_json(long_run / 'run.lock')['pid'])
    assert 'simharness.experiments.runner.parallel' in job.cmdline()
    job.kill()
    thread.join(240)
    assert not thread.is_alive() and 'error' not in out, out
    results = out['results']
    assert [r.status for r in results] == ['failed', 'complete', 'complete'], results
    assert 'SIGKILL' in results[0].error, results[0].error
    summary = read_json(long_run / 'summary.json')
    assert summary['status'] == 'failed' and 'SIGKILL' in summary['error'], summary
    assert summary['rounds_completed'] == len(read_metrics(long_run)) >= 1
    assert [
        c for c in _children(os.getpid()) if 'simharness.experiments.runner.parallel' in c.cmdline()
    ] == []


@pytest.mark.slow
def test_jobs_of_a_sigkilled_sweep_stop_their_points_and_exit(tmp_path):
    """kill -9 of `simharness sweep --jobs 2`: its two job processes, orphaned mid-point,
    stop their points as on SIGTERM (each summary says 'interrupted') and exit, instead of
    running 100,000 rounds with no one to answer."""
    proc, run_dirs, children = _started_sweep(tmp_path)
    jobs = [c for c in children if 'simharness.experiments.runner.parallel' in c.cmdline()]
    proc.kill()
    proc.communicate()
    gone, alive = psutil.wait_procs(jobs, timeout=60)
    assert alive == [] and len(gone) == 2
    for d in run_dirs:
        summary = read_json(d / 'summary.json')
        assert summary['status'] == 'interrupted', summary
        assert summary['rounds_completed'] == len(read_metrics(d)) < 100000
