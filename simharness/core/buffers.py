"""Reused, 64-byte-aligned numpy buffers for big arrays: no fresh page-faulting memory per call.

A big numpy allocation (glibc serves anything above 32 MB with a fresh
``mmap``) costs a page fault and the zeroing of every page on first touch,
about as much again as the copy that fills it. The hot path of a round
(a model ingested as a tensor, partials copied out of shared memory, sums)
allocates the same sizes call after call, so `BufferPool` keeps those
buffers and hands one out again once nothing refers to it any more.

"Nothing refers to it" is read from CPython's reference count: every
array made from a buffer (a view, a reshape, a dlpack export to TF, which
keeps the exporting array alive until the tensor is freed) holds a
reference to it. A buffer is reused only when the pool's own references
are the only ones left, so a value still in use -- held by a tensor, a
`Partial`, or by the user -- is never overwritten. Nothing has to be given
back by hand.
"""

from __future__ import annotations

import collections
import math
import os
import sys
import threading
import weakref
from typing import Any, Dict, List

import numpy as np

#: Alignment of every buffer handed out (a cache line; what dlpack needs).
ALIGNMENT = 64
#: Arrays smaller than this come from numpy directly (malloc reuses small blocks well).
MIN_POOLED_BYTES = 1 << 20


def _default_max_bytes() -> int:
    """An eighth of physical memory, between 256 MiB and 4 GiB."""
    try:
        ram = os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES')
    except (AttributeError, ValueError, OSError):  # no sysconf (Windows)
        ram = 8 << 30
    return max(256 << 20, min(4 << 30, ram // 8))


#: Bytes of buffers a pool keeps at most (in use or free).
DEFAULT_MAX_BYTES = _default_max_bytes()
#: Sizes whose free buffers a pool keeps (the most recently asked for).
DEFAULT_MAX_SIZES = 8


def _aligned(raw: np.ndarray, nbytes: int) -> np.ndarray:
    off = (-raw.ctypes.data) % ALIGNMENT
    return raw[off : off + nbytes]


def aligned_empty(shape: Any, dtype: Any) -> np.ndarray:
    """A fresh, uninitialized, C-contiguous array whose data is 64-byte aligned."""
    dt = np.dtype(dtype)
    shape = tuple(shape)
    nbytes = math.prod(shape) * dt.itemsize
    raw = np.empty(nbytes + ALIGNMENT, np.uint8)
    return _aligned(raw, nbytes).view(dt).reshape(shape)


class BufferPool:
    """Aligned buffers of exact sizes, reused once unreferenced (thread-safe).

    Args:
      max_bytes: the pool keeps buffers (in use or free) of at most this
        many bytes in all; beyond it, `empty` gives unpooled arrays.
      min_bytes: smaller requests are not pooled.
      max_sizes: the free buffers of at most this many sizes are kept (the
        most recently asked for): sizes that stop coming (the last, shorter
        slice of a cohort, a model of another run) do not pile up.
    """

    def __init__(
        self,
        max_bytes: int = DEFAULT_MAX_BYTES,
        min_bytes: int = MIN_POOLED_BYTES,
        max_sizes: int = DEFAULT_MAX_SIZES,
    ):
        self.max_bytes = int(max_bytes)
        self.min_bytes = int(min_bytes)
        self.max_sizes = int(max_sizes)
        self._lock = threading.Lock()
        self._by_size: 'collections.OrderedDict[int, List[np.ndarray]]' = collections.OrderedDict()
        self._bytes = 0
        self.reused = 0
        self.allocated = 0

    @property
    def pooled_bytes(self) -> int:
        """Bytes of the buffers the pool holds (in use or free)."""
        return self._bytes

    def empty(self, shape: Any, dtype: Any) -> np.ndarray:
        """An uninitialized, C-contiguous, 64-byte-aligned array (a pooled buffer when big).

        Its contents are whatever the buffer held last: write every element.
        """
        dt = np.dtype(dtype)
        shape = tuple(int(d) for d in shape)
        nbytes = math.prod(shape) * dt.itemsize
        if nbytes < self.min_bytes:
            return aligned_empty(shape, dt)
        raw = self._take(nbytes)
        return _aligned(raw, nbytes).view(dt).reshape(shape)

    def empty_like(self, a: np.ndarray) -> np.ndarray:
        """`empty` of `a`'s shape and dtype."""
        return self.empty(a.shape, a.dtype)

    def _take(self, nbytes: int) -> np.ndarray:
        size = nbytes + ALIGNMENT
        with self._lock:
            bufs = self._by_size.get(size)
            if bufs is not None:
                self._by_size.move_to_end(size)  # most recently asked for last
                for i in range(len(bufs)):
                    if sys.getrefcount(bufs[i]) <= 2:  # the list, the argument: free
                        raw = bufs.pop(i)
                        bufs.append(raw)  # most recently used last
                        self.reused += 1
                        return raw
            self._make_room(size)
            raw = np.empty(size, np.uint8)
            self.allocated += 1
            if self._bytes + size <= self.max_bytes:
                self._by_size.setdefault(size, []).append(raw)
                self._by_size.move_to_end(size)
                self._bytes += size
                self._drop_old_sizes()
            return raw

    def _drop_old_sizes(self) -> None:
        """Drops the free buffers of the least recently asked sizes beyond `max_sizes`."""
        for key in list(self._by_size)[: max(0, len(self._by_size) - self.max_sizes)]:
            self._drop_free(key)

    def _make_room(self, size: int) -> None:
        """Drops free buffers (least recently used first) until `size` more bytes fit."""
        if self._bytes + size <= self.max_bytes:
            return
        for key in list(self._by_size):
            self._drop_free(key, lambda: self._bytes + size <= self.max_bytes)

    def _drop_free(self, key: int, enough: Any = None) -> None:
        """Drops the free buffers of size `key`: all of them, or until `enough()` holds."""
        bufs = self._by_size[key]
        i = 0
        while i < len(bufs) and not (enough is not None and enough()):
            if sys.getrefcount(bufs[i]) <= 2:  # the list, the argument: free
                del bufs[i]
                self._bytes -= key
            else:
                i += 1
        if not bufs:
            del self._by_size[key]

    def clear(self) -> None:
        """Forgets every buffer (those in use live on with their users)."""
        with self._lock:
            self._by_size.clear()
            self._bytes = 0

    def stats(self) -> Dict[str, int]:
        """Counters: buffers reused and allocated, bytes pooled, buffers free now."""
        with self._lock:
            free = sum(
                1
                for bufs in self._by_size.values()
                for i in range(len(bufs))
                if sys.getrefcount(bufs[i]) <= 2
            )
            held = sum(len(b) for b in self._by_size.values())
        return {
            'reused': self.reused,
            'allocated': self.allocated,
            'pooled_bytes': self._bytes,
            'buffers': held,
            'free_buffers': free,
        }


#: The process' pool (driver, or a worker).
POOL = BufferPool()

#: Elementwise copies and sums at least this big are split across the CPUs this process
#: may use (one memcpy thread does not use all of a machine's memory bandwidth).
SPLIT_MIN_BYTES = 16 << 20


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity API (macOS)
        return os.cpu_count() or 1


def split_elementwise(fn: Any, out: np.ndarray, *ins: np.ndarray) -> None:
    """``fn(*ins, out=out)`` for an elementwise numpy `fn`, split over up to 4 threads when big.

    Every element is computed exactly as in one call (each element's
    operation does not depend on the others), so the bits are the same. Arrays
    must be C-contiguous and of `out`'s shape; otherwise, or when small, or
    with one CPU (a pinned worker), it is one call in this thread. The extra
    threads live for this call only.
    """
    if out.nbytes < SPLIT_MIN_BYTES:  # the common case, before asking for the CPUs (a syscall)
        fn(*ins, out=out)
        return
    parts = min(4, _cpus(), out.nbytes // (SPLIT_MIN_BYTES // 2))
    if (
        parts < 2
        or out.ndim == 0
        or not out.flags.c_contiguous
        or not all(
            isinstance(a, np.ndarray) and a.shape == out.shape and a.flags.c_contiguous for a in ins
        )
    ):
        fn(*ins, out=out)
        return
    flat_out = out.reshape(-1)
    flat_ins = [a.reshape(-1) for a in ins]
    bounds = np.linspace(0, flat_out.size, parts + 1).astype(np.int64)
    errors: List[BaseException] = []

    def run(lo: int, hi: int) -> None:
        try:
            fn(*(a[lo:hi] for a in flat_ins), out=flat_out[lo:hi])
        except BaseException as e:  # re-raised in the caller
            errors.append(e)

    threads = [
        threading.Thread(
            target=run,
            args=(int(bounds[k]), int(bounds[k + 1])),
            name='simharness-split',
            daemon=True,
        )
        for k in range(1, parts)
    ]
    for t in threads:
        t.start()
    run(int(bounds[0]), int(bounds[1]))
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def fast_copyto(dst: np.ndarray, src: np.ndarray) -> None:
    """``np.copyto(dst, src)`` of arrays of one shape and dtype (split when big)."""
    if dst.dtype != src.dtype:
        np.copyto(dst, src)
        return
    split_elementwise(_copy, dst, src)


def _copy(src: np.ndarray, out: np.ndarray) -> None:
    np.copyto(out, src, casting='no')


def pooled_copy(a: np.ndarray) -> np.ndarray:
    """A private, writable, C-contiguous copy of `a` (in a pooled, aligned buffer when big)."""
    if a.dtype.kind not in 'biufc' or a.nbytes < POOL.min_bytes:
        return np.array(a)  # small, or not plain numbers (objects, strings): numpy's own
    out = POOL.empty(a.shape, a.dtype)
    fast_copyto(out, a)
    return out


class SharedReads:
    """Memory another process wrote for this one to read (a broadcast), held in place.

    A worker offers the buffers of a request that the driver placed in its
    broadcast arena (`offer(token, views)`, writable views of that shared
    memory). While the request runs, `pin(arr)` turns an array lying in
    them into a view that a tensor may adopt without a copy; the driver
    then keeps those bytes as they are until every such view is freed. When
    the request is done, `close_offer(token)` says whether anything stayed
    pinned; the tokens whose last pinned view died since are collected by
    `take_unpinned()`, for the worker to tell the driver. Thread-safe: a
    view can be freed in any thread.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: Dict[Any, List[Any]] = {}  # token -> [(start, stop, writable uint8 view)]
        self._pins: Dict[Any, int] = {}
        self._unpinned: List[Any] = []

    def offer(self, token: Any, views: List[np.ndarray]) -> None:
        ranges = [(v.ctypes.data, v.ctypes.data + v.nbytes, v) for v in views]
        with self._lock:
            self._open[token] = ranges
            self._pins[token] = 0

    def pin(self, arr: np.ndarray) -> Any:
        """A writable view of the offered memory `arr` lies in, pinned while it lives; or None."""
        if not (isinstance(arr, np.ndarray) and arr.flags.c_contiguous and arr.nbytes):
            return None
        lo = arr.ctypes.data
        hi = lo + arr.nbytes
        with self._lock:
            for token, ranges in self._open.items():
                for start, stop, view in ranges:
                    if start <= lo and hi <= stop:
                        out = view[lo - start : hi - start].view(arr.dtype).reshape(arr.shape)
                        self._pins[token] += 1
                        weakref.finalize(out, self._unpin, token)
                        return out
        return None

    def _unpin(self, token: Any) -> None:
        with self._lock:
            self._pins[token] -= 1
            if not self._pins[token] and token not in self._open:
                del self._pins[token]
                self._unpinned.append(token)

    def close_offer(self, token: Any) -> bool:
        """Ends the offer of `token`: True if views of it are still pinned (then reported
        by `take_unpinned` once they are all freed)."""
        with self._lock:
            self._open.pop(token, None)
            if self._pins.get(token):
                return True
            self._pins.pop(token, None)
            return False

    def take_unpinned(self) -> List[Any]:
        with self._lock:
            out, self._unpinned = self._unpinned, []
        return out

    def pinned(self) -> int:
        """Tokens whose memory is still pinned (offers closed or not)."""
        with self._lock:
            return sum(1 for n in self._pins.values() if n)
