"""The run directory: its files, `RunResult`, summary.json, run.log, and whether a run is
finished (`is_finished`) or can resume (`_resumable`).

Files other than the appended ones are replaced atomically
(`simharness.experiments.atomic`); a write that fails is an `OSError`
naming the file, and when even the final summary cannot be written the
stale 'running' one is removed (`_drop_stale_summary`).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import shutil
import statistics
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Union

from simharness.errors import ConfigError
from simharness.experiments import atomic
from simharness.experiments import checkpoints as CK
from simharness.experiments.config import ExperimentConfig, read_toml

PathLike = Union[str, Path]

#: Files of a run directory.
CONFIG_FILE = 'config.toml'
ENVIRONMENT_FILE = 'environment.json'
METRICS_FILE = 'metrics.jsonl'
SUMMARY_FILE = 'summary.json'
LOG_FILE = 'run.log'
FINAL_WEIGHTS_FILE = 'final_weights.npz'
BEST_WEIGHTS_FILE = 'best_weights.npz'
TENSORBOARD_DIR = 'tensorboard'

#: Metric fields that depend on the machine or the stack's layout, not on the math (left
#: out when comparing runs for reproducibility).
TIMING_FIELDS = (
    'round_seconds',
    'eval_seconds',
    'clients_per_second',
    'bytes_moved',
    'driver_rss_bytes',
    'worker_rss_bytes',
    'active_workers',
)

# Files a run writes (and removes before running again from scratch).
_RUN_FILES = (
    CONFIG_FILE,
    ENVIRONMENT_FILE,
    METRICS_FILE,
    SUMMARY_FILE,
    LOG_FILE,
    FINAL_WEIGHTS_FILE,
    BEST_WEIGHTS_FILE,
    'report.md',
    'runs.csv',
    'rounds.csv',
    'accuracy.png',
    'loss.png',
    'round_time.png',
    'clients_per_second.png',
)
# Directories a run writes (removed with it).
_RUN_DIRS = (CK.CHECKPOINT_DIR, TENSORBOARD_DIR)


@dataclasses.dataclass(frozen=True)
class RunResult:
    """The outcome of one run.

    Attributes:
        run_id: the run id (directory name).
        run_dir: ``<results>/<experiment name>/<run_id>``.
        status: ``'complete'``, ``'interrupted'`` or ``'failed'``.
        summary: the content of summary.json.
        skipped: True if `run_sweep` found the run finished and did not run it.
        error: ``'<exception type>: <message>'`` of a sweep point that failed
            (`run_sweep` goes on with the next point), else None.
    """

    run_id: str
    run_dir: Path
    status: str
    summary: Mapping[str, Any]
    skipped: bool = False
    error: Optional[str] = None


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')


def _clean_run_dir(run_dir: Path) -> None:
    """Removes the files of an earlier attempt (and only those)."""
    if not run_dir.is_dir():
        return
    for p in run_dir.iterdir():
        if p.is_file() and (p.name in _RUN_FILES or atomic.is_temp_file(p)):
            p.unlink()
        elif p.is_dir() and p.name in _RUN_DIRS:
            shutil.rmtree(p)


def _summary(
    config: ExperimentConfig,
    run_id: str,
    status: str,
    metrics: List[Dict[str, Any]],
    extra: Mapping[str, Any],
) -> Dict[str, Any]:
    times = [m['round_seconds'] for m in metrics]
    later = times[1:] or times
    median = statistics.median(later) if later else None
    last = metrics[-1] if metrics else {}
    evaluated = [m for m in metrics if m.get('eval_loss') is not None]
    last_eval = evaluated[-1] if evaluated else {}
    worker_rss = [r for m in metrics for r in m.get('worker_rss_bytes', []) if r is not None]
    return {
        'status': status,
        'experiment': config.name,
        'run_id': run_id,
        'stack': config.stack.kind,
        'num_workers': extra.get('num_workers'),
        'clients_per_round': config.training.clients_per_round,
        'rounds': config.training.rounds,
        'rounds_completed': len(metrics),  # rounds with a metrics row
        'final_loss': last_eval.get('eval_loss'),
        'final_accuracy': last_eval.get('eval_accuracy'),
        'final_eval_round': last_eval.get('round'),
        'final_train_loss': last.get('loss'),
        'final_train_accuracy': last.get('accuracy'),
        'initial_eval_loss': extra.get('initial_eval_loss'),
        'initial_eval_accuracy': extra.get('initial_eval_accuracy'),
        'eval_on': extra.get('eval_on'),
        'final_weights_sha256': last.get('weights_sha256'),
        'first_round_seconds': times[0] if times else None,
        'median_round_seconds': median,
        'clients_per_second': (config.training.clients_per_round / median if median else None),
        'setup_seconds': extra.get('setup_seconds'),
        'stack_start_seconds': extra.get('stack_start_seconds'),
        'total_seconds': extra.get('total_seconds'),
        'bytes_moved': sum(m['bytes_moved'] for m in metrics),
        'peak_driver_rss_bytes': max((m['driver_rss_bytes'] for m in metrics), default=None),
        'peak_worker_rss_bytes': max(worker_rss, default=None),
        # the most workers a round used (a small cohort goes to fewer than num_workers)
        'active_workers': max(
            (m['active_workers'] for m in metrics if m.get('active_workers') is not None),
            default=None,
        ),
        'started_at': extra.get('started_at'),
        'finished_at': extra.get('finished_at'),
        'error': extra.get('error'),
        'algorithm': config.algorithm.name,
        'dp_epsilon': last.get('dp_epsilon'),
        'resumed_from_round': extra.get('resumed_from_round'),
        'stopped_early_after_round': extra.get('stopped_early'),
        'best_round': extra.get('best_round'),
        'best_value': extra.get('best_value'),
        # per TF computation of a round: XLA-compiled or not, and why (simharness.core.xla)
        'xla': extra.get('xla'),
    }


def _resumable(run_dir: Path, config: ExperimentConfig) -> bool:
    """An unfinished run of the same config with a checkpoint."""
    summary = read_json(run_dir / SUMMARY_FILE)
    if not isinstance(summary, dict) or summary.get('status') not in (
        'interrupted',
        'failed',
        'running',
    ):
        return False
    try:
        if read_toml(run_dir / CONFIG_FILE) != config.to_dict():
            return False
    except ConfigError:
        return False
    return bool(CK.list_checkpoints(run_dir))


def _open_run_log(run_dir: Path) -> Optional[logging.Handler]:
    """A log file per run: records of the 'simharness' loggers at INFO and above."""
    try:
        handler = logging.FileHandler(run_dir / LOG_FILE, mode='a', encoding='utf-8')
    except OSError:
        return None
    handler.setLevel(logging.INFO)
    handler.setFormatter(logging.Formatter('%(asctime)s %(levelname)s %(name)s: %(message)s'))
    logger = logging.getLogger('simharness')
    handler.old_level = logger.level  # type: ignore[attr-defined]
    if logger.level == logging.NOTSET or logger.level > logging.INFO:
        logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    return handler


def _close_run_log(handler: Optional[logging.Handler]) -> None:
    if handler is None:
        return
    logger = logging.getLogger('simharness')
    logger.removeHandler(handler)
    logger.setLevel(getattr(handler, 'old_level', logging.NOTSET))
    handler.close()


def _drop_stale_summary(run_dir: Path, error: BaseException, write_error: OSError) -> None:
    """The final summary could not be written (a full disk): a summary.json
    saying 'running' would lie, so it goes; `error` (the run's own) gets a note."""
    path = run_dir / SUMMARY_FILE
    try:
        path.unlink()
        what = 'the earlier one was removed'
    except FileNotFoundError:
        what = 'there is none'
    except OSError:
        what = 'the earlier one (status "running") is stale'
    reason = write_error.strerror or str(write_error)
    note = f'{path} could not be written either ({reason}); {what}'
    if hasattr(error, 'add_note'):  # Python >= 3.11
        error.add_note(note)
    else:
        error.__notes__ = [*getattr(error, '__notes__', []), note]  # type: ignore[attr-defined]


def _read_rows(path: Path) -> List[Dict[str, Any]]:
    """The parseable rows of a metrics.jsonl (a torn last line is dropped)."""
    return atomic.read_jsonl(path)


def read_json(path: PathLike) -> Optional[Any]:
    """The parsed JSON file, or None if it is missing or unreadable."""
    try:
        return json.loads(Path(path).read_text(encoding='utf-8'))
    except (OSError, ValueError):
        return None


def is_finished(run_dir: PathLike, config: Optional[ExperimentConfig] = None) -> bool:
    """Whether `run_dir` holds a complete run (of `config`, when given).

    Complete: summary.json says ``status = 'complete'`` and, if `config`
    is given, config.toml is that config (so a changed experiment runs
    again).
    """
    run_dir = Path(run_dir)
    summary = read_json(run_dir / SUMMARY_FILE)
    if not isinstance(summary, dict) or summary.get('status') != 'complete':
        return False
    if config is None:
        return True
    try:
        stored = read_toml(run_dir / CONFIG_FILE)
    except ConfigError:
        return False
    return stored == config.to_dict()
