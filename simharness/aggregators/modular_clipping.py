"""TFF's `ModularClippingSumFactory` (``aggregators/modular_clipping.py``).

```
clients: v -> wrapped into [lower, upper)      (per entry, modulo upper - lower)
inner_agg_factory (SumFactory) aggregates;   server: the sum wrapped again
measurements <modclip=inner measurements[, estimated_stddev]>
```
"""

from __future__ import annotations

import collections
import math
from typing import Any, Optional
import warnings

import numpy as np
import tensorflow as tf

from simharness.aggregators import factory, sum_factory
from simharness.aggregators import tensor_utils as tu
from simharness.core import intrinsics
from simharness.core import types as T
from simharness.core.computation import federated_computation, tf_computation
from simharness.errors import SimharnessTypeError, SimharnessValueError
from simharness.templates import AggregationProcess, MeasuredProcessOutput

__all__ = ['ModularClippingSumFactory', 'estimate_wrapped_gaussian_stddev', 'modular_clip_by_value']

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


def modular_clip_by_value(value: Any, clip_range_lower: Any, clip_range_upper: Any) -> Any:
    """Each entry wrapped into ``[clip_range_lower, clip_range_upper)``."""

    def mod_clip(v):
        width = clip_range_upper - clip_range_lower
        period = tf.cast(tf.floor(v / width - clip_range_lower / width), v.dtype)
        return v - period * width

    return tu.map_structure(mod_clip, value)


def estimate_wrapped_gaussian_stddev(values: Any, clip_lower: Any, clip_upper: Any) -> tf.Tensor:
    """The stddev of `values`, taken as a wrapped Gaussian centred in the range.

    A maximum-likelihood variant of https://arxiv.org/pdf/1912.00131.pdf.
    """
    samples = tf.cast(tf.concat([tf.reshape(x, [-1]) for x in tu.flatten(values)], 0), tf.float64)
    tau = math.pi * 2
    width = tf.cast(clip_upper - clip_lower, tf.float64)
    normalized = tf.cast(samples / width * tau, tf.float32)
    r_stat = tf.abs(tf.reduce_mean(tf.exp(tf.complex(real=0.0, imag=normalized))))
    return tf.sqrt(-2.0 * tf.math.log(r_stat)) / tau * tf.cast(width, tf.float32)


class ModularClippingSumFactory(factory.UnweightedAggregationFactory):
    """Modular clipping into ``[clip_range_lower, clip_range_upper)`` around a sum.

    Args:
      clip_range_lower: the inclusive lower bound (a Python int).
      clip_range_upper: the exclusive upper bound (a Python int).
      inner_agg_factory: the aggregation wrapped (default `SumFactory`).
      estimate_stddev: also measure ``estimated_stddev`` of the aggregate.

    Raises:
      TypeError: bounds not ints, a wrong factory, `estimate_stddev` not a bool.
      ValueError: lower > upper, or a range overflowing int32.
    """

    def __init__(
        self,
        clip_range_lower: int,
        clip_range_upper: int,
        inner_agg_factory: Optional[factory.UnweightedAggregationFactory] = None,
        estimate_stddev: Optional[bool] = False,
    ):
        if inner_agg_factory is None:
            inner_agg_factory = sum_factory.SumFactory()
        elif not isinstance(inner_agg_factory, factory.UnweightedAggregationFactory):
            raise SimharnessTypeError(
                '`inner_agg_factory` must have type '
                '`UnweightedAggregationFactory`. Found '
                f'{type(inner_agg_factory)}.'
            )
        if not (isinstance(clip_range_lower, int) and isinstance(clip_range_upper, int)):
            raise SimharnessTypeError(
                '`clip_range_lower` and `clip_range_upper` must be Python `int`; got '
                f'{clip_range_lower!r} with type {type(clip_range_lower)} and '
                f'{clip_range_upper!r} with type {type(clip_range_upper)}, respectively.'
            )
        if clip_range_lower > clip_range_upper:
            raise SimharnessValueError(
                '`clip_range_lower` should not be larger than '
                f'`clip_range_upper`, got {clip_range_lower} and '
                f'{clip_range_upper}'
            )
        if (
            clip_range_upper > _INT32_MAX
            or clip_range_lower < _INT32_MIN
            or clip_range_upper - clip_range_lower > _INT32_MAX
        ):
            raise SimharnessValueError(
                '`clip_range_lower` and `clip_range_upper` should be set such that the range of '
                f'the modulus do not overflow tf.int32. Found clip_range_lower={clip_range_lower}'
                f' and clip_range_upper={clip_range_upper} respectively.'
            )
        if not isinstance(estimate_stddev, bool):
            raise SimharnessTypeError(
                f'{estimate_stddev} must be a bool. Found {estimate_stddev!r}.'
            )
        self._lower, self._upper = clip_range_lower, clip_range_upper
        self._inner_agg_factory = inner_agg_factory
        self._estimate_stddev = estimate_stddev

    def create(self, value_type: factory.ValueType) -> AggregationProcess:
        if not (
            isinstance(value_type, (T.TensorType, T.StructType))
            and factory.is_structure_of_tensors(value_type)
        ):
            raise SimharnessTypeError(
                'Expected `value_type` to be `TensorType` or `StructType` containing only '
                f'`TensorType`. Found type: {value_type!r}',
                actual=value_type,
            )
        if not factory.is_structure_of_integers(value_type):
            raise SimharnessTypeError(
                f'Component dtypes of `value_type` must all be integers. Found {value_type!r}.',
                actual=value_type,
            )
        client_dim = sum(
            int(np.prod(leaf.shape)) if leaf.shape else 1 for leaf in T.flatten_type(value_type)
        )
        if self._estimate_stddev:
            if client_dim <= 1:
                raise SimharnessValueError(
                    'The stddev estimation procedure expects more than 1 element from '
                    f'`value_type`. Found `value_type` of {value_type} with {client_dim} '
                    'elements.'
                )
            if client_dim <= 100:
                warnings.warn(
                    f'`value_type` has only {client_dim} elements. The estimated '
                    'standard deviation may be noisy. Consider setting '
                    '`estimate_stddev` to True only if the input tensor/structure '
                    'have more than 100 elements.'
                )
        inner = self._inner_agg_factory.create(value_type)
        clip_fn = tf_computation(modular_clip_by_value)
        estimator_fn = tf_computation(estimate_wrapped_gaussian_stddev)
        lower, upper, estimate = self._lower, self._upper, self._estimate_stddev

        @federated_computation(
            inner.initialize.type_signature.result, T.FederatedType(value_type, T.CLIENTS)
        )
        def next_fn(state, value):
            clip_lower = intrinsics.federated_value(lower, T.SERVER)
            clip_upper = intrinsics.federated_value(upper, T.SERVER)
            clipped = intrinsics.federated_map(
                clip_fn,
                (
                    value,
                    intrinsics.federated_broadcast(clip_lower),
                    intrinsics.federated_broadcast(clip_upper),
                ),
            )
            inner_output = inner.next(state, clipped)
            result = intrinsics.federated_map(
                clip_fn, (inner_output.result, clip_lower, clip_upper)
            )
            measurements = collections.OrderedDict(modclip=inner_output.measurements)
            if estimate:
                measurements['estimated_stddev'] = intrinsics.federated_map(
                    estimator_fn, (result, clip_lower, clip_upper)
                )
            return MeasuredProcessOutput(
                state=inner_output.state,
                result=result,
                measurements=intrinsics.federated_zip(measurements),
            )

        return AggregationProcess(inner.initialize, next_fn)
