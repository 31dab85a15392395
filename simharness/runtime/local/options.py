"""What a local worker pool is made from (`PoolOptions`) and what each of its worker
processes is started with (`WorkerConfig`): every default written once, here, and the
options passed whole from `stacks.process_executor_factory` to the pool and its workers.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional

from simharness.errors import SimharnessTypeError, SimharnessValueError
from simharness.runtime.seam import DEFAULT_CLIENTS_PER_WORKER
from simharness.validation import check_bool, check_int, check_number

#: Initial size of each shared-memory arena (they grow).
DEFAULT_ARENA_BYTES = 1 << 20
#: Seconds to wait for a worker to report ready.
DEFAULT_START_TIMEOUT = 120.0
#: Seconds a request may run while its worker is stopped or uses no CPU.
DEFAULT_LIVENESS_TIMEOUT = 60.0
#: Seconds a request may wait on a worker seen stopped (SIGSTOP, /proc state T).
DEFAULT_STOPPED_TIMEOUT = 3.0

#: The keys of ``worker_options`` (advanced: what a worker does besides its clients' work).
WORKER_OPTION_KEYS = ('profile',)


@dataclasses.dataclass(frozen=True)
class WorkerConfig:
    """What a worker process is started with (plain data: it crosses to the process).

    Attributes:
      clients_per_worker: the most clients it runs through one TF call (None: no bound).
      arena_bytes: initial size of its response arena.
      profile: log each request's time to stderr.
    """

    clients_per_worker: Optional[int] = DEFAULT_CLIENTS_PER_WORKER
    arena_bytes: int = DEFAULT_ARENA_BYTES
    profile: bool = False


@dataclasses.dataclass(frozen=True)
class PoolOptions:
    """The options of a local worker pool, checked when made: a bad one starts nothing.

    Attributes:
      num_workers: worker processes (None: usable CPU cores, or GPUs x `workers_per_gpu`
        when `devices` names GPUs).
      clients_per_worker: the most clients a worker runs through one TF call (None: no
        bound).
      cpu_affinity: pin each worker to its own core set.
      devices: GPUs to use ('cuda:0', [0, 1], ...); None: CPU only.
      workers_per_gpu: workers sharing each GPU.
      arena_bytes: initial size of each shared-memory arena (they grow).
      start_timeout: seconds to wait for a worker to start.
      worker_options: advanced options for the workers (`WORKER_OPTION_KEYS`:
        ``'profile'`` logs each request's time to stderr).
      request_timeout: seconds one worker request may take (None: no limit).
      liveness_timeout: seconds a request may wait on a worker that uses no CPU.
      stopped_timeout: seconds a request may wait on a worker seen stopped.
    """

    num_workers: Optional[int] = None
    clients_per_worker: Optional[int] = DEFAULT_CLIENTS_PER_WORKER
    cpu_affinity: bool = True
    devices: object = None
    workers_per_gpu: int = 1
    arena_bytes: int = DEFAULT_ARENA_BYTES
    start_timeout: float = DEFAULT_START_TIMEOUT
    worker_options: Optional[Mapping[str, Any]] = None
    request_timeout: Optional[float] = None
    liveness_timeout: float = DEFAULT_LIVENESS_TIMEOUT
    stopped_timeout: float = DEFAULT_STOPPED_TIMEOUT

    def __post_init__(self) -> None:
        check_int('num_workers', self.num_workers, 1, allow_none=True)
        check_int('clients_per_worker', self.clients_per_worker, 1, allow_none=True)
        check_bool('cpu_affinity', self.cpu_affinity)
        check_int('workers_per_gpu', self.workers_per_gpu, 1)
        check_int('arena_bytes', self.arena_bytes, 1)
        check_number('start_timeout', self.start_timeout, greater_than=0)
        if self.request_timeout is not None:
            check_number('request_timeout', self.request_timeout, greater_than=0)
        check_number('liveness_timeout', self.liveness_timeout, greater_than=0)
        check_number('stopped_timeout', self.stopped_timeout, greater_than=0)
        check_worker_options(self.worker_options)

    def worker_config(self) -> WorkerConfig:
        """What each worker of the pool is started with."""
        extra = dict(self.worker_options or {})
        return WorkerConfig(
            clients_per_worker=self.clients_per_worker,
            arena_bytes=self.arena_bytes,
            profile=bool(extra.get('profile')),
        )


def check_worker_options(worker_options: object) -> None:
    """Raises unless `worker_options` is None or a dict of `WORKER_OPTION_KEYS`."""
    if worker_options is None:
        return
    if not isinstance(worker_options, Mapping):
        raise SimharnessTypeError(
            f'worker_options must be a dict or None, got {worker_options!r} of type '
            f'{type(worker_options).__name__}',
            expected='Optional[dict]',
            actual=type(worker_options),
        )
    unknown = sorted(str(k) for k in worker_options if k not in WORKER_OPTION_KEYS)
    if unknown:
        raise SimharnessValueError(
            f'worker_options has unknown key(s) {unknown}; the known ones are '
            f'{list(WORKER_OPTION_KEYS)}'
        )
