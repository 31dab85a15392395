"""TFF's `as_weighted_aggregator` (``aggregators/factory_utils.py``)."""

from __future__ import annotations

from simharness.aggregators import factory
from simharness.core import types as T
from simharness.core.computation import federated_computation
from simharness.templates import AggregationProcess

__all__ = ['as_weighted_aggregator']


def as_weighted_aggregator(
    unweighted_aggregator: factory.UnweightedAggregationFactory,
) -> factory.WeightedAggregationFactory:
    """A weighted factory that aggregates as `unweighted_aggregator`, ignoring the weights.

    Raises:
      TypeError: `unweighted_aggregator` is not an `UnweightedAggregationFactory`.
    """
    return _UnweightedAsWeightedFactory(unweighted_aggregator)


class _UnweightedAsWeightedFactory(factory.WeightedAggregationFactory):
    """An unweighted factory's processes, with a weight argument they ignore."""

    def __init__(self, unweighted_factory: factory.UnweightedAggregationFactory):
        factory.check_factory(
            unweighted_factory, factory.UnweightedAggregationFactory, 'unweighted_aggregator'
        )
        self._factory = unweighted_factory

    def create(
        self, value_type: factory.ValueType, weight_type: factory.ValueType
    ) -> AggregationProcess:
        aggregator = self._factory.create(value_type)

        @federated_computation(
            aggregator.state_type,
            T.FederatedType(value_type, T.CLIENTS),
            T.FederatedType(weight_type, T.CLIENTS),
        )
        def next_fn(state, value, weight):
            del weight  # unused: the aggregation is unweighted
            return aggregator.next(state, value)

        return AggregationProcess(aggregator.initialize, next_fn)
