"""Port of TFF's ``tensorflow_federated/python/core/templates/measured_process_test.py``.

Left out: the four AST golden tests (``MeasuredProcessCompositionASTTest``,
``MeasuredProcessConcatenationASTTest``) compare TFF's compiled building
blocks with text files; our building blocks differ by design. The
composition and concatenation also run here (both stacks).
"""

import collections

import numpy as np
import pytest

import simharness as tff
from simharness.templates import (
    AggregationProcess,
    IterativeProcess,
    MeasuredProcess,
    MeasuredProcessOutput,
    chain_measured_processes,
    concatenate_measured_processes,
    errors,
)

I32_S = tff.FederatedType(np.int32, tff.SERVER)
I32_C = tff.FederatedType(np.int32, tff.CLIENTS)


@tff.federated_computation()
def _initialize():
    return tff.federated_value(0, tff.SERVER)


@tff.federated_computation(tff.StructType([I32_S, I32_C]))
def _next(state, value):
    return MeasuredProcessOutput(state, value, ())


def test_construction_does_not_raise():
    MeasuredProcess(_initialize, _next)


def test_construction_with_empty_state_does_not_raise():
    init = tff.federated_computation(lambda: tff.federated_value((), tff.SERVER))
    nxt = tff.federated_computation(
        lambda s, v: MeasuredProcessOutput(s, v, ()),
        tff.StructType([tff.FederatedType((), tff.SERVER), I32_C]),
    )
    MeasuredProcess(init, nxt)


def test_not_tff_computation_raises():
    with pytest.raises(TypeError, match=r'Expected .*Computation'):
        MeasuredProcess(lambda: 0, _next)
    with pytest.raises(TypeError, match=r'Expected .*Computation'):
        MeasuredProcess(_initialize, lambda s, v: MeasuredProcessOutput(s, v, ()))


def test_init_param_not_empty_raises():
    with pytest.raises(errors.TemplateInitFnParamNotEmptyError):
        MeasuredProcess(tff.federated_computation(lambda x: x, I32_S), _next)


def test_init_state_not_assignable():
    with pytest.raises(errors.TemplateStateNotAssignableError):
        MeasuredProcess(
            tff.federated_computation(lambda: tff.federated_value(0.0, tff.SERVER)), _next
        )


def test_next_state_not_assignable():
    nxt = tff.federated_computation(
        lambda s, v: MeasuredProcessOutput(s, v, ()),
        tff.StructType([tff.FederatedType(np.float32, tff.SERVER), I32_C]),
    )
    with pytest.raises(errors.TemplateStateNotAssignableError):
        MeasuredProcess(_initialize, nxt)


def test_measured_process_output_as_state_raises():
    init = tff.federated_computation(
        lambda: tff.federated_value(MeasuredProcessOutput((), (), ()), tff.SERVER)
    )
    state_type = tff.StructType(
        [
            tff.StructType(
                [(n, tff.StructType([])) for n in ('state', 'result', 'measurements')],
                container=MeasuredProcessOutput,
            )
        ]
    )
    nxt = tff.federated_computation(lambda state: state, state_type)
    with pytest.raises(errors.TemplateStateNotAssignableError):
        MeasuredProcess(init, nxt)


@pytest.mark.parametrize('kind', ['tensor', 'tuple', 'namedtuple', 'odict'])
def test_next_return_not_measured_process_output_raises(kind):
    other = collections.namedtuple('MeasuredProcessOutput', ['state', 'result', 'measurements'])
    if kind == 'tensor':
        nxt = tff.federated_computation(lambda s: s, I32_S)
    else:

        @tff.federated_computation(tff.StructType([I32_S, I32_C]))
        def nxt(state, value):
            if kind == 'tuple':
                return (state, value, ())
            if kind == 'namedtuple':
                return other(state, value, ())
            return collections.OrderedDict(
                [('state', state), ('result', value), ('measurements', ())]
            )

    with pytest.raises(errors.TemplateNotMeasuredProcessOutputError):
        MeasuredProcess(_initialize, nxt)


def test_federated_measured_process_output_raises():
    empty = lambda: tff.federated_value((), tff.SERVER)
    nxt = tff.federated_computation(
        lambda s: tff.federated_zip(MeasuredProcessOutput(s, empty(), empty())), I32_S
    )
    with pytest.raises(errors.TemplateStateNotAssignableError):
        MeasuredProcess(_initialize, nxt)


@tff.federated_computation()
def _identity(x):
    return x


def _double_process(state_type, state_init, values_type):
    @tff.federated_computation(
        tff.FederatedType(state_type, tff.SERVER), tff.FederatedType(values_type, tff.CLIENTS)
    )
    def nxt(state, values):
        return MeasuredProcessOutput(
            state=tff.federated_map(_identity, state),
            result=tff.federated_map(_identity, values),
            measurements=tff.federated_value(collections.OrderedDict(a=1), tff.SERVER),
        )

    init = tff.federated_computation(lambda: tff.federated_value(state_init, tff.SERVER))
    return MeasuredProcess(init, nxt)


def _sum_process(state_type, state_init, values_type):
    @tff.federated_computation(
        tff.FederatedType(state_type, tff.SERVER), tff.FederatedType(values_type, tff.CLIENTS)
    )
    def nxt(state, values):
        return MeasuredProcessOutput(
            state=tff.federated_map(_identity, state),
            result=tff.federated_sum(values),
            measurements=tff.federated_value(collections.OrderedDict(b=2), tff.SERVER),
        )

    init = tff.federated_computation(lambda: tff.federated_value(state_init, tff.SERVER))
    return MeasuredProcess(init, nxt)


def _aggregation_process(state_type, state_init, values_type):
    @tff.federated_computation(
        tff.FederatedType(state_type, tff.SERVER), tff.FederatedType(values_type, tff.CLIENTS)
    )
    def nxt(state, values):
        return MeasuredProcessOutput(
            state, tff.federated_sum(values), tff.federated_value(1, tff.SERVER)
        )

    init = tff.federated_computation(lambda: tff.federated_value(state_init, tff.SERVER))
    return AggregationProcess(init, nxt)


def _state_at_clients_process():
    nxt = tff.federated_computation(
        lambda s, v: MeasuredProcessOutput(
            s, tff.federated_sum(v), tff.federated_value(1, tff.SERVER)
        ),
        I32_C,
        I32_C,
    )
    return MeasuredProcess(
        tff.federated_computation(lambda: tff.federated_value(0, tff.CLIENTS)), nxt
    )


def _state_missing_placement_process():
    nxt = tff.federated_computation(
        lambda s, v: MeasuredProcessOutput(s, v, ()), tff.StructType([np.int32, np.int32])
    )
    return MeasuredProcess(tff.federated_computation(lambda: 0), nxt)


def _iterative_process():
    return IterativeProcess(
        tff.federated_computation(lambda: 0), tff.federated_computation(lambda s: s, np.int32)
    )


@pytest.mark.parametrize('last', [_sum_process, _aggregation_process], ids=['measured', 'agg'])
def test_composition_type_properties(last):
    last = last(np.float32, 0.0, np.int32)
    composite = chain_measured_processes(
        collections.OrderedDict(
            double=_double_process(np.float32, 1.0, np.int32), last_process=last
        )
    )
    assert isinstance(composite, MeasuredProcess)
    state = tff.FederatedType(
        collections.OrderedDict(double=np.float32, last_process=np.float32), tff.SERVER
    )
    assert composite.initialize.type_signature.is_equivalent_to(tff.FunctionType(None, state))
    meas = tff.FederatedType(
        collections.OrderedDict(
            double=collections.OrderedDict(a=np.int32),
            last_process=last.next.type_signature.result.measurements.member,
        ),
        tff.SERVER,
    )
    assert composite.next.type_signature.is_equivalent_to(
        tff.FunctionType(
            collections.OrderedDict(state=state, values=I32_C),
            MeasuredProcessOutput(state, I32_S, meas),
        )
    )


def test_composition_runs(tff_stack):
    composite = chain_measured_processes(
        collections.OrderedDict(
            double=_double_process(np.int32, 1, np.int32), sum=_sum_process(np.int32, 0, np.int32)
        )
    )
    output = composite.next(composite.initialize(), [1, 2, 3])
    assert output.state == collections.OrderedDict(double=1, sum=0)
    assert output.result == 6
    assert output.measurements == collections.OrderedDict(
        double=collections.OrderedDict(a=1), sum=collections.OrderedDict(b=2)
    )


def test_values_type_mismatching_raises():
    processes = collections.OrderedDict(
        double=_double_process(np.int32, 1, np.int32), sum=_sum_process(np.int32, 0, np.float32)
    )
    with pytest.raises(TypeError, match='Cannot call function'):
        chain_measured_processes(processes)


@pytest.mark.parametrize('combine', [chain_measured_processes, concatenate_measured_processes])
@pytest.mark.parametrize(
    'first, second',
    [
        (lambda: _double_process(np.int32, 1, np.int32), _iterative_process),
        (lambda: _double_process(np.int32, 1, np.int32), _state_at_clients_process),
        (lambda: _double_process(np.int32, 1, np.int32), _state_missing_placement_process),
        (_state_at_clients_process, _state_missing_placement_process),
    ],
    ids=['iterative', 'server_and_clients', 'server_and_missing', 'clients_and_missing'],
)
def test_mixed_state_placement_raises(combine, first, second):
    with pytest.raises(TypeError, match='Cannot concatenate the initialization functions'):
        combine(collections.OrderedDict(first_process=first(), second_process=second()))


@pytest.mark.parametrize('last', [_sum_process, _aggregation_process], ids=['measured', 'agg'])
def test_concatenation_type_properties(last):
    last = last(np.int32, 0, np.int32)
    concatenated = concatenate_measured_processes(
        collections.OrderedDict(double=_double_process(np.int32, 1, np.int32), last_process=last)
    )
    assert isinstance(concatenated, MeasuredProcess)
    state = tff.FederatedType(
        collections.OrderedDict(double=np.int32, last_process=np.int32), tff.SERVER
    )
    assert concatenated.initialize.type_signature.is_equivalent_to(tff.FunctionType(None, state))
    values = collections.OrderedDict(double=I32_C, last_process=I32_C)
    results = collections.OrderedDict(double=I32_C, last_process=I32_S)
    meas = tff.FederatedType(
        collections.OrderedDict(
            double=collections.OrderedDict(a=np.int32),
            last_process=last.next.type_signature.result.measurements.member,
        ),
        tff.SERVER,
    )
    assert concatenated.next.type_signature.is_equivalent_to(
        tff.FunctionType(
            collections.OrderedDict(state=state, values=values),
            MeasuredProcessOutput(state, results, meas),
        )
    )


def test_concatenation_runs(tff_stack):
    concatenated = concatenate_measured_processes(
        collections.OrderedDict(
            double=_double_process(np.int32, 1, np.int32), sum=_sum_process(np.int32, 0, np.int32)
        )
    )
    output = concatenated.next(
        concatenated.initialize(), collections.OrderedDict(double=[1, 2], sum=[3, 4])
    )
    assert output.result['sum'] == 7
    assert list(output.result['double']) == [1, 2]
