"""The local transport: protocol messages over a pipe, their buffers through shared memory.

```
driver (pool reactor thread)                          worker process
  [REQUEST, header, locs] ──pipe──────────────────▶  buffers = views of locs
     locs[i]: bytes (small, inline) or                 (driver arena k / broadcast
     [segment, offset, nbytes] in the driver's         arena: read-only, valid for
     arena k or the pool's broadcast arena             this request only)
  [RESPONSE, header, locs, retired] ◀──pipe──────   big buffers written into a free
     the driver copies them out, or reads them         arena of the worker's (a new one
     in place until it is done with them (a            when every one is still read);
     partial reduction), then sends                    `retired`: its segments it
  [ACK, segment, ...] ────────────────────────────▶  unlinked; an arena is reused only
  [CLOSE] ────────────────────────────────────────▶  after its ACK; leave (unlink all)
```

A response read in place holds its arena until the driver is done with it,
so a worker that answers again meanwhile writes into another arena rather
than wait: the driver may be waiting for that very answer (another worker's
partial, another thread's request) before it lets go of the first.

Frames are msgpack arrays; the pipe framing is that of
`multiprocessing.Connection` (a 4-byte big-endian length), so the driver can
read and write the socket without blocking while the worker uses a plain
`Connection`. Shared-memory names and offsets live only here, never in the
protocol.
"""

from __future__ import annotations

import struct
from typing import Any, List, Sequence

import msgpack
import numpy as np

from simharness.core.buffers import fast_copyto, pooled_copy
from simharness.runtime.local.shm import ShmArena, SlotRef

F_READY = 1
F_START_ERROR = 2
F_REQUEST = 3
F_RESPONSE = 4
F_ACK = 5
F_CLOSE = 6

#: Buffers smaller than this travel inside the frame.
INLINE_BYTES = 4096

_ALIGN = 64


def _round64(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def as_bytes_view(buf: Any) -> np.ndarray:
    """A flat uint8 view of a buffer (copies only if it is not contiguous)."""
    a = np.ascontiguousarray(buf)
    return a.reshape(-1).view(np.uint8)


def arena_bytes_needed(buffers: Sequence[Any]) -> int:
    return sum(_round64(b.nbytes) for b in buffers if b.nbytes >= INLINE_BYTES)


def write_buffers(arena: Any, buffers: Sequence[Any]) -> List[Any]:
    """Places `buffers`: small ones inline (bytes), big ones into `arena` (reset first)."""
    need = arena_bytes_needed(buffers)
    if need:
        arena.reset()
        arena.ensure_capacity(need)
    locs: List[Any] = []
    for b in buffers:
        raw = as_bytes_view(b)
        if raw.nbytes < INLINE_BYTES:
            locs.append(raw.tobytes())
            continue
        off = arena.alloc(raw.nbytes)
        if raw.nbytes:
            fast_copyto(arena.view(off, np.uint8, (raw.nbytes,)), raw)
        locs.append([arena.name, off, raw.nbytes])
    return locs


def read_buffers(attachment: Any, locs: Sequence[Any], copy: bool) -> List[Any]:
    """The buffers of a frame: inline bytes, or views of shared memory.

    With `copy`, each view is copied out (the sender reuses its arena once
    acknowledged) into a reused 64-byte-aligned buffer (`core.buffers`): no
    fresh pages per response, and a tensor can adopt it without a copy.
    """
    out: List[Any] = []
    for loc in locs:
        if isinstance(loc, (bytes, bytearray)):
            out.append(loc)
            continue
        name, off, nbytes = loc
        view = attachment.read(SlotRef(name, off, '|u1', (nbytes,)))
        out.append(pooled_copy(view) if copy else view)
    return out


def segment_names(locs: Sequence[Any]) -> List[str]:
    """The shared-memory segments a frame's buffers lie in (in order, once each)."""
    names: List[str] = []
    for loc in locs:
        if isinstance(loc, list) and loc[0] not in names:
            names.append(loc[0])
    return names


class ResponseArenas:
    """A worker's arenas for its responses' big buffers, each busy until the driver ACKs it.

    `write` places a response in a free arena, making a new one when all are
    busy (never waiting: see the module docstring). Free arenas beyond
    `keep` are closed once their ACK comes. Segments closed or replaced
    (an arena grows under a new name) are collected for the next response's
    `retired` list, so that the driver unmaps them.

    Args:
      capacity: the first size of a new arena, in bytes.
      keep: free arenas kept for reuse.
    """

    def __init__(self, capacity: int, keep: int = 2):
        self._capacity = capacity
        self._keep = keep
        self._arenas: List[ShmArena] = [ShmArena(capacity)]
        self._busy: set = set()
        self._retired: List[str] = []

    @property
    def names(self) -> List[str]:
        return [a.name for a in self._arenas]

    def write(self, buffers: Sequence[Any]) -> List[Any]:
        """`write_buffers` into a free arena, which stays busy until acknowledged."""
        if not arena_bytes_needed(buffers):
            return write_buffers(self._arenas[0], buffers)  # all inline: no arena used
        arena = next((a for a in self._arenas if a.name not in self._busy), None)
        if arena is None:
            arena = ShmArena(self._capacity)
            self._arenas.append(arena)
        before = arena.name
        locs = write_buffers(arena, buffers)
        if arena.name != before:  # grown under a new name; the old one is unlinked
            self._retired.append(before)
        self._busy.add(arena.name)
        return locs

    def ack(self, names: Sequence[str]) -> None:
        """The driver is done with these segments."""
        self._busy.difference_update(names)
        free = [a for a in self._arenas if a.name not in self._busy]
        for arena in free[self._keep :]:
            self._arenas.remove(arena)
            self._retired.append(arena.name)
            arena.close()

    def take_retired(self) -> List[str]:
        retired, self._retired = self._retired, []
        return retired

    def close(self) -> None:
        """Closes (unlinks) every arena. Idempotent."""
        arenas, self._arenas = self._arenas, []
        for arena in arenas:
            arena.close()


def pack_frame(*parts: Any) -> bytes:
    return msgpack.packb(list(parts), use_bin_type=True)


def unpack_frame(data: Any) -> list:
    return msgpack.unpackb(data, raw=False, use_list=True)


def frame_with_length(payload: bytes) -> bytes:
    """`payload` with the length prefix of `multiprocessing.Connection.send_bytes`."""
    n = len(payload)
    if n > 0x7FFFFFFF:
        return struct.pack('!i', -1) + struct.pack('!Q', n) + payload
    return struct.pack('!i', n) + payload


class FrameReader:
    """Splits a byte stream into frames (the `Connection` framing), incrementally."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> List[bytes]:
        self._buf += data
        frames = []
        while True:
            if len(self._buf) < 4:
                break
            n = struct.unpack('!i', self._buf[:4])[0]
            head = 4
            if n == -1:
                if len(self._buf) < 12:
                    break
                n = struct.unpack('!Q', self._buf[4:12])[0]
                head = 12
            if len(self._buf) < head + n:
                break
            frames.append(bytes(self._buf[head : head + n]))
            del self._buf[: head + n]
        return frames
