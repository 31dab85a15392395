"""The local wing's shared memory seen by the driver: the broadcast arena and response loans."""

from __future__ import annotations

import threading
from typing import Any, List, Optional, Sequence

from simharness.errors import ExecutorClosedError
from simharness.runtime.local import transport as L
from simharness.runtime.local.shm import ShmArena


#: The `request_queue.RequestQueue` that lent the arenas (it imports this module).
_Lender = Any


class _Slot:
    __slots__ = ('arena', 'key', 'locs', 'readers')

    def __init__(self) -> None:
        self.arena: Optional[ShmArena] = None
        self.key: Any = None
        self.locs: List[Any] = []
        self.readers = 0


class BroadcastArena:
    """Driver-owned arenas each holding ONE value's buffers that every worker reads.

    `acquire(key, buffers)` writes the buffers once into a slot nobody reads
    (unless a slot holds `key` already) and counts a reader; `release(locs)`
    ends a read. A read lasts until the worker answered, or, when the worker
    made tensors of the bytes in place, until it freed them (it says so in a
    later answer). A new value takes a free slot, or a new one up to
    `max_slots`; when every slot is read, `acquire` returns None and the
    caller sends the bytes with the request instead: it never waits (a
    worker's tensors may hold a slot until the driver's next request).
    """

    def __init__(self, capacity: int, max_slots: int = 4):
        self._capacity = capacity
        self._max_slots = max_slots
        self._slots: List[_Slot] = []
        self._lock = threading.Lock()
        self._closed = False
        self.bytes_written = 0

    def acquire(self, key: Any, buffers: Sequence[Any]) -> Optional[List[Any]]:
        """The locations of `key`'s buffers (written now unless held); None if every slot is read."""
        with self._lock:
            if self._closed:
                raise ExecutorClosedError('the worker pool is closed')
            for slot in self._slots:
                if slot.readers and slot.key is key:
                    slot.readers += 1
                    return slot.locs
            free = next((s for s in self._slots if not s.readers), None)
            if free is None:
                if len(self._slots) >= self._max_slots:
                    return None
                free = _Slot()
                self._slots.append(free)
            if free.arena is None:
                free.arena = ShmArena(self._capacity)
            free.locs = L.write_buffers(free.arena, buffers)
            free.key = key
            free.readers = 1
            self.bytes_written += sum(b.nbytes for b in buffers)
            return free.locs

    def release(self, locs: Optional[List[Any]] = None) -> None:
        """Ends one read of the slot whose locations `acquire` gave as `locs`."""
        with self._lock:
            for slot in self._slots:
                if slot.locs is locs and slot.readers:
                    slot.readers -= 1
                    if not slot.readers:
                        # Forget the key: a later broadcast of the same (possibly since
                        # mutated) object is written again.
                        slot.key = None
                    return

    @property
    def readers(self) -> int:
        """Reads not yet ended, over all slots."""
        with self._lock:
            return sum(s.readers for s in self._slots)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            slots, self._slots = self._slots, []
        for slot in slots:
            if slot.arena is not None:
                slot.arena.close()


class WorkerStats:
    """Counters of one worker, as seen by the driver."""

    def __init__(self) -> None:
        self.requests = 0
        self.bytes_to_worker = 0
        self.bytes_from_worker = 0


class ResponseLoan:
    """The driver's hold on the worker arenas a response lies in, while it reads them in place.

    `release()` (once; again is a no-op) tells the worker it may reuse them.
    A loan nobody released is released when it is freed, so the worker's
    arenas never stay busy for a dropped response; but the views read
    through it must not be used after its release.
    """

    __slots__ = ('_lender', '_generation', '_names')

    def __init__(self, lender: _Lender, generation: int, names: List[str]):
        self._lender = lender
        self._generation = generation
        self._names = [names]  # popped once: release is exactly-once across threads

    def release(self) -> None:
        try:
            names = self._names.pop()
        except IndexError:
            return
        self._lender.acknowledge(names, self._generation)

    def __del__(self) -> None:
        try:
            self.release()
        except Exception:  # interpreter shutdown: the worker is gone too
            pass
