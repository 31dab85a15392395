"""Port of TFF's ``tensorflow_federated/python/learning/algorithms/fed_recon_test.py``.

Skipped, as in TFF (``self.skipTest('b/201413656')``):
``test_fed_recon_with_custom_client_weight_fn`` and ``test_keras_local_layer``. Run by
hand here, the latter's loss decreases and its weights move, but its counts (2 examples,
2 batches a round) do not fit its data: the client of 2 one-example batches trains on 1,
the client of one 2-example batch reconstructs on it and trains on none (we give 1 and 1).
Changed for speed, not semantics: TFF's MNIST CNN (Conv2D 32/64, Dense 1024)
is built here with the same layers at widths 2/4/16, and with two
``MaxPooling2D`` layers where TFF reuses one (weightless, the same math); no
case checks a value that depends on the widths. Each process is built once
(module cache) and run on both stacks. ``tensorflow_privacy.GaussianSumQuery``
is `simharness.aggregators.privacy.query.GaussianSumQuery`.
Ours: the first round of ``no_recon`` against numpy, and the same with Keras
client optimizers (inside `test_custom_model`);
after TFF's cases: bad `model_fn` and duplicate metric names.
"""

import collections
import functools
from unittest import mock

import keras
import numpy as np
import pytest
import tensorflow as tf

import simharness as tff
from simharness.aggregators import differential_privacy, factory, mean, robust, sum_factory
from simharness.aggregators.privacy import query as dp_query
from simharness.learning.algorithms import fed_recon
from simharness.learning.client_weight_lib import ClientWeighting
from simharness.learning.metrics import counters
from simharness.learning.models import model_weights, reconstruction_model
from simharness.learning.optimizers import adagrad, sgdm
from simharness.learning.templates import LearningProcess, distributors
from simharness.templates import AggregationProcess, MeasuredProcessOutput

ReconstructionModel = reconstruction_model.ReconstructionModel


def _create_input_spec():
    return collections.OrderedDict(
        x=tf.TensorSpec(shape=[None, 784], dtype=tf.float32),
        y=tf.TensorSpec(dtype=tf.int32, shape=[None, 1]),
    )


def _create_keras_model():
    initializer = keras.initializers.RandomNormal(seed=0)

    def max_pool():
        return keras.layers.MaxPooling2D(
            (2, 2), (2, 2), padding='same', data_format='channels_last'
        )

    return keras.Sequential(
        [
            keras.Input(shape=(28 * 28,)),
            keras.layers.Reshape(target_shape=[28, 28, 1]),
            keras.layers.Conv2D(
                2,
                5,
                padding='same',
                data_format='channels_last',
                activation=tf.nn.relu,
                kernel_initializer=initializer,
            ),
            max_pool(),
            keras.layers.Conv2D(
                4,
                5,
                padding='same',
                data_format='channels_last',
                activation=tf.nn.relu,
                kernel_initializer=initializer,
            ),
            max_pool(),
            keras.layers.Flatten(),
            keras.layers.Dense(16, activation=tf.nn.relu, kernel_initializer=initializer),
            keras.layers.Dropout(0.4, seed=1),
            keras.layers.Dense(10, kernel_initializer=initializer),
        ]
    )


def global_recon_model_fn():
    """Keras MNIST model with no local variables."""
    keras_model = _create_keras_model()
    return ReconstructionModel.from_keras_model_and_layers(
        keras_model=keras_model,
        global_layers=keras_model.layers,
        local_layers=[],
        input_spec=_create_input_spec(),
    )


def local_recon_model_fn():
    """Keras MNIST model with final dense layer local."""
    keras_model = _create_keras_model()
    return ReconstructionModel.from_keras_model_and_layers(
        keras_model=keras_model,
        global_layers=keras_model.layers[:-1],
        local_layers=keras_model.layers[-1:],
        input_spec=_create_input_spec(),
    )


class MnistModel(ReconstructionModel):
    """TFF's: one dense layer and a softmax; the weights global, the biases local."""

    def __init__(self):
        self._weights = tf.Variable(
            lambda: tf.zeros(dtype=tf.float32, shape=(784, 10)), name='weights', trainable=True
        )
        self._bias = tf.Variable(
            lambda: tf.zeros(dtype=tf.float32, shape=(10)), name='bias', trainable=True
        )

    @property
    def global_trainable_variables(self):
        return [self._weights]

    @property
    def global_non_trainable_variables(self):
        return []

    @property
    def local_trainable_variables(self):
        return [self._bias]

    @property
    def local_non_trainable_variables(self):
        return []

    @property
    def input_spec(self):
        return collections.OrderedDict(
            x=tf.TensorSpec([None, 784], tf.float32), y=tf.TensorSpec([None, 1], tf.int32)
        )

    @tf.function
    def forward_pass(self, batch, training=True):
        del training
        y = tf.nn.softmax(tf.matmul(batch['x'], self._weights) + self._bias)
        return reconstruction_model.ReconstructionBatchOutput(
            predictions=y, labels=batch['y'], num_examples=tf.size(batch['y'])
        )


def create_emnist_client_data():
    np.random.seed(42)
    emnist_data = collections.OrderedDict(
        x=[0.1 * np.random.randn(784).astype(np.float32) for _ in range(3)], y=[[5], [5], [9]]
    )
    dataset = tf.data.Dataset.from_tensor_slices(emnist_data)

    def client_data(batch_size=2, max_examples=None):
        client_dataset = dataset
        if max_examples is not None:
            client_dataset = client_dataset.take(max_examples)
        return client_dataset.batch(batch_size, drop_remainder=True)

    return client_data


class _DPMean(factory.UnweightedAggregationFactory):
    """TFF's: a DP sum divided by the number of clients (opaque shape manipulations)."""

    def __init__(self, dp_sum_factory):
        self._dp_sum = dp_sum_factory

    def create(self, value_type):
        self._dp_sum_process = self._dp_sum.create(value_type)

        @tff.federated_computation()
        def init():
            return self._dp_sum_process.initialize()

        @tff.tensorflow.computation(value_type, np.int32)
        def div(x, y):
            return [tf.squeeze(tf.math.divide_no_nan(x, tf.cast(y, tf.float32)), 0)]

        @tff.federated_computation(
            init.type_signature.result, tff.FederatedType(value_type, tff.CLIENTS)
        )
        def next_fn(state, value):
            one_at_clients = tff.federated_value(1, tff.CLIENTS)
            dp_sum = self._dp_sum_process.next(state, value)
            summed_one = tff.federated_sum(one_at_clients)
            return MeasuredProcessOutput(
                state=dp_sum.state,
                result=tff.federated_map(div, (dp_sum.result, summed_one)),
                measurements=dp_sum.measurements,
            )

        return AggregationProcess(initialize_fn=init, next_fn=next_fn)


def _dp_mean_factory():
    # No values should change; inf itself would zero every update.
    gaussian_sum_query = dp_query.GaussianSumQuery(l2_norm_clip=1e10, stddev=0)
    return _DPMean(
        differential_privacy.DifferentiallyPrivateFactory(
            query=gaussian_sum_query, record_aggregation_factory=sum_factory.SumFactory()
        )
    )


def _get_tff_optimizer(learning_rate=0.1):
    return sgdm.build_sgdm(learning_rate=learning_rate, momentum=0.5)


def loss_fn():
    return keras.losses.SparseCategoricalCrossentropy()


def metrics_fn():
    return [
        counters.NumExamplesCounter(),
        counters.NumBatchesCounter(),
        keras.metrics.SparseCategoricalAccuracy(),
    ]


def build_custom_stateful_distributor(model_weights_type) -> distributors.DistributionProcess:
    """TFF's: a broadcast with state 2.0, measuring 1.0."""

    @tff.federated_computation()
    def test_server_initialization():
        return tff.federated_value(2.0, tff.SERVER)

    @tff.federated_computation(
        tff.FederatedType(np.float32, tff.SERVER), tff.FederatedType(model_weights_type, tff.SERVER)
    )
    def stateful_broadcast(state, value):
        empty_metrics = tff.federated_value(1.0, tff.SERVER)
        return MeasuredProcessOutput(
            state=state, result=tff.federated_broadcast(value), measurements=empty_metrics
        )

    return distributors.DistributionProcess(
        initialize_fn=test_server_initialization, next_fn=stateful_broadcast
    )


def _mnist_kwargs(**kwargs):
    """TFF's custom-model cases: reconstruction disabled by a 0 learning rate."""
    return dict(
        dict(
            metrics_fn=metrics_fn,
            server_optimizer_fn=_get_tff_optimizer(0.01),
            client_optimizer_fn=_get_tff_optimizer(0.001),
            reconstruction_optimizer_fn=_get_tff_optimizer(0.0),
            dataset_split_fn=ReconstructionModel.simple_dataset_split_fn,
        ),
        **kwargs,
    )


#: TFF's test cases: (model_fn, the builder's arguments other than `loss_fn`).
CASES = {
    'inf_weight': lambda: (
        local_recon_model_fn,
        dict(
            client_optimizer_fn=_get_tff_optimizer(0.001),
            reconstruction_optimizer_fn=_get_tff_optimizer(0.001),
            client_weighting=lambda x: np.inf,
        ),
    ),
    'keras_global': lambda: (
        global_recon_model_fn,
        dict(
            metrics_fn=metrics_fn,
            client_optimizer_fn=_get_tff_optimizer(0.0001),
            reconstruction_optimizer_fn=_get_tff_optimizer(0.001),
        ),
    ),
    'num_examples': lambda: (
        local_recon_model_fn,
        dict(
            metrics_fn=metrics_fn,
            client_optimizer_fn=_get_tff_optimizer(0.001),
            reconstruction_optimizer_fn=_get_tff_optimizer(0.001),
            client_weighting=ClientWeighting.NUM_EXAMPLES,
        ),
    ),
    'uniform': lambda: (
        local_recon_model_fn,
        dict(
            metrics_fn=metrics_fn,
            client_optimizer_fn=_get_tff_optimizer(0.001),
            reconstruction_optimizer_fn=_get_tff_optimizer(0.001),
            client_weighting=ClientWeighting.UNIFORM,
            dataset_split_fn=ReconstructionModel.simple_dataset_split_fn,
        ),
    ),
    'metrics_empty_list': lambda: (
        local_recon_model_fn,
        dict(
            metrics_fn=lambda: [],
            client_optimizer_fn=_get_tff_optimizer(0.0001),
            reconstruction_optimizer_fn=_get_tff_optimizer(0.001),
        ),
    ),
    # TFF's test_keras_local_layer_metrics_none and test_get_model_weights.
    'metrics_none': lambda: (
        local_recon_model_fn,
        dict(
            metrics_fn=None,
            client_optimizer_fn=_get_tff_optimizer(0.001),
            reconstruction_optimizer_fn=_get_tff_optimizer(0.001),
        ),
    ),
    'no_recon': lambda: (MnistModel, _mnist_kwargs()),
    'adagrad_server': lambda: (
        MnistModel,
        _mnist_kwargs(server_optimizer_fn=adagrad.build_adagrad(learning_rate=0.01)),
    ),
    'zeroing_clipping': lambda: (
        MnistModel,
        _mnist_kwargs(
            model_aggregator_factory=robust.zeroing_factory(
                zeroing_norm=float('inf'), inner_agg_factory=mean.MeanFactory()
            )
        ),
    ),
    # Ours: the client optimizers as no-argument Keras optimizer functions.
    'keras_optimizers': lambda: (
        MnistModel,
        _mnist_kwargs(
            client_optimizer_fn=lambda: keras.optimizers.SGD(0.001),
            reconstruction_optimizer_fn=lambda: keras.optimizers.SGD(0.0),
        ),
    ),
    'dp_query': lambda: (
        MnistModel,
        _mnist_kwargs(
            model_aggregator_factory=_dp_mean_factory(), client_weighting=ClientWeighting.UNIFORM
        ),
    ),
    'custom_broadcaster': lambda: (
        local_recon_model_fn,
        dict(
            metrics_fn=metrics_fn,
            client_optimizer_fn=_get_tff_optimizer(0.001),
            reconstruction_optimizer_fn=_get_tff_optimizer(0.001),
            dataset_split_fn=ReconstructionModel.simple_dataset_split_fn,
            model_distributor=build_custom_stateful_distributor(
                reconstruction_model.global_weights_type_from_model(local_recon_model_fn())
            ),
        ),
    ),
    'multiple_epochs': lambda: (
        MnistModel,
        dict(
            metrics_fn=metrics_fn,
            client_optimizer_fn=_get_tff_optimizer(0.001),
            reconstruction_optimizer_fn=_get_tff_optimizer(0.001),
            dataset_split_fn=ReconstructionModel.build_dataset_split_fn(
                recon_epochs=3, post_recon_epochs=4, post_recon_steps_max=3
            ),
        ),
    ),
}


@functools.cache
def _process(case):
    """The process of TFF's `case`, built once for both stacks."""
    model_fn, kwargs = CASES[case]()
    return fed_recon.build_fed_recon(model_fn, loss_fn=loss_fn, **kwargs)


def _run_rounds(process, federated_data, num_rounds):
    initial_state = state = process.initialize()
    outputs = []
    for _ in range(num_rounds):
        output = process.next(state, federated_data)
        outputs.append(output)
        state = output.state
    return initial_state, outputs


EXPECTED_KEYS = ['distributor', 'client_work', 'aggregator', 'finalizer']
EXPECTED_TRAIN_KEYS = ['sparse_categorical_accuracy', 'loss', 'num_examples', 'num_batches']


def _assert_count_equal(actual, expected):
    assert sorted(actual) == sorted(expected)


def _assert_all_close(a, b, **kwargs):
    for x, y in zip(a, b, strict=True):
        np.testing.assert_allclose(x, y, **kwargs)


def _all_close(a, b):
    return all(np.allclose(x, y) for x, y in zip(a, b, strict=True))


def test_build_train_iterative_process():
    # TFF's arguments but the learning rates: those of the shared `num_examples` process.
    process = _process('num_examples')
    assert isinstance(process, LearningProcess)
    federated_data_type = process.next.type_signature.parameter[1]
    assert str(federated_data_type) == '{<x=float32[?,784],y=int32[?,1]>*}@CLIENTS'


@pytest.mark.skip(reason='TFF skips it: b/201413656')
def test_fed_recon_with_custom_client_weight_fn():
    pass


def test_server_update_with_inf_weight_is_noop(tff_stack):
    client_data = create_emnist_client_data()
    initial_state, outputs = _run_rounds(_process('inf_weight'), [client_data()], 1)
    _assert_all_close(
        outputs[-1].state.global_model_weights.trainable,
        initial_state.global_model_weights.trainable,
        atol=1e-8,
    )


def test_keras_global_model(tff_stack):
    client_data = create_emnist_client_data()
    _, outputs = _run_rounds(_process('keras_global'), [client_data(), client_data()], 5)
    metrics = [o.metrics for o in outputs]
    loss_list = [m['client_work']['train']['loss'] for m in metrics]
    # Each client has one batch, the reconstruction one: nothing to train on after it.
    _assert_all_close(
        outputs[0].state.global_model_weights.trainable,
        outputs[1].state.global_model_weights.trainable,
    )
    assert np.mean(loss_list[-2:]) == np.mean(loss_list[:2])
    _assert_count_equal(metrics[0].keys(), EXPECTED_KEYS)
    _assert_count_equal(metrics[0]['client_work']['train'].keys(), EXPECTED_TRAIN_KEYS)
    assert metrics[0]['client_work']['train']['num_examples'] == 0
    assert metrics[1]['client_work']['train']['num_batches'] == 0


@pytest.mark.skip(reason='TFF skips it: b/201413656')
def test_keras_local_layer():
    pass


def test_keras_local_layer_client_weighting_enum_num_examples(tff_stack):
    client_data = create_emnist_client_data()
    _, (output,) = _run_rounds(
        _process('num_examples'), [client_data(max_examples=2), client_data()], 1
    )
    metrics = output.metrics
    _assert_count_equal(metrics.keys(), EXPECTED_KEYS)
    _assert_count_equal(metrics['client_work']['train'].keys(), EXPECTED_TRAIN_KEYS)
    assert metrics['client_work']['train']['num_examples'] == 0
    assert metrics['client_work']['train']['num_batches'] == 0
    _assert_count_equal(metrics['aggregator'].keys(), ['mean_weight', 'mean_value'])


def test_keras_local_layer_client_weighting_enum_uniform(tff_stack):
    client_data = create_emnist_client_data()
    _, (output,) = _run_rounds(_process('uniform'), [client_data(max_examples=2), client_data()], 1)
    metrics = output.metrics
    _assert_count_equal(metrics.keys(), EXPECTED_KEYS)
    _assert_count_equal(metrics['client_work']['train'].keys(), EXPECTED_TRAIN_KEYS)
    assert metrics['client_work']['train']['num_examples'] == 4
    assert metrics['client_work']['train']['num_batches'] == 2
    _assert_count_equal(metrics['aggregator'].keys(), ['mean_weight', 'mean_value'])


@pytest.mark.parametrize('case', ['metrics_empty_list', 'metrics_none'])
def test_keras_local_layer_metrics_empty_list_or_none(tff_stack, case):
    client_data = create_emnist_client_data()
    _, (output,) = _run_rounds(_process(case), [client_data(), client_data()], 1)
    _assert_count_equal(output.metrics.keys(), EXPECTED_KEYS)
    _assert_count_equal(output.metrics['client_work'].keys(), ['train'])
    _assert_count_equal(output.metrics['client_work']['train'].keys(), ['loss'])


@pytest.mark.parametrize(
    'case', ['no_recon', 'adagrad_server', 'zeroing_clipping', 'dp_query', 'keras_optimizers']
)
def test_custom_model(tff_stack, case):
    """TFF's test_custom_model_no_recon, _adagrad_server_optimizer,
    _zeroing_clipping_aggregator_factory and test_execution_with_custom_dp_query; ours:
    Keras client optimizers."""
    client_data = create_emnist_client_data()
    _, outputs = _run_rounds(_process(case), [client_data(), client_data()], 2)
    train_metrics = [o.metrics['client_work']['train'] for o in outputs]
    # All weights and biases start at 0: uniform softmax, a loss of ln(10).
    np.testing.assert_allclose(train_metrics[0]['loss'], np.log(10.0), rtol=1e-4)
    assert train_metrics[1]['loss'] < train_metrics[0]['loss']
    assert not _all_close(
        outputs[0].state.global_model_weights.trainable,
        outputs[1].state.global_model_weights.trainable,
    )
    # Only the training batches count: 2 clients x 1 batch of 2 examples.
    for m in train_metrics:
        assert m['num_examples'] == 4
        assert m['num_batches'] == 2
    if case in ('no_recon', 'keras_optimizers'):  # ours: the first round by hand
        np.testing.assert_allclose(
            outputs[0].state.global_model_weights.trainable[0],
            _numpy_no_recon_round(client_data()),
            atol=1e-7,
        )


def _numpy_no_recon_round(dataset):
    """Round 1 of `no_recon`: one client SGD step on the weights, the server's step."""
    batch = next(iter(dataset))
    x, y = batch['x'].numpy().astype(np.float64), batch['y'].numpy()[:, 0]
    probs = np.full((2, 10), 0.1)  # zero weights and bias: a uniform softmax
    grad = x.T @ (probs - np.eye(10)[y]) / 2.0  # the batch's mean cross-entropy
    update = 0.001 * grad  # momentum's first step is SGD's; both clients: the same update
    return -0.01 * update  # the server's first step from zero weights


@pytest.mark.parametrize(
    'client_weighting',
    [lambda local_outputs: 1.0, None],
    ids=['client_weight_fn', 'none_client_weighting'],
)
def test_iterative_process_fails_with_dp_agg_and(client_weighting):
    with pytest.raises(ValueError, match='unweighted aggregator'):
        fed_recon.build_fed_recon(
            MnistModel,
            loss_fn=loss_fn,
            **_mnist_kwargs(
                model_aggregator_factory=_dp_mean_factory(), client_weighting=client_weighting
            ),
        )


def test_keras_local_layer_custom_broadcaster(tff_stack):
    process = _process('custom_broadcaster')
    algorithm_state = process.initialize()
    assert algorithm_state.distributor == 2.0
    client_data = create_emnist_client_data()
    metrics = process.next(algorithm_state, [client_data(), client_data()]).metrics
    _assert_count_equal(metrics.keys(), EXPECTED_KEYS)
    _assert_count_equal(metrics['client_work'].keys(), ['train'])
    _assert_count_equal(metrics['client_work']['train'].keys(), EXPECTED_TRAIN_KEYS)
    assert metrics['distributor'] == 1.0


def test_custom_model_multiple_epochs(tff_stack):
    client_data = create_emnist_client_data()
    _, outputs = _run_rounds(_process('multiple_epochs'), [client_data(), client_data()], 2)
    train_metrics = [o.metrics['client_work']['train'] for o in outputs]
    assert train_metrics[1]['loss'] < train_metrics[0]['loss']
    assert not _all_close(
        outputs[0].state.global_model_weights.trainable,
        outputs[1].state.global_model_weights.trainable,
    )
    for m in train_metrics:
        assert m['num_examples'] == 12
        assert m['num_batches'] == 6


def test_get_model_weights(tff_stack):
    client_data = create_emnist_client_data()
    process = _process('metrics_none')
    state = process.initialize()
    assert isinstance(process.get_model_weights(state), model_weights.ModelWeights)
    _assert_all_close(
        state.global_model_weights.trainable, process.get_model_weights(state).trainable
    )
    for _ in range(3):
        state = process.next(state, [client_data()]).state
        assert isinstance(process.get_model_weights(state), model_weights.ModelWeights)
        _assert_all_close(
            state.global_model_weights.trainable, process.get_model_weights(state).trainable
        )


def test_process_construction_calls_model_fn():
    mock_model_fn = mock.Mock(side_effect=local_recon_model_fn)
    fed_recon.build_fed_recon(
        model_fn=mock_model_fn, loss_fn=loss_fn, client_optimizer_fn=_get_tff_optimizer()
    )
    assert mock_model_fn.call_count == 3


# Ours after TFF's cases.


def test_rejects_a_model_fn_of_another_model():
    with pytest.raises(TypeError, match='ReconstructionModel'):
        fed_recon.build_fed_recon(lambda: model_weights.ModelWeights([], []), loss_fn=loss_fn)


def test_rejects_duplicate_metric_names():
    with pytest.raises(ValueError, match='Duplicate metric name'):
        fed_recon.build_fed_recon(
            MnistModel, loss_fn=loss_fn, metrics_fn=lambda: [keras.metrics.Mean(name='loss')]
        )
