"""Port of TFF's ``tensorflow_federated/python/aggregators/secure_test.py``.

The execution cases are TFF's, with TFF's expected values; the modular-sum
cases of one modulus run in one test (one process per modulus). Type
properties are condensed to a representative subset. Left out:
``IsStructureOfSingleDtypeTest`` (a private helper; the same rule is checked
through ``create``), and the float64 2**66 case (our float32 case covers the
same quantization path).
"""

import collections

import numpy as np
import pytest

import simharness as tff
from simharness.aggregators import factory, secure
from simharness.templates import EstimationProcess, MeasuredProcessOutput
from tests.tff.aggregators.aggregator_test_utils import assert_all_close

_float_at_server = tff.FederatedType(np.float32, tff.SERVER)
_float_at_clients = tff.FederatedType(np.float32, tff.CLIENTS)


def _test_struct_type(dtype):
    return (dtype, (2,)), dtype


def _test_estimation_process(factor):
    init_fn = tff.federated_computation(lambda: tff.federated_value(factor * 1.0, tff.SERVER))
    shift = tff.tf_computation(lambda x: x + factor * 1.0, np.float32)
    next_fn = tff.federated_computation(
        lambda state, value: tff.federated_map(shift, state), _float_at_server, _float_at_clients
    )
    report_fn = tff.federated_computation(lambda state: state, _float_at_server)
    return EstimationProcess(init_fn, next_fn, report_fn)


def _measurements_type(bound_type):
    return tff.FederatedType(
        collections.OrderedDict(
            secure_upper_clipped_count=secure.COUNT_TYPE,
            secure_lower_clipped_count=secure.COUNT_TYPE,
            secure_upper_threshold=bound_type,
            secure_lower_threshold=bound_type,
        ),
        tff.SERVER,
    )


@pytest.mark.parametrize(
    'modulus, value_type, symmetric',
    [
        (8, np.int32, False),
        (8, np.int64, False),
        (8, _test_struct_type(np.int32), False),
        (8, np.int32, True),
        (8, _test_struct_type(np.int32), True),
        (np.int32(8), np.int32, True),
    ],
)
def test_modular_type_properties(modulus, value_type, symmetric):
    f = secure.SecureModularSumFactory(modulus=modulus, symmetric_range=symmetric)
    assert isinstance(f, factory.UnweightedAggregationFactory)
    value_type = tff.to_type(value_type)
    process = f.create(value_type)
    empty = tff.FederatedType((), tff.SERVER)
    assert process.initialize.type_signature.is_equivalent_to(tff.FunctionType(None, empty))
    assert process.next.type_signature.is_equivalent_to(
        tff.FunctionType(
            collections.OrderedDict(state=empty, value=tff.FederatedType(value_type, tff.CLIENTS)),
            MeasuredProcessOutput(empty, tff.FederatedType(value_type, tff.SERVER), empty),
        )
    )


def test_modular_bad_arguments_raise():
    for bad in (8.0, np.float32(8.0)):
        with pytest.raises(TypeError):
            secure.SecureModularSumFactory(modulus=bad)
    for bad in (0, -1):
        with pytest.raises(ValueError):
            secure.SecureModularSumFactory(modulus=bad)
    with pytest.raises(TypeError):
        secure.SecureModularSumFactory(modulus=8, symmetric_range='True')
    for bad_type in (
        tff.TensorType(np.float32),
        tff.FederatedType(np.int32, tff.SERVER),
        tff.SequenceType(np.int32),
    ):
        with pytest.raises(TypeError):
            secure.SecureModularSumFactory(8).create(bad_type)


_NON_SYMMETRIC = {
    2: [([0, 1], 1), ([0, 1, 1], 0), ([0, 1, 1, 1], 1)],
    8: [([1, 2, 3], 6), ([1, 2, 3, 4], 2)],
    22: [([22], 0), ([220], 0), ([-1, 7], 6)],
}
_SYMMETRIC = {
    2: [
        ([0, 1], 1),
        ([0, 1, 1], -1),
        ([0, 1, 1, 1], 0),
        ([0, -1], -1),
        ([0, -1, -1], 1),
        ([0, -1, -1, -1], 0),
    ],
    8: [([1, 2, 3], 6), ([1, 2, 3, 4], -5), ([-1, -2, -3, -4], 5)],
    22: [([22], -21), ([-22], 21), ([43 * 5], 0), ([112, 123], 20)],
}


@pytest.mark.parametrize('symmetric', [False, True], ids=['non_symmetric', 'symmetric'])
@pytest.mark.parametrize('modulus', [2, 8, 22])
def test_modular_sum(tff_stack, symmetric, modulus):
    process = secure.SecureModularSumFactory(modulus, symmetric_range=symmetric).create(
        tff.TensorType(np.int32)
    )
    state = process.initialize()
    for client_data, expected in (_SYMMETRIC if symmetric else _NON_SYMMETRIC)[modulus]:
        assert process.next(state, client_data).result == expected, client_data


def test_modular_struct_type(tff_stack):
    process = secure.SecureModularSumFactory(8).create(tff.to_type(_test_struct_type(np.int32)))
    client_data = [
        (np.array([1, 2], np.int32), np.array(3, np.int32)),
        (np.array([4, 5], np.int32), np.array(6, np.int32)),
    ]
    output = process.next(process.initialize(), client_data)
    np.testing.assert_array_equal(output.result[0], [5, 7])
    assert output.result[1] == 1


@pytest.mark.parametrize(
    'value_type, upper, lower, bound_type',
    [
        (np.int32, 1, -1, np.int32),
        (np.float32, 1.0, -1.0, np.float32),
        (np.float32, np.float32(1.0), np.float32(-1.0), np.float32),
        (_test_struct_type(np.float32), 1.0, None, np.float32),
        (_test_struct_type(np.int32), 1, None, np.int32),
    ],
)
def test_type_properties_constant_bounds(value_type, upper, lower, bound_type):
    process = secure.SecureSumFactory(upper, lower).create(tff.to_type(value_type))
    empty = tff.FederatedType((), tff.SERVER)
    value_type = tff.to_type(value_type)
    assert process.next.type_signature.is_equivalent_to(
        tff.FunctionType(
            collections.OrderedDict(state=empty, value=tff.FederatedType(value_type, tff.CLIENTS)),
            MeasuredProcessOutput(
                empty, tff.FederatedType(value_type, tff.SERVER), _measurements_type(bound_type)
            ),
        )
    )


def test_type_properties_process_bounds():
    process = secure.SecureSumFactory(_test_estimation_process(1)).create(
        tff.TensorType(np.float32)
    )
    assert process.state_type == _float_at_server
    process = secure.SecureSumFactory(
        _test_estimation_process(1), _test_estimation_process(-1)
    ).create(tff.TensorType(np.float32))
    assert process.state_type == tff.FederatedType((np.float32, np.float32), tff.SERVER)


def test_secure_sum_bad_arguments_raise():
    with pytest.raises(TypeError):
        secure.SecureSumFactory('1')
    with pytest.raises(TypeError):
        secure.SecureSumFactory(1, 1.0)
    with pytest.raises(ValueError):
        secure.SecureSumFactory(-1)
    with pytest.raises(ValueError):
        secure.SecureSumFactory(1.0, 2.0)
    with pytest.raises(TypeError):
        secure.SecureSumFactory(1).create(tff.TensorType(np.float32))
    with pytest.raises(TypeError):
        secure.SecureSumFactory(1.0).create(tff.TensorType(np.int32))
    with pytest.raises(TypeError):
        secure.SecureSumFactory(1.0).create(tff.to_type([np.float32, np.float64]))


def _check_measurements(m, upper_count, lower_count, upper, lower):
    assert m['secure_upper_clipped_count'] == upper_count
    assert m['secure_lower_clipped_count'] == lower_count
    assert_all_close(m['secure_upper_threshold'], upper)
    assert_all_close(m['secure_lower_threshold'], lower)


def test_int_constant_bounds(tff_stack):
    process = secure.SecureSumFactory(upper_bound_threshold=1, lower_bound_threshold=-1).create(
        tff.TensorType(np.int32)
    )
    output = process.next(process.initialize(), [-2, -1, 0, 1, 2, 3])
    assert output.result == 1
    _check_measurements(output.measurements, 2, 1, 1, -1)


def test_float_constant_bounds(tff_stack):
    process = secure.SecureSumFactory(1.0, -1.0).create(tff.TensorType(np.float32))
    output = process.next(process.initialize(), [-2.5, -0.5, 0.0, 1.0, 1.5, 2.5])
    assert_all_close(output.result, 1.5)
    _check_measurements(output.measurements, 2, 1, 1.0, -1.0)


@pytest.mark.parametrize('two_processes', [False, True], ids=['single', 'two'])
def test_float_process_bounds(tff_stack, two_processes):
    f = (
        secure.SecureSumFactory(_test_estimation_process(1), _test_estimation_process(-1))
        if two_processes
        else secure.SecureSumFactory(_test_estimation_process(1))
    )
    process = f.create(tff.TensorType(np.float32))
    client_data = [-2.5, -0.5, 0.0, 1.0, 1.5, 3.5]
    state = process.initialize()
    for result, up_count, low_count, bound in [
        (1.5, 2, 1, 1.0),
        (2.0, 1, 1, 2.0),
        (2.5, 1, 0, 3.0),
    ]:
        output = process.next(state, client_data)
        assert_all_close(output.result, result)
        _check_measurements(output.measurements, up_count, low_count, bound, -bound)
        state = output.state


def test_float_32_larger_than_2_pow_32(tff_stack):
    process = secure.SecureSumFactory(upper_bound_threshold=float(2**34)).create(
        tff.TensorType(np.float32)
    )
    output = process.next(process.initialize(), [float(2**33), float(2**33), float(2**34)])
    assert_all_close(output.result, float(2**35))
    _check_measurements(output.measurements, 0, 0, float(2**34), float(-(2**34)))
