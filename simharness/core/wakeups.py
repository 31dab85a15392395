"""Awaiting `concurrent.futures.Future`s from an event loop, one wake-up per batch.

`asyncio.wrap_future` wakes the awaiting loop once per completed future: one
``call_soon_threadsafe`` each, a byte written to the loop's self-pipe. A driver
talking to N worker processes completes N futures per operation, one per
worker, usually together (the transport reads the answers in one pass), and
those writes were the largest single cost of the driver at 16 workers.
`await_future` queues each completion and wakes the loop once for all the
completions that arrive before the loop runs; the loop then settles them in
completion order.

Semantics are those of ``await asyncio.wrap_future(f)``: the result or the
exception of `f`; `f` cancelled cancels the awaiting future; the awaiting side
cancelled (its task cancelled) cancels `f`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import weakref
from typing import Any, List, Tuple

__all__ = ['await_future']


class _Batcher:
    """The completions waiting for one loop, and whether a wake-up is on its way."""

    __slots__ = ('_loop', '_lock', '_ready', '__weakref__')

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self._loop = loop
        self._lock = threading.Lock()
        self._ready: List[Tuple[asyncio.Future, concurrent.futures.Future]] = []

    def completed(self, waiter: asyncio.Future, fut: concurrent.futures.Future) -> None:
        """Runs in the completing thread (or the loop's, if `fut` was done already)."""
        with self._lock:
            self._ready.append((waiter, fut))
            if len(self._ready) > 1:  # a wake-up is queued and has not run yet
                return
        try:
            self._loop.call_soon_threadsafe(self._settle)
        except RuntimeError:  # the loop closed: nobody is waiting any more
            pass

    def _settle(self) -> None:
        with self._lock:
            ready, self._ready = self._ready, []
        for waiter, fut in ready:
            if waiter.done():  # the awaiting side was cancelled
                continue
            if fut.cancelled():
                waiter.cancel()
                continue
            exc = fut.exception()
            if exc is not None:
                waiter.set_exception(exc)
            else:
                waiter.set_result(fut.result())


_BATCHERS: 'weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Batcher]' = (
    weakref.WeakKeyDictionary()
)
_BATCHERS_LOCK = threading.Lock()


def _batcher(loop: asyncio.AbstractEventLoop) -> _Batcher:
    with _BATCHERS_LOCK:
        b = _BATCHERS.get(loop)
        if b is None:
            b = _BATCHERS[loop] = _Batcher(loop)
        return b


def await_future(fut: concurrent.futures.Future) -> 'asyncio.Future[Any]':
    """An asyncio future of the running loop that settles as `fut` does (see the module)."""
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future = loop.create_future()
    batcher = _batcher(loop)

    def cancel_source(w: asyncio.Future) -> None:
        if w.cancelled():
            fut.cancel()

    waiter.add_done_callback(cancel_source)
    fut.add_done_callback(lambda f: batcher.completed(waiter, f))
    return waiter
