"""Port of TFF's ``tensorflow_federated/python/learning/templates/apply_optimizer_finalizer_test.py``.

No case left out; the Keras-optimizer cases are v0.86's (TFF 0.87 dropped them), with
Keras 3's SGD for TFF's ``tf.keras.optimizers.legacy.SGD`` (Keras 3 has no legacy
optimizers), so the state holds Keras 3's variables: ``[iteration, learning_rate,
slots...]`` where TFF's had ``[iteration, slots...]``.
"""

import collections
import copy

import numpy as np
import pytest
import tensorflow as tf

import simharness as tff
from simharness.learning.models.model_weights import ModelWeights
from simharness.learning.optimizers import optimizer as optimizer_base
from simharness.learning.optimizers import sgdm
from simharness.learning.templates import apply_optimizer_finalizer, finalizers
from simharness.templates import MeasuredProcessOutput

SERVER_FLOAT = tff.FederatedType(np.float32, tff.SERVER)
_MODEL_WEIGHTS_TYPE = tff.to_type(
    ModelWeights(trainable=(np.float32,), non_trainable=(np.float32,))
)
_SERVER_MODEL_WEIGHTS_TYPE = tff.FederatedType(_MODEL_WEIGHTS_TYPE, tff.SERVER)
_STATE_TYPE = tff.to_type(collections.OrderedDict([(optimizer_base.LEARNING_RATE_KEY, np.float32)]))


def _should_reject_update_fn(state_threshold):
    def should_reject_update(state, update):
        reject_update, measurements = apply_optimizer_finalizer.reject_non_finite_update(
            state, update
        )
        measurements['state_large_values'] = 0
        if reject_update:
            return reject_update, measurements
        has_large_values = tf.math.reduce_any(
            [
                tf.math.reduce_any(
                    tf.math.greater(tf.math.abs(t), tf.cast(state_threshold, dtype=t.dtype))
                )
                for t in tf.nest.flatten(state)
            ]
        )
        if has_large_values:
            measurements['state_large_values'] = 1
            return True, measurements
        return False, measurements

    return should_reject_update


def _finalizer(optimizer=None):
    return apply_optimizer_finalizer.build_apply_optimizer_finalizer(
        optimizer or sgdm.build_sgdm(1.0), _MODEL_WEIGHTS_TYPE
    )


def test_initialize_has_expected_type_with_tff_optimizer():
    expected = tff.FunctionType(None, tff.FederatedType(_STATE_TYPE, tff.SERVER))
    assert _finalizer().initialize.type_signature.is_equivalent_to(expected)


def test_next_has_expected_type_with_tff_optimizer():
    state = tff.FederatedType(_STATE_TYPE, tff.SERVER)
    expected = tff.FunctionType(
        collections.OrderedDict(
            state=state,
            weights=_SERVER_MODEL_WEIGHTS_TYPE,
            update=tff.FederatedType(_MODEL_WEIGHTS_TYPE.trainable, tff.SERVER),
        ),
        MeasuredProcessOutput(
            state,
            _SERVER_MODEL_WEIGHTS_TYPE,
            tff.FederatedType(collections.OrderedDict(update_non_finite=np.int32), tff.SERVER),
        ),
    )
    sig = _finalizer().next.type_signature
    assert sig.is_equivalent_to(expected), sig


def test_get_hparams_has_expected_type_with_tff_optimizer():
    expected = tff.FunctionType(_STATE_TYPE, _STATE_TYPE)
    assert _finalizer().get_hparams.type_signature.is_equivalent_to(expected)


def test_set_hparams_has_expected_type_with_tff_optimizer():
    expected = tff.FunctionType(
        tff.StructType([('state', _STATE_TYPE), ('hparams', _STATE_TYPE)]), _STATE_TYPE
    )
    sig = _finalizer().set_hparams.type_signature
    assert sig.is_equivalent_to(expected), sig


@pytest.mark.parametrize(
    'bad_type',
    [
        tff.TensorType(np.float32),
        _SERVER_MODEL_WEIGHTS_TYPE,
        tff.to_type(ModelWeights(SERVER_FLOAT, SERVER_FLOAT)),
        tff.to_type((np.float32, np.float32)),
        tff.FunctionType(None, _SERVER_MODEL_WEIGHTS_TYPE),
        tff.SequenceType(_SERVER_MODEL_WEIGHTS_TYPE.member),
    ],
    ids=[
        'not_struct',
        'federated_type',
        'model_weights_of_federated_types',
        'not_model_weights',
        'function_type',
        'sequence_type',
    ],
)
def test_incorrect_value_type_raises(bad_type):
    with pytest.raises(TypeError):
        apply_optimizer_finalizer.build_apply_optimizer_finalizer(sgdm.build_sgdm(1.0), bad_type)


def test_custom_should_reject_update_builds():
    finalizer = apply_optimizer_finalizer.build_apply_optimizer_finalizer(
        sgdm.build_sgdm(1.0), _MODEL_WEIGHTS_TYPE, _should_reject_update_fn(100)
    )
    assert isinstance(finalizer, finalizers.FinalizerProcess)


def test_execution_with_stateless_tff_optimizer(tff_stack):
    finalizer = _finalizer()
    weights = ModelWeights(trainable=(1.0,), non_trainable=(2.0,))
    update = (0.1,)
    state = finalizer.initialize()
    for i in range(5):
        output = finalizer.next(state, weights, update)
        state, weights = output.state, output.result
        assert state[optimizer_base.LEARNING_RATE_KEY] == 1.0
        np.testing.assert_allclose(weights.trainable, (1.0 - 0.1 * (i + 1),), rtol=1e-6)
        assert output.measurements == collections.OrderedDict(update_non_finite=0)


def _init_next(optimizer, reject):
    return apply_optimizer_finalizer._build_tff_optimizer_initialize_and_next(
        _MODEL_WEIGHTS_TYPE, optimizer=optimizer, should_reject_update=reject
    )


@pytest.mark.parametrize('bad', [float('inf'), float('nan')], ids=['inf', 'nan'])
def test_tff_finalizer_execution_with_non_finite_update(bad):
    init_fn, next_fn = _init_next(
        sgdm.build_sgdm(1.0), apply_optimizer_finalizer.reject_non_finite_update
    )
    initial_state = init_fn()
    state, weights, measurements = next_fn(initial_state, (0.0,), (bad,))
    assert state == initial_state
    np.testing.assert_allclose(weights, (0.0,))
    assert measurements == collections.OrderedDict(update_non_finite=1)


@pytest.mark.parametrize(
    'update, rejected',
    [(11.0, True), (10.0, False), (5.0, False)],
    ids=[
        'larger_than_threshold_rejects_update',
        'equal_to_threshold_accepts_update',
        'less_than_threshold_accepts_update',
    ],
)
def test_tff_finalizer_execution_with_custom_should_reject_update(update, rejected):
    init_fn, next_fn = _init_next(
        sgdm.build_sgdm(learning_rate=0.1, momentum=0.1), _should_reject_update_fn(10)
    )
    initial_state = init_fn()
    state, weights, measurements = next_fn(initial_state, (0.0,), (update,))
    same = np.allclose(weights, (0.0,)) and all(
        np.allclose(a, b) for a, b in zip(tf.nest.flatten(state), tf.nest.flatten(initial_state))
    )
    assert same == rejected
    assert measurements == collections.OrderedDict(
        update_non_finite=0, state_large_values=int(rejected)
    )


def test_execution_with_stateful_tff_optimizer(tff_stack):
    momentum = 0.5
    finalizer = _finalizer(sgdm.build_sgdm(1.0, momentum=momentum))
    weights = ModelWeights(trainable=(1.0,), non_trainable=(2.0,))
    update = (0.1,)
    expected_velocity = 0.0
    state = finalizer.initialize()
    for _ in range(5):
        output = finalizer.next(state, weights, update)
        state = output.state
        expected_velocity = expected_velocity * momentum + update[0]
        np.testing.assert_allclose(state['accumulator'], (expected_velocity,), rtol=1e-6)
        np.testing.assert_allclose(
            output.result.trainable, (weights.trainable[0] - expected_velocity,), rtol=1e-6
        )
        assert output.measurements == collections.OrderedDict(update_non_finite=0)


def test_get_hparams_with_tff_optimizer():
    finalizer = _finalizer(sgdm.build_sgdm(learning_rate=1.0, momentum=0.9))
    hparams = finalizer.get_hparams(finalizer.initialize())
    assert isinstance(hparams, collections.OrderedDict)
    assert list(hparams) == ['learning_rate', 'momentum']
    np.testing.assert_allclose(
        [hparams['learning_rate'], hparams['momentum']], [1.0, 0.9], rtol=1e-6
    )


def test_set_hparams_with_tff_optimizer():
    finalizer = _finalizer(sgdm.build_sgdm(learning_rate=1.0, momentum=0.9))
    state = finalizer.initialize()
    hparams = collections.OrderedDict(learning_rate=0.5, momentum=0.4)
    updated = finalizer.set_hparams(state, hparams)
    assert isinstance(updated, collections.OrderedDict)
    expected = copy.deepcopy(state)
    expected.update(hparams)
    assert list(updated) == list(expected)
    for k in expected:
        np.testing.assert_allclose(updated[k], expected[k], rtol=1e-6)


# -- Keras optimizers (TFF v0.86) ----------------------------------------------------------

_KERAS_SGD_STATE_TYPE = tff.to_type([np.int64, np.float32])  # iteration, learning_rate


def _keras_sgd():
    return tf.keras.optimizers.SGD(learning_rate=1.0)


def test_types_with_keras_optimizer():
    """TFF's four ``*_has_expected_type_with_keras_optimizer`` cases, on one finalizer."""
    finalizer = _finalizer(_keras_sgd)
    server_state = tff.FederatedType(_KERAS_SGD_STATE_TYPE, tff.SERVER)
    assert finalizer.initialize.type_signature.is_equivalent_to(
        tff.FunctionType(None, server_state)
    )
    expected_next = tff.FunctionType(
        collections.OrderedDict(
            state=server_state,
            weights=_SERVER_MODEL_WEIGHTS_TYPE,
            update=tff.FederatedType(_MODEL_WEIGHTS_TYPE.trainable, tff.SERVER),
        ),
        MeasuredProcessOutput(
            server_state,
            _SERVER_MODEL_WEIGHTS_TYPE,
            tff.FederatedType(collections.OrderedDict(update_non_finite=np.int32), tff.SERVER),
        ),
    )
    assert finalizer.next.type_signature.is_equivalent_to(expected_next)
    no_hparams = tff.to_type(collections.OrderedDict())
    assert finalizer.get_hparams.type_signature.is_equivalent_to(
        tff.FunctionType(_KERAS_SGD_STATE_TYPE, no_hparams)
    )
    assert finalizer.set_hparams.type_signature.is_equivalent_to(
        tff.FunctionType(
            tff.StructType([('state', _KERAS_SGD_STATE_TYPE), ('hparams', no_hparams)]),
            _KERAS_SGD_STATE_TYPE,
        )
    )


def test_unexpected_optimizer_fn_raises():
    with pytest.raises(TypeError):
        apply_optimizer_finalizer.build_apply_optimizer_finalizer(
            tf.keras.optimizers.SGD(1.0), _MODEL_WEIGHTS_TYPE
        )


def test_custom_should_reject_update_builds_with_keras_optimizer():
    finalizer = apply_optimizer_finalizer.build_apply_optimizer_finalizer(
        _keras_sgd, _MODEL_WEIGHTS_TYPE, _should_reject_update_fn(100)
    )
    assert isinstance(finalizer, finalizers.FinalizerProcess)


def test_execution_with_keras_sgd_optimizer(tff_stack):
    finalizer = _finalizer(_keras_sgd)
    weights = ModelWeights(trainable=(1.0,), non_trainable=(2.0,))
    state = finalizer.initialize()
    for i in range(5):
        output = finalizer.next(state, weights, (0.1,))
        state, weights = output.state, output.result
        assert [int(state[0]), float(state[1])] == [i + 1, 1.0]  # the step count; the rate
        np.testing.assert_allclose(weights.trainable, (1.0 - 0.1 * (i + 1),), rtol=1e-6)
        assert output.measurements == collections.OrderedDict(update_non_finite=0)


def _keras_init_next(optimizer_fn, reject):
    return apply_optimizer_finalizer._build_keras_optimizer_initialize_and_next(
        _MODEL_WEIGHTS_TYPE, optimizer_fn=optimizer_fn, should_reject_update=reject
    )


def test_keras_finalizer_execution_with_non_finite_update():
    init_fn, next_fn = _keras_init_next(
        tf.keras.optimizers.SGD, apply_optimizer_finalizer.reject_non_finite_update
    )
    initial_state = init_fn()
    for bad in (float('inf'), float('nan')):
        state, weights, measurements = next_fn(initial_state, (0.0,), (bad,))
        for a, b in zip(state, initial_state):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(weights, (0.0,))
        assert measurements == collections.OrderedDict(update_non_finite=1)


def test_keras_finalizer_execution_with_custom_should_reject_update():
    init_fn, next_fn = _keras_init_next(tf.keras.optimizers.Adam, _should_reject_update_fn(10))
    initial_state = init_fn()
    for update, rejected in ((101.0, True), (100.0, False), (50.0, False)):
        state, weights, measurements = next_fn(initial_state, (0.0,), (update,))
        same = np.allclose(weights, (0.0,)) and all(
            np.allclose(a, b) for a, b in zip(state, initial_state)
        )
        assert same == rejected, update
        assert measurements == collections.OrderedDict(
            update_non_finite=0, state_large_values=int(rejected)
        )


def test_execution_with_stateful_keras_optimizer(tff_stack):
    momentum = 0.5
    finalizer = _finalizer(lambda: tf.keras.optimizers.SGD(learning_rate=1.0, momentum=momentum))
    weights = ModelWeights(trainable=(1.0,), non_trainable=(2.0,))
    update = (0.1,)
    expected_velocity = 0.0
    state = finalizer.initialize()
    for i in range(5):
        output = finalizer.next(state, weights, update)
        state = output.state
        expected_velocity = expected_velocity * momentum + update[0]
        # Keras keeps the negative of tff.learning.optimizers' SGDM velocity.
        np.testing.assert_allclose(
            [state[0], state[1], state[2]], [i + 1, 1.0, -expected_velocity], rtol=1e-6
        )
        np.testing.assert_allclose(
            output.result.trainable, (weights.trainable[0] - expected_velocity,), rtol=1e-6
        )
        assert output.measurements == collections.OrderedDict(update_non_finite=0)
        weights = output.result


def test_get_and_set_hparams_with_keras_optimizer():
    finalizer = _finalizer(lambda: tf.keras.optimizers.SGD(learning_rate=1.0, momentum=0.9))
    state = finalizer.initialize()
    hparams = finalizer.get_hparams(state)
    assert isinstance(hparams, collections.OrderedDict) and hparams == collections.OrderedDict()
    updated = finalizer.set_hparams(state, collections.OrderedDict())
    for a, b in zip(updated, state):
        np.testing.assert_array_equal(a, b)
