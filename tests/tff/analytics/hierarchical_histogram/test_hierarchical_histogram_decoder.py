"""Port of TFF's ``analytics/hierarchical_histogram/hierarchical_histogram_decoder_test.py``.

All of TFF's cases (decoding is numpy, fast). Added: Honaker's estimator
reduces the error of node queries on a noised tree (a statistical check over
many noised trees), and `enforce_consistency` leaves the least-squares tree.
"""

import numpy as np
import pytest
import tensorflow as tf

from simharness.analytics.hierarchical_histogram import build_tree_from_leaf
from simharness.analytics.hierarchical_histogram import hierarchical_histogram_decoder

Decoder = hierarchical_histogram_decoder.HierarchicalHistogramDecoder


def _create_hierarchical_histogram(arity, depth):
    histogram = np.arange(arity ** (depth - 1))
    return tf.ragged.constant(build_tree_from_leaf.create_hierarchical_histogram(histogram, arity))


def _create_noisy_hierarchical_histogram(arity, depth, scale=1.0, rng=np.random):
    hist = np.arange(arity ** (depth - 1))
    layers = build_tree_from_leaf.create_hierarchical_histogram(hist, arity)
    return tf.ragged.constant([v + rng.normal(size=(len(v),), scale=scale) for v in layers])


@pytest.mark.parametrize('depth', [2, 4, 8])
@pytest.mark.parametrize('arity', [2, 3])
@pytest.mark.parametrize('is_consistent', [True, False])
def test_check_consistency(is_consistent, arity, depth):
    if is_consistent:
        hh = _create_hierarchical_histogram(arity, depth)
    else:
        hh = _create_noisy_hierarchical_histogram(arity, depth)
    decoder = Decoder(hh, 0, arity ** (depth - 1))
    assert decoder._check_consistency() == is_consistent


@pytest.mark.parametrize('scale', [0.1, 1.0, 4.0])
@pytest.mark.parametrize('depth', [2, 3])
@pytest.mark.parametrize('arity', [2, 3])
def test_enforce_consistency(arity, depth, scale):
    decoder = Decoder(
        _create_noisy_hierarchical_histogram(arity, depth, scale), 0, arity ** (depth - 1)
    )
    decoder.enforce_consistency()
    assert decoder._check_consistency()


def test_enforce_consistency_is_the_least_squares_tree():
    # Root 10, children 3 and 5: the leaves (a, b) minimize
    # (a + b - 10)^2 + (a - 3)^2 + (b - 5)^2: 2a + b = 13, a + 2b = 15.
    decoder = Decoder(tf.ragged.constant([[10.0], [3.0, 5.0]]), 0, 2, use_efficient=True)
    decoder.enforce_consistency()
    a, b = np.linalg.lstsq(
        np.array([[1.0, 1.0], [1.0, 0.0], [0.0, 1.0]]), np.array([10.0, 3.0, 5.0]), rcond=None
    )[0]
    np.testing.assert_allclose(decoder.node_query(1, 0), a)
    np.testing.assert_allclose(decoder.node_query(1, 1), b)
    np.testing.assert_allclose(decoder.node_query(0, 0), a + b)
    np.testing.assert_allclose([a, b], [11 / 3, 17 / 3])


@pytest.mark.parametrize(
    'ragged',
    [
        [[0.0, 0.0]],
        [[0.0, 0.0], [0.0, 0.0, 0.0, 0.0]],
        [[0.0], [0.0, 0.0], [0.0, 0.0, 0.0, 0.0, 0.0]],
        [[0.0], [0.0, 0.0], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]],
    ],
    ids=['test_1', 'test_2', 'test_3', 'test_4'],
)
def test_init_raises(ragged):
    with pytest.raises(ValueError):
        Decoder(tf.ragged.constant(ragged), 0, 0)


@pytest.mark.parametrize(
    'arity, depth, use_efficient, layer, index',
    [
        (2, 4, False, 1, 1),
        (2, 8, False, 2, 2),
        (2, 4, True, 1, 1),
        (2, 8, True, 2, 2),
        (3, 4, False, 1, 2),
        (3, 8, False, 2, 4),
        (3, 4, True, 1, 2),
        (3, 8, True, 2, 4),
    ],
)
def test_node_query(arity, depth, use_efficient, layer, index):
    decoder = Decoder(
        _create_hierarchical_histogram(arity, depth),
        0,
        arity ** (depth - 1),
        use_efficient=use_efficient,
    )
    span = arity ** (depth - layer - 1)
    expected = float(sum(range(index * span, (index + 1) * span)))
    np.testing.assert_allclose(decoder.node_query(layer, index), expected)


@pytest.mark.parametrize('layer, index', [(-1, 0), (2, 0), (0, -1), (0, 1)])
def test_node_query_raises(layer, index):
    decoder = Decoder(_create_hierarchical_histogram(arity=2, depth=1), 0, 1)
    with pytest.raises(ValueError):
        decoder.node_query(layer, index)


@pytest.mark.parametrize(
    'arity, depth, use_efficient, left, right',
    [
        (2, 4, False, 1, 3),
        (2, 8, False, 0, 7),
        (2, 4, True, 1, 3),
        (2, 8, True, 0, 7),
        (3, 4, False, 1, 3),
        (3, 8, False, 0, 7),
        (3, 4, True, 1, 3),
        (3, 8, True, 0, 7),
    ],
)
def test_range_query(arity, depth, use_efficient, left, right):
    decoder = Decoder(
        _create_hierarchical_histogram(arity, depth),
        0,
        arity ** (depth - 1),
        use_efficient=use_efficient,
    )
    np.testing.assert_allclose(
        decoder.range_query(left, right), (left + right) * (right - left + 1) // 2
    )


@pytest.mark.parametrize('left, right', [(-1, 0), (0, 2), (1, 0)])
def test_range_query_raises(left, right):
    decoder = Decoder(_create_hierarchical_histogram(arity=2, depth=2), 0, 2)
    with pytest.raises(ValueError):
        decoder.range_query(left, right)


@pytest.mark.parametrize(
    'arity, q, expected',
    [
        (2, 0.0, (0, 1)),
        (2, 0.25, (4, 5)),
        (2, 0.5, (5, 6)),
        (2, 0.75, (6, 7)),
        (2, 1.0, (7, 8)),
        (3, 0.0, (0, 1)),
        (3, 0.25, (13, 14)),
        (3, 0.5, (19, 20)),
        (3, 0.75, (23, 24)),
        (3, 1.0, (26, 27)),
    ],
)
def test_quantile_query(arity, q, expected):
    decoder = Decoder(_create_hierarchical_histogram(arity, depth=4), 0, arity**3)
    assert decoder.quantile_query(q) == expected


@pytest.mark.parametrize('q', [-0.1, 1.1])
def test_quantile_query_raises_invalid_quantile(q):
    decoder = Decoder(_create_hierarchical_histogram(arity=2, depth=2), 0, 2)
    with pytest.raises(ValueError):
        decoder.quantile_query(q)


def test_quantile_query_raises_inconsistent():
    decoder = Decoder(_create_noisy_hierarchical_histogram(arity=2, depth=2), 0, 2)
    with pytest.raises(ValueError, match='consistent'):
        decoder.quantile_query(0.5)


def test_efficient_node_query_reduces_the_error_on_noised_trees():
    rng = np.random.RandomState(0)
    arity, depth, trials = 2, 4, 150
    exact = Decoder(_create_hierarchical_histogram(arity, depth), 0, 8)
    errors = {False: [], True: []}
    for _ in range(trials):
        noisy = _create_noisy_hierarchical_histogram(arity, depth, scale=1.0, rng=rng)
        for use_efficient in (False, True):
            decoder = Decoder(noisy, 0, 8, use_efficient=use_efficient)
            errors[use_efficient].append(decoder.node_query(1, 0) - exact.node_query(1, 0))
    # Plain: the node's own noise (variance 1); Honaker's estimate has a smaller variance.
    assert np.var(errors[False]) == pytest.approx(1.0, rel=0.3)
    assert np.var(errors[True]) < 0.8 * np.var(errors[False])
