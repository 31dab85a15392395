"""Runs an `ExperimentConfig`: data, model, algorithm, aggregator and a stack, round by round.

::

    run_sweep(config) -- for each (run_id, cfg) of expand_sweep(config):
        finished (summary.json status 'complete', same config.toml)? -> skip
        else run_experiment(cfg, run_id=run_id)      (resumes an unfinished run)

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

    the process: `simharness.experiments.processes` builds the config's tff.learning
        LearningProcess (build_weighted_fed_avg / fed_prox / fed_sgd, TFF's optimizers and
        aggregators) and composes it with the data's dataset computation, so `next` takes
        client ids

    one round (timed: the process call only, building the cohort's datasets included):
        cohort (sample_cohort or the reference rule) -> process.next(state, cohort ids) on
        the stack (each executor builds its clients' tf.data datasets from the ids)
        -> central evaluation (every eval_every rounds and after the last)
        -> append metrics, TensorBoard, callbacks (early stopping, best model), checkpoint

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

import dataclasses
import datetime
import hashlib
import importlib.metadata
import json
import logging
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import psutil

from simharness.errors import ConfigError, SimharnessTypeError, SimharnessValueError
from simharness.experiments import atomic
from simharness.experiments import checkpoints as CK
from simharness.experiments.config import (DEFAULT_RUN_ID, ExperimentConfig, KerasModel,
                                           expand_sweep, read_toml)

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

_log = logging.getLogger(__name__)

#: Metric fields that depend on the machine, not on the math (left out when
#: comparing runs for reproducibility).
TIMING_FIELDS = ('round_seconds', 'eval_seconds', 'clients_per_second', 'bytes_moved',
                 'driver_rss_bytes', 'worker_rss_bytes')

# Files a run writes (and removes before running again from scratch).
_RUN_FILES = (CONFIG_FILE, ENVIRONMENT_FILE, METRICS_FILE, SUMMARY_FILE, LOG_FILE,
              FINAL_WEIGHTS_FILE, BEST_WEIGHTS_FILE, 'report.md', 'runs.csv', 'rounds.csv',
              'accuracy.png', 'loss.png', 'round_time.png', 'clients_per_second.png')
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
    """

    run_id: str
    run_dir: Path
    status: str
    summary: Mapping[str, Any]
    skipped: bool = False


# --------------------------------------------------------------- environment

def _cpu_model() -> Optional[str]:
    try:
        with open('/proc/cpuinfo', encoding='utf-8', errors='replace') as f:
            for line in f:
                if line.lower().startswith(('model name', 'hardware', 'cpu model')):
                    return line.split(':', 1)[1].strip() or None
    except OSError:
        pass
    return platform.processor() or None


def _git_info(where: Path) -> Optional[Dict[str, Any]]:
    git = shutil.which('git')
    if git is None:
        return None
    try:
        commit = subprocess.run([git, '-C', str(where), 'rev-parse', 'HEAD'], capture_output=True,
                                text=True, timeout=10, check=False)
        if commit.returncode != 0:
            return None
        status = subprocess.run([git, '-C', str(where), 'status', '--porcelain',
                                 '--untracked-files=no'], capture_output=True, text=True,
                                timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    dirty = bool(status.stdout.strip()) if status.returncode == 0 else None
    return {'commit': commit.stdout.strip(), 'dirty': dirty}


def _version(pkg: str) -> Optional[str]:
    try:
        return importlib.metadata.version(pkg)
    except importlib.metadata.PackageNotFoundError:
        return None


def collect_environment() -> Dict[str, Any]:
    """Facts about the software and machine a run used (for environment.json).

    Returns:
        ``packages`` (simharness, tensorflow, numpy versions or None),
        ``python``, ``platform``, ``cpu_model``, ``cpu_count_logical``,
        ``cpu_count_physical``, ``cpu_count_usable`` (the affinity mask),
        ``gpus`` (ids from `simharness.runtime.resources.detect_gpus`) and
        ``git`` (``{'commit', 'dirty'}`` of the simharness source tree, or
        None when git or the repository is not there).
    """
    from simharness.runtime.resources import detect_gpus  # pylint: disable=import-outside-toplevel
    try:
        usable: Optional[int] = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count()
    source = Path(__file__).resolve().parents[2]
    return {
        'packages': {p: _version(p) for p in ('simharness', 'tensorflow', 'numpy')},
        'python': {'version': platform.python_version(),
                   'implementation': platform.python_implementation(),
                   'executable': sys.executable},
        'platform': {'system': platform.system(), 'release': platform.release(),
                     'machine': platform.machine(), 'platform': platform.platform()},
        'cpu_model': _cpu_model(),
        'cpu_count_logical': os.cpu_count(),
        'cpu_count_physical': psutil.cpu_count(logical=False),
        'cpu_count_usable': usable,
        'gpus': detect_gpus(),
        'git': _git_info(source),
    }


# ------------------------------------------------------------------ workload

@dataclasses.dataclass
class _Workload:
    client_data: Any
    x_key: str
    y_key: str
    eval_x: Any
    eval_y: Any
    eval_on: str
    input_shape: Tuple[int, ...]
    num_classes: int
    label_shape: Tuple[int, ...] = ()
    x_dtype: Any = np.float32


def _stack_clients(cd: Any, key: str) -> Any:
    return np.concatenate([cd.client_arrays(c)[key] for c in cd.client_ids])


#: All clients' examples up to this size are held by the driver for the central evaluation;
#: beyond it they are read from the clients a batch at a time, at each evaluation.
EVAL_IN_MEMORY_BYTES = 256 << 20


def _eval_rows(rows: Any) -> Any:
    """The examples of a central evaluation on all clients: held if small, else read lazily."""
    if math.prod(rows.shape) * rows.dtype.itemsize <= EVAL_IN_MEMORY_BYTES:
        return np.asarray(rows)
    return rows


def _build_workload(config: ExperimentConfig) -> _Workload:
    """Loads the data of `config`; data-layer errors become ConfigErrors."""
    from simharness import data as D  # pylint: disable=import-outside-toplevel
    from simharness.learning import reference_fedavg_workload  # pylint: disable=import-outside-toplevel
    # The variant class of data.dataset (config.FilesData, ...): exactly its options.
    d: Any = config.data
    x_key, y_key = 'x', 'y'
    test = None
    cd: Any
    try:
        if d.dataset == 'synthetic':
            cd = D.synthetic_alpha_beta(alpha=d.alpha, beta=d.beta, num_clients=d.num_clients,
                                        samples_per_client=d.samples_per_client, dim=d.dim,
                                        num_classes=d.num_classes, seed=d.seed, iid=d.iid)
        elif d.dataset == 'reference':
            cd, _ = reference_fedavg_workload()
        elif d.dataset in ('emnist', 'cifar100', 'shakespeare', 'stackoverflow'):
            cd, test = _load_benchmark(d)
        elif d.dataset == 'hf':
            from simharness.data.benchmarks import load_hf_dataset
            x_key, y_key = 'x', 'y'
            cd = load_hf_dataset(d.path, d.x_key, d.y_key, split=d.hf_split,
                                 partition=d.partition, client_id_column=d.client_id_key,
                                 num_clients=d.num_clients, alpha=d.dirichlet_alpha,
                                 seed=d.seed, min_size=d.min_size, cache_dir=d.cache_dir)
        elif d.dataset == 'digits':
            cd, test = D.load_digits_federated(
                num_clients=d.num_clients, partition=d.partition, alpha=d.dirichlet_alpha,
                test_fraction=d.test_fraction, seed=d.seed, min_size=d.min_size,
                as_images=config.model.name == 'cnn')
            if len(test[1]) == 0:
                test = None
        else:
            x_key, y_key = d.x_key, d.y_key
            path = Path(d.path)
            if path.is_dir():
                cd = D.FileClientData.from_npz_dir(path, x_key=x_key, y_key=y_key)
            else:
                cd = D.FileClientData.from_single_file(path, client_id_key=d.client_id_key,
                                                       x_key=x_key, y_key=y_key)
    except (SimharnessValueError, SimharnessTypeError) as e:
        raise ConfigError(f'[data] {d.dataset}: {e}', key='data', value=d.dataset) from e
    spec = cd.array_spec
    sequence = d.dataset in ('shakespeare', 'stackoverflow')
    if not np.issubdtype(spec[y_key][0], np.integer) or (spec[y_key][1] != () and not sequence):
        raise ConfigError(f'[data]: labels {y_key!r} must be integer class ids of shape [n], got '
                          f'{spec[y_key][0]} {list(spec[y_key][1])}', key='data.y_key',
                          value=y_key)
    if test is not None:
        eval_x, eval_y, eval_on = test[0], test[1], 'test set'
    else:
        eval_x, eval_y, eval_on = _eval_rows(D.StackedRows(cd, x_key)), \
            _stack_clients(cd, y_key), 'all clients'
    num_classes = _BENCHMARK_CLASSES.get(d.dataset, getattr(d, 'num_classes', None))
    if d.dataset == 'emnist' and d.only_digits:
        num_classes = 10
    if d.dataset == 'stackoverflow':
        num_classes = d.vocab_size + 4
    if num_classes is None:
        num_classes = max(2, int(np.max(eval_y if test is None
                                        else _stack_clients(cd, y_key))) + 1)
    x_dtype = np.int32 if np.issubdtype(spec[x_key][0], np.integer) else np.float32
    return _Workload(cd, x_key, y_key, eval_x, eval_y, eval_on, tuple(spec[x_key][1]),
                     int(num_classes), tuple(spec[y_key][1]), x_dtype)


#: Classes of the benchmark data sets (shakespeare: 86 characters + pad, oov, bos, eos).
_BENCHMARK_CLASSES = {'emnist': 62, 'cifar100': 100, 'shakespeare': 90}


def _load_benchmark(d: Any) -> Tuple[Any, Any]:
    """(train clients, (test x, test y)) of a TFF benchmark from d.cache_dir."""
    from simharness.data import benchmarks as B  # pylint: disable=import-outside-toplevel
    from simharness.data.client_data import ArrayClientData  # pylint: disable=import-outside-toplevel
    loaders = {
        'emnist': lambda split: B.load_emnist(d.cache_dir, d.only_digits, split),
        'cifar100': lambda split: B.load_cifar100(d.cache_dir, split),
        'shakespeare': lambda split: B.load_shakespeare(d.cache_dir, split, d.sequence_length),
        'stackoverflow': lambda split: B.load_stackoverflow(
            d.cache_dir, split, d.vocab_size, d.sequence_length, d.max_clients),
    }
    train = loaders[d.dataset]('train')
    ids = train.client_ids[:d.max_clients] if d.max_clients else train.client_ids
    if len(ids) < len(train.client_ids):
        train = ArrayClientData({c: train.client_arrays(c) for c in ids})
    if d.dataset == 'stackoverflow':  # its vocabulary comes from the train clients
        return train, None
    test = loaders[d.dataset]('test')
    keep = [c for c in test.client_ids if c in set(ids)] or test.client_ids
    return train, (np.concatenate([test.client_arrays(c)['x'] for c in keep]),
                   np.concatenate([test.client_arrays(c)['y'] for c in keep]))


def _cohort(config: ExperimentConfig, ids: Sequence[str], round_num: int) -> List[str]:
    from simharness.data import sample_clients  # pylint: disable=import-outside-toplevel
    k, n = config.training.clients_per_round, len(ids)
    if k > n:
        raise ConfigError(f'training.clients_per_round = {k} is more than the {n} clients of '
                          'the data', key='training.clients_per_round', value=k)
    if config.training.cohort == 'reference':
        return [ids[(round_num * k + i) % n] for i in range(k)]
    return sample_clients(ids, k, round_num, config.training.seed)


def _make_factory(config: ExperimentConfig) -> Any:
    from simharness import stacks  # pylint: disable=import-outside-toplevel
    s: Any = config.stack  # ThreadStack, ProcessStack or RayStack: exactly its options
    if s.kind == 'thread':
        return stacks.local_executor_factory(clients_per_thread=s.clients_per_thread)
    if s.kind == 'ray':
        return stacks.ray_executor_factory(
            address=s.address, num_workers=s.num_workers, num_cpus_per_worker=s.num_cpus_per_worker,
            num_gpus_per_worker=s.num_gpus_per_worker, clients_per_worker=s.clients_per_worker,
            placement_strategy=s.placement_strategy, cpu_affinity=s.cpu_affinity)
    from simharness.experiments.config import check_stack_devices
    check_stack_devices(s)  # a GPU that is not here: a config error naming stack.devices
    devices = list(s.devices) if isinstance(s.devices, tuple) else s.devices
    return stacks.process_executor_factory(
        num_workers=s.num_workers, clients_per_worker=s.clients_per_worker,
        cpu_affinity=s.cpu_affinity, devices=devices, workers_per_gpu=s.workers_per_gpu,
        start=False)


def _record_cluster(run_dir: Path, cluster: Mapping[str, Any]) -> None:
    """Adds the Ray cluster (nodes, resources, where each actor runs) to environment.json."""
    path = run_dir / ENVIRONMENT_FILE
    try:
        env = json.loads(path.read_text(encoding='utf-8'))
    except (OSError, ValueError):
        env = {}
    env['ray'] = dict(cluster)
    atomic.write_json(path, env)


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


def _summary(config: ExperimentConfig, run_id: str, status: str, metrics: List[Dict[str, Any]],
             extra: Mapping[str, Any]) -> Dict[str, Any]:
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
        'clients_per_second': (config.training.clients_per_round / median
                               if median else None),
        'setup_seconds': extra.get('setup_seconds'),
        'stack_start_seconds': extra.get('stack_start_seconds'),
        'total_seconds': extra.get('total_seconds'),
        'bytes_moved': sum(m['bytes_moved'] for m in metrics),
        'peak_driver_rss_bytes': max((m['driver_rss_bytes'] for m in metrics), default=None),
        'peak_worker_rss_bytes': max(worker_rss, default=None),
        'started_at': extra.get('started_at'),
        'finished_at': extra.get('finished_at'),
        'error': extra.get('error'),
        'algorithm': config.algorithm.name,
        'dp_epsilon': last.get('dp_epsilon'),
        'resumed_from_round': extra.get('resumed_from_round'),
        'stopped_early_after_round': extra.get('stopped_early'),
        'best_round': extra.get('best_round'),
        'best_value': extra.get('best_value'),
    }


def _resumable(run_dir: Path, config: ExperimentConfig) -> bool:
    """An unfinished run of the same config with a checkpoint."""
    summary = read_json(run_dir / SUMMARY_FILE)
    if not isinstance(summary, dict) or summary.get('status') not in (
            'interrupted', 'failed', 'running'):
        return False
    try:
        if read_toml(run_dir / CONFIG_FILE) != config.to_dict():
            return False
    except ConfigError:
        return False
    return bool(CK.list_checkpoints(run_dir))


def run_experiment(config: ExperimentConfig, results_root: PathLike = 'results',
                   progress: bool = True, run_id: str = DEFAULT_RUN_ID, *,
                   resume: bool = True, callbacks: Sequence[CK.Callback] = ()) -> RunResult:
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
    thread stack).

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
        KeyboardInterrupt: after closing the stack and writing summary.json
            with status 'interrupted'.
        OSError: a results file could not be written (``filename`` names
            it); summary.json says 'failed' if it could still be written,
            else it is removed and the error has a note (``__notes__``).
        Exception: any other failure, after writing summary.json with
            status 'failed' and the error text.
    """
    if config.sweep.grid:
        raise ConfigError(f'experiment {config.name!r} has a [sweep] grid; run it with '
                          'run_sweep (simharness sweep)', key='sweep.grid')
    if not isinstance(run_id, str) or not run_id or run_id in ('.', '..') or '/' in run_id \
            or os.sep in run_id:
        raise ConfigError(f'run_id must be a plain directory name, got {run_id!r}',
                          key='run_id', value=run_id)
    run_dir = Path(results_root) / config.name / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
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
        status = _run_rounds(config, run_dir, run_id, metrics, extra, progress, t_start,
                             resuming, list(callbacks))
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM / SIGHUP through the CLI
        status, error = 'interrupted', e
        # INFO: the run's log file records it; the CLI says "interrupted" itself.
        _log.info('%s/%s: interrupted after %d rounds', config.name, run_id, len(metrics))
    except BaseException as e:  # pylint: disable=broad-exception-caught  # raised again below
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


@dataclasses.dataclass
class _Model:
    """The model of a run: the `FunctionalModel` and its central evaluator (of a weights list,
    trainable then non-trainable)."""

    functional: Any
    evaluate: Callable[[Sequence[Any]], Tuple[float, float]]


def _build_model(config: ExperimentConfig, work: _Workload) -> _Model:
    # pylint: disable=import-outside-toplevel
    from simharness.experiments import processes as P
    from simharness.learning.models import get_model, numpy_evaluate
    if isinstance(config.model, KerasModel):
        from simharness.core.determinism import pin_tensorflow_threads
        pin_tensorflow_threads()  # before Keras runs its first op: same bits as the workers
        builder = str(config.model.keras)  # required: the config checked it
        fn = P.keras_builder(builder)
        try:
            fm = P.model_from_keras_builder(fn, work.input_shape, work.num_classes,
                                            config.init_seed, y_shape=work.label_shape,
                                            x_dtype=work.x_dtype,
                                            ignore_label=0 if work.label_shape else None)
        except (SimharnessValueError, SimharnessTypeError) as e:
            raise ConfigError(f'[model] keras {builder}: {e}', key='model.keras',
                              value=builder) from e
        nt = len(fm.initial_weights[0])

        def evaluate(weights: Sequence[Any]) -> Tuple[float, float]:
            out = P.central_evaluation(fm, (weights[:nt], weights[nt:]), work.eval_x,
                                       work.eval_y)
            return out['loss'], out.get('accuracy', float('nan'))
        return _Model(fm, evaluate)
    try:
        spec = get_model(config.model.name, work.input_shape, work.num_classes,
                         **config.model.options())
    except (SimharnessValueError, SimharnessTypeError) as e:  # ConfigError included
        raise ConfigError(f'[model] {config.model.name}: {e}', key='model',
                          value=config.model.name) from e
    return _Model(P.model_from_spec(spec, config.init_seed),
                  lambda w: numpy_evaluate(spec, w, work.eval_x, work.eval_y))


def _build_process(config: ExperimentConfig, model: Any, work: _Workload,
                   evaluation: bool = False) -> Any:
    """The config's tff.learning process (or, with `evaluation`, its ``build_fed_eval``
    process) composed with the data: ``next(state, client_ids)``."""
    # pylint: disable=import-outside-toplevel
    from simharness.experiments import processes as P
    from simharness.learning import algorithms
    a = config.algorithm
    if evaluation:
        process, epochs = algorithms.build_fed_eval(model), 1
    else:
        try:
            process = P.build_learning_process(config, model)
        except (SimharnessValueError, SimharnessTypeError, ValueError) as e:
            # e.g. a DP noise_multiplier >= 2 * clipped_count_stddev (TFF's limit)
            raise ConfigError(f'[algorithm] / [aggregator]: {e}', key='aggregator',
                              value=config.aggregator.noise_multiplier) from e
        epochs = 1 if a.name == 'fedsgd' else a.local_epochs  # one gradient per client
    return P.compose_with_client_data(process, work.client_data, a.batch_size, epochs,
                                      work.x_key, work.y_key, work.x_dtype)


def run_round(process: Any, state: Any, client_ids: Sequence[str]) -> Tuple[Any, Any]:
    """One training round: ``process.next(state, client_ids)`` (tests wrap this seam)."""
    return tuple(process.next(state, list(client_ids)))  # type: ignore[return-value]


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


def _round_line(config: ExperimentConfig, row: Mapping[str, Any]) -> str:
    parts = [f'round {row["round"] + 1}/{config.training.rounds}',
             f'loss {row["loss"]:.4f}', f'accuracy {row["accuracy"]:.4f}']
    if row.get('eval_loss') is not None:
        parts += [f'eval_loss {row["eval_loss"]:.4f}', f'eval_accuracy {row["eval_accuracy"]:.4f}']
    if row.get('dp_epsilon') is not None:
        parts.append(f'epsilon {row["dp_epsilon"]:.3f}')
    parts.append(f'{row["round_seconds"]:.3f} s')
    return ', '.join(parts)


def _run_rounds(config: ExperimentConfig, run_dir: Path, run_id: str,
                metrics: List[Dict[str, Any]], extra: Dict[str, Any], progress: bool,
                t_start: float, resuming: bool = False,
                callbacks: Optional[List[CK.Callback]] = None) -> str:
    """Builds everything, runs the rounds (appending to `metrics`); returns 'complete'."""
    # pylint: disable=import-outside-toplevel
    from tqdm.auto import tqdm

    import simharness
    from simharness.data.sampling import sample_cohort
    from simharness.aggregators.accounting import dp_epsilon
    from simharness.experiments.processes import federated_evaluation

    work = _build_workload(config)
    cd = work.client_data
    ids = cd.client_ids
    t = config.training
    model = _build_model(config, work)
    _cohort(config, ids, 0)  # checks clients_per_round against the data before any start-up
    sizes = [cd.client_size(c) for c in ids]
    process = _build_process(config, model.functional, work)
    eval_process = _build_process(config, model.functional, work, evaluation=True) \
        if t.federated_eval else None
    state = process.initialize()
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
        _log.info('%s/%s: no readable checkpoint; running from round 0', config.name, run_id)
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
        _log.info('%s/%s: resumed from the checkpoint after round %d', config.name, run_id,
                  start_round)
    else:
        loss0, acc0 = model.evaluate(_weights(state))
        extra['initial_eval_loss'], extra['initial_eval_accuracy'] = loss0, acc0
    driver = psutil.Process()
    t_setup = time.perf_counter()
    extra['setup_seconds'] = t_setup - t_start

    try:
        factory = _make_factory(config)
    except (SimharnessValueError, SimharnessTypeError) as e:  # e.g. devices naming no GPU
        raise ConfigError(f'[stack] {config.stack.kind}: {e}', key='stack',
                          value=config.stack.kind) from e
    bar = None
    writer = None
    try:
        pool = getattr(factory, 'pool', None)
        ray_workers = getattr(factory, 'workers', None)  # stack.kind = 'ray': the actors
        if pool is not None:
            extra['stack_start_seconds'] = pool.start()
            extra['num_workers'] = pool.num_workers
        elif ray_workers is not None:
            t_ray = time.perf_counter()
            ray_workers.start()
            extra['stack_start_seconds'] = time.perf_counter() - t_ray
            extra['num_workers'] = ray_workers.num_workers
            _record_cluster(run_dir, factory.cluster())
        else:
            extra['stack_start_seconds'] = 0.0
        show_bar = _progress_enabled(progress)
        bar = tqdm(total=t.rounds, initial=start_round, desc=f'{config.name}/{run_id}',
                   unit='round', disable=not show_bar, dynamic_ncols=True, leave=True)
        if t.tensorboard:
            writer = CK.ScalarWriter(run_dir / TENSORBOARD_DIR)
            for old_row in metrics:  # a resumed run's rounds before its checkpoint
                writer.write(old_row['round'], _scalars(old_row))
        k = t.clients_per_round
        last_eval = '-'
        with simharness.execution_context(factory):
            for r in range(start_round, t.rounds):
                if t.cohort == 'reference':
                    cohort = _cohort(config, ids, r)
                else:
                    cohort = sample_cohort(ids, k, r, t.seed, mode=t.cohort, sizes=sizes,
                                           availability=t.availability)
                # By id: each executor builds its clients' datasets (on the process and Ray
                # stacks a file-backed source is read by the workers).
                moved_before, _ = _stats(factory)
                t0 = time.perf_counter()
                state, train = run_round(process, state, cohort)
                seconds = time.perf_counter() - t0
                moved_after, worker_rss = _stats(factory)
                weights = _weights(state)
                row = _row(r, train, cohort)
                if agg.noise_multiplier > 0:
                    row['dp_epsilon'] = dp_epsilon(agg.noise_multiplier, k, len(ids), r + 1,
                                                   agg.dp_delta)
                row.update({'eval_loss': None, 'eval_accuracy': None,
                            'weights_sha256': weights_digest(weights)})
                t_eval = time.perf_counter()
                if t.evaluates_after(r):
                    row['eval_loss'], row['eval_accuracy'] = model.evaluate(weights)
                    if eval_process is not None:
                        fed = federated_evaluation(eval_process, state.global_model_weights,
                                                   list(ids))
                        row['fed_eval_loss'] = fed['loss']
                        row['fed_eval_accuracy'] = next(
                            (v for k, v in fed.items() if 'acc' in k), None)
                row.update({
                    'round_seconds': seconds,
                    'eval_seconds': time.perf_counter() - t_eval,
                    'clients_per_second': len(cohort) / seconds if seconds > 0 else None,
                    'bytes_moved': moved_after - moved_before,
                    'driver_rss_bytes': driver.memory_info().rss,
                    'worker_rss_bytes': worker_rss,
                })
                metrics.append(row)
                atomic.append_jsonl(run_dir / METRICS_FILE, row)
                if writer is not None:
                    writer.write(r, _scalars(row))
                stop = False
                for cb in own + callbacks:
                    stop = bool(cb.on_round_end(r, row, weights)) or stop
                last = stop or r == t.rounds - 1
                if t.checkpoint_every and ((r + 1) % t.checkpoint_every == 0 or last):
                    CK.save_checkpoint(run_dir, state, r + 1, {
                        'callbacks': [cb.state() for cb in own + callbacks],
                        'initial_eval_loss': extra.get('initial_eval_loss'),
                        'initial_eval_accuracy': extra.get('initial_eval_accuracy')})
                line = _round_line(config, row)
                _log.info('%s/%s: %s', config.name, run_id, line)
                if progress and not show_bar:
                    print(f'{config.name}/{run_id}: {line}', file=sys.stderr, flush=True)
                if row['eval_accuracy'] is not None:
                    last_eval = f'{row["eval_accuracy"]:.3f}'
                post = {'loss': f'{row["loss"]:.4f}', 'eval_acc': last_eval,
                        'clients/s': f'{row["clients_per_second"] or 0:.0f}'}
                bar.set_postfix(post, refresh=False)
                bar.update(1)
                if stop:
                    extra['stopped_early'] = r
                    _log.info('%s/%s: stopped early after round %d (%s)', config.name, run_id,
                              r, t.early_stopping_metric)
                    break
        CK.save_weights(run_dir / FINAL_WEIGHTS_FILE, _weights(state))
        extra['best_round'], extra['best_value'] = best.best_round, best.best
    finally:
        try:
            if bar is not None:
                bar.close()
            if writer is not None:
                writer.close()
        finally:
            _close_factory(factory)
    return 'complete'


def _scalars(row: Mapping[str, Any]) -> Dict[str, Any]:
    """The TensorBoard scalars of a metrics row."""
    return {k: v for k, v in row.items() if k not in ('round', 'worker_rss_bytes')}


def _read_rows(path: Path) -> List[Dict[str, Any]]:
    """The parseable rows of a metrics.jsonl (a torn last line is dropped)."""
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


# --------------------------------------------------------------------- sweep

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


def run_sweep(config: ExperimentConfig, results_root: PathLike = 'results',
              progress: bool = True, log: Optional[Callable[[str], None]] = None,
              resume: bool = True) -> List[RunResult]:
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

    Returns:
        One `RunResult` per run, in sweep order.

    Raises:
        ConfigError: an invalid sweep point (before anything runs).
        KeyboardInterrupt: from the interrupted run (its summary says so).
    """
    runs = expand_sweep(config)
    results = []
    for i, (run_id, cfg) in enumerate(runs, 1):
        run_dir = Path(results_root) / cfg.name / run_id
        if is_finished(run_dir, cfg):
            if log:
                log(f'[{i}/{len(runs)}] skip {run_id} (complete)')
            summary = read_json(run_dir / SUMMARY_FILE) or {}
            results.append(RunResult(run_id, run_dir, 'complete', summary, skipped=True))
            continue
        if log:
            log(f'[{i}/{len(runs)}] run {run_id}')
        if resume:
            results.append(run_experiment(cfg, results_root, progress=progress, run_id=run_id))
        else:
            results.append(run_experiment(cfg, results_root, progress=progress, run_id=run_id,
                                          resume=False))
    return results
