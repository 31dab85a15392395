"""The research workflow of issue 16: algorithms and Keras models from a config,
checkpoints and exact resume, appended metrics, logs, TensorBoard, callbacks."""

from __future__ import annotations

import glob
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from simharness.errors import ConfigError
from simharness.experiments import checkpoints as CK
from simharness.experiments.config import config_from_dict
from simharness.experiments.runner import run_experiment, run_sweep
from simharness.experiments.runner import rounds as seam  # the module of the run_round seam

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / 'integration'))
from experiment_helpers import TINY, make_config, read_json, read_metrics  # noqa: E402

MATH = (
    'round',
    'loss',
    'accuracy',
    'num_examples',
    'clients',
    'eval_loss',
    'eval_accuracy',
    'weights_sha256',
    'dp_epsilon',
    'dp_query_metrics/clip',
    'clipping_norm',
    'clipped_count',
)


def math_rows(run_dir):
    return [{k: r.get(k) for k in MATH} for r in read_metrics(run_dir)]


class _InterruptAt:
    """A runner.run_round raising KeyboardInterrupt on call number `at` (0-based);
    `calls` counts the calls. Install with ``setattr(seam, 'run_round', x.next)``."""

    def __init__(self, at):
        self.at, self.calls = at, 0
        real = seam.run_round

        def next_(process, state, data):
            self.calls += 1
            if self.calls - 1 == self.at:
                raise KeyboardInterrupt
            return real(process, state, data)

        self.next = next_


def _dp_config(**training):
    return make_config(
        algorithm={'name': 'fedadam', 'server_learning_rate': 0.01},
        aggregator={
            'weighted': False,
            'clip': 0.5,
            'adaptive_clip': True,
            'noise_multiplier': 0.2,
            'clipped_count_stddev': 1.0,
        },
        training={'rounds': 6, 'checkpoint_every': 2, 'eval_every': 2, **training},
    )


def test_interrupted_run_resumes_from_its_checkpoint_with_identical_metrics(tmp_path, monkeypatch):
    config = _dp_config()
    whole = run_experiment(config, tmp_path / 'a', progress=False)
    with monkeypatch.context() as m:
        m.setattr(seam, 'run_round', _InterruptAt(3).next)  # during round 3
        with pytest.raises(KeyboardInterrupt):
            run_experiment(config, tmp_path / 'b', progress=False)
    run_dir = tmp_path / 'b' / 'tiny' / 'default'
    assert read_json(run_dir / 'summary.json')['status'] == 'interrupted'
    assert [r['round'] for r in read_metrics(run_dir)] == [0, 1, 2]
    assert [p.name for p in CK.list_checkpoints(run_dir)] == ['ckpt-000002.npz']

    calls = _InterruptAt(-1)
    monkeypatch.setattr(seam, 'run_round', calls.next)
    resumed = run_experiment(config, tmp_path / 'b', progress=False)
    assert calls.calls == 4  # rounds 2..5, not 0..5
    assert resumed.summary['resumed_from_round'] == 2
    assert math_rows(run_dir) == math_rows(whole.run_dir)
    assert resumed.summary['final_weights_sha256'] == whole.summary['final_weights_sha256']
    a = CK.load_weights(run_dir / 'final_weights.npz')
    b = CK.load_weights(whole.run_dir / 'final_weights.npz')
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    rows = read_metrics(run_dir)
    assert rows[-1]['dp_epsilon'] > rows[0]['dp_epsilon'] > 0
    # the adaptive clip estimate (DP query state) restored
    assert rows[-1]['dp_query_metrics/clip'] != rows[0]['dp_query_metrics/clip']
    assert 'resuming the unfinished run at round 2' in (run_dir / 'run.log').read_text()
    steps = _tensorboard(run_dir)
    assert sorted(s for tag, s in steps if tag == 'loss') == list(range(6))  # none twice
    assert steps[('loss', 3)] == pytest.approx(rows[3]['loss'])


def _tensorboard(run_dir):
    import tensorflow as tf

    seen = {}
    for path in glob.glob(str(run_dir / 'tensorboard' / 'events.out.tfevents.*')):
        for e in tf.compat.v1.train.summary_iterator(path):
            for v in e.summary.value:
                assert (v.tag, e.step) not in seen
                seen[(v.tag, e.step)] = float(tf.make_ndarray(v.tensor))
    return seen


@pytest.mark.process
def test_keras_fedadam_dp_interrupted_on_processes_resumes_to_the_thread_stack_bits(
    tmp_path, monkeypatch
):
    config = make_config(
        model={'name': 'keras', 'keras': 'simharness.learning.keras_examples:dense'},
        algorithm={'name': 'fedadam', 'server_learning_rate': 0.01},
        aggregator={'weighted': False, 'clip': 0.5, 'noise_multiplier': 0.3},
        training={'rounds': 4, 'checkpoint_every': 2, 'eval_every': 2},
    )
    whole = run_experiment(config, tmp_path / 'a', progress=False)
    on_processes = make_config(
        model={'name': 'keras', 'keras': 'simharness.learning.keras_examples:dense'},
        algorithm={'name': 'fedadam', 'server_learning_rate': 0.01},
        aggregator={'weighted': False, 'clip': 0.5, 'noise_multiplier': 0.3},
        training={'rounds': 4, 'checkpoint_every': 2, 'eval_every': 2},
        stack={'kind': 'process', 'num_workers': 2, 'cpu_affinity': False},
    )
    with monkeypatch.context() as m:
        m.setattr(seam, 'run_round', _InterruptAt(3).next)
        with pytest.raises(KeyboardInterrupt):
            run_experiment(on_processes, tmp_path / 'b', progress=False)
    resumed = run_experiment(on_processes, tmp_path / 'b', progress=False)
    assert resumed.summary['resumed_from_round'] == 2
    assert math_rows(resumed.run_dir) == math_rows(whole.run_dir)


def test_restart_and_finished_runs_start_from_round_0(tmp_path, monkeypatch):
    config = make_config(training={'rounds': 3, 'checkpoint_every': 1})
    with monkeypatch.context() as m:
        m.setattr(seam, 'run_round', _InterruptAt(2).next)
        with pytest.raises(KeyboardInterrupt):
            run_experiment(config, tmp_path, progress=False)
    calls = _InterruptAt(-1)
    monkeypatch.setattr(seam, 'run_round', calls.next)
    run_experiment(config, tmp_path, progress=False, resume=False)
    assert calls.calls == 3
    run_experiment(config, tmp_path, progress=False)  # complete: again from scratch
    assert calls.calls == 6
    changed = make_config(training={'rounds': 4, 'checkpoint_every': 1})
    run_experiment(changed, tmp_path, progress=False)  # another config: from scratch
    assert calls.calls == 10


def test_sweep_resumes_an_interrupted_point(tmp_path, monkeypatch):
    config = make_config(
        training={'rounds': 4, 'checkpoint_every': 2}, sweep={'grid': {'training.seed': [0, 1]}}
    )
    with monkeypatch.context() as m:
        m.setattr(seam, 'run_round', _InterruptAt(7).next)  # second run, its round 3
        with pytest.raises(KeyboardInterrupt):
            run_sweep(config, tmp_path, progress=False)
    calls = _InterruptAt(-1)
    monkeypatch.setattr(seam, 'run_round', calls.next)
    runs = run_sweep(config, tmp_path, progress=False)
    assert [r.skipped for r in runs] == [True, False] and calls.calls == 2


def test_early_stopping_best_model_tensorboard_and_log(tmp_path, capsys):
    config = make_config(
        training={
            'rounds': 30,
            'eval_every': 1,
            'early_stopping_patience': 1,
            'early_stopping_metric': 'eval_accuracy',
        },
        algorithm={'client_learning_rate': 2.0},
    )
    result = run_experiment(config, tmp_path, progress=True)  # no TTY: a line per round
    s = result.summary
    rows = read_metrics(result.run_dir)
    assert s['status'] == 'complete' and s['stopped_early_after_round'] == rows[-1]['round'] < 29
    accs = [r['eval_accuracy'] for r in rows]
    assert accs[-1] <= max(accs[:-1])
    assert s['best_value'] == max(accs) and rows[s['best_round']]['eval_accuracy'] == max(accs)
    best = CK.load_weights(result.run_dir / 'best_weights.npz')
    assert CK.load_weights(result.run_dir / 'final_weights.npz')[0].shape == best[0].shape
    err = capsys.readouterr().err
    assert err.count('tiny/default: round ') == len(rows)
    log = (result.run_dir / 'run.log').read_text()
    assert log.count(' INFO simharness.experiments.runner: tiny/default: round ') == len(rows)
    assert 'stopped early' in log

    seen = _tensorboard(result.run_dir)
    assert seen[('loss', 0)] == pytest.approx(rows[0]['loss'])
    assert seen[('eval_accuracy', rows[-1]['round'])] == pytest.approx(accs[-1])


def test_keras_model_from_config_runs_and_bad_references_are_config_errors(tmp_path):
    config = make_config(
        model={'name': 'keras', 'keras': 'simharness.learning.keras_examples:dense'},
        training={'rounds': 2},
    )
    result = run_experiment(config, tmp_path, progress=False)
    assert result.status == 'complete' and 0 <= result.summary['final_accuracy'] <= 1
    alone = config_from_dict(
        {**TINY, 'model': {'keras': 'simharness.learning.keras_examples:dense'}}
    )
    assert alone.model.name == 'keras'
    with pytest.raises(ConfigError, match='model.keras is required'):
        make_config(model={'name': 'keras'})
    with pytest.raises(ConfigError, match='package.module:function'):
        make_config(model={'name': 'keras', 'keras': 'no_colon'})
    bad = make_config(model={'name': 'keras', 'keras': 'simharness.nope:f'})
    with pytest.raises(ConfigError, match="cannot import 'simharness.nope'"):
        run_experiment(bad, tmp_path, progress=False)


@pytest.mark.parametrize(
    'table, fragment',
    [
        ({'algorithm': {'name': 'fedfoo'}}, 'algorithm.name must be one of'),
        ({'algorithm': {'server_optimizer': 'rmsprop'}}, 'algorithm.server_optimizer'),
        ({'aggregator': {'noise_multiplier': 1.0, 'clip': 1.0}}, 'weighted = false'),
        ({'aggregator': {'secure': True, 'weighted': False}}, 'quantize_bits'),
        ({'aggregator': {'dp_delta': 2}}, 'aggregator.dp_delta'),
        ({'training': {'availability': 0}}, 'training.availability'),
        ({'training': {'cohort': 'roundrobin'}}, 'training.cohort'),
    ],
)
def test_config_errors_name_the_key(table, fragment):
    with pytest.raises(ConfigError, match=fragment):
        config_from_dict({**TINY, **table})


@pytest.mark.parametrize(
    'cohort, availability', [('weighted', 1.0), ('with_replacement', 1.0), ('random', 0.5)]
)
def test_cohort_variants_run(tmp_path, cohort, availability):
    config = make_config(training={'cohort': cohort, 'availability': availability, 'rounds': 2})
    result = run_experiment(config, tmp_path, progress=False)
    rows = read_metrics(result.run_dir)
    assert result.status == 'complete'
    if availability < 1:
        assert all(1 <= r['clients'] <= 4 for r in rows)
    else:
        assert all(r['clients'] == 4 for r in rows)


def test_metrics_are_appended_not_rewritten(tmp_path, monkeypatch):
    from simharness.experiments import atomic

    written = []
    real = atomic.write_jsonl
    monkeypatch.setattr(atomic, 'write_jsonl', lambda p, rows: written.append(p) or real(p, rows))
    result = run_experiment(make_config(training={'rounds': 3}), tmp_path, progress=False)
    assert written == [] and len(read_metrics(result.run_dir)) == 3
    lines = (result.run_dir / 'metrics.jsonl').read_text().splitlines()
    assert [json.loads(x)['round'] for x in lines] == [0, 1, 2]


# --------------------------------------------------------------------- reports


def test_report_groups_seeds_sorts_numerically_and_plots_only_what_fits(tmp_path):
    import pandas as pd
    from simharness.experiments.report import write_report

    config = make_config(
        training={'rounds': 2, 'tensorboard': False},
        sweep={
            'grid': {'algorithm.client_learning_rate': [0.2, 0.05, 0.1], 'training.seed': [0, 1]}
        },
    )
    runs = run_sweep(config, tmp_path, progress=False)
    paths = write_report(tmp_path / 'tiny')
    # A learning-rate sweep: no plot against workers.
    assert [p.name for p in paths] == [
        'report.md',
        'accuracy.png',
        'loss.png',
        'runs.csv',
        'rounds.csv',
    ]
    table = pd.read_csv(tmp_path / 'tiny' / 'runs.csv')
    assert len(table) == 6 and list(table['algorithm.client_learning_rate']) == [
        0.05,
        0.05,
        0.1,
        0.1,
        0.2,
        0.2,
    ]  # numeric order, not the sweep's or the text's
    rounds = pd.read_csv(tmp_path / 'tiny' / 'rounds.csv')
    assert len(rounds) == 12 and {'run', 'round', 'loss', 'training.seed'} <= set(rounds)
    md = paths[0].read_text(encoding='utf-8')
    section = md.split('## Over seeds', 1)[1]
    rows = [line for line in section.splitlines() if line.startswith('| 0.')]
    assert [r.split(' | ')[0] for r in rows] == ['| 0.05', '| 0.1', '| 0.2']
    by_lr = {}
    for r in runs:
        lr = r.run_id.split(',')[0].split('=')[1]
        by_lr.setdefault(lr, []).append(r.summary['final_loss'])
    mean, sd = np.mean(by_lr['0.1']), np.std(by_lr['0.1'], ddof=1)
    assert f'{mean:.4f} ± {sd:.4f}' in rows[1]


def test_a_custom_callback_sees_every_round_and_can_stop_the_run(tmp_path):
    class StopAtRound(CK.Callback):
        def __init__(self):
            self.seen = []

        def on_round_end(self, round_num, row, weights):
            self.seen.append((round_num, row['loss'], len(weights)))
            return round_num == 1

    cb = StopAtRound()
    result = run_experiment(
        make_config(training={'rounds': 5}), tmp_path, progress=False, callbacks=[cb]
    )
    assert [r for r, _, _ in cb.seen] == [0, 1] and cb.seen[0][2] == 4  # mlp [8]: 4 tensors
    assert result.summary['stopped_early_after_round'] == 1
    assert result.summary['rounds_completed'] == 2


def test_validating_a_full_config_imports_no_tensorflow():
    import subprocess

    code = (
        'import sys; from simharness.experiments.config import config_from_dict; '
        "config_from_dict({'name': 'x', 'aggregator': {'clip': 1.0, 'noise_multiplier': 1.0, "
        "'weighted': False}, 'algorithm': {'name': 'fedyogi'}, 'model': {'keras': 'a.b:c'}, "
        "'data': {'dataset': 'emnist', 'cache_dir': '/nowhere'}}); "
        "print('tensorflow' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, '-c', code], capture_output=True, text=True, check=True, timeout=120
    ).stdout.split()
    assert out == ['False']


def test_federated_evaluation_from_the_config_matches_the_central_one(tmp_path):
    config = make_config(training={'rounds': 2, 'federated_eval': True, 'eval_every': 1})
    rows = read_metrics(run_experiment(config, tmp_path, progress=False).run_dir)
    for r in rows:  # TINY evaluates centrally on all clients' data: the same examples
        assert r['fed_eval_loss'] == pytest.approx(r['eval_loss'], rel=1e-5)
        assert r['fed_eval_accuracy'] == pytest.approx(r['eval_accuracy'])


def test_the_summary_says_which_computations_xla_compiled_and_the_stack_can_force_it(tmp_path):
    auto = run_experiment(make_config(training={'rounds': 1}), tmp_path / 'auto', progress=False)
    forced = run_experiment(
        make_config(training={'rounds': 1}, stack={'jit_compile': True}),
        tmp_path / 'on',
        progress=False,
    )
    reasons = {r['reason'] for r in auto.summary['xla'].values()}
    assert auto.summary['xla'] and not any(r['compiled'] for r in auto.summary['xla'].values())
    assert any(r.startswith('takes or returns a dataset') for r in reasons), reasons
    assert 'no matmul (nothing for XLA to gain)' in reasons
    on = forced.summary['xla']
    assert any(r['compiled'] and r['reason'] == 'forced on' for r in on.values()), on
    assert np.isfinite(forced.summary['final_loss'])
    assert abs(forced.summary['final_loss'] - auto.summary['final_loss']) < 1e-4
    with pytest.raises(ConfigError, match='stack.jit_compile must be true or false'):
        make_config(stack={'jit_compile': 'yes'})
