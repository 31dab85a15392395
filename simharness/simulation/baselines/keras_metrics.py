"""Keras metrics of the baseline tasks that mask tokens (TFF's ``baselines.keras_metrics``)."""

from __future__ import annotations

from typing import Any, Optional, Sequence

import tensorflow as tf

__all__ = ['MaskedCategoricalAccuracy', 'NumTokensCounter']


def _apply_mask(y_true: Any, sample_weight: Any, masked_tokens: Sequence[int], dtype: Any) -> Any:
    """`sample_weight` (ones when `None`) zeroed where `y_true` is one of `masked_tokens`."""
    weight = tf.ones_like(y_true, dtype) if sample_weight is None else tf.cast(sample_weight, dtype)
    for token in masked_tokens:
        weight = weight * tf.cast(tf.not_equal(y_true, token), dtype)
    return weight


class NumTokensCounter(tf.keras.metrics.Metric):
    """The number of (weighted) label tokens seen, masked tokens left out."""

    def __init__(
        self,
        masked_tokens: Optional[Sequence[int]] = None,
        name: str = 'num_tokens',
        dtype: Any = tf.int64,
    ):
        super().__init__(name=name, dtype=dtype)
        self._sum = self.add_variable(name='sum', initializer='zeros', shape=(), dtype=dtype)
        self._masked_tokens = list(masked_tokens or [])

    def result(self) -> Any:
        return tf.identity(self._sum)

    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        del y_pred
        weight = _apply_mask(y_true, sample_weight, self._masked_tokens, self.dtype)
        self._sum.assign_add(tf.reduce_sum(tf.reshape(weight, [-1])))

    def get_config(self) -> dict:
        config = super().get_config()
        config['masked_tokens'] = tuple(self._masked_tokens)
        return config


class MaskedCategoricalAccuracy(tf.keras.metrics.SparseCategoricalAccuracy):
    """Sparse categorical accuracy over sequences, masked tokens given weight 0."""

    def __init__(
        self,
        masked_tokens: Optional[Sequence[int]] = None,
        name: str = 'accuracy',
        dtype: Any = None,
    ):
        self._masked_tokens = list(masked_tokens or [])
        super().__init__(name, dtype=dtype)

    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        weight = _apply_mask(y_true, sample_weight, self._masked_tokens, self.dtype)
        num_classes = tf.shape(y_pred)[-1]
        super().update_state(
            tf.reshape(y_true, [-1]),
            tf.reshape(y_pred, [-1, num_classes]),
            tf.reshape(weight, [-1]),
        )

    def get_config(self) -> dict:
        config = super().get_config()
        config['masked_tokens'] = tuple(self._masked_tokens)
        return config
