"""The pytest plugin's benchmarks: `SimharnessBenchmark` and turn taking between sessions.

``simharness bench ab`` runs two pytest sessions whose timed rounds take
turns (`_Turns`); ``SIMHARNESS_BENCH_COMMIT_INFO`` replaces pytest-benchmark's
commit info for a revision run outside its work tree.
"""

from __future__ import annotations

import gc
import json
import math
import os
import select
import statistics
import time
from typing import Any, Dict, List, Optional

import pytest

from simharness.testing.registry import SimharnessStack

# ------------------------------------------------------------------ interleaved A/B sessions

#: Set by ``simharness bench ab`` for its two pytest sessions (JSON: the two
#: FIFOs, this session's side, the pair's id): their timed rounds take turns.
INTERLEAVE_ENV = 'SIMHARNESS_BENCH_INTERLEAVE'
#: JSON commit_info for runs of a checked-out revision outside a git work tree.
COMMIT_INFO_ENV = 'SIMHARNESS_BENCH_COMMIT_INFO'
#: Seconds to wait for a turn before running on alone (the coordinator is gone).
TURN_TIMEOUT = 900.0


class _Turns:
    """Turn taking between benchmark sessions (``simharness bench ab``): one round per turn.

    Sessions start (import, collect, set up) side by side. At its first timed
    or warm-up round a session says it is ready (``S``) and waits; once every
    session is ready the coordinator (the ``simharness bench ab`` process)
    hands one token round in rotation. From then on a session works only while
    it holds the token: it hands it back (``R``) before each further round and
    waits for its next turn, and says ``X`` at its end, when the coordinator
    waits for the process to exit before passing the token on. So from the
    first round on exactly one session works at any time, and the rounds of
    the baseline and of the candidate alternate under the same machine load.
    With no token for `TURN_TIMEOUT` seconds (the coordinator is gone) a
    session runs on alone and its saved run says so. Without the environment
    variable this is a no-op.
    """

    def __init__(self) -> None:
        self.info: Optional[Dict[str, Any]] = None
        self._mine = self._done = -1
        self._index = 0
        self._alone = True
        self._started = False
        self._used = False
        self.turns = 0
        self.broken: Optional[str] = None

    def open(self, spec: str) -> None:
        try:
            info = json.loads(spec)
            mine, done = str(info['mine']), str(info['done'])
            side, session, index = str(info['side']), str(info['session']), int(info['index'])
            if not 0 <= index < 256:
                raise ValueError(f'index {index} is not in [0, 256)')
        except (ValueError, KeyError, TypeError) as e:
            raise pytest.UsageError(
                f'{INTERLEAVE_ENV}={spec!r} is not valid: expected JSON with '
                f'mine, done, side, session and index ({e})'
            ) from None
        # O_RDWR: opening a FIFO this way never blocks, and a write never fails
        # for want of a reader.
        self._mine = os.open(mine, os.O_RDWR)
        self._done = os.open(done, os.O_RDWR)
        self._index = index
        self.info = {'side': side, 'session': session}
        self._alone = self._started = self._used = False
        self.turns = 0
        self.broken = None

    def _say(self, kind: bytes) -> None:
        os.write(self._done, kind + bytes([self._index]))

    def _wait(self) -> None:
        ready, _, _ = select.select([self._mine], [], [], TURN_TIMEOUT)
        if not ready:
            self.broken = f'no turn from the coordinator for {TURN_TIMEOUT:.0f} s'
            self._alone = True
            return
        os.read(self._mine, 1)

    def __enter__(self) -> '_Turns':
        if self._alone:
            return self
        if not self._started:  # ready: wait for every session, then for this one's turn
            self._started = True
            self._say(b'S')
            self._wait()
        elif self._used:  # one round per turn: hand over, wait for the next
            self._say(b'R')
            self._wait()
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self._alone:
            self._used = True
            self.turns += 1

    def close(self) -> None:
        if self._done >= 0 and not self._alone:
            # X: done, holding the token (the coordinator waits for this process to exit);
            # Q: done without a round
            self._say(b'X' if self._started else b'Q')
        for fd in (self._mine, self._done):
            if fd >= 0:
                os.close(fd)
        self._mine = self._done = -1
        self._alone = True
        self.info = None


_TURNS = _Turns()


class SimharnessBenchmark:
    """pytest-benchmark's `benchmark` fixture, knowing the stack it times.

    Anything not defined here (``pedantic``, ``extra_info``, ``stats``,
    ``group``, calling it) is the wrapped fixture's.

    Attributes:
      stack: the `SimharnessStack` timed.
      rounds: ``--simharness-rounds`` (None: pytest-benchmark's own rule).
    """

    def __init__(self, benchmark: Any, stack: SimharnessStack, rounds: Optional[int]):
        self._benchmark = benchmark
        self.stack = stack
        self.rounds = rounds
        benchmark.extra_info['simharness_stack'] = stack.config

    def __call__(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return self._benchmark(fn, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._benchmark, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ('_benchmark', 'stack', 'rounds'):
            object.__setattr__(self, name, value)
        else:  # e.g. `group`: the wrapped fixture's
            setattr(self._benchmark, name, value)

    @property
    def disabled(self) -> bool:
        """True with ``--benchmark-disable`` (the body runs once, untimed)."""
        return bool(getattr(self._benchmark, 'disabled', False))

    def _option(self, name: str) -> Any:
        try:
            return getattr(self._benchmark, name)
        except AttributeError:
            raise RuntimeError(
                f'simharness_benchmark.round needs pytest-benchmark >= 4 (its fixture has no '
                f'{name}); got {type(self._benchmark).__module__}'
            ) from None

    def _worker_pids(self) -> List[int]:
        stats = self.stack.stats()
        if not stats:
            return []
        return [w['pid'] for w in stats.get('workers', ()) if w.get('alive') and w.get('pid')]

    def round(
        self,
        fn: Any,
        *args: Any,
        rounds: Optional[int] = None,
        warmup_rounds: Optional[int] = None,
        iterations: Optional[int] = None,
        clients: Optional[int] = None,
        fingerprint: Any = True,
        **kwargs: Any,
    ) -> Any:
        """Times ``fn(*args, **kwargs)``, one simulation round per call, in this (the driver) process.

        The first call (tracing, shipping the computation to the workers,
        growing shared memory) is timed apart, as ``first_round_seconds``;
        then come the timed, steady-state rounds. Each timed round is
        preceded by the calibration workload (`simharness.bench.probe`),
        so that the saved run carries the machine's speed and noise at the
        time. Peak RSS of the driver and the workers over the timed rounds
        and a SHA-256 of the last result are saved too (all in
        ``extra_info['simharness']``).

        pytest-benchmark's options are honoured: ``--benchmark-disable``
        (one untimed call), ``--benchmark-min-rounds`` and
        ``--benchmark-max-time`` (at least min-rounds timed rounds, and more
        until max-time seconds of them: pytest-benchmark's rule, applied as
        the rounds run), ``--benchmark-warmup`` / ``--benchmark-warmup-iterations``
        (more untimed rounds after the first, up to warmup-iterations calls
        or max-time seconds), ``--benchmark-min-time`` and
        ``--benchmark-calibration-precision`` (calls per round, for rounds
        shorter than that), ``--benchmark-precision`` / ``--benchmark-confidence``
        (stop once the mean is that precise), ``--benchmark-timer`` and
        ``--benchmark-disable-gc``.

        Args:
          fn: one round (e.g. ``fedavg.next``).
          rounds: timed rounds, overriding the options (default:
            ``--simharness-rounds`` when given, else pytest-benchmark's rule).
            Under ``simharness bench ab``, ``--simharness-rounds`` overrides
            this too, so that the sessions taking turns run equal rounds.
          warmup_rounds: untimed calls before the timed ones (default: 1, the
            first round, plus ``--benchmark-warmup``'s); 0: none, and no
            ``first_round_seconds``.
          iterations: calls per timed round (default: 1, or more when a
            call is shorter than ``--benchmark-min-time``).
          clients: clients per round; saves ``clients_per_second``.
          fingerprint: True: hash the last result; a function: hash
            ``fingerprint(result)`` (e.g. ``lambda r: r[0]`` for the state
            of ``(state, metrics)``); False: none.

        Returns:
          The last call's result.
        """
        # reason: the plugin loads in every pytest session; imported when used
        from simharness.bench import probe

        if rounds is None or (_TURNS.info is not None and self.rounds is not None):
            # under `simharness bench ab`, --simharness-rounds wins: every session runs the
            # same rounds, so that their turns stay in step
            rounds = self.rounds
        for name, value, low in (
            ('rounds', rounds, 1),
            ('warmup_rounds', warmup_rounds, 0),
            ('iterations', iterations, 1),
            ('clients', clients, 1),
        ):
            if value is not None and (
                not isinstance(value, int) or isinstance(value, bool) or value < low
            ):
                raise (
                    TypeError
                    if not isinstance(value, int) or isinstance(value, bool)
                    else ValueError
                )(
                    f'simharness_benchmark.round: {name} must be an int >= {low} or None, '
                    f'got {value!r} of type {type(value).__name__}'
                )
        if not (fingerprint in (True, False) or callable(fingerprint)):
            raise TypeError(
                f'simharness_benchmark.round: fingerprint must be True, False or a '
                f'function, got {fingerprint!r} of type {type(fingerprint).__name__}'
            )
        bench = self._benchmark
        extra = bench.extra_info
        if self.disabled:
            return bench.pedantic(fn, args=args, kwargs=kwargs, rounds=1, iterations=1)
        if getattr(bench, '_mode', None):
            bench.has_error = True
            raise RuntimeError(
                f'the benchmark fixture was already used in {bench._mode} mode '
                '(one benchmark per test)'
            )
        bench._mode = 'simharness_benchmark.round(...)'
        try:
            return self._round(
                probe,
                fn,
                args,
                kwargs,
                rounds,
                warmup_rounds,
                iterations,
                clients,
                fingerprint,
                extra,
            )
        except BaseException:
            bench.has_error = True
            raise

    def _round(
        self,
        probe: Any,
        fn: Any,
        args: Any,
        kwargs: Any,
        rounds: Optional[int],
        warmup_rounds: Optional[int],
        iterations: Optional[int],
        clients: Optional[int],
        fingerprint: Any,
        extra: Dict[str, Any],
    ) -> Any:
        bench = self._benchmark
        timer = self._option('_timer')
        disable_gc = bool(self._option('_disable_gc'))
        min_rounds = int(self._option('_min_rounds'))
        max_time = float(self._option('_max_time'))
        warmup_calls = int(self._option('_warmup') or 0)
        precision = getattr(bench, '_precision', None)
        confidence = getattr(bench, '_confidence', None)

        def call() -> Any:
            return fn(*args, **kwargs)

        def timed(n: int, gate: bool = False) -> Any:
            if gate:
                with _TURNS:
                    return timed(n)
            enabled = gc.isenabled()
            if disable_gc:
                gc.disable()
            try:
                t0 = timer()
                for _ in range(n - 1):
                    call()
                out = call()
                return timer() - t0, out
            finally:
                if enabled:
                    gc.enable()

        # warm-up: the first round (timed apart), then pytest-benchmark's warm-up, if on
        first = last = None
        result: Any = None
        wall0 = time.perf_counter()
        if warmup_rounds is None:
            warmup_rounds = 1
            if warmup_calls:
                first, result = timed(1, gate=True)
                last = first
                while (
                    time.perf_counter() - wall0 < max_time + first
                    and warmup_rounds < 1 + warmup_calls
                ):
                    last, result = timed(1, gate=True)
                    warmup_rounds += 1
        if first is None:
            for i in range(warmup_rounds):
                last, result = timed(1, gate=True)
                if i == 0:
                    first = last
        if iterations is None:
            iterations = 1
            if last is not None:
                floor = max(
                    float(self._option('_min_time')),
                    bench._get_precision(timer) * self._option('_calibration_precision'),
                )
                if last < floor:
                    iterations = max(1, math.ceil(floor / max(last, 1e-9)))
        before = self.stack.stats()
        stats = bench._make_stats(iterations)
        times: List[float] = []
        starts: List[float] = []
        calibration: List[float] = []
        z = None
        if precision and confidence:
            z = statistics.NormalDist().inv_cdf(0.5 + confidence / 2)
        turns = _TURNS
        with probe.PeakRss(self._worker_pids) as peak:
            spent = 0.0
            while True:
                with turns:
                    starts.append(time.time())
                    calibration.append(probe.time_calibration(timer))
                    duration, result = timed(iterations)
                stats.update(duration)
                times.append(duration / iterations)
                spent += duration
                n = len(times)
                if rounds is not None:
                    if n >= rounds:
                        break
                    continue
                if n >= min_rounds:
                    if z is not None and n >= 2:
                        mean = sum(times) / n
                        sd = (sum((t - mean) ** 2 for t in times) / (n - 1)) ** 0.5
                        if mean > 0 and z * sd / n**0.5 / mean <= precision:
                            break
                    if spent >= max_time:
                        break
        after = self.stack.stats()
        info: Dict[str, Any] = {
            'version': 1,
            'times': times,
            'starts': starts,
            'first_round_seconds': first,
            'warmup_rounds': warmup_rounds,
            'rounds': len(times),
            'iterations': iterations,
            'calibration': {'workload': probe.CALIBRATION_WORKLOAD, 'times': calibration},
            'memory': peak.as_dict(),
            'clients': clients,
        }
        median = (
            sorted(times)[len(times) // 2]
            if len(times) % 2
            else sum(sorted(times)[len(times) // 2 - 1 : len(times) // 2 + 1]) / 2
        )
        if clients is not None and median > 0:
            info['clients_per_second'] = clients / median
            extra.setdefault('clients_per_second', clients / median)
        if fingerprint is not False:
            try:
                info['fingerprint'] = probe.fingerprint(
                    fingerprint(result) if callable(fingerprint) else result
                )
            except TypeError as e:
                info['fingerprint'] = None
                info['fingerprint_error'] = str(e)
        extra['simharness'] = info
        extra['simharness_rounds'] = len(times)
        extra['simharness_warmup_rounds'] = warmup_rounds
        if first is not None:
            extra['simharness_first_round_seconds'] = first
        if before is not None and after is not None:
            extra['simharness_per_round'] = {
                key: (after[key] - before[key]) / (len(times) * iterations)
                for key in ('requests', 'bytes_to_workers', 'bytes_from_workers')
                if key in before and key in after
            }
        return result
