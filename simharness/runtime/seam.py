"""The worker seam in code: what a transport gives the driver's executors.

A *worker group* (a local `WorkerPool`, gRPC `RemoteServices`, `RayWorkers`,
or the in-process `LoopbackGroup` of the unit tests) owns worker *handles*;
`WorkerDelegatingExecutor` drives one handle in a session of its own and
`simharness.stacks.WorkerGroupExecutorFactory` builds stacks over a group.
These `Protocol`s are the whole contract between them: an executor never
asks a transport anything else, and a transport never sees an executor.

```
driver                                    worker (process, service, actor)
WorkerDelegatingExecutor                  WorkerService(leaf executor)
  -> codec.encode(Request) -> handle.submit(header, buffers, op, generation)
                               ... transport ...  -> decode -> handle -> encode
  <- Future[Answer(response, loan)]  <--------------------------------------
```

Every handle's `submit` resolves to an `Answer`: the decoded `Response`, and
the `Loan` of the worker's memory its arrays are views of (None unless the
request asked to borrow and the transport `lends`).

Requests of one handle run in the order submitted. A request made for a
generation other than the handle's current one (its worker was replaced)
fails with `WorkerCrashedError`; so do the requests in flight when a worker
dies.
"""

from __future__ import annotations

import concurrent.futures
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    List,
    NamedTuple,
    Optional,
    Protocol,
    Sequence,
    Union,
    runtime_checkable,
)

if TYPE_CHECKING:  # the seam's modules import no protocol module at run time
    from simharness.runtime.protocol import Op, Response

#: A handle's id: the worker's index (local and Ray) or the service's address (gRPC).
WorkerId = Union[int, str]

#: The most clients a worker runs through one TF call, by default (every transport).
DEFAULT_CLIENTS_PER_WORKER = 256


class Loan(Protocol):
    """Views of a worker's memory lent with an answer; `release` once they are no longer read."""

    def release(self) -> None:
        """Ends the loan (idempotent): the worker may reuse the memory."""


class Answer(NamedTuple):
    """What every handle's `submit` future resolves to.

    Attributes:
      response: the worker's decoded `Response`.
      loan: with ``submit(..., lend=True)`` on a handle that `lends`, the loan of
        the worker's memory the response's big arrays are views of (None when
        nothing is lent: the arrays are the driver's own).
    """

    response: 'Response'
    loan: Optional[Loan] = None


@runtime_checkable
class BroadcastArena(Protocol):
    """Where a group writes a broadcast value once for all of its workers.

    `acquire(key, buffers)` places the buffers of the value `key` (or finds
    them placed) and returns their locations for `WorkerHandle.submit`; None
    when nothing can be placed now (the bytes then go with the request).
    `release(locs)` ends one read of the locations `acquire` gave.
    """

    @property
    def bytes_written(self) -> int:
        """Bytes placed so far (the transport's traffic counters add them once)."""

    def acquire(self, key: Any, buffers: Sequence[Any]) -> Optional[List[Any]]:
        """The locations of `key`'s buffers, or None (send the bytes with the request)."""

    def release(self, locs: Optional[List[Any]] = None) -> None:
        """Ends one read of `locs`."""


@runtime_checkable
class WorkerHandle(Protocol):
    """The driver side of one worker (a process, a service's worker slot, an actor).

    Attributes:
      worker_id: for error messages and stacks' streaming decisions.
      pid: the worker's process id once started (None before).
      generation: grows by one each time a new worker takes this slot (a first
        start, a restart after a crash); values of older generations are gone.
      lends: whether ``submit(..., lend=True)`` answers with views of the
        worker's memory and a loan (else `lend` is ignored).
      places_prefix: whether `submit`'s `locs` may place only the first
        ``len(locs)`` buffers (the others go as with no `locs`): a request
        that carries a broadcast value and data of its own.
      pool: the group this handle belongs to.
    """

    @property
    def worker_id(self) -> WorkerId:
        """The worker's id."""

    @property
    def pid(self) -> Optional[int]:
        """The worker's process id once started."""

    @property
    def generation(self) -> int:
        """The generation of the worker now in this slot (0: never started)."""

    @property
    def lends(self) -> bool:
        """Whether `submit(..., lend=True)` lends views of the worker's memory."""

    @property
    def places_prefix(self) -> bool:
        """Whether `submit`'s `locs` may place a prefix of the buffers only."""

    @property
    def pool(self) -> 'WorkerGroup':
        """The group that owns this handle."""

    @property
    def alive(self) -> bool:
        """Whether the worker runs (requests for the current generation can be sent)."""

    def ensure_started(self, timeout: Optional[float] = None) -> None:
        """Starts (or restarts) the worker unless it runs; blocks until it is ready."""

    def submit(
        self,
        header: bytes,
        buffers: List[Any],
        op: 'Op',
        generation: int,
        locs: Optional[List[Any]] = None,
        on_done: Optional[Callable[[], None]] = None,
        lend: bool = False,
        defer: bool = False,
    ) -> 'concurrent.futures.Future[Answer]':
        """Queues one encoded request; the future resolves to its `Answer`.

        Args:
          header, buffers: the request, as `protocol.encode_message` made it.
          op: the operation (`protocol.Op`; its name goes into error messages).
          generation: the generation the request was made for.
          locs: where `buffers` already are (the group's broadcast arena); with
            `places_prefix`, where the first ``len(locs)`` of them are.
          on_done: called once when the worker is done with `locs`.
          lend: with `lends`, the answer's arrays may be views of the worker's
            memory, lent until ``answer.loan.release()`` (see the local pool).
          defer: nobody waits for this answer: the transport may hold the request
            and send it, in order, with the next request to the same worker (the
            local pool does: one wake of the worker for both); others send it now.
        """


@runtime_checkable
class WorkerGroup(Protocol):
    """A set of worker handles with what they share: sessions, the broadcast arena, stats.

    Attributes:
      broadcast: the arena broadcasts are written to once for every worker.
      closed: True once `close` ran; a closed group refuses every request.
    """

    @property
    def broadcast(self) -> BroadcastArena:
        """The arena broadcasts are written to once for every worker."""

    @property
    def closed(self) -> bool:
        """True once `close` ran."""

    @property
    def handles(self) -> Sequence[WorkerHandle]:
        """The workers, in the order stacks give them their blocks of clients."""

    @property
    def started(self) -> bool:
        """Whether `start` has succeeded."""

    def start(self) -> Any:
        """Starts every worker (or connects to them); idempotent once started."""

    def new_session_id(self) -> int:
        """A session id no other executor of this group (or driver of its workers) uses."""

    def stats(self) -> Dict[str, Any]:
        """Counters of the group and the state of its workers (requests, bytes moved; per
        worker RSS, CPU time, ...): a factory's `stats()`. The keys are the transport's."""

    def close(self) -> None:
        """Stops (or disconnects from) every worker. Idempotent."""


__all__ = [
    'Answer',
    'BroadcastArena',
    'Loan',
    'WorkerGroup',
    'WorkerHandle',
    'WorkerId',
]
