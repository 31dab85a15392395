"""IBLT encoder and decoder for heavy hitters by secure sums (TFF's ``iblt/iblt_lib.py``).

An invertible Bloom lookup table (Goodrich & Mitzenmacher,
https://arxiv.org/abs/1101.2245) holds key/count pairs linearly: tables add
(and subtract) entrywise. Inserting ``(k, v)`` updates, for each repetition
``i``, the cell ``h_i(k)``::

    count += v      key chunks += v * chunks(k)      check += v * q(k)

all modulo the prime `field_size`. Decoding peels cells holding a single key
(``check == count * q(key / count)``), removes that key from its other cells
and repeats. With table range above about ``0.41 n`` per repetition, ``n``
keys decode with constant probability.

The table is a tensor of shape ``[repetitions, table_size, num_chunks + 2]``:
chunks at ``[..., :num_chunks]``, the count at ``num_chunks``, the check at
``num_chunks + 1``.
"""

from __future__ import annotations

from typing import Optional, Union

import tensorflow as tf

from simharness.analytics.heavy_hitters.iblt import chunkers, hyperedge_hashers

__all__ = [
    'DEFAULT_FIELD_SIZE',
    'DEFAULT_REPETITIONS',
    'IbltDecoder',
    'IbltEncoder',
    'decode_iblt_tf',
]

_CharacterEncoding = chunkers.CharacterEncoding

DEFAULT_FIELD_SIZE = 2**31 - 1
DEFAULT_REPETITIONS = 3
# Theoretical IBLT space bounds, Table 1 of https://arxiv.org/pdf/1101.2245.pdf
_REPETITIONS_TO_SPACE_OVERHEAD = {3: 1.222, 4: 1.295, 5: 1.425, 6: 1.570}
_HASH_FAMILY_RANDOM = 'random'
_HASH_FAMILY_COUPLED = 'coupled'


def _internal_parameters(
    capacity: int,
    repetitions: int,
    hash_family: Optional[str] = None,
    hash_family_params: Optional[dict[str, Union[int, float]]] = None,
):
    """``(table_size, hash_family, hash_family_params)`` for a table of `capacity` keys."""
    assert repetitions >= 3
    if repetitions in _REPETITIONS_TO_SPACE_OVERHEAD:
        minimum_space = _REPETITIONS_TO_SPACE_OVERHEAD[repetitions] * capacity
    else:
        minimum_space = capacity * repetitions / 4  # a rough upper bound
    table_size = int(1.1 * minimum_space / repetitions + 10)  # a little slack
    if hash_family is None:
        hash_family = _HASH_FAMILY_COUPLED if capacity >= 100000 else _HASH_FAMILY_RANDOM
    suggested_params = {}
    if hash_family == _HASH_FAMILY_COUPLED:
        suggested_params['rescale_factor'] = 0.25 * capacity**0.5
    if hash_family_params is None:
        hash_family_params = suggested_params
    return table_size, hash_family, hash_family_params


def _make_hasher(hash_family, seed, table_size, repetitions, params):
    if hash_family == _HASH_FAMILY_RANDOM:
        return hyperedge_hashers.RandomHyperEdgeHasher(seed, table_size, repetitions, **params)
    if hash_family == _HASH_FAMILY_COUPLED:
        return hyperedge_hashers.CoupledHyperEdgeHasher(seed, table_size, repetitions, **params)
    raise NotImplementedError(f'Hash family {hash_family} not supported in IBLTs.')


def _gcd_tf(a, b, dtype=tf.int64):
    """Extended Euclid on scalars: ``(g, x, y)`` with ``a*x + b*y = g = gcd(a, b)``."""
    a = tf.cast(a, dtype=dtype)
    b = tf.cast(b, dtype=dtype)
    zero, one = tf.constant(0, dtype=dtype), tf.constant(1, dtype=dtype)

    def cond(a, b, x0, x1, y0, y1):
        del b, x0, x1, y0, y1
        return tf.math.not_equal(a, zero)

    def body(a, b, x0, x1, y0, y1):
        (q, a), b = (tf.cast(b / a, dtype=dtype), b % a), a
        y0, y1 = y1, y0 - q * y1
        x0, x1 = x1, x0 - q * x1
        return a, b, x0, x1, y0, y1

    _, b, x0, _, y0, _ = tf.while_loop(cond, body, loop_vars=(a, b, zero, one, one, zero))
    return b, x0, y0


def _inverse_mod(x, p, dtype=tf.int64):
    """``y`` with ``x * y = 1 (mod p)``.

    Raises:
      tf.errors.InvalidArgumentError: `x` and `p` are not coprime.
    """
    p = tf.cast(p, dtype=dtype)
    gcd, x0, _ = _gcd_tf(x, p, dtype=dtype)
    tf.debugging.assert_equal(gcd, tf.constant(1, dtype=dtype), 'gcd(x, p) != 1')
    return x0 % p


def _get_hash_check_salt(seed: int) -> str:
    return 'hash_check_' + str(seed)


def _compute_hash_check(
    input_strings: tf.Tensor, field_size: int, seed: int, dtype: tf.dtypes.DType
) -> tf.Tensor:
    """``(n, 1)``: each string's check hash, modulo `field_size`."""
    salted = tf.strings.join([_get_hash_check_salt(seed), input_strings])
    hash_check = tf.strings.to_hash_bucket_fast(salted, num_buckets=field_size)
    hash_check = tf.reshape(hash_check, shape=[tf.size(hash_check), 1])
    return tf.cast(hash_check, dtype=dtype)


class IbltDecoder:
    """Decodes the strings and counts of an IBLT.

    Args:
      iblt: the table, ``[repetitions, table_size, num_chunks + 2]``.
      capacity: the number of distinct strings expected.
      string_max_bytes: the longest string, in bytes.
      encoding: the strings' `CharacterEncoding` (UTF8 by default; UNKNOWN
        for binary data).
      seed: the hash functions' seed.
      repetitions: the number of repetitions (>= 3).
      hash_family: ``'random'`` or ``'coupled'``; by default chosen by capacity.
      hash_family_params: the hasher's parameters; by default by capacity.
      field_size: the prime modulus of the table's values.

    Raises:
      NotImplementedError: an unknown `hash_family`.
    """

    def __init__(
        self,
        iblt: tf.Tensor,
        capacity: int,
        string_max_bytes: int,
        *,
        encoding: _CharacterEncoding = _CharacterEncoding.UTF8,
        seed: int = 0,
        repetitions: int = DEFAULT_REPETITIONS,
        hash_family: Optional[str] = None,
        hash_family_params: Optional[dict[str, Union[int, float]]] = None,
        field_size: int = DEFAULT_FIELD_SIZE,
    ):
        self._dtype = tf.int64
        self.iblt = iblt
        self.table_size, self.hash_family, self.hash_family_params = _internal_parameters(
            capacity, repetitions, hash_family, hash_family_params
        )
        self.field_size = field_size
        self.chunker = chunkers.create_chunker(
            string_max_bytes=string_max_bytes,
            encoding=encoding,
            max_chunk_value=self.field_size,
            dtype=self._dtype,
        )
        self.num_chunks = self.chunker.get_num_chunks()
        self.count = self.num_chunks
        self.check = self.num_chunks + 1
        self.repetitions = repetitions
        self.seed = seed
        self.iblt_shape = (self.repetitions, self.table_size, self.num_chunks + 2)
        # First in, first out, where TFF peels the cells in a random order (a
        # RandomShuffleQueue, whose generator also lives on from call to call): the peeled
        # set is the same in any order, and ours comes in the same order in every call,
        # process and stack.
        self.q = tf.queue.FIFOQueue(
            capacity=self.table_size * self.repetitions, dtypes=(self._dtype, self._dtype)
        )
        self.hyperedge_hasher = _make_hasher(
            self.hash_family, seed, self.table_size, repetitions, self.hash_family_params
        )

    def decode_string_from_chunks(self, chunks):
        """The string encoded in `chunks` (``num_chunks`` integers)."""
        return self.chunker.decode_tensorflow(chunks)[0]

    def _get_hash_check(self, input_strings):
        """``(n, 1)`` check hashes of `input_strings`.

        Raises:
          TypeError: `input_strings` is not a string tensor.
        """
        if input_strings.dtype != tf.string:
            raise TypeError(
                f'hash checks can only be computed on string tensors, got: {input_strings.dtype}'
            )
        return _compute_hash_check(
            input_strings, self.field_size, seed=self.seed, dtype=self._dtype
        )

    def _is_peelable(self, iblt, repetition, index):
        """Whether cell ``(repetition, index)`` holds exactly one decodable key."""
        return tf.strings.length(self._decode(iblt, repetition, index)[0]) > 0

    def _decode(self, iblt, repetition, index):
        """``(string, count, chunks)`` of cell ``(repetition, index)``; ``('', 0, zeros)`` if none."""
        empty_return = (
            tf.constant(''),
            tf.constant(0, dtype=self._dtype),
            tf.zeros((self.num_chunks,), dtype=self._dtype),
        )
        cell = iblt[repetition][index]
        if tf.math.not_equal(cell[self.count], tf.constant(0, dtype=self._dtype)):
            inverse_count = _inverse_mod(cell[self.count], self.field_size, dtype=self._dtype)
            chunks = (cell[0 : self.num_chunks] * inverse_count) % self.field_size
            data_string = self.decode_string_from_chunks(chunks)
            hash_check = self._get_hash_check(data_string)
            if tf.math.equal(cell[self.check], cell[self.count] * hash_check % self.field_size):
                return data_string, cell[self.count], chunks
            else:
                return empty_return
        else:
            return empty_return

    def _remove_element(self, iblt, data_string, hash_indices, chunks, count):
        """`iblt` less `count` times `data_string` at its cells `hash_indices`."""
        hash_check = self._get_hash_check(data_string)
        indices, values = [], []
        for repetition in range(self.repetitions):
            index = hash_indices[repetition]
            repetition = tf.constant(repetition, dtype=self._dtype)
            cell = iblt[repetition][index]
            indices.append(tf.stack([repetition, index, self.count], axis=0))
            values.append((cell[self.count] - count) % self.field_size)
            indices.append(tf.stack([repetition, index, self.check], axis=0))
            values.append((cell[self.check] - count * hash_check) % self.field_size)
            for chunk_id in range(self.num_chunks):
                indices.append(tf.stack([repetition, index, chunk_id], axis=0))
                values.append((cell[chunk_id] - count * chunks[chunk_id]) % self.field_size)
        indices = tf.stack(indices, axis=0)
        values = tf.stack([tf.squeeze(value) for value in values], axis=0)
        return tf.tensor_scatter_nd_update(iblt, indices, values)

    def _get_hash_indices(self, data_string):
        indices = self.hyperedge_hasher.get_hash_indices_tf(tf.expand_dims(data_string, 0))
        return tf.cast(indices[0, :, 2], dtype=self._dtype)

    def _decode_and_remove(self, iblt, repetition, index):
        data_string, count, chunks = self._decode(iblt, repetition, index)
        hash_indices = self._get_hash_indices(data_string)
        if tf.strings.length(data_string) > 0:
            iblt = self._remove_element(iblt, data_string, hash_indices, chunks, count)
        return iblt, hash_indices, data_string, count

    def _initial_queue(self, iblt):
        """Enqueues every peelable cell of `iblt`."""
        for repetition in tf.range(self.repetitions, dtype=self._dtype):
            for index in tf.range(self.table_size, dtype=self._dtype):
                if self._is_peelable(iblt, repetition, index):
                    self.q.enqueue((repetition, index))

    def _enqueue_peelable(self, iblt, hash_indices):
        for r in tf.range(self.repetitions, dtype=self._dtype):
            if self._is_peelable(iblt, r, hash_indices[r]):
                self.q.enqueue((r, hash_indices[r]))

    def _num_not_decoded(self, iblt):
        """The count left in `iblt` (per repetition): the items not decoded."""
        return tf.cast(tf.reduce_sum(iblt[:, :, self.count]) / self.repetitions, dtype=self._dtype)

    @tf.function
    def get_freq_estimates_tf(self) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """``(strings, counts, num_not_decoded)`` decoded from the table."""
        iblt = tf.math.floormod(
            tf.cast(self.iblt, dtype=self._dtype), tf.constant(self.field_size, dtype=self._dtype)
        )
        self._initial_queue(iblt)
        out_strings = tf.TensorArray(tf.string, size=0, dynamic_size=True, clear_after_read=False)
        out_counts = tf.TensorArray(self._dtype, size=0, dynamic_size=True, clear_after_read=False)

        def cond(iblt, out_strings, out_counts):
            del iblt, out_strings, out_counts
            return self.q.size() > 0

        def body(iblt, out_strings, out_counts):
            repetition, index = self.q.dequeue()
            iblt, hash_indices, data_string, count = self._decode_and_remove(
                iblt, repetition, index
            )
            if tf.strings.length(data_string) > 0:
                index = out_counts.size()
                out_counts = out_counts.write(index, count)
                out_strings = out_strings.write(index, data_string)
                self._enqueue_peelable(iblt, hash_indices)
            return iblt, out_strings, out_counts

        iblt, out_strings, out_counts = tf.while_loop(
            cond, body, loop_vars=(iblt, out_strings, out_counts), parallel_iterations=1
        )
        return out_strings.stack(), out_counts.stack(), self._num_not_decoded(iblt)

    def get_freq_estimates(self):
        """``{string: count}`` decoded (eager only; UTF-8), with ``None: not decoded`` if any.

        Raises:
          NotImplementedError: not executing eagerly.
        """
        if not tf.compat.v1.executing_eagerly():
            raise NotImplementedError('This method only works with Eager execution.')
        out_strings, out_counts, num_not_decoded = self.get_freq_estimates_tf()
        # 'ignore': trimming may have cut a multi-byte character.
        counter = dict(
            zip(
                [s.decode('utf-8', 'ignore') for s in out_strings.numpy().tolist()],
                out_counts.numpy().tolist(),
            )
        )
        num_not_decoded = num_not_decoded.numpy()
        if num_not_decoded:
            counter[None] = num_not_decoded
        return counter


class IbltEncoder:
    """Encodes strings (with optional counts) into an IBLT.

    Args:
      capacity: the number of distinct strings expected.
      string_max_bytes: the longest string, in bytes (longer ones are trimmed).
      encoding: the strings' `CharacterEncoding`.
      drop_strings_above_max_length: drop (rather than trim) longer strings.
      seed, repetitions, hash_family, hash_family_params, field_size: as for
        `IbltDecoder`.

    Raises:
      NotImplementedError: an unknown `hash_family`.
    """

    def __init__(
        self,
        capacity,
        string_max_bytes,
        *,
        encoding: _CharacterEncoding = _CharacterEncoding.UTF8,
        drop_strings_above_max_length=False,
        seed=0,
        repetitions=DEFAULT_REPETITIONS,
        hash_family=None,
        hash_family_params=None,
        field_size=DEFAULT_FIELD_SIZE,
    ):
        self.string_max_bytes = string_max_bytes
        self.table_size, hash_family, hash_family_params = _internal_parameters(
            capacity, repetitions, hash_family, hash_family_params
        )
        self.repetitions = repetitions
        self.seed = seed
        self.field_size = field_size
        self.drop_strings_above_max_length = drop_strings_above_max_length
        self._dtype = tf.int64
        self.chunker = chunkers.create_chunker(
            string_max_bytes=string_max_bytes,
            encoding=encoding,
            max_chunk_value=self.field_size,
            dtype=self._dtype,
        )
        self.num_chunks = self.chunker.get_num_chunks()
        self.iblt_shape = (self.repetitions, self.table_size, self.num_chunks + 2)
        self.hyperedge_hasher = _make_hasher(
            hash_family, seed, self.table_size, repetitions, hash_family_params
        )

    def _compute_hash_check(self, input_strings):
        """``(n, repetitions)``: each string's check hash, once per repetition."""
        hash_check = _compute_hash_check(
            input_strings, self.field_size, seed=self.seed, dtype=self._dtype
        )
        return tf.tile(hash_check, [1, self.repetitions])

    def compute_chunks(self, input_strings):
        """``(chunks (n, num_chunks), trimmed strings)`` of `input_strings`."""
        return self.chunker.encode_tensorflow(input_strings)

    def _sparse(self, indices, values, input_length):
        return tf.SparseTensor(
            indices=indices, values=values, dense_shape=(input_length,) + self.iblt_shape
        )

    def _at_column(self, sparse_indices, input_length, column):
        """``(n * repetitions, 4)`` indices ``(i, r, h, column)``."""
        columns = tf.cast(tf.fill([input_length, self.repetitions, 1], column), dtype=self._dtype)
        return tf.reshape(tf.concat([sparse_indices, columns], axis=2), shape=[-1, 4])

    def _compute_counts(self, sparse_indices, input_length, input_counts=None):
        """Sparse ``[n, *iblt_shape]``: each string's count (default 1) at its count cells."""
        indices = self._at_column(sparse_indices, input_length, self.num_chunks)
        if input_counts is not None:
            values = tf.repeat(input_counts, [self.repetitions])
        else:
            values = tf.cast(tf.fill([tf.shape(indices)[0]], 1), dtype=self._dtype)
        return self._sparse(indices, values, input_length)

    def _compute_checks(self, sparse_indices, hash_check, input_length, input_counts=None):
        """Sparse ``[n, *iblt_shape]``: each string's (count times) check at its check cells."""
        if input_counts is not None:
            hash_check = hash_check * input_counts
        indices = self._at_column(sparse_indices, input_length, self.num_chunks + 1)
        return self._sparse(indices, tf.reshape(hash_check, shape=[-1]), input_length)

    def _compute_keys(self, sparse_indices, chunks, input_length, input_counts=None):
        """Sparse ``[n, *iblt_shape]``: each string's (count times) chunks at its key cells."""
        if input_counts is not None:
            chunks = chunks * input_counts
        chunk_ids = tf.cast(tf.range(self.num_chunks), dtype=self._dtype)
        chunk_ids = tf.tile(
            tf.reshape(chunk_ids, [1, 1, -1, 1]), [input_length, self.repetitions, 1, 1]
        )
        cells = tf.tile(tf.expand_dims(sparse_indices, -2), [1, 1, self.num_chunks, 1])
        indices = tf.reshape(tf.concat([cells, chunk_ids], axis=-1), shape=[-1, 4])
        values = tf.reshape(
            tf.tile(tf.expand_dims(chunks, 1), [1, self.repetitions, 1]), shape=[-1]
        )
        return self._sparse(indices, values, input_length)

    def _sum_table(self, sparse_indices, chunks, hash_check, input_length, input_counts=None):
        """The dense table (mod `field_size`) of keys, counts and checks."""
        counts = self._compute_counts(sparse_indices, input_length, input_counts)
        checks = self._compute_checks(sparse_indices, hash_check, input_length, input_counts)
        keys = self._compute_keys(sparse_indices, chunks, input_length, input_counts)
        sparse_iblt = tf.sparse.add(tf.sparse.add(keys, counts), checks)
        iblt = tf.cast(tf.sparse.reduce_sum(sparse_iblt, 0), self._dtype)
        iblt = tf.math.floormod(iblt, self.field_size)
        return tf.reshape(iblt, self.iblt_shape)  # a static shape

    @tf.function
    def compute_iblt(self, input_strings, input_counts=None):
        """The ``[repetitions, table_size, num_chunks + 2]`` table of `input_strings`.

        Args:
          input_strings: a rank-1 string tensor.
          input_counts: an optional rank-1 int64 tensor, each string's count.
        """
        tf.debugging.assert_rank(input_strings, 1)
        tf.debugging.assert_type(input_strings, tf.string)
        if input_counts is not None:
            tf.debugging.assert_rank(input_counts, 1)
            tf.debugging.assert_equal(tf.shape(input_strings), tf.shape(input_counts))
            tf.debugging.assert_type(input_counts, self._dtype)
            input_counts = tf.expand_dims(input_counts, 1)
        chunks, trimmed = self.compute_chunks(input_strings)
        if self.drop_strings_above_max_length:
            keep = tf.equal(trimmed, input_strings)
            trimmed = trimmed[keep]
            chunks = chunks[keep]
            if input_counts is not None:
                input_counts = input_counts[keep]
        hash_check = self._compute_hash_check(trimmed)
        sparse_indices = self.hyperedge_hasher.get_hash_indices_tf(trimmed)
        return self._sum_table(sparse_indices, chunks, hash_check, tf.size(trimmed), input_counts)


def decode_iblt_tf(
    iblt: tf.Tensor,
    capacity: int,
    string_max_bytes: int,
    *,
    encoding: _CharacterEncoding = _CharacterEncoding.UTF8,
    seed: int = 0,
    repetitions: int = DEFAULT_REPETITIONS,
    hash_family: Optional[str] = None,
    hash_family_params: Optional[dict[str, Union[int, float]]] = None,
    field_size: int = DEFAULT_FIELD_SIZE,
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """``(strings, counts, num_not_decoded)`` of `iblt` (an `IbltDecoder`'s estimates)."""
    # Held in a local: a `tf.function` method keeps only a weak reference to its object.
    decoder = IbltDecoder(
        iblt=iblt,
        capacity=capacity,
        string_max_bytes=string_max_bytes,
        encoding=encoding,
        seed=seed,
        repetitions=repetitions,
        hash_family=hash_family,
        hash_family_params=hash_family_params,
        field_size=field_size,
    )
    return decoder.get_freq_estimates_tf()
