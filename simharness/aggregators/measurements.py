"""TFF's `add_measurements` (``aggregators/measurements.py``).

Wraps a factory so that its processes add measurements of the client values
(``client_measurement_fn(value[, weight])``) and of the server result
(``server_measurement_fn(result)``) to the inner measurements dict.
"""

from __future__ import annotations

import collections
import inspect
from typing import Any, Callable, Dict, Optional

from simharness.aggregators import factory
from simharness.core import intrinsics
from simharness.core import types as T
from simharness.core.computation import federated_computation, tf_computation
from simharness.errors import SimharnessValueError
from simharness.templates import AggregationProcess, MeasuredProcessOutput

__all__ = ['add_measurements']


def _num_params(fn: Callable[..., Any]) -> int:
    return len(inspect.signature(fn).parameters)


def _dict_update(orig_dict: Any, new_values: Any) -> Any:
    if not orig_dict:
        return new_values
    merged = collections.OrderedDict(orig_dict)
    merged.update(new_values)
    return merged


def add_measurements(
    inner_agg_factory: factory.AggregationFactory,
    *,
    client_measurement_fn: Optional[Callable[..., Dict[str, Any]]] = None,
    server_measurement_fn: Optional[Callable[..., Dict[str, Any]]] = None,
) -> factory.AggregationFactory:
    """Wraps `inner_agg_factory` to report more measurements.

    Args:
      inner_agg_factory: the factory to wrap (weighted or unweighted).
      client_measurement_fn: called (while tracing) with the client `value`
        (and `weight` for a weighted factory); returns an OrderedDict of
        name -> value placed at SERVER.
      server_measurement_fn: called with the server `result`; returns an
        OrderedDict of name -> value placed at SERVER.

    Returns:
      A factory of the same weightedness as `inner_agg_factory`.

    Raises:
      TypeError: `inner_agg_factory` is not a factory.
      ValueError: neither function is given, or one takes the wrong number
        of parameters.
    """
    factory.check_factory(
        inner_agg_factory,
        (factory.UnweightedAggregationFactory, factory.WeightedAggregationFactory),
        'inner_agg_factory',
    )
    if client_measurement_fn is None and server_measurement_fn is None:
        raise SimharnessValueError(
            'Must specify one or both of `client_measurement_fn` or `server_measurement_fn`.'
        )
    weighted = isinstance(inner_agg_factory, factory.WeightedAggregationFactory)
    if client_measurement_fn is not None:
        if not weighted and _num_params(client_measurement_fn) != 1:
            raise SimharnessValueError(
                '`client_measurement_fn` must take a single parameter '
                'if `inner_agg_factory` is unweighted.'
            )
        if weighted and _num_params(client_measurement_fn) != 2:
            raise SimharnessValueError(
                '`client_measurement_fn` must take a two parameters if '
                '`inner_agg_factory` is weighted.'
            )
    if server_measurement_fn is not None and _num_params(server_measurement_fn) != 1:
        raise SimharnessValueError('`server_measurement_fn` must take a single parameter.')

    dict_update = tf_computation()(_dict_update)

    def add(measurements: Any, value: Any, weight: Any, result: Any) -> Any:
        if client_measurement_fn:
            extra = (
                client_measurement_fn(value, weight) if weighted else client_measurement_fn(value)
            )
            measurements = intrinsics.federated_map(dict_update, (measurements, extra))
        if server_measurement_fn:
            measurements = intrinsics.federated_map(
                dict_update, (measurements, server_measurement_fn(result))
            )
        return measurements

    if isinstance(inner_agg_factory, factory.WeightedAggregationFactory):
        return _WeightedWrapped(inner_agg_factory, add)
    return _UnweightedWrapped(inner_agg_factory, add)


class _WeightedWrapped(factory.WeightedAggregationFactory):
    """A weighted factory whose processes add measurements."""

    def __init__(self, inner: factory.WeightedAggregationFactory, add: Callable[..., Any]):
        self._inner, self._add = inner, add

    def create(
        self, value_type: factory.ValueType, weight_type: factory.ValueType
    ) -> AggregationProcess:
        factory.check_value_type(value_type)
        factory.check_value_type(weight_type, 'weight_type')
        inner = self._inner.create(value_type, weight_type)
        add = self._add

        @federated_computation(
            inner.initialize.type_signature.result,
            T.FederatedType(value_type, T.CLIENTS),
            T.FederatedType(weight_type, T.CLIENTS),
        )
        def next_fn(state, value, weight):
            out = inner.next(state, value, weight)
            return MeasuredProcessOutput(
                state=out.state,
                result=out.result,
                measurements=add(out.measurements, value, weight, out.result),
            )

        return AggregationProcess(inner.initialize, next_fn)


class _UnweightedWrapped(factory.UnweightedAggregationFactory):
    """An unweighted factory whose processes add measurements."""

    def __init__(self, inner: factory.UnweightedAggregationFactory, add: Callable[..., Any]):
        self._inner, self._add = inner, add

    def create(self, value_type: factory.ValueType) -> AggregationProcess:
        factory.check_value_type(value_type)
        inner = self._inner.create(value_type)
        add = self._add

        @federated_computation(
            inner.initialize.type_signature.result, T.FederatedType(value_type, T.CLIENTS)
        )
        def next_fn(state, value):
            out = inner.next(state, value)
            return MeasuredProcessOutput(
                state=out.state,
                result=out.result,
                measurements=add(out.measurements, value, None, out.result),
            )

        return AggregationProcess(inner.initialize, next_fn)
