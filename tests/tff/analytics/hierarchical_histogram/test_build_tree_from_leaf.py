"""Port of TFF's ``analytics/hierarchical_histogram/build_tree_from_leaf_test.py`` (all cases)."""

import numpy as np
import pytest

from simharness.analytics.hierarchical_histogram import build_tree_from_leaf


@pytest.mark.parametrize(
    'histogram, arity, expected',
    [
        ([1.0, 1.0, 1.0, 1.0], 2, [[4.0], [2.0, 2.0], [1.0, 1.0, 1.0, 1.0]]),
        ([1.0, 1.0, 1.0], 2, [[3.0], [2.0, 1.0], [1.0, 1.0, 1.0, 0.0]]),
        ([1.0, 1.0, 1.0], 3, [[3.0], [1.0, 1.0, 1.0]]),
        ([1.0, 1.0], 3, [[2.0], [1.0, 1.0, 0.0]]),
    ],
    ids=['binary_no_padding', 'binary_padding', 'ternary_no_padding', 'ternary_padding'],
)
def test_create_hierarchical_hist(histogram, arity, expected):
    result = build_tree_from_leaf.create_hierarchical_histogram(histogram, arity)
    assert len(result) == len(expected)
    for layer, expected_layer in zip(result, expected):
        np.testing.assert_allclose(layer, expected_layer)


def test_arity_below_two_raises():
    with pytest.raises(ValueError, match='Arity should be at least 2'):
        build_tree_from_leaf.create_hierarchical_histogram([1.0, 2.0], 1)
