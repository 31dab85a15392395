"""Noise-aware comparison of benchmark runs: A (the baseline) against B (the candidate).

Per benchmark, the ratio B/A of median round times, an interval at the
chosen confidence, and a verdict with its probability. Two kinds of evidence:

**Interleaved runs** (``simharness bench ab``: the two pytest sessions took
turns round by round, so both met the same machine load): every round is a
sample. The interval is a percentile bootstrap (`scipy.stats.bootstrap`, the
rounds of each side resampled independently) of the ratio of medians, and
the probabilities are shares of its bootstrap distribution.

**Separate runs** (sessions run one after another, e.g. at two commits): on a
shared machine the load changes between sessions, so one session's rounds say
nothing about the next session's (measured on the 2-core development
machine: the same code's median moved 0.6x-2.5x between back-to-back
sessions while each session's interval was a few percent wide). The unit is
then a run: the log of each run's median. The difference of the two sides'
means gets a Student-t interval whose spread is the between-run scatter:
that of the runs compared (when a side has several), pooled with the scatter
of repeated runs of one commit found in the history (``noise``, see
`between_run_noise`). With one run per side and no such history, the noise
is unknown and the verdict is ``uncertain``: repeat the runs
(``simharness bench run --repeat``) or interleave them.

Verdicts, with a tolerance T (default 10 %: changes that small are not
reported even when real): ``slower`` when the probability that B/A exceeds
1 + T is at least the confidence (default 95 %), ``faster`` when that of
B/A below 1 / (1 + T) is, ``same`` when that of B/A within is, ``uncertain``
otherwise.

Next to the time: the calibration workload's ratio (``machine``: how much
slower the machine itself was for B; used to normalize only when asked, since
on the development machine it did not follow the load that slows simulations,
which use every core), memory (the sum of the driver's and the workers' peak
RSS, flagged when it changes by more than 10 % and 16 MB) and the result
fingerprints (a changed result is flagged, loudest when B is faster: a
speed-up that changes results).
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from simharness.bench.results import Measurement, Run, common_names, measurements
from simharness.errors import SimharnessValueError

__all__ = [
    'Comparison',
    'DEFAULT_CONFIDENCE',
    'DEFAULT_TOLERANCE',
    'compare_measurements',
    'compare_runs',
    'format_comparisons',
]

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
      ratio: B / A of the median round times ('interleaved': of the pooled rounds;
        'runs': the geometric mean of B's run medians over A's), machine-normalized
        when `normalized`.
      raw_ratio: B / A of the pooled medians, not normalized.
      ci_low, ci_high: its interval at `confidence` (NaN when the noise is unknown).
      machine: the machine's own slow-down for B (calibration median B / A), or None.
      verdict: 'slower', 'faster', 'same' or 'uncertain'.
      probability: the probability behind the verdict (for 'uncertain': the
        largest of the three); None when the noise is unknown.
      p_slower, p_faster, p_same: the three probabilities.
      method: 'interleaved' (rounds are samples) or 'runs' (runs are).
      runs: runs per side; noise_sd, noise_df: the between-run scatter used ('runs').
      note: why there is no verdict, when there is none.
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
    runs: Tuple[int, int] = (1, 1)
    noise_sd: Optional[float] = None
    noise_df: Optional[int] = None
    note: Optional[str] = None

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
            out.append(
                'FASTER BUT RESULTS CHANGED' if self.verdict == 'faster' else 'RESULTS CHANGED'
            )
        if self.memory_change == 'more':
            out.append('MORE MEMORY')
        return out

    def describe(self) -> str:
        """One sentence: the ratio, its interval, the machine factor and the verdict."""
        text = (
            f'{self.name}: B/A {self.ratio:.3f} ({self.confidence:.0%} interval '
            f'{self.ci_low:.3f}-{self.ci_high:.3f}'
        )
        if self.machine is not None:
            text += f'; machine {self.machine:.3f}, raw {self.raw_ratio:.3f}'
        text += f'; {self.method}, runs {self.runs[0]}/{self.runs[1]}): {self.verdict}'
        if self.probability is not None:
            text += f' (probability {self.probability:.1%}, tolerance {self.tolerance:.0%})'
        if self.note:
            text += f' ({self.note})'
        return text + ''.join(f'; {f}' for f in self.flags)


# ------------------------------------------------------------------ statistics


def _median_ratio_stat(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.median(b, axis=axis) / np.median(a, axis=axis)


def _normalized_ratio_stat(
    a: np.ndarray, b: np.ndarray, ca: np.ndarray, cb: np.ndarray, axis: int = -1
) -> np.ndarray:
    return (np.median(b, axis=axis) / np.median(a, axis=axis)) / (
        np.median(cb, axis=axis) / np.median(ca, axis=axis)
    )


def bootstrap_ratio(
    a: np.ndarray,
    b: np.ndarray,
    ca: Optional[np.ndarray] = None,
    cb: Optional[np.ndarray] = None,
    confidence: float = DEFAULT_CONFIDENCE,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> Tuple[float, float, float, np.ndarray]:
    """The ratio of medians B/A (calibration-normalized when `ca`, `cb` are given), its
    percentile-bootstrap interval and bootstrap distribution (`scipy.stats.bootstrap`)."""
    from scipy import stats

    if ca is not None and cb is not None:
        samples: Tuple[np.ndarray, ...] = (a, b, ca, cb)
        statistic = _normalized_ratio_stat
    else:
        samples, statistic = (a, b), _median_ratio_stat
    point = float(statistic(*samples))
    kwargs = dict(
        n_resamples=n_resamples,
        confidence_level=confidence,
        method='percentile',
        vectorized=True,
        axis=-1,
    )
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')  # degenerate (all-equal) samples: a zero-width interval
        try:
            res = stats.bootstrap(samples, statistic, rng=np.random.default_rng(seed), **kwargs)
        except TypeError:  # scipy < 1.15
            res = stats.bootstrap(
                samples, statistic, random_state=np.random.default_rng(seed), **kwargs
            )
    dist = np.asarray(res.bootstrap_distribution, dtype=np.float64)
    low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    if not (math.isfinite(low) and math.isfinite(high)):
        low, high = (
            float(np.quantile(dist, (1 - confidence) / 2)),
            float(np.quantile(dist, (1 + confidence) / 2)),
        )
    return point, low, high, dist


#: A round of B is paired with the round of A that started nearest to it, if
#: that is at most this many seconds away.
MAX_PAIR_SECONDS = 5.0


def _paired_log_ratios(
    a: Sequence[Measurement], b: Sequence[Measurement], normalize: bool
) -> Optional[np.ndarray]:
    """log(B round / the A round that started nearest to it), for interleaved sessions."""
    if any(m.starts is None or m.starts.size != m.times.size for m in [*a, *b]):
        return None
    if normalize and any(
        m.calibration is None or m.calibration.size != m.times.size for m in [*a, *b]
    ):
        normalize = False
    sa = np.concatenate([m.starts for m in a])
    order = np.argsort(sa)
    sa = sa[order]
    la = np.log(np.concatenate([m.times for m in a]))[order]
    if normalize:
        la = la - np.log(np.concatenate([m.calibration for m in a]))[order]
    out = []
    for m in b:
        lb = np.log(m.times) - (np.log(m.calibration) if normalize else 0.0)
        idx = (
            np.clip(np.searchsorted(sa, m.starts), 1, sa.size - 1)
            if sa.size > 1
            else np.zeros(m.starts.size, dtype=int)
        )
        if sa.size > 1:
            left = idx - 1
            idx = np.where(np.abs(sa[left] - m.starts) <= np.abs(sa[idx] - m.starts), left, idx)
        near = np.abs(sa[idx] - m.starts) <= MAX_PAIR_SECONDS
        out.append((lb - la[idx])[near])
    return np.concatenate(out) if out else None


def _per_session_ratios(
    a: Sequence[Measurement], b: Sequence[Measurement], normalize: bool
) -> List[float]:
    """Paired B/A of each session of a side against all sessions of the other side."""
    out = []
    if len(b) > 1:
        for m in b:
            r = _paired_log_ratios(a, [m], normalize)
            if r is not None and r.size:
                out.append(float(np.exp(np.median(r))))
    if len(a) > 1:
        for m in a:
            r = _paired_log_ratios([m], b, normalize)
            if r is not None and r.size:
                out.append(float(np.exp(np.median(r))))
    return out


def bootstrap_paired(
    log_ratios: np.ndarray,
    confidence: float = DEFAULT_CONFIDENCE,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> Tuple[float, float, float, np.ndarray]:
    """exp(median) of paired log ratios, its percentile-bootstrap interval and distribution."""
    from scipy import stats

    def statistic(x: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.exp(np.median(x, axis=axis))

    point = float(statistic(log_ratios))
    kwargs = dict(
        n_resamples=n_resamples,
        confidence_level=confidence,
        method='percentile',
        vectorized=True,
        axis=-1,
    )
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        try:
            res = stats.bootstrap(
                (log_ratios,), statistic, rng=np.random.default_rng(seed), **kwargs
            )
        except TypeError:  # scipy < 1.15
            res = stats.bootstrap(
                (log_ratios,), statistic, random_state=np.random.default_rng(seed), **kwargs
            )
    dist = np.asarray(res.bootstrap_distribution, dtype=np.float64)
    return (
        point,
        float(np.quantile(dist, (1 - confidence) / 2)),
        float(np.quantile(dist, (1 + confidence) / 2)),
        dist,
    )


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
    for name, value, ok in (
        ('tolerance', tolerance, 0 <= tolerance < 10),
        ('confidence', confidence, 0.5 <= confidence < 1),
    ):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not ok:
            raise SimharnessValueError(
                f'{name} must be a number in '
                f'{"[0, 10)" if name == "tolerance" else "[0.5, 1)"}, got {value!r}'
            )


def _run_location(m: Measurement, ref_cal: Optional[float]) -> float:
    """A run's median round time (divided by its machine slow-down when `ref_cal` is given)."""
    med = float(np.median(m.times)) if m.times is not None else m.median
    if ref_cal is not None and m.calibration is not None:
        med *= ref_cal / float(np.median(m.calibration))
    return med


def _verdict(p_slower: float, p_faster: float, confidence: float) -> Tuple[str, float]:
    shares = {'slower': p_slower, 'faster': p_faster, 'same': 1.0 - p_slower - p_faster}
    verdict = next((v for v, p in shares.items() if p >= confidence), 'uncertain')
    return verdict, (shares[verdict] if verdict != 'uncertain' else max(shares.values()))


def compare_measurements(
    name: str,
    a: Sequence[Measurement],
    b: Sequence[Measurement],
    tolerance: float = DEFAULT_TOLERANCE,
    confidence: float = DEFAULT_CONFIDENCE,
    normalize: bool = False,
    interleaved: bool = False,
    noise: Optional[Tuple[float, int]] = None,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> Comparison:
    """Compares benchmark `name` measured in runs `a` (baseline) and `b` (candidate).

    Args:
      interleaved: the runs took turns round by round (``simharness bench ab``):
        rounds are the samples (bootstrap). Otherwise runs are (Student t).
      noise: ``(sd, df)``: the scatter (standard deviation of the log of run
        medians) of repeated runs of one commit and its degrees of freedom,
        pooled with that of the runs compared (see `between_run_noise`).
      normalize: divide each run by its calibration workload's median first.

    Raises:
      SimharnessValueError: an empty side, or a bad tolerance / confidence.
    """
    from scipy import stats

    _check(tolerance, confidence)
    if not a or not b:
        raise SimharnessValueError(
            f'{name}: nothing to compare (A has {len(a)} measurements, B {len(b)})'
        )
    upper = 1.0 + tolerance
    workloads = {m.calibration_workload for m in [*a, *b]}
    have_cal = (
        len(workloads) == 1
        and None not in workloads
        and all(m.calibration is not None and m.calibration.size for m in [*a, *b])
    )
    machine = None
    if have_cal:
        machine = float(
            np.median(np.concatenate([m.calibration for m in b]))
            / np.median(np.concatenate([m.calibration for m in a]))
        )
    normalize = normalize and have_cal
    a_med, b_med = _pooled_median(a), _pooled_median(b)
    raw = b_med / a_med if a_med > 0 else float('nan')
    mem_a, mem_b = _memory(a), _memory(b)
    common = dict(
        name=name,
        a_median=a_med,
        b_median=b_med,
        raw_ratio=raw,
        machine=machine,
        normalized=normalize,
        tolerance=tolerance,
        confidence=confidence,
        memory_a=mem_a,
        memory_b=mem_b,
        memory_change=_memory_change(mem_a, mem_b),
        fingerprint_a=_fingerprint(a),
        fingerprint_b=_fingerprint(b),
    )
    have_times = all(
        m.times is not None and m.times.size >= MIN_ROUNDS_FOR_BOOTSTRAP for m in [*a, *b]
    )
    if interleaved and have_times:
        paired = _paired_log_ratios(a, b, normalize)
        if paired is not None and paired.size >= MIN_ROUNDS_FOR_BOOTSTRAP:
            ratio, low, high, dist = bootstrap_paired(paired, confidence, n_resamples, seed)
            method, na, nb = 'interleaved', int(paired.size), int(paired.size)
        else:
            ta, ca = _pool(a, normalize)
            tb, cb = _pool(b, normalize)
            ratio, low, high, dist = bootstrap_ratio(ta, tb, ca, cb, confidence, n_resamples, seed)
            method, na, nb = 'interleaved-unpaired', int(ta.size), int(tb.size)
        p_slower = float(np.mean(dist > upper))
        p_faster = float(np.mean(dist < 1.0 / upper))
        verdict, prob = _verdict(p_slower, p_faster, confidence)
        note = None
        if verdict in ('slower', 'faster') and (len(a) > 1 or len(b) > 1):
            # Sessions have lasting effects of their own: a change must show in every
            # session of each side (each against the other side's sessions), not in the pool only.
            per_session = _per_session_ratios(a, b, normalize)
            beyond = [r > upper if verdict == 'slower' else r < 1.0 / upper for r in per_session]
            if per_session and not all(beyond):
                note = (
                    f'{verdict} in the pool but not in every session (per-session B/A: '
                    + ', '.join(f'{r:.3f}' for r in per_session)
                    + ')'
                )
                verdict = 'uncertain'
        return Comparison(
            a_rounds=na,
            b_rounds=nb,
            ratio=ratio,
            ci_low=low,
            ci_high=high,
            verdict=verdict,
            probability=prob,
            p_slower=p_slower,
            p_faster=p_faster,
            p_same=1.0 - p_slower - p_faster,
            method=method,
            runs=(len(a), len(b)),
            note=note,
            **common,
        )
    ref = None
    if normalize:
        ref = float(np.median(np.concatenate([m.calibration for m in [*a, *b]])))
    la = np.log([_run_location(m, ref) for m in a])
    lb = np.log([_run_location(m, ref) for m in b])
    d = float(lb.mean() - la.mean())
    ss = float(((la - la.mean()) ** 2).sum() + ((lb - lb.mean()) ** 2).sum())
    df = (la.size - 1) + (lb.size - 1)
    if noise is not None and noise[1] > 0:
        ss += noise[0] ** 2 * noise[1]
        df += int(noise[1])
    rounds = dict(
        a_rounds=sum(m.rounds for m in a),
        b_rounds=sum(m.rounds for m in b),
        runs=(la.size, lb.size),
    )
    if df == 0:  # one run per side, no history: the between-run noise is unknown
        return Comparison(
            ratio=math.exp(d),
            ci_low=float('nan'),
            ci_high=float('nan'),
            verdict='uncertain',
            probability=None,
            p_slower=None,
            p_faster=None,
            p_same=None,
            method='runs',
            note='between-run noise unknown (one run per side, no repeated runs in the history)',
            **rounds,
            **common,
        )
    sd = math.sqrt(ss / df)
    se = sd * math.sqrt(1.0 / la.size + 1.0 / lb.size)
    if se == 0:
        se = 1e-12
    tq = float(stats.t.ppf(0.5 + confidence / 2, df))
    p_slower = float(stats.t.sf((math.log(upper) - d) / se, df))
    p_faster = float(stats.t.cdf((-math.log(upper) - d) / se, df))
    verdict, prob = _verdict(p_slower, p_faster, confidence)
    return Comparison(
        ratio=math.exp(d),
        ci_low=math.exp(d - tq * se),
        ci_high=math.exp(d + tq * se),
        verdict=verdict,
        probability=prob,
        p_slower=p_slower,
        p_faster=p_faster,
        p_same=1.0 - p_slower - p_faster,
        method='runs',
        noise_sd=sd,
        noise_df=df,
        **rounds,
        **common,
    )


def between_run_noise(
    runs: Sequence[Run], name: str, exclude: Sequence[Run] = ()
) -> Optional[Tuple[float, int]]:
    """The scatter of repeated runs of one commit: ``(sd, df)`` of the log run medians of
    benchmark `name`, pooled over every (machine, commit, dirty) with two runs or more, or None.

    Runs of interleaved sessions and those in `exclude` (the runs being
    compared: their scatter is counted there) are left out.
    """
    skip = {id(r) for r in exclude}
    groups: Dict[Tuple[str, Optional[str], bool], List[float]] = {}
    for r in runs:
        if id(r) in skip or r.interleave or not r.commit or name not in r.benchmarks:
            continue
        groups.setdefault((r.machine, r.commit, r.dirty), []).append(
            math.log(_run_location(r.benchmarks[name], None))
        )
    ss, df = 0.0, 0
    for values in groups.values():
        if len(values) >= 2:
            v = np.asarray(values)
            ss += float(((v - v.mean()) ** 2).sum())
            df += v.size - 1
    return (math.sqrt(ss / df), df) if df else None


def _memory_change(a: Optional[int], b: Optional[int]) -> Optional[str]:
    if a is None or b is None or a <= 0:
        return None
    if b > a * (1 + MEMORY_TOLERANCE) and b - a > MEMORY_MIN_BYTES:
        return 'more'
    if b * (1 + MEMORY_TOLERANCE) < a and a - b > MEMORY_MIN_BYTES:
        return 'less'
    return 'same'


def interleaved_pair(a: Sequence[Run], b: Sequence[Run]) -> bool:
    """True when `a` and `b` are the two sides of the same ``simharness bench ab`` sessions."""
    if not a or not b or len(a) != len(b):
        return False
    if any(not r.interleave or r.interleave.get('broken') for r in [*a, *b]):
        return False
    return sorted(r.interleave['session'] for r in a) == sorted(r.interleave['session'] for r in b)


def compare_runs(
    a: Sequence[Run],
    b: Sequence[Run],
    tolerance: float = DEFAULT_TOLERANCE,
    confidence: float = DEFAULT_CONFIDENCE,
    normalize: bool = False,
    names: Optional[Sequence[str]] = None,
    history: Sequence[Run] = (),
    n_resamples: int = DEFAULT_RESAMPLES,
) -> List[Comparison]:
    """Compares every benchmark present in both `a` and `b` (or those of `names`).

    Interleaved sessions (`interleaved_pair`) are compared round by round;
    other runs run by run, with the between-run noise of `history` (repeated
    runs of one commit; see `between_run_noise`).

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
        raise SimharnessValueError(
            'A and B have no benchmark in common (A: '
            f'{sorted(set().union(*(r.benchmarks for r in a)))[:5]}..., '
            f'B: {sorted(set().union(*(r.benchmarks for r in b)))[:5]}...)'
        )
    inter = interleaved_pair(a, b)
    out = []
    for n in common:
        noise = None if inter else between_run_noise(history, n, exclude=[*a, *b])
        out.append(
            compare_measurements(
                n,
                measurements(a, n),
                measurements(b, n),
                tolerance,
                confidence,
                normalize,
                inter,
                noise,
                n_resamples,
            )
        )
    return out


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


def format_comparisons(
    comparisons: Sequence[Comparison], a_label: str = 'A', b_label: str = 'B'
) -> str:
    """A markdown table: per benchmark the medians, B/A with its interval, the machine
    factor, the verdict with its probability, peak RSS and whether results changed."""
    if not comparisons:
        return '(no benchmarks)'
    conf = comparisons[0].confidence
    lines = [
        f'| benchmark | {a_label} | {b_label} | B/A [{conf:.0%} interval] | machine | '
        'verdict | peak RSS MB A -> B | results |',
        '|---|---|---|---|---|---|---|---|',
    ]
    for c in comparisons:
        verdict = c.verdict if c.probability is None else f'{c.verdict} ({c.probability:.0%})'
        if c.note:
            verdict += f' ({c.note})'
        results = {None: '-', False: 'same', True: 'CHANGED'}[c.results_changed]
        flags = [f for f in c.flags if f != 'RESULTS CHANGED']
        lines.append(
            f'| {c.name} | {_time(c.a_median)} | {_time(c.b_median)} | {c.ratio:.3f} '
            + (f'[{c.ci_low:.3f}, {c.ci_high:.3f}]' if math.isfinite(c.ci_low) else '[-]')
            + f' {c.method} {c.runs[0]}/{c.runs[1]} | '
            f'{"-" if c.machine is None else format(c.machine, ".3f")} | {verdict}'
            f'{"".join(" **" + f + "**" for f in flags)} | {_mb(c.memory_a)} -> '
            f'{_mb(c.memory_b)} | {results} |'
        )
    regress = [c.name for c in comparisons if c.regression]
    tol = comparisons[0].tolerance
    lines += [
        '',
        f'B/A: median round time of B over A, with its {conf:.0%} interval, from '
        '"interleaved" rounds (bootstrap) or from "runs" (Student t over run medians; '
        'runs A/B); "machine": the calibration workload\'s B/A (the machine\'s own '
        f'slow-down for B). A verdict needs a probability of {conf:.0%} that B/A lies '
        f'beyond (slower/faster) or within (same) a tolerance of {tol:.0%}.',
        f'{len(regress)} regression(s)' + (f': {", ".join(regress)}' if regress else ''),
    ]
    return '\n'.join(lines)


def any_regression(comparisons: Sequence[Comparison]) -> bool:
    """True when some benchmark is 'slower' or uses more memory."""
    return any(c.regression or c.memory_change == 'more' for c in comparisons)
