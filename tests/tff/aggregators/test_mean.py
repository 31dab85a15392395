"""Port of TFF's ``tensorflow_federated/python/aggregators/mean_test.py``. No case left out.

The type-property cases run on a representative subset of TFF's weight dtypes
(float32, float64, int32, int64 for the scalar value; float32 for the struct)
to keep the suite fast; they check the same signatures.
"""

import collections
import math

import numpy as np
import pytest

import simharness as tff
from simharness.aggregators import factory, mean
from simharness.templates import AggregationProcess, MeasuredProcessOutput
from tests.tff.aggregators.aggregator_test_utils import (
    MEASUREMENT_CONSTANT as M_CONST,
    SumPlusOneFactory,
    assert_all_close,
)

_test_struct_type = ((np.float32, (2,)), np.float64)
_WEIGHT_CASES = [
    (np.float32, np.float32),
    (_test_struct_type, np.float32),
    (np.float32, np.float64),
    (np.float32, np.int32),
    (np.float32, np.int64),
    (_test_struct_type, np.int64),
]


def _next_type(state, value_type, measurements, weight_type=None):
    param = collections.OrderedDict(state=state, value=tff.FederatedType(value_type, tff.CLIENTS))
    if weight_type is not None:
        param['weight'] = tff.FederatedType(weight_type, tff.CLIENTS)
    return tff.FunctionType(
        param, MeasuredProcessOutput(state, tff.FederatedType(value_type, tff.SERVER), measurements)
    )


@pytest.mark.parametrize('value_type, weight_type', _WEIGHT_CASES)
@pytest.mark.parametrize('inner', [False, True], ids=['plain', 'inner_factory'])
def test_type_properties(value_type, weight_type, inner):
    value_type, weight_type = tff.to_type(value_type), tff.to_type(weight_type)
    f = mean.MeanFactory(SumPlusOneFactory(), SumPlusOneFactory()) if inner else mean.MeanFactory()
    assert isinstance(f, factory.WeightedAggregationFactory)
    process = f.create(value_type, weight_type)
    assert isinstance(process, AggregationProcess)
    inner_state = np.int32 if inner else ()
    inner_meas = np.int32 if inner else ()
    state = tff.FederatedType(
        collections.OrderedDict(value_sum_process=inner_state, weight_sum_process=inner_state),
        tff.SERVER,
    )
    meas = tff.FederatedType(
        collections.OrderedDict(mean_value=inner_meas, mean_weight=inner_meas), tff.SERVER
    )
    assert process.initialize.type_signature.is_equivalent_to(tff.FunctionType(None, state))
    assert process.next.type_signature.is_equivalent_to(
        _next_type(state, value_type, meas, weight_type)
    )


@pytest.mark.parametrize('value_type', [np.float32, _test_struct_type], ids=['float', 'struct'])
@pytest.mark.parametrize('inner', [False, True], ids=['plain', 'inner_factory'])
def test_type_properties_unweighted(value_type, inner):
    value_type = tff.to_type(value_type)
    f = (
        mean.UnweightedMeanFactory(SumPlusOneFactory(), SumPlusOneFactory())
        if inner
        else mean.UnweightedMeanFactory()
    )
    assert isinstance(f, factory.UnweightedAggregationFactory)
    process = f.create(value_type)
    inner_t = np.int32 if inner else ()
    state = tff.FederatedType((inner_t, inner_t), tff.SERVER)
    meas = tff.FederatedType(
        collections.OrderedDict(mean_value=inner_t, mean_count=inner_t), tff.SERVER
    )
    assert process.initialize.type_signature.is_equivalent_to(tff.FunctionType(None, state))
    assert process.next.type_signature.is_equivalent_to(_next_type(state, value_type, meas))


@pytest.mark.parametrize(
    'wrong_type',
    [
        tff.FederatedType(np.float32, tff.SERVER),
        tff.FunctionType(None, ()),
        tff.SequenceType(np.float32),
    ],
    ids=['federated_type', 'function_type', 'sequence_type'],
)
def test_incorrect_create_type_raises(wrong_type):
    correct = tff.TensorType(np.float32)
    with pytest.raises(TypeError):
        mean.MeanFactory().create(wrong_type, correct)
    with pytest.raises(TypeError):
        mean.MeanFactory().create(correct, wrong_type)
    with pytest.raises(TypeError):
        mean.UnweightedMeanFactory().create(wrong_type)


def test_integer_value_raises():
    with pytest.raises(TypeError, match='floating'):
        mean.MeanFactory().create(tff.TensorType(np.int32), tff.TensorType(np.float32))


F32 = tff.TensorType(np.float32)
EMPTY_STATE = collections.OrderedDict(value_sum_process=(), weight_sum_process=())
EMPTY_MEAS = collections.OrderedDict(mean_value=(), mean_weight=())


def test_scalar_value(tff_stack):
    process = mean.MeanFactory().create(F32, F32)
    state = process.initialize()
    assert state == EMPTY_STATE
    output = process.next(state, [1.0, 2.0, 3.0], [3.0, 2.0, 1.0])
    assert_all_close(output.result, 10.0 / 6.0)
    assert output.state == EMPTY_STATE
    assert output.measurements == EMPTY_MEAS


def test_scalar_value_unweighted(tff_stack):
    process = mean.UnweightedMeanFactory().create(F32)
    state = process.initialize()
    assert state == ((), ())
    output = process.next(state, [1.0, 2.0, 3.0])
    assert_all_close(output.result, 2.0)
    assert output.state == ((), ())
    assert output.measurements == collections.OrderedDict(mean_value=(), mean_count=())


def test_structure_value(tff_stack):
    process = mean.MeanFactory().create(tff.to_type(_test_struct_type), F32)
    state = process.initialize()
    client_data = [((1.0, 2.0), 3.0), ((2.0, 5.0), 4.0), ((3.0, 0.0), 5.0)]
    output = process.next(state, client_data, [3.0, 2.0, 1.0])
    assert output.state == EMPTY_STATE
    assert_all_close(output.result, ((10.0 / 6.0, 16.0 / 6.0), 22.0 / 6.0))
    assert output.measurements == EMPTY_MEAS


def test_structure_value_unweighted(tff_stack):
    process = mean.UnweightedMeanFactory().create(tff.to_type(_test_struct_type))
    client_data = [((1.0, 2.0), 3.0), ((2.0, 5.0), 4.0), ((3.0, 0.0), 5.0)]
    output = process.next(process.initialize(), client_data)
    assert_all_close(output.result, ((2.0, 7 / 3), 4.0))


def test_weight_arg(tff_stack):
    process = mean.MeanFactory().create(F32, F32)
    state = process.initialize()
    data = [1.0, 2.0, 3.0]
    assert process.next(state, data, [1.0, 1.0, 1.0]).result == 2.0
    assert process.next(state, data, [0.1, 0.1, 0.1]).result == 2.0
    assert process.next(state, data, [6.0, 3.0, 1.0]).result == 1.5


def test_weight_arg_all_zeros_nan_division(tff_stack):
    process = mean.MeanFactory(no_nan_division=False).create(F32, F32)
    result = process.next(process.initialize(), [1.0, 2.0, 3.0], [0.0, 0.0, 0.0]).result
    assert not math.isfinite(result)


def test_weight_arg_all_zeros_no_nan_division(tff_stack):
    process = mean.MeanFactory(no_nan_division=True).create(F32, F32)
    assert process.next(process.initialize(), [1.0, 2.0, 3.0], [0.0, 0.0, 0.0]).result == 0.0


@pytest.mark.parametrize(
    'value_inner, weight_inner, expected',
    [(True, False, 11 / 6), (False, True, 10 / 7), (True, True, 11 / 7)],
)
def test_inner_sum_factories(tff_stack, value_inner, weight_inner, expected):
    f = mean.MeanFactory(
        value_sum_factory=SumPlusOneFactory() if value_inner else None,
        weight_sum_factory=SumPlusOneFactory() if weight_inner else None,
    )
    process = f.create(F32, F32)
    state = process.initialize()
    v0, w0 = (0 if value_inner else ()), (0 if weight_inner else ())
    assert state == collections.OrderedDict(value_sum_process=v0, weight_sum_process=w0)
    output = process.next(state, [1.0, 2.0, 3.0], [3.0, 2.0, 1.0])
    assert output.state == collections.OrderedDict(
        value_sum_process=1 if value_inner else (), weight_sum_process=1 if weight_inner else ()
    )
    assert_all_close(output.result, expected)
    assert output.measurements == collections.OrderedDict(
        mean_value=M_CONST if value_inner else (), mean_weight=M_CONST if weight_inner else ()
    )


def test_inner_value_sum_factory_unweighted(tff_stack):
    s = SumPlusOneFactory()
    process = mean.UnweightedMeanFactory(value_sum_factory=s, count_sum_factory=s).create(F32)
    state = process.initialize()
    assert state == (0, 0)
    output = process.next(state, [1.0, 2.0, 3.0])
    assert output.state == (1, 1)
    assert_all_close(output.result, 7 / 4)
    assert output.measurements == collections.OrderedDict(mean_value=M_CONST, mean_count=M_CONST)


def test_bad_constructor_args_raise():
    with pytest.raises(TypeError):
        mean.MeanFactory(value_sum_factory='not a factory')
    with pytest.raises(TypeError):
        mean.MeanFactory(no_nan_division=1)
    with pytest.raises(TypeError):
        mean.UnweightedMeanFactory(count_sum_factory=mean.MeanFactory())
