"""Example and batch counters as Keras metrics (TFF's ``learning/metrics/counters.py``)."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from simharness.errors import SimharnessValueError
from simharness.learning._typing import TensorStructure


class NumExamplesCounter(keras.metrics.Sum):
    """Counts examples: the size of the first dimension of the (first) label.

    Sample weights are ignored: every example counts once. Labels must be
    tensors or numpy arrays (a structure of Python numbers is refused).
    """

    def __init__(self, name: str = 'num_examples', dtype: tf.DType = tf.int64):
        super().__init__(name=name, dtype=dtype)

    def update_state(
        self,
        y_true: TensorStructure,
        y_pred: TensorStructure = None,
        sample_weight: TensorStructure = None,
    ) -> None:
        del y_pred, sample_weight
        labels = tf.nest.flatten(y_true)
        if not all(tf.is_tensor(l) or isinstance(l, np.ndarray) for l in labels):
            raise SimharnessValueError(
                'NumExamplesCounter only works with `numpy.ndarray` or `tensorflow.Tensor` '
                'types. Received a structure with other values; consider using `np.asarray` '
                f'or `tf.convert_to_tensor`. Got: {labels}'
            )
        return super().update_state(tf.shape(labels[0])[0], sample_weight=None)


class NumBatchesCounter(keras.metrics.Sum):
    """Counts batches (each `update_state` call adds one; sample weights ignored)."""

    def __init__(self, name: str = 'num_batches', dtype: tf.DType = tf.int64):
        super().__init__(name=name, dtype=dtype)

    def update_state(
        self,
        y_true: TensorStructure,
        y_pred: TensorStructure = None,
        sample_weight: TensorStructure = None,
    ) -> None:
        del y_true, y_pred, sample_weight
        return super().update_state(1, sample_weight=None)
