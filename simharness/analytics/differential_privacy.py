"""TFF's ``analytics/differential_privacy.py``: differential privacy helpers."""

from __future__ import annotations

import dp_accounting

__all__ = ['analytic_gauss_stddev']


def analytic_gauss_stddev(epsilon: float, delta: float, norm_bound: float, tol: float = 1.0e-12):
    """The stddev of the Gaussian mechanism that is (epsilon, delta)-DP.

    The analytic Gaussian mechanism (``dp_accounting.get_sigma_gaussian``)
    for an L2 sensitivity of `norm_bound`.

    Args:
      epsilon: the target epsilon (>= 0).
      delta: the target delta (in [0, 1]).
      norm_bound: the L2 global sensitivity bound (>= 0; 0 gives 0).
      tol: the error tolerance of the search.

    Raises:
      ValueError: an argument out of range.
    """
    if epsilon < 0:
        raise ValueError(f'epsilon must be non-negative, got epsilon={epsilon}.')
    if not 0 <= delta <= 1:
        raise ValueError(f'delta must be in [0, 1], got delta={delta}.')
    if norm_bound < 0:
        raise ValueError(f'norm_bound must be non-negative, got {norm_bound}.')
    if norm_bound == 0:
        return 0
    scaled_tol = tol / norm_bound
    return norm_bound * dp_accounting.get_sigma_gaussian(epsilon, delta, scaled_tol)
