"""Benchmark history across commits, as asv keeps it, from pytest-benchmark's saved JSON.

Runs are grouped per machine (fingerprint) and per commit (sha and dirty
flag; runs of ``simharness bench ab`` sessions and runs without a commit are
left out), and commits are ordered by commit time. For each benchmark:

* the median round time of every commit (the median of its runs' medians),
  the spread of its runs, clients/s, peak RSS (driver + workers) and the
  result fingerprint;
* **steps** (`simharness.bench.changepoint`): a piecewise-constant fit of the log run
  medians per commit (PELT, its cost weighted by the noise: the scatter of repeated runs of
  one commit and the spread between neighbouring commits), each change point then tested
  (`simharness.bench.compare`) by the runs of the segments on either side, or round by
  round when the two commits took turns, with the confidence split among the places a step
  could be and the practical tolerance; a `Step` names its first commit, its ratio and
  probability. Noise alone (within the tolerance, or not beyond what runs scatter) never
  makes a step. `confirm_steps` reruns the commit before each 'slower' step and the step's
  first commit, interleaved (``simharness bench ab``), and calls it a regression only if
  the rerun is 'slower' too.

`write_history` renders ``history.md`` (an overview table, then a table per
benchmark) and PNG plots: one per benchmark (time, clients/s, peak RSS per
commit, steps marked) and ``overview.png`` (every benchmark relative to its
first commit).
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as _dt
import io
import math
import os
import re
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from simharness.atomic import write_bytes
from simharness.bench import changepoint
from simharness.bench.compare import (
    DEFAULT_CONFIDENCE,
    DEFAULT_TOLERANCE,
    Comparison,
    _check,
    between_run_noise,
    compare_measurements,
)
from simharness.bench.results import Run, find_runs
from simharness.errors import SimharnessValueError

__all__ = ['CommitPoint', 'History', 'Step', 'build_history', 'confirm_steps', 'write_history']

MB = 1 << 20


@dataclasses.dataclass
class CommitPoint:
    """The runs of one commit (one sha and dirty flag) on one machine."""

    commit: str
    dirty: bool
    commit_time: Optional[str]
    runs: List[Run]

    @property
    def label(self) -> str:
        return self.commit[:8] + ('+' if self.dirty else '')

    def median(self, name: str) -> Optional[float]:
        values = [
            float(np.median(r.benchmarks[name].times))
            if r.benchmarks[name].times is not None
            else r.benchmarks[name].median
            for r in self.runs
            if name in r.benchmarks
        ]
        return float(np.median(values)) if values else None

    def run_medians(self, name: str) -> List[float]:
        return [
            float(np.median(r.benchmarks[name].times))
            if r.benchmarks[name].times is not None
            else r.benchmarks[name].median
            for r in self.runs
            if name in r.benchmarks
        ]


@dataclasses.dataclass
class Step:
    """A change of level of benchmark `name` at commit number `index` (0-based).

    Attributes:
      comparison: the runs after the step against the runs before it: ratio, verdict
        ('slower' or 'faster') and its probability.
      commit: the sha of the step's first commit.
      confirmation: for a 'slower' step that was rerun (`confirm_steps`): the rerun's
        comparison of the commit before the step and the step's first commit.
      status: 'confirmed' (the rerun is 'slower' too), 'unconfirmed' (it is not, or the
        rerun did not have the benchmark), or None (not rerun).
      note: why a step is unconfirmed without a comparison.
    """

    name: str
    index: int
    comparison: Comparison
    commit: str = ''
    confirmation: Optional[Comparison] = None
    status: Optional[str] = None
    note: Optional[str] = None

    @property
    def regression(self) -> bool:
        """A 'slower' step that its rerun confirmed."""
        return self.comparison.verdict == 'slower' and self.status == 'confirmed'


@dataclasses.dataclass
class History:
    """The commits of one machine, their benchmarks and the steps found."""

    machine: str
    points: List[CommitPoint]
    names: List[str]
    steps: Dict[str, List[Step]]
    noise: Dict[str, Optional[Tuple[float, int]]]
    other_machines: Dict[str, int]
    #: per benchmark, the noise the step detector used (None: unknown, no steps sought)
    step_noise: Dict[str, Optional[changepoint.Noise]] = dataclasses.field(default_factory=dict)


def _time_key(point: CommitPoint) -> Tuple[float, str]:
    t = point.commit_time
    try:
        ts = _dt.datetime.fromisoformat(t).timestamp() if t else float('inf')
    except ValueError:
        ts = float('inf')
    return ts, min(r.datetime for r in point.runs)


def build_history(
    runs: Sequence[Run],
    machine: Optional[str] = None,
    tolerance: float = DEFAULT_TOLERANCE,
    confidence: float = DEFAULT_CONFIDENCE,
    names: Optional[Sequence[str]] = None,
    penalty: float = changepoint.DEFAULT_PENALTY,
) -> History:
    """Groups `runs` per commit on one machine (default: the one with most runs) and finds steps.

    Args:
      tolerance, confidence: what a step must pass (`compare_measurements`); the
        confidence is split among the commits where a step could be.
      penalty: the fit's penalty per step, times log(commits) (`changepoint.fit_segments`).

    Raises:
      SimharnessValueError: no run with a commit (on that machine), or a bad argument.
    """
    _check(tolerance, confidence)
    changepoint.check_penalty(penalty)
    usable = [r for r in runs if r.commit and (not r.interleave or r.interleave.get('history'))]
    per_machine = collections.Counter(r.machine for r in usable)
    if not per_machine:
        raise SimharnessValueError(
            f'no benchmark run with a git commit among {len(runs)} runs '
            '(runs of interleaved A/B sessions are not history)'
        )
    if machine is None:
        machine = per_machine.most_common(1)[0][0]
    elif machine not in per_machine:
        raise SimharnessValueError(f'no runs of machine {machine!r}; machines: {dict(per_machine)}')
    mine = [r for r in usable if r.machine == machine]
    groups: Dict[Tuple[str, bool], List[Run]] = collections.OrderedDict()
    for r in mine:
        groups.setdefault((r.commit, r.dirty), []).append(r)
    points = sorted(
        (CommitPoint(c, d, rs[0].commit_time, rs) for (c, d), rs in groups.items()), key=_time_key
    )
    all_names: List[str] = []
    for p in points:
        for r in p.runs:
            for n in r.benchmarks:
                if n not in all_names:
                    all_names.append(n)
    if names is not None:
        all_names = [n for n in all_names if any(re.search(k, n) for k in names)]
    steps: Dict[str, List[Step]] = {}
    noise: Dict[str, Optional[Tuple[float, int]]] = {}
    step_noise: Dict[str, Optional[changepoint.Noise]] = {}
    for name in all_names:
        noise[name] = between_run_noise(mine, name)
        steps[name], step_noise[name] = _steps(points, name, tolerance, confidence, penalty)
    return History(
        machine,
        points,
        all_names,
        steps,
        noise,
        {m: n for m, n in per_machine.items() if m != machine},
        step_noise,
    )


def _interleaved_with(
    before: Sequence[Run], runs: Sequence[Run]
) -> Optional[Tuple[List[Run], List[Run]]]:
    """The runs of two commits that took turns in the same rotations, matched, or None."""
    sessions = {
        r.interleave['session']: r
        for r in before
        if r.interleave and not r.interleave.get('broken')
    }
    a, b = [], []
    for r in runs:
        if r.interleave and not r.interleave.get('broken') and r.interleave['session'] in sessions:
            a.append(sessions[r.interleave['session']])
            b.append(r)
    return (a, b) if a else None


def _steps(
    points: Sequence[CommitPoint], name: str, tolerance: float, confidence: float, penalty: float
) -> Tuple[List[Step], Optional[changepoint.Noise]]:
    """The steps of benchmark `name`: `simharness.bench.changepoint` over its commits."""
    idx = [i for i, p in enumerate(points) if any(name in r.benchmarks for r in p.runs)]
    if len(idx) < 2:
        return [], None
    runs = [[r for r in points[i].runs if name in r.benchmarks] for i in idx]
    series = [[math.log(v) for v in points[i].run_medians(name)] for i in idx]
    # The noise: repeated runs of one commit in this history (interleaved rotations too:
    # their runs of one commit are repeated runs as well) and the spread between commits.
    noise = changepoint.estimate_noise(series)
    # Each place a step could be is one more test: the confidence is split among them
    # (Bonferroni), so that a history cries wolf no more often than one comparison.
    conf = 1.0 - (1.0 - confidence) / max(1, len(idx) - 1)
    run_noise = None if noise is None else (noise.run_sd, noise.df)

    def verdict(c: Comparison) -> Tuple[bool, float, Comparison]:
        strength = max(c.p_slower or 0.0, c.p_faster or 0.0)
        return c.verdict in ('slower', 'faster'), strength, c

    def test(before: range, after: range) -> Tuple[bool, float, Comparison]:
        a = [r.benchmarks[name] for k in before for r in runs[k]]
        b = [r.benchmarks[name] for k in after for r in runs[k]]
        return verdict(compare_measurements(name, a, b, tolerance, conf, noise=run_noise))

    def pair_test(k: int) -> Optional[Tuple[bool, float, Comparison]]:
        pair = _interleaved_with(runs[k - 1], runs[k])
        if pair is None:
            return None
        # took turns with the commit before: compared round by round
        return verdict(
            compare_measurements(
                name,
                [r.benchmarks[name] for r in pair[0]],
                [r.benchmarks[name] for r in pair[1]],
                tolerance,
                conf,
                interleaved=True,
            )
        )

    turns = [k for k in range(1, len(idx)) if _interleaved_with(runs[k - 1], runs[k])]
    found = changepoint.find_changes(series, test, noise, penalty, extra=turns, pair_test=pair_test)
    return [Step(name, idx[k], c, points[idx[k]].commit) for k, c in found], noise


#: ``rerun(baseline_sha, candidate_sha, test_ids)``: the two commits run again, interleaved
#: (``simharness bench ab``), their comparisons per benchmark. `test_ids`: pytest node ids
#: of the benchmarks to rerun ([] when unknown: run the default benchmarks).
Rerun = Callable[[str, str, List[str]], Sequence[Comparison]]


def confirm_steps(history: History, rerun: Rerun) -> List[Step]:
    """Reruns every 'slower' step of `history`: the commit before it against its first commit.

    The steps of the same pair of commits are rerun together. A step is 'confirmed' when the
    rerun's verdict for its benchmark is 'slower' too, else 'unconfirmed'; sets each step's
    `status` and `confirmation`.

    Returns:
      The 'slower' steps, in history order.
    """
    pairs: Dict[Tuple[str, str], List[Step]] = collections.OrderedDict()
    for name in history.names:
        for s in history.steps[name]:
            if s.comparison.verdict != 'slower':
                continue
            before = [p for i, p in _points_with(history, name) if i < s.index][-1]
            pairs.setdefault((before.commit, history.points[s.index].commit), []).append(s)
    out = []
    for (a, b), steps in pairs.items():
        ids: List[str] = []
        for s in steps:
            for r in history.points[s.index].runs:
                m = r.benchmarks.get(s.name)
                if m is not None and m.fullname and m.fullname not in ids:
                    ids.append(m.fullname)
        if a == b:  # the same sha with and without uncommitted changes: no commits to rerun
            for s in steps:
                s.status, s.note = (
                    'unconfirmed',
                    ('between runs of one commit with and without uncommitted changes: not rerun'),
                )
                out.append(s)
            continue
        by_name = {c.name: c for c in rerun(a, b, ids)}
        for s in steps:
            c = by_name.get(s.name)
            s.confirmation = c
            s.status = 'confirmed' if c is not None and c.verdict == 'slower' else 'unconfirmed'
            s.note = None if c is not None else 'the rerun did not run this benchmark'
            out.append(s)
    return sorted(out, key=lambda s: (s.index, history.names.index(s.name)))


# ------------------------------------------------------------------ rendering


def _fmt_time(seconds: Optional[float]) -> str:
    if seconds is None or not math.isfinite(seconds):
        return '-'
    if seconds >= 1:
        return f'{seconds:.3f} s'
    if seconds >= 1e-3:
        return f'{seconds * 1e3:.2f} ms'
    return f'{seconds * 1e6:.1f} us'


def step_mark(step: Optional[Step]) -> str:
    if step is None:
        return ''
    c = step.comparison
    arrow = '▲ slower' if c.verdict == 'slower' else '▼ faster'
    text = f'{arrow} x{c.ratio:.2f} ({c.probability:.0%})'
    if step.status is not None:
        r = step.confirmation
        text += f', rerun {step.status}' + ('' if r is None else f' x{r.ratio:.2f} ({r.verdict})')
    return text


def _points_with(history: History, name: str) -> List[Tuple[int, CommitPoint]]:
    return [
        (i, p) for i, p in enumerate(history.points) if any(name in r.benchmarks for r in p.runs)
    ]


def _cps(p: CommitPoint, name: str) -> Optional[float]:
    values = [
        r.benchmarks[name].clients_per_second
        for r in p.runs
        if name in r.benchmarks and r.benchmarks[name].clients_per_second is not None
    ]
    return float(np.median(values)) if values else None


def _rss(p: CommitPoint, name: str) -> Optional[float]:
    values = [
        r.benchmarks[name].peak_rss_bytes
        for r in p.runs
        if name in r.benchmarks and r.benchmarks[name].peak_rss_bytes is not None
    ]
    return float(np.median(values)) if values else None


def _first_round(p: CommitPoint, name: str) -> Optional[float]:
    values = [
        r.benchmarks[name].first_round_seconds
        for r in p.runs
        if name in r.benchmarks and r.benchmarks[name].first_round_seconds is not None
    ]
    return float(np.median(values)) if values else None


def _prints(p: CommitPoint, name: str) -> List[str]:
    return sorted(
        {
            r.benchmarks[name].fingerprint
            for r in p.runs
            if name in r.benchmarks and r.benchmarks[name].fingerprint
        }
    )


def render_overview(history: History) -> str:
    """The overview table: a row per commit, a column per benchmark (median round time, steps)."""
    step_at = {(s.name, s.index): s for name in history.names for s in history.steps[name]}
    lines = [
        '| commit | date | runs | ' + ' | '.join(f'`{n}`' for n in history.names) + ' |',
        '|' + '---|' * (3 + len(history.names)),
    ]
    for i, p in enumerate(history.points):
        cells = []
        for n in history.names:
            mark = step_mark(step_at.get((n, i)))
            cells.append(_fmt_time(p.median(n)) + (f' {mark}' if mark else ''))
        date = (p.commit_time or '')[:16].replace('T', ' ')
        lines.append(f'| `{p.label}` | {date} | {len(p.runs)} | ' + ' | '.join(cells) + ' |')
    return '\n'.join(lines)


def render_markdown(
    history: History, plots_dir: Optional[str] = None, rel_plots: str = 'plots'
) -> str:
    """history.md: the overview (commits x benchmarks, medians, steps marked), then per benchmark."""
    pts = history.points
    step_at = {(s.name, s.index): s for name in history.names for s in history.steps[name]}
    lines = [
        '# Benchmark history',
        '',
        f'Machine `{history.machine}`; {len(pts)} commits, {len(history.names)} benchmarks, '
        f'{sum(len(p.runs) for p in pts)} runs. Generated by `simharness bench history` '
        "from pytest-benchmark's saved JSON. A step (▲ slower, ▼ faster, with the "
        'ratio of the runs after it to those before it and its probability) marks the '
        'first commit of a new level: a change point of a piecewise-constant fit of the '
        'log run medians, weighted by the noise, that the runs of the segments on either '
        'side confirm beyond the tolerance. "rerun confirmed" / "rerun unconfirmed": the '
        "commit before and the step's first commit run again, interleaved "
        '(`simharness bench history --confirm`).',
    ]
    if history.other_machines:
        lines.append(f'Other machines (not shown): {history.other_machines}.')
    if plots_dir:
        lines += ['', f'![overview]({rel_plots}/overview.png)']
    lines += ['', '## Overview: median round time per commit', '', render_overview(history)]
    for n in history.names:
        noise = history.noise.get(n)
        lines += ['', f'## `{n}`', '']
        lines.append(
            'Between-run scatter of one commit: '
            + (
                'unknown (no commit with 2 runs)'
                if noise is None
                else f'{math.expm1(noise[0]):.1%} (sd of log medians, {noise[1]} degrees of '
                'freedom)'
            )
            + '.'
        )
        sn = history.step_noise.get(n)
        lines.append(
            'Step detection: '
            + (
                'not sought (the noise is unknown: no commit with 2 runs, fewer than '
                f'{changepoint.MIN_COMMITS_FOR_LEVEL_NOISE} commits)'
                if sn is None
                else f'noise of a run about its level {math.expm1(sn.run_sd):.1%} (repeated runs '
                f'{math.expm1(sn.within_sd):.1%}, between commits {math.expm1(sn.level_sd):.1%})'
            )
            + '.'
        )
        if plots_dir:
            lines += ['', f'![{n}]({rel_plots}/{_slug(n)}.png)']
        lines += [
            '',
            '| commit | runs | median | run medians | clients/s | peak RSS MB | '
            'first round | result | step |',
            '|---|---|---|---|---|---|---|---|---|',
        ]
        prev_prints: Optional[List[str]] = None
        for i, p in _points_with(history, n):
            prints = _prints(p, n)
            result = ', '.join(x[7:15] for x in prints) or '-'
            if prev_prints is not None and prints and prev_prints and prints != prev_prints:
                result += ' **changed**'
            prev_prints = prints or prev_prints
            cps = _cps(p, n)
            rss = _rss(p, n)
            lines.append(
                f'| `{p.label}` | {len(p.runs)} | {_fmt_time(p.median(n))} | '
                + ', '.join(_fmt_time(v) for v in p.run_medians(n))
                + ' | '
                + ('-' if cps is None else f'{cps:,.0f}')
                + ' | '
                + ('-' if rss is None else f'{rss / MB:,.0f}')
                + ' | '
                + _fmt_time(_first_round(p, n))
                + f' | {result} | '
                + step_mark(step_at.get((n, i)))
                + ' |'
            )
    return '\n'.join(lines) + '\n'


def _slug(name: str) -> str:
    return re.sub(r'[^A-Za-z0-9_.-]+', '_', name).strip('_')[:120]


def atomic_write(path: str, data: bytes) -> None:
    """Writes `data` to `path` atomically (`simharness.atomic`), making its directory."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    write_bytes(path, data)


def _save_figure(fig: object, path: str) -> None:
    buf = io.BytesIO()
    fig.savefig(buf, format='png', dpi=90, bbox_inches='tight')  # type: ignore[attr-defined]
    atomic_write(path, buf.getvalue())


def plot_history(history: History, plots_dir: str) -> List[str]:
    """PNG plots: ``overview.png`` and one per benchmark (time, clients/s, peak RSS). Returns paths."""
    import matplotlib

    matplotlib.use('Agg', force=False)
    from matplotlib import pyplot as plt

    out = []
    labels = [p.label for p in history.points]
    x_all = np.arange(len(labels))
    fig, ax = plt.subplots(figsize=(max(6.0, 0.8 * len(labels) + 3), 4.5))
    try:
        for n in history.names:
            pts = _points_with(history, n)
            base = pts[0][1].median(n) if pts else None
            if not base:
                continue
            xs = [i for i, _ in pts]
            ys = [p.median(n) / base for _, p in pts]
            (line,) = ax.plot(xs, ys, marker='o', label=n)
            for s in history.steps[n]:
                ax.plot(
                    [s.index],
                    [history.points[s.index].median(n) / base],
                    marker='^' if s.comparison.verdict == 'slower' else 'v',
                    markersize=13,
                    color=line.get_color(),
                    markeredgecolor='black',
                )
        ax.axhline(1.0, color='grey', linewidth=0.8)
        ax.set_yscale('log')
        ax.set_xticks(x_all, labels, rotation=45, ha='right', fontsize=8)
        ax.set_ylabel('median round time / first commit')
        ax.set_title(f'Benchmark history ({history.machine}); ▲▼ detected steps')
        ax.legend(fontsize=7, loc='best')
        path = os.path.join(plots_dir, 'overview.png')
        _save_figure(fig, path)
        out.append(path)
    finally:
        plt.close(fig)
    for n in history.names:
        pts = _points_with(history, n)
        xs = [i for i, _ in pts]
        fig, axes = plt.subplots(3, 1, figsize=(max(6.0, 0.8 * len(labels) + 3), 8), sharex=True)
        try:
            ax = axes[0]
            for i, p in pts:
                meds = p.run_medians(n)
                ax.scatter([i] * len(meds), [m * 1e3 for m in meds], color='grey', s=12, zorder=2)
            ax.plot(xs, [p.median(n) * 1e3 for _, p in pts], marker='o', zorder=3)
            ax.set_ylabel('median round (ms)')
            cps = [(i, _cps(p, n)) for i, p in pts]
            cps = [(i, v) for i, v in cps if v is not None]
            if cps:
                axes[1].plot([i for i, _ in cps], [v for _, v in cps], marker='o', color='C2')
            axes[1].set_ylabel('clients/s')
            rss = [(i, _rss(p, n)) for i, p in pts]
            rss = [(i, v) for i, v in rss if v is not None]
            if rss:
                axes[2].plot([i for i, _ in rss], [v / MB for _, v in rss], marker='o', color='C3')
            axes[2].set_ylabel('peak RSS (MB)')
            for s in history.steps[n]:
                color = 'red' if s.comparison.verdict == 'slower' else 'green'
                for a in axes:
                    a.axvline(s.index, color=color, linestyle='--', linewidth=1)
                axes[0].annotate(
                    step_mark(s),
                    (s.index, history.points[s.index].median(n) * 1e3),
                    fontsize=8,
                    color=color,
                    xytext=(4, 4),
                    textcoords='offset points',
                )
            for a in axes:  # from zero: small changes look small
                a.set_ylim(bottom=0)
            axes[2].set_xticks(x_all, labels, rotation=45, ha='right', fontsize=8)
            axes[0].set_title(n)
            path = os.path.join(plots_dir, _slug(n) + '.png')
            _save_figure(fig, path)
            out.append(path)
        finally:
            plt.close(fig)
    return out


def write_history(
    storage: str,
    out_dir: str,
    machine: Optional[str] = None,
    tolerance: float = DEFAULT_TOLERANCE,
    confidence: float = DEFAULT_CONFIDENCE,
    names: Optional[Sequence[str]] = None,
    plots: bool = True,
    penalty: float = changepoint.DEFAULT_PENALTY,
    rerun: Optional[Rerun] = None,
) -> Tuple[str, History]:
    """Reads the runs under `storage`, writes ``out_dir/history.md`` and ``out_dir/plots/*.png``.

    Args:
      rerun: when given, every 'slower' step is rerun with it first (`confirm_steps`) and
        history.md says whether the rerun confirmed it.

    Returns:
      The path of history.md and the `History`.
    """
    history = build_history(find_runs(storage), machine, tolerance, confidence, names, penalty)
    if rerun is not None:
        confirm_steps(history, rerun)
    plots_dir = os.path.join(out_dir, 'plots') if plots else None
    if plots_dir:
        plot_history(history, plots_dir)
    path = os.path.join(out_dir, 'history.md')
    atomic_write(path, render_markdown(history, plots_dir).encode())
    return path, history
