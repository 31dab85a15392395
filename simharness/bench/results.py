"""Saved benchmark runs: pytest-benchmark's JSON, read as plain data.

A *run* is one JSON file that pytest-benchmark wrote (``--benchmark-save``,
``--benchmark-autosave`` or ``--benchmark-json``). Anything pytest-benchmark
saves is read; what simharness' plugin adds (``extra_info['simharness']``:
every round's time, the calibration workload's times, peak RSS, the result's
fingerprint) makes comparisons noise-aware. Without it, a benchmark saved
with ``--benchmark-save-data`` still has its round times; one with neither
has only its quartiles, and comparisons say so.
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import json
import os
import re
from typing import Any, Dict, Iterable, List, Optional, Sequence

import numpy as np

from simharness.errors import SimharnessValueError

__all__ = ['Measurement', 'Run', 'find_runs', 'load_run', 'machine_fingerprint', 'resolve_runs']


@dataclasses.dataclass
class Measurement:
    """One benchmark of one run.

    Attributes:
      name: pytest-benchmark's ``name`` (``test_map_sum[100-thread]``).
      group: its group (may be None).
      times: seconds of every timed round (None: not saved).
      median, q1, q3, min, rounds: pytest-benchmark's statistics.
      calibration: seconds of the calibration workload next to each round (None: not timed).
      calibration_workload: the workload's name (only equal names are comparable).
      first_round_seconds: the first call (tracing, start-up), timed apart.
      memory: peak RSS (``total_peak_rss_bytes``, ``driver_peak_rss_bytes``,
        ``workers_peak_rss_bytes``, ``method``), or {}.
      fingerprint: the last result's ``sha256:...`` (None: not taken).
      clients_per_second: from the plugin or the benchmark's own extra_info.
      extra_info: everything the benchmark saved there.
      starts: when each timed round started (Unix time; None: not saved).
      fullname: pytest's node id (``tests/x.py::test_y[a]``; None: not saved).
    """

    name: str
    group: Optional[str]
    times: Optional[np.ndarray]
    median: float
    q1: float
    q3: float
    min: float
    rounds: int
    calibration: Optional[np.ndarray] = None
    calibration_workload: Optional[str] = None
    first_round_seconds: Optional[float] = None
    memory: Dict[str, Any] = dataclasses.field(default_factory=dict)
    fingerprint: Optional[str] = None
    clients_per_second: Optional[float] = None
    extra_info: Dict[str, Any] = dataclasses.field(default_factory=dict)
    starts: Optional[np.ndarray] = None
    fullname: Optional[str] = None

    @property
    def peak_rss_bytes(self) -> Optional[int]:
        """Driver + workers (the sum of each process's peak), or None."""
        value = self.memory.get('total_peak_rss_bytes')
        if value is None:  # the project's memory benchmark records MB in extra_info
            mb = self.extra_info.get('peak_total_rss_mb')
            value = None if mb is None else int(mb * (1 << 20))
        return value


@dataclasses.dataclass
class Run:
    """One saved run (one JSON file).

    Attributes:
      path: where it was read from ('' when built in memory).
      datetime: when it ran (ISO 8601, UTC).
      commit: the git sha (None: unknown), `commit_time`, `dirty`, `branch`.
      machine: the machine fingerprint (see `machine_fingerprint`).
      machine_info: pytest-benchmark's machine_info.
      benchmarks: name -> `Measurement`.
      interleave: for a run of ``simharness bench ab``: its ``session`` (shared
        with the run it took turns with), ``side`` ('A' or 'B') and ``turns``.
    """

    path: str
    datetime: str
    commit: Optional[str]
    commit_time: Optional[str]
    dirty: bool
    branch: Optional[str]
    machine: str
    machine_info: Dict[str, Any]
    benchmarks: Dict[str, Measurement]
    interleave: Optional[Dict[str, Any]] = None

    @property
    def label(self) -> str:
        """Short commit (with ``+`` when dirty) or the file name."""
        if self.commit:
            return self.commit[:8] + ('+' if self.dirty else '')
        return os.path.basename(self.path) or self.datetime


def machine_fingerprint(machine_info: Dict[str, Any]) -> str:
    """``<host>-<hash>``: what makes timings comparable: host, architecture, OS, Python
    version, CPU model and count.

    Computed from pytest-benchmark's own machine_info, so files saved with or without
    simharness' plugin (which also saves it as ``machine_info['simharness']['fingerprint']``)
    agree.
    """
    return fingerprint_of(machine_info)


def fingerprint_of(machine_info: Dict[str, Any], memory: Optional[int] = None) -> str:
    cpu = machine_info.get('cpu') or {}
    key = {
        'node': machine_info.get('node'),
        'machine': machine_info.get('machine'),
        'system': machine_info.get('system'),
        'python': str(machine_info.get('python_implementation', ''))
        + ' '
        + '.'.join(str(machine_info.get('python_version', '')).split('.')[:2]),
        'cpu': cpu.get('brand_raw'),
        'cpus': cpu.get('count'),
    }
    del memory  # recorded apart (machine_info['simharness']['memory_total_bytes'])
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    return f'{key["node"]}-{digest}'


def _array(values: Any) -> Optional[np.ndarray]:
    if not values:
        return None
    arr = np.asarray(values, dtype=np.float64)
    return arr if arr.ndim == 1 and arr.size else None


def _measurement(b: Dict[str, Any]) -> Measurement:
    stats = b.get('stats') or {}
    extra = b.get('extra_info') or {}
    own = extra.get('simharness') or {}
    times = _array(own.get('times')) if own else None
    if times is None:
        times = _array(stats.get('data'))  # --benchmark-save-data
    cal = own.get('calibration') or {}
    cps = own.get('clients_per_second', extra.get('clients_per_second'))
    return Measurement(
        name=str(b.get('name') or b.get('fullname')),
        group=b.get('group'),
        times=times,
        median=float(stats.get('median', float('nan'))),
        q1=float(stats.get('q1', float('nan'))),
        q3=float(stats.get('q3', float('nan'))),
        min=float(stats.get('min', float('nan'))),
        rounds=int(stats.get('rounds', 0)),
        calibration=_array(cal.get('times')),
        calibration_workload=cal.get('workload'),
        first_round_seconds=own.get(
            'first_round_seconds', extra.get('simharness_first_round_seconds')
        ),
        memory=dict(own.get('memory') or {}),
        fingerprint=own.get('fingerprint'),
        clients_per_second=None if cps is None else float(cps),
        extra_info=extra,
        starts=_array(own.get('starts')) if own else None,
        fullname=b.get('fullname') or None,
    )


def run_from_dict(data: Dict[str, Any], path: str = '') -> Run:
    """A `Run` from pytest-benchmark's JSON (already parsed).

    Raises:
      SimharnessValueError: not pytest-benchmark output (no ``benchmarks`` list).
    """
    if not isinstance(data, dict) or not isinstance(data.get('benchmarks'), list):
        raise SimharnessValueError(
            f'{path or "data"}: not a pytest-benchmark JSON file '
            '(expected an object with a "benchmarks" list)'
        )
    commit = data.get('commit_info') or {}
    machine_info = data.get('machine_info') or {}
    cid = commit.get('id')
    benchmarks = {}
    for b in data['benchmarks']:
        m = _measurement(b)
        benchmarks[m.name] = m
    own = data.get('simharness') or {}
    interleave = own.get('interleave') if isinstance(own, dict) else None
    return Run(
        path=path,
        datetime=str(data.get('datetime', '')),
        interleave=interleave,
        commit=None if cid in (None, 'unknown', 'unversioned') else str(cid),
        commit_time=commit.get('time'),
        dirty=bool(commit.get('dirty')),
        branch=commit.get('branch'),
        machine=machine_fingerprint(machine_info),
        machine_info=machine_info,
        benchmarks=benchmarks,
    )


def load_run(path: str) -> Run:
    """Reads one saved JSON file.

    Raises:
      SimharnessValueError: unreadable or not pytest-benchmark output (names the file).
    """
    try:
        with open(path, encoding='utf-8') as f:
            data = json.load(f)
    except OSError as e:
        raise SimharnessValueError(f'{path}: cannot read: {e.strerror or e}') from None
    except json.JSONDecodeError as e:
        raise SimharnessValueError(f'{path}: not JSON ({e})') from None
    return run_from_dict(data, path)


def find_runs(storage: str) -> List[Run]:
    """Every run under `storage` (a folder, searched recursively, or one file), oldest first.

    Raises:
      SimharnessValueError: `storage` does not exist.
    """
    storage = _strip_file_url(storage)
    if os.path.isfile(storage):
        return [load_run(storage)]
    if not os.path.isdir(storage):
        raise SimharnessValueError(
            f'benchmark storage {storage!r} does not exist (expected a '
            'folder of pytest-benchmark JSON files, or one such file)'
        )
    paths = sorted(glob.glob(os.path.join(storage, '**', '*.json'), recursive=True))
    runs = []
    for p in paths:
        try:
            runs.append(load_run(p))
        except SimharnessValueError:
            continue  # another JSON file in the folder
    runs.sort(key=lambda r: (r.datetime, r.path))
    return runs


def _strip_file_url(storage: str) -> str:
    return storage[len('file://') :] if storage.startswith('file://') else storage


_NUMBER = re.compile(r'^[0-9]{1,4}$')


def resolve_runs(spec: str, storage: Optional[str] = None) -> List[Run]:
    """The runs `spec` names: a JSON file; a saved run's number (``0003``) or a git sha
    prefix (every run of that commit) in `storage`.

    Raises:
      SimharnessValueError: nothing matches (says what was looked for, and where).
    """
    if os.path.isfile(spec):
        return [load_run(spec)]
    if storage is None:
        raise SimharnessValueError(
            f'{spec!r} is not a file; give --storage to look it up as a '
            'saved run number or a commit'
        )
    runs = find_runs(storage)
    if _NUMBER.match(spec):
        prefix = spec.zfill(4) + '_'
        found = [r for r in runs if os.path.basename(r.path).startswith(prefix)]
    else:
        want = spec.rstrip('+').lower()
        of_commit = [r for r in runs if r.commit and r.commit.lower().startswith(want)]
        if spec.endswith('+'):  # 'abc123+': the runs of abc123 with uncommitted changes
            found = [r for r in of_commit if r.dirty]
        else:  # the clean runs of the commit, else all of its runs
            found = [r for r in of_commit if not r.dirty] or of_commit
    if not found:
        raise SimharnessValueError(
            f'no saved run {spec!r} in {storage} ({len(runs)} runs there; expected a JSON file, '
            'a run number such as 0003, or a commit sha prefix)'
        )
    return found


def common_names(a: Sequence[Run], b: Sequence[Run]) -> List[str]:
    """Benchmark names present on both sides, in the order of the first side's first run."""
    names_b = set().union(*(r.benchmarks for r in b)) if b else set()
    out: List[str] = []
    for r in a:
        for n in r.benchmarks:
            if n in names_b and n not in out:
                out.append(n)
    return out


def measurements(runs: Iterable[Run], name: str) -> List[Measurement]:
    """The measurements of benchmark `name` in `runs` (runs without it are skipped)."""
    return [r.benchmarks[name] for r in runs if name in r.benchmarks]
