"""The leaf of every worker: a `WorkerService` over an `EagerTFExecutor`."""

from __future__ import annotations

from typing import Optional, Union, cast

from simharness.core.buffers import SharedReads
from simharness.executors.leaf.eager_tf import EagerTFExecutor
from simharness.runtime.service import WorkerService


def worker_service(
    worker_id: Optional[Union[int, str]] = None,
    device: Optional[str] = None,
    clients_per_worker: Optional[int] = None,
    shared_reads: Optional[SharedReads] = None,
) -> WorkerService:
    """A `WorkerService` running requests on a new `EagerTFExecutor`.

    Args:
      worker_id: the worker's id (error messages).
      device: the TF device of the executor (``'/GPU:0'`` on a placed GPU; None: TF's).
      clients_per_worker: the most clients run through one TF call (None: no bound).
      shared_reads: the broadcasts the driver wrote for this worker (a local worker's,
        which offers them per request): read in place. None: none are.
    """
    executor = EagerTFExecutor(
        device=device,
        max_batch_size=clients_per_worker,
        sums_in_calls=True,
        shared_reads=shared_reads,
    )
    return WorkerService(executor, cast(Optional[int], worker_id))  # gRPC ids are names
