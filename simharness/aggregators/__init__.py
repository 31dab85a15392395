"""`simharness.aggregators`: TFF's aggregation factories (``tff.aggregators``).

A factory's ``create(value_type[, weight_type])`` returns a
`simharness.templates.AggregationProcess` whose ``initialize`` and ``next``
are federated computations with TFF's state and measurement structures.
See docs/tff/aggregators.md for what is supported and how it differs.
"""

from simharness.aggregators.concat import concat_factory
from simharness.aggregators.deterministic_discretization import DeterministicDiscretizationFactory
from simharness.aggregators.differential_privacy import DifferentiallyPrivateFactory
from simharness.aggregators.distributed_dp import DistributedDpSumFactory
from simharness.aggregators.encoded import EncodedSumFactory
from simharness.aggregators.factory import (
    AggregationFactory,
    UnweightedAggregationFactory,
    WeightedAggregationFactory,
)
from simharness.aggregators.factory_utils import as_weighted_aggregator
from simharness.aggregators.mean import MeanFactory, UnweightedMeanFactory
from simharness.aggregators.measurements import add_measurements
from simharness.aggregators.modular_clipping import ModularClippingSumFactory
from simharness.aggregators.primitives import (
    federated_max,
    federated_min,
    federated_sample,
    secure_quantized_sum,
)
from simharness.aggregators.quantile_estimation import PrivateQuantileEstimationProcess
from simharness.aggregators.robust import clipping_factory, zeroing_factory
from simharness.aggregators.rotation import (
    DiscreteFourierTransformFactory,
    HadamardTransformFactory,
)
from simharness.aggregators.sampling import UnweightedReservoirSamplingFactory
from simharness.aggregators.secure import SecureModularSumFactory, SecureSumFactory
from simharness.aggregators.stochastic_discretization import StochasticDiscretizationFactory
from simharness.aggregators.sum_factory import SumFactory

__all__ = [
    'AggregationFactory',
    'DeterministicDiscretizationFactory',
    'DifferentiallyPrivateFactory',
    'DiscreteFourierTransformFactory',
    'DistributedDpSumFactory',
    'EncodedSumFactory',
    'HadamardTransformFactory',
    'MeanFactory',
    'ModularClippingSumFactory',
    'PrivateQuantileEstimationProcess',
    'SecureModularSumFactory',
    'SecureSumFactory',
    'StochasticDiscretizationFactory',
    'SumFactory',
    'UnweightedAggregationFactory',
    'UnweightedMeanFactory',
    'UnweightedReservoirSamplingFactory',
    'WeightedAggregationFactory',
    'add_measurements',
    'as_weighted_aggregator',
    'clipping_factory',
    'concat_factory',
    'federated_max',
    'federated_min',
    'federated_sample',
    'secure_quantized_sum',
    'zeroing_factory',
]
