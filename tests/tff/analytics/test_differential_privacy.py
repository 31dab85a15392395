"""Port of TFF's ``tensorflow_federated/python/analytics/differential_privacy_test.py`` (all cases).

Added: a zero norm bound needs no noise, and the stddev scales with the bound.
"""

import math

import pytest

from simharness.analytics import differential_privacy


@pytest.mark.parametrize(
    'args_update, regex',
    [
        ({'epsilon': -1.0}, 'epsilon'),
        ({'delta': -1.0}, 'delta'),
        ({'delta': 2.0}, 'delta'),
        ({'norm_bound': -1.0}, 'norm_bound'),
    ],
    ids=['epsilon_neg', 'delta_neg', 'delta_gt_1', 'norm_bound_neg'],
)
def test_analytic_gauss_stddev_input_validation(args_update, regex):
    args = dict(epsilon=1.0, delta=0.1, norm_bound=1.0, tol=1.0e-12)
    args.update(args_update)
    with pytest.raises(ValueError, match=regex):
        differential_privacy.analytic_gauss_stddev(**args)


@pytest.mark.parametrize(
    'epsilon, delta, norm_bound, expected_stddev',
    [
        (1.0, 0.5, 1.0, 0.50706503),
        (math.log(3), 0.00001, 1.0, 3.42466239),
    ],
    ids=['eps_1_delta_0.5', 'eps_log3_delta_1'],
)
def test_analytic_gauss_stddev_as_expected(epsilon, delta, norm_bound, expected_stddev):
    sigma = differential_privacy.analytic_gauss_stddev(
        epsilon=epsilon, delta=delta, norm_bound=norm_bound
    )
    assert sigma == pytest.approx(expected_stddev, abs=5e-8)


def test_zero_norm_bound_and_scaling():
    assert differential_privacy.analytic_gauss_stddev(1.0, 1e-5, 0.0) == 0
    one = differential_privacy.analytic_gauss_stddev(1.0, 1e-5, 1.0)
    assert differential_privacy.analytic_gauss_stddev(1.0, 1e-5, 3.0) == pytest.approx(
        3 * one, rel=1e-6
    )
