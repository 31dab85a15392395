"""Hash function families that place IBLT keys (TFF's ``iblt/hyperedge_hashers.py``).

Both hash ``str(seed + r) + ';' + string`` per repetition ``r`` with
`tf.strings.to_hash_bucket_fast` (FarmHash), as TFF does, so tables match
TFF's bit for bit.
"""

from __future__ import annotations

import tensorflow as tf

__all__ = ['CoupledHyperEdgeHasher', 'RandomHyperEdgeHasher']

_SEPARATOR = ';'


@tf.function
def _to_sparse_indices_format(hash_indices: tf.Tensor) -> tf.Tensor:
    """``(repetitions, n)`` hash indices -> ``(n, repetitions, 3)`` of ``(i, r, index)``."""
    repetitions = tf.shape(hash_indices)[0]
    input_length = tf.shape(hash_indices)[1]
    hash_indices = tf.reshape(
        tf.transpose(tf.stack(hash_indices)), shape=[input_length, repetitions, 1]
    )
    hash_indices = tf.cast(hash_indices, dtype=tf.int64)
    rows = tf.tile(
        tf.reshape(tf.range(input_length), shape=[input_length, 1, 1]), [1, repetitions, 1]
    )
    columns = tf.tile(
        tf.reshape(tf.range(repetitions), shape=[1, repetitions, 1]), [input_length, 1, 1]
    )
    return tf.concat([tf.cast(rows, tf.int64), tf.cast(columns, tf.int64), hash_indices], axis=2)


def _check_table(table_size: int, repetitions: int) -> None:
    if table_size < 1:
        raise ValueError('table_size must be at least 1.')
    if repetitions < 3:
        raise ValueError('repetitions must be at least 3.')


class RandomHyperEdgeHasher:
    """Hashes a string to `repetitions` independent uniform indices in ``[0, table_size)``.

    Raises:
      ValueError: `table_size` < 1 or `repetitions` < 3.
    """

    def __init__(self, seed: int, table_size: int, repetitions: int):
        _check_table(table_size, repetitions)
        self._seed = seed
        self._salt = [str(seed + i) + _SEPARATOR for i in range(repetitions)]
        self._table_size = table_size
        self._repetitions = repetitions

    def get_hash_indices_tf(self, input_strings: tf.Tensor) -> tf.Tensor:
        """``(n, repetitions, 3)``: ``(i, r, hash index of string i in repetition r)``."""
        hash_indices = [
            tf.strings.to_hash_bucket_fast(
                tf.strings.join([self._salt[i], input_strings]), num_buckets=self._table_size
            )
            for i in range(self._repetitions)
        ]
        return _to_sparse_indices_format(hash_indices)


class CoupledHyperEdgeHasher:
    """Hashes a string to a hyper-edge of nearby (coupled) indices.

    As in https://arxiv.org/pdf/2001.10500.pdf: a position in
    ``[0.5, z + 0.5)`` per string, plus an offset in ``[-0.5, 0.5)`` per
    repetition, scaled by ``table_size / (z + 1)`` (``z = rescale_factor``).

    Raises:
      ValueError: `table_size` < 1, `repetitions` < 3, or `rescale_factor`
        not in ``(0, table_size - 1]``.
    """

    def __init__(self, seed: int, table_size: int, repetitions: int, rescale_factor: float):
        _check_table(table_size, repetitions)
        if rescale_factor <= 0 or rescale_factor > table_size - 1:
            raise ValueError(
                'rescale_factor must be positive and no greater than table_size - 1. '
                f'Found table_size = {table_size} and '
                f'rescale_factor = {rescale_factor}'
            )
        self._seed = seed
        self._salt = [str(seed + i) + _SEPARATOR for i in range(repetitions)]
        self._table_size = table_size
        self._repetitions = repetitions
        self._rescale_factor = rescale_factor
        self._rescaled_table_size = table_size / (rescale_factor + 1.0)

    def _hash_to_float_tf(
        self,
        input_strings: tf.Tensor,
        hash_range: tuple[float, float],
        precision: int = tf.int32.max,
    ) -> tf.Tensor:
        """The lower end of the `precision`-th bucket of `hash_range` each string hashes to."""
        low, high = hash_range
        hashed = tf.strings.to_hash_bucket_fast(input_strings, num_buckets=precision) % precision
        return (tf.cast(hashed, tf.float32) / precision) * (high - low) + low

    def get_hash_indices_tf(self, data_strings):
        """``(n, repetitions, 3)``: ``(i, r, hash index of string i in repetition r)``."""
        positions = self._hash_to_float_tf(data_strings, (0.5, self._rescale_factor + 0.5))
        hash_indices = []
        for i in range(self._repetitions):
            salted = tf.strings.join([self._salt[i], data_strings])
            offset = self._hash_to_float_tf(salted, (-0.5, 0.5))
            hash_indices.append(tf.floor((positions + offset) * self._rescaled_table_size))
        return _to_sparse_indices_format(hash_indices)
