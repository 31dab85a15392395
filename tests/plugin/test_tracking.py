"""Regression tracking: the plugin's recorded rounds, comparison verdicts, history, the CLI.

The issue's proof (`test_30_percent_slowdown_detected_and_rerun_not`): on this
(noisy, shared) machine, in one test session, three real benchmark sessions take
turns round by round (``simharness bench ab``'s machinery): the baseline A, an
unchanged re-run R and B, where one benchmark is made 30 % slower. On synthetic
round times at the real start times, B/A must be 'slower' for that benchmark
(and 'same' for the other); R/A must be 'same'.
"""

from __future__ import annotations

import collections
import json
import os

import numpy as np
import pytest

from simharness.bench import compare as C
from simharness.bench import history as H
from simharness.bench import probe
from simharness.bench.results import find_runs, load_run, resolve_runs, run_from_dict
from simharness.errors import SimharnessValueError

pytest_plugins = ['pytester']


# ------------------------------------------------------------------ synthetic saved runs


def _bench(name, times, cal=None, rss=None, fp=None, starts=None):
    times = [float(t) for t in times]
    q = np.quantile(times, [0.25, 0.5, 0.75])
    own = {
        'times': times,
        'calibration': {
            'workload': probe.CALIBRATION_WORKLOAD,
            'times': list(cal if cal is not None else [1e-3] * len(times)),
        },
        'memory': {'total_peak_rss_bytes': rss} if rss else {},
        'fingerprint': fp,
    }
    if starts is not None:
        own['starts'] = [float(s) for s in starts]
    return {
        'name': name,
        'fullname': f'test_x.py::{name}',
        'group': None,
        'stats': {
            'median': float(q[1]),
            'q1': float(q[0]),
            'q3': float(q[2]),
            'min': min(times),
            'rounds': len(times),
        },
        'extra_info': {'simharness': own},
    }


def _run(
    benchmarks,
    commit='c' * 40,
    dirty=False,
    when='2026-11-23T08:00:00',
    ctime=None,
    node='vm',
    interleave=None,
):
    data = {
        'machine_info': {
            'node': node,
            'machine': 'x86_64',
            'system': 'Linux',
            'python_implementation': 'CPython',
            'python_version': '3.11.7',
            'cpu': {'brand_raw': 'AMD EPYC', 'count': 2},
        },
        'commit_info': {'id': commit, 'time': ctime or when, 'dirty': dirty, 'branch': 'main'},
        'datetime': when,
        'benchmarks': benchmarks,
    }
    if interleave:
        data['simharness'] = {'interleave': interleave}
    return run_from_dict(data)


def _times(median, n=30, spread=0.03, seed=0):
    rng = np.random.default_rng(seed)
    return median * np.exp(rng.normal(0, spread, n))


# ------------------------------------------------------------------ fingerprints


def test_fingerprint_is_exact_and_structural():
    import simharness as sh

    w = [np.arange(6, dtype=np.float32).reshape(2, 3), np.float32(1.5)]
    f = probe.fingerprint
    assert f(w) == f([a.copy() for a in w])
    assert f({'b': 1, 'a': w}) == f({'a': w, 'b': 1})  # a plain dict's order does not matter
    bumped = w[0].copy()
    bumped.view(np.int32)[0, 0] += 1  # one ulp
    assert f([bumped, w[1]]) != f(w)
    assert f(w[0]) != f(w[0].astype(np.float64))
    assert f(w[0]) != f(w[0].reshape(3, 2))
    assert f((1, 2)) == f([1, 2]) and f([1, 2]) != f([[1, 2]])
    assert f(sh.Struct([('a', w[0])])) != f(sh.Struct([('b', w[0])]))
    assert f(float('nan')) == f(float('nan'))
    with pytest.raises(TypeError, match='cannot hash a value of type object'):
        f([object()])


# ------------------------------------------------------------------ comparisons


def test_one_run_per_side_without_history_is_uncertain():
    a = _run([_bench('t', _times(0.010))])
    b = _run([_bench('t', _times(0.020, seed=1))])
    (c,) = C.compare_runs([a], [b])
    assert c.verdict == 'uncertain' and c.probability is None
    assert 'between-run noise unknown' in c.note
    assert c.ratio == pytest.approx(2.0, rel=0.05)


def test_repeated_runs_give_verdicts_with_stated_probability():
    def side(median, seeds):
        return [
            _run([_bench('t', _times(median * (1 + 0.02 * (s % 3 - 1)), seed=s))]) for s in seeds
        ]

    base = side(0.010, [1, 2, 3])
    slow = C.compare_runs(base, side(0.013, [4, 5, 6]))[0]
    assert slow.verdict == 'slower' and slow.probability >= 0.95 and slow.regression
    assert slow.ci_low > 1.1 and slow.ci_low < slow.ratio < slow.ci_high
    same = C.compare_runs(base, side(0.010, [7, 8, 9]))[0]
    assert same.verdict == 'same' and same.p_same >= 0.95 and not same.regression
    fast = C.compare_runs(base, side(0.007, [10, 11, 12]))[0]
    assert fast.verdict == 'faster'
    # A 5 % change is within the 10 % tolerance: never 'slower'
    assert C.compare_runs(base, side(0.0105, [13, 14, 15]))[0].verdict in ('same', 'uncertain')


def test_between_run_noise_from_history_decides_single_runs():
    # history: the same commit run 3 times scatters by about 30 %
    hist = [
        _run([_bench('t', _times(m))], commit='h' * 40, when=f'2026-11-22T0{i}:00:00')
        for i, m in enumerate((0.010, 0.013, 0.0077))
    ]
    sd, df = C.between_run_noise(hist, 't')
    assert df == 2 and 0.2 < sd < 0.35
    a = _run([_bench('t', _times(0.010))], commit='a' * 40)
    b = _run([_bench('t', _times(0.013, seed=2))], commit='b' * 40)
    c = C.compare_runs([a], [b], history=hist)[0]
    assert c.verdict == 'uncertain' and c.noise_df == 2  # 30 % is within that noise
    quiet = [
        _run([_bench('t', _times(m))], commit='q' * 40, when=f'2026-11-22T0{i}:00:00')
        for i, m in enumerate((0.010, 0.0101, 0.0099, 0.01005))
    ]
    c = C.compare_runs([a], [b], history=quiet)[0]
    assert c.verdict == 'slower' and c.noise_df == 3
    # runs of interleaved sessions and the runs compared are not history
    assert C.between_run_noise([*quiet, a, b], 't', exclude=[a, b]) == C.between_run_noise(
        quiet, 't'
    )


def test_interleaved_rounds_are_paired_in_time():
    rng = np.random.default_rng(3)
    n = 60
    load = np.exp(rng.normal(0, 0.4, n))  # the machine's load, shared by neighbouring rounds
    t0 = 1.8e9
    sa = t0 + np.arange(n) * 0.05
    sb = sa + 0.02
    a_times = 0.01 * load * np.exp(rng.normal(0, 0.02, n))
    inter = {'session': 's1', 'side': 'A', 'turns': n}

    def pair(factor, seed):
        r = np.random.default_rng(seed)
        b_times = 0.01 * factor * load * np.exp(r.normal(0, 0.02, n))
        a = _run([_bench('t', a_times, starts=sa)], interleave=dict(inter))
        b = _run([_bench('t', b_times, starts=sb)], interleave=dict(inter, side='B'))
        return C.compare_runs([a], [b])[0]

    slow = pair(1.3, 4)
    assert slow.method == 'interleaved' and slow.verdict == 'slower'
    assert slow.ratio == pytest.approx(1.3, rel=0.03)
    same = pair(1.0, 5)
    assert same.verdict == 'same'
    # without the round start times, the rounds are pooled (unpaired): the load's scatter
    # widens the interval
    a = _run([_bench('t', a_times)])
    b = _run([_bench('t', 0.013 * load * np.exp(np.random.default_rng(4).normal(0, 0.02, n)))])
    unpaired = C.compare_measurements(
        't', [a.benchmarks['t']], [b.benchmarks['t']], interleaved=True
    )
    assert unpaired.method == 'interleaved-unpaired'
    assert unpaired.ci_high - unpaired.ci_low > 3 * (slow.ci_high - slow.ci_low)


def test_memory_and_changed_results_are_flagged():
    base = [
        _run([_bench('t', _times(0.01, seed=s), rss=500 << 20, fp='sha256:aa')]) for s in (1, 2, 3)
    ]
    faster = [
        _run([_bench('t', _times(0.006, seed=s), rss=700 << 20, fp='sha256:bb')]) for s in (4, 5, 6)
    ]
    c = C.compare_runs(base, faster)[0]
    assert c.verdict == 'faster' and c.results_changed
    assert c.flags == ['FASTER BUT RESULTS CHANGED', 'MORE MEMORY']
    assert C.any_regression([c])  # more memory
    table = C.format_comparisons([c])
    assert '**FASTER BUT RESULTS CHANGED**' in table and 'CHANGED |' in table
    same = [
        _run([_bench('t', _times(0.01, seed=s), rss=505 << 20, fp='sha256:aa')]) for s in (7, 8, 9)
    ]
    c = C.compare_runs(base, same)[0]
    assert c.flags == [] and c.results_changed is False and c.memory_change == 'same'


def test_bad_arguments_are_clear_errors():
    a = _run([_bench('t', _times(0.01))])
    with pytest.raises(SimharnessValueError, match='tolerance must be a number'):
        C.compare_runs([a], [a], tolerance=-0.1)
    with pytest.raises(SimharnessValueError, match='confidence'):
        C.compare_runs([a], [a], confidence=1.5)
    with pytest.raises(SimharnessValueError, match='no benchmark in common'):
        C.compare_runs([a], [_run([_bench('u', _times(0.01))])])
    with pytest.raises(SimharnessValueError, match='not a pytest-benchmark JSON'):
        run_from_dict({'x': 1})


# ------------------------------------------------------------------ history


def _history_runs():
    runs = []
    for i in range(6):  # a 50 % slow-down of 't' at commit 3; 'u' flat; 2 runs per commit
        for rep in range(2):
            med_t = 0.010 * (1.5 if i >= 3 else 1.0) * (1 + 0.02 * (rep - 0.5))
            med_u = 0.002 * (1 + 0.03 * (rep - 0.5))
            runs.append(
                _run(
                    [
                        _bench(
                            't',
                            _times(med_t, seed=10 * i + rep),
                            rss=600 << 20,
                            fp='sha256:' + ('11' if i < 5 else '22') * 32,
                        ),
                        _bench('u', _times(med_u, seed=100 + 10 * i + rep)),
                    ],
                    commit=f'{i:x}' * 40,
                    ctime=f'2026-11-23T0{i}:00:00+00:00',
                    when=f'2026-11-23T0{i}:{rep}0:00',
                )
            )
    return runs


def test_history_finds_the_step_and_only_it(tmp_path):
    runs = _history_runs()
    # another machine and an interleaved session are not part of this history
    runs.append(_run([_bench('t', _times(0.05))], node='other', commit='9' * 40))
    runs.append(
        _run([_bench('t', _times(0.05))], commit='0' * 40, interleave={'session': 'x', 'side': 'A'})
    )
    h = H.build_history(runs)
    assert [p.label for p in h.points] == [f'{i:x}' * 8 for i in range(6)]
    assert [(s.name, s.index, s.comparison.verdict) for n in h.names for s in h.steps[n]] == [
        ('t', 3, 'slower')
    ]
    assert h.steps['t'][0].comparison.ratio == pytest.approx(1.5, rel=0.05)
    assert h.noise['t'][1] == 6 and len(h.other_machines) == 1
    md = H.render_markdown(h, plots_dir='plots')
    assert md.count('▲ slower x1.5') == 2 and md.count('▼ faster x') == 0  # overview + table
    assert '**changed**' in md
    assert '| `33333333` | 2 |' in md


def test_history_compares_commits_that_took_turns_round_by_round():
    rng = np.random.default_rng(7)
    n = 40
    runs = []
    for rot in range(2):  # two rotations of three commits; the third is 30 % slower
        load = np.exp(rng.normal(0, 0.4, n))  # shared by the rounds of a rotation
        t0 = 1.8e9 + rot * 1000
        for i in range(3):
            factor = 1.3 if i == 2 else 1.0
            times = 0.01 * factor * load * np.exp(rng.normal(0, 0.02, n))
            runs.append(
                _run(
                    [_bench('t', times, starts=t0 + np.arange(n) * 0.1 + i * 0.01)],
                    commit=f'{i + 1:x}' * 40,
                    ctime=f'2026-11-23T0{i}:00:00+00:00',
                    when=f'2026-11-23T0{i}:{rot}0:00',
                    interleave={'session': f'rot{rot}', 'side': str(i), 'history': True},
                )
            )
    h = H.build_history(runs)
    assert len(h.points) == 3 and all(len(p.runs) == 2 for p in h.points)
    (step,) = h.steps['t']
    assert step.index == 2 and step.comparison.verdict == 'slower'
    assert step.comparison.method == 'interleaved'
    assert step.comparison.ratio == pytest.approx(1.3, rel=0.03)


def test_write_history_and_cli(tmp_path, capsys):
    from simharness.cli import main

    storage = tmp_path / 'runs' / 'Linux-CPython-3.11-64bit'
    storage.mkdir(parents=True)
    for i, r in enumerate(_history_runs()):
        data = {
            'machine_info': r.machine_info,
            'commit_info': {'id': r.commit, 'time': r.commit_time, 'dirty': r.dirty},
            'datetime': r.datetime,
            'benchmarks': [
                _bench(n, m.times, rss=m.memory.get('total_peak_rss_bytes'), fp=m.fingerprint)
                for n, m in r.benchmarks.items()
            ],
        }
        (storage / f'{i + 1:04d}_{r.commit[:12]}.json').write_text(json.dumps(data))
    (storage / 'notes.json').write_text('{"not": "a run"}')  # skipped
    assert len(find_runs(str(tmp_path / 'runs'))) == 12
    out = tmp_path / 'report'
    assert main(['bench', 'history', str(tmp_path / 'runs'), '--out', str(out)]) == 0
    assert '6 commits, 2 benchmarks, 1 steps' in capsys.readouterr().out
    assert (out / 'history.md').read_text().count('▲ slower x') == 2  # overview + table of t
    assert sorted(os.listdir(out / 'plots')) == ['overview.png', 't.png', 'u.png']

    # compare: run numbers, commits (pooled runs), --fail
    runs_dir = str(tmp_path / 'runs')
    assert len(resolve_runs('2' * 8, runs_dir)) == 2
    assert main(['bench', 'compare', '2' * 8, '3' * 8, '--storage', runs_dir, '--fail']) == 1
    text = capsys.readouterr().out
    assert '| t |' in text and 'slower' in text and '1 regression(s): t' in text
    assert (
        main(['bench', 'compare', '0003,0004', '0005,0006', '--storage', runs_dir, '-k', '^u$'])
        == 0
    )
    text = capsys.readouterr().out
    assert '| u |' in text and '| t |' not in text
    assert main(['bench', 'compare', '0042', '0001', '--storage', runs_dir]) == 2
    assert "no saved run '0042'" in capsys.readouterr().err
    assert main(['bench', 'compare', str(tmp_path / 'nope.json'), '0001']) == 2
    assert 'is not a file' in capsys.readouterr().err


def test_every_benchmark_run_can_append_to_the_history(pytester, tmp_path, monkeypatch):
    """pytest-benchmark's --benchmark-autosave into the history's storage appends each run
    (one JSON file, numbered, in the folder of its platform); the history reads them per
    machine and per commit (here the commit is given as `bench run --rev` gives it)."""
    from simharness.pytest_plugin import COMMIT_INFO_ENV

    pytester.makepyfile(
        test_s='def test_s(benchmark):\n    benchmark.pedantic(sum, args=(range(10),), rounds=3)\n'
    )
    storage = tmp_path / 'runs'
    for i, sha in enumerate(('a' * 40, 'a' * 40, 'b' * 40)):
        monkeypatch.setenv(
            COMMIT_INFO_ENV,
            json.dumps({'id': sha, 'time': f'2026-11-2{i // 2}T00:00:00+00:00', 'dirty': False}),
        )
        result = pytester.runpytest_inprocess(
            '-p',
            'no:cacheprovider',
            '--benchmark-autosave',
            f'--benchmark-storage=file://{storage}',
        )
        result.assert_outcomes(passed=1)
    files = sorted(p.name for p in storage.glob('*/*.json'))
    assert [f[:5] for f in files] == ['0001_', '0002_', '0003_']
    h = H.build_history(find_runs(str(storage)))
    assert [(p.commit[0], len(p.runs)) for p in h.points] == [('a', 2), ('b', 1)]
    assert h.names == ['test_s'] and h.noise['test_s'][1] == 1
    assert h.points[0].runs[0].benchmarks['test_s'].fullname == 'test_s.py::test_s'


# ------------------------------------------------------------------ the plugin records

PLUGIN_TEST = """
import numpy as np
import tensorflow as tf
import simharness as sh

CALLS = []

@sh.tf_computation(tf.float32)
def double(x):
    return x * 2.0

@sh.federated_computation(sh.type_at_clients(tf.float32))
def total(xs):
    return sh.federated_sum(sh.federated_map(double, xs))

def one_round(xs):
    CALLS.append(1)
    return total(xs)

def test_round(simharness_benchmark):
    CALLS.clear()
    result = simharness_benchmark.round(one_round, [1.0, 2.0, 3.0], clients=3)
    assert float(result) == 12.0
    with open('calls.txt', 'w') as f:
        f.write(str(len(CALLS)))
"""


def _saved(pytester, *args):
    result = pytester.runpytest_inprocess(
        '-p', 'no:cacheprovider', '--benchmark-json=out.json', *args
    )
    result.assert_outcomes(passed=1)
    data = json.loads((pytester.path / 'out.json').read_text())
    calls = int((pytester.path / 'calls.txt').read_text())
    return data, data['benchmarks'][0] if data['benchmarks'] else None, calls


def test_round_honours_pytest_benchmark_options(pytester):
    import simharness.framework  # noqa: F401  (TF imported outside the in-process runs)

    pytester.makepyfile(test_user=PLUGIN_TEST)
    data, b, calls = _saved(pytester, '--benchmark-min-rounds=4', '--benchmark-max-time=0')
    own = b['extra_info']['simharness']
    assert b['stats']['rounds'] == 4 and calls == 1 + 4
    assert len(own['times']) == len(own['starts']) == len(own['calibration']['times']) == 4
    assert own['first_round_seconds'] > 0 and own['warmup_rounds'] == 1
    assert b['extra_info']['simharness_first_round_seconds'] == own['first_round_seconds']
    assert own['fingerprint'] == probe.fingerprint(np.float32(12.0))
    assert own['clients_per_second'] == pytest.approx(3 / b['stats']['median'])
    memory = own['memory']
    assert memory['driver_peak_rss_bytes'] > 50 << 20 and memory['workers_peak_rss_bytes'] == []
    assert memory['method'] in ('VmHWM', 'rss-after')
    assert data['machine_info']['simharness']['fingerprint']
    run = load_run(str(pytester.path / 'out.json'))
    assert run.benchmarks['test_round[thread]'].times.size == 4

    # max-time: rounds continue until that much timed work (and at least min-rounds)
    _, b, calls = _saved(pytester, '--benchmark-min-rounds=2', '--benchmark-max-time=0.3')
    assert sum(b['extra_info']['simharness']['times']) >= 0.3 and b['stats']['rounds'] >= 2
    # warm-up on: the first round plus warmup-iterations more (within max-time), untimed
    _, b, calls = _saved(
        pytester,
        '--benchmark-warmup=on',
        '--benchmark-warmup-iterations=3',
        '--simharness-rounds=2',
        '--benchmark-max-time=30',
    )
    assert b['extra_info']['simharness']['warmup_rounds'] == 4 and calls == 4 + 2
    # --simharness-rounds overrides pytest-benchmark's rule
    _, b, calls = _saved(pytester, '--simharness-rounds=3', '--benchmark-max-time=5')
    assert b['stats']['rounds'] == 3 and calls == 1 + 3
    # disabled: one untimed call
    data, b, calls = _saved(pytester, '--benchmark-disable')
    assert calls == 1


def test_round_checks_its_arguments(pytester):
    import simharness.framework  # noqa: F401

    pytester.makepyfile(
        test_bad="""
import pytest

def test_bad(simharness_benchmark):
    with pytest.raises(ValueError, match='rounds must be an int >= 1'):
        simharness_benchmark.round(lambda: 1, rounds=0)
    with pytest.raises(TypeError, match='warmup_rounds must be an int >= 0.*float'):
        simharness_benchmark.round(lambda: 1, warmup_rounds=1.5)
    with pytest.raises(TypeError, match='fingerprint must be True, False or a function'):
        simharness_benchmark.round(lambda: 1, fingerprint='yes')
    simharness_benchmark.round(lambda: object(), rounds=1)
    own = simharness_benchmark.extra_info['simharness']
    assert own['fingerprint'] is None and 'cannot hash' in own['fingerprint_error']
"""
    )
    result = pytester.runpytest_inprocess('-p', 'no:cacheprovider', '--benchmark-json=o.json')
    result.assert_outcomes(passed=1)


# ------------------------------------------------------------------ the proof

TRACKED = '''
import os
import time

import numpy as np
import tensorflow as tf
import simharness as sh

SLOW = float(os.environ.get('TRACKING_SLOWDOWN', '0'))
X = sh.TensorType(tf.float32, [48, 48])


@sh.tf_computation(X)
def work(x):
    for _ in range(4):
        x = tf.tanh(tf.matmul(x, x) * 0.01)
    return tf.reduce_sum(x)


@sh.federated_computation(sh.type_at_clients(X))
def total(xs):
    return sh.federated_sum(sh.federated_map(work, xs))


DATA = [np.full((48, 48), i / 100, np.float32) for i in range(16)]


def slowed(fn, factor):
    """fn, made `factor` slower: a busy wait of `factor` times the call's own time after it."""
    def run(*args):
        t0 = time.perf_counter()
        out = fn(*args)
        end = time.perf_counter() + factor * (time.perf_counter() - t0)
        while time.perf_counter() < end:
            pass
        return out
    return run


def test_tracked(simharness_benchmark):
    simharness_benchmark.round(slowed(total, SLOW) if SLOW else total, DATA, clients=16)


def test_untouched(simharness_benchmark):
    simharness_benchmark.round(total, DATA[:8], clients=8)
'''


TRACKED_ROUNDS = 12

#: The sessions' conftest: once pytest is done (the runs saved at session finish, the token
#: handed back by the plugin's unconfigure), the session leaves with its exit status without
#: the interpreter's slow TensorFlow teardown (~2 s each on a loaded 2-core machine; the
#: coordinator waits for each session's exit before passing the token on, so three of them
#: add up). What is tested is the rotation and the verdicts; sessions that exit normally
#: are run by `test_bench_run_saves_each_revision_from_its_checkout` (bench run
#: --interleave, bench ab: the same coordinator, which checks each exit status).
FAST_EXIT_CONFTEST = """
import os
import sys

import pytest

_STATUS = []


def pytest_sessionfinish(session, exitstatus):
    _STATUS.append(int(exitstatus))


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(_STATUS[-1] if _STATUS else 3)
"""


def _synthetic_times(run, slow_name, factor, seed):
    """`run` with its measured round times replaced by a synthetic, seeded model of them.

    Each round takes ``base x load(start) x factor x noise``: ``load`` is one smooth function
    of the round's real start time, shared by every session (what interleaving pairs away),
    ``noise`` is 2 % of round-to-round jitter, ``factor`` applies to benchmark `slow_name`
    only. The verdicts then depend on the comparison, not on how loaded the machine was.
    """
    rng = np.random.default_rng(seed)
    for name, m in run.benchmarks.items():
        starts = np.asarray(m.starts, dtype=float)
        load = 1.0 + 0.5 * np.sin(starts * 7.0) ** 2
        f = factor if name.startswith(slow_name) else 1.0
        m.times = 0.01 * f * load * np.exp(rng.normal(0, 0.02, len(starts)))
        m.median = float(np.median(m.times))
        m.min = float(np.min(m.times))
    return run


def test_30_percent_slowdown_detected_and_rerun_not(tmp_path):
    """Three sessions take turns, one round each, in the rotation A, R, B: A and R run the
    unchanged code (R is the re-run), B has one benchmark 30 % slower. R against A is the
    re-run, B against A the slow-down, each compared round by round (interleaved).

    The sessions, the rotation, the saved runs and their result fingerprints are real; the
    verdicts are taken on synthetic round times at the real round start times
    (`_synthetic_times`), so that they are deterministic on a loaded machine. That the
    tracker finds a real 30 % slow-down in measured times is shown by ``simharness bench ab``
    runs in docs/benchmarks.md, not asserted here (a time is never asserted in a test).
    The sessions run on the thread stack: what is tested is the rotation and the
    verdicts, which no stack changes (three worker pools would only add start-up time).
    """
    from simharness.bench.runner import Session, run_interleaved

    (tmp_path / 'test_tracked.py').write_text(TRACKED)
    (tmp_path / 'conftest.py').write_text(FAST_EXIT_CONFTEST)
    args = [
        'test_tracked.py',
        '--simharness-stacks=thread',
        f'--simharness-rounds={TRACKED_ROUNDS}',
    ]
    plain = Session(str(tmp_path), args)
    slowed = Session(str(tmp_path), args, env={'TRACKING_SLOWDOWN': '0.3'})
    labels = ['A', 'R', 'B']
    paths = run_interleaved(
        [plain, plain, slowed], str(tmp_path / 'ab'), timeout=280, labels=labels
    )
    runs = dict(zip(labels, (load_run(p) for p in paths)))
    for r in runs.values():
        assert r.interleave['turns'] == 2 * (1 + TRACKED_ROUNDS) and not r.interleave['broken']
        assert set(r.benchmarks) == {'test_tracked[thread]', 'test_untouched[thread]'}
    # one round per turn, in rotation
    starts = sorted(
        (s, side) for side, r in runs.items() for s in r.benchmarks['test_tracked[thread]'].starts
    )
    assert [side for _, side in starts] == labels * TRACKED_ROUNDS
    # the same results, whatever the speed
    prints = {r.benchmarks['test_tracked[thread]'].fingerprint for r in runs.values()}
    assert len(prints) == 1 and None not in prints
    for seed, label in enumerate(labels):
        _synthetic_times(runs[label], 'test_tracked', 1.3 if label.startswith('B') else 1.0, seed)
    verdicts = collections.defaultdict(dict)
    report = []
    for label, cand in (('rerun', 'R'), ('slow', 'B')):
        comparisons = C.compare_runs([runs['A']], [runs[cand]])
        report.append(C.format_comparisons(comparisons, 'A', label))
        for c in comparisons:
            assert c.method == 'interleaved'
            verdicts[label][c.name.split('[')[0]] = c.verdict
            report.append(f'{label}: {c.describe()}')
    report = '\n'.join(report)
    assert verdicts['slow']['test_tracked'] == 'slower', report
    assert verdicts['slow']['test_untouched'] == 'same', report
    assert verdicts['rerun']['test_tracked'] == 'same', report
    assert verdicts['rerun']['test_untouched'] == 'same', report
    print(report)


# ------------------------------------------------------------------ bench run / bench ab


def _git_repo(path, files):
    import subprocess

    for name, text in files.items():
        (path / name).write_text(text)
    env = dict(
        os.environ,
        GIT_AUTHOR_NAME='t',
        GIT_AUTHOR_EMAIL='t@t',
        GIT_COMMITTER_NAME='t',
        GIT_COMMITTER_EMAIL='t@t',
    )
    for cmd in (['git', 'init', '-q'], ['git', 'add', '.'], ['git', 'commit', '-q', '-m', 'x']):
        subprocess.run(cmd, cwd=path, check=True, env=env)
    return subprocess.run(
        ['git', 'rev-parse', 'HEAD'], cwd=path, check=True, capture_output=True, text=True
    ).stdout.strip()


def _head(repo):
    import subprocess

    return subprocess.run(
        ['git', 'rev-parse', 'HEAD'], cwd=repo, check=True, capture_output=True, text=True
    ).stdout.strip()


def test_bench_run_saves_each_revision_from_its_checkout(tmp_path, monkeypatch, capsys):
    from simharness.cli import main

    repo = tmp_path / 'repo'
    repo.mkdir()
    sha = _git_repo(repo, {'test_b.py': 'def test_b(benchmark):\n    benchmark(sum, range(100))\n'})
    (repo / 'test_b.py').write_text('this uncommitted change is not what --rev runs')
    monkeypatch.chdir(repo)
    storage = tmp_path / 'runs'
    assert (
        main(
            [
                'bench',
                'run',
                '--storage',
                str(storage),
                '--rev',
                'HEAD',
                '--repeat',
                '2',
                '--',
                'test_b.py',
                '--benchmark-max-time=0.01',
            ]
        )
        == 0
    )
    assert capsys.readouterr().out.count('saved ') == 2
    runs = find_runs(str(storage))
    assert [os.path.basename(r.path) for r in runs] == [
        f'0001_{sha[:12]}.json',
        f'0002_{sha[:12]}.json',
    ]
    assert all(r.commit == sha and not r.dirty and 'test_b' in r.benchmarks for r in runs)
    assert main(['bench', 'run', '--rev', 'no-such-rev', '--', 'test_b.py']) == 2
    assert 'no-such-rev' in capsys.readouterr().err
    # --interleave: the revisions of a repetition run at once; saved as history runs
    import subprocess

    (repo / 'test_b.py').write_text('def test_b(benchmark):\n    benchmark(sum, range(200))\n')
    subprocess.run(
        ['git', '-c', 'user.name=t', '-c', 'user.email=t@t', 'commit', '-q', '-am', 'y'],
        cwd=repo,
        check=True,
    )
    assert (
        main(
            [
                'bench',
                'run',
                '--storage',
                str(storage),
                '--interleave',
                '--rev',
                'HEAD~1',
                '--rev',
                'HEAD',
                '--',
                'test_b.py',
                '--benchmark-max-time=0.01',
            ]
        )
        == 0
    )
    # saved in the order of --rev (their numbers); sessions that ran side by side can
    # start in either order, so their datetimes do not order them
    new = sorted(find_runs(str(storage)), key=lambda r: os.path.basename(r.path))[2:]
    assert [r.commit for r in new] == [sha, _head(repo)]
    assert all(
        r.interleave['history'] and r.interleave['session'] == new[0].interleave['session']
        for r in new
    )
    assert [p.label for p in H.build_history(find_runs(str(storage))).points] == [
        sha[:8],
        _head(repo)[:8],
    ]
    # bench ab: HEAD~1 against the work tree (pytest-benchmark's plain fixture: no turns)
    out = tmp_path / 'ab'
    assert (
        main(
            [
                'bench',
                'ab',
                '--baseline',
                'HEAD~1',
                '--repeat',
                '2',
                '--save',
                str(out),
                '--env-b',
                'X=1',
                '--',
                'test_b.py',
                '--benchmark-max-time=0.01',
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert 'A = HEAD~1, B = .: 4 sessions' in text and '| test_b |' in text
    sides = sorted(load_run(str(p)).interleave['side'] for p in out.glob('*.json'))
    assert sides == ['A1', 'A2', 'B1', 'B2']
