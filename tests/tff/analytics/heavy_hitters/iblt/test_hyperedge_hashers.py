"""Port of TFF's ``analytics/heavy_hitters/iblt/hyperedge_hashers_test.py``.

Cases as TFF's, condensed: the distribution tests keep one random family case
(table size 100, 5 repetitions, 10,000 strings rather than 100,000) and one
coupled case (table size 500), with TFF's 5% chi-square critical values; the
shape/range tests keep TFF's data sets. Also checks the exact salted FarmHash
indices (TFF's hashing) against `tf.strings.to_hash_bucket_fast`.
"""

import math

import numpy as np
import pytest
import tensorflow as tf

from simharness.analytics.heavy_hitters.iblt import hyperedge_hashers

# 5%-significance chi-square critical values by degrees of freedom (TFF's table).
_CHI_SQUARE_CRITICAL_VALUE = {4: 9.487, 19: 30.143, 99: 123.225, 499: 552.074}


def _chi_square(samples):
    _, counts = np.unique(np.asarray(samples, dtype=int).reshape(-1), return_counts=True)
    expected = np.sum(counts) / len(counts)
    return np.sum(np.square(counts - expected) / expected)


@pytest.mark.parametrize(
    'table_size, repetitions, regex',
    [
        (0, 3, 'table_size must be at least 1.'),
        (-1, 3, 'table_size must be at least 1.'),
        (10, 0, 'repetitions must be at least 3.'),
        (10, 2, 'repetitions must be at least 3.'),
    ],
)
def test_random_raises_params_value_error(table_size, repetitions, regex):
    with pytest.raises(ValueError, match=regex):
        hyperedge_hashers.RandomHyperEdgeHasher(0, table_size, repetitions)


@pytest.mark.parametrize(
    'table_size, repetitions, rescale_factor, regex',
    [
        (0, 3, 4, 'table_size must be at least 1.'),
        (10, 2, 4, 'repetitions must be at least 3.'),
        (10, 3, 0, 'rescale_factor must be positive.*'),
        (10, 3, -1, 'rescale_factor must be positive'),
        (10, 3, 15, 'rescale_factor must be positive.*'),
    ],
)
def test_coupled_raises_params_value_error(table_size, repetitions, rescale_factor, regex):
    with pytest.raises(ValueError, match=regex):
        hyperedge_hashers.CoupledHyperEdgeHasher(0, table_size, repetitions, rescale_factor)


@pytest.mark.parametrize(
    'seed, table_size, repetitions, data',
    [
        (0, 5, 3, ['hello', 'these', 'are', 'some', 'strings']),
        (1, 100, 5, ['', 'some', 'unicodes', 'अ', 'क', 'æ', '☺️', '☺️']),
        (5, 2000, 3, ['has, some, comma', '新年快乐', '☺️😇']),
        (0, 5, 3, []),
    ],
)
def test_random_as_expected(seed, table_size, repetitions, data):
    hasher = hyperedge_hashers.RandomHyperEdgeHasher(seed, table_size, repetitions)
    hashes = hasher.get_hash_indices_tf(tf.constant(data, dtype=tf.string)).numpy()
    assert hashes.shape == (len(data), repetitions, 3)
    assert np.all((hashes[:, :, 2] >= 0) & (hashes[:, :, 2] < table_size))
    for i, s in enumerate(data):
        for r in range(repetitions):
            expected = tf.strings.to_hash_bucket_fast(f'{seed + r};{s}', table_size).numpy()
            assert tuple(hashes[i, r]) == (i, r, expected)


@pytest.mark.parametrize(
    'seed, table_size, repetitions, rescale_factor, data',
    [
        (0, 5, 3, 4, ['hello', 'these', 'are', 'some', 'strings']),
        (1, 100, 5, 1, ['', 'some', 'unicodes', 'अ', 'क', 'æ', '☺️', '☺️']),
        (0, 5, 3, 4, []),
    ],
)
def test_coupled_as_expected(seed, table_size, repetitions, rescale_factor, data):
    hasher = hyperedge_hashers.CoupledHyperEdgeHasher(seed, table_size, repetitions, rescale_factor)
    hashes = hasher.get_hash_indices_tf(tf.constant(data, dtype=tf.string)).numpy()
    assert hashes.shape == (len(data), repetitions, 3)
    assert np.all((hashes[:, :, 2] >= 0) & (hashes[:, :, 2] < table_size))


def test_random_distribution_uniform():
    hasher = hyperedge_hashers.RandomHyperEdgeHasher(100000, 100, 5)
    hashes = hasher.get_hash_indices_tf(tf.constant([str(x) for x in range(10000)])).numpy()
    assert _chi_square(hashes[:, :, 2]) < _CHI_SQUARE_CRITICAL_VALUE[99]


def test_coupled_distribution_not_uniform_but_uniform_in_the_middle():
    table_size = 500
    hasher = hyperedge_hashers.CoupledHyperEdgeHasher(100, table_size, 3, 4)
    indices = hasher.get_hash_indices_tf(tf.constant([str(x) for x in range(10000)])).numpy()
    indices = indices[:, :, 2]
    assert _chi_square(indices) >= _CHI_SQUARE_CRITICAL_VALUE[table_size - 1]
    lower = max(1, math.ceil(table_size / 2) - 10)
    upper = min(table_size - 1, math.ceil(table_size / 2) + 10)
    middle = indices[(lower <= indices) & (indices < upper)]
    assert _chi_square(middle) < _CHI_SQUARE_CRITICAL_VALUE[len(np.unique(middle)) - 1]
