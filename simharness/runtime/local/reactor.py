"""The local wing: the pool's one I/O thread (a selector over every worker's socket and sentinel).

The reactor knows the workers only as `Polled` objects (the pool's `WorkerHandle`s)
and calls their public methods alone.
"""

from __future__ import annotations

import logging
import os
import selectors
import threading
import time
import weakref
from typing import Any, Callable, Dict, List, Optional, Protocol, Set, Tuple

from simharness.errors import ExecutorClosedError


#: The `pool.WorkerPool` of the reactor (pool.py imports this module).
_WorkerPool = Any


log = logging.getLogger(__name__)


class Polled(Protocol):
    """What the reactor polls: one worker's socket and process sentinel (a `WorkerHandle`).

    The reactor thread calls these; each takes the locks it needs.
    """

    def poll_fds(self) -> Optional[Tuple[int, int]]:
        """(socket, process sentinel) of the running worker; None when there is none."""

    def on_wake(self) -> bool:
        """Requests were submitted: writes what the socket takes; True when all of it."""

    def on_readable(self) -> Optional[bool]:
        """Reads the answers, then writes as `on_wake`; None on EOF (the sentinel follows)."""

    def on_writable(self) -> bool:
        """The socket takes more: writes; True when all of it was written."""

    def on_dead(self) -> None:
        """The process exited: fails its requests and frees its resources."""

    def check_liveness(self, now: float) -> None:
        """Kills a worker whose oldest request is past its deadline or that makes no progress."""

    def fail_all(self, error_for: Callable[[Any], BaseException]) -> None:
        """Fails every request queued or in flight."""


class Reactor:
    """The pool's I/O thread: a selector over every worker's socket and sentinel."""

    def __init__(self, pool: _WorkerPool):
        self._pool_ref = weakref.ref(pool)
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._sel.register(self._wake_r, selectors.EVENT_READ, None)
        self._lock = threading.Lock()
        self._dirty: Set[Polled] = set()
        self._register: List[Polled] = []
        self._unregister: List[Tuple[Polled, threading.Event]] = []
        self._registered: Dict[Polled, Tuple[int, int]] = {}
        self._stopping = False
        # A byte is in the wake pipe (or about to be): later wake-ups need not write
        # another (one write per batch of submits, not one per request).
        self._wake_pending = False
        #: Passes that found submitted work only after a select timed out: a submit whose
        #: wake-up was lost waits up to the timeout (0.25 s). Near 0 (a submit landing just
        #: as a select times out); tests read it.
        self.late_pickups = 0
        self._thread: Optional[threading.Thread] = None

    def _ensure_thread(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name='simharness-pool-reactor', daemon=True
            )
            self._thread.start()

    def wake(self, handle: Optional[Polled] = None) -> None:
        with self._lock:
            if handle is not None:
                self._dirty.add(handle)
            self._ensure_thread()
            if self._wake_pending:
                return
            self._wake_pending = True
        try:
            os.write(self._wake_w, b'x')
        except (BlockingIOError, OSError):
            pass  # a wake-up is already pending (or we are closing)

    def register(self, handle: Polled) -> None:
        with self._lock:
            self._register.append(handle)
        self.wake(handle)

    def unregister(self, handle: Polled) -> None:
        """Forgets `handle` (waits until the reactor has let go of its fds)."""
        done = threading.Event()
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._drop(handle)
                return
            self._unregister.append((handle, done))
        self.wake()
        if threading.current_thread() is not self._thread:
            done.wait(10)

    def _drop(self, handle: Polled) -> None:
        keys = self._registered.pop(handle, None)
        if keys:
            for fd in keys:
                try:
                    self._sel.unregister(fd)
                except (KeyError, ValueError):
                    pass

    def stop(self) -> None:
        with self._lock:
            self._stopping = True
            thread = self._thread
        try:
            os.write(self._wake_w, b'x')
        except OSError:
            pass
        if thread is not None and thread is not threading.current_thread():
            thread.join(10)
        self._sel.close()
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass

    def _run(self) -> None:
        try:
            self._loop()
        except Exception:  # pragma: no cover - a bug: fail every request rather than hang
            log.exception('simharness pool reactor failed')
            pool = self._pool_ref()
            if pool is not None:
                for h in pool.handles:
                    h.fail_all(
                        lambda c: ExecutorClosedError(
                            'the worker pool reactor failed (see the log)'
                        )
                    )

    def _loop(self) -> None:
        last_check = time.monotonic()
        timed_out = False
        while True:
            with self._lock:
                if self._stopping:
                    return
                registering, self._register = self._register, []
                unregistering, self._unregister = self._unregister, []
            for h, done in unregistering:
                self._drop(h)
                done.set()
            for h in registering:
                self._drop(h)
                fds = h.poll_fds()
                if fds is None:
                    continue
                fd, sentinel = fds
                self._sel.register(fd, selectors.EVENT_READ, (h, 'io'))
                self._sel.register(sentinel, selectors.EVENT_READ, (h, 'sentinel'))
                self._registered[h] = (fd, sentinel)
            with self._lock:
                dirty, self._dirty = self._dirty, set()
            if timed_out and dirty:
                self.late_pickups += 1
            for h in dirty:
                if h in self._registered:
                    self._watch_writes(h, h.on_wake())
            # The same pace busy or idle: a request sent directly by its caller
            # (`WorkerHandle.submit`, sent directly) does not wake this thread, and its
            # worker's liveness is checked every 0.25 s all the same.
            events = self._sel.select(0.25)
            timed_out = not events
            for key, mask in events:
                if key.data is None:
                    try:
                        while os.read(self._wake_r, 4096):
                            pass
                    except (BlockingIOError, OSError):
                        pass
                    # After the drain (a byte written meanwhile was read with it: cleared
                    # before, the flag would stay set with an empty pipe and later wake-ups
                    # would wait for the select timeout) and before the next pass takes the
                    # dirty set (a wake-up that saw the flag set is in that set).
                    with self._lock:
                        self._wake_pending = False
                    continue
                h, what = key.data
                if h not in self._registered:
                    continue
                if what == 'sentinel':
                    self._drop(h)
                    h.on_dead()
                    continue
                if mask & selectors.EVENT_READ:
                    done = h.on_readable()  # answers free the driver arena for queued requests
                    if done is None:
                        continue  # EOF: the sentinel follows
                else:
                    done = h.on_writable()
                self._watch_writes(h, done)
            now = time.monotonic()
            if now - last_check >= 0.25:
                last_check = now
                for h in list(self._registered):
                    h.check_liveness(now)

    def _watch_writes(self, h: Polled, done: bool) -> None:
        """Selects `h`'s socket for writing too while it has bytes left (`done` False)."""
        keys = self._registered.get(h)
        if not keys:
            return
        events = selectors.EVENT_READ | (0 if done else selectors.EVENT_WRITE)
        try:
            if self._sel.get_key(keys[0]).events != events:
                self._sel.modify(keys[0], events, (h, 'io'))
        except (KeyError, ValueError):
            pass
