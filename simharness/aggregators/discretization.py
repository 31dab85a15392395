"""TFF's distributed-DP `DiscretizationFactory` (``aggregators/discretization.py``).

```
clients: x -> x * scale_factor, rounded (stochastically, conditionally on the norm when beta > 0)
         to int32;   inner factory sums the ints;   server: sum / scale_factor, cast back
state <scale_factor, prior_norm_bound, inner_agg_process>   measurements <discretize=inner>
```
`inflated_l2_norm_bound` is TFF's bound on the L2 norm after rounding.

Difference from TFF: the stochastic rounding's seed is a fingerprint of the
client's value and the scale factor (TFF: a timestamp), so it is the same bits
on every stack; retries (beta > 0) move the seed's second word on as TFF's.
"""

from __future__ import annotations

import collections
import numbers
from typing import Any

import numpy as np
import tensorflow as tf

from simharness.aggregators import factory
from simharness.aggregators import tensor_utils as tu
from simharness.core import intrinsics
from simharness.core import types as T
from simharness.core.computation import federated_computation, tf_computation
from simharness.errors import SimharnessTypeError
from simharness.templates import AggregationProcess, MeasuredProcessOutput

__all__ = ['DiscretizationFactory', 'inflated_l2_norm_bound']

OUTPUT_TF_TYPE = tf.int32
_MAX_TRIES = 1000


class DiscretizationFactory(factory.UnweightedAggregationFactory):
    """Scales float values by `scale_factor` and rounds them to int32 for `inner_agg_factory`.

    Args:
      inner_agg_factory: sums the integers.
      scale_factor: the positive scale applied before rounding.
      stochastic: stochastic (unbiased) rounding, else round to nearest.
      beta: in [0, 1): the conditional rounding's failure probability (0: plain
        stochastic rounding).
      prior_norm_bound: an optional L2 bound of the values (tensor values only),
        used for the conditional rounding's threshold.
    """

    def __init__(
        self,
        inner_agg_factory: factory.UnweightedAggregationFactory,
        scale_factor: float = 1.0,
        stochastic: bool = False,
        beta: float = 0.0,
        prior_norm_bound: Any = None,
    ):
        if not isinstance(inner_agg_factory, factory.UnweightedAggregationFactory):
            raise TypeError(
                '`inner_agg_factory` must have type UnweightedAggregationFactory. '
                f'Found {type(inner_agg_factory)}.'
            )
        if not isinstance(scale_factor, numbers.Number) or scale_factor <= 0:
            raise ValueError(f'`scale_factor` should be a positive number. Found {scale_factor}.')
        if not isinstance(stochastic, bool):
            raise ValueError(f'`stochastic` should be a boolean. Found {stochastic}.')
        if not isinstance(beta, numbers.Number) or not 0 <= beta < 1:
            raise ValueError(f'`beta` should be a number in [0, 1). Found {beta}.')
        if prior_norm_bound is not None and (
            not isinstance(prior_norm_bound, numbers.Number) or prior_norm_bound <= 0
        ):
            raise ValueError(
                'If specified, `prior_norm_bound` should be a positive number. '
                f'Found {prior_norm_bound}.'
            )
        self._scale_factor = float(scale_factor)
        self._stochastic = stochastic
        self._beta = float(beta)
        self._prior_norm_bound = float(prior_norm_bound or 0.0)
        self._inner_agg_factory = inner_agg_factory

    def create(self, value_type: factory.ValueType) -> AggregationProcess:
        value_type = T.to_type(value_type)
        if isinstance(value_type, T.TensorType):
            pass
        elif (
            isinstance(value_type, T.StructType)
            and value_type.container is not None
            and factory.is_structure_of_tensors(value_type)
        ):
            if self._prior_norm_bound:
                raise SimharnessTypeError(
                    'If `prior_norm_bound` is specified, `value_type` must '
                    f'be `TensorType`. Found type: {value_type!r}.',
                    actual=value_type,
                )
        else:
            raise SimharnessTypeError(
                'Expected `value_type` to be `TensorType` or `StructWithPythonType` containing '
                f'only `TensorType`. Found type: {value_type!r}',
                actual=value_type,
            )
        if not factory.is_structure_of_floats(value_type):
            raise SimharnessTypeError(
                f'Component dtypes of `value_type` must all be floats. Found {value_type!r}.',
                actual=value_type,
            )
        dtypes = [tf.as_dtype(leaf.dtype) for leaf in T.flatten_type(value_type)]
        stochastic, beta = self._stochastic, self._beta

        @tf_computation(value_type, np.float32, np.float32)
        def discretize_fn(value, scale_factor, prior_norm_bound):
            return tu.pack_sequence_as(
                value,
                [
                    _discretize_tensor(x, scale_factor, stochastic, beta, prior_norm_bound, i)
                    for i, x in enumerate(tu.flatten(value))
                ],
            )

        @tf_computation(discretize_fn.type_signature.result, np.float32)
        def undiscretize_fn(value, scale_factor):
            return tu.pack_sequence_as(
                value,
                [
                    tf.cast(tf.cast(x, tf.float32) / scale_factor, d)
                    for x, d in zip(tu.flatten(value), dtypes)
                ],
            )

        inner = self._inner_agg_factory.create(discretize_fn.type_signature.result)
        scale0, prior0 = self._scale_factor, self._prior_norm_bound

        @federated_computation()
        def init_fn():
            return intrinsics.federated_zip(
                collections.OrderedDict(
                    scale_factor=intrinsics.federated_value(np.float32(scale0), T.SERVER),
                    prior_norm_bound=intrinsics.federated_value(np.float32(prior0), T.SERVER),
                    inner_agg_process=inner.initialize(),
                )
            )

        @federated_computation(
            init_fn.type_signature.result, T.FederatedType(value_type, T.CLIENTS)
        )
        def next_fn(state, value):
            server_scale = state['scale_factor']
            client_scale = intrinsics.federated_broadcast(server_scale)
            server_prior = state['prior_norm_bound']
            client_prior = intrinsics.federated_broadcast(server_prior)
            discretized = intrinsics.federated_map(
                discretize_fn, (value, client_scale, client_prior)
            )
            inner_output = inner.next(state['inner_agg_process'], discretized)
            result = intrinsics.federated_map(undiscretize_fn, (inner_output.result, server_scale))
            new_state = collections.OrderedDict(
                scale_factor=server_scale,
                prior_norm_bound=server_prior,
                inner_agg_process=inner_output.state,
            )
            measurements = collections.OrderedDict(discretize=inner_output.measurements)
            return MeasuredProcessOutput(
                state=intrinsics.federated_zip(new_state),
                result=result,
                measurements=intrinsics.federated_zip(measurements),
            )

        return AggregationProcess(init_fn, next_fn)


def _discretize_tensor(
    x: tf.Tensor,
    scale_factor: tf.Tensor,
    stochastic: bool,
    beta: float,
    prior_norm_bound: tf.Tensor,
    index: int,
) -> tf.Tensor:
    x = tf.cast(x, tf.float32)
    scaled_x = x * scale_factor
    scaled_bound = prior_norm_bound * scale_factor  # 0 without a prior bound
    if stochastic:
        rounded = _stochastic_rounding(
            scaled_x, scaled_bound, scale_factor, beta, _value_seed(x, scale_factor, index)
        )
    else:
        rounded = tf.round(scaled_x)
    return tf.cast(rounded, OUTPUT_TF_TYPE)


def _value_seed(x: tf.Tensor, scale: tf.Tensor, index: int) -> tf.Tensor:
    return tu.fingerprint([x, scale], [tf.strings.as_string(index)])


def inflated_l2_norm_bound(l2_norm_bound: Any, gamma: Any, beta: Any, dim: Any) -> tf.Tensor:
    """TFF's bound on the L2 norm of a vector after (conditional) randomized rounding.

    Args:
      l2_norm_bound: the L2 bound before rounding.
      gamma: the rounding granularity (1 / scale).
      beta: the conditional rounding's parameter (0: plain rounding).
      dim: the vector's dimension.
    """
    l2_norm_bound = tf.convert_to_tensor(l2_norm_bound)
    norm = tf.cast(l2_norm_bound, tf.float32)
    gamma = tf.cast(gamma, tf.float32)
    gamma_f64 = tf.cast(gamma, tf.float64)
    dim = tf.cast(dim, tf.float64)
    beta = tf.cast(beta, tf.float32)
    gamma_sqrt_dim = tf.cast(tf.sqrt(dim) * gamma_f64, tf.float32)
    beta_term = tf.sqrt(2.0 * tf.math.log(1.0 / beta))
    bound_1 = norm + gamma_sqrt_dim
    squared_bound_2 = tf.square(norm) + 0.25 * tf.square(gamma_sqrt_dim)
    squared_bound_2 += beta_term * gamma * (norm + 0.5 * gamma_sqrt_dim)
    bound_2 = tf.sqrt(squared_bound_2)
    bound_2 = tf.cond(tf.equal(beta, 0), lambda: bound_1, lambda: bound_2)
    return tf.cast(tf.minimum(bound_1, bound_2), l2_norm_bound.dtype)


def _stochastic_rounding(
    x: tf.Tensor, l2_norm_bound: tf.Tensor, scale: tf.Tensor, beta: float, seed: tf.Tensor
) -> tf.Tensor:
    """TFF's (conditional) randomized rounding: redraw while the norm is over the threshold."""
    l2_norm_bound = tf.where(tf.equal(l2_norm_bound, 0.0), tf.norm(x, ord=2), l2_norm_bound)
    gamma = 1.0 / scale
    threshold = inflated_l2_norm_bound(l2_norm_bound / scale, gamma, beta, tf.size(x)) * scale
    floored_x = tf.floor(x)
    decimal_x = x - floored_x

    def try_rounding(tries):
        uniform = tf.random.stateless_uniform(
            tf.shape(x), seed=tf.stack([seed, tries]), maxval=1, dtype=x.dtype
        )
        return floored_x + tf.cast(uniform < decimal_x, x.dtype)

    rounded = try_rounding(tf.constant(1, tf.int64))
    if beta <= 0:
        return rounded

    def cond(tries, r):
        return tf.norm(r, ord=2) > threshold

    def body(tries, r):
        check = tf.debugging.assert_less_equal(
            tries,
            tf.constant(_MAX_TRIES, tf.int64),
            f'Stochastic rounding failed for {_MAX_TRIES} tries. This can happen when beta > 0.0 '
            'and low-precision arithmetic is used. Try setting beta to 0.0.',
        )
        with tf.control_dependencies([check]):
            return tries + 1, try_rounding(tries + 1)

    _, rounded = tf.while_loop(cond, body, (tf.constant(1, tf.int64), rounded))
    return rounded
