"""Reports over finished runs: tidy CSVs, tables over seeds, and the plots that fit.

::

    write_report(results_dir)
      reads   every <run>/summary.json, config.toml and metrics.jsonl under results_dir
              (results_dir may be one run, one experiment, or a root of several)
      writes  results_dir/report.md     one row per run (hyper-parameters that vary as columns),
                                        then, when runs differ only in training.seed / data.seed,
                                        one row per setting: mean +- std over seeds, sorted
                                        numerically by the hyper-parameters
              results_dir/accuracy.png  accuracy vs round, one line per setting, a band of
              results_dir/loss.png      +- one std over its seeds
              results_dir/round_time.png, clients_per_second.png   only when the runs vary
                                        the stack (kind, workers) or the cohort size
              results_dir/runs.csv      tidy: one row per run, every resolved config key
                                        ("algorithm.client_learning_rate", ...) and summary field
              results_dir/rounds.csv    tidy: one row per run and round, the run's config keys
                                        and the round's metrics

Tables are pandas DataFrames; plots use matplotlib's Agg canvas directly (no
pyplot, no global backend switch). Every file is written atomically.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import statistics
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from simharness.errors import SimharnessValueError
from simharness.experiments import atomic
from simharness.experiments.runner import METRICS_FILE, SUMMARY_FILE, read_json
from simharness.experiments.runner.lock import is_running

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


#: The `error` of a run whose summary says 'running' while no process holds its lock.
DIED = (
    'its process ended without writing a final status (killed by a signal such as '
    'SIGKILL or the OOM killer, or its machine lost); running the same config resumes it'
)


def load_runs(results_dir: PathLike) -> List[RunRecord]:
    """Reads the summary and metrics of every run under `results_dir`. A summary that
    says 'running' while no process holds the run's lock (`lock.is_running`) is read
    as 'interrupted', with `DIED` as its error."""
    root = Path(results_dir)
    out = []
    for run_dir in find_runs(root):
        summary = read_json(run_dir / SUMMARY_FILE)
        if not isinstance(summary, dict):
            continue
        rel = run_dir.relative_to(root).as_posix()
        if rel == '.':
            rel = f'{summary.get("experiment", "?")}/{summary.get("run_id", run_dir.name)}'
        if summary.get('status') == 'running' and is_running(run_dir) is False:
            # Its process is gone without a final status (SIGKILL, the OOM killer, a lost
            # machine): the lock it held went with it. Said here, the file left as it is.
            summary = dict(summary, status='interrupted', error=DIED)
        out.append(RunRecord(rel, run_dir, summary, atomic.read_jsonl(run_dir / METRICS_FILE)))
    return out


#: Config keys that only repeat a setting (grouped over in the tables and bands).
SEED_KEYS = ('training.seed', 'data.seed')
#: Config keys whose variation makes the scaling plots meaningful.
SCALING_KEYS = (
    'stack.kind',
    'stack.num_workers',
    'stack.clients_per_worker',
    'stack.clients_per_thread',
    'training.clients_per_round',
)
CSV_RUNS = 'runs.csv'
CSV_ROUNDS = 'rounds.csv'


def _flat_config(run_dir: Path) -> Dict[str, Any]:
    from simharness.experiments.config import read_toml  # pylint: disable=import-outside-toplevel
    from simharness.errors import ConfigError  # pylint: disable=import-outside-toplevel

    try:
        raw = read_toml(run_dir / 'config.toml')
    except ConfigError:
        return {}
    out: Dict[str, Any] = {}
    for table, body in raw.items():
        if isinstance(body, dict):
            for k, v in body.items():
                if not isinstance(v, dict):
                    out[f'{table}.{k}'] = ', '.join(map(str, v)) if isinstance(v, list) else v
        else:
            out[table] = body
    return out


def run_table(runs: Sequence[RunRecord]) -> Any:
    """One row per run: ``run``, every config key, every scalar summary field (pandas)."""
    import pandas as pd  # pylint: disable=import-outside-toplevel

    rows = []
    for r in runs:
        row: Dict[str, Any] = {'run': r.label}
        row.update(_flat_config(r.run_dir))
        row.update(
            {
                f'summary.{k}': v
                for k, v in r.summary.items()
                if v is None or isinstance(v, (int, float, str, bool))
            }
        )
        rows.append(row)
    return pd.DataFrame(rows)


def round_table(runs: Sequence[RunRecord]) -> Any:
    """One row per run and round: ``run``, the config keys and the round's metrics (pandas)."""
    import pandas as pd  # pylint: disable=import-outside-toplevel

    rows = []
    for r in runs:
        cfg = _flat_config(r.run_dir)
        for m in r.metrics:
            row: Dict[str, Any] = {'run': r.label, **cfg}
            row.update({k: v for k, v in m.items() if not isinstance(v, (list, dict))})
            rows.append(row)
    return pd.DataFrame(rows)


def varied_keys(table: Any) -> List[str]:
    """Config columns (``table.key``) whose value differs between runs, in column order.

    Only the runs that have the key count: an option of one stack that the runs of another
    stack lack (``stack.clients_per_thread`` next to ``stack.num_workers``) does not vary."""
    out = []
    for c in table.columns:
        if '.' not in c or c.startswith('summary.') or c in ('name',):
            continue
        values = table[c].dropna().map(lambda v: repr(v)).nunique()
        if values > 1:
            out.append(c)
    return out


def _sort_key(series: Any) -> Any:
    import pandas as pd  # pylint: disable=import-outside-toplevel

    numeric = pd.to_numeric(series, errors='coerce')
    return numeric if numeric.notna().all() else series.astype(str)


def _plain(value: Any) -> Any:
    """A table cell as written in the config: 2 (not 2.0, which pandas makes of ints in a
    column with gaps), '–' for absent."""
    if value is None or (isinstance(value, float) and value != value):
        return '–'
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _setting_label(row: Any, keys: Sequence[str]) -> str:
    return ', '.join(f'{k.rsplit(".", 1)[-1]}={_plain(row[k])}' for k in keys) or 'all runs'


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
    fig.savefig(buf, format='png', bbox_inches='tight')  # the legend inside the image
    return atomic.write_bytes(path, buf.getvalue())


def _legend(ax: Any, n: int) -> None:
    if n:
        ax.legend(fontsize='small' if n <= 8 else 'x-small', loc='best')


#: Where a curve's point of the initial model (evaluated before round 0) sits on the round axis.
INITIAL_ROUND = -1


def with_initial_points(rounds: Any, initial: Any, what: str) -> Any:
    """`rounds` and, for the central evaluation of `what`, one row per run at `INITIAL_ROUND`:
    the initial model's evaluation (``summary.initial_eval_<what>``), so that each curve starts
    where training started. `initial`: the run table (`run_table`) with ``setting``."""
    import pandas as pd  # pylint: disable=import-outside-toplevel

    col = f'summary.initial_eval_{what}'
    if initial is None or col not in initial or f'eval_{what}' not in rounds:
        return rounds
    known = initial[initial[col].notna()]
    if known.empty:
        return rounds
    first = pd.DataFrame(
        {
            'run': known['run'].to_numpy(),
            'setting': known['setting'].to_numpy(),
            'round': INITIAL_ROUND,
            f'eval_{what}': known[col].astype(float).to_numpy(),
        }
    )
    return pd.concat([first, rounds], ignore_index=True)


def _band_plot(
    rounds: Any, groups: Sequence[str], path: Path, what: str, initial: Any = None
) -> Optional[Path]:
    """`what` vs round, one line per setting with a +-1 std band over its seeds; a central
    evaluation's curve starts at the initial model (`with_initial_points`)."""
    if rounds.empty:
        return None
    use_eval = f'eval_{what}' in rounds and rounds[f'eval_{what}'].notna().any()
    key = f'eval_{what}' if use_eval else what
    if key not in rounds or not rounds[key].notna().any():
        return None
    if use_eval:
        rounds = with_initial_points(rounds, initial, what)
    fig, ax = _figure()
    data = rounds[rounds[key].notna()]
    drawn = 0
    for label, part in data.groupby('setting', sort=False):
        stats = part.groupby('round')[key].agg(['mean', 'std', 'count']).sort_index()
        xs = stats.index.to_numpy()
        ax.plot(
            xs,
            stats['mean'],
            marker='o' if len(xs) <= 30 else None,
            markersize=3,
            label=str(label)
            + (f' ({int(stats["count"].max())} seeds)' if stats['count'].max() > 1 else ''),
        )
        if stats['count'].max() > 1:
            sd = stats['std'].fillna(0.0)
            ax.fill_between(xs, stats['mean'] - sd, stats['mean'] + sd, alpha=0.2)
        if (
            use_eval
            and what in part
            and part[what].notna().any()
            and data['setting'].nunique() <= 8
        ):
            train = part[part[what].notna()].groupby('round')[what].mean().sort_index()
            ax.plot(
                train.index.to_numpy(),
                train.to_numpy(),
                linestyle='--',
                linewidth=1,
                color=ax.lines[-1].get_color(),
                label=f'{label} (training)',
            )
        drawn += 1
    source = 'central evaluation' if use_eval else 'training, over the cohort'
    from matplotlib.ticker import MaxNLocator  # pylint: disable=import-outside-toplevel

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    starts = bool(use_eval and (data['round'] == INITIAL_ROUND).any())
    ax.set_xlabel(
        'round' + (f' ({INITIAL_ROUND}: the initial model, before round 0)' if starts else '')
    )
    ax.set_ylabel(f'{what} ({source})')
    ax.set_title(f'{what.capitalize()} vs round' + (' (mean ± std over seeds)' if groups else ''))
    ax.grid(True, alpha=0.3)
    _legend(ax, drawn)
    return _save(fig, path)


def _worker_order(label: str) -> Tuple[int, int]:
    return (0, 0) if label == 'thread' else (1, int(label)) if label.isdigit() else (2, 0)


def _scaling_plots(runs: Sequence[RunRecord], out_dir: Path) -> List[Path]:
    done = [r for r in runs if r.summary.get('median_round_seconds')]
    workers = sorted({r.workers_label for r in done}, key=_worker_order)
    cohorts: List[int] = sorted(
        {
            int(r.summary['clients_per_round'])
            for r in done
            if r.summary.get('clients_per_round') is not None
        }
    )
    if len(workers) < 2 and len(cohorts) < 2:
        return []
    groups: Dict[Tuple[str, int], List[float]] = {}
    for r in done:
        key = (r.workers_label, int(r.summary.get('clients_per_round') or 0))
        groups.setdefault(key, []).append(float(r.summary['median_round_seconds']))
    paths = []
    for name, ylabel, fn in (
        ('round_time.png', 'median round time (s)', lambda k, t: t),
        ('clients_per_second.png', 'clients / s (at the median round)', lambda k, t: k / t),
    ):
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
        ax.set_xlabel(
            'workers (process stack)' + (' / thread stack' if 'thread' in workers else '')
        )
        ax.set_ylabel(ylabel)
        if name == 'round_time.png' and len(cohorts) > 1:
            ax.set_yscale('log')
        ax.set_title(ylabel[0].upper() + ylabel[1:] + ' vs workers')
        ax.grid(True, alpha=0.3)
        _legend(ax, len(cohorts))
        paths.append(_save(fig, out_dir / name))
    return paths


# ------------------------------------------------------------------ tables


def _fmt(value: Any, spec: str) -> str:
    try:
        if value is None or value != value:  # None or NaN
            return '–'
        return format(value, spec)
    except (TypeError, ValueError):
        return str(value)


def _markdown(frame: Any, align_right: Sequence[bool]) -> List[str]:
    head = '| ' + ' | '.join(str(c) for c in frame.columns) + ' |'
    rule = '|' + '|'.join('---:' if r else '---' for r in align_right) + '|'
    body = ['| ' + ' | '.join(str(v) for v in row) + ' |' for row in frame.itertuples(index=False)]
    return [head, rule] + body


#: Config keys the runs table shows in columns of their own.
_SHOWN_KEYS = frozenset(
    {'stack.kind', 'stack.num_workers', 'training.clients_per_round', 'training.rounds'}
)


def _runs_markdown(runs: Sequence[RunRecord], table: Any, varied: Sequence[str]) -> List[str]:
    import pandas as pd  # pylint: disable=import-outside-toplevel

    rows = []
    del table  # the values come from each run's config.toml: ints stay ints, absent is '–'
    for r in runs:
        cfg = _flat_config(r.run_dir)
        s = r.summary
        workers = s.get('num_workers') if s.get('stack') == 'process' else None
        row = {
            'run': r.label,
            'status': s.get('status', '?'),
            'stack': s.get('stack', '?'),
            'workers': _fmt(workers, 'd'),
            'clients/round': _fmt(s.get('clients_per_round'), 'd'),
        }
        leaves = [k.rsplit('.', 1)[-1] for k in varied]
        for k, leaf in zip(varied, leaves):
            if k in _SHOWN_KEYS:
                continue  # a column of its own already (stack, workers, clients/round, rounds)
            v = cfg.get(k)
            row[leaf if leaves.count(leaf) == 1 else k] = '–' if v is None else v
        row.update(
            {
                'rounds': f'{s.get("rounds_completed", "?")}/{s.get("rounds", "?")}',
                'final loss': _fmt(s.get('final_loss'), '.6f'),
                'final accuracy': _fmt(s.get('final_accuracy'), '.4f'),
                'median round s': _fmt(s.get('median_round_seconds'), '.4f'),
                'clients/s': _fmt(s.get('clients_per_second'), '.1f'),
            }
        )
        if s.get('dp_epsilon') is not None:
            row['epsilon'] = _fmt(s.get('dp_epsilon'), '.3g')
        rows.append(row)
    frame = pd.DataFrame(rows).fillna('–')
    right = [c not in ('run', 'status', 'stack') for c in frame.columns]
    return _markdown(frame, right)


def seed_table(table: Any, varied: Sequence[str]) -> Any:
    """Mean ± std over seeds of each setting's final metrics, sorted by the settings.

    Returns a DataFrame with the setting keys, ``seeds`` and
    ``<metric> mean`` / ``<metric> std`` columns (float; std NaN for one seed).
    """
    import pandas as pd  # pylint: disable=import-outside-toplevel

    keys = [k for k in varied if k not in SEED_KEYS]
    metrics = [
        m
        for m in (
            'summary.final_loss',
            'summary.final_accuracy',
            'summary.median_round_seconds',
            'summary.dp_epsilon',
        )
        if m in table and pd.to_numeric(table[m], errors='coerce').notna().any()
    ]
    frame = table.copy()
    for m in metrics:
        frame[m] = pd.to_numeric(frame[m], errors='coerce')
    if keys:
        grouped = frame.groupby(keys, sort=False, dropna=False)
        out = grouped[metrics].agg(['mean', 'std'])
        out.columns = [f'{m.split(".", 1)[1]} {stat}' for m, stat in out.columns]
        out.insert(0, 'seeds', grouped.size())
        out = out.reset_index()
        out = out.sort_values(keys, key=_sort_key, kind='stable').reset_index(drop=True)
    else:
        out = pd.DataFrame({'seeds': [len(frame)]})
        for m in metrics:
            name = m.split('.', 1)[1]
            out[f'{name} mean'] = [frame[m].mean()]
            out[f'{name} std'] = [frame[m].std()]
    return out


def _seed_markdown(stats: Any, varied: Sequence[str]) -> List[str]:
    import pandas as pd  # pylint: disable=import-outside-toplevel

    keys = [k for k in varied if k not in SEED_KEYS]
    rows = []
    specs = {
        'final_loss': '.4f',
        'final_accuracy': '.4f',
        'median_round_seconds': '.4f',
        'dp_epsilon': '.3g',
    }
    for _, r in stats.iterrows():
        row = {k.rsplit('.', 1)[-1]: r[k] for k in keys}
        row['seeds'] = int(r['seeds'])
        for name, spec in specs.items():
            if f'{name} mean' in r:
                sd = r[f'{name} std']
                row[name.replace('_', ' ')] = _fmt(r[f'{name} mean'], spec) + (
                    f' ± {_fmt(sd, spec)}' if sd == sd else ''
                )
        rows.append(row)
    frame = pd.DataFrame(rows)
    return _markdown(frame, [True] * len(frame.columns))


def write_report(results_dir: PathLike) -> List[Path]:
    """Writes report.md, the plots that fit the runs, runs.csv and rounds.csv.

    Args:
        results_dir: one run directory, one experiment's directory, or a
            results root holding several experiments.

    Returns:
        The paths written: report.md first, then the PNGs, then the CSVs.

    Raises:
        SimharnessValueError: `results_dir` does not exist or holds no runs.
    """
    root = Path(results_dir)
    if not root.is_dir():
        raise SimharnessValueError(f'results directory {root} does not exist')
    runs = load_runs(root)
    if not runs:
        raise SimharnessValueError(f'no runs (directories with a {SUMMARY_FILE}) under {root}')
    table = run_table(runs)
    varied = varied_keys(table)
    if varied:  # runs in numeric order of the hyper-parameters that vary
        order = table.sort_values(varied, key=_sort_key, kind='stable').index
        runs = [runs[i] for i in order]
        table = table.loc[order].reset_index(drop=True)
    rounds = round_table(runs)
    setting_keys = [k for k in varied if k not in SEED_KEYS]
    seeds_vary = any(k in SEED_KEYS for k in varied)
    labels = {
        r.label: (_setting_label(row, setting_keys) if (setting_keys or seeds_vary) else r.label)
        for r, (_, row) in zip(runs, table.iterrows())
    }
    if not setting_keys and not seeds_vary:
        labels = {r.label: r.label for r in runs}
    if not rounds.empty:
        rounds['setting'] = rounds['run'].map(labels)
    group = [k for k in varied if k in SEED_KEYS]
    initial = table.assign(setting=table['run'].map(labels))
    plots = [
        p
        for p in (
            _band_plot(rounds, group, root / 'accuracy.png', 'accuracy', initial),
            _band_plot(rounds, group, root / 'loss.png', 'loss', initial),
        )
        if p is not None
    ]
    scaling_varied = any(k in SCALING_KEYS for k in varied) or (
        len({r.workers_label for r in runs}) > 1
    )
    if scaling_varied:
        plots += _scaling_plots(runs, root)
    complete = sum(1 for r in runs if r.summary.get('status') == 'complete')
    when = datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')
    eval_on = sorted({str(r.summary.get('eval_on')) for r in runs if r.summary.get('eval_on')})
    title = runs[0].label if len(runs) == 1 and runs[0].run_dir == root else root.resolve().name
    lines = [
        f'# Report: {title}',
        '',
        f'{len(runs)} run{"s" if len(runs) != 1 else ""} ({complete} complete), '
        f'generated {when}.'
        + (f' Hyper-parameters that vary: {", ".join(varied)}.' if varied else ''),
        '',
        'Final loss and accuracy: central evaluation after the last finished round'
        + (f' (on {", ".join(eval_on)})' if eval_on else '')
        + '. Median round s: median over the rounds after the first; clients/s = '
        'clients per round / median round s.',
        '',
    ]
    lines += _runs_markdown(runs, table, varied)
    died = [r.label for r in runs if r.summary.get('error') == DIED]
    if died:
        lines += ['', f'Interrupted without a final status: {", ".join(died)}: {DIED}.']
    if seeds_vary:
        lines += [
            '',
            '## Over seeds',
            '',
            'Mean ± sample std over the seeds of each setting, sorted by the setting.',
            '',
        ]
        lines += _seed_markdown(seed_table(table, varied), varied)
    for p in plots:
        lines += ['', f'![{p.stem}]({p.name})']
    lines += [
        '',
        f'Tidy data: [{CSV_RUNS}]({CSV_RUNS}) (one row per run), '
        f'[{CSV_ROUNDS}]({CSV_ROUNDS}) (one row per run and round).',
    ]
    report = atomic.write_text(root / REPORT_FILE, '\n'.join(lines) + '\n')
    csvs = [atomic.write_text(root / CSV_RUNS, table.to_csv(index=False))]
    if not rounds.empty:
        csvs.append(
            atomic.write_text(
                root / CSV_ROUNDS, rounds.drop(columns=['setting']).to_csv(index=False)
            )
        )
    return [report] + plots + csvs
