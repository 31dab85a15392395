"""Port of TFF's ``tensorflow_federated/python/learning/templates/composers_test.py``.

No case left out. The Keras model of `test_get_set_model_weights_keras_model`
is `keras_linear_model` (TFF's ``build_linear_regression_keras_functional_model``
is the same Dense(1) layer).
"""

import collections

import numpy as np
import pytest
import tensorflow as tf

import simharness as tff
from simharness.aggregators import mean, sum_factory
from simharness.learning.client_weight_lib import ClientWeighting
from simharness.learning.models import model_weights as model_weights_lib
from simharness.learning.optimizers import sgdm
from simharness.learning.templates import (
    apply_optimizer_finalizer,
    client_works,
    composers,
    distributors,
    finalizers,
    learning_process,
    model_delta_client_work,
)
from simharness.templates import MeasuredProcess, MeasuredProcessOutput
from tests.tff.learning.models.model_examples import LinearRegression, keras_linear_model

FLOAT_TYPE = tff.TensorType(np.float32)
MODEL_WEIGHTS_TYPE = tff.to_type(model_weights_lib.ModelWeights(FLOAT_TYPE, ()))
CLIENTS_SEQUENCE_FLOAT_TYPE = tff.FederatedType(tff.SequenceType(FLOAT_TYPE), tff.CLIENTS)


def empty_at_server():
    return tff.federated_value((), tff.SERVER)


@tff.federated_computation()
def empty_init_fn():
    return empty_at_server()


@tff.tf_computation()
def init_model_weights_fn():
    return model_weights_lib.ModelWeights(trainable=tf.constant(1.0), non_trainable=())


def make_distributor():
    @tff.federated_computation(
        empty_init_fn.type_signature.result, tff.FederatedType(MODEL_WEIGHTS_TYPE, tff.SERVER)
    )
    def next_fn(state, value):
        return MeasuredProcessOutput(state, tff.federated_broadcast(value), empty_at_server())

    return distributors.DistributionProcess(empty_init_fn, next_fn)


def make_client_work():
    @tff.tf_computation()
    def make_result(value, data):
        return client_works.ClientResult(
            update=value.trainable, update_weight=data.reduce(0.0, lambda x, y: x + y)
        )

    @tff.federated_computation(
        empty_init_fn.type_signature.result,
        tff.FederatedType(MODEL_WEIGHTS_TYPE, tff.CLIENTS),
        CLIENTS_SEQUENCE_FLOAT_TYPE,
    )
    def next_fn(state, value, client_data):
        result = tff.federated_map(make_result, (value, client_data))
        return MeasuredProcessOutput(state, result, empty_at_server())

    return client_works.ClientWorkProcess(empty_init_fn, next_fn)


def make_aggregator():
    return mean.MeanFactory().create(FLOAT_TYPE, FLOAT_TYPE)


def make_finalizer():
    @tff.federated_computation(
        empty_init_fn.type_signature.result,
        tff.FederatedType(MODEL_WEIGHTS_TYPE, tff.SERVER),
        tff.FederatedType(FLOAT_TYPE, tff.SERVER),
    )
    def next_fn(state, weights, updates):
        new_weights = tff.federated_map(
            tff.tf_computation(lambda x, y: x + y), (weights.trainable, updates)
        )
        new_weights = tff.federated_zip(model_weights_lib.ModelWeights(new_weights, ()))
        return MeasuredProcessOutput(state, new_weights, empty_at_server())

    return finalizers.FinalizerProcess(empty_init_fn, next_fn)


def _compose(
    init=init_model_weights_fn, distributor=None, client_work=None, aggregator=None, finalizer=None
):
    return composers.compose_learning_process(
        init,
        distributor or make_distributor(),
        client_work or make_client_work(),
        aggregator or make_aggregator(),
        finalizer or make_finalizer(),
    )


def test_learning_process_composes(tff_stack):
    process = _compose()
    assert isinstance(process, learning_process.LearningProcess)
    state_type = process.initialize.type_signature.result.member
    assert state_type.container is composers.LearningAlgorithmState
    assert state_type.global_model_weights == MODEL_WEIGHTS_TYPE
    metrics_type = process.next.type_signature.result.metrics.member
    assert metrics_type.names == ('distributor', 'client_work', 'aggregator', 'finalizer')
    # ours: a round (new weights = 1 + the mean update, 1.0)
    datasets = [tf.data.Dataset.from_tensor_slices(np.ones([n], np.float32)) for n in (1, 3)]
    state, _ = process.next(process.initialize(), datasets)
    assert state.global_model_weights.trainable == 2.0


def test_one_arg_computation_init_raises():
    @tff.tf_computation(tff.TensorType(np.float32))
    def init(x):
        return model_weights_lib.ModelWeights(trainable=x, non_trainable=())

    with pytest.raises(TypeError, match='Computation'):
        _compose(init=init)


def test_not_tff_computation_init_raises():
    def init():
        return model_weights_lib.ModelWeights(trainable=tf.constant(1.0), non_trainable=())

    with pytest.raises(TypeError, match='Computation'):
        _compose(init=init)


def test_federated_init_raises():
    @tff.federated_computation()
    def init():
        return tff.federated_eval(init_model_weights_fn, tff.SERVER)

    with pytest.raises(TypeError, match='unplaced'):
        _compose(init=init)


def test_not_distributor_type_raises():
    d = make_distributor()
    with pytest.raises(TypeError, match='DistributionProcess'):
        _compose(distributor=MeasuredProcess(d.initialize, d.next))


def test_not_client_work_type_raises():
    c = make_client_work()
    with pytest.raises(TypeError, match='ClientWorkProcess'):
        _compose(client_work=MeasuredProcess(c.initialize, c.next))


def test_not_aggregator_type_raises():
    a = make_aggregator()
    with pytest.raises(TypeError, match='AggregationProcess'):
        _compose(aggregator=MeasuredProcess(a.initialize, a.next))


def test_unweighted_aggregator_raises():
    with pytest.raises(TypeError, match='weighted'):
        _compose(aggregator=sum_factory.SumFactory().create(FLOAT_TYPE))


def test_not_finalizer_type_raises():
    f = make_finalizer()
    with pytest.raises(TypeError, match='FinalizerProcess'):
        _compose(finalizer=MeasuredProcess(f.initialize, f.next))


def _test_data():
    return tf.data.Dataset.from_tensor_slices(
        collections.OrderedDict(x=[[1.0, 2.0], [3.0, 4.0]], y=[[5.0], [6.0]])
    ).batch(2)


def _test_batch_loss(model, weights):
    tf.nest.map_structure(
        lambda w, v: w.assign(v), model_weights_lib.ModelWeights.from_model(model), weights
    )
    for batch in _test_data().take(1):
        batch_output = model.forward_pass(batch, training=False)
    return batch_output.loss


def test_loss_decreases(tff_stack):
    test_model = LinearRegression()
    fedavg = composers.build_basic_fedavg_process(
        model_fn=LinearRegression, client_learning_rate=0.1
    )
    client_data = [_test_data()] * 3
    state = fedavg.initialize()
    last_loss = _test_batch_loss(test_model, state.global_model_weights)
    for _ in range(5):
        state, metrics = fedavg.next(state, client_data)
        loss = _test_batch_loss(test_model, state.global_model_weights)
        assert loss < last_loss
        last_loss = loss
    assert isinstance(state, composers.LearningAlgorithmState)
    assert list(metrics) == ['distributor', 'client_work', 'aggregator', 'finalizer']


def test_get_set_model_weights_roundtrip():
    fedavg = composers.build_basic_fedavg_process(
        model_fn=LinearRegression, client_learning_rate=0.1
    )
    state = fedavg.initialize()
    new_state = fedavg.set_model_weights(state, fedavg.get_model_weights(state))
    for a, b in zip(tf.nest.flatten(state), tf.nest.flatten(new_state)):
        np.testing.assert_allclose(a, b)


def test_get_set_model_weights_keras_model():
    def model_fn():
        return tff.learning.models.from_keras_model(
            keras_linear_model(2),
            loss=tf.keras.losses.MeanSquaredError(),
            input_spec=collections.OrderedDict(
                x=tf.TensorSpec(shape=[None, 2]), y=tf.TensorSpec(shape=[None, 1])
            ),
        )

    fedavg = composers.build_basic_fedavg_process(model_fn=model_fn, client_learning_rate=0.1)
    state = fedavg.initialize()
    keras_model = keras_linear_model(2)
    keras_model.compile(optimizer='adam', loss='mse')
    keras_model.fit(_test_data().map(lambda d: (d['x'], d['y'])), verbose=0)
    pretrained = model_weights_lib.ModelWeights.from_model(keras_model)
    flat = lambda w: np.concatenate([np.reshape(np.asarray(x), -1) for x in tf.nest.flatten(w)])
    assert not np.allclose(flat(pretrained), flat(fedavg.get_model_weights(state)))
    state = fedavg.set_model_weights(state, pretrained)
    np.testing.assert_allclose(flat(pretrained), flat(fedavg.get_model_weights(state)))
    for _ in range(3):
        state, _ = fedavg.next(state, [_test_data()] * 3)
    assert not np.allclose(flat(pretrained), flat(fedavg.get_model_weights(state)))
    fedavg.get_model_weights(state).assign_weights_to(keras_model)


def _expected_parts(fedavg, client_lr, server_lr):
    client_work = model_delta_client_work.build_model_delta_client_work(
        model_fn=LinearRegression,
        optimizer=sgdm.build_sgdm(client_lr),
        client_weighting=ClientWeighting.NUM_EXAMPLES,
    )
    finalizer = apply_optimizer_finalizer.build_apply_optimizer_finalizer(
        sgdm.build_sgdm(server_lr), fedavg.get_model_weights.type_signature.result
    )
    return client_work, finalizer


def test_get_hparams_returns_expected_result():
    fedavg = composers.build_basic_fedavg_process(
        model_fn=LinearRegression, client_learning_rate=0.1, server_learning_rate=1.0
    )
    state = fedavg.initialize()
    hparams = fedavg.get_hparams(state)
    assert isinstance(hparams, collections.OrderedDict)
    client_work, finalizer = _expected_parts(fedavg, 0.1, 1.0)
    assert hparams == collections.OrderedDict(
        client_work=client_work.get_hparams(state.client_work),
        finalizer=finalizer.get_hparams(state.finalizer),
    )


def test_set_hparams_returns_expected_result():
    fedavg = composers.build_basic_fedavg_process(
        model_fn=LinearRegression, client_learning_rate=0.1, server_learning_rate=1.0
    )
    client_work, finalizer = _expected_parts(fedavg, 0.5, 1.0)
    client_hparams = client_work.get_hparams(client_work.initialize())
    finalizer_hparams = finalizer.get_hparams(finalizer.initialize())
    state = fedavg.initialize()
    updated = fedavg.set_hparams(
        state, collections.OrderedDict(client_work=client_hparams, finalizer=finalizer_hparams)
    )
    assert isinstance(updated, composers.LearningAlgorithmState)
    for a, b in zip(
        tf.nest.flatten(updated.global_model_weights), tf.nest.flatten(state.global_model_weights)
    ):
        np.testing.assert_allclose(a, b)
    assert updated.distributor == state.distributor
    assert updated.client_work == client_work.set_hparams(state.client_work, client_hparams)
    assert updated.aggregator == state.aggregator
    assert updated.finalizer == finalizer.set_hparams(state.finalizer, finalizer_hparams)


def test_created_model_raises():
    with pytest.raises(TypeError):
        composers.build_basic_fedavg_process(LinearRegression(), 0.1)


@pytest.mark.parametrize('bad_client_lr', [1, sgdm.build_sgdm(0.1)], ids=['int', 'optimizer'])
def test_wrong_client_learning_rate_raises(bad_client_lr):
    with pytest.raises(TypeError):
        composers.build_basic_fedavg_process(LinearRegression(), bad_client_lr)
