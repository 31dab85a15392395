"""TFF's local C++ executor factories: process stacks on one worker pool per process.

TFF's local C++ executors run inside the process that makes them, so a program may make
many (TFF's own tests run a `MergeableCompExecutionContext` over sixty contexts); each
of ours would start worker processes of its own (~490 MB each). The factories that
`framework.local_cpp_executor_factory` and `backends.native`'s contexts make share one
`WorkerPool` instead, each stack with its own session in every worker.
"""

from __future__ import annotations

import threading
from typing import Optional

from simharness.hosts.local_worker import pool_for
from simharness.runtime.local.options import PoolOptions
from simharness.runtime.local.pool import WorkerPool
from simharness.stacks import (
    DEFAULT_MAX_CACHED_STACKS,
    PROCESS_CLOSED_MESSAGE,
    WorkerGroupExecutorFactory,
)

__all__ = ['shared_local_process_factory']


class _SharedLocalPool:
    """The worker pool the local C++ factories of this process share.

    TFF's local C++ executors live in the calling process, so a program may make dozens of
    them (a `MergeableCompExecutionContext` over sixty contexts, say); here each would start
    its own worker processes (~490 MB each). The factories share one pool instead, each
    with its own session in every worker; the pool starts when the first factory is made
    (in the background: `WorkerPool.start_soon`) and stops when the last factory using it
    is closed.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool: Optional[WorkerPool] = None
        self._users = 0

    def acquire(self) -> WorkerPool:
        with self._lock:
            if self._pool is None or self._pool.closed:
                self._pool = pool_for(PoolOptions())
                self._users = 0
            self._users += 1
            return self._pool

    def release(self, pool: WorkerPool) -> None:
        with self._lock:
            if pool is not self._pool:
                return  # closed and replaced already
            self._users -= 1
            if self._users > 0:
                return
            self._pool = None
        pool.close()


_LOCAL_POOL = _SharedLocalPool()


def shared_local_process_factory(
    default_num_clients: int = 0,
) -> WorkerGroupExecutorFactory[WorkerPool]:
    """A process stack with `default_num_clients` on the worker pool (a worker per usable
    core) that every open factory made here shares: TFF's local C++ executor factory and
    contexts (`framework.local_cpp_executor_factory`, `backends.native`).

    The factory does not own the pool: its first `close()` hands it back (`closed` is then
    True) and the last factory handed back stops it.
    """
    pool = _LOCAL_POOL.acquire()
    pool.start_soon()
    return WorkerGroupExecutorFactory(
        pool,
        None,
        DEFAULT_MAX_CACHED_STACKS,
        owns_group=False,
        default_num_clients=default_num_clients,
        closed_message=PROCESS_CLOSED_MESSAGE,
        on_close=lambda: _LOCAL_POOL.release(pool),
    )
