"""Noise-aware comparison of two sets of benchmark runs (A, the baseline; B, the candidate).

For each benchmark both runs saved:

1. **The ratio** B/A of the median round times. When both sides timed the
   calibration workload (simharness' plugin does, right before every timed
   round), each side's rounds are first divided by how slow the machine was
   during that run: the ratio reported is
   ``(median(B) / median(A)) / (median(cal_B) / median(cal_A))``, and
   ``machine`` (the second factor) says how much slower (> 1) or faster the
   machine itself was for B. Several runs on one side are pooled, each
   normalized by its own calibration first.
2. **Its uncertainty**: a percentile bootstrap (`scipy.stats.bootstrap`,
   the round times and calibration times of each side resampled
   independently) gives the interval at the chosen confidence and the
   bootstrap distribution of the ratio.
3. **The verdict**, with a tolerance T (default 10 %, changes that small are
   not reported even when real): ``slower`` when at least `confidence` (95 %)
   of the bootstrap distribution lies above 1 + T, ``faster`` when that much
   lies below 1 / (1 + T), ``same`` when that much lies within, and
   ``uncertain`` otherwise (the noise recorded in the runs cannot tell).
   The probability behind the verdict is stated with it.

Memory (the sum of the driver's and the workers' peak RSS) is flagged when
it grows or shrinks by more than 10 % and 16 MB, and a changed result
fingerprint is flagged, loudest when the candidate is faster (a speed-up
that changes results).

Without per-round times on a side (a run saved by plain pytest-benchmark
without ``--benchmark-save-data``), the verdict comes from the quartiles:
``slower`` only when B's first quartile exceeds A's third quartile by more
than T (and no probability is stated).
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import List, Optional, Sequence, Tuple

import numpy as np

from simharness.bench.results import Measurement, Run, common_names, measurements
from simharness.errors import SimharnessValueError

__all__ = ['Comparison', 'DEFAULT_CONFIDENCE', 'DEFAULT_TOLERANCE', 'compare_measurements',
           'compare_runs', 'format_comparisons']

DEFAULT_TOLERANCE = 0.10
DEFAULT_CONFIDENCE = 0.95
DEFAULT_RESAMPLES = 4000
MEMORY_TOLERANCE = 0.10
MEMORY_MIN_BYTES = 16 << 20
MIN_ROUNDS_FOR_BOOTSTRAP = 3


@dataclasses.dataclass
class Comparison:
    """How benchmark `name` changed from A to B.

    Attributes:
      ratio: B / A of the median round times, machine-normalized when `normalized`.
      raw_ratio: the same without the normalization.
      ci_low, ci_high: its interval at `confidence` (bootstrap; quartile range for 'quartiles').
      machine: the machine's own slow-down for B (calibration median B / A), or None.
      verdict: 'slower', 'faster', 'same' or 'uncertain'.
      probability: the share of the bootstrap distribution behind the verdict
        (for 'uncertain': the largest of the three shares); None for 'quartiles'.
      p_slower, p_faster, p_same: the three shares.
      method: 'bootstrap' or 'quartiles'.
      memory_a, memory_b: peak RSS bytes (driver + workers), or None.
      memory_change: 'more', 'less', 'same' or None.
      fingerprint_a, fingerprint_b: result hashes; `results_changed` compares them.
    """

    name: str
    a_median: float
    b_median: float
    a_rounds: int
    b_rounds: int
    ratio: float
    raw_ratio: float
    ci_low: float
    ci_high: float
    machine: Optional[float]
    normalized: bool
    verdict: str
    probability: Optional[float]
    p_slower: Optional[float]
    p_faster: Optional[float]
    p_same: Optional[float]
    method: str
    tolerance: float
    confidence: float
    memory_a: Optional[int] = None
    memory_b: Optional[int] = None
    memory_change: Optional[str] = None
    fingerprint_a: Optional[str] = None
    fingerprint_b: Optional[str] = None

    @property
    def results_changed(self) -> Optional[bool]:
        """True when both sides hashed their result and the hashes differ (None: unknown)."""
        if self.fingerprint_a is None or self.fingerprint_b is None:
            return None
        return self.fingerprint_a != self.fingerprint_b

    @property
    def regression(self) -> bool:
        """Slower beyond the tolerance, at the confidence (the verdict 'slower')."""
        return self.verdict == 'slower'

    @property
    def flags(self) -> List[str]:
        """Warnings beyond the time verdict: results changed, memory grew."""
        out = []
        if self.results_changed:
            out.append('FASTER BUT RESULTS CHANGED' if self.verdict == 'faster'
                       else 'RESULTS CHANGED')
        if self.memory_change == 'more':
            out.append('MORE MEMORY')
        return out

    def describe(self) -> str:
        """One sentence: the ratio, its interval, the machine factor and the verdict."""
        text = (f'{self.name}: B/A {self.ratio:.3f} ({self.confidence:.0%} interval '
                f'{self.ci_low:.3f}-{self.ci_high:.3f}')
        if self.machine is not None:
            text += f'; machine {self.machine:.3f}, raw {self.raw_ratio:.3f}'
        text += f'): {self.verdict}'
        if self.probability is not None:
            text += f' (probability {self.probability:.1%}, tolerance {self.tolerance:.0%})'
        else:
            text += f' (from quartiles, tolerance {self.tolerance:.0%})'
        return text + ''.join(f'; {f}' for f in self.flags)


# ------------------------------------------------------------------ statistics

def _median_ratio_stat(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.median(b, axis=axis) / np.median(a, axis=axis)


def _normalized_ratio_stat(a: np.ndarray, b: np.ndarray, ca: np.ndarray, cb: np.ndarray,
                           axis: int = -1) -> np.ndarray:
    return ((np.median(b, axis=axis) / np.median(a, axis=axis))
            / (np.median(cb, axis=axis) / np.median(ca, axis=axis)))


def bootstrap_ratio(a: np.ndarray, b: np.ndarray, ca: Optional[np.ndarray] = None,
                    cb: Optional[np.ndarray] = None, confidence: float = DEFAULT_CONFIDENCE,
                    n_resamples: int = DEFAULT_RESAMPLES,
                    seed: int = 0) -> Tuple[float, float, float, np.ndarray]:
    """The ratio of medians B/A (calibration-normalized when `ca`, `cb` are given), its
    percentile-bootstrap interval and bootstrap distribution (`scipy.stats.bootstrap`)."""
    from scipy import stats
    if ca is not None and cb is not None:
        samples: Tuple[np.ndarray, ...] = (a, b, ca, cb)
        statistic = _normalized_ratio_stat
    else:
        samples, statistic = (a, b), _median_ratio_stat
    point = float(statistic(*samples))
    kwargs = dict(n_resamples=n_resamples, confidence_level=confidence, method='percentile',
                  vectorized=True, axis=-1)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')  # degenerate (all-equal) samples: a zero-width interval
        try:
            res = stats.bootstrap(samples, statistic, rng=np.random.default_rng(seed), **kwargs)
        except TypeError:  # scipy < 1.15
            res = stats.bootstrap(samples, statistic,
                                  random_state=np.random.default_rng(seed), **kwargs)
    dist = np.asarray(res.bootstrap_distribution, dtype=np.float64)
    low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    if not (math.isfinite(low) and math.isfinite(high)):
        low, high = (float(np.quantile(dist, (1 - confidence) / 2)),
                     float(np.quantile(dist, (1 + confidence) / 2)))
    return point, low, high, dist


def _pool(ms: Sequence[Measurement], normalize: bool) -> Tuple[np.ndarray, Optional[np.ndarray]]:
    """Pooled round times (each run's divided by its machine slow-down when `normalize`)."""
    if not normalize:
        return np.concatenate([m.times for m in ms]), None
    cal = np.concatenate([m.calibration for m in ms])
    ref = float(np.median(cal))
    times = np.concatenate([m.times * (ref / float(np.median(m.calibration))) for m in ms])
    return times, cal


def _pooled_median(ms: Sequence[Measurement]) -> float:
    with_times = [m.times for m in ms if m.times is not None]
    if len(with_times) == len(ms):
        return float(np.median(np.concatenate(with_times)))
    return float(np.median([m.median for m in ms]))


def _memory(ms: Sequence[Measurement]) -> Optional[int]:
    values = [m.peak_rss_bytes for m in ms if m.peak_rss_bytes is not None]
    return int(np.median(values)) if values else None


def _fingerprint(ms: Sequence[Measurement]) -> Optional[str]:
    prints = {m.fingerprint for m in ms if m.fingerprint}
    if not prints:
        return None
    return prints.pop() if len(prints) == 1 else 'several:' + ','.join(sorted(prints))


def _check(tolerance: float, confidence: float) -> None:
    for name, value, ok in (('tolerance', tolerance, 0 <= tolerance < 10),
                            ('confidence', confidence, 0.5 <= confidence < 1)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not ok:
            raise SimharnessValueError(
                f'{name} must be a number in '
                f'{"[0, 10)" if name == "tolerance" else "[0.5, 1)"}, got {value!r}')


def compare_measurements(name: str, a: Sequence[Measurement], b: Sequence[Measurement],
                         tolerance: float = DEFAULT_TOLERANCE,
                         confidence: float = DEFAULT_CONFIDENCE, normalize: bool = True,
                         n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> Comparison:
    """Compares benchmark `name` measured in runs `a` (baseline) and `b` (candidate).

    Raises:
      SimharnessValueError: an empty side, or a bad tolerance / confidence.
    """
    _check(tolerance, confidence)
    if not a or not b:
        raise SimharnessValueError(f'{name}: nothing to compare (A has {len(a)} measurements, '
                                   f'B {len(b)})')
    a_med, b_med = _pooled_median(a), _pooled_median(b)
    raw = b_med / a_med if a_med > 0 else float('nan')
    upper, lower = 1.0 + tolerance, 1.0 / (1.0 + tolerance)
    common = dict(name=name, a_median=a_med, b_median=b_med, raw_ratio=raw,
                  tolerance=tolerance, confidence=confidence, memory_a=_memory(a),
                  memory_b=_memory(b), fingerprint_a=_fingerprint(a), fingerprint_b=_fingerprint(b))
    common['memory_change'] = _memory_change(common['memory_a'], common['memory_b'])
    have_times = all(m.times is not None and m.times.size >= MIN_ROUNDS_FOR_BOOTSTRAP
                     for m in [*a, *b])
    if not have_times:
        qa3 = float(np.median([m.q3 for m in a]))
        qa1 = float(np.median([m.q1 for m in a]))
        qb1 = float(np.median([m.q1 for m in b]))
        qb3 = float(np.median([m.q3 for m in b]))
        if qb1 > qa3 * upper:
            verdict = 'slower'
        elif qb3 * upper < qa1:
            verdict = 'faster'
        elif lower <= qb1 / qa3 and qb3 / qa1 <= upper:
            verdict = 'same'
        else:
            verdict = 'uncertain'
        return Comparison(a_rounds=sum(m.rounds for m in a), b_rounds=sum(m.rounds for m in b),
                          ratio=raw, ci_low=qb1 / qa3, ci_high=qb3 / qa1, machine=None,
                          normalized=False, verdict=verdict, probability=None, p_slower=None,
                          p_faster=None, p_same=None, method='quartiles', **common)
    workloads = {m.calibration_workload for m in [*a, *b]}
    normalize = (normalize and len(workloads) == 1 and None not in workloads
                 and all(m.calibration is not None and m.calibration.size
                         for m in [*a, *b]))
    ta, ca = _pool(a, normalize)
    tb, cb = _pool(b, normalize)
    ratio, low, high, dist = bootstrap_ratio(ta, tb, ca, cb, confidence, n_resamples, seed)
    machine = float(np.median(cb) / np.median(ca)) if normalize else None
    p_slower = float(np.mean(dist > upper))
    p_faster = float(np.mean(dist < lower))
    p_same = 1.0 - p_slower - p_faster
    shares = {'slower': p_slower, 'faster': p_faster, 'same': p_same}
    verdict = next((v for v, p in shares.items() if p >= confidence), 'uncertain')
    probability = shares[verdict] if verdict != 'uncertain' else max(shares.values())
    return Comparison(a_rounds=int(ta.size), b_rounds=int(tb.size), ratio=ratio, ci_low=low,
                      ci_high=high, machine=machine, normalized=normalize, verdict=verdict,
                      probability=probability, p_slower=p_slower, p_faster=p_faster,
                      p_same=p_same, method='bootstrap', **common)


def _memory_change(a: Optional[int], b: Optional[int]) -> Optional[str]:
    if a is None or b is None or a <= 0:
        return None
    if b > a * (1 + MEMORY_TOLERANCE) and b - a > MEMORY_MIN_BYTES:
        return 'more'
    if b * (1 + MEMORY_TOLERANCE) < a and a - b > MEMORY_MIN_BYTES:
        return 'less'
    return 'same'


def compare_runs(a: Sequence[Run], b: Sequence[Run], tolerance: float = DEFAULT_TOLERANCE,
                 confidence: float = DEFAULT_CONFIDENCE, normalize: bool = True,
                 names: Optional[Sequence[str]] = None,
                 n_resamples: int = DEFAULT_RESAMPLES) -> List[Comparison]:
    """Compares every benchmark present in both `a` and `b` (or those of `names`).

    Raises:
      SimharnessValueError: no benchmark in common, or one of `names` missing on a side.
    """
    common = common_names(a, b)
    if names is not None:
        missing = [n for n in names if n not in common]
        if missing:
            raise SimharnessValueError(f'benchmarks not in both A and B: {missing}')
        common = list(names)
    if not common:
        raise SimharnessValueError('A and B have no benchmark in common (A: '
                                   f'{sorted(set().union(*(r.benchmarks for r in a)))[:5]}..., '
                                   f'B: {sorted(set().union(*(r.benchmarks for r in b)))[:5]}...)')
    return [compare_measurements(n, measurements(a, n), measurements(b, n), tolerance,
                                 confidence, normalize, n_resamples) for n in common]


def _time(seconds: float) -> str:
    if not math.isfinite(seconds):
        return '-'
    if seconds >= 1:
        return f'{seconds:.3f} s'
    if seconds >= 1e-3:
        return f'{seconds * 1e3:.2f} ms'
    return f'{seconds * 1e6:.1f} us'


def _mb(value: Optional[int]) -> str:
    return '-' if value is None else f'{value / (1 << 20):,.0f}'


def format_comparisons(comparisons: Sequence[Comparison], a_label: str = 'A',
                       b_label: str = 'B') -> str:
    """A markdown table: per benchmark the medians, B/A with its interval, the machine
    factor, the verdict with its probability, peak RSS and whether results changed."""
    if not comparisons:
        return '(no benchmarks)'
    conf = comparisons[0].confidence
    lines = [f'| benchmark | {a_label} | {b_label} | B/A [{conf:.0%} interval] | machine | '
             'verdict | peak RSS MB A -> B | results |',
             '|---|---|---|---|---|---|---|---|']
    for c in comparisons:
        verdict = c.verdict if c.probability is None else f'{c.verdict} ({c.probability:.0%})'
        if c.method == 'quartiles':
            verdict += ' [quartiles]'
        results = {None: '-', False: 'same', True: 'CHANGED'}[c.results_changed]
        flags = [f for f in c.flags if f != 'RESULTS CHANGED']
        lines.append(
            f'| {c.name} | {_time(c.a_median)} | {_time(c.b_median)} | {c.ratio:.3f} '
            f'[{c.ci_low:.3f}, {c.ci_high:.3f}] | '
            f'{"-" if c.machine is None else format(c.machine, ".3f")} | {verdict}'
            f'{"".join(" **" + f + "**" for f in flags)} | {_mb(c.memory_a)} -> '
            f'{_mb(c.memory_b)} | {results} |')
    regress = [c.name for c in comparisons if c.regression]
    tol = comparisons[0].tolerance
    lines += ['', f'B/A: median round time of B over A (machine-normalized where both timed the '
                  f'calibration workload; "machine": how much slower the machine itself was for '
                  f'B). Verdicts need {conf:.0%} of the bootstrap distribution beyond '
                  f'(slower/faster) or within (same) a tolerance of {tol:.0%}.',
              f'{len(regress)} regression(s)' + (f': {", ".join(regress)}' if regress else '')]
    return '\n'.join(lines)


def any_regression(comparisons: Sequence[Comparison]) -> bool:
    """True when some benchmark is 'slower' or uses more memory."""
    return any(c.regression or c.memory_change == 'more' for c in comparisons)
