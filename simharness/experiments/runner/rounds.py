"""The rounds of a run (`_run_rounds`): the stack, the process, resume from a checkpoint,
one metrics row per round, TensorBoard, callbacks, checkpoints, the progress bar.

One round (timed: the process call only, building the cohort's datasets included)::

    cohort (sample_cohort or the reference rule) -> run_round(process, state, the cohort's
    batches (in-memory data: `processes.client_batches`) or ids (each executor builds its
    clients' tf.data datasets from them)) on the stack
    -> central evaluation (every eval_every rounds and after the last; federated too
       with training.federated_eval) -> append the row, TensorBoard, callbacks, checkpoint
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import shutil
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import psutil

from simharness.errors import (
    ConfigError,
    OversubscribedWarning,
    SimharnessTypeError,
    SimharnessValueError,
)
from simharness.executors.base import ExecutorFactory
from simharness.experiments import atomic
from simharness.experiments import checkpoints as CK
from simharness.experiments.config import ExperimentConfig
from simharness.experiments.runner.rundir import (
    _read_rows,
    BEST_WEIGHTS_FILE,
    FINAL_WEIGHTS_FILE,
    METRICS_FILE,
    TENSORBOARD_DIR,
)
from simharness.experiments.runner.environment import _record_cluster
from simharness.experiments.runner.workload import (
    _build_model,
    _build_process,
    _build_workload,
    _cohort,
    _Model,
    _Workload,
)

#: A metrics row, or the summary's extra fields: JSON values by name.
JsonRecord = Dict[str, Any]

#: The runner's records keep the logger name of the module before the split.
_log = logging.getLogger('simharness.experiments.runner')


def _make_factory(config: ExperimentConfig) -> Any:
    from simharness import stacks  # pylint: disable=import-outside-toplevel

    s: Any = config.stack  # ThreadStack, ProcessStack or RayStack: exactly its options
    if s.kind == 'thread':
        return stacks.local_executor_factory(clients_per_thread=s.clients_per_thread)
    if s.kind == 'ray':
        return stacks.ray_executor_factory(
            address=s.address,
            num_workers=s.num_workers,
            num_cpus_per_worker=s.num_cpus_per_worker,
            num_gpus_per_worker=s.num_gpus_per_worker,
            clients_per_worker=s.clients_per_worker,
            placement_strategy=s.placement_strategy,
            cpu_affinity=s.cpu_affinity,
        )
    from simharness.experiments.config import check_stack_devices

    check_stack_devices(s)
    _warn_oversubscribed(
        s.num_workers
    )  # a GPU that is not here: a config error naming stack.devices
    devices = list(s.devices) if isinstance(s.devices, tuple) else s.devices
    with warnings.catch_warnings():  # said above, in the config's words
        warnings.simplefilter('ignore', OversubscribedWarning)
        return stacks.process_executor_factory(
            num_workers=s.num_workers,
            clients_per_worker=s.clients_per_worker,
            cpu_affinity=s.cpu_affinity,
            devices=devices,
            workers_per_gpu=s.workers_per_gpu,
            start=False,
        )


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


def _warn_oversubscribed(num_workers: Any) -> None:
    """A warning when the local stack starts more workers than this process may use cores."""
    cores = _usable_cores()
    if isinstance(num_workers, int) and num_workers > cores:
        _log.warning(
            'stack.num_workers = %d is more than the %d usable CPU core(s) of this '
            'machine: the workers share them (slower rounds, same results); '
            'stack.num_workers = %d is the most that runs in parallel',
            num_workers,
            cores,
            cores,
        )


def _close_factory(factory: Any) -> None:
    close = getattr(factory, 'close', None)
    if close is not None:
        close()
    else:
        factory.clean_up_executors()


def _stats(factory: Any) -> Tuple[int, List[Optional[int]]]:
    """(shared-memory bytes moved so far, worker RSS list) of a factory."""
    stats = getattr(factory, 'stats', None)
    if stats is None:
        return 0, []
    s = stats()
    moved = int(s.get('bytes_to_workers', 0)) + int(s.get('bytes_from_workers', 0))
    return moved, [w.get('rss_bytes') for w in s.get('workers', [])]


def weights_digest(weights: Sequence[Any]) -> str:
    """SHA-256 of the weights' shapes, dtypes and bytes (bit-identity check)."""
    h = hashlib.sha256()
    for w in weights:
        a = np.ascontiguousarray(np.asarray(w))
        h.update(f'{a.dtype.str}{a.shape};'.encode())
        h.update(a.tobytes())
    return h.hexdigest()


def _progress_enabled(progress: bool) -> bool:
    if not progress or os.environ.get('CI'):
        return False
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def _compiled(process: Any, jit_compile: Optional[bool]) -> Optional[Dict[str, Any]]:
    """Per TF computation of the round (`process.next`): XLA-compiled or not, and why (None
    when `next` is a Python function around computations, as with clients by reference)."""
    from simharness.core import xla
    from simharness.core.computation import Computation

    if not isinstance(process.next, Computation):
        return None
    comp = process.next.to_building_block()
    return xla.report(comp if jit_compile is None else xla.force_tree(comp, jit_compile))


def run_round(process: Any, state: Any, clients: Sequence[Any]) -> Tuple[Any, Any]:
    """One training round: ``process.next(state, clients)``, the cohort's ids or batches
    (`workload._build_process`; tests wrap this seam)."""
    return tuple(process.next(state, list(clients)))  # type: ignore[return-value]


def _weights(state: Any) -> List[np.ndarray]:
    """The model weights of a process state (trainable, then non-trainable) as arrays."""
    mw = state.global_model_weights
    return [np.asarray(w) for w in list(mw.trainable) + list(mw.non_trainable)]


def _row(round_num: int, process_metrics: Any, cohort: Sequence[str]) -> Dict[str, Any]:
    """The metrics row of a round: `processes.round_metrics` and the cohort size."""
    from simharness.experiments.processes import round_metrics  # pylint: disable=import-outside-toplevel

    flat = round_metrics(process_metrics)
    row: Dict[str, Any] = {'round': round_num}
    for k in ('loss', 'accuracy', 'num_examples'):
        row[k] = flat.pop(k)
    row['clients'] = float(len(cohort))
    row.update(flat)
    return row


#: Attribute set on log records the runner also prints on the console itself (round lines,
#: the resume notice): the CLI's stderr handler skips them, so each shows once.
CONSOLE_ATTR = 'simharness_console'


def _console(progress: bool, message: str) -> None:
    """Logs `message` (run.log) and, with `progress`, prints it on stderr once."""
    _log.info('%s', message, extra={CONSOLE_ATTR: True})
    if progress:
        print(message, file=sys.stderr, flush=True)


#: The progress bar's description is cut to this many characters (the bar keeps its room).
BAR_DESC_CHARS = 24


def _bar_desc(config: ExperimentConfig, run_id: str) -> str:
    desc = config.name if run_id == 'default' else f'{config.name}/{run_id}'
    return desc if len(desc) <= BAR_DESC_CHARS else desc[: BAR_DESC_CHARS - 1] + '\u2026'


def _round_line(config: ExperimentConfig, row: Mapping[str, Any]) -> str:
    # Rounds are 0-based everywhere (metrics.jsonl, rounds.csv, TensorBoard, plots, summary);
    # the console adds how many of the run's rounds are done.
    parts = [
        f'round {row["round"]} ({row["round"] + 1}/{config.training.rounds} done)',
        f'loss {row["loss"]:.4f}',
        f'accuracy {row["accuracy"]:.4f}',
    ]
    if row.get('eval_loss') is not None:
        parts += [f'eval_loss {row["eval_loss"]:.4f}', f'eval_accuracy {row["eval_accuracy"]:.4f}']
    if row.get('dp_epsilon') is not None:
        parts.append(f'epsilon {row["dp_epsilon"]:.3f}')
    parts.append(f'{row["round_seconds"]:.3f} s')
    return ', '.join(parts)


def _run_rounds(
    config: ExperimentConfig,
    run_dir: Path,
    run_id: str,
    metrics: List[JsonRecord],
    extra: JsonRecord,
    progress: bool,
    t_start: float,
    resuming: bool = False,
    callbacks: Optional[List[CK.Callback]] = None,
) -> str:
    """Builds everything, runs the rounds (appending to `metrics`); returns 'complete'.

    The stack's workers start (`WorkerPool.start_soon`) once the data and the model have
    passed their checks, while the process is built and traced (each ~3 s of a run's start
    on 2 cores); the rounds wait for them (`extra['stack_start_seconds']`: that wait)."""
    # pylint: disable=import-outside-toplevel
    from simharness.core.determinism import pin_tensorflow_threads
    from simharness.runtime.local.pool import WorkerPool

    pin_tensorflow_threads()  # before the model and process run TF here: the workers' bits
    if _progress_enabled(progress):  # on a terminal: something before the bar appears
        print(
            f'{config.name}/{run_id}: loading the data, building the model, starting the '
            f'{config.stack.kind} stack ...',
            file=sys.stderr,
            flush=True,
        )
    work = _build_workload(config)
    model = _build_model(config, work)
    _cohort(config, work.client_data.client_ids, 0)  # clients_per_round against the data first
    try:
        factory = _make_factory(config)
    except (SimharnessValueError, SimharnessTypeError) as e:  # e.g. devices naming no GPU
        raise ConfigError(
            f'[stack] {config.stack.kind}: {e}', key='stack', value=config.stack.kind
        ) from e
    try:
        group = getattr(factory, 'group', None)  # a worker stack's workers
        if isinstance(group, WorkerPool):
            group.start_soon()
        run = _RunRecords(run_dir, run_id, metrics, extra, progress, t_start, resuming, callbacks)
        return _train(factory, config, work, model, run)
    finally:
        _close_factory(factory)


@dataclasses.dataclass(frozen=True)
class _RunRecords:
    """What `_run_rounds` was given about the run: where it writes, its rows and summary
    fields so far (appended to, filled in), how it reports, whether it resumes."""

    run_dir: Path
    run_id: str
    metrics: List[JsonRecord]
    extra: JsonRecord
    progress: bool
    t_start: float
    resuming: bool
    callbacks: Optional[List[CK.Callback]]


def _train(
    factory: ExecutorFactory,
    config: ExperimentConfig,
    work: _Workload,
    model: _Model,
    run: _RunRecords,
) -> str:
    """`_run_rounds` on the stack of `factory` (which `_run_rounds` closes)."""
    # pylint: disable=import-outside-toplevel
    from tqdm.auto import tqdm

    import simharness
    from simharness.data.sampling import sample_cohort
    from simharness.aggregators.accounting import dp_epsilon
    from simharness.experiments.processes import federated_evaluation
    from simharness.runtime.local.pool import WorkerPool
    from simharness.runtime.ray.workers import RayWorkers

    run_dir, run_id, metrics, extra = run.run_dir, run.run_id, run.metrics, run.extra
    progress, t_start, resuming, callbacks = run.progress, run.t_start, run.resuming, run.callbacks
    cd = work.client_data
    ids = cd.client_ids
    t = config.training
    sizes = [cd.client_size(c) for c in ids]
    process, clients = _build_process(config, model.functional, work)
    eval_process, eval_clients = (
        _build_process(config, model.functional, work, evaluation=True)
        if t.federated_eval
        else (None, list)
    )
    state = process.initialize()
    extra['xla'] = _compiled(process, config.stack.jit_compile)
    agg = config.aggregator
    callbacks = list(callbacks or [])
    best = CK.BestModel(run_dir / BEST_WEIGHTS_FILE, t.early_stopping_metric)
    own: List[CK.Callback] = [best]
    if t.early_stopping_patience > 0:
        own.append(CK.EarlyStopping(t.early_stopping_metric, t.early_stopping_patience))
    start_round = 0
    extra['eval_on'] = work.eval_on
    checkpoint = CK.latest_checkpoint(run_dir, like=state) if resuming else None
    if resuming and checkpoint is None:  # none readable (e.g. of an older format): from round 0
        _console(
            progress,
            f'{config.name}/{run_id}: the unfinished run has no readable '
            'checkpoint; running it again from round 0',
        )
        atomic.write_jsonl(run_dir / METRICS_FILE, [])
        shutil.rmtree(run_dir / TENSORBOARD_DIR, ignore_errors=True)
    if checkpoint is not None:
        state, meta = checkpoint
        start_round = int(meta['rounds_done'])
        for cb, s in zip(own + callbacks, meta.get('callbacks', [])):
            cb.restore(s)
        extra['initial_eval_loss'] = meta.get('initial_eval_loss')
        extra['initial_eval_accuracy'] = meta.get('initial_eval_accuracy')
        extra['resumed_from_round'] = start_round
        old = [r for r in _read_rows(run_dir / METRICS_FILE) if r.get('round', -1) < start_round]
        metrics.extend(old)
        atomic.write_jsonl(run_dir / METRICS_FILE, metrics)
        # TensorBoard: written again up to the checkpoint, so no round appears twice.
        shutil.rmtree(run_dir / TENSORBOARD_DIR, ignore_errors=True)
        _console(
            progress,
            f'{config.name}/{run_id}: resuming the unfinished run at round '
            f'{start_round} from its checkpoint (rounds 0-{start_round - 1} '
            f'kept; --restart runs it from round 0)',
        )
    else:
        loss0, acc0 = model.evaluate(_weights(state))
        extra['initial_eval_loss'], extra['initial_eval_accuracy'] = loss0, acc0
    driver = psutil.Process()
    t_setup = time.perf_counter()
    extra['setup_seconds'] = t_setup - t_start

    bar = None
    writer = None
    try:
        group = getattr(factory, 'group', None)  # a worker stack's workers
        if isinstance(group, WorkerPool):
            t_pool = time.perf_counter()  # the wait for the start begun by `_run_rounds`
            group.start()
            extra['stack_start_seconds'] = time.perf_counter() - t_pool
            extra['num_workers'] = group.num_workers
        elif isinstance(group, RayWorkers):  # stack.kind = 'ray': the actors
            t_ray = time.perf_counter()
            group.start()
            extra['stack_start_seconds'] = time.perf_counter() - t_ray
            extra['num_workers'] = group.num_workers
            _record_cluster(run_dir, group.cluster())
        else:
            extra['stack_start_seconds'] = 0.0
        show_bar = _progress_enabled(progress)
        bar = tqdm(
            total=t.rounds,
            initial=start_round,
            desc=_bar_desc(config, run_id),
            unit='round',
            disable=not show_bar,
            dynamic_ncols=True,
            leave=True,
        )
        if t.tensorboard:
            writer = CK.ScalarWriter(run_dir / TENSORBOARD_DIR)
            for old_row in metrics:  # a resumed run's rounds before its checkpoint
                writer.write(old_row['round'], _scalars(old_row))
        k = t.clients_per_round
        last_eval = '-'
        # The workers each round uses (stacks of worker processes, local or remote).
        active: Optional[Callable[[int], int]] = getattr(factory, 'active_workers', None)
        with simharness.execution_context(factory, jit_compile=config.stack.jit_compile):
            for r in range(start_round, t.rounds):
                if t.cohort == 'reference':
                    cohort = _cohort(config, ids, r)
                else:
                    cohort = sample_cohort(
                        ids, k, r, t.seed, mode=t.cohort, sizes=sizes, availability=t.availability
                    )
                # In-memory data: the cohort's batches, built here (timed with the round);
                # other data by id: each executor builds its clients' datasets (on the
                # process and Ray stacks a file-backed source is read by the workers).
                moved_before, _ = _stats(factory)
                t0 = time.perf_counter()
                state, train = run_round(process, state, clients(cohort))
                seconds = time.perf_counter() - t0
                moved_after, worker_rss = _stats(factory)
                weights = _weights(state)
                row = _row(r, train, cohort)
                if agg.noise_multiplier > 0:
                    row['dp_epsilon'] = dp_epsilon(
                        agg.noise_multiplier, k, len(ids), r + 1, agg.dp_delta
                    )
                row.update(
                    {
                        'eval_loss': None,
                        'eval_accuracy': None,
                        'weights_sha256': weights_digest(weights),
                    }
                )
                t_eval = time.perf_counter()
                if t.evaluates_after(r):
                    row['eval_loss'], row['eval_accuracy'] = model.evaluate(weights)
                    if eval_process is not None:
                        fed = federated_evaluation(
                            eval_process, state.global_model_weights, eval_clients(ids)
                        )
                        row['fed_eval_loss'] = fed['loss']
                        row['fed_eval_accuracy'] = next(
                            (v for k, v in fed.items() if 'acc' in k), None
                        )
                row.update(
                    {
                        'round_seconds': seconds,
                        'eval_seconds': time.perf_counter() - t_eval,
                        'clients_per_second': len(cohort) / seconds if seconds > 0 else None,
                        'bytes_moved': moved_after - moved_before,
                        'driver_rss_bytes': driver.memory_info().rss,
                        'worker_rss_bytes': worker_rss,
                        'active_workers': None if active is None else active(len(cohort)),
                    }
                )
                metrics.append(row)
                atomic.append_jsonl(run_dir / METRICS_FILE, row)
                if writer is not None:
                    writer.write(r, _scalars(row))
                stop = False
                for cb in own + callbacks:
                    stop = bool(cb.on_round_end(r, row, weights)) or stop
                last = stop or r == t.rounds - 1
                if t.checkpoint_every and ((r + 1) % t.checkpoint_every == 0 or last):
                    CK.save_checkpoint(
                        run_dir,
                        state,
                        r + 1,
                        {
                            'callbacks': [cb.state() for cb in own + callbacks],
                            'initial_eval_loss': extra.get('initial_eval_loss'),
                            'initial_eval_accuracy': extra.get('initial_eval_accuracy'),
                        },
                    )
                _console(
                    progress and not show_bar, f'{config.name}/{run_id}: {_round_line(config, row)}'
                )
                if row['eval_accuracy'] is not None:
                    last_eval = f'{row["eval_accuracy"]:.3f}'
                post = {
                    'loss': f'{row["loss"]:.4f}',
                    'eval_acc': last_eval,
                    'clients/s': f'{row["clients_per_second"] or 0:.0f}',
                }
                bar.set_postfix(post, refresh=False)
                bar.update(1)
                if stop:
                    extra['stopped_early'] = r
                    _log.info(
                        '%s/%s: stopped early after round %d (%s)',
                        config.name,
                        run_id,
                        r,
                        t.early_stopping_metric,
                    )
                    break
        CK.save_weights(run_dir / FINAL_WEIGHTS_FILE, _weights(state))
        extra['best_round'], extra['best_value'] = best.best_round, best.best
    finally:
        if bar is not None:
            bar.close()
        if writer is not None:
            writer.close()
    return 'complete'


def _scalars(row: Mapping[str, Any]) -> Dict[str, Any]:
    """The TensorBoard scalars of a metrics row."""
    return {k: v for k, v in row.items() if k not in ('round', 'worker_rss_bytes')}
