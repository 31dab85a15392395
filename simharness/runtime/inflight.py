"""A request on its way to a worker, as every transport's driver side holds it.

caller ──submit──▶ InFlight(future, on_done) ──transport──▶ worker
caller ◀─future── finish(answer | error)  ◀── reactor / reader thread

The local (pipe + shared memory), gRPC and Ray transports all answer their
callers through `finish` (an `Answer`, as the seam's `submit` promises): it releases what the request held (its broadcast
reader, say) exactly once, then settles the caller's future unless the
caller already cancelled it (Ctrl-C).
"""

from __future__ import annotations

import concurrent.futures
import logging
from typing import Callable, Optional

from simharness.runtime.seam import Answer

log = logging.getLogger(__name__)


class InFlight:
    """The caller's future of one request, and a release run once when it ends.

    Args:
      op: the operation's name (for errors and statistics).
      on_done: called once, before the future is settled; None: nothing to release.
    """

    __slots__ = ('op', 'future', 'on_done')

    def __init__(self, op: str, on_done: Optional[Callable[[], None]]):
        self.op = op
        self.future: 'concurrent.futures.Future[Answer]' = concurrent.futures.Future()
        self.on_done = on_done

    def finish(
        self, answer: Optional[Answer] = None, error: Optional[BaseException] = None
    ) -> bool:
        """Releases the request and settles its future (with `answer`, or `error`).

        Returns:
          True if this call settled the future; False if it was settled or
          cancelled already.
        """
        if self.on_done is not None:
            cb, self.on_done = self.on_done, None
            try:
                cb()
            except Exception:  # pragma: no cover - a release never fails
                log.exception('releasing a finished request failed')
        if self.future.done():  # cancelled by the caller (Ctrl-C), or answered already
            return False
        try:
            if error is not None:
                self.future.set_exception(error)
            else:
                assert answer is not None, 'a request ends with an answer or an error'
                self.future.set_result(answer)
        except concurrent.futures.InvalidStateError:
            return False
        return True
