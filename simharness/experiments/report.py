"""Reports over finished runs: PNG plots and a Markdown table.

::

    write_report(results_dir)
      reads   every <run>/summary.json and <run>/metrics.jsonl under results_dir
              (results_dir may be one run, one experiment, or a root of several)
      writes  results_dir/accuracy.png            accuracy vs round, one line per run
              results_dir/loss.png                loss vs round, one line per run
              results_dir/round_time.png          median round s vs workers  } if runs differ in
              results_dir/clients_per_second.png  clients/s vs workers       } workers or cohort
              results_dir/report.md               one table row per run, links to the plots

Plots use matplotlib's Agg canvas directly (no pyplot, no global backend
switch). Every file is written atomically.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import json
import statistics
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from simharness.errors import SimharnessValueError
from simharness.experiments import atomic
from simharness.experiments.runner import METRICS_FILE, SUMMARY_FILE, read_json

PathLike = Union[str, Path]

REPORT_FILE = 'report.md'


@dataclasses.dataclass(frozen=True)
class RunRecord:
    """What a report knows of one run.

    Attributes:
        label: the run's path relative to the report directory ('.' for
            the directory itself is replaced by ``<experiment>/<run_id>``).
        run_dir: the run directory.
        summary: summary.json.
        metrics: the rows of metrics.jsonl (malformed lines skipped).
    """

    label: str
    run_dir: Path
    summary: Mapping[str, Any]
    metrics: Sequence[Mapping[str, Any]]

    @property
    def workers_label(self) -> str:
        """'thread' for the thread stack, else the number of workers."""
        if self.summary.get('stack') != 'process':
            return 'thread'
        n = self.summary.get('num_workers')
        return str(n) if n is not None else '?'


def find_runs(results_dir: PathLike) -> List[Path]:
    """Run directories (holding a summary.json) at or under `results_dir`, sorted."""
    root = Path(results_dir)
    return sorted({p.parent for p in root.rglob(SUMMARY_FILE) if p.is_file()})


def _read_metrics(path: Path) -> List[Dict[str, Any]]:
    rows: List[Dict[str, Any]] = []
    try:
        text = path.read_text(encoding='utf-8')
    except OSError:
        return rows
    for line in text.splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


def load_runs(results_dir: PathLike) -> List[RunRecord]:
    """Reads the summary and metrics of every run under `results_dir`."""
    root = Path(results_dir)
    out = []
    for run_dir in find_runs(root):
        summary = read_json(run_dir / SUMMARY_FILE)
        if not isinstance(summary, dict):
            continue
        rel = run_dir.relative_to(root).as_posix()
        if rel == '.':
            rel = f'{summary.get("experiment", "?")}/{summary.get("run_id", run_dir.name)}'
        out.append(RunRecord(rel, run_dir, summary, _read_metrics(run_dir / METRICS_FILE)))
    return out


# ------------------------------------------------------------------- plots

def _figure() -> Tuple[Any, Any]:
    # pylint: disable=import-outside-toplevel
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=(7.5, 4.5), dpi=100)
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot(1, 1, 1)


def _save(fig: Any, path: Path) -> Path:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format='png')
    return atomic.write_bytes(path, buf.getvalue())


def _legend(ax: Any, n: int) -> None:
    if n:
        ax.legend(fontsize='small' if n <= 8 else 'x-small', loc='best')


def _curve_plot(runs: Sequence[RunRecord], path: Path, what: str) -> Optional[Path]:
    """accuracy / loss vs round: central evaluation where there is one, else training."""
    fig, ax = _figure()
    use_eval = any(m.get(f'eval_{what}') is not None for r in runs for m in r.metrics)
    key = f'eval_{what}' if use_eval else what
    drawn = 0
    for r in runs:
        pts = [(m['round'], m[key]) for m in r.metrics
               if m.get(key) is not None and m.get('round') is not None]
        if not pts:
            continue
        xs, ys = zip(*pts)
        ax.plot(xs, ys, marker='o' if len(pts) <= 30 else None, markersize=3, label=r.label)
        drawn += 1
    if not drawn:
        return None
    source = 'central evaluation' if use_eval else 'training, over the cohort'
    ax.set_xlabel('round')
    ax.set_ylabel(f'{what} ({source})')
    ax.set_title(f'{what.capitalize()} vs round')
    ax.grid(True, alpha=0.3)
    _legend(ax, drawn)
    return _save(fig, path)


def _worker_order(label: str) -> Tuple[int, int]:
    return (0, 0) if label == 'thread' else (1, int(label)) if label.isdigit() else (2, 0)


def _scaling_plots(runs: Sequence[RunRecord], out_dir: Path) -> List[Path]:
    done = [r for r in runs if r.summary.get('median_round_seconds')]
    workers = sorted({r.workers_label for r in done}, key=_worker_order)
    cohorts: List[int] = sorted({int(r.summary['clients_per_round']) for r in done
                                 if r.summary.get('clients_per_round') is not None})
    if len(workers) < 2 and len(cohorts) < 2:
        return []
    groups: Dict[Tuple[str, int], List[float]] = {}
    for r in done:
        key = (r.workers_label, int(r.summary.get('clients_per_round') or 0))
        groups.setdefault(key, []).append(float(r.summary['median_round_seconds']))
    paths = []
    for name, ylabel, fn in (
            ('round_time.png', 'median round time (s)', lambda k, t: t),
            ('clients_per_second.png', 'clients / s (at the median round)', lambda k, t: k / t)):
        fig, ax = _figure()
        for k in cohorts:
            xs, ys = [], []
            for i, w in enumerate(workers):
                times = groups.get((w, k))
                if times:
                    xs.append(i)
                    ys.append(fn(k, statistics.median(times)))
            if xs:
                ax.plot(xs, ys, marker='o', label=f'{k} clients/round')
        ax.set_xticks(range(len(workers)))
        ax.set_xticklabels(workers)
        ax.set_xlabel('workers (process stack)' + (' / thread stack' if 'thread' in workers
                                                    else ''))
        ax.set_ylabel(ylabel)
        if name == 'round_time.png' and len(cohorts) > 1:
            ax.set_yscale('log')
        ax.set_title(ylabel[0].upper() + ylabel[1:] + ' vs workers')
        ax.grid(True, alpha=0.3)
        _legend(ax, len(cohorts))
        paths.append(_save(fig, out_dir / name))
    return paths


# ------------------------------------------------------------------ table

def _fmt(value: Any, spec: str) -> str:
    if value is None:
        return '–'
    try:
        return format(value, spec)
    except (TypeError, ValueError):
        return str(value)


def _table(runs: Sequence[RunRecord]) -> List[str]:
    lines = ['| run | status | stack | workers | clients/round | rounds | final loss | '
             'final accuracy | median round s | clients/s |',
             '|---|---|---|---:|---:|---:|---:|---:|---:|---:|']
    for r in runs:
        s = r.summary
        workers = s.get('num_workers') if s.get('stack') == 'process' else None
        rounds = f'{s.get("rounds_completed", "?")}/{s.get("rounds", "?")}'
        lines.append(
            f'| {r.label} | {s.get("status", "?")} | {s.get("stack", "?")} | '
            f'{_fmt(workers, "d")} | {_fmt(s.get("clients_per_round"), "d")} | {rounds} | '
            f'{_fmt(s.get("final_loss"), ".6f")} | {_fmt(s.get("final_accuracy"), ".4f")} | '
            f'{_fmt(s.get("median_round_seconds"), ".4f")} | '
            f'{_fmt(s.get("clients_per_second"), ".1f")} |')
    return lines


def write_report(results_dir: PathLike) -> List[Path]:
    """Writes the plots and report.md for every run under `results_dir`.

    Args:
        results_dir: one run directory, one experiment's directory, or a
            results root holding several experiments.

    Returns:
        The paths written: report.md first, then the PNGs.

    Raises:
        SimharnessValueError: `results_dir` does not exist or holds no runs.
    """
    root = Path(results_dir)
    if not root.is_dir():
        raise SimharnessValueError(f'results directory {root} does not exist')
    runs = load_runs(root)
    if not runs:
        raise SimharnessValueError(f'no runs (directories with a {SUMMARY_FILE}) under {root}')
    plots = [p for p in (_curve_plot(runs, root / 'accuracy.png', 'accuracy'),
                         _curve_plot(runs, root / 'loss.png', 'loss')) if p is not None]
    plots += _scaling_plots(runs, root)
    complete = sum(1 for r in runs if r.summary.get('status') == 'complete')
    when = datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')
    eval_on = sorted({str(r.summary.get('eval_on')) for r in runs if r.summary.get('eval_on')})
    title = runs[0].label if len(runs) == 1 and runs[0].run_dir == root else root.resolve().name
    lines = [f'# Report: {title}', '',
             f'{len(runs)} run{"s" if len(runs) != 1 else ""} ({complete} complete), '
             f'generated {when}.', '',
             'Final loss and accuracy: central evaluation after the last finished round'
             + (f' (on {", ".join(eval_on)})' if eval_on else '')
             + '. Median round s: median over the rounds after the first; clients/s = '
               'clients per round / median round s.', '']
    lines += _table(runs)
    for p in plots:
        lines += ['', f'![{p.stem}]({p.name})']
    report = atomic.write_text(root / REPORT_FILE, '\n'.join(lines) + '\n')
    return [report] + plots
