"""Tensor helpers of the learning templates (TFF's ``learning/tensor_utils.py``, the parts used)."""

from __future__ import annotations

import functools
from typing import Any, Tuple

import tensorflow as tf


def zero_all_if_any_non_finite(structure: Any) -> Tuple[Any, tf.Tensor]:
    """``(structure, 0)`` when every value is finite, else ``(zeros like it, 1)`` (int32 flag)."""
    flat = tf.nest.flatten(structure)
    if not flat:
        return structure, tf.constant(0)
    all_finite = functools.reduce(tf.logical_and,
                                  [tf.reduce_all(tf.math.is_finite(t)) for t in flat])
    return tf.cond(all_finite,
                   true_fn=lambda: (structure, tf.constant(0)),
                   false_fn=lambda: (tf.nest.map_structure(tf.zeros_like, structure),
                                     tf.constant(1)))
