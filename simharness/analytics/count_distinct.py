"""TFF's ``analytics/count_distinct.py``: federated HyperLogLog (distinct counts).

```
strings@CLIENTS -> hash (to_hash_bucket_fast, mod 2**32) -> client sketch (32 registers)
  -> element-wise max (federated_max, or secure: one-hot + federated_secure_sum)
  -> estimate HLL_ALPHA * m**2 / sum(2 ** -register)@SERVER
```
See https://en.wikipedia.org/wiki/HyperLogLog. Hashes are int64 in
``[0, 2**32)``; register `j` is the hash's top 5 bits, and its value the
position of the leftmost 1 of the other 27 bits (27 - floor(log2(w))).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from simharness.core import intrinsics
from simharness.core import types as T
from simharness.core.computation import federated_computation, tf_computation

__all__ = [
    'HLL_ALPHA',
    'HLL_BIT_INDEX_HEAD',
    'HLL_BIT_INDEX_TAIL',
    'HLL_SKETCH_SIZE',
    'build_client_hyperloglog_computation',
    'build_federated_secure_max_computation',
    'create_federated_hyperloglog_computation',
]

# 64 is not supported: TF hashes to int64, i.e. [0, 2**63 - 1]; a power of 2 is needed.
HLL_SKETCH_SIZE = 32  # Hashes are taken mod 2**HLL_SKETCH_SIZE.
HLL_BIT_INDEX_HEAD = 5  # log2(HLL_SKETCH_SIZE)
HLL_BIT_INDEX_TAIL = HLL_SKETCH_SIZE - HLL_BIT_INDEX_HEAD
HLL_ALPHA = 0.697


@tf.function
def _log2(u: tf.Tensor) -> tf.Tensor:
    """The integer log base 2 of `u` (bit shifts: exact up to 2**63)."""
    ans = tf.constant(0, dtype=tf.int64)
    u = tf.cast(u, dtype=tf.int64)
    while u > 0:
        ans += 1
        u = u // 2
    return ans - 1


def build_client_hyperloglog_computation():
    """The computation ``int64* -> int64[HLL_SKETCH_SIZE]``: a dataset's HyperLogLog sketch."""

    @tf_computation(T.SequenceType(np.int64))
    @tf.function
    def _client_hyperloglog(client_data: tf.data.Dataset) -> tf.Tensor:
        initial_state = tf.zeros(HLL_SKETCH_SIZE, dtype=tf.int64)

        def reduce_func(state, hash_value):
            j = hash_value // 2**HLL_BIT_INDEX_TAIL
            w = tf.bitwise.bitwise_and(hash_value, 2**HLL_BIT_INDEX_TAIL - 1)
            rho = HLL_BIT_INDEX_TAIL - _log2(w)
            sketch = tf.one_hot(tf.cast(j, tf.int32), HLL_SKETCH_SIZE, dtype=tf.int64)
            return tf.maximum(sketch * rho, state)

        return client_data.reduce(initial_state, reduce_func)

    return _client_hyperloglog


def build_federated_secure_max_computation():
    """The federated computation of the element-wise max of client sketches, by secure sum.

    ``int64[HLL_SKETCH_SIZE]@CLIENTS -> int64[HLL_SKETCH_SIZE]@SERVER``. The
    values must lie in ``[0, HLL_BIT_INDEX_TAIL + 1]``: each is one-hot
    encoded, the encodings are summed with ``federated_secure_sum`` (max
    input 1), and the max is the highest nonzero position.
    """

    @tf_computation
    @tf.function
    def _onehot_sketch(sketch: tf.Tensor) -> tf.Tensor:
        return tf.cast(
            tf.one_hot(tf.cast(sketch, tf.int32), HLL_BIT_INDEX_TAIL + 1, dtype=tf.int64), tf.int32
        )

    @tf_computation
    @tf.function
    def maxes_from_onehots(x):
        mult = tf.reshape(
            tf.range(HLL_BIT_INDEX_TAIL + 1, dtype=tf.int64), (-1, HLL_BIT_INDEX_TAIL + 1)
        )
        return tf.reduce_max(tf.cast(x > 0, tf.int64) * mult, axis=1)

    @federated_computation(
        T.FederatedType(T.TensorType(np.int64, shape=[HLL_SKETCH_SIZE]), T.CLIENTS)
    )
    def federated_secure_max(sketch):
        onehot_sketches = intrinsics.federated_map(_onehot_sketch, sketch)
        server_sketch = intrinsics.federated_secure_sum(onehot_sketches, 1)
        return intrinsics.federated_map(maxes_from_onehots, server_sketch)

    return federated_secure_max


def create_federated_hyperloglog_computation(*, use_secagg: bool = False):
    """The federated computation ``{str*}@CLIENTS -> int64@SERVER``: the distinct count estimate.

    Args:
      use_secagg: take the max of the sketches by secure aggregation
        (`build_federated_secure_max_computation`) instead of
        ``federated_max``.
    """

    @tf_computation
    @tf.function
    def hash_client_data(client_data: tf.data.Dataset) -> tf.data.Dataset:
        # to_hash_bucket_strong would need its key as Python ints, baked into the graph.
        return client_data.map(
            lambda item: tf.strings.to_hash_bucket_fast(item, 2**HLL_SKETCH_SIZE)
        )

    @tf_computation
    @tf.function
    def estimate_count_from_sketch(sketch: tf.Tensor) -> tf.Tensor:
        z = 1 / tf.math.reduce_sum(0.5 ** tf.cast(sketch, tf.float64))
        return tf.cast(HLL_ALPHA * HLL_SKETCH_SIZE**2 * z, tf.int64)

    client_hyperloglog = build_client_hyperloglog_computation()
    federated_secure_max = build_federated_secure_max_computation()

    @federated_computation(T.FederatedType(T.SequenceType(np.str_), T.CLIENTS))
    def federated_hyperloglog(client_data):
        client_hash = intrinsics.federated_map(hash_client_data, client_data)
        sketches = intrinsics.federated_map(client_hyperloglog, client_hash)
        if use_secagg:
            server_sketch = federated_secure_max(sketches)
        else:
            server_sketch = intrinsics.federated_max(sketches)
        return intrinsics.federated_map(estimate_count_from_sketch, server_sketch)

    return federated_hyperloglog
