"""Port of TFF's ``tensorflow_federated/python/core/templates/iterative_process_test.py``.

No case left out (the struct-list state types use ``to_type([...])``, our
equivalent of ``StructWithPythonType(..., list)``).
"""

import numpy as np
import pytest

import simharness as tff
from simharness.templates import IterativeProcess, errors, is_stateful


@tff.federated_computation()
def _initialize():
    return tff.federated_value(0, tff.SERVER)


@tff.federated_computation(tff.FederatedType(np.int32, tff.SERVER))
def _next(state):
    return state


def test_construction_does_not_raise():
    IterativeProcess(_initialize, _next)


def test_construction_with_empty_state_does_not_raise():
    init = tff.federated_computation(lambda: tff.federated_value((), tff.SERVER))
    nxt = tff.federated_computation(lambda s: s, tff.FederatedType((), tff.SERVER))
    IterativeProcess(init, nxt)


def test_construction_with_unknown_dimension_does_not_raise():
    init = tff.federated_computation(lambda: tff.federated_value(np.array([], np.str_), tff.SERVER))
    nxt = tff.federated_computation(
        lambda s: s, tff.FederatedType(tff.TensorType(np.str_, [None]), tff.SERVER)
    )
    IterativeProcess(init, nxt)


def test_init_not_tff_computation_raises():
    with pytest.raises(TypeError, match=r'Expected .*Computation'):
        IterativeProcess(initialize_fn=lambda: 0, next_fn=_next)


def test_next_not_tff_computation_raises():
    with pytest.raises(TypeError, match=r'Expected .*Computation'):
        IterativeProcess(initialize_fn=_initialize, next_fn=lambda state: state)


def test_init_param_not_empty_raises():
    init = tff.federated_computation(lambda x: x, tff.FederatedType(np.int32, tff.SERVER))
    with pytest.raises(errors.TemplateInitFnParamNotEmptyError):
        IterativeProcess(init, _next)


def test_init_state_not_assignable():
    init = tff.federated_computation(lambda: tff.federated_value(0.0, tff.SERVER))
    with pytest.raises(errors.TemplateStateNotAssignableError):
        IterativeProcess(init, _next)


def test_next_state_not_assignable():
    nxt = tff.federated_computation(lambda s: s, tff.FederatedType(np.float32, tff.SERVER))
    with pytest.raises(errors.TemplateStateNotAssignableError):
        IterativeProcess(_initialize, nxt)


def test_next_state_not_assignable_tuple_result():
    @tff.federated_computation(
        tff.StructType(
            [tff.FederatedType(np.float32, tff.SERVER), tff.FederatedType(np.int32, tff.CLIENTS)]
        )
    )
    def nxt(state, value):
        return state, value

    with pytest.raises(errors.TemplateStateNotAssignableError):
        IterativeProcess(_initialize, nxt)


def _create_test_process(state_type, state):
    @tff.federated_computation
    def init():
        if isinstance(state_type, tff.FederatedType):
            return tff.federated_value(state, state_type.placement)
        return state

    @tff.federated_computation(state_type, np.int32)
    def nxt(state, value):
        return state, value

    return IterativeProcess(init, nxt)


@pytest.mark.parametrize(
    'state_type, state',
    [
        (tff.StructType([]), ()),
        (tff.to_type([]), []),
        (tff.StructType([[], [[]]]), ((), ((),))),
        (tff.FederatedType([], tff.SERVER), ()),
        (tff.FederatedType([[], [[]]], tff.SERVER), ((), ((),))),
    ],
    ids=[
        'struct_tuple_empty',
        'struct_list_empty',
        'struct_nested_empty',
        'federated_struct_empty',
        'federated_struct_nested_empty',
    ],
)
def test_is_stateful_returns_false(state_type, state):
    assert not is_stateful(_create_test_process(state_type, state))


@pytest.mark.parametrize(
    'state_type, state',
    [
        (tff.TensorType(np.int32), 1),
        (tff.StructType([np.int32]), (1,)),
        (tff.to_type([np.int32]), [1]),
        (tff.StructType([[], [[np.int32]]]), ((), ((1,),))),
        (tff.FederatedType(np.int32, tff.SERVER), 1),
        (tff.FederatedType([[], [[np.int32]]], tff.SERVER), ((), ((1,),))),
    ],
    ids=[
        'tensor',
        'struct_tuple_tensor',
        'struct_list_tensor',
        'struct_nested_tensor',
        'federated_tensor',
        'federated_struct_nested_tensor',
    ],
)
def test_is_stateful_returns_true(state_type, state):
    assert is_stateful(_create_test_process(state_type, state))
