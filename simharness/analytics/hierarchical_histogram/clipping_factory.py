"""TFF's ``hierarchical_histogram/clipping_factory.py``: bounding each client's histogram.

`HistogramClippingSumFactory` clips the client histograms (integer tensors)
before an inner factory (default `SumFactory`) aggregates them:

* ``'sub-sampling'``: samples up to `max_records_per_user` records uniformly
  without replacement (``[1, 2, 3, 5]``, 5 records -> e.g. ``[1, 2, 1, 1]``);
* ``'distinct'``: keeps each bin at most once, then samples up to
  `max_records_per_user` of the nonzero bins (``[0, 2, 3, 5]``, 2 -> e.g.
  ``[0, 1, 0, 1]``).

The sampling is seeded by the clock (``tf.timestamp``), as TFF's.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import tensorflow as tf

from simharness.aggregators import factory, sum_factory
from simharness.core import intrinsics
from simharness.core import types as T
from simharness.core.computation import federated_computation, tf_computation
from simharness.templates import AggregationProcess

__all__ = ['CLIP_MECHANISMS', 'HistogramClippingSumFactory']

#: The supported clipping mechanisms.
CLIP_MECHANISMS = [
    'sub-sampling',
    'distinct',
]


class HistogramClippingSumFactory(factory.UnweightedAggregationFactory):
    """Clips client histograms, then aggregates them with an inner factory.

    Only meant for hierarchical histograms.

    Args:
      clip_mechanism: ``'sub-sampling'`` (default) or ``'distinct'`` (see the
        module).
      max_records_per_user: the most records a client's histogram keeps
        (default 10).
      inner_agg_factory: the `UnweightedAggregationFactory` of the clipped
        histograms (default `SumFactory`).
      cast_to_float: cast the clipped histograms to float32 before the inner
        factory (default False: keep the integer dtype).

    Raises:
      ValueError: an unknown `clip_mechanism`, or `max_records_per_user` not
        positive.
    """

    def __init__(
        self,
        clip_mechanism: str = 'sub-sampling',
        max_records_per_user: int = 10,
        inner_agg_factory: Optional[factory.UnweightedAggregationFactory] = None,
        cast_to_float: bool = False,
    ):
        _check_membership(clip_mechanism, CLIP_MECHANISMS, 'clip_mechanism')
        _check_positive(max_records_per_user, 'max_records_per_user')
        self._clip_mechanism = clip_mechanism
        self._max_records_per_user = max_records_per_user
        self._inner_agg_factory = (
            sum_factory.SumFactory() if inner_agg_factory is None else inner_agg_factory
        )
        self._cast_to_float = cast_to_float

    def create(self, value_type: factory.ValueType) -> AggregationProcess:
        """The process; `value_type` must be an integer `TensorType` (TypeError otherwise)."""
        _check_is_tensor_type(value_type, 'value_type')
        _check_is_integer_struct(value_type, 'value_type')
        if self._clip_mechanism == 'sub-sampling':
            clip_fn = _sub_sample_clip
        elif self._clip_mechanism == 'distinct':
            clip_fn = _distinct_clip
        else:
            raise ValueError(
                f'Unsupported clipping mechanism: {self._clip_mechanism}. Must be '
                f'one of {CLIP_MECHANISMS}'
            )

        inner_value_type = value_type
        if self._cast_to_float:
            inner_value_type = T.TensorType(np.float32, value_type.shape)
        inner_agg_process = self._inner_agg_factory.create(inner_value_type)
        init_fn = inner_agg_process.initialize
        tff_clip_fn = tf_computation(clip_fn, value_type, T.TensorType(np.int32))
        tff_cast_fn = tf_computation(lambda x: tf.cast(x, inner_value_type.dtype), value_type)
        max_records = self._max_records_per_user

        @federated_computation(
            init_fn.type_signature.result, T.FederatedType(value_type, T.CLIENTS)
        )
        def next_fn(state, value):
            clipped = intrinsics.federated_map(
                tff_clip_fn, (value, intrinsics.federated_value(max_records, T.CLIENTS))
            )
            clipped = intrinsics.federated_map(tff_cast_fn, clipped)
            return inner_agg_process.next(state, clipped)

        return AggregationProcess(init_fn, next_fn)


def _clock_seed() -> tf.Tensor:
    return tf.cast(tf.stack([tf.timestamp() * 1e6, tf.timestamp() * 1e6]), dtype=tf.int64)


def _sample_indices(indices: tf.Tensor, sample_num, histogram: tf.Tensor) -> tf.Tensor:
    """The histogram of `sample_num` entries of `indices` drawn without replacement."""
    samples = tf.random.stateless_uniform(tf.shape(indices), _clock_seed())
    _, sampled_idx = tf.math.top_k(samples, k=sample_num, sorted=False)
    ind = tf.expand_dims(tf.gather(indices, sampled_idx), axis=1)
    upd = tf.ones(tf.shape(sampled_idx), dtype=tf.int32)
    return tf.scatter_nd(indices=ind, updates=upd, shape=tf.shape(histogram))


def _sub_sample_clip(histogram, sample_num):
    """`histogram` (int32) sub-sampled to `sample_num` records, if it has more."""

    def sub_sample():
        indices = tf.repeat(tf.range(tf.shape(histogram)[0]), histogram)
        return _sample_indices(indices, sample_num, histogram)

    l1_norm = tf.norm(histogram, ord=1)
    result = tf.cond(tf.greater(l1_norm, sample_num), sub_sample, lambda: histogram)
    result.set_shape(histogram.shape.as_list())
    return result


def _distinct_clip(histogram, sample_num):
    """`histogram` (int32) uniquified (bins capped at 1), then sub-sampled to `sample_num`."""

    def distinct():
        indices = tf.squeeze(tf.cast(tf.where(tf.not_equal(histogram, 0)), tf.int32))
        return _sample_indices(indices, sample_num, histogram)

    l0_norm = tf.math.count_nonzero(histogram, dtype=tf.int32)
    result = tf.cond(tf.greater(l0_norm, sample_num), distinct, lambda: tf.minimum(histogram, 1))
    return tf.reshape(result, histogram.shape)


def _check_is_integer_struct(value_type, label):
    if not factory.is_structure_of_integers(value_type):
        raise TypeError(
            f'Component dtypes of `{label}` must all be integers. Found {value_type!r}.'
        )


def _check_is_tensor_type(value, label):
    if not isinstance(value, T.TensorType):
        raise TypeError(f'Expected `{label}` to be `TensorType`. Found type: {value!r}')


def _check_positive(value, label):
    if value <= 0:
        raise ValueError(f'{label} must be positive. Found {value}.')


def _check_membership(value, valid_set, label):
    if value not in valid_set:
        raise ValueError(f'`{label}` must be one of {valid_set}. Found {value}.')
