"""Helpers of the benchmarks: check once, then time; ratios to the baselines; RSS sampling."""

from __future__ import annotations

import math
import os
import statistics
import threading
import time
from typing import Any, Callable, Dict, Iterable, Optional, Sequence

#: The stacks every case runs on.
STACKS = ('thread', 'process-1', 'process-2')

MB = 1 << 20


def disabled(benchmark: Any) -> bool:
    """True when timing is off (``--benchmark-disable``): bodies run once, untimed."""
    return bool(getattr(benchmark, 'disabled', False))


def adaptive_rounds(
    first_call_seconds: float, target_seconds: float = 1.5, lo: int = 3, hi: int = 50
) -> int:
    """Timed rounds so that a case takes about `target_seconds` (between lo and hi rounds)."""
    return max(lo, min(hi, math.ceil(target_seconds / max(first_call_seconds, 1e-6))))


def check_then_time(
    benchmark: Any,
    fn: Callable[..., Any],
    args: Sequence[Any] = (),
    check: Optional[Callable[[Any], None]] = None,
    rounds: Optional[int] = None,
    target_seconds: float = 1.5,
    max_rounds: int = 50,
    min_rounds: int = 3,
) -> Any:
    """Checks ``fn(*args)`` once, then times it (never asserting a time).

    With timing on: one untimed call whose result `check` asserts (it is
    also the warm-up: tracing, shipping the computation, growing shared
    memory), then `rounds` timed calls (default: enough for about
    `target_seconds`, at least `min_rounds`). With ``--benchmark-disable``:
    one call, checked. The checked result is dropped before the timed
    calls, as a user's loop drops a round's result it is done with.

    Works with pytest-benchmark's ``benchmark`` and with ``simharness_benchmark``.
    """
    if disabled(benchmark):
        result = benchmark(fn, *args)
        if check is not None:
            check(result)
        return result
    t0 = time.perf_counter()
    result = fn(*args)
    first = time.perf_counter() - t0
    if check is not None:
        check(result)
    del result
    if rounds is None:
        rounds = adaptive_rounds(
            first, target_seconds, lo=min_rounds, hi=max(max_rounds, min_rounds)
        )
    if hasattr(benchmark, 'round'):  # simharness_benchmark: also records per-round transport
        return benchmark.round(fn, *args, rounds=rounds, warmup_rounds=0)
    return benchmark.pedantic(fn, args=tuple(args), rounds=rounds, warmup_rounds=0, iterations=1)


def median_seconds(benchmark: Any) -> Optional[float]:
    """The median of the timed rounds (None when timing is off)."""
    stats = getattr(benchmark, 'stats', None)
    if disabled(benchmark) or stats is None:
        return None
    return float(stats.stats.median)


def time_median(fn: Callable[[], Any], repeat: int = 5) -> float:
    """Median wall time of `repeat` calls of `fn` (after one warm-up call)."""
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2]


def interleaved_medians(fns: Sequence[Callable[[], Any]], rounds: int = 10) -> list:
    """Median seconds of each of `fns`, their calls interleaved: `rounds` passes over them,
    every other pass in reverse order (ABBA), so that a machine that slows down or speeds
    up during the run weighs on all of them alike (the ratios of one run)."""
    times: list = [[] for _ in fns]
    for i in range(rounds):
        order = range(len(fns)) if i % 2 == 0 else reversed(range(len(fns)))
        for k in order:
            t0 = time.perf_counter()
            fns[k]()
            times[k].append(time.perf_counter() - t0)
    return [statistics.median(t) for t in times]


def thread_cpu() -> Dict[Any, float]:
    """CPU seconds of each thread of this process, keyed by (thread id, name); empty where
    there is no /proc (not Linux). Python's threads go by their `threading` names (the
    stack's context and reactor threads, MainThread), others by their system names
    (``/proc/self/task/<id>/comm``: TF's pools)."""
    out: Dict[Any, float] = {}
    base = '/proc/self/task'
    if not os.path.isdir(base):
        return out
    # Python's threads by their threading names (Linux shows them all as "python").
    names = {t.native_id: t.name for t in threading.enumerate()}
    for tid in os.listdir(base):
        try:
            with open(f'{base}/{tid}/comm') as f:
                name = names.get(int(tid)) or f.read().strip()
            with open(f'{base}/{tid}/schedstat') as f:  # ns on a CPU
                out[(int(tid), name)] = int(f.read().split()[0]) / 1e9
        except (OSError, ValueError, IndexError):  # the thread ended meanwhile
            continue
    return out


def cpu_by_thread(
    before: Dict[Any, float], after: Dict[Any, float], rounds: int
) -> Dict[str, float]:
    """Milliseconds of CPU per round by thread name between two `thread_cpu` snapshots
    (threads of one name summed: TF's pools), largest first; threads that ended between
    them are not counted."""
    acc: Dict[str, float] = {}
    for key, seconds in after.items():
        acc[key[1]] = acc.get(key[1], 0.0) + seconds - before.get(key, 0.0)
    return {
        name: round(1e3 * v / rounds, 3)
        for name, v in sorted(acc.items(), key=lambda kv: -kv[1])
        if v > 0
    }


class Baselines:
    """Baseline medians of the session, shared by the cases that report ratios to them.

    A baseline benchmark stores its median with `put`; a case asks with
    `get(key, measure)`, which measures it (median of a few calls) when the
    baseline benchmark did not run (deselected, say); without `measure`, such a
    baseline is None.
    """

    def __init__(self) -> None:
        self._values: Dict[str, float] = {}

    def put(self, key: str, seconds: Optional[float]) -> None:
        if seconds is not None:
            self._values[key] = seconds

    def get(self, key: str, measure: Optional[Callable[[], float]] = None) -> Optional[float]:
        if key not in self._values and measure is not None:
            self._values[key] = measure()
        return self._values.get(key)


class RssSampler:
    """Samples the RSS of the driver and of given worker processes in a thread; keeps the peaks.

    Use as a context manager around the code to measure. `pids` is called at
    each sample (workers may be replaced).
    """

    def __init__(
        self, worker_pids: Callable[[], Iterable[int]] = lambda: (), interval: float = 0.02
    ):
        import psutil

        self._psutil = psutil
        self._driver = psutil.Process(os.getpid())
        self._worker_pids = worker_pids
        self._interval = interval
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.before = self._sample()
        self.peak = dict(self.before)

    def _sample(self) -> Dict[str, int]:
        driver = self._driver.memory_info().rss
        workers = 0
        for pid in self._worker_pids():
            try:
                workers += self._psutil.Process(pid).memory_info().rss
            except self._psutil.Error:
                pass
        return {'driver': driver, 'workers': workers, 'total': driver + workers}

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self._update()

    def _update(self) -> None:
        s = self._sample()
        for k, v in s.items():
            self.peak[k] = max(self.peak[k], v)

    def __enter__(self) -> 'RssSampler':
        self.before = self._sample()
        self.peak = dict(self.before)
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name='bench-rss-sampler', daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> bool:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._update()
        return False

    def extra_info(self) -> Dict[str, float]:
        """Before and peak RSS in MB (driver, workers, total)."""
        out = {}
        for k in ('driver', 'workers', 'total'):
            out[f'{k}_rss_before_mb'] = round(self.before[k] / MB, 1)
            out[f'peak_{k}_rss_mb'] = round(self.peak[k] / MB, 1)
        return out
