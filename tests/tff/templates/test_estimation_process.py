"""Port of TFF's ``tensorflow_federated/python/core/templates/estimation_process_test.py``.

No case left out; the mapped process also runs (on both stacks).
"""

import numpy as np
import pytest

import simharness as tff
from simharness.templates import EstimationProcess, errors
from simharness.templates.estimation_process import EstimateNotAssignableError

I32_S = tff.FederatedType(np.int32, tff.SERVER)


@tff.federated_computation()
def _initialize():
    return tff.federated_value(0, tff.SERVER)


@tff.federated_computation(I32_S)
def _next(state):
    return state


@tff.federated_computation(I32_S)
def _report(state):
    del state
    return tff.federated_value(1.0, tff.SERVER)


@tff.federated_computation(tff.FederatedType(np.float32, tff.SERVER))
def _map(state):
    return (state, state)


def test_construction_does_not_raise():
    EstimationProcess(_initialize, _next, _report)


def test_construction_with_empty_state_does_not_raise():
    empty = tff.FederatedType((), tff.SERVER)
    EstimationProcess(
        tff.federated_computation(lambda: tff.federated_value((), tff.SERVER)),
        tff.federated_computation(lambda s: (s, 1.0), empty),
        tff.federated_computation(lambda s: s, empty),
    )


def test_construction_with_unknown_dimension_does_not_raise():
    t = tff.FederatedType(tff.TensorType(np.str_, [None]), tff.SERVER)
    EstimationProcess(
        tff.federated_computation(lambda: tff.federated_value(np.array([], np.str_), tff.SERVER)),
        tff.federated_computation(lambda s: s, t),
        tff.federated_computation(lambda s: s, t),
    )


@pytest.mark.parametrize('which', ['init', 'next', 'report'])
def test_not_tff_computation_raises(which):
    fns = {'init': _initialize, 'next': _next, 'report': _report}
    fns[which] = (lambda: 0) if which == 'init' else (lambda x: x)
    with pytest.raises(TypeError, match=r'Expected .*Computation'):
        EstimationProcess(fns['init'], fns['next'], fns['report'])


def test_init_param_not_empty_raises():
    with pytest.raises(errors.TemplateInitFnParamNotEmptyError):
        EstimationProcess(tff.federated_computation(lambda x: x, I32_S), _next, _report)


def test_init_state_not_assignable():
    init = tff.federated_computation(lambda: tff.federated_value(0.0, tff.SERVER))
    with pytest.raises(errors.TemplateStateNotAssignableError):
        EstimationProcess(init, _next, _report)


def test_next_state_not_assignable():
    nxt = tff.federated_computation(lambda s: s, tff.FederatedType(np.float32, tff.SERVER))
    with pytest.raises(errors.TemplateStateNotAssignableError):
        EstimationProcess(_initialize, nxt, _report)


def test_next_state_not_assignable_tuple_result():
    f32 = tff.FederatedType(np.float32, tff.SERVER)
    nxt = tff.federated_computation(lambda s, v: (s, v), tff.StructType([f32, f32]))
    with pytest.raises(errors.TemplateStateNotAssignableError):
        EstimationProcess(_initialize, nxt, _report)


def test_report_state_not_assignable():
    with pytest.raises(errors.TemplateStateNotAssignableError):
        EstimationProcess(_initialize, _next, tff.federated_computation(lambda s: s, np.float32))


def test_mapped_process_as_expected(tff_stack):
    process = EstimationProcess(_initialize, _next, _report)
    mapped = process.map(_map)
    assert isinstance(mapped, EstimationProcess)
    assert mapped.initialize is process.initialize and mapped.next is process.next
    assert mapped.report.type_signature.parameter == process.report.type_signature.parameter
    assert mapped.report.type_signature.result == _map.type_signature.result
    assert mapped.report(mapped.initialize()) == (1.0, 1.0)


def test_map_estimate_not_assignable_raises():
    process = EstimationProcess(_initialize, _next, _report)
    with pytest.raises(EstimateNotAssignableError):
        process.map(tff.federated_computation(lambda s: s, I32_S))
