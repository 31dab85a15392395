"""What a benchmark measures besides its own time: machine speed, peak memory, a result hash.

Light: numpy and the standard library only (the pytest plugin imports this
module in every pytest run of a project that has simharness installed).

* `calibration_workload` / `time_calibration`: a fixed single-threaded CPU
  workload (a Python loop and a numpy sort, about 1 ms on an idle 2-core VM)
  timed right before each timed round, so that a saved run carries the
  machine's speed and noise *at the time* next to its own round times.
* `PeakRss`: the peak resident set size of the driver and of given worker
  processes over a block (Linux: the kernel's high-water mark ``VmHWM``,
  reset by writing ``5`` to ``/proc/<pid>/clear_refs``; elsewhere the RSS
  after the block, which is a lower bound, and the method says so).
* `fingerprint`: a SHA-256 of a result (numpy arrays, tensors, scalars and
  Python / simharness containers), so that a speed-up that changes results
  is seen.
"""

from __future__ import annotations

import hashlib
import math
import os
import struct as _struct
import time
from typing import Any, Callable, Dict, Iterable, List, Optional

import numpy as np
import psutil

__all__ = [
    'CALIBRATION_WORKLOAD',
    'PeakRss',
    'calibration_workload',
    'fingerprint',
    'time_calibration',
]

#: Name and version of the calibration workload; runs are normalized by it
#: only when both were timed with the same one.
CALIBRATION_WORKLOAD = 'py-loop-9000+np-sort-4096/v1'

_CAL_DATA = np.random.default_rng(12345).random(4096)


def calibration_workload() -> int:
    """The fixed workload (about 1 ms): 9,000 Python integer steps and a sort of 4,096 floats."""
    s = 0
    for i in range(9000):
        s += i * i % 7
    np.sort(_CAL_DATA)
    return s


def time_calibration(timer: Callable[[], float] = time.perf_counter) -> float:
    """Seconds one `calibration_workload` call takes now."""
    t0 = timer()
    calibration_workload()
    return timer() - t0


# ------------------------------------------------------------------ peak memory


def _read_hwm(pid: int) -> Optional[int]:
    try:
        with open(f'/proc/{pid}/status', encoding='ascii', errors='replace') as f:
            for line in f:
                if line.startswith('VmHWM:'):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _reset_hwm(pid: int) -> bool:
    try:
        with open(f'/proc/{pid}/clear_refs', 'w', encoding='ascii') as f:
            f.write('5')
        return True
    except OSError:
        return False


def _rss(pid: int) -> Optional[int]:
    try:
        return int(psutil.Process(pid).memory_info().rss)
    except Exception:  # psutil missing or the process is gone  # pylint: disable=broad-except
        return None


class PeakRss:
    """Peak RSS of the driver (this process) and of worker processes over a ``with`` block.

    Args:
      worker_pids: called at the start and the end of the block (workers
        may have been replaced in between; a pid present at both is read).
      include_new: also read the pids that appear only at the end (processes
        started inside the block: their whole life's peak is the block's).

    After the block: `driver_bytes`, `worker_bytes` (pid -> bytes), `method`
    (``'VmHWM'``: the kernel's exact peak since the block started;
    ``'rss-after'``: the RSS at the end, where the peak cannot be reset).
    """

    def __init__(
        self, worker_pids: Callable[[], Iterable[int]] = lambda: (), include_new: bool = False
    ):
        self._worker_pids = worker_pids
        self._include_new = include_new
        self._pids: List[int] = []
        self._reset_ok = False
        self.driver_bytes: Optional[int] = None
        self.worker_bytes: Dict[int, int] = {}
        self.method = 'rss-after'

    def __enter__(self) -> 'PeakRss':
        self._pids = [os.getpid()] + [int(p) for p in self._worker_pids()]
        self._reset_ok = all(_reset_hwm(p) for p in self._pids)
        return self

    def __exit__(self, *exc: Any) -> bool:
        now = [int(p) for p in self._worker_pids()]
        pids_now = set(now)
        if self._include_new:
            self._pids += [p for p in now if p not in self._pids]
        read = _read_hwm if self._reset_ok else _rss
        self.method = 'VmHWM' if self._reset_ok else 'rss-after'
        self.driver_bytes = read(os.getpid())
        self.worker_bytes = {}
        for pid in self._pids[1:]:
            if pid in pids_now:
                value = read(pid)
                if value is not None:
                    self.worker_bytes[pid] = value
        return False

    def as_dict(self) -> Dict[str, Any]:
        """JSON-friendly: driver, workers (list), total (sum of the per-process peaks), method."""
        workers = [self.worker_bytes[p] for p in self._pids[1:] if p in self.worker_bytes]
        total = None if self.driver_bytes is None else self.driver_bytes + sum(workers)
        return {
            'driver_peak_rss_bytes': self.driver_bytes,
            'workers_peak_rss_bytes': workers,
            'total_peak_rss_bytes': total,
            'method': self.method,
        }


# ------------------------------------------------------------------ result fingerprints


def _feed(h: 'hashlib._Hash', value: Any, depth: int = 0) -> None:
    if depth > 100:
        raise TypeError('fingerprint: the value is nested more than 100 levels deep')
    if value is None:
        h.update(b'N')
    elif isinstance(value, (bool, np.bool_)):
        h.update(b'B1' if value else b'B0')
    elif isinstance(value, int) and not isinstance(value, bool):
        h.update(b'I' + str(value).encode() + b';')
    elif isinstance(value, float):
        h.update(b'F' + (_struct.pack('<d', value) if not math.isnan(value) else b'nan'))
    elif isinstance(value, str):
        data = value.encode('utf-8')
        h.update(b'S' + str(len(data)).encode() + b':' + data)
    elif isinstance(value, (bytes, bytearray)):
        h.update(b'Y' + str(len(value)).encode() + b':' + bytes(value))
    elif (
        isinstance(value, (np.ndarray, np.generic))
        or hasattr(value, '__array__')
        and hasattr(value, 'dtype')
        and hasattr(value, 'shape')
    ):
        arr = np.ascontiguousarray(np.asarray(value))
        if arr.dtype == object:
            h.update(b'O' + repr(arr.shape).encode())
            for item in arr.ravel():
                _feed(h, item, depth + 1)
            return
        h.update(b'A' + arr.dtype.str.encode() + repr(arr.shape).encode() + b':')
        h.update(arr.tobytes())
    elif isinstance(value, dict):
        h.update(b'D' + str(len(value)).encode() + b'{')
        keys = list(value)
        if type(value) is dict:  # a plain dict: key order does not matter (an OrderedDict's does)
            keys = sorted(keys, key=repr)
        for k in keys:
            _feed(h, k, depth + 1)
            _feed(h, value[k], depth + 1)
        h.update(b'}')
    elif isinstance(value, tuple) and hasattr(type(value), '_fields'):  # namedtuple
        _feed(h, dict(zip(value._fields, value)), depth + 1)
    elif isinstance(value, (list, tuple)):
        h.update(b'L' + str(len(value)).encode() + b'[')
        for item in value:
            _feed(h, item, depth + 1)
        h.update(b']')
    elif type(value).__name__ == 'Struct' and hasattr(value, 'names'):  # simharness.Struct
        h.update(b'T[')
        for name, item in zip(value.names, value):
            _feed(h, name, depth + 1)
            _feed(h, item, depth + 1)
        h.update(b']')
    elif hasattr(type(value), '__attrs_attrs__'):
        h.update(b'R' + type(value).__name__.encode())
        _feed(h, {a.name: getattr(value, a.name) for a in type(value).__attrs_attrs__}, depth + 1)
    elif hasattr(value, 'numpy') and callable(value.numpy):  # an eager tensor
        _feed(h, value.numpy(), depth + 1)
    else:
        raise TypeError(
            f'fingerprint: cannot hash a value of type {type(value).__name__} '
            '(expected numpy arrays, tensors, numbers, strings, bytes, None, '
            'lists, tuples, dicts, namedtuples, attrs classes or Structs)'
        )


def fingerprint(value: Any) -> str:
    """``'sha256:<hex>'`` of `value`'s structure, dtypes, shapes and exact bits.

    Equal results give equal fingerprints; a result whose bits, shapes,
    dtypes or structure differ gives another one. A plain dict's key order
    does not matter.

    Raises:
      TypeError: `value` holds an object of another kind (the message names its type).
    """
    h = hashlib.sha256()
    _feed(h, value)
    return 'sha256:' + h.hexdigest()
