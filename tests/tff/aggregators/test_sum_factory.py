"""Port of TFF's ``tensorflow_federated/python/aggregators/sum_factory_test.py``. No case left out."""

import collections

import numpy as np
import pytest

import simharness as tff
from simharness.aggregators import factory, sum_factory
from simharness.templates import AggregationProcess, MeasuredProcessOutput
from tests.tff.aggregators.aggregator_test_utils import assert_all_close


@pytest.mark.parametrize(
    'value_type', [np.float32, ((np.float32, (2,)), np.int32)], ids=['float', 'struct']
)
def test_type_properties(value_type):
    sum_f = sum_factory.SumFactory()
    assert isinstance(sum_f, factory.UnweightedAggregationFactory)
    value_type = tff.to_type(value_type)
    process = sum_f.create(value_type)
    assert isinstance(process, AggregationProcess)
    empty_at_server = tff.FederatedType((), tff.SERVER)
    assert process.initialize.type_signature.is_equivalent_to(
        tff.FunctionType(None, empty_at_server)
    )
    expected_next = tff.FunctionType(
        collections.OrderedDict(
            state=empty_at_server, value=tff.FederatedType(value_type, tff.CLIENTS)
        ),
        MeasuredProcessOutput(
            empty_at_server, tff.FederatedType(value_type, tff.SERVER), empty_at_server
        ),
    )
    assert process.next.type_signature.is_equivalent_to(expected_next)


@pytest.mark.parametrize(
    'bad_value_type',
    [
        tff.FederatedType(np.float32, tff.SERVER),
        tff.FunctionType(None, ()),
        tff.SequenceType(np.float32),
    ],
    ids=['federated_type', 'function_type', 'sequence_type'],
)
def test_incorrect_value_type_raises(bad_value_type):
    with pytest.raises(TypeError):
        sum_factory.SumFactory().create(bad_value_type)


def test_sum_scalar(tff_stack):
    process = sum_factory.SumFactory().create(tff.to_type(np.float32))
    state = process.initialize()
    assert state == ()
    output = process.next(state, [1.0, 2.0, 3.0])
    assert output.state == ()
    assert_all_close(output.result, 6.0)
    assert output.measurements == ()


def test_sum_structure(tff_stack):
    process = sum_factory.SumFactory().create(tff.to_type(((np.float32, (2,)), np.int32)))
    state = process.initialize()
    assert state == ()
    client_data = [((1.0, 2.0), 3), ((2.0, 5.0), 4), ((3.0, 0.0), 5)]
    output = process.next(state, client_data)
    assert output.state == ()
    assert_all_close(output.result, ((6.0, 7.0), 12))
    assert output.measurements == ()
