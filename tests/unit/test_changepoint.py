"""The benchmark history's step detector (`simharness.bench.changepoint`) and its confirmation.

Synthetic histories only (no benchmark runs, nothing timed): per commit one or more runs
whose median round time is a level times log-normal noise of two kinds, a per-commit
deviation shared by its runs (the load they met) and the scatter between runs.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from simharness.bench import changepoint as CP
from simharness.bench import history as H
from simharness.bench.compare import Comparison
from simharness.bench.results import run_from_dict
from simharness.errors import SimharnessValueError


def _sha(i):
    return f'{i + 1:040x}'


def _runs(levels, runs=2, noise=0.05, level_noise=0.02, seed=0, name='t', node='vm'):
    """A history: commit i has `runs` runs (an int or a list) at 10 ms x levels[i]."""
    rng = np.random.default_rng(seed)
    counts = [runs] * len(levels) if isinstance(runs, int) else list(runs)
    out = []
    for i, level in enumerate(levels):
        shared = rng.normal(0, level_noise)
        for rep in range(counts[i]):
            med = 0.010 * level * math.exp(shared + rng.normal(0, noise))
            times = med * np.exp(rng.normal(0, 0.02, 9))
            out.append(
                run_from_dict(
                    {
                        'machine_info': {'node': node, 'cpu': {'count': 2}},
                        'commit_info': {
                            'id': _sha(i),
                            'dirty': False,
                            'time': f'2026-11-{1 + i // 24:02d}T{i % 24:02d}:00:00+00:00',
                        },
                        'datetime': f'2026-12-01T00:{i % 60:02d}:{rep:02d}',
                        'benchmarks': [
                            {
                                'name': name,
                                'fullname': f'tests/b.py::{name}',
                                'stats': {
                                    'median': float(np.median(times)),
                                    'q1': 0.0,
                                    'q3': 0.0,
                                    'min': float(times.min()),
                                    'rounds': 9,
                                },
                                'extra_info': {'simharness': {'times': times.tolist()}},
                            }
                        ],
                    }
                )
            )
    return out


def _steps(runs, **kwargs):
    h = H.build_history(runs, **kwargs)
    return h, [(s.index, s.comparison.verdict) for n in h.names for s in h.steps[n]]


# ------------------------------------------------------------------ finding steps


@pytest.mark.parametrize('seed', range(5))
def test_one_step_is_found_at_exactly_its_first_commit(seed):
    levels = [1.0] * 9 + [1.3] * 7
    h, steps = _steps(_runs(levels, seed=seed))
    assert steps == [(9, 'slower')]
    (step,) = h.steps['t']
    assert step.commit == _sha(9) and h.points[step.index].commit == _sha(9)
    assert step.comparison.ratio == pytest.approx(1.3, rel=0.06)
    assert step.comparison.probability >= 1 - 0.05 / 15  # the confidence split among 15 places
    md = H.render_markdown(h)
    assert md.count('▲ slower x1.') == 2 and 'Step detection: noise of a run' in md


def test_a_step_at_the_newest_commit_and_a_speed_up_are_found():
    _, steps = _steps(_runs([1.0] * 12 + [1.6], runs=3, seed=3))
    assert steps == [(12, 'slower')]
    _, steps = _steps(_runs([1.0] * 6 + [0.6] * 6, seed=4))
    assert steps == [(6, 'faster')]


@pytest.mark.parametrize('seed', range(3))
def test_two_steps_are_found(seed):
    levels = [1.0] * 8 + [1.4] * 8 + [0.85] * 8
    h, steps = _steps(_runs(levels, seed=10 + seed))
    assert steps == [(8, 'slower'), (16, 'faster')]
    first, second = h.steps['t']
    assert first.comparison.ratio == pytest.approx(1.4, rel=0.06)
    assert second.comparison.ratio == pytest.approx(0.85 / 1.4, rel=0.06)


def test_flat_noisy_histories_give_no_step():
    """50 histories without a step, with 3-10 % noise: not one step (no false alarm)."""
    for seed in range(50):
        rng = np.random.default_rng(1000 + seed)
        n = int(rng.integers(5, 40))
        runs = rng.integers(1, 4, n).tolist()
        noise, level_noise = float(rng.uniform(0.03, 0.10)), float(rng.uniform(0.0, 0.05))
        _, steps = _steps(
            _runs([1.0] * n, runs=runs, noise=noise, level_noise=level_noise, seed=seed)
        )
        assert steps == [], (seed, n, noise, level_noise, steps)


def test_a_step_within_the_tolerance_or_the_noise_is_not_called():
    # 6 % slower with 1 % noise: real, and the fit finds it, but within the 10 % tolerance
    runs = _runs([1.0] * 10 + [1.06] * 10, noise=0.01, level_noise=0.0, seed=5)
    h = H.build_history(runs)
    series = [[math.log(v) for v in p.run_medians('t')] for p in h.points]
    noise = CP.estimate_noise(series)
    assert 10 in CP.fit_segments(series, noise)
    assert h.steps['t'] == []
    assert _steps(runs, tolerance=0.02)[1] == [(10, 'slower')]  # a 2 % tolerance calls it
    # 25 % slower where single runs scatter by 40 %: not beyond the noise
    for seed in range(5):
        assert (
            _steps(
                _runs([1.0] * 5 + [1.25] * 5, runs=1, noise=0.4, level_noise=0.1, seed=20 + seed)
            )[1]
            == []
        )


def test_noise_is_estimated_from_repeated_runs_and_from_neighbouring_commits():
    rng = np.random.default_rng(0)
    series = [0.1 * rng.normal(size=3) + (0.5 if i >= 10 else 0.0) for i in range(20)]
    noise = CP.estimate_noise(series)
    assert noise.within_df == 40 and 0.07 < noise.within_sd < 0.13
    assert noise.level_sd < 0.05  # the step is one of 19 differences: it barely counts
    assert CP.fit_segments(series, noise) == [10]
    # one run per commit: the spread between commits is all there is
    single = [[0.05 * x] for x in rng.normal(size=30)]
    n1 = CP.estimate_noise(single)
    assert n1.within_df == 0 and 0.025 < n1.level_sd < 0.08
    assert CP.fit_segments(single, n1) == []
    # too few commits and no repeated runs: unknown, and the history seeks no step
    assert CP.estimate_noise([[0.0], [1.0], [0.0]]) is None
    h = H.build_history(_runs([1.0, 3.0, 3.0], runs=1))
    assert h.steps['t'] == [] and h.step_noise['t'] is None
    assert 'Step detection: not sought' in H.render_markdown(h)


def test_interleaved_commits_are_still_compared_round_by_round():
    # (the other way of testing a step: see tests/plugin/test_tracking.py for the full case)
    calls = []

    def test(before, after):
        calls.append((before, after))
        return True, 1.0, 'segments'

    def pair_test(i):
        return (True, 1.0, 'pair') if i == 2 else None

    series = [[0.0, 0.01], [0.0, 0.01], [0.3, 0.31], [0.3, 0.29]]
    assert CP.find_changes(series, test, extra=[2], pair_test=pair_test) == [(2, 'pair')]
    assert calls == []


def test_the_weakest_failing_step_is_dropped_and_its_segments_merged():
    series = [[0.0], [0.0], [1.0], [1.0], [2.0], [2.0]]
    noise = CP.Noise(0.01, 10, 0.0, 0)
    assert CP.fit_segments(series, noise) == [2, 4]
    seen = []

    def test(before, after):
        seen.append((before.start, before.stop, after.start, after.stop))
        passes = (before.start, after.stop) != (0, 4)  # the step at 2 fails with segments 0-4
        return passes, float(after.start), after.start

    assert CP.find_changes(series, test, noise) == [(4, 4)]
    assert seen == [(0, 2, 2, 4), (2, 4, 4, 6), (0, 4, 4, 6)]


def test_bad_input_is_a_clear_error():
    with pytest.raises(SimharnessValueError, match=r'series\[1\]: a commit without runs'):
        CP.estimate_noise([[0.1], []])
    with pytest.raises(SimharnessValueError, match=r'series\[0\]: expected finite'):
        CP.fit_segments([[float('nan')], [0.0]], CP.Noise(0.1, 1, 0.0, 0))
    with pytest.raises(SimharnessValueError, match=r'series\[0\]: expected numbers'):
        CP.estimate_noise([['fast'], [0.0]])
    with pytest.raises(SimharnessValueError, match='series must be a sequence'):
        CP.estimate_noise('0.1 0.2')
    with pytest.raises(SimharnessValueError, match='penalty must be a positive number.*got -1'):
        CP.fit_segments([[0.0], [1.0]], CP.Noise(0.1, 1, 0.0, 0), penalty=-1)
    with pytest.raises(SimharnessValueError, match='penalty must be a positive number'):
        H.build_history(_runs([1.0, 1.0]), penalty=float('inf'))
    with pytest.raises(SimharnessValueError, match='extra change point 5 is not inside'):
        CP.find_changes([[0.0], [1.0]], lambda b, a: (True, 1.0, None), extra=[5])
    with pytest.raises(SimharnessValueError, match='tolerance must be a number'):
        H.build_history(_runs([1.0, 1.0]), tolerance=-0.5)
    with pytest.raises(SimharnessValueError, match='no benchmark run with a git commit'):
        H.build_history([])


# ------------------------------------------------------------------ the confirmation rerun


def _rerun_comparison(name, verdict, ratio):
    return Comparison(
        name=name,
        a_median=0.01,
        b_median=0.01 * ratio,
        a_rounds=30,
        b_rounds=30,
        ratio=ratio,
        raw_ratio=ratio,
        ci_low=ratio * 0.95,
        ci_high=ratio * 1.05,
        machine=None,
        normalized=False,
        verdict=verdict,
        probability=0.99,
        p_slower=0.99 if verdict == 'slower' else 0.0,
        p_faster=0.0,
        p_same=0.01,
        method='interleaved',
        tolerance=0.1,
        confidence=0.95,
    )


def _two_benchmark_history(tmp_path):
    """Saved runs: 't' 50 % slower from commit 6 on, 'u' 40 % slower from commit 3 on."""
    import json

    storage = tmp_path / 'runs' / 'Linux-CPython-3.11-64bit'
    storage.mkdir(parents=True)
    t = _runs([1.0] * 6 + [1.5] * 4, seed=1, name='t')
    u = _runs([1.0] * 3 + [1.4] * 7, seed=2, name='u')
    for k, (rt, ru) in enumerate(zip(t, u)):
        data = {
            'machine_info': rt.machine_info,
            'commit_info': {'id': rt.commit, 'time': rt.commit_time, 'dirty': False},
            'datetime': rt.datetime,
            'benchmarks': [
                {
                    'name': r.benchmarks[n].name,
                    'fullname': f'tests/b.py::{n}',
                    'stats': {'median': r.benchmarks[n].median, 'rounds': 9},
                    'extra_info': {'simharness': {'times': r.benchmarks[n].times.tolist()}},
                }
                for n, r in (('t', rt), ('u', ru))
            ],
        }
        (storage / f'{k + 1:04d}_{rt.commit[:12]}.json').write_text(json.dumps(data))
    return tmp_path / 'runs'


def test_confirm_steps_reruns_each_slower_step_and_marks_it(tmp_path):
    storage = _two_benchmark_history(tmp_path)
    calls = []

    def rerun(a, b, ids):
        calls.append((a, b, ids))
        name = ids[0].split('::')[1]
        return [_rerun_comparison(name, 'slower' if name == 't' else 'same', 1.02)]

    path, h = H.write_history(str(storage), str(tmp_path / 'out'), plots=False, rerun=rerun)
    assert [(s.name, s.index) for n in h.names for s in h.steps[n]] == [('t', 6), ('u', 3)]
    assert calls == [(_sha(5), _sha(6), ['tests/b.py::t']), (_sha(2), _sha(3), ['tests/b.py::u'])]
    t_step, u_step = h.steps['t'][0], h.steps['u'][0]
    assert t_step.status == 'confirmed' and t_step.regression
    assert u_step.status == 'unconfirmed' and not u_step.regression
    text = open(path, encoding='utf-8').read()
    assert 'rerun confirmed x1.02 (slower)' in text and 'rerun unconfirmed x1.02 (same)' in text

    # a rerun without the benchmark: unconfirmed, and says why
    _, h = H.write_history(
        str(storage), str(tmp_path / 'out'), plots=False, rerun=lambda a, b, ids: []
    )
    assert {s.status for n in h.names for s in h.steps[n]} == {'unconfirmed'}
    assert h.steps['t'][0].note == 'the rerun did not run this benchmark'

    # a step between a commit's clean and dirty runs: no two commits to rerun
    runs = _runs([1.0] * 6 + [1.5] * 2, seed=6)
    for r in runs[-4:]:
        r.commit, r.dirty = _sha(5), True
    h = H.build_history(runs)
    (step,) = h.steps['t']
    assert h.points[step.index].label == _sha(5)[:8] + '+'
    H.confirm_steps(h, rerun=lambda a, b, ids: pytest.fail('rerun of one commit'))
    assert step.status == 'unconfirmed' and 'uncommitted changes' in step.note


def test_history_confirm_and_fail_exit_codes(tmp_path, monkeypatch, capsys):
    from simharness.bench import cli
    from simharness.cli import main

    storage = str(_two_benchmark_history(tmp_path))
    out = str(tmp_path / 'out')
    verdicts = {}
    calls = []

    def fake_ab(
        baseline, candidate, pytest_args, repeat, rounds, timeout, tolerance, confidence, *rest
    ):
        calls.append((baseline, candidate, list(pytest_args), repeat, rounds))
        return [
            _rerun_comparison(i.split('::')[1], verdicts[i.split('::')[1]], 1.3)
            for i in pytest_args
        ]

    monkeypatch.setattr(cli, '_interleaved_ab', fake_ab)
    args = ['bench', 'history', storage, '--out', out, '--no-plots']
    # without --confirm nothing is rerun, and a step is no failure
    assert main(args) == 0
    text = capsys.readouterr().out
    assert '10 commits, 2 benchmarks, 2 steps' in text and calls == []
    assert 't: ▲ slower x1.5' in text and f'from {_sha(6)[:12]} on' in text
    # --fail alone: an error, since only a confirmed step is a regression
    assert main([*args, '--fail']) == 2
    assert '--fail needs --confirm' in capsys.readouterr().err
    # both reruns unconfirmed: exit 0 even with --fail
    verdicts.update(t='same', u='uncertain')
    assert main([*args, '--confirm', '--fail', '--repeat', '2', '--rounds', '10']) == 0
    text = capsys.readouterr().out
    assert calls == [
        (_sha(5), _sha(6), ['tests/b.py::t'], 2, 10),
        (_sha(2), _sha(3), ['tests/b.py::u'], 2, 10),
    ]
    assert '0 confirmed regression(s) of 2 slower step(s)' in text
    # one confirmed: exit 1 with --fail, 0 without
    verdicts.update(t='slower')
    assert main([*args, '--confirm', '--fail']) == 1
    text = capsys.readouterr().out
    assert f'1 confirmed regression(s) of 2 slower step(s): t at {_sha(6)[:12]}' in text
    assert main([*args, '--confirm']) == 0
    assert 'rerun confirmed' in open(f'{out}/history.md', encoding='utf-8').read()
    capsys.readouterr()
    assert main([*args, '--penalty', '0']) == 2
    assert 'penalty must be a positive number' in capsys.readouterr().err
