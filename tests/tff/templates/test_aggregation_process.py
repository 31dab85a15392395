"""Port of TFF's ``tensorflow_federated/python/core/templates/aggregation_process_test.py``.

No case left out.
"""

import collections

import numpy as np
import pytest

import simharness as tff
from simharness.templates import AggregationProcess, MeasuredProcess, MeasuredProcessOutput
from simharness.templates import errors
from simharness.templates.aggregation_process import (
    AggregationNotFederatedError,
    AggregationPlacementError,
)

I32_S = tff.FederatedType(np.int32, tff.SERVER)
F32_C = tff.FederatedType(np.float32, tff.CLIENTS)


def _server_zero():
    return tff.federated_value(0, tff.SERVER)


@tff.federated_computation()
def _initialize():
    return _server_zero()


@tff.federated_computation(I32_S, F32_C)
def _next(state, value):
    return MeasuredProcessOutput(state, tff.federated_sum(value), _server_zero())


def test_construction_and_run(tff_stack):
    process = AggregationProcess(_initialize, _next)
    assert not process.is_weighted
    output = process.next(process.initialize(), [1.0, 2.5])
    assert output == MeasuredProcessOutput(0, 3.5, 0)


def test_construction_with_empty_state_does_not_raise():
    empty = tff.FederatedType((), tff.SERVER)
    AggregationProcess(
        tff.federated_computation(lambda: tff.federated_value((), tff.SERVER)),
        tff.federated_computation(
            lambda s, v: MeasuredProcessOutput(
                s, tff.federated_sum(v), tff.federated_value(1, tff.SERVER)
            ),
            empty,
            F32_C,
        ),
    )


def test_construction_with_unknown_dimension_does_not_raise():
    t = tff.FederatedType(tff.TensorType(np.str_, [None]), tff.SERVER)
    AggregationProcess(
        tff.federated_computation(lambda: tff.federated_value(np.array([], np.str_), tff.SERVER)),
        tff.federated_computation(
            lambda s, v: MeasuredProcessOutput(s, tff.federated_sum(v), _server_zero()), t, F32_C
        ),
    )


def test_construction_with_value_type_mismatch_does_not_raise():
    @tff.federated_computation(I32_S, F32_C)
    def next_fn(state, value):
        del value
        return MeasuredProcessOutput(state, tff.federated_value(0, tff.SERVER), _server_zero())

    AggregationProcess(_initialize, next_fn)


def test_not_tff_computation_raises():
    with pytest.raises(TypeError, match=r'Expected .*Computation'):
        AggregationProcess(initialize_fn=lambda: 0, next_fn=_next)
    with pytest.raises(TypeError, match=r'Expected .*Computation'):
        AggregationProcess(
            initialize_fn=_initialize, next_fn=lambda state: MeasuredProcessOutput(state, (), ())
        )


def test_init_param_not_empty_raises():
    with pytest.raises(errors.TemplateInitFnParamNotEmptyError):
        AggregationProcess(tff.federated_computation(lambda x: x, I32_S), _next)


def test_init_state_not_assignable():
    init = tff.federated_computation(lambda: tff.federated_value(0.0, tff.SERVER))
    with pytest.raises(errors.TemplateStateNotAssignableError):
        AggregationProcess(init, _next)


def test_next_state_not_assignable():
    @tff.federated_computation(I32_S, F32_C)
    def next_fn(state, value):
        return MeasuredProcessOutput(
            tff.federated_sum(value), tff.federated_sum(value), _server_zero()
        )

    with pytest.raises(errors.TemplateStateNotAssignableError):
        AggregationProcess(_initialize, next_fn)


def test_measured_process_output_as_state_raises():
    empty = lambda: tff.federated_value((), tff.SERVER)
    init = tff.federated_computation(
        lambda: tff.federated_zip(MeasuredProcessOutput(empty(), empty(), empty()))
    )

    @tff.federated_computation(init.type_signature.result, F32_C)
    def next_fn(state, value):
        del state, value
        return MeasuredProcessOutput(empty(), empty(), empty())

    with pytest.raises(errors.TemplateStateNotAssignableError):
        MeasuredProcess(init, next_fn)


@pytest.mark.parametrize('kind', ['tuple', 'namedtuple', 'odict'])
def test_next_return_not_measured_process_output_raises(kind):
    other = collections.namedtuple('MeasuredProcessOutput', ['state', 'result', 'measurements'])

    @tff.federated_computation(I32_S, F32_C)
    def next_fn(state, value):
        parts = (state, tff.federated_sum(value), _server_zero())
        if kind == 'tuple':
            return parts
        if kind == 'namedtuple':
            return other(*parts)
        return collections.OrderedDict(zip(['state', 'result', 'measurements'], parts))

    with pytest.raises(errors.TemplateNotMeasuredProcessOutputError):
        AggregationProcess(_initialize, next_fn)


def test_federated_measured_process_output_raises():
    @tff.federated_computation(I32_S, F32_C)
    def next_fn(state, value):
        return tff.federated_zip(
            MeasuredProcessOutput(state, tff.federated_sum(value), _server_zero())
        )

    with pytest.raises(errors.TemplateStateNotAssignableError):
        AggregationProcess(_initialize, next_fn)


def test_non_federated_init_next_raises():
    init = tff.federated_computation(lambda: 0)
    nxt = tff.federated_computation(
        lambda s, v: MeasuredProcessOutput(s, v, ()), np.int32, np.float32
    )
    with pytest.raises(AggregationNotFederatedError):
        AggregationProcess(init, nxt)


def test_init_tuple_of_federated_types_raises():
    init = tff.federated_computation(lambda: (_server_zero(), _server_zero()))

    @tff.federated_computation(tff.StructType([I32_S, I32_S]), F32_C)
    def next_fn(state, value):
        return MeasuredProcessOutput(state, tff.federated_sum(value), _server_zero())

    with pytest.raises(AggregationNotFederatedError):
        AggregationProcess(init, next_fn)


def test_non_server_placed_init_state_raises():
    init = tff.federated_computation(lambda: tff.federated_value(0, tff.CLIENTS))

    @tff.federated_computation(tff.FederatedType(np.int32, tff.CLIENTS), F32_C)
    def next_fn(state, value):
        return MeasuredProcessOutput(state, tff.federated_sum(value), _server_zero())

    with pytest.raises(AggregationPlacementError):
        AggregationProcess(init, next_fn)


def test_single_param_next_raises():
    @tff.federated_computation(tff.FederatedType(np.int32, tff.CLIENTS))
    def next_fn(state):
        return MeasuredProcessOutput(state, tff.federated_value(1.0, tff.SERVER), _server_zero())

    with pytest.raises(errors.TemplateNextFnNumArgsError):
        AggregationProcess(_initialize, next_fn)


def test_non_clients_placed_next_value_param_raises():
    next_fn = tff.federated_computation(
        lambda s, v: MeasuredProcessOutput(s, v, _server_zero()),
        I32_S,
        tff.FederatedType(np.float32, tff.SERVER),
    )
    with pytest.raises(AggregationPlacementError):
        AggregationProcess(_initialize, next_fn)


def test_non_server_placed_next_result_raises():
    next_fn = tff.federated_computation(
        lambda s, v: MeasuredProcessOutput(s, v, _server_zero()), I32_S, F32_C
    )
    with pytest.raises(AggregationPlacementError):
        AggregationProcess(_initialize, next_fn)


def test_non_server_placed_next_measurements_raises():
    next_fn = tff.federated_computation(
        lambda s, v: MeasuredProcessOutput(s, tff.federated_sum(v), v),
        I32_S,
        tff.FederatedType(np.int32, tff.CLIENTS),
    )
    with pytest.raises(AggregationPlacementError):
        AggregationProcess(_initialize, next_fn)


def test_is_weighted_property():
    @tff.federated_computation(I32_S, F32_C, F32_C)
    def weighted_next_fn(state, value, weight):
        del weight
        return MeasuredProcessOutput(state, tff.federated_sum(value), _server_zero())

    assert AggregationProcess(_initialize, weighted_next_fn).is_weighted
