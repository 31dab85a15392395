"""TFF's `MeanFactory` and `UnweightedMeanFactory` (``aggregators/mean.py``).

```
MeanFactory:            sum(value * weight) / sum(weight)     state <value_sum_process, weight_sum_process>
                                                              measurements <mean_value, mean_weight>
UnweightedMeanFactory:  sum(value) / count                    state <value sum state, count sum state>
                                                              measurements <mean_value, mean_count>
```
The sums are delegated to inner factories (default `SumFactory`).
"""

from __future__ import annotations

import collections
from typing import Optional

import numpy as np
import tensorflow as tf

from simharness.aggregators import factory
from simharness.aggregators import sum_factory
from simharness.aggregators import tensor_utils as tu
from simharness.core import intrinsics
from simharness.core import types as T
from simharness.core.computation import federated_computation, tf_computation
from simharness.templates import AggregationProcess, MeasuredProcessOutput

__all__ = ['MeanFactory', 'UnweightedMeanFactory']


@tf_computation()
def _mul(value, weight):
    return tu.map_structure(lambda x: x * tf.cast(weight, x.dtype), value)


@tf_computation()
def _div(weighted_value_sum, weight_sum):
    return tu.map_structure(
        lambda x: tf.math.divide(x, tf.cast(weight_sum, x.dtype)), weighted_value_sum
    )


@tf_computation()
def _div_no_nan(weighted_value_sum, weight_sum):
    return tu.map_structure(
        lambda x: tf.math.divide_no_nan(x, tf.cast(weight_sum, x.dtype)), weighted_value_sum
    )


class MeanFactory(factory.WeightedAggregationFactory):
    """The weighted mean ``sum(value * weight) / sum(weight)``.

    Args:
      value_sum_factory: sums the weighted values (default `SumFactory`).
      weight_sum_factory: sums the weights (default `SumFactory`).
      no_nan_division: the mean is 0 where the weights sum to 0.

    Raises:
      TypeError: a factory is not an `UnweightedAggregationFactory`, or
        `no_nan_division` is not a bool.
    """

    def __init__(
        self,
        value_sum_factory: Optional[factory.UnweightedAggregationFactory] = None,
        weight_sum_factory: Optional[factory.UnweightedAggregationFactory] = None,
        no_nan_division: bool = False,
    ):
        if value_sum_factory is None:
            value_sum_factory = sum_factory.SumFactory()
        factory.check_factory(
            value_sum_factory, factory.UnweightedAggregationFactory, 'value_sum_factory'
        )
        if weight_sum_factory is None:
            weight_sum_factory = sum_factory.SumFactory()
        factory.check_factory(
            weight_sum_factory, factory.UnweightedAggregationFactory, 'weight_sum_factory'
        )
        factory.check_factory(no_nan_division, bool, 'no_nan_division')
        self._value_sum_factory = value_sum_factory
        self._weight_sum_factory = weight_sum_factory
        self._no_nan_division = no_nan_division

    def create(
        self, value_type: factory.ValueType, weight_type: factory.ValueType
    ) -> AggregationProcess:
        factory.check_is_structure_of_floats(value_type)
        factory.check_value_type(weight_type, 'weight_type')
        value_sum_process = self._value_sum_factory.create(value_type)
        weight_sum_process = self._weight_sum_factory.create(weight_type)
        div = _div_no_nan if self._no_nan_division else _div

        @federated_computation()
        def init_fn():
            return intrinsics.federated_zip(
                collections.OrderedDict(
                    value_sum_process=value_sum_process.initialize(),
                    weight_sum_process=weight_sum_process.initialize(),
                )
            )

        @federated_computation(
            init_fn.type_signature.result,
            T.FederatedType(value_type, T.CLIENTS),
            T.FederatedType(weight_type, T.CLIENTS),
        )
        def next_fn(state, value, weight):
            weighted_value = intrinsics.federated_map(_mul, (value, weight))
            value_output = value_sum_process.next(state['value_sum_process'], weighted_value)
            weight_output = weight_sum_process.next(state['weight_sum_process'], weight)
            mean_value = intrinsics.federated_map(div, (value_output.result, weight_output.result))
            new_state = collections.OrderedDict(
                value_sum_process=value_output.state, weight_sum_process=weight_output.state
            )
            measurements = collections.OrderedDict(
                mean_value=value_output.measurements, mean_weight=weight_output.measurements
            )
            return MeasuredProcessOutput(
                intrinsics.federated_zip(new_state),
                mean_value,
                intrinsics.federated_zip(measurements),
            )

        return AggregationProcess(init_fn, next_fn)


class UnweightedMeanFactory(factory.UnweightedAggregationFactory):
    """The unweighted mean ``sum(value) / number of clients``.

    Args:
      value_sum_factory: sums the values (default `SumFactory`).
      count_sum_factory: sums the ones that count the clients (default
        `SumFactory`).

    Raises:
      TypeError: a factory is not an `UnweightedAggregationFactory`.
    """

    def __init__(
        self,
        value_sum_factory: Optional[factory.UnweightedAggregationFactory] = None,
        count_sum_factory: Optional[factory.UnweightedAggregationFactory] = None,
    ):
        if value_sum_factory is None:
            value_sum_factory = sum_factory.SumFactory()
        factory.check_factory(
            value_sum_factory, factory.UnweightedAggregationFactory, 'value_sum_factory'
        )
        if count_sum_factory is None:
            count_sum_factory = sum_factory.SumFactory()
        factory.check_factory(
            count_sum_factory, factory.UnweightedAggregationFactory, 'count_sum_factory'
        )
        self._value_sum_factory = value_sum_factory
        self._count_sum_factory = count_sum_factory

    def create(self, value_type: factory.ValueType) -> AggregationProcess:
        factory.check_is_structure_of_floats(value_type)
        value_sum_process = self._value_sum_factory.create(value_type)
        count_sum_process = self._count_sum_factory.create(T.TensorType(np.int32))

        @federated_computation()
        def init_fn():
            return intrinsics.federated_zip(
                (value_sum_process.initialize(), count_sum_process.initialize())
            )

        @federated_computation(
            init_fn.type_signature.result, T.FederatedType(value_type, T.CLIENTS)
        )
        def next_fn(state, value):
            value_sum_state, count_sum_state = state
            value_output = value_sum_process.next(value_sum_state, value)
            count_output = count_sum_process.next(
                count_sum_state, intrinsics.federated_value(1, T.CLIENTS)
            )
            mean_value = intrinsics.federated_map(_div, (value_output.result, count_output.result))
            new_state = intrinsics.federated_zip((value_output.state, count_output.state))
            measurements = intrinsics.federated_zip(
                collections.OrderedDict(
                    mean_value=value_output.measurements, mean_count=count_output.measurements
                )
            )
            return MeasuredProcessOutput(new_state, mean_value, measurements)

        return AggregationProcess(init_fn, next_fn)
