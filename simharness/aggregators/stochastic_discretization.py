"""TFF's `StochasticDiscretizationFactory` (``aggregators/stochastic_discretization.py``).

```
clients: x -> x / step_size -> rounded to an int32 (stochastically: up with probability frac)
inner_agg_factory sums the ints;  server: sum * step_size, cast back to the value's dtype
state <step_size, inner_agg_process>   measurements <stochastic_discretization[, distortion]>
```
Also the shared builder of `DeterministicDiscretizationFactory` (round to nearest).

Difference from TFF: TFF seeds each client's rounding with a timestamp (new
bits on every call). Here the seed is a fingerprint of the client's value
and the step size, so the rounding is a function of the inputs: the same
bits on every stack and every rerun. Two clients with identical values
round identically; the rounding stays unbiased over the values' fractional
parts as long as those vary.
"""

from __future__ import annotations

import collections
from typing import Any, Callable, List, Optional

import numpy as np
import tensorflow as tf

from simharness.aggregators import factory
from simharness.aggregators import tensor_utils as tu
from simharness.core import intrinsics
from simharness.core import types as T
from simharness.core.computation import federated_computation, tf_computation
from simharness.errors import SimharnessTypeError
from simharness.templates import AggregationProcess, MeasuredProcessOutput

__all__ = ['StochasticDiscretizationFactory', 'build_discretization_process']

OUTPUT_TF_TYPE = tf.int32


def _check_float_value_type(value_type: Any) -> List[tf.DType]:
    if not (
        isinstance(value_type, T.TensorType)
        or (
            isinstance(value_type, T.StructType)
            and value_type.container is not None
            and factory.is_structure_of_tensors(value_type)
        )
    ):
        raise SimharnessTypeError(
            'Expected `value_type` to be `TensorType` or a struct with a Python container '
            f'containing only `TensorType`. Found type: {value_type!r}',
            actual=value_type,
        )
    if not factory.is_structure_of_floats(value_type):
        raise SimharnessTypeError(
            f'Component dtypes of `value_type` must all be floats. Found {value_type!r}.',
            actual=value_type,
        )
    return [tf.as_dtype(leaf.dtype) for leaf in T.flatten_type(value_type)]


def build_discretization_process(
    value_type: factory.ValueType,
    step_size: float,
    inner_agg_factory: factory.UnweightedAggregationFactory,
    distortion_aggregation_factory: Optional[factory.UnweightedAggregationFactory],
    discretize_tensor: Callable[[tf.Tensor, tf.Tensor, int], tf.Tensor],
    name: str,
) -> AggregationProcess:
    """The process both discretization factories create (`discretize_tensor(x, step, i)`)."""
    dtypes = _check_float_value_type(value_type)
    distortion_process = (
        None
        if distortion_aggregation_factory is None
        else distortion_aggregation_factory.create(T.TensorType(np.float32))
    )

    @tf_computation(value_type, np.float32)
    def discretize_fn(value, step):
        return tu.pack_sequence_as(
            value, [discretize_tensor(x, step, i) for i, x in enumerate(tu.flatten(value))]
        )

    @tf_computation(discretize_fn.type_signature.result, np.float32)
    def undiscretize_fn(value, step):
        return tu.pack_sequence_as(
            value,
            [tf.cast(tf.cast(x, tf.float32) * step, d) for x, d in zip(tu.flatten(value), dtypes)],
        )

    @tf_computation(value_type, np.float32)
    def distortion_fn(value, step):
        leaves = tu.flatten(value)
        rebuilt = [
            tf.cast(tf.cast(discretize_tensor(x, step, i), tf.float32) * step, x.dtype)
            for i, x in enumerate(leaves)
        ]
        squared = [
            tf.reshape(tf.cast(tf.square(r - x), tf.float32), [-1]) for r, x in zip(rebuilt, leaves)
        ]
        return tf.reduce_mean(tf.concat(squared, axis=0))

    inner = inner_agg_factory.create(discretize_fn.type_signature.result)

    @federated_computation()
    def init_fn():
        return intrinsics.federated_zip(
            collections.OrderedDict(
                step_size=intrinsics.federated_value(step_size, T.SERVER),
                inner_agg_process=inner.initialize(),
            )
        )

    @federated_computation(init_fn.type_signature.result, T.FederatedType(value_type, T.CLIENTS))
    def next_fn(state, value):
        server_step = state['step_size']
        client_step = intrinsics.federated_broadcast(server_step)
        discretized = intrinsics.federated_map(discretize_fn, (value, client_step))
        inner_output = inner.next(state['inner_agg_process'], discretized)
        result = intrinsics.federated_map(undiscretize_fn, (inner_output.result, server_step))
        new_state = collections.OrderedDict(
            step_size=server_step, inner_agg_process=inner_output.state
        )
        measurements = collections.OrderedDict([(name, inner_output.measurements)])
        if distortion_process is not None:
            distortions = intrinsics.federated_map(distortion_fn, (value, client_step))
            measurements['distortion'] = distortion_process.next(
                distortion_process.initialize(), distortions
            ).result
        return MeasuredProcessOutput(
            state=intrinsics.federated_zip(new_state),
            result=result,
            measurements=intrinsics.federated_zip(measurements),
        )

    return AggregationProcess(init_fn, next_fn)


def _value_seed(x: tf.Tensor, step: tf.Tensor, index: int) -> tf.Tensor:
    """A stateless seed from the bits of `x`, the step size and the leaf index."""
    fp = tu.fingerprint([x, step], [tf.strings.as_string(index)])
    return tf.stack([fp, tf.constant(index, tf.int64)])


def _stochastic_round(x: tf.Tensor, step: tf.Tensor, index: int) -> tf.Tensor:
    scaled = tf.divide(x, tf.cast(step, x.dtype))
    prob = scaled - tf.floor(scaled)
    rand = tf.random.stateless_uniform(tf.shape(x), seed=_value_seed(x, step, index), dtype=x.dtype)
    rounded = tf.where(tf.less_equal(rand, prob), tf.math.ceil(scaled), tf.math.floor(scaled))
    return tf.cast(rounded, OUTPUT_TF_TYPE)


class StochasticDiscretizationFactory(factory.UnweightedAggregationFactory):
    """Scales float values by ``1/step_size`` and rounds them stochastically to int32.

    Not for DP: it does not bound the L2 norm inflation.

    Args:
      inner_agg_factory: aggregates the integers.
      step_size: the distance between adjacent levels.
      distortion_aggregation_factory: if given, aggregates each client's mean
        squared rounding error into the ``distortion`` measurement.

    Raises:
      TypeError: `distortion_aggregation_factory` is not an unweighted factory.
    """

    def __init__(
        self,
        inner_agg_factory: factory.UnweightedAggregationFactory,
        step_size: float,
        distortion_aggregation_factory: Optional[factory.UnweightedAggregationFactory] = None,
    ):
        if distortion_aggregation_factory is not None:
            factory.check_factory(
                distortion_aggregation_factory,
                factory.UnweightedAggregationFactory,
                'distortion_aggregation_factory',
            )
        self._step_size = step_size
        self._inner_agg_factory = inner_agg_factory
        self._distortion_aggregation_factory = distortion_aggregation_factory

    def create(self, value_type: factory.ValueType) -> AggregationProcess:
        return build_discretization_process(
            value_type,
            self._step_size,
            self._inner_agg_factory,
            self._distortion_aggregation_factory,
            _stochastic_round,
            'stochastic_discretization',
        )
