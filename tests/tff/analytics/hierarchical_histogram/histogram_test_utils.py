"""Port of TFF's ``tensorflow_federated/python/analytics/histogram_test_utils.py``.

TFF's ``HistogramTest.assert_histograms_all_close`` (a ``tf.test.TestCase``
method) is the function `assert_histograms_all_close` here.
"""

import numpy as np
import tensorflow as tf


def create_np_histogram(keys, values) -> dict:
    """The dict ``{key: value}`` of the (tensor or list) `keys` and `values`."""
    if tf.is_tensor(keys):
        keys = keys.numpy()
    if tf.is_tensor(values):
        values = values.numpy()
    return dict(zip(keys, values))


def assert_histograms_all_close(x_keys, x_values, y_keys, y_values) -> None:
    """Asserts that two histograms (keys, values; any order) have the same keys and close values."""
    histogram_x = create_np_histogram(x_keys, x_values)
    histogram_y = create_np_histogram(y_keys, y_values)
    assert histogram_x.keys() == histogram_y.keys()
    for key in histogram_x:
        np.testing.assert_allclose(histogram_x[key], histogram_y[key], rtol=1e-6, atol=1e-6)
