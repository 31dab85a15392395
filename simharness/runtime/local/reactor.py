"""The local wing: the pool's one I/O thread (a selector over every worker's socket and sentinel)."""

from __future__ import annotations

import logging
import os
import selectors
import threading
import time
import weakref
from typing import Any, Dict, List, Optional, Tuple

from simharness.errors import ExecutorClosedError
from simharness.runtime.local.handle import WorkerHandle


#: The `pool.WorkerPool` of the reactor (pool.py imports this module).
_WorkerPool = Any


log = logging.getLogger(__name__)


class _Reactor:
    """The pool's I/O thread: a selector over every worker's socket and sentinel."""

    def __init__(self, pool: _WorkerPool):
        self._pool_ref = weakref.ref(pool)
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._sel.register(self._wake_r, selectors.EVENT_READ, None)
        self._lock = threading.Lock()
        self._dirty: set = set()
        self._register: List[WorkerHandle] = []
        self._unregister: List[Tuple[WorkerHandle, threading.Event]] = []
        self._registered: Dict[WorkerHandle, tuple] = {}
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
            self._thread = threading.Thread(target=self._run, name='simharness-pool-reactor',
                                            daemon=True)
            self._thread.start()

    def wake(self, handle: Optional[WorkerHandle] = None) -> None:
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

    def register(self, handle: WorkerHandle) -> None:
        with self._lock:
            self._register.append(handle)
        self.wake(handle)

    def unregister(self, handle: WorkerHandle) -> None:
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

    def _drop(self, handle: WorkerHandle) -> None:
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
                    h._fail_all(lambda c: ExecutorClosedError(
                        'the worker pool reactor failed (see the log)'))

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
                fd, proc = h._fd, h._proc
                if fd is None or proc is None:
                    continue
                self._sel.register(fd, selectors.EVENT_READ, (h, 'io'))
                self._sel.register(proc.sentinel, selectors.EVENT_READ, (h, 'sentinel'))
                self._registered[h] = (fd, proc.sentinel)
            with self._lock:
                dirty, self._dirty = self._dirty, set()
            if timed_out and dirty:
                self.late_pickups += 1
            for h in dirty:
                if h in self._registered:
                    with h._io_lock:
                        h._pump()
                        self._flush(h)
            # The same pace busy or idle: a request sent directly by its caller
            # (`WorkerHandle._send_directly`) does not wake this thread, and its
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
                    h._died()
                    continue
                with h._io_lock:
                    if mask & selectors.EVENT_READ:
                        if not h._read():
                            continue  # EOF: the sentinel follows
                        h._pump()  # answers free the driver arena for queued requests
                    self._flush(h)
            now = time.monotonic()
            if now - last_check >= 0.25:
                last_check = now
                for h in list(self._registered):
                    h._check_liveness(now)

    def _flush(self, h: WorkerHandle) -> None:
        keys = self._registered.get(h)
        if not keys:
            return
        done = h._flush()
        events = selectors.EVENT_READ | (0 if done else selectors.EVENT_WRITE)
        try:
            if self._sel.get_key(keys[0]).events != events:
                self._sel.modify(keys[0], events, (h, 'io'))
        except (KeyError, ValueError):
            pass
