"""Port of TFF's ``tensorflow_federated/python/learning/templates/client_works_test.py``.

No case left out; `test_next_runs` (ours) runs the test process on client datasets.
"""

import collections

import numpy as np
import pytest
import tensorflow as tf

import simharness as tff
from simharness.learning.models.model_weights import ModelWeights
from simharness.learning.templates import client_works
from simharness.templates import MeasuredProcessOutput, errors

SERVER_INT = tff.FederatedType(np.int32, tff.SERVER)
CLIENTS_FLOAT_SEQUENCE = tff.FederatedType(tff.SequenceType(np.float32), tff.CLIENTS)
CLIENTS_FLOAT = tff.FederatedType(np.float32, tff.CLIENTS)
MODEL_WEIGHTS_TYPE = tff.FederatedType(
    tff.to_type(ModelWeights(np.float32, np.float32)), tff.CLIENTS
)
HPARAMS_TYPE = tff.to_type(collections.OrderedDict(a=np.int32))


def server_zero():
    return tff.federated_value(0, tff.SERVER)


def client_one():
    return tff.federated_value(1.0, tff.CLIENTS)


def federated_add(a, b):
    return tff.federated_map(tff.tf_computation(lambda x, y: x + y), (a, b))


@tff.tf_computation()
def tf_data_sum(data):
    return data.reduce(0.0, lambda x, y: x + y)


@tff.federated_computation()
def initialize_fn():
    return server_zero()


def client_result(weights, data):
    reduced = tff.federated_map(tf_data_sum, data)
    return tff.federated_zip(
        client_works.ClientResult(
            update=federated_add(weights.trainable, reduced), update_weight=client_one()
        )
    )


@tff.federated_computation(SERVER_INT, MODEL_WEIGHTS_TYPE, CLIENTS_FLOAT_SEQUENCE)
def next_fn(state, weights, data):
    return MeasuredProcessOutput(
        state, client_result(weights, data), tff.federated_value(1, tff.SERVER)
    )


@tff.tf_computation(np.int32)
def get_hparams_fn(state):
    return collections.OrderedDict(a=state)


@tff.tf_computation(np.int32, HPARAMS_TYPE)
def set_hparams_fn(state, hparams):
    del state
    return hparams['a']


def test_construction_does_not_raise():
    client_works.ClientWorkProcess(initialize_fn, next_fn)


def test_construction_with_empty_state_does_not_raise():
    init = tff.federated_computation()(lambda: tff.federated_value((), tff.SERVER))

    @tff.federated_computation(
        init.type_signature.result, MODEL_WEIGHTS_TYPE, CLIENTS_FLOAT_SEQUENCE
    )
    def next_(state, weights, data):
        return MeasuredProcessOutput(
            state, client_result(weights, data), tff.federated_value(1, tff.SERVER)
        )

    client_works.ClientWorkProcess(init, next_)


def test_init_not_tff_computation_raises():
    with pytest.raises(TypeError, match=r'Expected .*\.Computation, .*'):
        client_works.ClientWorkProcess(initialize_fn=lambda: 0, next_fn=next_fn)


def test_next_not_tff_computation_raises():
    with pytest.raises(TypeError, match=r'Expected .*\.Computation, .*'):
        client_works.ClientWorkProcess(
            initialize_fn=initialize_fn,
            next_fn=lambda state, w, d: MeasuredProcessOutput(state, w + d, ()),
        )


def test_get_hparams_not_tff_computation_raises():
    with pytest.raises(TypeError, match=r'Expected .*\.Computation, .*'):
        client_works.ClientWorkProcess(initialize_fn, next_fn, get_hparams_fn=lambda x: 0)


def test_set_hparams_not_tff_computation_raises():
    with pytest.raises(TypeError, match=r'Expected .*\.Computation, .*'):
        client_works.ClientWorkProcess(initialize_fn, next_fn, set_hparams_fn=lambda x: 0)


def test_init_param_not_empty_raises():
    one_arg = tff.federated_computation(SERVER_INT)(lambda x: x)
    with pytest.raises(errors.TemplateInitFnParamNotEmptyError):
        client_works.ClientWorkProcess(one_arg, next_fn)


def test_init_state_not_assignable():
    float_init = tff.federated_computation()(lambda: tff.federated_value(0.0, tff.SERVER))
    with pytest.raises(errors.TemplateStateNotAssignableError):
        client_works.ClientWorkProcess(float_init, next_fn)


def test_next_state_not_assignable():
    @tff.federated_computation(SERVER_INT, MODEL_WEIGHTS_TYPE, CLIENTS_FLOAT_SEQUENCE)
    def float_next(state, weights, data):
        del state
        return MeasuredProcessOutput(
            tff.federated_value(0.0, tff.SERVER),
            client_result(weights, data),
            tff.federated_value(1, tff.SERVER),
        )

    with pytest.raises(errors.TemplateStateNotAssignableError):
        client_works.ClientWorkProcess(initialize_fn, float_next)


def test_next_return_tuple_raises():
    @tff.federated_computation(SERVER_INT, MODEL_WEIGHTS_TYPE, CLIENTS_FLOAT_SEQUENCE)
    def tuple_next(state, weights, data):
        return (state, client_result(weights, data), server_zero())

    with pytest.raises(errors.TemplateNotMeasuredProcessOutputError):
        client_works.ClientWorkProcess(initialize_fn, tuple_next)


def test_next_return_namedtuple_raises():
    output = collections.namedtuple('MeasuredProcessOutput', ['state', 'result', 'measurements'])

    @tff.federated_computation(SERVER_INT, MODEL_WEIGHTS_TYPE, CLIENTS_FLOAT_SEQUENCE)
    def namedtuple_next(state, weights, data):
        return output(state, client_result(weights, data), server_zero())

    with pytest.raises(errors.TemplateNotMeasuredProcessOutputError):
        client_works.ClientWorkProcess(initialize_fn, namedtuple_next)


def test_next_return_odict_raises():
    @tff.federated_computation(SERVER_INT, MODEL_WEIGHTS_TYPE, CLIENTS_FLOAT_SEQUENCE)
    def odict_next(state, weights, data):
        return collections.OrderedDict(
            state=state, result=client_result(weights, data), measurements=server_zero()
        )

    with pytest.raises(errors.TemplateNotMeasuredProcessOutputError):
        client_works.ClientWorkProcess(initialize_fn, odict_next)


def test_non_federated_init_next_raises():
    init = tff.tf_computation(lambda: 0)

    @tff.tf_computation(np.int32, MODEL_WEIGHTS_TYPE.member, tff.SequenceType(np.float32))
    def next_(state, weights, data):
        return MeasuredProcessOutput(
            state,
            client_works.ClientResult(weights.trainable + data.reduce(0.0, lambda x, y: x + y), ()),
            (),
        )

    with pytest.raises(errors.TemplateNotFederatedError):
        client_works.ClientWorkProcess(init, next_)


def test_init_tuple_of_federated_types_raises():
    init = tff.federated_computation()(lambda: (server_zero(), server_zero()))

    @tff.federated_computation(
        init.type_signature.result, MODEL_WEIGHTS_TYPE, CLIENTS_FLOAT_SEQUENCE
    )
    def next_(state, weights, data):
        return MeasuredProcessOutput(state, client_result(weights, data), server_zero())

    with pytest.raises(errors.TemplateNotFederatedError):
        client_works.ClientWorkProcess(init, next_)


def test_non_server_placed_init_state_raises():
    init = tff.federated_computation(lambda: tff.federated_value(0, tff.CLIENTS))

    @tff.federated_computation(
        init.type_signature.result, MODEL_WEIGHTS_TYPE, CLIENTS_FLOAT_SEQUENCE
    )
    def next_(state, weights, data):
        return MeasuredProcessOutput(state, client_result(weights, data), server_zero())

    with pytest.raises(errors.TemplatePlacementError):
        client_works.ClientWorkProcess(init, next_)


def test_two_param_next_raises():
    @tff.federated_computation(SERVER_INT, MODEL_WEIGHTS_TYPE)
    def next_(state, weights):
        return MeasuredProcessOutput(state, weights.trainable, server_zero())

    with pytest.raises(errors.TemplateNextFnNumArgsError):
        client_works.ClientWorkProcess(initialize_fn, next_)


def test_non_clients_placed_next_weights_param_raises():
    @tff.federated_computation(
        SERVER_INT, tff.FederatedType(MODEL_WEIGHTS_TYPE.member, tff.SERVER), CLIENTS_FLOAT_SEQUENCE
    )
    def next_(state, weights, data):
        return MeasuredProcessOutput(
            state, client_result(tff.federated_broadcast(weights), data), server_zero()
        )

    with pytest.raises(errors.TemplatePlacementError):
        client_works.ClientWorkProcess(initialize_fn, next_)


def test_constructs_with_non_model_weights_parameter():
    weights_type = tff.FederatedType(
        tff.to_type(collections.OrderedDict(trainable=np.float32, non_trainable=())), tff.CLIENTS
    )

    @tff.federated_computation(SERVER_INT, weights_type, CLIENTS_FLOAT_SEQUENCE)
    def next_(state, weights, data):
        return MeasuredProcessOutput(state, client_result(weights, data), server_zero())

    client_works.ClientWorkProcess(initialize_fn, next_)


def test_constructs_with_struct_of_client_data_parameter():
    data_type = tff.FederatedType(
        (
            tff.SequenceType(np.float32),
            (tff.SequenceType(np.float32), tff.SequenceType(np.float32)),
        ),
        tff.CLIENTS,
    )

    @tff.federated_computation(SERVER_INT, MODEL_WEIGHTS_TYPE, data_type)
    def next_(state, unused_weights, unused_data):
        return MeasuredProcessOutput(
            state,
            tff.federated_value(client_works.ClientResult((), ()), tff.CLIENTS),
            server_zero(),
        )

    client_works.ClientWorkProcess(initialize_fn, next_)


def test_non_clients_placed_next_data_param_raises():
    @tff.federated_computation(
        SERVER_INT, MODEL_WEIGHTS_TYPE, tff.FederatedType(tff.SequenceType(np.float32), tff.SERVER)
    )
    def next_(state, weights, data):
        return MeasuredProcessOutput(
            state, client_result(weights, tff.federated_broadcast(data)), server_zero()
        )

    with pytest.raises(errors.TemplatePlacementError):
        client_works.ClientWorkProcess(initialize_fn, next_)


def test_non_sequence_or_struct_next_data_param_raises():
    @tff.federated_computation(SERVER_INT, MODEL_WEIGHTS_TYPE, CLIENTS_FLOAT)
    def next_(state, weights, data):
        return MeasuredProcessOutput(
            state,
            tff.federated_zip(
                client_works.ClientResult(federated_add(weights.trainable, data), client_one())
            ),
            server_zero(),
        )

    with pytest.raises(client_works.ClientDataTypeError):
        client_works.ClientWorkProcess(initialize_fn, next_)


def test_non_clients_placed_next_result_raises():
    @tff.federated_computation(SERVER_INT, MODEL_WEIGHTS_TYPE, CLIENTS_FLOAT_SEQUENCE)
    def next_(state, weights, data):
        return MeasuredProcessOutput(
            state, tff.federated_sum(client_result(weights, data)), server_zero()
        )

    with pytest.raises(errors.TemplatePlacementError):
        client_works.ClientWorkProcess(initialize_fn, next_)


def test_non_zipped_next_result_raises():
    @tff.federated_computation(SERVER_INT, MODEL_WEIGHTS_TYPE, CLIENTS_FLOAT_SEQUENCE)
    def next_(state, weights, data):
        reduced = tff.federated_map(tf_data_sum, data)
        return MeasuredProcessOutput(
            state,
            client_works.ClientResult(federated_add(weights.trainable, reduced), client_one()),
            server_zero(),
        )

    with pytest.raises(errors.TemplatePlacementError):
        client_works.ClientWorkProcess(initialize_fn, next_)


def test_incorrect_client_result_container_raises():
    @tff.federated_computation(SERVER_INT, MODEL_WEIGHTS_TYPE, CLIENTS_FLOAT_SEQUENCE)
    def next_(state, weights, data):
        reduced = tff.federated_map(tf_data_sum, data)
        bad = tff.federated_zip(
            collections.OrderedDict(
                update=federated_add(weights.trainable, reduced), update_weight=client_one()
            )
        )
        return MeasuredProcessOutput(state, bad, server_zero())

    with pytest.raises(client_works.ClientResultTypeError):
        client_works.ClientWorkProcess(initialize_fn, next_)


def test_non_server_placed_next_measurements_raises():
    @tff.federated_computation(SERVER_INT, MODEL_WEIGHTS_TYPE, CLIENTS_FLOAT_SEQUENCE)
    def next_(state, weights, data):
        return MeasuredProcessOutput(
            state, client_result(weights, data), tff.federated_value(1.0, tff.CLIENTS)
        )

    with pytest.raises(errors.TemplatePlacementError):
        client_works.ClientWorkProcess(initialize_fn, next_)


def test_next_runs(tff_stack):
    process = client_works.ClientWorkProcess(
        initialize_fn, next_fn, get_hparams_fn=get_hparams_fn, set_hparams_fn=set_hparams_fn
    )
    weights = ModelWeights(1.0, 2.0)
    data = [tf.data.Dataset.from_tensor_slices(np.arange(n, dtype=np.float32)) for n in (2, 4)]
    output = process.next(process.initialize(), [weights, weights], data)
    assert output.state == 0 and output.measurements == 1
    assert [r.update for r in output.result] == [2.0, 7.0]
    assert [r.update_weight for r in output.result] == [1.0, 1.0]
    assert process.get_hparams(5) == collections.OrderedDict(a=5)
    assert process.set_hparams(5, collections.OrderedDict(a=7)) == 7
