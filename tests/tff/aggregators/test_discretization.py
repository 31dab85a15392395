"""Ports of TFF's ``stochastic_discretization_test.py`` and ``deterministic_discretization_test.py``
(``tensorflow_federated/python/aggregators/``).

Condensed: the execution cases (scalar, rank 1, rank 2, nested mixed
float16/float32, zero-size tensor) run for both factories, one round (TFF: three;
the state does not change). The
rounding helpers are checked through the processes. Left out: TFF's
``test_diff_random_seeds_diff_result`` (ours seeds the rounding with the
value's fingerprint: the same value rounds the same way, by design, see
docs/tff/aggregators.md), replaced by a test of that property.
"""

import collections

import numpy as np
import pytest
import tensorflow as tf

import simharness as tff
from simharness.aggregators import (
    deterministic_discretization,
    mean,
    measurements,
    stochastic_discretization,
    sum_factory,
)
from simharness.templates import MeasuredProcessOutput
from tests.tff.aggregators.aggregator_test_utils import assert_all_close

SDF = stochastic_discretization.StochasticDiscretizationFactory
DDF = deterministic_discretization.DeterministicDiscretizationFactory
_NAMES = {SDF: 'stochastic_discretization', DDF: 'deterministic_discretization'}
_nested_type = collections.OrderedDict(
    a=[np.float16, [(np.float32, (2, 2, 1))]], b=(np.float16, (3, 3))
)


def _nested(v):
    return collections.OrderedDict(
        a=[np.array(v, np.float16), [np.full([2, 2, 1], v, np.float32)]],
        b=np.full([3, 3], v, np.float16),
    )


def _measurement_aggregator():
    return measurements.add_measurements(
        sum_factory.SumFactory(), client_measurement_fn=tff.federated_sum
    )


@pytest.mark.parametrize('cls', [SDF, DDF])
def test_type_properties(cls):
    value_type = tff.to_type([np.float32, (np.float32, (3,))])
    process = cls(sum_factory.SumFactory(), 0.1).create(value_type)
    state = tff.FederatedType(
        collections.OrderedDict(step_size=np.float32, inner_agg_process=()), tff.SERVER
    )
    assert process.initialize.type_signature.is_equivalent_to(tff.FunctionType(None, state))
    meas = tff.FederatedType(collections.OrderedDict([(_NAMES[cls], ())]), tff.SERVER)
    assert process.next.type_signature.is_equivalent_to(
        tff.FunctionType(
            collections.OrderedDict(state=state, value=tff.FederatedType(value_type, tff.CLIENTS)),
            MeasuredProcessOutput(state, tff.FederatedType(value_type, tff.SERVER), meas),
        )
    )


@pytest.mark.parametrize('cls', [SDF, DDF])
def test_raises_on_bad_types(cls):
    for bad in (
        tff.TensorType(np.int32),
        tff.to_type([np.float32, np.int32]),
        tff.StructType([('a', np.float32)]),
        tff.SequenceType(np.float32),
    ):
        with pytest.raises(TypeError):
            cls(sum_factory.SumFactory(), 0.1).create(bad)
    with pytest.raises(TypeError):
        cls(sum_factory.SumFactory(), 0.1, distortion_aggregation_factory=mean.MeanFactory())


_CASES = [
    (np.float32, [1.0, 2.0, 3.0], 6.0),
    (
        (np.float32, [7]),
        [np.arange(7.0, dtype=np.float32), np.arange(7.0, dtype=np.float32) * 2],
        np.arange(7.0, dtype=np.float32) * 3,
    ),
    ((np.float32, [1, 2]), [((1.0, 1.0),), ((2.0, 2.0),)], ((3.0, 3.0),)),
    (_nested_type, [_nested(123.0), _nested(456.0)], _nested(579.0)),
    (
        [(np.float32, (0,)), (np.float32, (2,))],
        [[[], [1.0, 2.0]], [[], [3.0, 4.0]]],
        [[], [4.0, 6.0]],
    ),
]


@pytest.mark.parametrize('cls', [SDF, DDF])
def test_discretize_impl(tff_stack, cls):
    for value_type, client_values, expected_sum in _CASES:
        process = cls(
            _measurement_aggregator(),
            step_size=0.125,
            distortion_aggregation_factory=mean.UnweightedMeanFactory(),
        ).create(tff.to_type(value_type))
        output = process.next(process.initialize(), client_values)
        m = output.measurements
        assert_all_close(
            m[_NAMES[cls]], tf.nest.map_structure(lambda x: np.asarray(x) * 8, expected_sum)
        )
        assert m['distortion'] == 0.0
        assert_all_close(output.result, expected_sum)


@pytest.mark.parametrize('cls', [SDF, DDF])
@pytest.mark.parametrize('step_size', [2**-10, 0.1, 1.0, 2.0**5])
def test_error_from_rounding(cls, step_size):
    x = np.random.RandomState(0).uniform(-10, 10, size=[10, 5]).astype(np.float32)
    process = cls(
        sum_factory.SumFactory(),
        step_size,
        distortion_aggregation_factory=mean.UnweightedMeanFactory(),
    ).create(tff.TensorType(np.float32, [10, 5]))
    output = process.next(process.initialize(), [x])
    assert np.max(np.abs(output.result - x)) <= step_size * (1 + 1e-5)
    assert output.measurements['distortion'] <= step_size**2


def test_stochastic_rounding_is_unbiased_and_a_function_of_the_value(tff_stack):
    x = np.full([4000], 0.3, np.float32)
    process = SDF(sum_factory.SumFactory(), 1.0).create(tff.TensorType(np.float32, [4000]))
    first = process.next(process.initialize(), [x]).result
    assert set(np.unique(first)) == {0.0, 1.0}
    assert abs(np.mean(first) - 0.3) < 0.05
    again = process.next(process.initialize(), [x]).result
    np.testing.assert_array_equal(first, again)
