"""The Shakespeare next-character model (TFF's ``char_prediction_models``)."""

from __future__ import annotations

from typing import Any

import tensorflow as tf

__all__ = ['create_recurrent_model']


def create_recurrent_model(vocab_size: int, sequence_length: int, mask_zero: bool = True) -> Any:
    """The character LSTM of McMahan et al., AISTATS 2017 (arXiv:1602.05629).

    Token sequences of `sequence_length` are embedded in 8 dimensions
    (token 0 masked with `mask_zero`), go through two LSTM layers of 256 units
    (he-normal kernels, all steps returned) and a dense layer of `vocab_size`
    logits per step (no softmax: the loss takes logits).

    Returns:
      An uncompiled `tf.keras.Model`: ``[None, sequence_length]`` to
      ``[None, sequence_length, vocab_size]``.

    Raises:
      ValueError: `vocab_size` or `sequence_length` is not positive.
    """
    if vocab_size < 1:
        raise ValueError('vocab_size must be a positive integer.')
    if sequence_length < 1:
        raise ValueError('sequence_length must be a positive integer.')

    def lstm() -> Any:
        return tf.keras.layers.LSTM(
            units=256, kernel_initializer='he_normal', return_sequences=True, stateful=False
        )

    return tf.keras.Sequential(
        [
            tf.keras.Input(shape=(sequence_length,)),
            tf.keras.layers.Embedding(input_dim=vocab_size, output_dim=8, mask_zero=mask_zero),
            lstm(),
            lstm(),
            tf.keras.layers.Dense(vocab_size),
        ]
    )
