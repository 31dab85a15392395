"""Port of TFF's ``tensorflow_federated/python/analytics/histogram_processing_test.py`` (all cases).

The tensor inputs are built inside the tests (no TF op at collection time).
"""

import numpy as np
import pytest
import tensorflow as tf

from simharness.analytics import histogram_processing
from tests.tff.analytics.hierarchical_histogram.histogram_test_utils import (
    assert_histograms_all_close,
)

_KEYS = [b'a', b'b', b'c', b'd', b'e']
_VALUES = [1.0, 10.3, 6.0, 4.5, 2.1]
_EXPECTED = {b'b': 10.3, b'c': 6.0, b'd': 4.5}


@pytest.mark.parametrize(
    'make_inputs, expected',
    [
        (
            lambda: (
                tf.constant(_KEYS, dtype=tf.string),
                tf.constant(_VALUES, dtype=tf.float32),
                tf.constant(4.5, dtype=tf.float32),
            ),
            _EXPECTED,
        ),
        (lambda: (_KEYS, _VALUES, 4.5), _EXPECTED),
        (lambda: (_KEYS, tf.constant(_VALUES, dtype=tf.float32), 4.5), _EXPECTED),
        (
            lambda: (
                tf.constant(_KEYS, dtype=tf.string),
                tf.constant(_VALUES, dtype=tf.float64),
                tf.constant(4.5, dtype=tf.float64),
            ),
            _EXPECTED,
        ),
        (lambda: ([], tf.constant([], dtype=tf.float32), 0.0), {}),
        (
            lambda: (_KEYS, [1.0, float('inf'), 6.0, 4.5, 2.1], 4.5),
            {b'b': float('inf'), b'c': 6.0, b'd': 4.5},
        ),
        (lambda: (_KEYS, _VALUES, float('inf')), {}),
    ],
    ids=[
        'tensor_inputs',
        'python_inputs',
        'mixed_input_types',
        'tensor_float64_inputs',
        'empty_inputs',
        'inf_histogram_value',
        'inf_threshold',
    ],
)
def test_threshold_histogram_returns_expected_values(make_inputs, expected):
    keys_thresholded, values_thresholded = histogram_processing.threshold_histogram(*make_inputs())
    assert_histograms_all_close(
        keys_thresholded, values_thresholded, list(expected.keys()), list(expected.values())
    )


def test_threshold_histogram_duplicate_keys():
    keys = [b'a', b'a', b'b', b'c', b'd', b'e']
    values = tf.constant([1.0, 5.0, 10.3, 6.0, 4.5, 2.1], dtype=tf.float32)
    keys_thresholded, values_thresholded = histogram_processing.threshold_histogram(
        keys, values, 4.5
    )
    # Pairs are kept or dropped one by one; values of a duplicate key are not summed.
    assert keys_thresholded.numpy().tolist() == [b'a', b'b', b'c', b'd']
    np.testing.assert_allclose(values_thresholded, [5.0, 10.3, 6.0, 4.5])


@pytest.mark.parametrize(
    'make_inputs',
    [
        lambda: (
            tf.constant(_KEYS, dtype=tf.string),
            tf.constant([1.0, 10.3, 6.0, 4.5, 2.1, 3, 6], dtype=tf.float32),
        ),
        lambda: (
            tf.constant([_KEYS], dtype=tf.string),
            tf.constant([1.0, 10.3, 6.0, 4.5, 2.1, 3], dtype=tf.float32),
        ),
    ],
    ids=['len_mismatch', 'dimension_mismatch'],
)
def test_threshold_histogram_raise_value_error(make_inputs):
    with pytest.raises(ValueError):
        histogram_processing.threshold_histogram(*make_inputs(), tf.constant(4.5, dtype=tf.float32))
