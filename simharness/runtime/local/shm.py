"""Shared-memory arenas: tensor bytes cross process boundaries without serialization.

::

    creator process (driver or a worker)           reader process(es)
    ------------------------------------           ------------------
    ShmArena --- creates, writes, unlinks ---> /dev/shm/simharness_<pid>_<hex>
      reset / alloc / write_array                        |
          |                                              | maps it (never unlinks)
          |  SlotRef(segment_name, offset, dtype, shape) v
          +------ small control message -----------> ShmAttachment
                  (pipe, socket ...)                   read -> views

One process creates a segment; it alone writes it and unlinks it (on
`close()`, when a ``with`` block exits, or -- as a safety net that warns --
when the arena is garbage collected or the interpreter exits). Readers
attach by name and only ever unmap. The control message carries the
`SlotRef`s (the local transport sends segment, offset and size in its
msgpack frames); the arrays themselves are never serialized. A creator killed
before it could clean up (SIGKILL, OOM) leaves its segments behind;
`reap_orphaned_segments` unlinks those whose creator pid is gone.

Synchronisation is the caller's business: a reader must be done with its
views (or have asked for copies) before the creator `reset()`s and
overwrites the slots. The usual request/response protocol gives this for
free.

Neither side talks to the `multiprocessing` resource tracker. In Python
< 3.13 `multiprocessing.shared_memory.SharedMemory` registers every segment
with the tracker, attachments included; the tracker is shared by a whole
process tree and keeps a *set* of names, so one reader's register/unregister
pair can erase the creator's entry or race another reader's, and a process
with a tracker of its own unlinks the segment when it exits. `SharedMemory`
also unmaps on `close()` even while a numpy array made with
``np.ndarray(buffer=shm.buf)`` still points into it (a segfault on the next
access). This module therefore maps segments itself with the same
primitives (``shm_open`` with mode 0o600, ``ftruncate``, ``mmap``) and makes
every view with `np.frombuffer`, which pins the mapping for as long as the
view lives.
"""

from __future__ import annotations

import errno
import math
import mmap
import numbers
import os
import secrets
import threading
import warnings
import weakref
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import psutil

from simharness.errors import SimharnessTypeError, SimharnessValueError

try:
    import _posixshmem
except ImportError:  # pragma: no cover - not POSIX (Windows)
    _posixshmem = None

ALIGNMENT = 64
"""Every slot offset is a multiple of this many bytes (a cache line, and
enough for any SIMD load). Segments are page aligned, so addresses are too."""

SEGMENT_PREFIX = 'simharness_'
"""Every segment created here is named ``simharness_<creator pid>_<hex>``."""

_SHM_DIR = '/dev/shm'
_SEGMENT_MODE = 0o600
# numpy dtype kinds that travel through shared memory: bool, signed and
# unsigned ints, floats, complex, timedelta, datetime. Others (object,
# str, bytes, void) stay in the control message.
_SHM_KINDS = frozenset('biufcmM')


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def _check_count(what: str, value: Any, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise SimharnessTypeError(
            f'{what} must be an int, got {value!r} of type {type(value).__name__}',
            expected=int,
            actual=type(value),
        )
    if value < minimum:
        raise SimharnessValueError(f'{what} must be >= {minimum}, got {value}')
    return int(value)


def _check_shape(shape: Any) -> Tuple[int, ...]:
    if isinstance(shape, numbers.Integral) and not isinstance(shape, bool):
        shape = (shape,)
    try:
        dims = tuple(shape)
    except TypeError:
        raise SimharnessTypeError(
            f'shape must be a tuple of ints, got {shape!r}', expected=tuple, actual=type(shape)
        ) from None
    return tuple(_check_count('shape dimension', d) for d in dims)


def _check_dtype(dtype: Any) -> np.dtype:
    try:
        dt = np.dtype(dtype)
    except TypeError as e:
        raise SimharnessTypeError(
            f'{dtype!r} is not a numpy dtype', expected=np.dtype, actual=type(dtype)
        ) from e
    if dt.kind not in _SHM_KINDS:
        raise SimharnessTypeError(
            f'dtype {dt} cannot live in shared memory; expected a numeric, bool or datetime dtype',
            expected='numeric dtype',
            actual=dt,
        )
    return dt


def _require_posix_shm() -> None:
    if _posixshmem is None:  # pragma: no cover - Windows
        raise SimharnessValueError(
            'POSIX shared memory (_posixshmem) is not available on this platform'
        )


@dataclass(frozen=True)
class SlotRef:
    """Where one array lives: a small, picklable handle to a slot of an arena.

    Attributes:
        segment_name: name of the shared-memory segment (no leading slash).
        offset: byte offset of the slot, a multiple of `ALIGNMENT`.
        dtype_str: the array's ``dtype.str`` (byte order included), e.g. '<f4'.
        shape: the array's shape.
    """

    segment_name: str
    offset: int
    dtype_str: str
    shape: Tuple[int, ...]

    @property
    def dtype(self) -> np.dtype:
        """The numpy dtype of the array."""
        return np.dtype(self.dtype_str)

    @property
    def nbytes(self) -> int:
        """Size of the array in bytes."""
        return math.prod(self.shape) * self.dtype.itemsize

    def __reduce__(self):
        # A plain tuple of fields: smaller on the wire than the default.
        return (SlotRef, (self.segment_name, self.offset, self.dtype_str, self.shape))


def _reserve(fd: int, name: str, size: int) -> None:
    """Reserves the segment's pages now, where the OS allows it.

    On Linux a tmpfs segment that ftruncate made bigger than the free space
    of /dev/shm kills the process with SIGBUS on first touch (Docker's
    default /dev/shm is 64 MB). Reserving up front turns that into an error.
    The page zeroing costs what the first touch would have cost anyway.
    """
    if not hasattr(os, 'posix_fallocate'):
        return
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as e:
        if e.errno == errno.ENOSPC:
            raise SimharnessValueError(
                f'not enough shared memory for segment {name!r} of {size} bytes: '
                f'{_SHM_DIR} is full or too small (in Docker, raise --shm-size)'
            ) from e
        if e.errno not in (errno.EINVAL, errno.EOPNOTSUPP, errno.ENOSYS):
            raise


class _Segment:
    """One POSIX shared-memory object mapped into this process.

    Knows nothing about ownership: `ShmArena` decides who unlinks.
    """

    __slots__ = ('name', 'size', '_mmap')

    def __init__(self, name: str, mm: mmap.mmap):
        self.name = name
        self.size = len(mm)
        self._mmap: Optional[mmap.mmap] = mm

    @classmethod
    def create(cls, size: int) -> '_Segment':
        _require_posix_shm()
        flags = os.O_CREAT | os.O_EXCL | os.O_RDWR
        with _CREATE_LOCK:
            if _CREATION_STOPPED:
                raise SimharnessValueError(
                    'this process is leaving (its driver died): it creates no segment'
                )
            while True:
                name = f'{SEGMENT_PREFIX}{os.getpid()}_{secrets.token_hex(6)}'
                try:
                    fd = _posixshmem.shm_open('/' + name, flags, mode=_SEGMENT_MODE)
                except FileExistsError:
                    continue
                break
        try:
            try:
                # shm_open applies the umask, which may clear owner bits too.
                os.fchmod(fd, _SEGMENT_MODE)
            except OSError:  # pragma: no cover - platform without fchmod on shm
                pass
            os.ftruncate(fd, size)
            _reserve(fd, name, size)
            mm = mmap.mmap(fd, size)
        except BaseException:
            _posixshmem.shm_unlink('/' + name)
            raise
        finally:
            os.close(fd)  # the mapping keeps its own reference
        return cls(name, mm)

    @classmethod
    def attach(cls, name: str) -> '_Segment':
        _require_posix_shm()
        if not isinstance(name, str) or not name or '/' in name:
            raise SimharnessValueError(
                f'segment name must be a non-empty str without "/", got {name!r}'
            )
        try:
            fd = _posixshmem.shm_open('/' + name, os.O_RDWR, mode=_SEGMENT_MODE)
        except FileNotFoundError as e:
            raise SimharnessValueError(
                f'shared-memory segment {name!r} does not exist (closed or '
                f'replaced by its creator?)'
            ) from e
        try:
            mm = mmap.mmap(fd, os.fstat(fd).st_size)
        finally:
            os.close(fd)
        return cls(name, mm)

    def ndarray(self, offset: int, dtype: np.dtype, shape: Tuple[int, ...]) -> np.ndarray:
        """A zero-copy view; it keeps the mapping alive while it lives."""
        count = math.prod(shape)
        if count == 0:
            return np.empty(shape, dtype)
        end = offset + count * dtype.itemsize
        if end > self.size:
            raise SimharnessValueError(
                f'slot [{offset}, {end}) lies outside segment {self.name!r} of {self.size} bytes'
            )
        if self._mmap is None:
            raise SimharnessValueError(f'segment {self.name!r} is closed')
        return np.frombuffer(self._mmap, dtype=dtype, count=count, offset=offset).reshape(shape)

    @property
    def mapping(self) -> Optional[mmap.mmap]:
        """The segment's memory map (None once closed)."""
        return self._mmap

    def copy_prefix_from(self, other: '_Segment', nbytes: int) -> None:
        src_map = other.mapping
        if self._mmap is None or src_map is None:
            raise SimharnessValueError('cannot copy between closed segments')
        with memoryview(self._mmap) as dst, memoryview(src_map) as src:
            dst[:nbytes] = src[:nbytes]

    def close(self) -> None:
        """Unmaps, or leaves that to the last live view (idempotent)."""
        mm, self._mmap = self._mmap, None
        if mm is not None:
            try:
                mm.close()
            except BufferError:
                # Arrays still point into the mapping; mmap unmaps itself
                # when the last of them is freed.
                pass

    def unlink(self) -> None:
        """Removes the name (idempotent); mappings stay valid until closed."""
        try:
            _posixshmem.shm_unlink('/' + self.name)
        except FileNotFoundError:
            pass


#: Held while a segment's name is created; `stop_creating` takes it.
_CREATE_LOCK = threading.Lock()
_CREATION_STOPPED = False


def _new_create_lock() -> None:
    # A child forked while another thread created a segment would find the lock held.
    global _CREATE_LOCK
    _CREATE_LOCK = threading.Lock()


if hasattr(os, 'register_at_fork'):
    os.register_at_fork(after_in_child=_new_create_lock)


def stop_creating() -> None:
    """From now on this process creates no segment (`_Segment.create` raises).

    For a process about to list and unlink its own segments and exit (a worker's
    lifeline, its driver dead): a segment its other threads were creating meanwhile
    exists (has its name) once this returns, so the listing sees it, and none comes
    after it.
    """
    global _CREATION_STOPPED
    with _CREATE_LOCK:
        _CREATION_STOPPED = True


def _finalize_arena(segment: _Segment, creator_pid: int) -> None:
    """Safety net of an arena that was never closed."""
    if os.getpid() != creator_pid:
        return  # a forked copy: the segment belongs to the parent
    warnings.warn(
        f'ShmArena segment {segment.name!r} was not closed; unlinking it. '
        f'Call close() or use the arena as a context manager.',
        ResourceWarning,
        stacklevel=2,
    )
    try:
        segment.close()
    finally:
        segment.unlink()


class ShmArena:
    """A shared-memory segment owned by this process, with a bump allocator.

    The arena creates one segment (owner-only permissions, name
    ``simharness_<pid>_<hex>``), hands out 64-byte-aligned slots from it and
    unlinks it on `close()`. Readers in other processes attach with
    `ShmAttachment`. When a message does not fit, `ensure_capacity` replaces
    the segment by a bigger one under a new name.

    Not thread-safe: one owner at a time. Not picklable: send `name` or
    `SlotRef`s instead. In a forked child, `close()` only unmaps; the
    parent still owns (and unlinks) the segment.

    Args:
        capacity: minimum size in bytes (rounded up to whole pages).

    Raises:
        SimharnessValueError: if `capacity` < 1.
        SimharnessTypeError: if `capacity` is not an int.
    """

    def __init__(self, capacity: int = 1 << 20):
        capacity = _check_count('capacity', capacity, minimum=1)
        self._creator_pid = os.getpid()
        self._used = 0
        self._closed = False
        self._segment = _Segment.create(_round_up(capacity, mmap.PAGESIZE))
        self._finalizer = weakref.finalize(self, _finalize_arena, self._segment, self._creator_pid)

    # -- properties ---------------------------------------------------------

    @property
    def name(self) -> str:
        """Name of the current segment (changes when `ensure_capacity` grows it)."""
        return self._segment.name

    @property
    def capacity(self) -> int:
        """Size of the current segment in bytes."""
        return self._segment.size

    @property
    def used(self) -> int:
        """Bytes handed out since the last `reset()` (a multiple of 64)."""
        return self._used

    @property
    def closed(self) -> bool:
        """Whether `close()` was called."""
        return self._closed

    # -- allocation ---------------------------------------------------------

    def reset(self) -> None:
        """Forgets every slot: the next `alloc` starts at offset 0 again.

        Raises:
            SimharnessValueError: if the arena is closed.
        """
        self._check_open()
        self._used = 0

    def alloc(self, nbytes: int) -> int:
        """Reserves a slot of `nbytes` bytes.

        Args:
            nbytes: size of the slot; 0 is allowed (no space is used).

        Returns:
            The slot's byte offset, a multiple of `ALIGNMENT`.

        Raises:
            SimharnessValueError: if the slot does not fit (call
                `ensure_capacity` first) or the arena is closed.
        """
        self._check_open()
        nbytes = _check_count('nbytes', nbytes)
        offset = self._used
        if offset + nbytes > self.capacity:
            raise SimharnessValueError(
                f'ShmArena {self.name!r} is full: {nbytes} bytes requested, '
                f'{self.capacity - offset} of {self.capacity} free; call '
                f'ensure_capacity({offset + nbytes}) first'
            )
        self._used = offset + _round_up(nbytes, ALIGNMENT)
        return offset

    def ensure_capacity(self, nbytes: int) -> bool:
        """Makes the segment at least `nbytes` big, replacing it if needed.

        A new segment is at least twice the old one. The bytes handed out so
        far are copied over and `used` is kept, so offsets stay meaningful;
        but `SlotRef`s made before name the old segment, which is unlinked:
        readers must attach to the new `name`.

        Args:
            nbytes: the total capacity needed, in bytes.

        Returns:
            True if the segment was replaced (its name changed).

        Raises:
            SimharnessValueError: if the arena is closed.
        """
        self._check_open()
        nbytes = _check_count('nbytes', nbytes)
        if nbytes <= self.capacity:
            return False
        new_size = _round_up(max(nbytes, 2 * self.capacity), mmap.PAGESIZE)
        new = _Segment.create(new_size)
        try:
            if self._used:
                new.copy_prefix_from(self._segment, self._used)
            new_finalizer = weakref.finalize(self, _finalize_arena, new, self._creator_pid)
        except BaseException:
            new.close()
            new.unlink()
            raise
        old, self._segment = self._segment, new
        self._finalizer.detach()
        self._finalizer = new_finalizer
        try:
            old.close()
        finally:
            old.unlink()
        return True

    # -- access -------------------------------------------------------------

    def view(self, offset: int, dtype: Any, shape: Any) -> np.ndarray:
        """A writable zero-copy numpy view of part of the segment.

        The view stays valid (the memory stays mapped) as long as it lives,
        even after `close()`.

        Args:
            offset: byte offset (normally from `alloc`).
            dtype: a numeric numpy dtype.
            shape: the array shape.

        Returns:
            The view.

        Raises:
            SimharnessValueError: if it lies outside the segment or the arena
                is closed.
            SimharnessTypeError: if `dtype` is not numeric.
        """
        self._check_open()
        offset = _check_count('offset', offset)
        return self._segment.ndarray(offset, _check_dtype(dtype), _check_shape(shape))

    def write_array(self, arr: np.ndarray) -> SlotRef:
        """Copies `arr` into a fresh slot.

        Args:
            arr: a numeric numpy array (any layout; stored C-contiguous).

        Returns:
            The slot's `SlotRef`.

        Raises:
            SimharnessTypeError: if `arr` is not a numeric numpy array.
            SimharnessValueError: if it does not fit or the arena is closed.
        """
        if not isinstance(arr, np.ndarray):
            raise SimharnessTypeError(
                f'write_array expects a numpy array, got {type(arr).__name__}',
                expected=np.ndarray,
                actual=type(arr),
            )
        dtype = _check_dtype(arr.dtype)
        offset = self.alloc(arr.nbytes)
        if arr.size:
            np.copyto(self._segment.ndarray(offset, dtype, arr.shape), arr, casting='no')
        return SlotRef(self.name, offset, dtype.str, tuple(arr.shape))

    def read(self, ref: SlotRef) -> np.ndarray:
        """A writable view of a slot of this arena (the creator's side of `read`).

        Raises:
            SimharnessValueError: if `ref` names another segment.
        """
        if ref.segment_name != self.name:
            raise SimharnessValueError(
                f'SlotRef names segment {ref.segment_name!r}, this arena is {self.name!r}'
            )
        return self.view(ref.offset, ref.dtype_str, ref.shape)

    # -- lifetime -----------------------------------------------------------

    def close(self) -> None:
        """Unmaps and unlinks the segment (idempotent).

        Views still alive keep their memory mapped until they are freed.
        """
        if self._closed:
            return
        self._closed = True
        self._finalizer.detach()
        segment = self._segment
        try:
            segment.close()
        finally:
            if os.getpid() == self._creator_pid:
                segment.unlink()

    def __enter__(self) -> 'ShmArena':
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __reduce__(self):
        raise SimharnessTypeError(
            'a ShmArena cannot be pickled (it owns its segment); send its name '
            'or SlotRefs and attach with ShmAttachment',
            expected=SlotRef,
            actual=ShmArena,
        )

    def __repr__(self) -> str:
        state = 'closed' if self._closed else f'{self._used}/{self.capacity} bytes used'
        return f'ShmArena({self.name!r}, {state})'

    def _check_open(self) -> None:
        if self._closed:
            raise SimharnessValueError(f'ShmArena {self.name!r} is closed')


class ShmAttachment:
    """The reader's side: maps segments by name and reads slots as views.

    Attaching never unlinks and never registers with the resource tracker.
    Mappings are cached by segment name until `release` or `close`.
    """

    def __init__(self) -> None:
        self._segments: Dict[str, _Segment] = {}
        self._closed = False

    @property
    def names(self) -> Tuple[str, ...]:
        """Names of the segments currently mapped."""
        return tuple(self._segments)

    def attach(self, name: str) -> None:
        """Maps segment `name` now (`read` does it on first use anyway).

        Raises:
            SimharnessValueError: if no such segment exists or this
                attachment is closed.
        """
        self._segment(name)

    def read(self, ref: SlotRef, writable: bool = False) -> np.ndarray:
        """A read-only zero-copy view of the slot `ref` (`writable`: a writable one).

        The view keeps its mapping alive while it lives. Its contents change
        if the creator reuses the slot: copy what must outlive the message.
        A writable view is for a consumer that needs one to hold the bytes
        in place (dlpack exports no read-only array) and never writes.

        Raises:
            SimharnessTypeError: if `ref` is not a `SlotRef`.
            SimharnessValueError: if the segment does not exist or the slot
                lies outside it.
        """
        if not isinstance(ref, SlotRef):
            raise SimharnessTypeError(
                f'read expects a SlotRef, got {type(ref).__name__}',
                expected=SlotRef,
                actual=type(ref),
            )
        arr = self._segment(ref.segment_name).ndarray(ref.offset, ref.dtype, tuple(ref.shape))
        arr.flags.writeable = bool(writable)
        return arr

    def release(self, name: str) -> None:
        """Forgets segment `name` (e.g. after its creator replaced it)."""
        segment = self._segments.pop(name, None)
        if segment is not None:
            segment.close()

    def close(self) -> None:
        """Unmaps every segment (idempotent); live views keep theirs."""
        self._closed = True
        while self._segments:
            self._segments.popitem()[1].close()

    def __enter__(self) -> 'ShmAttachment':
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f'ShmAttachment({list(self._segments)!r})'

    def _segment(self, name: str) -> _Segment:
        if self._closed:
            raise SimharnessValueError('ShmAttachment is closed')
        segment = self._segments.get(name)
        if segment is None:
            segment = self._segments[name] = _Segment.attach(name)
        return segment


def list_leaked_segments(prefix: str = SEGMENT_PREFIX) -> List[str]:
    """Names of the shared-memory segments in /dev/shm starting with `prefix`.

    Segments of this library are named ``simharness_<creator pid>_<hex>``,
    so ``prefix=f'simharness_{os.getpid()}_'`` lists those this process
    created. Returns [] where /dev/shm does not exist (macOS, Windows).
    """
    try:
        entries = os.listdir(_SHM_DIR)
    except OSError:
        return []
    return sorted(n for n in entries if n.startswith(prefix))


#: Seconds of clock slack when comparing a process' start time with a
#: segment's timestamps: psutil derives start times from the boot time,
#: which /proc gives to the second only.
_CLOCK_SLACK_SECONDS = 2.0


def _creator_pid(name: str) -> Optional[int]:
    """The pid in ``simharness_<pid>_<hex>``, or None for another name."""
    if not name.startswith(SEGMENT_PREFIX):
        return None
    pid_text, sep, rest = name[len(SEGMENT_PREFIX) :].partition('_')
    if not sep or not rest or not pid_text.isdigit():
        return None
    pid = int(pid_text)
    return pid if pid > 0 else None


def creator_gone(pid: int, segment_time: float) -> bool:
    """Whether process `pid` cannot be the (living) creator of a segment (or anything else)
    last changed at `segment_time` (seconds since the epoch).

    Gone: no such process, a zombie (it exited and maps nothing any more),
    or a process started after the segment existed (the pid was reused).
    Anything uncertain (no permission to look) counts as alive.
    """
    if not psutil.pid_exists(pid):
        return True
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return True
        return proc.create_time() > segment_time + _CLOCK_SLACK_SECONDS
    except psutil.NoSuchProcess:  # exited meanwhile (ZombieProcess included)
        return True
    except (psutil.AccessDenied, OSError):
        return False


def reap_orphaned_segments() -> List[str]:
    """Unlinks the segments of this library whose creator process is gone.

    A creator that dies without running its cleanup (SIGKILL, the OOM
    killer, a crash in native code) leaves its segments in /dev/shm, and
    nothing else would remove them. Segment names carry the creator's pid
    (``simharness_<pid>_<hex>``): this removes every such segment owned by
    the current user whose pid is not running, is a zombie, or belongs to a
    process started after the segment was last changed (a reused pid).
    A segment of a live process is never removed. Unlinking only removes the
    name: processes that still map a segment keep their mapping.

    Safe to call from several processes at once (a segment that vanished
    meanwhile is skipped). Limitation: it trusts this pid namespace, so
    containers that share /dev/shm (``--ipc=host``) but not pids, under one
    uid, would see each other's live segments as orphans.

    Returns:
        The names removed, sorted; [] where /dev/shm does not exist.
    """
    uid = os.getuid() if hasattr(os, 'getuid') else None
    removed = []
    for name in list_leaked_segments():
        pid = _creator_pid(name)
        if pid is None:
            continue
        try:
            st = os.stat(os.path.join(_SHM_DIR, name))
        except OSError:  # removed meanwhile
            continue
        if uid is not None and st.st_uid != uid:
            continue
        if not creator_gone(pid, max(st.st_mtime, st.st_ctime)):
            continue
        try:
            if _posixshmem is not None:
                _posixshmem.shm_unlink('/' + name)
            else:  # pragma: no cover - Linux always has _posixshmem
                os.unlink(os.path.join(_SHM_DIR, name))
        except (FileNotFoundError, PermissionError):
            continue
        removed.append(name)
    return removed
