"""Port of TFF's ``tensorflow_federated/python/aggregators/factory_utils_test.py``. No case left out."""

import numpy as np
import pytest

import simharness as tff
from simharness.aggregators import factory, factory_utils, mean, sum_factory

_TEST_VALUE_TYPE = tff.TensorType(np.float32, (2,))
_TEST_WEIGHT_TYPE = tff.TensorType(np.float32)
_DATA = [(1.0, 2.0), (3.0, 4.0), (0.0, 5.0)]


def test_returns_weighted_factory():
    wrapped = factory_utils.as_weighted_aggregator(sum_factory.SumFactory())
    assert isinstance(wrapped, factory.WeightedAggregationFactory)


def test_wrapped_aggregator_same_as_unweighted_aggregator(tff_stack):
    unweighted_factory = sum_factory.SumFactory()
    unweighted = unweighted_factory.create(_TEST_VALUE_TYPE)
    weighted = factory_utils.as_weighted_aggregator(unweighted_factory).create(
        _TEST_VALUE_TYPE, _TEST_WEIGHT_TYPE
    )
    u = unweighted.next(unweighted.initialize(), _DATA)
    w = weighted.next(weighted.initialize(), _DATA, [1.0, 1.0, 1.0])
    assert u.state == w.state and u.measurements == w.measurements
    np.testing.assert_array_equal(u.result, w.result)


def test_wrapped_aggregator_independent_of_weights(tff_stack):
    aggregator = factory_utils.as_weighted_aggregator(sum_factory.SumFactory()).create(
        _TEST_VALUE_TYPE, _TEST_WEIGHT_TYPE
    )
    state = aggregator.initialize()
    uniform = aggregator.next(state, _DATA, [1.0, 1.0, 1.0])
    for weights in [[0.5, 1.0, 0.5], [2.0, 0.0, 0.0], [10.0, 0.1, 21.0]]:
        out = aggregator.next(state, _DATA, weights)
        assert (out.state, out.measurements) == (uniform.state, uniform.measurements)
        np.testing.assert_array_equal(out.result, uniform.result)


def test_as_weighted_raises():
    with pytest.raises(TypeError):
        factory_utils.as_weighted_aggregator(mean.MeanFactory())
