"""``[stack]``: where the clients run, one variant class per ``kind`` (`StackConfig`), and
`check_stack_devices` (the runner's check that the GPUs named are here)."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Dict, Optional, Tuple, Union

from simharness.errors import ConfigError, SimharnessError
from simharness.runtime import pinning
from simharness.runtime.resources import GpuInventory
from simharness.runtime.seam import DEFAULT_CLIENTS_PER_WORKER
from simharness.experiments.config.base import (
    _as_given,
    _check_bool,
    _check_float,
    _check_str,
    _choice,
    _int,
    _num,
    _opt,
    RAY_PLACEMENT_STRATEGIES,
    _Table,
    _Union,
)


class StackConfig(_Table, metaclass=_Union):
    """``[stack]``: where the clients run, one class per ``kind``.

    ``StackConfig(kind=..., **options)`` builds `ThreadStack` (default:
    `local_executor_factory`), `ProcessStack` (`process_executor_factory`:
    pinned worker processes) or `RayStack` (`ray_executor_factory`: Ray
    actors, on this machine or a cluster).
    """

    TABLE, TAG, DEFAULT = 'stack', 'kind', 'thread'
    VARIANTS: ClassVar[Dict[str, type]] = {}
    kind: str  # the tag: a field of each variant


@dataclasses.dataclass(frozen=True)
class ThreadStack(StackConfig, tag='thread'):
    """Client threads in this process.

    Attributes:
        clients_per_thread: clients per client thread.
        jit_compile: XLA for the TF computations (true or false forces it; unset: the
            rule of `simharness.core.xla` decides per computation).
    """

    clients_per_thread: int = _opt(1, _int(1))
    jit_compile: Optional[bool] = _opt(None, _check_bool)


def _check_devices(key: str, d: Any) -> Union[str, Tuple[Union[int, str], ...]]:
    if isinstance(d, (list, tuple)):
        if not d or not all(
            (isinstance(v, int) and not isinstance(v, bool) and v >= 0)
            or (isinstance(v, str) and v)
            for v in d
        ):
            raise ConfigError(
                f'{key} must be a string like "cuda:0" or a non-empty list of GPU ids (ints '
                f'>= 0) or device strings, got {d!r}',
                key=key,
                value=d,
            )
        d = tuple(d)
    elif not isinstance(d, str) or not d:
        raise ConfigError(
            f'{key} must be a string like "cuda:0" or a list of GPU ids, got {d!r}',
            key=key,
            value=d,
        )
    try:
        pinning.parse_devices(list(d) if isinstance(d, tuple) else d)
    except SimharnessError as e:
        raise ConfigError(f'{key}: {e}', key=key, value=d) from e
    return d


@dataclasses.dataclass(frozen=True)
class ProcessStack(StackConfig, tag='process'):
    """Pinned worker processes on this machine.

    Attributes:
        num_workers: worker processes (default: one per usable core, or per
            GPU slot when `devices` names GPUs).
        clients_per_worker: most clients per TF call in a worker.
        cpu_affinity: pin each worker to its own cores.
        devices: GPUs to use ('cuda:0', [0, 1], ...; default: CPU).
        workers_per_gpu: workers sharing a GPU.
        jit_compile: XLA for the TF computations (true or false forces it; unset: the
            rule of `simharness.core.xla` decides per computation).
    """

    num_workers: Optional[int] = _opt(None, _int(1))
    clients_per_worker: int = _opt(DEFAULT_CLIENTS_PER_WORKER, _int(1))
    cpu_affinity: bool = _opt(True, _check_bool)
    devices: Optional[Union[str, Tuple[Union[int, str], ...]]] = _opt(None, _check_devices)
    workers_per_gpu: int = _opt(1, _int(1))
    jit_compile: Optional[bool] = _opt(None, _check_bool)


def _check_gpu_share(key: str, value: Any) -> Any:
    _check_float(key, value, minimum=0)
    if value > 1:
        raise ConfigError(
            f'{key} must be a number in [0, 1] (a worker uses one GPU), got {value!r}',
            key=key,
            value=value,
        )
    return value


@dataclasses.dataclass(frozen=True)
class RayStack(StackConfig, tag='ray'):
    """Ray actors (`ray_executor_factory`), on this machine or a cluster.

    Attributes:
        num_workers, clients_per_worker, cpu_affinity: as for the process stack.
        address: the cluster to join (``'auto'``, ``'host:6379'``,
            ``'ray://host:10001'``; default: start a local Ray).
        num_cpus_per_worker: CPUs reserved per actor.
        num_gpus_per_worker: GPUs per actor, 0 .. 1.
        placement_strategy: 'PACK', 'SPREAD', 'STRICT_PACK' or 'STRICT_SPREAD'.
        jit_compile: XLA for the TF computations (true or false forces it; unset: the
            rule of `simharness.core.xla` decides per computation).
    """

    num_workers: Optional[int] = _opt(None, _int(1))
    clients_per_worker: int = _opt(DEFAULT_CLIENTS_PER_WORKER, _int(1))
    cpu_affinity: bool = _opt(True, _check_bool)
    address: Optional[str] = _opt(None, _check_str)
    num_cpus_per_worker: float = _opt(1, _as_given(_num(0, inclusive=False)))
    num_gpus_per_worker: float = _opt(0, _check_gpu_share)
    placement_strategy: str = _opt('PACK', _choice(RAY_PLACEMENT_STRATEGIES))
    jit_compile: Optional[bool] = _opt(None, _check_bool)


def check_stack_devices(stack: StackConfig, inventory: Optional[GpuInventory] = None) -> None:
    """Checks that the GPUs `stack.devices` names are on this machine.

    Not part of validating a config (a config may be written on one machine
    and run on another): the runner calls it before it builds the stack.

    Args:
        stack: the ``[stack]`` table.
        inventory: the GPUs found; None: `resources.discover_gpus()` (no
            TensorFlow import).

    Raises:
        ConfigError: naming ``stack.devices``, the GPUs asked for, the GPUs
            found and what was checked.
    """
    if not isinstance(stack, ProcessStack) or stack.devices is None:
        return
    devices = list(stack.devices) if isinstance(stack.devices, tuple) else stack.devices
    try:
        pinning.check_gpus_exist(
            devices, pinning.parse_devices(devices) or (), inventory, name='stack.devices'
        )
    except SimharnessError as e:
        raise ConfigError(str(e), key='stack.devices', value=stack.devices) from e

        raise ConfigError(str(e), key='stack.devices', value=stack.devices) from e
