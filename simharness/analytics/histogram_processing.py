"""TFF's ``analytics/histogram_processing.py``: histogram utilities."""

from __future__ import annotations

import tensorflow as tf

__all__ = ['threshold_histogram']


def threshold_histogram(histogram_keys, histogram_values, threshold):
    """The (key, value) pairs of a histogram whose value is at least `threshold`.

    Args:
      histogram_keys: a rank-1 tensor (or list) of the keys (strings).
      histogram_values: a rank-1 tensor (or list) of the values, one per key.
      threshold: a float (tensor); pairs with a smaller value are dropped.

    Returns:
      ``(histogram_keys_thresholded, histogram_values_thresholded)``.

    Raises:
      ValueError: the keys and values do not have the same shape.
    """
    histogram_mask = tf.math.greater_equal(histogram_values, threshold)
    return (
        tf.boolean_mask(histogram_keys, histogram_mask),
        tf.boolean_mask(histogram_values, histogram_mask),
    )
