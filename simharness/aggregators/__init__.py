"""`simharness.aggregators`: TFF's aggregation factories (``tff.aggregators``).

A factory's ``create(value_type[, weight_type])`` returns a
`simharness.templates.AggregationProcess` whose ``initialize`` and ``next``
are federated computations with TFF's state and measurement structures.
See docs/tff/aggregators.md for what is supported and how it differs.
"""

from simharness.aggregators.factory import (AggregationFactory, UnweightedAggregationFactory,
                                            WeightedAggregationFactory)
from simharness.aggregators.factory_utils import as_weighted_aggregator
from simharness.aggregators.mean import MeanFactory, UnweightedMeanFactory
from simharness.aggregators.measurements import add_measurements
from simharness.aggregators.sum_factory import SumFactory

__all__ = [
    'AggregationFactory', 'MeanFactory', 'SumFactory', 'UnweightedAggregationFactory',
    'UnweightedMeanFactory', 'WeightedAggregationFactory', 'add_measurements',
    'as_weighted_aggregator',
]
