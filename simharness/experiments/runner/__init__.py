"""Runs an `ExperimentConfig`: data, model, algorithm, aggregator and a stack, round by round.

::

    run_sweep(config) -- for each (run_id, cfg) of expand_sweep(config):
        finished (summary.json status 'complete', same config.toml)? -> skip
        else run_experiment(cfg, run_id=run_id)      (resumes an unfinished run)
    run_sweep(config, jobs=N) -- the points not finished, N at a time, each job a
        process of its own on its own cores (`parallel`)
    run_sweep(config, ray_address=A) -- each point not finished a Ray task on one node of
        the cluster at A, its files written back here (`ray_sweep`)

    run_experiment(cfg) -> <results>/<name>/<run_id>/
        config.toml       resolved config                     written first
        environment.json  versions, CPU, GPUs, git             written first
        summary.json      status 'running' ... then 'complete' | 'interrupted' | 'failed'
        metrics.jsonl     one line per finished round          appended after each round
        run.log           the run's log records (INFO)         appended
        checkpoints/      server state every training.checkpoint_every rounds and at the end
        tensorboard/      scalars per round
        final_weights.npz, best_weights.npz

    unfinished run of the same config with a checkpoint (and resume=True):
        state, callbacks <- last checkpoint; metrics.jsonl cut back to it; go on from there

    one run at a time per run directory: run.lock is flock'ed for the whole run (resume
        included) before anything there is read or written; a second run of it raises
        RunInProgressError (`lock`); the kernel drops the lock when its holder dies

    the process: `simharness.experiments.processes` builds the config's tff.learning
        LearningProcess (build_weighted_fed_avg / fed_prox / fed_sgd, TFF's optimizers and
        aggregators) and composes it with the data's dataset computation, so `next` takes
        client ids

    one round (timed: the process call only, building the cohort's datasets included):
        cohort (sample_cohort or the reference rule) -> process.next(state, cohort ids) on
        the stack (each executor builds its clients' tf.data datasets from the ids)
        -> central evaluation (every eval_every rounds and after the last)
        -> append metrics, TensorBoard, callbacks (early stopping, best model), checkpoint

The package, by job: `rundir` (the files, summary.json, run.log, `is_finished`),
`lock` (the run directory's lock: `run_lock`, `check_not_running`),
`environment` (environment.json), `workload` (data, cohorts, model, process),
`rounds` (the stack and the rounds: `_run_rounds`, `run_round`); this module
runs experiments and sweeps and re-exports the names users import from
``simharness.experiments.runner``.

Files other than the appended ones are replaced atomically
(`simharness.experiments.atomic`); an appended line is one write and an
fsync, so a crash leaves whole lines (a torn last line is skipped by
readers and cut on resume). The stack is closed in a ``finally``; on
KeyboardInterrupt (Ctrl-C; the CLI turns SIGTERM and SIGHUP into a subclass
of it) the summary says 'interrupted', on any other exception 'failed' with
the error text, and the exception propagates. A write that fails (a full
disk, an unwritable results directory) is an `OSError` naming the file: the
run fails, and when even the final summary cannot be written the stale
'running' one is removed (the error gets a note saying so), so no summary
claims a dead run is running.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from simharness.errors import ConfigError, RunInProgressError
from simharness.experiments import atomic
from simharness.experiments import checkpoints as CK
from simharness.experiments.config import DEFAULT_RUN_ID, ExperimentConfig, expand_sweep
from simharness.experiments.runner.rundir import (
    _clean_run_dir,
    _close_run_log,
    _drop_stale_summary,
    _now,
    _open_run_log,
    _resumable,
    _summary,
    CONFIG_FILE,
    ENVIRONMENT_FILE,
    is_finished,
    PathLike,
    read_json,
    RunResult,
    SUMMARY_FILE,
)
from simharness.experiments.runner.environment import collect_environment
from simharness.experiments.runner.lock import run_lock
from simharness.experiments.runner.rounds import (
    _close_factory,
    _make_factory,
    _progress_enabled,
    _round_line,
    _row,
    _run_rounds,
    _scalars,
    _stats,
    _weights,
    run_round,
    weights_digest,
)
from simharness.experiments.runner.rundir import (
    BEST_WEIGHTS_FILE,
    FINAL_WEIGHTS_FILE,
    LOG_FILE,
    METRICS_FILE,
    TENSORBOARD_DIR,
    TIMING_FIELDS,
    _read_rows,
)
from simharness.experiments.runner.workload import (
    EVAL_IN_MEMORY_BYTES,
    _build_model,
    _build_process,
    _build_workload,
    _cohort,
    _eval_rows,
    _load_benchmark,
    _Model,
    _stack_clients,
    _Workload,
)

__all__ = [
    'BEST_WEIGHTS_FILE',
    'CONFIG_FILE',
    'ENVIRONMENT_FILE',
    'EVAL_IN_MEMORY_BYTES',
    'FINAL_WEIGHTS_FILE',
    'LOG_FILE',
    'METRICS_FILE',
    'SUMMARY_FILE',
    'TENSORBOARD_DIR',
    'TIMING_FIELDS',
    'RunResult',
    'collect_environment',
    'is_finished',
    'read_json',
    'run_experiment',
    'run_round',
    'run_sweep',
    'weights_digest',
]

_log = logging.getLogger(__name__)


def run_experiment(
    config: ExperimentConfig,
    results_root: PathLike = 'results',
    progress: bool = True,
    run_id: str = DEFAULT_RUN_ID,
    *,
    resume: bool = True,
    callbacks: Sequence[CK.Callback] = (),
) -> RunResult:
    """Runs one experiment and writes ``<results_root>/<config.name>/<run_id>/``.

    An unfinished run of the same config (summary 'interrupted', 'failed'
    or 'running', same config.toml) with a checkpoint resumes from its last
    checkpoint when `resume` is true: the metrics of the rounds after the
    checkpoint are dropped and computed again, with the same bits. Any
    other existing run directory is run again from scratch (its run files
    are replaced). See the module docstring for the files; per round,
    metrics.jsonl has ``round`` (0-based), ``loss``, ``accuracy`` (the
    model's metrics over the cohort's training examples), ``num_examples``,
    ``clients``, the aggregator's measurements and ``dp_epsilon`` (when
    configured), ``eval_loss`` / ``eval_accuracy`` (central evaluation of
    the new weights on the held-out test set, or on all clients' data;
    None in rounds without evaluation), ``weights_sha256``, ``round_seconds``,
    ``eval_seconds``, ``clients_per_second``, ``bytes_moved`` (shared-memory
    bytes to and from workers during the round; 0 on the thread stack),
    ``driver_rss_bytes`` and ``worker_rss_bytes`` (a list; empty on the
    thread stack), ``active_workers`` (the worker processes the round used: a
    cohort too small to give every worker a reduction chunk goes to fewer; None on
    the thread stack). summary.json's ``active_workers`` is the most a round used.

    Args:
        config: the experiment (without a sweep grid; see `run_sweep`).
        results_root: the results root directory.
        progress: show a tqdm bar (when stderr is a TTY and ``CI`` is not
            set; otherwise one log line per round on stderr).
        run_id: the run directory's name.
        resume: resume an unfinished run from its last checkpoint.
        callbacks: `simharness.experiments.checkpoints.Callback` s called
            after every round (besides the config's early stopping and
            best-model tracking).

    Returns:
        The `RunResult` (status 'complete').

    Raises:
        ConfigError: the config has a sweep grid, or the data cannot be
            loaded as configured.
        RunInProgressError: another run of the same run directory is in
            progress (it holds the directory's lock, run.lock); nothing
            in the directory was changed.
        KeyboardInterrupt: after closing the stack and writing summary.json
            with status 'interrupted'.
        OSError: a results file could not be written (``filename`` names
            it); summary.json says 'failed' if it could still be written,
            else it is removed and the error has a note (``__notes__``).
        Exception: any other failure, after writing summary.json with
            status 'failed' and the error text.
    """
    if config.sweep.grid:
        raise ConfigError(
            f'experiment {config.name!r} has a [sweep] grid; run it with '
            'run_sweep (simharness sweep)',
            key='sweep.grid',
        )
    if (
        not isinstance(run_id, str)
        or not run_id
        or run_id in ('.', '..')
        or '/' in run_id
        or os.sep in run_id
    ):
        raise ConfigError(
            f'run_id must be a plain directory name, got {run_id!r}', key='run_id', value=run_id
        )
    run_dir = Path(results_root) / config.name / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    with run_lock(run_dir):  # another run of this directory: RunInProgressError, untouched
        return _run_locked(config, run_dir, run_id, progress, resume, callbacks)


def _run_locked(
    config: ExperimentConfig,
    run_dir: Path,
    run_id: str,
    progress: bool,
    resume: bool,
    callbacks: Sequence[CK.Callback],
) -> RunResult:
    """`run_experiment` in its run directory, whose lock this process holds."""
    resuming = resume and _resumable(run_dir, config)
    if not resuming:
        _clean_run_dir(run_dir)

    t_start = time.perf_counter()
    extra: Dict[str, Any] = {'started_at': _now()}
    metrics: List[Dict[str, Any]] = []
    status = 'running'
    error: Optional[BaseException] = None
    log_handler = _open_run_log(run_dir)
    try:
        if resuming:
            _log.info('%s/%s: resuming the unfinished run', config.name, run_id)
        atomic.write_text(run_dir / CONFIG_FILE, config.to_toml())
        atomic.write_json(run_dir / ENVIRONMENT_FILE, collect_environment())
        atomic.write_json(run_dir / SUMMARY_FILE, _summary(config, run_id, status, [], extra))
        status = _run_rounds(
            config, run_dir, run_id, metrics, extra, progress, t_start, resuming, list(callbacks)
        )
    except BaseException as e:  # pylint: disable=broad-exception-caught  # raised again below
        interrupt = _interruption(e)
        if interrupt is not None:  # Ctrl-C, or SIGTERM / SIGHUP through the CLI
            status, error = 'interrupted', interrupt
            # INFO: the run's log file records it; the CLI says "interrupted" itself.
            _log.info('%s/%s: interrupted after %d rounds', config.name, run_id, len(metrics))
        else:
            status, error = 'failed', e
            extra['error'] = f'{type(e).__name__}: {e}'
            _log.info('%s/%s: failed: %s', config.name, run_id, extra['error'])  # (as above)
    extra['total_seconds'] = time.perf_counter() - t_start
    extra['finished_at'] = _now()
    summary = _summary(config, run_id, status, metrics, extra)
    try:
        try:
            atomic.write_json(run_dir / SUMMARY_FILE, summary)
        except OSError as e:
            if error is None:
                raise
            _drop_stale_summary(run_dir, error, e)
    finally:
        _close_run_log(log_handler)
    if error is not None:
        raise error
    return RunResult(run_id, run_dir, status, summary)


def _finished(
    i: int,
    n: int,
    run_id: str,
    cfg: ExperimentConfig,
    results_root: PathLike,
    log: Optional[Callable[[str], None]],
) -> Optional[RunResult]:
    """The result of point `i` of `n` when its run is complete already (said to `log`), else
    None: the point is to run."""
    run_dir = Path(results_root) / cfg.name / run_id
    if not is_finished(run_dir, cfg):
        return None
    if log:
        log(f'[{i}/{n}] skip {run_id} (complete)')
    return RunResult(
        run_id, run_dir, 'complete', read_json(run_dir / SUMMARY_FILE) or {}, skipped=True
    )


def _run_elsewhere(
    runs: List[Any],
    results_root: PathLike,
    log: Optional[Callable[[str], None]],
    run_points: Callable[[List[Tuple[int, str, ExperimentConfig]]], Dict[str, RunResult]],
) -> List[RunResult]:
    """`run_sweep` with its unfinished points ((position, run id, config)) run by
    `run_points` (side by side: `parallel`; on Ray: `ray_sweep`), in sweep order."""
    done: Dict[str, RunResult] = {}
    todo = []
    for i, (run_id, cfg) in enumerate(runs, 1):
        finished = _finished(i, len(runs), run_id, cfg, results_root, log)
        if finished is not None:
            done[run_id] = finished
        else:
            todo.append((i, run_id, cfg))
    done.update(run_points(todo))
    for run_id, r in done.items():
        if r.status == 'failed':
            _log.warning('%s: failed: %s', run_id, r.error)
    return [done[run_id] for run_id, _ in runs if run_id in done]


def _interruption(error: BaseException) -> Optional[KeyboardInterrupt]:
    """The `KeyboardInterrupt` that `error` is, or that it was raised while handling.

    A signal turned into an exception (Ctrl-C; the CLI's SIGTERM / SIGHUP) can
    land inside a library's clean-up code, e.g. TF's ``tf.device`` scope exit,
    which then fails with an error of its own ("Exiting device scope without
    proper scope nesting") that hides the interrupt in its ``__context__``:
    the run was still interrupted, not failed.
    """
    seen = set()
    e: Optional[BaseException] = error
    while e is not None and id(e) not in seen:
        if isinstance(e, KeyboardInterrupt):
            return e
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return None


def run_sweep(
    config: ExperimentConfig,
    results_root: PathLike = 'results',
    progress: bool = True,
    log: Optional[Callable[[str], None]] = None,
    resume: bool = True,
    jobs: Optional[int] = 1,
    *,
    ray_address: Optional[str] = None,
    ray_connect_timeout: float = 30.0,
) -> List[RunResult]:
    """Runs every point of the config's sweep grid; finished runs are skipped.

    A run whose directory holds a complete run of the same resolved config
    is skipped; an interrupted or failed run of the same config resumes from
    its last checkpoint (unless `resume` is false); any other run (missing,
    or of a changed config) is run from scratch. Runs go one after another,
    each with its own stack.

    Args:
        config: the experiment (a config without a grid is one run).
        results_root: the results root directory.
        progress: show progress bars (see `run_experiment`).
        log: called with one line per run ("skip ..." / "run ...").
        resume: resume unfinished runs from their checkpoints.
        jobs: points run at once, each in a process of its own on its own cores
            (`parallel`: usable cores split into `jobs` disjoint sets of the
            point's workers; more than fit is an `OversubscribedWarning`); None: as
            many as fit (`parallel.default_jobs`: usable cores // a point's workers,
            the CLI's default); 1 (the default here): one after another in this
            process. Not used with `ray_address`.
        ray_address: run the points as Ray tasks on this cluster (``'auto'``,
            ``'host:port'``, ``'ray://host:port'``, as ``stack.address``): each
            point one task holding its workers' CPUs on one node; its files come
            back to `results_root` (`ray_sweep`).
        ray_connect_timeout: seconds to wait for `ray_address` to answer.

    Returns:
        One `RunResult` per run, in sweep order.

    Raises:
        ConfigError: an invalid sweep point (before anything runs); a
            `ray_address` that does not answer within `ray_connect_timeout`.
        KeyboardInterrupt: from the interrupted run (its summary says so).
        RunInProgressError: another run holds a point's run directory (the
            points before it have run; this one and the rest have not).

    A point that fails (any other exception: a model that does not fit its
    data, a worker crash, a full disk) does not stop the sweep: its summary
    says 'failed' with the error, its `RunResult` has status 'failed' and
    `error` set, and the next point runs. Check ``r.status`` of the results
    (the CLI exits 1 when any point failed).
    """
    runs = expand_sweep(config)
    if jobs is None:
        from simharness.experiments.runner import parallel  # pylint: disable=import-outside-toplevel

        jobs = parallel.default_jobs(config, [c for _, c in runs])
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ConfigError(
            f'jobs must be an int >= 1 (points run at once) or None (as many '
            f'as fit this machine), got {jobs!r}',
            key='jobs',
            value=jobs,
        )
    # pylint: disable=import-outside-toplevel
    if ray_address is not None:
        from simharness.experiments.runner import ray_sweep

        return _run_elsewhere(
            runs,
            results_root,
            log,
            lambda todo: ray_sweep.run_points(
                todo, len(runs), results_root, ray_address, resume, log, ray_connect_timeout
            ),
        )
    left = [1 for run_id, c in runs if not is_finished(Path(results_root) / c.name / run_id, c)]
    if jobs > 1 and len(left) > 1:  # one point left: it runs here, as with jobs=1
        from simharness.experiments.runner import parallel

        return _run_elsewhere(
            runs,
            results_root,
            log,
            lambda todo: parallel.run_points(todo, len(runs), results_root, jobs, resume, log),
        )
    results = []
    for i, (run_id, cfg) in enumerate(runs, 1):
        finished = _finished(i, len(runs), run_id, cfg, results_root, log)
        if finished is not None:
            results.append(finished)
            continue
        if log:
            log(f'[{i}/{len(runs)}] run {run_id}')
        try:
            if resume:
                results.append(run_experiment(cfg, results_root, progress=progress, run_id=run_id))
            else:
                results.append(
                    run_experiment(
                        cfg, results_root, progress=progress, run_id=run_id, resume=False
                    )
                )
        except (KeyboardInterrupt, RunInProgressError):
            raise  # another sweep (or run) is at this point: stop, as a run would
        except Exception as e:  # pylint: disable=broad-exception-caught  # recorded, go on
            error = f'{type(e).__name__}: {e}'
            _log.warning('%s/%s: failed: %s', cfg.name, run_id, error)
            run_dir = Path(results_root) / cfg.name / run_id
            summary = read_json(run_dir / SUMMARY_FILE) or {}
            if summary.get('status') != 'failed':  # failed before its summary was written
                summary = {'status': 'failed', 'error': error}
            results.append(RunResult(run_id, run_dir, 'failed', summary, error=error))
    return results
