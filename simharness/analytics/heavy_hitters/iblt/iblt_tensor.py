"""IBLTs with a value tensor per key (TFF's ``iblt/iblt_tensor.py``).

An `iblt_lib` table plus a second table: inserting ``(k, v, vt)`` also adds
the tensor ``vt`` at ``values[i, h_i(k)]`` (in the values' dtype, no modulus).
Tables add, but do not subtract (counts must be positive). Decoding returns
strings, counts, the ``value_shape`` tensor of each, and the number not
decoded; with ``value_shape == ()`` the values are an empty tensor.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional, Union

import numpy as np
import tensorflow as tf

from simharness.analytics.heavy_hitters.iblt import chunkers, iblt_lib

__all__ = ['IbltTensorDecoder', 'IbltTensorEncoder', 'decode_iblt_tensor_tf']

_CharacterEncoding = chunkers.CharacterEncoding


class IbltTensorDecoder(iblt_lib.IbltDecoder):
    """Decodes strings, counts and value tensors of an IBLT tensor.

    Args:
      iblt: the table of keys, counts and checks.
      iblt_values: the table of values, ``[repetitions, table_size, *value_shape]``.
      value_shape: the shape of each key's value tensor.
      *args, **kwargs: as `iblt_lib.IbltDecoder`.
    """

    def __init__(
        self, iblt: tf.Tensor, iblt_values: tf.Tensor, value_shape: Sequence[int], *args, **kwargs
    ):
        super().__init__(*args, iblt=iblt, **kwargs)
        self.iblt_values = iblt_values
        self.value_shape = value_shape
        self.num_values = np.prod(self.value_shape)

    @tf.function
    def _check_if_queue_is_empty(
        self, iblt, iblt_values, out_strings, out_counts, out_tensor_values
    ) -> bool:
        """Whether the queue of peelable cells is non-empty (the loop's condition)."""
        del iblt, iblt_values, out_strings, out_counts, out_tensor_values
        return self.q.size() > 0

    @tf.function
    def _peel_element_from_iblt(
        self, iblt, iblt_values, out_strings, out_counts, out_tensor_values
    ):
        """Peels one queued cell's key and value; queues the cells it makes peelable."""
        repetition, index = self.q.dequeue()
        iblt, hash_indices, data_string, count = self._decode_and_remove(iblt, repetition, index)
        tensor_value = self._decode_value(iblt_values, repetition, index)
        iblt_values = self._remove_value(iblt_values, hash_indices, tensor_value)
        if tf.strings.length(data_string) > 0:
            index = out_counts.size()
            out_counts = out_counts.write(index, count)
            out_strings = out_strings.write(index, data_string)
            out_tensor_values = out_tensor_values.write(index, tensor_value)
            self._enqueue_peelable(iblt, hash_indices)
        return iblt, iblt_values, out_strings, out_counts, out_tensor_values

    def _decode_value(self, iblt_values: tf.Tensor, repetition, index) -> tf.Tensor:
        """The value tensor at cell ``(repetition, index)``."""
        return tf.reshape(iblt_values[repetition][index], shape=self.value_shape)

    def _remove_value(
        self, iblt_values: tf.Tensor, hash_indices: tf.Tensor, tensor_value: tf.Tensor
    ):
        """`iblt_values` less `tensor_value` at the cells `hash_indices`."""
        indices, values = [], []
        for repetition in range(self.repetitions):
            index = hash_indices[repetition]
            indices.append(tf.stack([repetition, index], axis=0))
            values.append(iblt_values[repetition][index] - tensor_value)
        return tf.tensor_scatter_nd_update(iblt_values, indices, values)

    @tf.function
    def get_freq_estimates_tf(self) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor]:
        """``(strings, counts, value tensors, num_not_decoded)``; values ``[]`` if no shape."""
        if not self.value_shape:
            strings, counts, num_not_decoded = super().get_freq_estimates_tf()
            return strings, counts, tf.constant([], dtype=self._dtype), num_not_decoded
        iblt = tf.math.floormod(
            tf.cast(self.iblt, dtype=self._dtype), tf.constant(self.field_size, dtype=self._dtype)
        )
        iblt_values = self.iblt_values
        self._initial_queue(iblt)

        def array(dtype):
            return tf.TensorArray(dtype, size=0, dynamic_size=True, clear_after_read=False)

        iblt, _, out_strings, out_counts, out_tensor_values = tf.while_loop(
            self._check_if_queue_is_empty,
            self._peel_element_from_iblt,
            loop_vars=(
                iblt,
                iblt_values,
                array(tf.string),
                array(self._dtype),
                array(iblt_values.dtype),
            ),
            parallel_iterations=1,
        )
        return (
            out_strings.stack(),
            out_counts.stack(),
            out_tensor_values.stack(),
            self._num_not_decoded(iblt),
        )

    def get_freq_estimates(self):  # a different return type than the base class's
        """``({string: count}, {string: value list})`` (eager only; UTF-8).

        The counts get ``None: not decoded`` when some were not decoded.

        Raises:
          NotImplementedError: not executing eagerly.
        """
        if not tf.compat.v1.executing_eagerly():
            raise NotImplementedError('This method only works with Eager execution.')
        out_strings, out_counts, out_tensor_values, num_not_decoded = self.get_freq_estimates_tf()
        strings = [s.decode('utf-8', 'ignore') for s in out_strings.numpy().tolist()]
        string_counts = dict(zip(strings, out_counts.numpy().tolist()))
        string_tensor_values = dict(zip(strings, out_tensor_values.numpy().tolist()))
        num_not_decoded = num_not_decoded.numpy()
        if num_not_decoded:
            string_counts[None] = num_not_decoded
        return string_counts, string_tensor_values


class IbltTensorEncoder(iblt_lib.IbltEncoder):
    """Encodes strings with a value tensor each into an IBLT tensor.

    Args:
      value_shape: the shape of each string's value tensor (``()``: none).
      *args, **kwargs: as `iblt_lib.IbltEncoder`.
    """

    def __init__(self, value_shape: Sequence[int], *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.value_shape = value_shape or ()
        self.num_values = int(np.prod(self.value_shape))
        self.iblt_values_shape = (self.repetitions, self.table_size) + tuple(self.value_shape)
        # `_compute_values` tiles values ``[1, repetitions, 1, ...]`` (value rank + 1 entries).
        self._tile_shape = [1, self.repetitions] + [1] * max(len(self.value_shape) - 1, 0)

    def _compute_values(
        self, sparse_indices: tf.Tensor, input_values: tf.Tensor, input_length
    ) -> tf.SparseTensor:
        """Sparse ``[n, repetitions, table_size, num_values]``: each value at its cells."""
        indices = tf.repeat(tf.reshape(sparse_indices, [-1, 3]), self.num_values, axis=0)
        value_ids = tf.tile(
            tf.range(self.num_values, dtype=tf.int64), [input_length * self.repetitions]
        )
        fused = tf.concat([indices, tf.reshape(value_ids, shape=[-1, 1])], axis=-1)
        values = tf.reshape(tf.tile(input_values, self._tile_shape), [-1])
        return tf.SparseTensor(
            indices=fused,
            values=values,
            dense_shape=(input_length,) + (self.repetitions, self.table_size, self.num_values),
        )

    @tf.function
    def compute_iblt(
        self, input_strings: tf.Tensor, input_values: tf.Tensor
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """``(table, values table)`` of `input_strings` with their `input_values`.

        Args:
          input_strings: a rank-1 string tensor.
          input_values: ``(num_strings, *value_shape)``, each string's value.
        """
        tf.debugging.assert_rank(input_strings, 1)
        tf.debugging.assert_type(input_strings, tf.string)
        tf.debugging.assert_equal(
            tf.shape(input_values),
            (tf.shape(input_strings)[0],) + tuple(self.value_shape)
            if self.value_shape
            else tf.constant([], dtype=tf.int32),
        )
        chunks, trimmed = self.compute_chunks(input_strings)
        if self.drop_strings_above_max_length:
            keep = tf.equal(trimmed, input_strings)
            trimmed = trimmed[keep]
            chunks = chunks[keep]
            input_values = input_values[keep]
        hash_check = self._compute_hash_check(trimmed)
        sparse_indices = self.hyperedge_hasher.get_hash_indices_tf(trimmed)
        input_length = tf.size(trimmed)
        iblt = self._sum_table(sparse_indices, chunks, hash_check, input_length)
        if not self.value_shape:
            return iblt, tf.constant([], dtype=self._dtype)
        sparse_values = self._compute_values(sparse_indices, input_values, input_length)
        iblt_values = tf.reshape(tf.sparse.reduce_sum(sparse_values, 0), self.iblt_values_shape)
        return iblt, iblt_values


def decode_iblt_tensor_tf(
    iblt: tf.Tensor,
    iblt_values: tf.Tensor,
    capacity: int,
    string_max_bytes: int,
    value_shape: Sequence[int],
    *,
    encoding: _CharacterEncoding = _CharacterEncoding.UTF8,
    seed: int = 0,
    repetitions: int = iblt_lib.DEFAULT_REPETITIONS,
    hash_family: Optional[str] = None,
    hash_family_params: Optional[dict[str, Union[int, float]]] = None,
    field_size: int = iblt_lib.DEFAULT_FIELD_SIZE,
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor]:
    """``(strings, counts, value tensors, num_not_decoded)`` of an IBLT tensor."""
    # Held in a local: a `tf.function` method keeps only a weak reference to its object.
    decoder = IbltTensorDecoder(
        iblt=iblt,
        iblt_values=iblt_values,
        capacity=capacity,
        string_max_bytes=string_max_bytes,
        encoding=encoding,
        seed=seed,
        value_shape=value_shape,
        repetitions=repetitions,
        hash_family=hash_family,
        hash_family_params=hash_family_params,
        field_size=field_size,
    )
    return decoder.get_freq_estimates_tf()
