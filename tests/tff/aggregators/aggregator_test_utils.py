"""Our equivalent of TFF's ``aggregators/aggregator_test_utils.py``: `SumPlusOneFactory`."""

from __future__ import annotations


import numpy as np

import simharness as tff
from simharness.aggregators import tensor_utils

MEASUREMENT_CONSTANT = 42


class SumPlusOneFactory(tff.aggregators.UnweightedAggregationFactory):
    """Sums the client values and adds 1 to each leaf; state counts calls (0, 1, ...); 42 as measurements."""

    def create(self, value_type):
        tff.aggregators.factory.check_value_type(value_type)

        @tff.federated_computation()
        def init_fn():
            return tff.federated_value(0, tff.SERVER)

        @tff.federated_computation(
            init_fn.type_signature.result, tff.FederatedType(value_type, tff.CLIENTS)
        )
        def next_fn(state, value):
            state = tff.federated_map(tff.tf_computation(lambda x: x + 1), state)
            result = tff.federated_map(
                tff.tf_computation(lambda x: tensor_utils.map_structure(lambda y: y + 1, x)),
                tff.federated_sum(value),
            )
            measurements = tff.federated_value(MEASUREMENT_CONSTANT, tff.SERVER)
            return tff.templates.MeasuredProcessOutput(state, result, measurements)

        return tff.templates.AggregationProcess(init_fn, next_fn)


def assert_all_close(actual, expected, rtol=1e-6, atol=1e-6):
    """Nested (tuples, lists, dicts) `np.testing.assert_allclose`."""
    if isinstance(expected, dict):
        assert list(actual.keys()) == list(expected.keys()), (actual, expected)
        for k in expected:
            assert_all_close(actual[k], expected[k], rtol, atol)
    elif isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected), (actual, expected)
        for a, e in zip(actual, expected):
            assert_all_close(a, e, rtol, atol)
    else:
        np.testing.assert_allclose(
            np.asarray(actual, dtype=np.float64),
            np.asarray(expected, dtype=np.float64),
            rtol=rtol,
            atol=atol,
        )
