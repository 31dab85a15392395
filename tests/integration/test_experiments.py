"""End-to-end tests of the experiment layer: runs, sweeps, resume, interrupts, reports, CLI.

Runs are tiny (a few clients, 2 rounds, an 8-unit MLP). One process-stack
run (2 workers) is shared by the module; `test_experiments_one_worker.py`
checks 1 worker.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest

from simharness.errors import ConfigError, SimharnessValueError
from simharness.experiments import atomic, runner
from simharness.experiments.config import expand_sweep, load_config, tomllib
from simharness.experiments.report import write_report
from simharness.experiments.runner import is_finished, run_experiment, run_sweep
from simharness.experiments.runner import rounds as seam  # the module of the run_round seam

from experiment_helpers import (
    REPRO,
    TINY,
    make_config,
    math_only,
    read_json,
    read_metrics,
    temp_files,
)

RUN_FILES = {
    'config.toml',
    'environment.json',
    'metrics.jsonl',
    'summary.json',
    'run.log',
    'final_weights.npz',
    'best_weights.npz',
    'checkpoints',
    'tensorboard',
}
PNG = b'\x89PNG\r\n\x1a\n'


# -------------------------------------------------------------------- fixtures


@pytest.fixture(scope='module')
def thread_repro(tmp_path_factory):
    """The REPRO config on the thread stack."""
    root = tmp_path_factory.mktemp('thread')
    return run_experiment(make_config(REPRO), root, progress=False)


@pytest.fixture(scope='module')
def process_repro(tmp_path_factory):
    """The REPRO config on the process stack with 2 workers (the module's one pool).

    Yields (result, factory, seen): the factory the runner built, to check it was closed, and
    whether its workers were up while the process was built.
    """
    root = tmp_path_factory.mktemp('process')
    made, seen = [], {}
    real, real_build = seam._make_factory, seam._build_process

    def spy(config):
        made.append(real(config))
        return made[-1]

    def build(*args, **kwargs):
        # the workers start while the process is built: the runner waits for them later
        deadline = time.monotonic() + 90
        while not made[0].group.started and time.monotonic() < deadline:
            time.sleep(0.05)
        seen.setdefault('workers_up_while_building', made[0].group.started)
        return real_build(*args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(seam, '_make_factory', spy)
        mp.setattr(seam, '_build_process', build)
        result = run_experiment(
            make_config(REPRO, stack={'kind': 'process', 'num_workers': 2}), root, progress=False
        )
    yield result, made[0], seen
    made[0].close()


def _Interrupt(exc, at):
    """A replacement of runner.run_round that raises `exc` on call number `at` (0-based)."""
    real = seam.run_round
    calls = []

    def next_(fedavg, state, data):
        calls.append(None)
        if len(calls) - 1 == at:
            raise exc
        return real(fedavg, state, data)

    return next_


# ------------------------------------------------------------------------ runs


def test_run_writes_all_files_with_documented_content(tmp_path):
    config = make_config(training={'rounds': 3, 'eval_every': 2})
    result = run_experiment(config, tmp_path, progress=True)  # stderr is no TTY: bar off
    run_dir = tmp_path / 'tiny' / 'default'
    assert result.run_dir == run_dir and result.status == 'complete' and not result.skipped
    assert {p.name for p in run_dir.iterdir()} == RUN_FILES

    stored = tomllib.loads((run_dir / 'config.toml').read_text(encoding='utf-8'))
    assert stored == config.to_dict()
    assert load_config(run_dir / 'config.toml') == config

    env = read_json(run_dir / 'environment.json')
    assert set(env['packages']) == {'simharness', 'tensorflow', 'numpy'}
    assert env['packages']['numpy'] == np.__version__
    assert env['python']['version'].count('.') == 2
    assert env['cpu_count_logical'] >= 1 and 1 <= env['cpu_count_usable'] <= os.cpu_count()
    assert isinstance(env['gpus'], list)
    assert env['git'] is None or (
        len(env['git']['commit']) == 40 and env['git']['dirty'] in (True, False, None)
    )

    rows = read_metrics(run_dir)
    assert [r['round'] for r in rows] == [0, 1, 2]
    for r in rows:
        assert r['num_examples'] == 40.0  # 4 clients x 10 samples
        assert 0 <= r['accuracy'] <= 1 and r['loss'] > 0
        assert r['round_seconds'] > 0 and r['clients_per_second'] == pytest.approx(
            4 / r['round_seconds']
        )
        assert r['bytes_moved'] == 0 and r['worker_rss_bytes'] == []
        assert r['active_workers'] is None  # no worker processes
        assert r['driver_rss_bytes'] > 0 and len(r['weights_sha256']) == 64
    # eval_every = 2: after round 1, and after the last round.
    assert [r['eval_loss'] is not None for r in rows] == [False, True, True]
    assert math_only(rows)  # no unexpected fields

    s = read_json(run_dir / 'summary.json')
    assert s == dict(result.summary)
    assert s['status'] == 'complete' and s['rounds_completed'] == 3 and s['rounds'] == 3
    assert (s['stack'], s['num_workers'], s['clients_per_round']) == ('thread', None, 4)
    assert s['final_loss'] == rows[-1]['eval_loss']
    assert s['final_accuracy'] == rows[-1]['eval_accuracy']
    assert s['final_train_loss'] == rows[-1]['loss']
    assert s['final_weights_sha256'] == rows[-1]['weights_sha256']
    assert s['first_round_seconds'] == rows[0]['round_seconds']
    assert s['median_round_seconds'] == pytest.approx(
        float(np.median([r['round_seconds'] for r in rows[1:]]))
    )
    assert s['clients_per_second'] == pytest.approx(4 / s['median_round_seconds'])
    assert s['total_seconds'] >= s['setup_seconds'] > 0
    assert s['eval_on'] == 'all clients' and s['initial_eval_loss'] > 0
    assert s['bytes_moved'] == 0 and s['error'] is None


def test_eval_only_after_last_round_with_eval_every_0(tmp_path):
    result = run_experiment(
        make_config(training={'rounds': 3, 'eval_every': 0}), tmp_path, progress=False
    )
    rows = read_metrics(result.run_dir)
    assert [r['eval_accuracy'] is not None for r in rows] == [False, False, True]


def test_digits_runs_evaluate_on_the_test_set(tmp_path):
    digits = {'dataset': 'digits', 'num_clients': 5, 'partition': 'iid', 'test_fraction': 0.1}
    result = run_experiment(
        make_config(data=digits, model={'name': 'logreg'}, training={'clients_per_round': 3}),
        tmp_path,
        progress=False,
    )
    assert result.summary['eval_on'] == 'test set'
    assert result.summary['final_accuracy'] > 0.1
    cnn = make_config(
        name='cnn',
        data=digits,
        training={'rounds': 1, 'clients_per_round': 2},
        model={'name': 'cnn', 'conv_filters': [2, 2]},
    )
    assert run_experiment(cnn, tmp_path, progress=False).status == 'complete'


def test_files_dataset(tmp_path):
    from simharness.data import synthetic_alpha_beta, save_npz_dir

    data = synthetic_alpha_beta(num_clients=5, samples_per_client=10, dim=4, num_classes=3)
    save_npz_dir(data, tmp_path / 'clients')
    config = make_config(
        name='files',
        data={'dataset': 'files', 'path': str(tmp_path / 'clients')},
        training={'clients_per_round': 3},
    )
    result = run_experiment(config, tmp_path / 'results', progress=False)
    assert result.status == 'complete'
    # num_classes is found from the labels; clients_per_round is checked against the files.
    with pytest.raises(ConfigError) as info:
        run_experiment(
            make_config(
                name='files',
                data={'dataset': 'files', 'path': str(tmp_path / 'clients')},
                training={'clients_per_round': 6},
            ),
            tmp_path / 'results',
            progress=False,
        )
    assert info.value.key == 'training.clients_per_round'
    with pytest.raises(ConfigError) as info:
        run_experiment(
            make_config(name='files', data={'dataset': 'files', 'path': str(tmp_path / 'missing')}),
            tmp_path / 'results',
            progress=False,
        )
    assert info.value.key == 'data' and 'missing' in str(info.value)


def test_cohort_rules():
    ids = [str(i) for i in range(10)]
    ref = make_config(
        data={'num_clients': 10}, training={'clients_per_round': 4, 'cohort': 'reference'}
    )
    assert [runner._cohort(ref, ids, r) for r in range(3)] == [
        ['0', '1', '2', '3'],
        ['4', '5', '6', '7'],
        ['8', '9', '0', '1'],
    ]
    from simharness.data import sample_clients

    rnd = make_config(data={'num_clients': 10}, training={'clients_per_round': 4, 'seed': 5})
    assert runner._cohort(rnd, ids, 2) == sample_clients(ids, 4, 2, 5)


def test_run_with_a_sweep_grid_is_refused(tmp_path):
    config = make_config(sweep={'grid': {'training.seed': [0, 1]}})
    with pytest.raises(ConfigError, match='run_sweep'):
        run_experiment(config, tmp_path, progress=False)


def test_running_again_starts_from_scratch_and_keeps_foreign_files(tmp_path):
    first = run_experiment(make_config(training={'rounds': 3}), tmp_path, progress=False)
    (first.run_dir / 'notes.txt').write_text('mine')
    second = run_experiment(make_config(training={'rounds': 2}), tmp_path, progress=False)
    assert second.run_dir == first.run_dir
    assert len(read_metrics(second.run_dir)) == 2
    assert (first.run_dir / 'notes.txt').read_text() == 'mine'


# ------------------------------------------------------------------ interrupts


def test_keyboard_interrupt_closes_the_stack_and_marks_the_run(tmp_path, monkeypatch):
    made = []
    real = seam._make_factory
    monkeypatch.setattr(seam, '_make_factory', lambda c: made.append(real(c)) or made[-1])
    closed = []
    real_close = seam._close_factory
    monkeypatch.setattr(seam, '_close_factory', lambda f: (closed.append(f), real_close(f)))
    monkeypatch.setattr(seam, 'run_round', _Interrupt(KeyboardInterrupt(), at=1))
    with pytest.raises(KeyboardInterrupt):
        run_experiment(make_config(training={'rounds': 4}), tmp_path, progress=False)
    run_dir = tmp_path / 'tiny' / 'default'
    assert closed == made and len(made) == 1
    assert temp_files(tmp_path) == []
    s = read_json(run_dir / 'summary.json')
    assert s['status'] == 'interrupted' and s['rounds_completed'] == 1
    assert s['final_train_loss'] is not None and s['error'] is None
    rows = read_metrics(run_dir)  # every line parses: no half-written line
    assert [r['round'] for r in rows] == [0]
    assert not is_finished(run_dir)


def test_an_interrupt_hidden_by_a_failing_clean_up_still_marks_the_run_interrupted(
    tmp_path, monkeypatch
):
    # A signal's exception can land inside a library's clean-up code (TF's device scope
    # exit), which fails in turn: the error seen last carries the interrupt as its context.
    real = seam.run_round
    calls = []

    def next_(fedavg, state, data):
        calls.append(None)
        if len(calls) == 2:
            try:
                raise KeyboardInterrupt
            finally:
                raise RuntimeError('Exiting device scope without proper scope nesting')
        return real(fedavg, state, data)

    monkeypatch.setattr(seam, 'run_round', next_)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(make_config(training={'rounds': 4}), tmp_path, progress=False)
    s = read_json(tmp_path / 'tiny' / 'default' / 'summary.json')
    assert s['status'] == 'interrupted' and s['rounds_completed'] == 1 and s['error'] is None


def test_interrupt_while_writing_metrics_leaves_whole_files(tmp_path, monkeypatch):
    real_fsync = os.fsync
    calls = {'n': 0}

    def fsync(fd):
        # Metrics of round 0 are the 4th synced write (config, env, summary, metrics line),
        # appended to metrics.jsonl; the interrupt comes while it is synced.
        calls['n'] += 1
        if calls['n'] == 4:
            raise KeyboardInterrupt
        return real_fsync(fd)

    monkeypatch.setattr(atomic.os, 'fsync', fsync)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(make_config(), tmp_path, progress=False)
    run_dir = tmp_path / 'tiny' / 'default'
    assert temp_files(tmp_path) == []
    assert [r['round'] for r in read_metrics(run_dir)] == [0]  # whole lines only
    assert read_json(run_dir / 'summary.json')['status'] == 'interrupted'


def test_other_errors_mark_the_run_failed(tmp_path, monkeypatch):
    monkeypatch.setattr(seam, 'run_round', _Interrupt(RuntimeError('boom'), at=0))
    with pytest.raises(RuntimeError, match='boom'):
        run_experiment(make_config(), tmp_path, progress=False)
    s = read_json(tmp_path / 'tiny' / 'default' / 'summary.json')
    assert s['status'] == 'failed' and s['error'] == 'RuntimeError: boom'
    assert s['rounds_completed'] == 0


# ---------------------------------------------------------------------- sweeps


def test_resume_skips_finished_runs_and_reruns_the_others(tmp_path, monkeypatch):
    config = make_config(sweep={'grid': {'training.seed': [0, 1]}})
    calls = []
    real = runner.run_experiment

    def counting(cfg, root, progress=True, run_id='default'):
        calls.append(run_id)
        return real(cfg, root, progress=progress, run_id=run_id)

    monkeypatch.setattr(runner, 'run_experiment', counting)
    first = run_sweep(config, tmp_path, progress=False)
    assert calls == ['seed=0', 'seed=1'] and [r.status for r in first] == ['complete'] * 2
    assert all(is_finished(r.run_dir, cfg) for r, (_, cfg) in zip(first, expand_sweep(config)))

    # seed=1 was interrupted: only it runs again, from scratch.
    summary = first[1].run_dir / 'summary.json'
    atomic.write_json(summary, {**read_json(summary), 'status': 'interrupted'})
    calls.clear()
    second = run_sweep(config, tmp_path, progress=False, log=calls.append)
    assert calls == ['[1/2] skip seed=0 (complete)', '[2/2] run seed=1', 'seed=1']
    assert [r.skipped for r in second] == [True, False]
    assert second[0].summary == first[0].summary
    assert math_only(read_metrics(second[1].run_dir)) == math_only(read_metrics(first[1].run_dir))

    calls.clear()
    assert [r.skipped for r in run_sweep(config, tmp_path, progress=False)] == [True, True]
    assert calls == []

    # A changed experiment is not "finished": both run again.
    changed = make_config(training={'rounds': 1}, sweep={'grid': {'training.seed': [0, 1]}})
    run_sweep(changed, tmp_path, progress=False)
    assert calls == ['seed=0', 'seed=1']


# --------------------------------------------------------------------- reports


def test_report_writes_pngs_and_table(tmp_path):
    config = make_config(sweep={'grid': {'training.clients_per_round': [2, 4]}})
    runs = run_sweep(config, tmp_path, progress=False)
    paths = write_report(tmp_path / 'tiny')
    names = [p.name for p in paths]
    assert names == [
        'report.md',
        'accuracy.png',
        'loss.png',
        'round_time.png',
        'clients_per_second.png',
        'runs.csv',
        'rounds.csv',
    ]
    for p in paths[1:-2]:
        assert p.read_bytes().startswith(PNG) and p.stat().st_size > 1000
    md = paths[0].read_text(encoding='utf-8')
    rows = [line for line in md.splitlines() if line.startswith('| clients_per_round=')]
    assert len(rows) == 2
    assert f'{runs[0].summary["final_loss"]:.6f}' in rows[0] and '| thread |' in rows[0]
    for name in names[1:-2]:
        assert f']({name})' in md
    assert temp_files(tmp_path) == []

    # A run directory alone: no scaling plots. A root of several experiments: all runs.
    single = write_report(runs[0].run_dir)
    assert [p.name for p in single] == [
        'report.md',
        'accuracy.png',
        'loss.png',
        'runs.csv',
        'rounds.csv',
    ]
    run_experiment(make_config(name='other'), tmp_path, progress=False)
    md = write_report(tmp_path)[0].read_text(encoding='utf-8')
    assert 'other/default' in md and 'tiny/clients_per_round=2' in md


def test_evaluation_curves_start_at_the_initial_model(tmp_path):
    from simharness.experiments import report as R

    config = make_config(sweep={'grid': {'training.clients_per_round': [2, 4]}})
    run_sweep(config, tmp_path, progress=False)
    runs = R.load_runs(tmp_path)
    assert len(runs) == 2
    table = R.run_table(runs)
    rounds = R.round_table(runs)
    assert 'eval_loss' in rounds and rounds['round'].min() == 0
    table['setting'] = table['run']
    rounds['setting'] = rounds['run']
    for what in ('loss', 'accuracy'):
        curves = R.with_initial_points(rounds, table, what)
        first = curves[curves['round'] == R.INITIAL_ROUND].set_index('run')[f'eval_{what}']
        assert sorted(first.index) == sorted(r.label for r in runs)
        for r in runs:
            assert first[r.label] == pytest.approx(r.summary[f'initial_eval_{what}'])
        assert len(curves) == len(rounds) + len(runs)
    md = write_report(tmp_path / 'tiny')[0].read_text(encoding='utf-8')
    assert 'loss.png' in md


def test_report_without_runs_is_an_error(tmp_path):
    with pytest.raises(SimharnessValueError, match='no runs'):
        write_report(tmp_path)
    with pytest.raises(SimharnessValueError, match='does not exist'):
        write_report(tmp_path / 'nope')


# ------------------------------------------------------------------------- CLI


def _write_config(tmp_path: Path, raw: dict, name: str = 'exp.toml') -> Path:
    from simharness.experiments.config import dumps_toml

    path = tmp_path / name
    path.write_text(dumps_toml(raw), encoding='utf-8')
    return path


def test_cli_run_prints_where_results_are(tmp_path, capsys):
    from simharness.cli import main

    cfg = _write_config(tmp_path, TINY)
    code = main(
        [
            'run',
            str(cfg),
            '--results',
            str(tmp_path / 'r'),
            '--no-progress',
            '--set',
            'training.rounds=3',
            '--set',
            'training.seed=1',
        ]
    )
    out = capsys.readouterr().out
    run_dir = tmp_path / 'r' / 'tiny' / 'rounds=3,seed=1'
    assert code == 0
    assert f'results: {run_dir}' in out and str(run_dir / 'report.md') in out
    assert str(run_dir / 'accuracy.png') in out
    assert read_json(run_dir / 'summary.json')['rounds_completed'] == 3
    assert (run_dir / 'report.md').exists()


def test_cli_sweep_resumes_and_reports(tmp_path, capsys):
    from simharness.cli import main

    cfg = _write_config(tmp_path, {**TINY, 'sweep': {'grid': {'training.seed': [0, 1]}}})
    args = ['sweep', str(cfg), '--results', str(tmp_path / 'r'), '--no-progress', '--jobs', '1']
    assert main(args) == 0
    out = capsys.readouterr().out
    assert '[1/2] run seed=0' in out and str(tmp_path / 'r' / 'tiny' / 'report.md') in out
    assert main(args) == 0
    out = capsys.readouterr().out
    assert '[1/2] skip seed=0 (complete)' in out and '[2/2] skip seed=1 (complete)' in out
    assert main(['report', str(tmp_path / 'r')]) == 0
    assert 'report.md' in capsys.readouterr().out


@pytest.mark.parametrize(
    'args_for,fragment',
    [
        (lambda cfg, sweep_cfg, d: ['run', str(d / 'missing.toml')], 'does not exist'),
        (lambda cfg, sweep_cfg, d: ['run', str(cfg), '--set', 'training.round=3'], 'valid keys'),
        (
            lambda cfg, sweep_cfg, d: ['run', str(cfg), '--set', 'training.rounds=0'],
            'training.rounds',
        ),
        (lambda cfg, sweep_cfg, d: ['run', str(sweep_cfg)], 'simharness sweep'),
        (
            lambda cfg, sweep_cfg, d: [
                'sweep',
                str(cfg),
                '--set',
                'sweep.grid={"training.clients_per_round"=[4, 99]}',
            ],
            'clients_per_round=99',
        ),
        (lambda cfg, sweep_cfg, d: ['report', str(d / 'empty')], 'no runs'),
    ],
)
def test_cli_errors_exit_2_without_traceback(tmp_path, capsys, args_for, fragment):
    from simharness.cli import main

    cfg = _write_config(tmp_path, TINY)
    sweep_cfg = _write_config(
        tmp_path, {**TINY, 'sweep': {'grid': {'training.seed': [0, 1]}}}, 'sweep.toml'
    )
    (tmp_path / 'empty').mkdir()
    code = main(
        args_for(cfg, sweep_cfg, tmp_path)
        + (
            ['--results', str(tmp_path / 'r'), '--no-progress']
            if args_for(cfg, sweep_cfg, tmp_path)[0] != 'report'
            else []
        )
    )
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith('error: ') and fragment in err and 'Traceback' not in err


def test_cli_bad_toml_exits_2(tmp_path, capsys):
    from simharness.cli import main

    bad = tmp_path / 'bad.toml'
    bad.write_text('[data]\ndataset = \n')
    assert main(['run', str(bad)]) == 2
    assert 'invalid TOML' in capsys.readouterr().err


def test_cli_interrupt_exits_130(tmp_path, capsys, monkeypatch):
    from simharness.cli import main

    monkeypatch.setattr(seam, 'run_round', _Interrupt(KeyboardInterrupt(), at=0))
    cfg = _write_config(tmp_path, TINY)
    assert main(['run', str(cfg), '--results', str(tmp_path / 'r'), '--no-progress']) == 130
    assert 'interrupted' in capsys.readouterr().err
    assert (
        read_json(tmp_path / 'r' / 'tiny' / 'default' / 'summary.json')['status'] == 'interrupted'
    )


@pytest.mark.parametrize(
    'argv', [['--help'], ['run', '--help'], ['sweep', '--help'], ['report', '--help']]
)
def test_cli_help(argv, capsys):
    from simharness.cli import main

    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert 'usage: simharness' in out
    if argv[0] in ('run', 'sweep'):
        assert '--set KEY=VALUE' in out and '--results DIR' in out and '--no-progress' in out


def test_cli_usage_line_names_every_subcommand(capsys):
    """The usage line and a missing command's error list each subcommand (bench too)."""
    from simharness.cli import _parser, main

    names = list(_parser()._subparsers._group_actions[0].choices)  # pylint: disable=protected-access
    assert {'run', 'sweep', 'report', 'serve', 'bench'} <= set(names)
    with pytest.raises(SystemExit):
        main(['--help'])
    usage = capsys.readouterr().out.splitlines()[0]
    assert usage.endswith('{' + ','.join(names) + '} ...'), usage
    with pytest.raises(SystemExit):
        main([])
    assert 'required: {' + ','.join(names) + '}' in capsys.readouterr().err


def test_cli_usage_errors_exit_2(capsys):
    from simharness.cli import main

    for argv in ([], ['frobnicate'], ['run']):
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == 2
    capsys.readouterr()


# ------------------------------------------------------------- reproducibility


def test_same_config_same_metrics_on_the_thread_stack(tmp_path, thread_repro):
    again = run_experiment(
        make_config(REPRO, stack={'clients_per_thread': 7}), tmp_path, progress=False
    )
    assert math_only(read_metrics(again.run_dir)) == math_only(read_metrics(thread_repro.run_dir))


def test_process_run_files_and_stats(process_repro):
    result, factory, seen = process_repro
    assert factory.group.closed
    assert seen['workers_up_while_building'], 'the workers start during the setup'
    s = result.summary
    assert s['status'] == 'complete' and s['stack'] == 'process' and s['num_workers'] == 2
    # bytes_moved counts shared-memory buffers only: the tiny model's arrays (under
    # runtime.codec.BUFFER_MIN_BYTES) travel inline, and the clients load on the workers.
    assert s['stack_start_seconds'] > 0 and s['bytes_moved'] >= 0
    assert s['peak_worker_rss_bytes'] > 0
    rows = read_metrics(result.run_dir)
    assert s['bytes_moved'] == sum(r['bytes_moved'] for r in rows)
    for r in rows:
        assert isinstance(r['bytes_moved'], int) and r['bytes_moved'] >= 0
        assert len(r['worker_rss_bytes']) == 2 and all(x > 0 for x in r['worker_rss_bytes'])
        assert r['active_workers'] == 2  # 40 clients: both workers a round
    assert s['active_workers'] == 2


def test_process_stack_gives_the_same_weights_and_evaluation(thread_repro, process_repro):
    fields = ('round', 'num_examples', 'eval_loss', 'eval_accuracy', 'weights_sha256')
    a = read_metrics(thread_repro.run_dir)
    b = read_metrics(process_repro[0].run_dir)
    assert [{k: r[k] for k in fields} for r in b] == [{k: r[k] for k in fields} for r in a]


def test_process_stack_gives_bit_identical_metrics(thread_repro, process_repro):
    assert math_only(read_metrics(process_repro[0].run_dir)) == math_only(
        read_metrics(thread_repro.run_dir)
    )
