"""Steps in a benchmark's history: a noise-aware piecewise-constant fit, then a test per step.

The series is, per commit in commit order, the log of each of its runs' median round
times. The model (as in asv's step detection and Apache Otava's change points): the
series is flat between change points, plus noise of two kinds,

* ``within_sd``: the scatter of repeated runs of one commit (pooled over the commits that
  have two runs or more);
* ``level_sd``: a per-commit deviation shared by a commit's runs (the load its runs met:
  runs of one commit usually run together), estimated robustly from the differences of
  neighbouring commits' means (1.4826 x their median absolute deviation / sqrt 2), less the
  share ``within_sd`` explains. A few real steps among many commits barely move it.

**Fit** (`fit_segments`): commit means ``m_i`` weighted by ``w_i = 1 / (level_sd^2 +
within_sd^2 / n_i)`` (``n_i`` runs); the segmentation that minimizes
``sum over segments of sum_i w_i (m_i - segment mean)^2 + penalty * log(commits) * steps``,
found exactly by PELT (Killick, Fearnhead and Eckley 2012; `ruptures.Pelt` with this weighted
cost). The cost is in units of the noise, so the penalty (default 2 log n, the Schwarz
criterion for a change of mean at an unknown place) does not depend on how noisy the machine
is: a noisier history needs a larger step.

**Test** (`find_changes`): every change point the fit proposes is then tested by the caller's
`test` (for the history: `simharness.bench.compare.compare_measurements` of the runs of the
segments on either side, with the per-run scatter ``sqrt(within_sd^2 + level_sd^2)``, the
confidence split among the places a step could be (Bonferroni) and the practical tolerance).
While some change point fails, the weakest failing one is dropped, its two segments merged,
and the rest tested again: what remains is a segmentation in which every step passed.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, Iterable, List, Optional, Sequence, Tuple, TypeVar, Union

import numpy as np

from simharness.errors import SimharnessValueError

__all__ = [
    'DEFAULT_PENALTY',
    'Noise',
    'check_penalty',
    'estimate_noise',
    'find_changes',
    'fit_segments',
]

#: The penalty per change point, in units of log(number of commits) (Schwarz: 2).
DEFAULT_PENALTY = 2.0
#: The noise is never taken as smaller than this (sd of log medians: 0.1 %).
MIN_SD = 1e-3
#: Fewer commits than this, without repeated runs of a commit: the noise is unknown.
MIN_COMMITS_FOR_LEVEL_NOISE = 4
_MAD_TO_SD = 1.4826

T = TypeVar('T')
#: Per commit, the log medians of its runs.
Series = Sequence[Union[Sequence[float], np.ndarray]]


@dataclasses.dataclass(frozen=True)
class Noise:
    """The noise of a per-commit series of log run medians.

    Attributes:
      within_sd: sd of repeated runs of one commit (0 when no commit has two runs).
      within_df: its degrees of freedom.
      level_sd: sd of a commit's deviation shared by its runs.
      level_df: the (effective) degrees of freedom of `level_sd`'s estimate (0: none).
    """

    within_sd: float
    within_df: int
    level_sd: float
    level_df: int

    @property
    def run_sd(self) -> float:
        """The scatter of one run of a commit about its segment's level."""
        return max(MIN_SD, math.hypot(self.within_sd, self.level_sd))

    @property
    def df(self) -> int:
        return self.within_df + self.level_df

    def weight(self, runs: int) -> float:
        """1 / the variance of the mean of `runs` runs of one commit."""
        var = self.level_sd**2 + self.within_sd**2 / max(1, runs)
        return 1.0 / max(var, MIN_SD**2)


def _check_series(series: Series) -> List[np.ndarray]:
    if isinstance(series, (str, bytes)) or not isinstance(series, Sequence):
        raise SimharnessValueError(
            'series must be a sequence (one entry per commit) of '
            f'sequences of log run medians, got {type(series).__name__}'
        )
    out = []
    for i, values in enumerate(series):
        try:
            arr = np.asarray(values, dtype=np.float64).reshape(-1)
        except (TypeError, ValueError):
            raise SimharnessValueError(
                f'series[{i}]: expected numbers (log run medians), got {values!r}'
            ) from None
        if arr.size == 0:
            raise SimharnessValueError(
                f'series[{i}]: a commit without runs (expected at least one log run median)'
            )
        if not np.all(np.isfinite(arr)):
            raise SimharnessValueError(
                f'series[{i}]: expected finite log run medians, got {arr.tolist()}'
            )
        out.append(arr)
    return out


def estimate_noise(series: Series, within: Optional[Tuple[float, int]] = None) -> Optional[Noise]:
    """The `Noise` of `series` (per commit, the log medians of its runs), or None if unknown.

    Args:
      within: ``(sd, df)`` of repeated runs of one commit measured elsewhere (e.g. the
        machine's other runs), pooled with the repeated runs in `series`.

    Returns:
      None when neither repeated runs nor enough commits
      (`MIN_COMMITS_FOR_LEVEL_NOISE`) tell the noise.

    Raises:
      SimharnessValueError: a commit without runs, or values that are not finite numbers.
    """
    values = _check_series(series)
    ss, df = 0.0, 0
    for v in values:
        if v.size >= 2:
            ss += float(((v - v.mean()) ** 2).sum())
            df += v.size - 1
    if within is not None and within[1] > 0:
        ss += within[0] ** 2 * within[1]
        df += int(within[1])
    within_sd = math.sqrt(ss / df) if df else 0.0
    if len(values) < MIN_COMMITS_FOR_LEVEL_NOISE:
        if not df:
            return None
        return Noise(within_sd, df, 0.0, 0)
    means = np.array([v.mean() for v in values])
    d = np.diff(means)
    mad = float(np.median(np.abs(d - np.median(d))))
    var_means = (_MAD_TO_SD * mad) ** 2 / 2.0
    share = float(np.mean([within_sd**2 / v.size for v in values]))
    level_sd = math.sqrt(max(0.0, var_means - share))
    # the MAD uses about 37 % of its sample's information
    level_df = max(1, int(0.37 * d.size)) if level_sd > 0 else 0
    if not df and level_sd == 0.0:
        level_sd, level_df = MIN_SD, 1
    return Noise(within_sd, df, level_sd, level_df)


def _weighted_cost(weights: np.ndarray, means: np.ndarray) -> object:
    """A ruptures cost: the weighted sum of squares of commit means about their segment's."""
    from ruptures.base import BaseCost

    class WeightedL2(BaseCost):  # pylint: disable=abstract-method
        model = 'weighted_l2'
        min_size = 1

        def __init__(self) -> None:
            self.signal = means.reshape(-1, 1)
            w = np.concatenate([[0.0], np.cumsum(weights)])
            wm = np.concatenate([[0.0], np.cumsum(weights * means)])
            wm2 = np.concatenate([[0.0], np.cumsum(weights * means**2)])
            self._sums = w, wm, wm2

        def fit(self, signal: np.ndarray) -> 'WeightedL2':
            del signal  # the sums are built from the weights and means at construction
            return self

        def error(self, start: int, end: int) -> float:
            w, wm, wm2 = self._sums
            sw = w[end] - w[start]
            s1 = wm[end] - wm[start]
            return max(0.0, float(wm2[end] - wm2[start] - s1 * s1 / sw))

    return WeightedL2()


def check_penalty(penalty: float) -> None:
    """Raises SimharnessValueError unless `penalty` is a positive finite number."""
    if (
        isinstance(penalty, bool)
        or not isinstance(penalty, (int, float))
        or not (penalty > 0 and math.isfinite(penalty))
    ):
        raise SimharnessValueError(
            'penalty must be a positive number (per step, times log of '
            f'the number of commits), got {penalty!r}'
        )


def fit_segments(series: Series, noise: Noise, penalty: float = DEFAULT_PENALTY) -> List[int]:
    """The change points of the best piecewise-constant fit of `series` (PELT, `ruptures`).

    Returns:
      The indices of the first commit of each new level (ascending; [] when flat).

    Raises:
      SimharnessValueError: a bad `series` or a `penalty` that is not a positive number.
    """
    values = _check_series(series)
    check_penalty(penalty)
    if len(values) < 2:
        return []
    import ruptures

    means = np.array([v.mean() for v in values])
    weights = np.array([noise.weight(v.size) for v in values])
    algo = ruptures.Pelt(custom_cost=_weighted_cost(weights, means), min_size=1, jump=1)
    algo.fit(means.reshape(-1, 1))
    bkps = algo.predict(pen=penalty * math.log(len(values)))
    return [int(b) for b in bkps[:-1]]


def find_changes(
    series: Series,
    test: Callable[[range, range], Tuple[bool, float, T]],
    noise: Optional[Noise] = None,
    penalty: float = DEFAULT_PENALTY,
    extra: Iterable[int] = (),
    pair_test: Optional[Callable[[int], Optional[Tuple[bool, float, T]]]] = None,
) -> List[Tuple[int, T]]:
    """The steps of `series`: change points of the fit that pass `test`.

    Args:
      series: per commit, the log medians of its runs.
      test: ``test(before, after)`` for the commits (index ranges) of the segments on either
        side of a change point: ``(passes, strength, result)``; the weakest failing change
        point is dropped first.
      noise: default `estimate_noise(series)`; with an unknown noise, no fit.
      extra: more candidate change points (e.g. commits that took turns with the one before).
      pair_test: for a change point at ``i``, a test of commits ``i - 1`` and ``i`` alone
        (e.g. round by round, when they took turns), or None to use `test`.

    Returns:
      ``(index of the step's first commit, result)`` for each step, ascending.
    """
    values = _check_series(series)
    n = len(values)
    if noise is None:
        noise = estimate_noise(values)
    cands = set(fit_segments(values, noise, penalty)) if noise is not None and n >= 2 else set()
    for i in extra:
        if not 0 < i < n:
            raise SimharnessValueError(
                f'extra change point {i} is not inside the series (expected 1..{n - 1})'
            )
        cands.add(int(i))
    while True:
        ordered = sorted(cands)
        bounds = [0, *ordered, n]
        results = []
        for k, c in enumerate(ordered):
            r = pair_test(c) if pair_test is not None else None
            if r is None:
                r = test(range(bounds[k], c), range(c, bounds[k + 2]))
            results.append((c, r))
        failing = [(r[1], c) for c, r in results if not r[0]]
        if not failing:
            return [(c, r[2]) for c, r in results]
        cands.discard(min(failing)[1])
