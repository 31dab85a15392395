"""Port of TFF's ``tensorflow_federated/python/learning/templates/learning_process_test.py``.

No case left out; `test_next_runs_on_client_datasets` is ours (TFF's module
only constructs processes): the test process run on a list of datasets.
"""

import collections

import numpy as np
import pytest
import tensorflow as tf

import simharness as tff
from simharness.learning.templates import learning_process
from simharness.templates import errors

LearningProcessOutput = learning_process.LearningProcessOutput
SequenceType = tff.SequenceType
SERVER_INT = tff.FederatedType(np.int32, tff.SERVER)
CLIENTS_INT_SEQ = tff.FederatedType(SequenceType(np.int32), tff.CLIENTS)


def pass_through_get_model_weights(state_type):
    @tff.federated_computation(state_type)
    def get_model_weights(state):
        return state

    return get_model_weights


def take_arg_set_model_weights(state_type, model_type):
    @tff.federated_computation(state_type, model_type)
    def set_model_weights(state, model_weights):
        del state
        return model_weights

    return set_model_weights


@tff.federated_computation
def init_fn():
    return tff.federated_value(0, tff.SERVER)


@tff.tf_computation(SequenceType(np.int32))
@tf.function
def sum_dataset(dataset):
    total = tf.zeros(shape=dataset.element_spec.shape, dtype=dataset.element_spec.dtype)
    for i in iter(dataset):
        total += i
    return total


@tff.tf_computation
def add(x, y):
    return tf.add(x, y)


@tff.federated_computation(SERVER_INT, CLIENTS_INT_SEQ)
def next_fn(state, data):
    server_sum = tff.federated_sum(tff.federated_map(sum_dataset, data))
    result = tff.federated_map(add, (state, server_sum))
    return LearningProcessOutput(state=result, metrics=tff.federated_value((), tff.SERVER))


get_weights_fn = pass_through_get_model_weights(np.int32)
set_weights_fn = take_arg_set_model_weights(np.int32, np.int32)


def _process(init=init_fn, next_=next_fn, get=get_weights_fn, set_=set_weights_fn):
    return learning_process.LearningProcess(init, next_, get, set_)


def test_construction_does_not_raise():
    _process()


def test_learning_process_can_be_reconstructed():
    p = _process()
    learning_process.LearningProcess(p.initialize, p.next, p.get_model_weights, p.set_model_weights)


def test_construction_with_empty_state_does_not_raise():
    @tff.federated_computation
    def empty_init():
        return tff.federated_value((), tff.SERVER)

    @tff.federated_computation(tff.FederatedType((), tff.SERVER), CLIENTS_INT_SEQ)
    def next_(state, value):
        del value
        return LearningProcessOutput(state=state, metrics=tff.federated_value((), tff.SERVER))

    _process(
        empty_init, next_, pass_through_get_model_weights(()), take_arg_set_model_weights((), ())
    )


def test_construction_with_unknown_dimension_does_not_raise():
    @tff.federated_computation
    def init():
        return tff.federated_eval(
            tff.tf_computation(lambda: tf.constant([], tf.string)), tff.SERVER
        )

    string_type = tff.TensorType(np.str_, [None])

    @tff.federated_computation(
        tff.FederatedType(string_type, tff.SERVER),
        tff.FederatedType(SequenceType(np.str_), tff.CLIENTS),
    )
    def next_(state, datasets):
        del datasets
        return LearningProcessOutput(state, tff.federated_value((), tff.SERVER))

    _process(
        init,
        next_,
        pass_through_get_model_weights(string_type),
        take_arg_set_model_weights(string_type, string_type),
    )


def test_construction_with_nested_datasets_does_not_raise():
    @tff.federated_computation
    def init():
        return tff.federated_eval(
            tff.tf_computation(lambda: tf.constant(0.0, tf.float32)), tff.SERVER
        )

    datasets_type = (SequenceType(np.str_), (SequenceType(np.str_), SequenceType(np.str_)))

    @tff.federated_computation(
        tff.FederatedType(np.float32, tff.SERVER), tff.FederatedType(datasets_type, tff.CLIENTS)
    )
    def next_(state, datasets):
        del datasets
        return LearningProcessOutput(state, tff.federated_value((), tff.SERVER))

    _process(
        init,
        next_,
        pass_through_get_model_weights(np.float32),
        take_arg_set_model_weights(np.float32, np.float32),
    )


def test_init_not_tff_computation_raises():
    with pytest.raises(TypeError, match=r'Expected .*\.Computation, .*'):
        _process(init=lambda: 0)


def test_next_not_tff_computation_raises():
    with pytest.raises(TypeError, match=r'Expected .*\.Computation, .*'):
        _process(next_=lambda state, client_data: LearningProcessOutput(state, ()))


def test_init_param_not_empty_raises():
    @tff.federated_computation(SERVER_INT)
    def one_arg_init(x):
        return x

    with pytest.raises(errors.TemplateInitFnParamNotEmptyError):
        _process(init=one_arg_init)


def test_init_state_not_federated():
    @tff.federated_computation
    def float_init():
        return 0.0

    with pytest.raises(errors.TemplateStateNotAssignableError):
        _process(init=float_init)


def test_next_state_not_federated():
    with pytest.raises(errors.TemplateStateNotAssignableError):
        _process(next_=pass_through_get_model_weights(np.float32))


def test_init_fn_with_client_placed_state_raises():
    @tff.federated_computation
    def init():
        return tff.federated_value(0, tff.CLIENTS)

    @tff.federated_computation(tff.FederatedType(np.int32, tff.CLIENTS), CLIENTS_INT_SEQ)
    def next_(state, client_values):
        return LearningProcessOutput(state, client_values)

    with pytest.raises(learning_process.LearningProcessPlacementError):
        _process(init, next_)


def _summed(client_values):
    return tff.federated_sum(tff.federated_map(sum_dataset, client_values))


def test_next_return_tuple_raises():
    @tff.federated_computation(SERVER_INT, CLIENTS_INT_SEQ)
    def tuple_next(state, client_values):
        return (state, _summed(client_values))

    with pytest.raises(learning_process.LearningProcessOutputError):
        _process(next_=tuple_next)


def test_next_return_namedtuple_raises():
    output = collections.namedtuple('LearningProcessOutput', ['state', 'metrics'])

    @tff.federated_computation(SERVER_INT, CLIENTS_INT_SEQ)
    def namedtuple_next(state, client_values):
        return output(state, _summed(client_values))

    with pytest.raises(learning_process.LearningProcessOutputError):
        _process(next_=namedtuple_next)


def test_next_return_odict_raises():
    @tff.federated_computation(SERVER_INT, CLIENTS_INT_SEQ)
    def odict_next(state, client_values):
        return collections.OrderedDict(state=state, metrics=_summed(client_values))

    with pytest.raises(learning_process.LearningProcessOutputError):
        _process(next_=odict_next)


def test_next_fn_with_one_parameter_raises():
    @tff.federated_computation(SERVER_INT)
    def next_(state):
        return LearningProcessOutput(state, 0)

    with pytest.raises(errors.TemplateNextFnNumArgsError):
        _process(next_=next_)


def test_next_fn_with_three_parameters_raises():
    @tff.federated_computation(SERVER_INT, CLIENTS_INT_SEQ, SERVER_INT)
    def next_(state, client_values, second_state):
        del second_state
        return LearningProcessOutput(state, _summed(client_values))

    with pytest.raises(errors.TemplateNextFnNumArgsError):
        _process(next_=next_)


def test_next_fn_with_server_placed_second_arg_raises():
    @tff.federated_computation(SERVER_INT, tff.FederatedType(SequenceType(np.int32), tff.SERVER))
    def next_(state, server_values):
        return LearningProcessOutput(state, tff.federated_map(sum_dataset, server_values))

    with pytest.raises(learning_process.LearningProcessPlacementError):
        _process(next_=next_)


def test_next_fn_with_client_placed_metrics_result_raises():
    @tff.federated_computation(SERVER_INT, CLIENTS_INT_SEQ)
    def next_(state, metrics):
        return LearningProcessOutput(state, metrics)

    with pytest.raises(learning_process.LearningProcessPlacementError):
        _process(next_=next_)


def test_non_tff_computation_get_model_weights_raises():
    with pytest.raises(TypeError, match=r'Expected .*\.Computation, .*'):
        _process(get=lambda x: x)


def test_non_functional_get_model_weights_raises():
    with pytest.raises(TypeError):
        _process(get=tff.FederatedType(np.int32, tff.SERVER))


def test_federated_get_model_weights_raises():
    bad = pass_through_get_model_weights(tff.FederatedType(np.float32, tff.SERVER))
    with pytest.raises(learning_process.GetModelWeightsTypeSignatureError):
        _process(get=bad)


def test_get_model_weights_param_not_equivalent_to_next_fn():
    with pytest.raises(learning_process.GetModelWeightsTypeSignatureError):
        _process(get=pass_through_get_model_weights(np.float32))


def test_set_model_weights_param_not_equivalent_to_next_fn():
    with pytest.raises(learning_process.SetModelWeightsTypeSignatureError):
        _process(set_=take_arg_set_model_weights(np.float32, np.int32))


def test_set_model_weights_result_not_assignable():
    with pytest.raises(learning_process.SetModelWeightsTypeSignatureError):
        _process(set_=take_arg_set_model_weights(np.int32, np.float32))


def test_next_runs_on_client_datasets(tff_stack):
    p = _process()
    state = p.initialize()
    datasets = [tf.data.Dataset.from_tensor_slices(np.arange(n, dtype=np.int32)) for n in (3, 4, 5)]
    state, metrics = p.next(state, datasets)
    assert state == 3 + 6 + 10
    assert metrics == ()
    assert p.get_model_weights(state) == state
    assert p.get_hparams(state) == collections.OrderedDict()
    assert p.set_hparams(state, collections.OrderedDict()) == state
