"""Port of TFF's ``tensorflow_federated/python/learning/templates/finalizers_test.py``.

No case left out; `test_identity_finalizer_runs` (ours) runs `build_identity_finalizer`.
"""

import collections

import numpy as np
import pytest
import tensorflow as tf

import simharness as tff
from simharness.learning.models.model_weights import ModelWeights
from simharness.learning.templates import finalizers
from simharness.templates import MeasuredProcessOutput, errors

SERVER_INT = tff.FederatedType(np.int32, tff.SERVER)
SERVER_FLOAT = tff.FederatedType(np.float32, tff.SERVER)
CLIENTS_FLOAT = tff.FederatedType(np.float32, tff.CLIENTS)
MODEL_WEIGHTS_TYPE = tff.FederatedType(
    tff.to_type(ModelWeights(np.float32, np.float32)), tff.SERVER
)


def server_zero():
    return tff.federated_value(0, tff.SERVER)


def federated_add(a, b):
    return tff.federated_map(tff.tf_computation(lambda x, y: x + y), (a, b))


@tff.federated_computation()
def initialize_fn():
    return server_zero()


def finalizer_result(weights, update):
    return tff.federated_zip(
        ModelWeights(federated_add(weights.trainable, update), weights.non_trainable)
    )


@tff.federated_computation(SERVER_INT, MODEL_WEIGHTS_TYPE, SERVER_FLOAT)
def next_fn(state, weights, update):
    return MeasuredProcessOutput(
        state, finalizer_result(weights, update), tff.federated_value(1, tff.SERVER)
    )


def test_construction_does_not_raise():
    finalizers.FinalizerProcess(initialize_fn, next_fn)


def test_construction_with_empty_state_does_not_raise():
    init = tff.federated_computation()(lambda: tff.federated_value((), tff.SERVER))
    weights_type = tff.FederatedType(
        tff.StructType([('trainable', np.float32), ('non_trainable', ())], container=ModelWeights),
        tff.SERVER,
    )

    @tff.federated_computation(init.type_signature.result, weights_type, SERVER_FLOAT)
    def next_(state, weights, update):
        return MeasuredProcessOutput(
            state, finalizer_result(weights, update), tff.federated_value(1, tff.SERVER)
        )

    finalizers.FinalizerProcess(init, next_)


def test_init_not_tff_computation_raises():
    with pytest.raises(TypeError, match=r'Expected .*\.Computation, .*'):
        finalizers.FinalizerProcess(initialize_fn=lambda: 0, next_fn=next_fn)


def test_next_not_tff_computation_raises():
    with pytest.raises(TypeError, match=r'Expected .*\.Computation, .*'):
        finalizers.FinalizerProcess(
            initialize_fn=initialize_fn,
            next_fn=lambda state, w, u: MeasuredProcessOutput(state, w + u, ()),
        )


def test_init_param_not_empty_raises():
    one_arg = tff.federated_computation(SERVER_INT)(lambda x: x)
    with pytest.raises(errors.TemplateInitFnParamNotEmptyError):
        finalizers.FinalizerProcess(one_arg, next_fn)


def test_init_state_not_assignable():
    float_init = tff.federated_computation()(lambda: tff.federated_value(0.0, tff.SERVER))
    with pytest.raises(errors.TemplateStateNotAssignableError):
        finalizers.FinalizerProcess(float_init, next_fn)


def test_next_state_not_assignable():
    @tff.federated_computation(SERVER_INT, MODEL_WEIGHTS_TYPE, SERVER_FLOAT)
    def float_next(state, weights, update):
        del state
        return MeasuredProcessOutput(
            tff.federated_value(0.0, tff.SERVER),
            finalizer_result(weights, update),
            tff.federated_value(1, tff.SERVER),
        )

    with pytest.raises(errors.TemplateStateNotAssignableError):
        finalizers.FinalizerProcess(initialize_fn, float_next)


def test_next_return_tuple_raises():
    @tff.federated_computation(SERVER_INT, MODEL_WEIGHTS_TYPE, SERVER_FLOAT)
    def tuple_next(state, weights, update):
        return state, finalizer_result(weights, update), server_zero()

    with pytest.raises(errors.TemplateNotMeasuredProcessOutputError):
        finalizers.FinalizerProcess(initialize_fn, tuple_next)


def test_next_return_namedtuple_raises():
    output = collections.namedtuple('MeasuredProcessOutput', ['state', 'result', 'measurements'])

    @tff.federated_computation(SERVER_INT, MODEL_WEIGHTS_TYPE, SERVER_FLOAT)
    def namedtuple_next(state, weights, update):
        return output(state, finalizer_result(weights, update), server_zero())

    with pytest.raises(errors.TemplateNotMeasuredProcessOutputError):
        finalizers.FinalizerProcess(initialize_fn, namedtuple_next)


def test_next_return_odict_raises():
    @tff.federated_computation(SERVER_INT, MODEL_WEIGHTS_TYPE, SERVER_FLOAT)
    def odict_next(state, weights, update):
        return collections.OrderedDict(
            state=state, result=finalizer_result(weights, update), measurements=server_zero()
        )

    with pytest.raises(errors.TemplateNotMeasuredProcessOutputError):
        finalizers.FinalizerProcess(initialize_fn, odict_next)


def test_non_federated_init_next_raises():
    init = tff.tf_computation(lambda: 0)
    weights_type = tff.StructType(
        [('trainable', np.float32), ('non_trainable', ())], container=ModelWeights
    )

    @tff.tf_computation(np.int32, weights_type, np.float32)
    def next_(state, weights, update):
        return MeasuredProcessOutput(state, ModelWeights(weights.trainable + update, ()), 0)

    with pytest.raises(errors.TemplateNotFederatedError):
        finalizers.FinalizerProcess(init, next_)


def test_init_tuple_of_federated_types_raises():
    init = tff.federated_computation()(lambda: (server_zero(), server_zero()))

    @tff.federated_computation(init.type_signature.result, MODEL_WEIGHTS_TYPE, SERVER_FLOAT)
    def next_(state, weights, update):
        return MeasuredProcessOutput(state, finalizer_result(weights, update), server_zero())

    with pytest.raises(errors.TemplateNotFederatedError):
        finalizers.FinalizerProcess(init, next_)


def test_non_server_placed_init_state_raises():
    init = tff.federated_computation(lambda: tff.federated_value(0, tff.CLIENTS))

    @tff.federated_computation(
        tff.FederatedType(np.int32, tff.CLIENTS), MODEL_WEIGHTS_TYPE, SERVER_FLOAT
    )
    def next_(state, weights, update):
        return MeasuredProcessOutput(state, finalizer_result(weights, update), server_zero())

    with pytest.raises(errors.TemplatePlacementError):
        finalizers.FinalizerProcess(init, next_)


def test_two_param_next_raises():
    @tff.federated_computation(SERVER_INT, MODEL_WEIGHTS_TYPE)
    def next_(state, weights):
        return MeasuredProcessOutput(state, weights, server_zero())

    with pytest.raises(errors.TemplateNextFnNumArgsError):
        finalizers.FinalizerProcess(initialize_fn, next_)


def test_non_server_placed_next_weight_param_raises():
    @tff.federated_computation(
        SERVER_INT, tff.FederatedType(MODEL_WEIGHTS_TYPE.member, tff.CLIENTS), SERVER_FLOAT
    )
    def next_(state, weights, update):
        return MeasuredProcessOutput(
            state, finalizer_result(tff.federated_sum(weights), update), server_zero()
        )

    with pytest.raises(errors.TemplatePlacementError):
        finalizers.FinalizerProcess(initialize_fn, next_)


def test_constructs_with_non_model_weights_parameter():
    weights_type = tff.FederatedType(
        tff.to_type(collections.OrderedDict(trainable=np.float32, non_trainable=())), tff.SERVER
    )

    @tff.federated_computation(SERVER_INT, weights_type, SERVER_FLOAT)
    def next_(state, weights, update):
        del update
        return MeasuredProcessOutput(state, weights, server_zero())

    finalizers.FinalizerProcess(initialize_fn, next_)


def test_non_server_placed_next_update_param_raises():
    @tff.federated_computation(SERVER_INT, MODEL_WEIGHTS_TYPE, CLIENTS_FLOAT)
    def next_(state, weights, update):
        return MeasuredProcessOutput(
            state, finalizer_result(weights, tff.federated_sum(update)), server_zero()
        )

    with pytest.raises(errors.TemplatePlacementError):
        finalizers.FinalizerProcess(initialize_fn, next_)


def test_non_server_placed_next_result_raises():
    @tff.federated_computation(SERVER_INT, MODEL_WEIGHTS_TYPE, SERVER_FLOAT)
    def next_(state, weights, update):
        return MeasuredProcessOutput(
            state, tff.federated_broadcast(finalizer_result(weights, update)), server_zero()
        )

    with pytest.raises(errors.TemplatePlacementError):
        finalizers.FinalizerProcess(initialize_fn, next_)


def test_result_not_assignable_to_weight_raises():
    bad_cast_fn = tff.tf_computation(
        lambda x: tf.nest.map_structure(lambda y: tf.cast(y, tf.float64), x)
    )

    @tff.federated_computation(SERVER_INT, MODEL_WEIGHTS_TYPE, SERVER_FLOAT)
    def next_(state, weights, update):
        return MeasuredProcessOutput(
            state, tff.federated_map(bad_cast_fn, finalizer_result(weights, update)), server_zero()
        )

    with pytest.raises(finalizers.FinalizerResultTypeError):
        finalizers.FinalizerProcess(initialize_fn, next_)


def test_non_server_placed_next_measurements_raises():
    @tff.federated_computation(SERVER_INT, MODEL_WEIGHTS_TYPE, SERVER_FLOAT)
    def next_(state, weights, update):
        return MeasuredProcessOutput(
            state, finalizer_result(weights, update), tff.federated_value(1.0, tff.CLIENTS)
        )

    with pytest.raises(errors.TemplatePlacementError):
        finalizers.FinalizerProcess(initialize_fn, next_)


def test_identity_finalizer_runs(tff_stack):
    weights_type = MODEL_WEIGHTS_TYPE.member
    process = finalizers.build_identity_finalizer(weights_type, tff.to_type(np.float32))
    output = process.next(process.initialize(), ModelWeights(1.0, 2.0), 3.0)
    assert output.state == () and output.measurements == ()
    assert output.result == ModelWeights(1.0, 2.0)
