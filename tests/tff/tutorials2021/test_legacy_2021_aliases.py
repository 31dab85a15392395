"""The 2021 aliases (`simharness.learning.legacy_2021`) against today's algorithms.

Each alias runs today's builder, so its losses, weights and evaluation metrics
must equal today's algorithm's on the same data bit for bit; the arguments
without an exact counterpart raise, naming the argument and today's
replacement; ``tff.backends.reference`` is the local thread stack.
"""

from __future__ import annotations

import collections

import numpy as np
import pytest
import tensorflow as tf

import simharness as tff
from tests.tff.tutorials import synthetic as synth

ROUNDS = 3


def _data(seed=0):
    clients = synth.emnist_like(3, examples=10, seed=seed)

    def preprocess(ds):  # 3 batches per client (the last one short), no shuffle
        return ds.batch(4).map(lambda e: collections.OrderedDict(
            x=tf.reshape(e['pixels'], [-1, 784]), y=tf.reshape(e['label'], [-1, 1])))

    return [preprocess(clients.create_tf_dataset_for_client(c)) for c in clients.client_ids]


TRAIN = _data()
SPEC = TRAIN[0].element_spec


def model_fn():
    keras_model = tf.keras.Sequential([
        tf.keras.Input(shape=(784,)),
        tf.keras.layers.Dense(10, kernel_initializer='zeros'),
        tf.keras.layers.Softmax()])
    return tff.learning.from_keras_model(
        keras_model, loss=tf.keras.losses.SparseCategoricalCrossentropy(), input_spec=SPEC,
        metrics=[tf.keras.metrics.SparseCategoricalAccuracy()])


def _run_2021(process):
    state = process.initialize()
    losses = []
    for _ in range(ROUNDS):
        state, metrics = process.next(state, TRAIN)
        losses.append(metrics['train']['loss'])
    return state, metrics, losses


def _run_today(process):
    state = process.initialize()
    losses = []
    for _ in range(ROUNDS):
        output = process.next(state, TRAIN)
        state = output.state
        losses.append(output.metrics['client_work']['train']['loss'])
    return state, output.metrics, losses


def _assert_same_bits(state_2021, losses_2021, today_process, state_today, losses_today):
    assert losses_2021 == losses_today  # bit for bit, every round
    weights = today_process.get_model_weights(state_today)
    for a, b in zip(state_2021.model.trainable, weights.trainable, strict=True):
        np.testing.assert_array_equal(a, b)


def test_from_keras_model_model_weights_and_batch_output_are_todays():
    assert tff.learning.from_keras_model is tff.learning.models.from_keras_model
    assert tff.learning.ModelWeights is tff.learning.models.ModelWeights
    assert tff.learning.BatchOutput is tff.learning.models.BatchOutput


@pytest.mark.slow
def test_weighted_fedavg_equals_build_weighted_fed_avg_bit_for_bit():
    process = tff.learning.build_federated_averaging_process(
        model_fn, client_optimizer_fn=lambda: tf.keras.optimizers.SGD(learning_rate=0.01))
    state, metrics, losses = _run_2021(process)
    today = tff.learning.algorithms.build_weighted_fed_avg(
        model_fn, client_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate=0.01),
        server_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate=1.0))
    today_state, today_metrics, today_losses = _run_today(today)
    _assert_same_bits(state, losses, today, today_state, today_losses)
    assert losses[0] > losses[1] > losses[2]
    # 2021's structures: ServerState's fields, ``next``'s tuple, the metrics' keys.
    assert list(state._fields[:4]) == ['model', 'optimizer_state', 'delta_aggregate_state',
                                       'model_broadcast_state']
    assert isinstance(process.next(state, TRAIN), tuple)
    assert metrics['broadcast'] == ()
    assert metrics['train'] == collections.OrderedDict(
        (k, v) for k, v in today_metrics['client_work']['train'].items()
        if k in ('sparse_categorical_accuracy', 'loss'))
    assert metrics['stat'] == collections.OrderedDict(num_examples=30)
    assert state.model.non_trainable == []
    # 2021's state_with_new_model_weights: the next round starts from the new weights.
    zeros = [np.zeros_like(w) for w in state.model.trainable]
    fresh = tff.learning.state_with_new_model_weights(state, zeros, [])
    _, first = process.next(fresh, TRAIN)
    assert first['train']['loss'] == losses[0]
    with pytest.raises(TypeError, match='trainable_weights'):
        tff.learning.state_with_new_model_weights(state, zeros[:1], [])


@pytest.mark.slow
def test_uniform_weighting_and_server_momentum_equal_todays_bit_for_bit():
    process = tff.learning.build_federated_averaging_process(
        model_fn, client_optimizer_fn=lambda: tf.keras.optimizers.SGD(learning_rate=0.02),
        server_optimizer_fn=lambda: tf.keras.optimizers.SGD(learning_rate=1.0, momentum=0.9),
        client_weighting=tff.learning.ClientWeighting.UNIFORM,
        use_experimental_simulation_loop=True)
    state, metrics, losses = _run_2021(process)
    today = tff.learning.algorithms.build_weighted_fed_avg(
        model_fn, client_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate=0.02),
        server_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate=1.0, momentum=0.9),
        client_weighting=tff.learning.ClientWeighting.UNIFORM,
        loop_implementation=tff.learning.LoopImplementation.DATASET_ITERATOR)
    today_state, _, today_losses = _run_today(today)
    _assert_same_bits(state, losses, today, today_state, today_losses)
    # 2021 weighted each client 1 in the weighted MeanFactory: its measurements.
    assert metrics['aggregation'] == collections.OrderedDict(mean_value=(), mean_weight=())


@pytest.mark.slow
def test_an_unweighted_factory_runs_build_unweighted_fed_avg_bit_for_bit():
    process = tff.learning.build_federated_averaging_process(
        model_fn, client_optimizer_fn=lambda: tf.keras.optimizers.SGD(learning_rate=0.02),
        model_update_aggregation_factory=tff.aggregators.UnweightedMeanFactory())
    state, _, losses = _run_2021(process)
    today = tff.learning.algorithms.build_unweighted_fed_avg(
        model_fn, client_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate=0.02),
        model_aggregator=tff.aggregators.UnweightedMeanFactory())
    today_state, _, today_losses = _run_today(today)
    _assert_same_bits(state, losses, today, today_state, today_losses)


@pytest.mark.slow
def test_evaluation_equals_build_fed_eval_bit_for_bit():
    evaluation = tff.learning.build_federated_evaluation(model_fn)
    weights = tff.learning.models.ModelWeights(
        trainable=[np.full((784, 10), 0.01, np.float32), np.arange(10, dtype=np.float32) / 10],
        non_trainable=[])
    test_data = _data(seed=1)
    metrics = evaluation(weights, test_data)
    today = tff.learning.algorithms.build_fed_eval(model_fn)
    state = today.set_model_weights(today.initialize(), weights)
    today_metrics = today.next(state, test_data).metrics['client_work']['eval'][
        'current_round_metrics']
    assert list(metrics) == ['sparse_categorical_accuracy', 'loss']
    assert metrics['loss'] == today_metrics['loss']
    assert metrics['sparse_categorical_accuracy'] == today_metrics['sparse_categorical_accuracy']


@pytest.mark.parametrize('kwargs, error, match', [
    (dict(client_optimizer_fn=lambda: tf.keras.optimizers.Adam(0.01)), TypeError,
     'client_optimizer_fn.*build_adam'),
    (dict(client_optimizer_fn=lambda: tf.keras.optimizers.SGD(0.1),
          server_optimizer_fn=lambda: tf.keras.optimizers.SGD(1.0, clipnorm=1.0)), ValueError,
     'server_optimizer_fn.*clipnorm'),
    (dict(client_optimizer_fn=lambda: tf.keras.optimizers.SGD(0.1), broadcast_process=object()),
     ValueError, 'model_distributor'),
    (dict(client_optimizer_fn=lambda: tf.keras.optimizers.SGD(0.1),
          client_weighting=lambda outputs: 1.0), TypeError, 'client_weighting'),
    (dict(client_optimizer_fn=lambda: tf.keras.optimizers.SGD(0.1),
          client_weighting=tff.learning.ClientWeighting.NUM_EXAMPLES,
          model_update_aggregation_factory=tff.aggregators.UnweightedMeanFactory()),
     ValueError, 'unweighted'),
])
def test_what_does_not_map_exactly_raises(kwargs, error, match):
    with pytest.raises(error, match=match):
        tff.learning.build_federated_averaging_process(model_fn, **kwargs)


def test_evaluation_refuses_a_broadcast_process():
    with pytest.raises(ValueError, match='model_distributor'):
        tff.learning.build_federated_evaluation(model_fn, broadcast_process=object())


def test_reference_backend_is_the_thread_stack():
    @tff.federated_computation(tff.FederatedType(np.int32, tff.CLIENTS))
    def total(values):
        return tff.federated_sum(values)

    context = tff.backends.reference.create_reference_context()
    assert type(context).__name__ == 'ExecutionContext'
    tff.backends.reference.set_reference_context()
    assert total([1, 2, 3]) == 6
