"""The loopback transport: codec -> `WorkerService` -> codec in this process.

A fourth implementation of the worker seam (`simharness.runtime.seam`),
beside the local pool, gRPC and Ray: no process, no pipe, no shared memory.
Every request is encoded by the driver's executor, copied (so the worker
never sees the driver's arrays, as across a process boundary), decoded and
run by a `WorkerService` on one thread per worker (in order, as a worker
does), and its response is encoded, copied and decoded again. It exists to
test the driver side of the seam (`WorkerDelegatingExecutor`: pipelining,
poisoned ids, generation changes, leases and frees) in unit tests, and to
show in a page what a transport must do.

The group does not know which executor its services run: the caller gives
`make_service(worker_id) -> WorkerService`.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import os
import threading
import traceback
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

from simharness.errors import ExecutorClosedError, WorkerCrashedError
from simharness.runtime import protocol as P
from simharness.runtime.seam import Answer, WorkerGroup, WorkerHandle
from simharness.runtime.service import WorkerService


def _copy(buffers: Sequence[Any]) -> List[Any]:
    """The buffers as the other side of a process boundary would read them (copies)."""
    return [b.copy() if isinstance(b, np.ndarray) else bytes(b) for b in buffers]


class LoopbackBroadcast:
    """A broadcast arena of copies: `acquire` keeps one copy of a value's buffers per key.

    `readers` counts reads not yet released (the tests check it goes back to 0).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: Dict[int, List[Any]] = {}  # id(key) -> [key, locs, readers]
        self.bytes_written = 0

    def acquire(self, key: Any, buffers: Sequence[Any]) -> Optional[List[Any]]:
        with self._lock:
            entry = self._held.get(id(key))
            if entry is None or entry[0] is not key:
                entry = [key, _copy(buffers), 0]
                self._held[id(key)] = entry
                self.bytes_written += sum(len(memoryview(b).cast('B')) for b in buffers)
            entry[2] += 1
            locs: List[Any] = entry[1]
            return locs

    def release(self, locs: Optional[List[Any]] = None) -> None:
        with self._lock:
            for k, entry in list(self._held.items()):
                if entry[1] is locs:
                    entry[2] -= 1
                    if not entry[2]:
                        del self._held[k]
                    return

    @property
    def readers(self) -> int:
        with self._lock:
            return sum(e[2] for e in self._held.values())


class LoopbackHandle:
    """One in-process worker: a `WorkerService` behind a one-thread executor.

    `crash()` plays a worker's death: requests not yet answered fail with
    `WorkerCrashedError`, the service (and its sessions) is dropped, and the
    next `ensure_started` makes a new one under the next generation.
    """

    lends = False
    places_prefix = False  # a broadcast goes alone (`WorkerDelegatingExecutor._wire_node`)

    def __init__(self, group: 'LoopbackGroup', worker_id: int):
        self._group = group
        self.worker_id = worker_id
        self.pid: Optional[int] = None
        self.generation = 0
        self.service: Optional[WorkerService] = None
        self.requests: List[P.Request] = []  # every request the worker decoded, in order
        self.answered = 0  # requests the worker has answered
        self._lock = threading.Lock()
        self._thread: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self._inflight: List['concurrent.futures.Future[Answer]'] = []
        # Threads of crashed generations, still finishing the request they were in
        # (a crashed worker is not waited for); `close` joins them.
        self._dying: List[concurrent.futures.ThreadPoolExecutor] = []

    @property
    def pool(self) -> 'LoopbackGroup':
        return self._group

    @property
    def alive(self) -> bool:
        return self.service is not None

    def ensure_started(self, timeout: Optional[float] = None) -> None:
        with self._lock:
            if self._group.closed:
                raise ExecutorClosedError('the worker pool is closed')
            if self.service is not None:
                return
            self.service = self._group.make_service(self.worker_id)
            self._thread = concurrent.futures.ThreadPoolExecutor(
                1, thread_name_prefix=f'simharness-loopback-{self.worker_id}'
            )
            self.pid = os.getpid()
            self.generation += 1

    def submit(
        self,
        header: bytes,
        buffers: List[Any],
        op: P.Op,
        generation: int,
        locs: Optional[List[Any]] = None,
        on_done: Optional[Callable[[], None]] = None,
        lend: bool = False,
        defer: bool = False,
    ) -> 'concurrent.futures.Future[Answer]':
        """`WorkerHandle.submit`: the request runs on the worker's thread (`defer` is ignored)."""
        out: 'concurrent.futures.Future[Answer]' = concurrent.futures.Future()
        with self._lock:
            err: Optional[BaseException] = None
            if self._group.closed:
                err = ExecutorClosedError('the worker pool is closed')
            elif self.service is None or generation != self.generation:
                err = WorkerCrashedError(
                    f'worker {self.worker_id} was replaced after a crash; its values are gone: '
                    'run the computation again',
                    worker_id=self.worker_id,
                    pid=self.pid,
                )
            else:
                self._group.requests += 1
                service, thread = self.service, self._thread
                wire = (bytes(header), _copy(buffers if locs is None else locs))
                self._inflight.append(out)
        if err is not None:
            out.set_exception(err)
            if on_done is not None:
                on_done()
            return out
        assert thread is not None and service is not None
        thread.submit(self._serve, service, wire, out, on_done)
        return out

    def _serve(
        self,
        service: WorkerService,
        wire: Any,
        out: 'concurrent.futures.Future[Answer]',
        on_done: Optional[Callable[[], None]],
    ) -> None:
        try:
            if out.done():  # failed by a crash meanwhile
                return
            try:
                req = P.decode_message(*wire)
            except Exception as e:
                resp = P.Response(False, error=P.error_to_record(e, traceback.format_exc()))
            else:
                self.requests.append(req)
                resp = service.handle(req)
            self.answered += 1
            header, buffers = P.encode_message(resp)
            answer = P.decode_message(bytes(header), _copy(buffers))
            with self._lock:
                if out in self._inflight:
                    self._inflight.remove(out)
                    out.set_result(Answer(answer))
        except BaseException as e:  # pragma: no cover - handle() answers its own failures
            with self._lock:
                if not out.done():
                    out.set_exception(e)
        finally:
            if on_done is not None:
                on_done()

    def crash(self) -> None:
        """The worker dies: unanswered requests fail at once, its sessions are gone.

        As with a killed process, the caller does not wait for the request the
        worker was in: its thread finishes that request (the answer is dropped),
        then closes the dead generation's service; `close` joins it.
        """
        with self._lock:
            service, self.service = self.service, None
            thread, self._thread = self._thread, None
            inflight, self._inflight = self._inflight, []
            if thread is not None:
                self._dying.append(thread)
        for f in inflight:
            if not f.done():
                f.set_exception(
                    WorkerCrashedError(
                        f'worker {self.worker_id} (pid {self.pid}) died; it will be replaced on '
                        'next use',
                        worker_id=self.worker_id,
                        pid=self.pid,
                    )
                )
        if thread is not None:
            if service is not None:
                thread.submit(service.close)  # after the request it is in, in its thread
            thread.shutdown(wait=False)
        elif service is not None:
            service.close()

    def close(self) -> None:
        self.crash()
        with self._lock:
            dying, self._dying = self._dying, []
        for thread in dying:
            thread.shutdown(wait=True)


class LoopbackGroup:
    """`num_workers` loopback workers sharing sessions and a broadcast arena.

    Args:
      make_service: builds worker k's `WorkerService` (called at each start).
      num_workers: how many workers.
    """

    def __init__(self, make_service: Callable[[int], WorkerService], num_workers: int = 1):
        self.make_service = make_service
        self.handles: List[LoopbackHandle] = [LoopbackHandle(self, k) for k in range(num_workers)]
        self.broadcast = LoopbackBroadcast()
        self.closed = False
        self.requests = 0
        self._started = False
        self._sessions = itertools.count(1)

    @property
    def started(self) -> bool:
        return self._started

    @property
    def num_workers(self) -> int:
        return len(self.handles)

    def start(self) -> None:
        if self.closed:
            raise ExecutorClosedError('the worker pool is closed')
        for h in self.handles:
            h.ensure_started()
        self._started = True

    def new_session_id(self) -> int:
        return next(self._sessions)

    def stats(self) -> Dict[str, Any]:
        return {'requests': self.requests, 'bytes_to_workers': self.broadcast.bytes_written}

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for h in self.handles:
            h.close()

    def __enter__(self) -> 'LoopbackGroup':
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _conforms(group: LoopbackGroup) -> WorkerGroup:
    """Static check (mypy) that the loopback classes implement the seam."""
    handle: WorkerHandle = group.handles[0]
    del handle
    return group


__all__ = ['LoopbackBroadcast', 'LoopbackGroup', 'LoopbackHandle']
