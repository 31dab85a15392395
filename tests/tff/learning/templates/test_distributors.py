"""Port of TFF's ``tensorflow_federated/python/learning/templates/distributors_test.py``.

No case left out.
"""

import collections

import numpy as np
import pytest
import tensorflow as tf

import simharness as tff
from simharness.learning.templates import distributors
from simharness.templates import MeasuredProcessOutput, errors

SERVER_INT = tff.FederatedType(np.int32, tff.SERVER)
SERVER_FLOAT = tff.FederatedType(np.float32, tff.SERVER)
CLIENTS_INT = tff.FederatedType(np.int32, tff.CLIENTS)


def server_zero():
    return tff.federated_value(0, tff.SERVER)


@tff.federated_computation()
def initialize_fn():
    return server_zero()


@tff.federated_computation(SERVER_INT, SERVER_FLOAT)
def next_fn(state, val):
    return MeasuredProcessOutput(
        state, tff.federated_broadcast(val), tff.federated_value(1, tff.SERVER)
    )


def test_construction_does_not_raise():
    distributors.DistributionProcess(initialize_fn, next_fn)


def test_construction_with_empty_state_does_not_raise():
    init = tff.federated_computation()(lambda: tff.federated_value((), tff.SERVER))

    @tff.federated_computation(init.type_signature.result, SERVER_FLOAT)
    def next_(state, val):
        return MeasuredProcessOutput(
            state, tff.federated_broadcast(val), tff.federated_value(1, tff.SERVER)
        )

    distributors.DistributionProcess(init, next_)


def test_init_not_tff_computation_raises():
    with pytest.raises(TypeError, match=r'Expected .*\.Computation, .*'):
        distributors.DistributionProcess(initialize_fn=lambda: 0, next_fn=next_fn)


def test_next_not_tff_computation_raises():
    with pytest.raises(TypeError, match=r'Expected .*\.Computation, .*'):
        distributors.DistributionProcess(
            initialize_fn=initialize_fn,
            next_fn=lambda state, val: MeasuredProcessOutput(state, (), ()),
        )


def test_init_param_not_empty_raises():
    one_arg = tff.federated_computation(SERVER_INT)(lambda x: x)
    with pytest.raises(errors.TemplateInitFnParamNotEmptyError):
        distributors.DistributionProcess(one_arg, next_fn)


def test_init_state_not_assignable():
    float_init = tff.federated_computation()(lambda: tff.federated_value(0.0, tff.SERVER))
    with pytest.raises(errors.TemplateStateNotAssignableError):
        distributors.DistributionProcess(float_init, next_fn)


def test_next_state_not_assignable():
    @tff.federated_computation(SERVER_INT, SERVER_FLOAT)
    def float_next(state, val):
        del state
        return MeasuredProcessOutput(
            tff.federated_value(0.0, tff.SERVER), tff.federated_broadcast(val), server_zero()
        )

    with pytest.raises(errors.TemplateStateNotAssignableError):
        distributors.DistributionProcess(initialize_fn, float_next)


def test_next_return_tuple_raises():
    @tff.federated_computation(SERVER_INT, SERVER_FLOAT)
    def tuple_next(state, val):
        return state, tff.federated_broadcast(val), server_zero()

    with pytest.raises(errors.TemplateNotMeasuredProcessOutputError):
        distributors.DistributionProcess(initialize_fn, tuple_next)


def test_next_return_namedtuple_raises():
    output = collections.namedtuple('MeasuredProcessOutput', ['state', 'result', 'measurements'])

    @tff.federated_computation(SERVER_INT, SERVER_FLOAT)
    def namedtuple_next(state, val):
        return output(state, tff.federated_broadcast(val), server_zero())

    with pytest.raises(errors.TemplateNotMeasuredProcessOutputError):
        distributors.DistributionProcess(initialize_fn, namedtuple_next)


def test_next_return_odict_raises():
    @tff.federated_computation(SERVER_INT, SERVER_FLOAT)
    def odict_next(state, val):
        return collections.OrderedDict(
            state=state, result=tff.federated_broadcast(val), measurements=server_zero()
        )

    with pytest.raises(errors.TemplateNotMeasuredProcessOutputError):
        distributors.DistributionProcess(initialize_fn, odict_next)


def test_construction_with_value_type_mismatch_does_not_raise():
    bad_cast_fn = tff.tf_computation(lambda x: tf.cast(x, tf.float64))

    @tff.federated_computation(SERVER_INT, SERVER_FLOAT)
    def next_(state, val):
        result = tff.federated_map(bad_cast_fn, tff.federated_broadcast(val))
        return MeasuredProcessOutput(state, result, tff.federated_value(1, tff.SERVER))

    distributors.DistributionProcess(initialize_fn, next_)


def test_non_federated_init_next_raises():
    init = tff.tf_computation(lambda: 0)

    @tff.tf_computation(np.int32, np.float32)
    def next_(state, val):
        return MeasuredProcessOutput(state, val, ())

    with pytest.raises(errors.TemplateNotFederatedError):
        distributors.DistributionProcess(init, next_)


def test_init_tuple_of_federated_types_raises():
    init = tff.federated_computation()(lambda: (server_zero(), server_zero()))

    @tff.federated_computation(init.type_signature.result, SERVER_FLOAT)
    def next_(state, val):
        return MeasuredProcessOutput(state, tff.federated_broadcast(val), server_zero())

    with pytest.raises(errors.TemplateNotFederatedError):
        distributors.DistributionProcess(init, next_)


def test_non_server_placed_init_state_raises():
    init = tff.federated_computation(lambda: tff.federated_value(0, tff.CLIENTS))

    @tff.federated_computation(CLIENTS_INT, SERVER_FLOAT)
    def next_(state, val):
        return MeasuredProcessOutput(state, tff.federated_broadcast(val), server_zero())

    with pytest.raises(errors.TemplatePlacementError):
        distributors.DistributionProcess(init, next_)


def test_single_param_next_raises():
    @tff.federated_computation(SERVER_INT)
    def next_(state):
        return MeasuredProcessOutput(state, tff.federated_broadcast(state), server_zero())

    with pytest.raises(errors.TemplateNextFnNumArgsError):
        distributors.DistributionProcess(initialize_fn, next_)


def test_three_params_next_raises():
    @tff.federated_computation(SERVER_INT, SERVER_FLOAT, SERVER_FLOAT)
    def next_(state, value, extra_value):
        return MeasuredProcessOutput(state, tff.federated_broadcast(value), extra_value)

    with pytest.raises(errors.TemplateNextFnNumArgsError):
        distributors.DistributionProcess(initialize_fn, next_)


def test_non_server_placed_next_value_param_raises():
    next_ = tff.federated_computation(SERVER_INT, CLIENTS_INT)(
        lambda state, val: MeasuredProcessOutput(state, val, server_zero())
    )
    with pytest.raises(errors.TemplatePlacementError):
        distributors.DistributionProcess(initialize_fn, next_)


def test_non_clients_placed_next_result_raises():
    next_ = tff.federated_computation(SERVER_INT, SERVER_INT)(
        lambda state, val: MeasuredProcessOutput(state, val, server_zero())
    )
    with pytest.raises(errors.TemplatePlacementError):
        distributors.DistributionProcess(initialize_fn, next_)


def test_non_server_placed_next_measurements_raises():
    @tff.federated_computation(SERVER_INT, SERVER_FLOAT)
    def next_(state, val):
        return MeasuredProcessOutput(
            state, tff.federated_broadcast(val), tff.federated_value(1.0, tff.CLIENTS)
        )

    with pytest.raises(errors.TemplatePlacementError):
        distributors.DistributionProcess(initialize_fn, next_)


@pytest.mark.parametrize(
    'value_type',
    [tff.TensorType(np.float32), tff.to_type([(np.float32, (2,)), np.int32])],
    ids=['float', 'struct'],
)
def test_type_properties(value_type):
    process = distributors.build_broadcast_process(value_type)
    assert isinstance(process, distributors.DistributionProcess)
    state = tff.FederatedType((), tff.SERVER)
    expected_init = tff.FunctionType(None, state)
    assert expected_init.is_equivalent_to(process.initialize.type_signature)
    expected_next = tff.FunctionType(
        collections.OrderedDict(state=state, value=tff.FederatedType(value_type, tff.SERVER)),
        MeasuredProcessOutput(
            state,
            tff.FederatedType(value_type, tff.CLIENTS, all_equal=True),
            tff.FederatedType((), tff.SERVER),
        ),
    )
    assert expected_next.is_equivalent_to(process.next.type_signature), process.next.type_signature


@pytest.mark.parametrize(
    'bad_value_type',
    [SERVER_FLOAT, tff.FunctionType(None, ()), tff.SequenceType(np.float32)],
    ids=['federated_type', 'function_type', 'sequence_type'],
)
def test_incorrect_value_type_raises(bad_value_type):
    with pytest.raises(TypeError):
        distributors.build_broadcast_process(bad_value_type)


def test_inner_federated_type_raises():
    with pytest.raises(TypeError, match='FederatedType'):
        distributors.build_broadcast_process(tff.to_type([SERVER_FLOAT, SERVER_FLOAT]))


def test_broadcast_scalar(tff_stack):
    process = distributors.build_broadcast_process(SERVER_FLOAT.member)
    output = process.next(process.initialize(), 2.5)
    assert output.state == ()
    np.testing.assert_allclose(output.result, 2.5)
    assert output.measurements == ()


def test_broadcast_struct(tff_stack):
    struct_type = tff.to_type([(np.float32, (2,)), np.int32])
    process = distributors.build_broadcast_process(struct_type)
    output = process.next(process.initialize(), ((1.0, 2.5), 3))
    assert output.state == ()
    np.testing.assert_allclose(output.result[0], (1.0, 2.5))
    assert output.result[1] == 3
    assert output.measurements == ()
