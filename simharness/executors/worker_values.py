"""The driver's handles to values held in a worker session: `WorkerValue` and its lease.

A `WorkerValue` names a value by its id in one session of one worker process (a
*generation*); the `Lease` shared by the handles of one result block frees their ids in
the worker when the last of them is gone. The session itself (ids, requests, the
garbage to free) is its owner's: `worker_delegating.WorkerDelegatingExecutor`, seen
here only as a `SessionOwner`.
"""

from __future__ import annotations

from typing import Any, List, Protocol, Sequence, cast

from simharness.core import types as T
from simharness.errors import WorkerCrashedError
from simharness.executors.base import ExecutorValue
from simharness.runtime.codec import Ref
from simharness.runtime.seam import WorkerId


class SessionOwner(Protocol):
    """What a handle asks of the worker session holding its value."""

    @property
    def worker_id(self) -> WorkerId: ...

    def is_current(self, generation: int) -> bool: ...

    def release_ids(self, start: int, count: int, generation: int) -> None: ...

    async def compute_many(self, values: Sequence[ExecutorValue]) -> List[Any]: ...


class Lease:
    """The driver's claim on a range of value ids in one session generation.

    Shared by the `WorkerValue`s of one result block; when the last of them
    is gone, the ids are freed in the worker with the next request. (Id
    bookkeeping, not a resource: `__del__` is the cheap hook CPython calls
    when the last handle goes; `weakref.finalize` costs ~10x more per block.)
    """

    __slots__ = ('_owner', '_start', '_count', '_generation')

    def __init__(self, owner: SessionOwner, start: int, count: int, generation: int):
        self._owner = owner
        self._start = start
        self._count = count
        self._generation = generation

    def __del__(self) -> None:
        try:
            self._owner.release_ids(self._start, self._count, self._generation)
        except Exception:  # interpreter shutdown: nothing left to free
            pass


class WorkerValue(ExecutorValue):
    """A handle to a value held in a worker session."""

    __slots__ = ('_owner', '_id', '_type', '_generation', '_lease')

    def __init__(
        self,
        owner: SessionOwner,
        value_id: int,
        type_spec: T.Type,
        generation: int,
        lease: Lease,
    ):
        self._owner = owner
        self._id = value_id
        self._type = type_spec
        self._generation = generation
        self._lease = lease

    @property
    def type_signature(self) -> T.Type:
        return self._type

    @property
    def owner(self) -> SessionOwner:
        """The executor (worker session) holding it."""
        return self._owner

    @property
    def value_id(self) -> int:
        """Its id in the worker session."""
        return self._id

    @property
    def generation(self) -> int:
        """The generation of the worker process it was made in."""
        return self._generation

    def check_generation(self) -> None:
        """Raises `WorkerCrashedError` when the worker process that held it was replaced."""
        if not self._owner.is_current(self._generation):
            worker_id = self._owner.worker_id
            raise WorkerCrashedError(
                f'value {self._id} lived in worker {worker_id}, which was replaced after a '
                'crash; run the computation again',
                worker_id=cast(Any, worker_id),
            )

    @property
    def ref(self) -> Ref:
        self.check_generation()
        return Ref(self._id)

    async def compute(self) -> Any:
        return (await self._owner.compute_many([self]))[0]

    def __repr__(self) -> str:
        return f'WorkerValue(worker={self._owner.worker_id}, id={self._id}, type={self._type})'
