"""Where each worker process runs: CPU sets, GPUs and thread counts.

::

    driver                                     worker k (before its first TF op)
    ------                                     ---------------------------------
    usable_cpus(), detect_gpus()
    plan_workers(...) -> [WorkerPlacement] --> apply_placement(placement)
      (pure: same input, same plan)              sched_setaffinity(cpus), SCHED_BATCH
                                                 os.environ.update(env)
                                                 configure_tensorflow(placement)

Everything but `apply_placement` and `configure_tensorflow` is pure, so the
GPU path is checked by unit tests on machines without a GPU.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import numbers
import os
import re
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

from simharness.core.determinism import INTRA_OP_THREADS
from simharness.errors import (
    DeviceNotFoundError,
    SimharnessTypeError,
    SimharnessValueError,
    WorkerStartError,
)
from simharness.runtime import resources
from simharness.validation import check_int as _check_int


def usable_cpus() -> List[int]:
    """The CPU ids this process may run on, sorted.

    Returns:
        ``sorted(os.sched_getaffinity(0))`` where available (it honours
        taskset, cgroups cpusets and the like), else ``range(os.cpu_count())``.
    """
    if hasattr(os, 'sched_getaffinity'):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def _check_ids(what: str, ids: Any) -> Tuple[int, ...]:
    if isinstance(ids, (str, bytes)) or not isinstance(ids, Sequence):
        raise SimharnessTypeError(
            f'{what} must be a sequence of ints, got {ids!r}',
            expected='Sequence[int]',
            actual=type(ids),
        )
    out = tuple(_check_int(f'{what}[{i}]', v, 0) for i, v in enumerate(ids))
    seen = set()
    for v in out:
        if v in seen:
            raise SimharnessValueError(
                f'{what} must not repeat an id, got {v} twice in {list(out)}'
            )
        seen.add(v)
    return out


@dataclasses.dataclass(frozen=True)
class WorkerPlacement:
    """Where one worker runs and how many threads TensorFlow may use there.

    Attributes:
        worker_id: index of the worker in its pool (>= 0).
        cpus: the CPU ids the worker is pinned to (non-empty).
        gpu: the physical GPU id the worker sees (as its only GPU), or None.
        intra_op_threads: TF threads inside one op (>= 1); `plan_workers`
            gives `simharness.core.determinism.INTRA_OP_THREADS` (1), which
            results bit-identical across layouts depend on.
        inter_op_threads: TF ops run concurrently (>= 1).
        env: environment variables the worker sets before importing or
            initialising CUDA.
    """

    worker_id: int
    cpus: Tuple[int, ...]
    gpu: Optional[int]
    intra_op_threads: int
    inter_op_threads: int
    env: Dict[str, str] = dataclasses.field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, 'worker_id', _check_int('worker_id', self.worker_id, 0))
        cpus = _check_ids('cpus', self.cpus)
        if not cpus:
            raise SimharnessValueError('cpus must not be empty')
        set_(self, 'cpus', cpus)
        if self.gpu is not None:
            set_(self, 'gpu', _check_int('gpu', self.gpu, 0))
        set_(self, 'intra_op_threads', _check_int('intra_op_threads', self.intra_op_threads, 1))
        set_(self, 'inter_op_threads', _check_int('inter_op_threads', self.inter_op_threads, 1))
        env = dict(self.env)  # a private copy: the caller's dict may change
        for k, v in env.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise SimharnessTypeError(
                    f'env must map str to str, got {k!r}: {v!r}',
                    expected='Dict[str, str]',
                    actual=(type(k), type(v)),
                )
        set_(self, 'env', env)


def plan_workers(
    num_workers: Optional[int],
    cpus: Sequence[int],
    gpus: Optional[Sequence[int]] = None,
    workers_per_gpu: int = 1,
    cpu_affinity: bool = True,
) -> List[WorkerPlacement]:
    """Plans where each worker process runs.

    With `cpu_affinity`, the CPUs are cut, in the order given, into
    `num_workers` contiguous, disjoint sets whose sizes differ by at most one
    (the first ones get the extra CPU). With more workers than CPUs, worker
    i gets the single CPU ``cpus[i % len(cpus)]``. Without `cpu_affinity`,
    every worker may run on all `cpus`.

    Each worker runs one client computation at a time and the clients are
    spread over the workers, so the parallelism across clients comes from
    the workers themselves. `intra_op_threads` is
    `simharness.core.determinism.INTRA_OP_THREADS` (1) whatever the size of
    the CPU set: some CPU kernels (conv filter gradients, fused batch norm,
    large reductions) give other bits with another thread count, and results
    must not depend on the layout. `inter_op_threads` is 1, since a second
    pool of threads running independent ops would only compete for the same
    pinned cores. (Give a worker several cores only for its data loading or
    a GPU; for CPU speed, use one worker per core, the default.)

    With GPUs, worker k uses ``gpus[k // workers_per_gpu]`` and sees it alone
    (``CUDA_VISIBLE_DEVICES``, so inside the worker it is GPU 0), with memory
    growth on so that several workers can share one GPU. Without GPUs,
    ``CUDA_VISIBLE_DEVICES`` is '' so that a worker never initialises CUDA.

    Args:
        num_workers: number of workers; None means ``len(cpus)`` without
            GPUs and ``len(gpus) * workers_per_gpu`` with GPUs.
        cpus: the CPU ids to use (usually `usable_cpus()`), no repeats.
        gpus: physical GPU ids (usually `detect_gpus()`); None or empty means
            CPU only.
        workers_per_gpu: how many workers share one GPU.
        cpu_affinity: whether to pin each worker to its own CPU set.

    Returns:
        One `WorkerPlacement` per worker, in worker order.

    Raises:
        SimharnessValueError: if `num_workers` or `workers_per_gpu` < 1,
            `cpus` is empty, an id is negative or repeated, or there are more
            workers than ``len(gpus) * workers_per_gpu``.
        SimharnessTypeError: if an argument has the wrong type.
    """
    cpu_ids = _check_ids('cpus', cpus)
    if not cpu_ids:
        raise SimharnessValueError('cpus must name at least one CPU id, got an empty sequence')
    gpu_ids = () if gpus is None else _check_ids('gpus', gpus)
    workers_per_gpu = _check_int('workers_per_gpu', workers_per_gpu, 1)
    if not isinstance(cpu_affinity, bool):
        raise SimharnessTypeError(
            f'cpu_affinity must be a bool, got {cpu_affinity!r}',
            expected=bool,
            actual=type(cpu_affinity),
        )
    if num_workers is None:
        num_workers = len(gpu_ids) * workers_per_gpu if gpu_ids else len(cpu_ids)
    num_workers = _check_int('num_workers', num_workers, 1)
    if gpu_ids and num_workers > len(gpu_ids) * workers_per_gpu:
        raise SimharnessValueError(
            f'num_workers={num_workers} needs more GPU slots than gpus={list(gpu_ids)} '
            f'x workers_per_gpu={workers_per_gpu} = {len(gpu_ids) * workers_per_gpu}; '
            f'expected num_workers <= {len(gpu_ids) * workers_per_gpu}'
        )

    if not cpu_affinity:
        cpu_sets = [cpu_ids] * num_workers
    else:
        cpu_sets = _split_cpus(cpu_ids, num_workers)

    placements = []
    for k in range(num_workers):
        if gpu_ids:
            gpu: Optional[int] = gpu_ids[k // workers_per_gpu]
            env = {'CUDA_VISIBLE_DEVICES': str(gpu), 'TF_FORCE_GPU_ALLOW_GROWTH': 'true'}
        else:
            gpu = None
            env = {'CUDA_VISIBLE_DEVICES': ''}
        placements.append(
            WorkerPlacement(
                worker_id=k,
                cpus=cpu_sets[k],
                gpu=gpu,
                intra_op_threads=INTRA_OP_THREADS,
                inter_op_threads=1,
                env=env,
            )
        )
    return placements


def _split_cpus(cpus: Tuple[int, ...], num_workers: int) -> List[Tuple[int, ...]]:
    n = len(cpus)
    if num_workers >= n:
        return [(cpus[i % n],) for i in range(num_workers)]
    base, extra = divmod(n, num_workers)
    sets, start = [], 0
    for k in range(num_workers):
        size = base + (1 if k < extra else 0)
        sets.append(cpus[start : start + size])
        start += size
    return sets


_DEVICE_RE = re.compile(
    r'(?:/job:[^/]+/replica:\d+/task:\d+)?/?(?:device:)?(gpu|cuda|cpu)(?::(\d+))?', re.IGNORECASE
)


def parse_devices(devices: Any) -> Optional[List[int]]:
    """Normalises a user's device choice to a list of GPU ids.

    Accepts None (no choice: the caller decides, e.g. with `detect_gpus`),
    an int, a string -- ``'cuda:0'``, ``'gpu:1'``, ``'/gpu:1'``, ``'GPU:0'``,
    ``'/device:GPU:0'``, ``'0'``, comma-separated lists of these such as
    ``'cuda:0,cuda:1'``, or ``'cpu'`` (no GPU) -- or a list or tuple of ints
    and such strings.

    Args:
        devices: the choice.

    Returns:
        None for None, else the GPU ids in the order given ([] for CPU only).

    Raises:
        SimharnessTypeError: for another type (float, dict, nested list...).
        SimharnessValueError: for a malformed string, a negative id, a GPU
            without an index or an id given twice.
    """
    if devices is None:
        return None
    if isinstance(devices, (list, tuple)):
        items = list(devices)
    else:
        items = [devices]
    ids: List[int] = []
    for item in items:
        if isinstance(item, str):
            for part in item.split(',') if item.strip() else [item]:
                ids.extend(_parse_device_string(part, devices))
        elif isinstance(item, numbers.Integral) and not isinstance(item, bool):
            if item < 0:
                raise SimharnessValueError(
                    f'device ids must be >= 0, got {item} in devices={devices!r}'
                )
            ids.append(int(item))
        else:
            raise SimharnessTypeError(
                f'devices must be None, an int, a device string like "cuda:0" or a '
                f'list of these, got {item!r} of type {type(item).__name__}'
                + ('' if item is devices else f' in devices={devices!r}'),
                expected='None | int | str | list',
                actual=type(item),
            )
    seen = set()
    for i in ids:
        if i in seen:
            raise SimharnessValueError(f'GPU {i} is listed twice in devices={devices!r}')
        seen.add(i)
    return ids


def _parse_device_string(text: str, devices: Any) -> List[int]:
    s = text.strip()
    if s.isdigit():
        return [int(s)]
    m = _DEVICE_RE.fullmatch(s)
    if m is None:
        raise SimharnessValueError(
            f'cannot parse device {text!r} in devices={devices!r}; expected e.g. '
            f'"cuda:0", "gpu:1", "/gpu:1", "GPU:0", "cpu" or an int'
        )
    kind, index = m.group(1).lower(), m.group(2)
    if kind == 'cpu':
        return []
    if index is None:
        raise SimharnessValueError(f'device {text!r} needs an index, e.g. "{kind}:0"')
    return [int(index)]


def check_gpus_exist(
    devices: Any,
    gpus: Sequence[int],
    inventory: Optional[resources.GpuInventory] = None,
    *,
    name: str = 'devices',
) -> None:
    """Raises unless every GPU id in `gpus` is on this machine.

    Args:
        devices: the user's choice, as given (for the message).
        gpus: the physical GPU ids asked for (``parse_devices(devices)``).
        inventory: the GPUs found; None: `resources.discover_gpus()` (which
            does not import TensorFlow).
        name: the argument or config key to name in the message.

    Raises:
        DeviceNotFoundError: naming the missing GPUs, the GPUs found and
            what was checked.
    """
    if not gpus:
        return
    if inventory is None:
        inventory = resources.discover_gpus()
    missing = [g for g in gpus if g not in inventory.ids]
    if missing:
        what = ', '.join(str(g) for g in missing)
        found = ', '.join(str(g) for g in inventory.ids) or 'none'
        raise DeviceNotFoundError(
            f'{name}={devices!r}: this machine has no GPU {what} (found: {found}; checked '
            f'{inventory.checked}); GPU ids are physical ids, as nvidia-smi -L lists them; '
            f'use "cpu" (or no devices) for CPU only',
            requested=devices,
            missing=missing,
            found=inventory.ids,
            checked=inventory.checked,
        )


def check_tf_device(
    name: str, device: Any, inventory: Optional[resources.GpuInventory] = None
) -> Optional[str]:
    """Checks a TensorFlow device name for an executor in this process.

    A GPU index counts the GPUs this process sees (TF's numbering: with
    ``CUDA_VISIBLE_DEVICES='2,3'``, '/GPU:1' is physical GPU 3). Names that
    `parse_devices` does not understand are left to TensorFlow.

    Args:
        name: the argument's name, for the message.
        device: None or a device name such as '/CPU:0' or '/GPU:1'.
        inventory: the GPUs found; None: `resources.discover_gpus()`.

    Returns:
        `device`.

    Raises:
        SimharnessTypeError: `device` is neither None nor a string.
        DeviceNotFoundError: it names a GPU this process does not have.
    """
    if device is None:
        return None
    if not isinstance(device, str):
        raise SimharnessTypeError(
            f'{name} must be None or a TensorFlow device name like "/GPU:0", got {device!r} '
            f'of type {type(device).__name__}',
            expected='Optional[str]',
            actual=type(device),
        )
    try:
        gpus = parse_devices(device)
    except SimharnessValueError:
        return device  # a form we do not parse; TensorFlow judges it
    if gpus:
        if inventory is None:
            inventory = resources.discover_gpus()
        count = len(inventory.ids)
        if any(g >= count for g in gpus):
            raise DeviceNotFoundError(
                f'{name}={device!r}: this process has no GPU {gpus[0]} (it sees {count} '
                f'GPU{"" if count == 1 else "s"}; checked {inventory.checked})',
                requested=device,
                missing=[g for g in gpus if g >= count],
                found=range(count),
                checked=inventory.checked,
            )
    return device


def batch_scheduling() -> bool:
    """Schedules the calling thread, and the threads it starts later, as a batch job.

    Linux's ``SCHED_BATCH``: the same share of the CPU, but a woken worker does not
    preempt the thread running on its core. A worker's requests come from the
    driver, which wakes one worker after another and then waits for their
    answers; a worker that took the driver's core at once (every worker has a
    core of its own, the driver none) held back the requests to the workers after
    it. Elsewhere (or if the OS refuses) nothing changes.

    Returns:
        True when the calling thread now runs as a batch job.
    """
    policy = getattr(os, 'SCHED_BATCH', None)
    if policy is None or not hasattr(os, 'sched_setscheduler'):
        return False
    try:
        os.sched_setscheduler(0, policy, os.sched_param(0))
    except OSError:
        return False
    return True


def apply_placement(placement: WorkerPlacement, *, configure_tf: bool = True) -> None:
    """Pins the calling process; a worker calls it before its first TF op.

    Sets the CPU affinity (where the OS supports it), batch scheduling
    (`batch_scheduling`), the environment variables of the placement, then -- if `configure_tf` and TensorFlow is
    imported or importable -- the TF thread counts (`configure_tensorflow`).
    Call it from the main thread before any other thread starts: on Linux
    the affinity applies to the calling thread and the threads it starts
    later, not to threads already running.

    Args:
        placement: the worker's placement.
        configure_tf: whether to configure TensorFlow as well.

    Raises:
        SimharnessValueError: if the OS refuses the CPU set.
        WorkerStartError: if TensorFlow was already initialised.
    """
    if hasattr(os, 'sched_setaffinity'):
        try:
            os.sched_setaffinity(0, placement.cpus)
        except OSError as e:
            raise SimharnessValueError(
                f'worker {placement.worker_id}: cannot pin to cpus '
                f'{list(placement.cpus)}: {e}; usable cpus are {usable_cpus()}'
            ) from e
    batch_scheduling()
    os.environ.update(placement.env)
    if configure_tf and (
        'tensorflow' in sys.modules or importlib.util.find_spec('tensorflow') is not None
    ):
        configure_tensorflow(placement)


def configure_tensorflow(placement: WorkerPlacement) -> None:
    """Sets TF's thread counts (and GPU memory growth) for `placement`.

    Imports TensorFlow. Must run before the process's first TF op.

    Args:
        placement: the worker's placement.

    Raises:
        WorkerStartError: if TensorFlow was already initialised.
    """
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    try:
        tf.config.threading.set_intra_op_parallelism_threads(placement.intra_op_threads)
        tf.config.threading.set_inter_op_parallelism_threads(placement.inter_op_threads)
        if placement.gpu is not None:
            for device in tf.config.list_physical_devices('GPU'):
                tf.config.experimental.set_memory_growth(device, True)
    except RuntimeError as e:
        raise WorkerStartError(
            f'worker {placement.worker_id}: TensorFlow was initialised before its '
            f'placement was applied ({e}); call apply_placement before the first '
            f'TF op',
            worker_id=placement.worker_id,
        ) from e
