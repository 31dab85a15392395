"""Tensor helpers of the learning templates (TFF's ``learning/tensor_utils.py``, the parts used)."""

from __future__ import annotations

import functools
from typing import Tuple

import tensorflow as tf

from simharness.learning._typing import TensorStructure


#: Float dtypes whose finiteness is checked through a product with zeros (`_all_finite`).
_MATVEC_DTYPES = frozenset({tf.float16, tf.bfloat16, tf.float32, tf.float64})


def _all_finite(t: tf.Tensor) -> tf.Tensor:
    """Whether every element of `t` is finite (a scalar bool).

    A float tensor of rank >= 1 whose last dimension is known is multiplied with a vector
    of zeros: each product is 0 for a finite element and NaN for an infinite or NaN one
    (IEEE: inf * 0 and NaN * 0 are NaN, in XLA and in TF's kernels alike), so the sum of
    the products is finite exactly when every element is. A matrix-vector product is the
    fastest pass over the elements both runtimes have (the reference MLP's Keras client
    update, 48 clients compiled: 1.96 ms against 2.6-2.7 ms with a min of the `is_finite`
    flags, whose reduction XLA's CPU backend does not vectorize). Others (scalars,
    integers, an unknown last dimension): a min of 0/1 `is_finite` ints (the same answer
    as ``reduce_all``; empty: all finite).
    """
    if (
        t.dtype in _MATVEC_DTYPES
        and t.shape.rank is not None
        and t.shape.rank >= 1
        and t.shape[-1] is not None
    ):
        rows = tf.reshape(t, [-1, t.shape[-1]])
        return tf.math.is_finite(
            tf.reduce_sum(tf.linalg.matvec(rows, tf.zeros([t.shape[-1]], t.dtype)))
        )
    return _all_finite_by_flags(t)


def _all_finite_by_flags(t: tf.Tensor) -> tf.Tensor:
    """Whether every element of `t` is finite, by a min of its 0/1 `is_finite` ints."""
    return tf.reduce_min(tf.cast(tf.math.is_finite(t), tf.int32)) > 0


def any_non_finite(structure: TensorStructure) -> tf.Tensor:
    """1 when a value of `structure` has a NaN or Inf, else 0 (int32): the flag of
    `zero_all_if_any_non_finite`, with no matrix product. For computations run once a round
    (a server's finalizer): a matmul would make the XLA rule (`simharness.core.xla`) take
    one for model compute and compile it, ~0.4 s of its first call for microseconds saved."""
    flat = tf.nest.flatten(structure)
    if not flat:
        return tf.constant(0)
    all_finite = functools.reduce(tf.logical_and, [_all_finite_by_flags(t) for t in flat])
    return 1 - tf.cast(all_finite, tf.int32)


def zero_all_if_any_non_finite(structure: TensorStructure) -> Tuple[TensorStructure, tf.Tensor]:
    """``(structure, 0)`` when every value is finite, else ``(zeros like it, 1)`` (int32 flag)."""
    flat = tf.nest.flatten(structure)
    if not flat:
        return structure, tf.constant(0)
    all_finite = functools.reduce(tf.logical_and, [_all_finite(t) for t in flat])
    return tf.cond(
        all_finite,
        true_fn=lambda: (structure, tf.constant(0)),
        false_fn=lambda: (tf.nest.map_structure(tf.zeros_like, structure), tf.constant(1)),
    )
