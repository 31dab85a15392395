"""The Stack Overflow next-word model (TFF's ``word_prediction_models``)."""

from __future__ import annotations

from typing import Any

import tensorflow as tf

__all__ = ['TransposableEmbedding', 'create_recurrent_model']


class TransposableEmbedding(tf.keras.layers.Layer):
    """An output projection by the transpose of an `Embedding` layer's matrix (shared)."""

    def __init__(self, embedding_layer: Any):
        super().__init__()
        self._embedding_layer = embedding_layer
        # The padding mask passes through, as through the Dense output of the unshared model.
        self.supports_masking = True

    @property
    def embeddings(self) -> Any:
        return self._embedding_layer.embeddings

    def call(self, inputs: Any) -> Any:
        return tf.matmul(inputs, self._embedding_layer.embeddings, transpose_b=True)


def create_recurrent_model(
    vocab_size: int,
    embedding_size: int = 96,
    num_lstm_layers: int = 1,
    lstm_size: int = 670,
    shared_embedding: bool = False,
) -> Any:
    """Ids (``0..vocab_size-1``, 0 masked) embedded in `embedding_size` dimensions, then
    `num_lstm_layers` times an LSTM of `lstm_size` followed by a dense projection back to
    `embedding_size`, then `vocab_size` logits per step: a dense layer, or with
    `shared_embedding` the transposed embedding matrix. No softmax.

    Returns:
      An uncompiled `tf.keras.Model` on ``[None, None]`` int sequences.

    Raises:
      ValueError: a non-positive size or layer count.
    """
    for name, value in (
        ('vocab_size', vocab_size),
        ('embedding_size', embedding_size),
        ('num_lstm_layers', num_lstm_layers),
        ('lstm_size', lstm_size),
    ):
        if value < 1:
            raise ValueError(f'{name} must be a positive integer.')
    inputs = tf.keras.layers.Input(shape=(None,))
    embedding = tf.keras.layers.Embedding(
        input_dim=vocab_size, output_dim=embedding_size, mask_zero=True
    )
    x = embedding(inputs)
    for _ in range(num_lstm_layers):
        x = tf.keras.layers.LSTM(lstm_size, return_sequences=True)(x)
        x = tf.keras.layers.Dense(embedding_size)(x)
    if shared_embedding:
        logits = TransposableEmbedding(embedding)(x)
    else:
        logits = tf.keras.layers.Dense(vocab_size, activation=None)(x)
    return tf.keras.Model(inputs=inputs, outputs=logits)
