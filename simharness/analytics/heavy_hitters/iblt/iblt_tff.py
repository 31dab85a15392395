"""Federated heavy-hitters discovery with IBLTs (TFF's ``iblt/iblt_tff.py``).

```
clients:  words -> (capped / unique) words and counts -> IbltTensorEncoder(value_shape=(1,))
          -> (sketch, count tensor)
sum:      sketch: federated_sum, or federated_secure_modular_sum mod the field size;
          counts and clients: federated_sum, or federated_secure_sum(max_input=2**bitwidth-1)
server:   decode -> k-anonymity mask -> top max_heavy_hitters -> string_postprocessor
          -> ServerOutput(clients, heavy_hitters, heavy_hitters_unique_counts,
                          heavy_hitters_counts, num_not_decoded, round_timestamp)
```
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Optional

import numpy as np
import tensorflow as tf

from simharness.analytics.heavy_hitters.iblt import chunkers, iblt_clipping, iblt_lib, iblt_tensor
from simharness.core import intrinsics
from simharness.core import types as T
from simharness.core.computation import Computation, federated_computation, tf_computation

__all__ = ['ServerOutput', 'build_iblt_computation']

_CharacterEncoding = chunkers.CharacterEncoding


class ServerOutput(NamedTuple):
    """One round's results.

    Attributes:
      clients: int32, the number of clients that contributed.
      heavy_hitters: rank-1 strings, the decoded heavy hitters.
      heavy_hitters_unique_counts: rank-1 int64, the number of clients of each.
      heavy_hitters_counts: rank-1 int64, the count of each.
      num_not_decoded: int64, the number of strings not decoded.
      round_timestamp: int64, the round's start, in seconds since the epoch (UTC).
    """

    clients: Any
    heavy_hitters: Any
    heavy_hitters_unique_counts: Any
    heavy_hitters_counts: Any
    num_not_decoded: Any
    round_timestamp: Any


def _check_arguments(
    string_max_bytes,
    repetitions,
    max_heavy_hitters,
    max_words_per_user,
    k_anonymity,
    secure_sum_bitwidth,
    batch_size,
) -> None:
    if string_max_bytes < 1:
        raise ValueError(f'string_max_bytes should be at least 1, got {string_max_bytes}')
    if repetitions < 3:
        raise ValueError(f'repetitions should be at least 3, got {repetitions}')
    if max_heavy_hitters is not None and max_heavy_hitters < 1:
        raise ValueError(
            f'max_heavy_hitters should be at least 1 when it is not None, got {max_heavy_hitters}'
        )
    if max_words_per_user is not None and max_words_per_user < 1:
        raise ValueError(
            f'max_words_per_user should be at least 1 when it is not None, got {max_words_per_user}'
        )
    if k_anonymity < 1:
        raise ValueError(f'k_anonymity must be at least 1, got {k_anonymity}')
    if secure_sum_bitwidth is not None and (
        not isinstance(secure_sum_bitwidth, int) or not 0 < secure_sum_bitwidth <= 62
    ):
        raise ValueError(
            'If set, secure_sum_bitwidth requires an integer in the range [1,62], '
            f'got {secure_sum_bitwidth}'
        )
    if batch_size < 1:
        raise ValueError(f'batch_size must be at least 1, got {batch_size}')


def build_iblt_computation(
    *,
    string_max_bytes: int = 10,
    max_words_per_user: Optional[int] = None,
    multi_contribution: bool = True,
    capacity: int = 1000,
    k_anonymity: int = 1,
    max_heavy_hitters: Optional[int] = None,
    string_postprocessor: Optional[Callable[[tf.Tensor], tf.Tensor]] = None,
    secure_sum_bitwidth: Optional[int] = None,
    decode_iblt_fn: Optional[
        Callable[..., tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor]]
    ] = None,
    seed: int = 0,
    batch_size: int = 1,
    repetitions: int = 3,
) -> Computation:
    """The federated computation of one round of heavy hitters by IBLT.

    Its parameter is ``{sequence<string[?]>}@CLIENTS`` (batches of words), its
    result a `ServerOutput` at the server.

    Args:
      string_max_bytes: the longest word in bytes; longer words are trimmed.
      max_words_per_user: caps each client's total contribution (first whole
        batches with `multi_contribution`, else its top distinct words);
        `None`: no cap.
      multi_contribution: each client contributes each word's full count
        (True) or 1 per distinct word (False).
      capacity: the number of distinct words expected in a round.
      k_anonymity: only words of at least this many clients are returned.
      max_heavy_hitters: return at most this many words, the most counted.
      string_postprocessor: a map of the decoded string tensor, or `None`.
      secure_sum_bitwidth: `None` (plain sums), or in ``[1, 62]``: sketches
        by `federated_secure_modular_sum` modulo the field size, counts by
        `federated_secure_sum` with ``max_input=2**secure_sum_bitwidth - 1``.
      decode_iblt_fn: the decoder (default `iblt_tensor.decode_iblt_tensor_tf`).
      seed: the hash functions' seed.
      batch_size: the number of words in each batch of the client datasets.
      repetitions: the number of IBLT hash functions (>= 3).

    Raises:
      ValueError: an argument out of range.
    """
    _check_arguments(
        string_max_bytes,
        repetitions,
        max_heavy_hitters,
        max_words_per_user,
        k_anonymity,
        secure_sum_bitwidth,
        batch_size,
    )
    if decode_iblt_fn is None:
        decode_iblt_fn = iblt_tensor.decode_iblt_tensor_tf

    dataset_type = T.SequenceType(T.TensorType(np.str_, [None]))

    @tf_computation(dataset_type)
    @tf.function
    def compute_sketch(dataset):
        encoder = iblt_tensor.IbltTensorEncoder(
            capacity=capacity,
            string_max_bytes=string_max_bytes,
            encoding=_CharacterEncoding.UTF8,
            repetitions=repetitions,
            value_shape=(1,),
            seed=seed,
        )
        k_words, counts = iblt_clipping.clipped_words_and_counts(
            dataset, max_words_per_user, multi_contribution, batch_size, string_max_bytes
        )
        return encoder.compute_iblt(k_words, tf.reshape(counts, shape=[-1, 1]))

    @tf_computation(compute_sketch.type_signature.result)
    @tf.function
    def decode_heavy_hitters(sketch, count_tensor):
        heavy_hitters, unique_counts, counts, num_not_decoded = decode_iblt_fn(
            iblt=sketch,
            iblt_values=count_tensor,
            value_shape=(1,),
            capacity=capacity,
            string_max_bytes=string_max_bytes,
            repetitions=repetitions,
            seed=seed,
        )
        counts = tf.squeeze(counts, axis=1)
        if k_anonymity > 1:
            mask = tf.math.greater_equal(unique_counts, k_anonymity)
            heavy_hitters = tf.boolean_mask(heavy_hitters, mask)
            unique_counts = tf.boolean_mask(unique_counts, mask)
            counts = tf.boolean_mask(counts, mask)
        if max_heavy_hitters is not None and tf.shape(heavy_hitters)[0] > max_heavy_hitters:
            _, top_indices = tf.math.top_k(counts, max_heavy_hitters)
            heavy_hitters = tf.gather(heavy_hitters, top_indices)
            unique_counts = tf.gather(unique_counts, top_indices)
            counts = tf.gather(counts, top_indices)
        if string_postprocessor is not None:
            heavy_hitters = string_postprocessor(heavy_hitters)
        return heavy_hitters, unique_counts, counts, num_not_decoded

    if secure_sum_bitwidth is not None:
        # Sketches are decoded modulo the field size: sum them modulo it.
        def sketch_sum_fn(x):
            return intrinsics.federated_secure_modular_sum(
                x, modulus=np.int64(iblt_lib.DEFAULT_FIELD_SIZE)
            )

        def count_sum_fn(x):
            return intrinsics.federated_secure_sum(x, max_input=2**secure_sum_bitwidth - 1)
    else:
        sketch_sum_fn = count_sum_fn = intrinsics.federated_sum

    @tf_computation
    def timestamp():
        return tf.cast(tf.timestamp(), np.int64)

    @federated_computation(T.FederatedType(dataset_type, T.CLIENTS))
    def one_round_computation(examples):
        round_timestamp = intrinsics.federated_eval(timestamp, T.SERVER)
        clients = count_sum_fn(intrinsics.federated_value(1, T.CLIENTS))
        sketch, count_tensor = intrinsics.federated_map(compute_sketch, examples)
        sketch = sketch_sum_fn(sketch)
        count_tensor = count_sum_fn(count_tensor)
        heavy_hitters, unique_counts, counts, num_not_decoded = intrinsics.federated_map(
            decode_heavy_hitters, (sketch, count_tensor)
        )
        return intrinsics.federated_zip(
            ServerOutput(
                clients=clients,
                heavy_hitters=heavy_hitters,
                heavy_hitters_unique_counts=unique_counts,
                heavy_hitters_counts=counts,
                num_not_decoded=num_not_decoded,
                round_timestamp=round_timestamp,
            )
        )

    return one_round_computation
