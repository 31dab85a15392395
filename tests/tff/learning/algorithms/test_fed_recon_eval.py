"""Port of TFF's ``tensorflow_federated/python/learning/algorithms/fed_recon_eval_test.py``.

Every case of TFF's module is here, each for the non-Keras `LinearModel` and the
Keras `keras_linear_model_fn` (TFF's parameters). Each process is built once
(module cache) and run on both stacks. TFF's ``assert_types_identical`` of the
whole ``next`` signature is `is_identical_to` of the same expected type.
Ours, inside TFF's cases: the no-split loss against numpy (both models), a
second round of the split case (totals accumulate, weights unchanged); after
them: bad `model_fn`, `metrics_aggregation_process` and duplicate metric names.
"""

import collections
import functools
from unittest import mock

import keras
import numpy as np
import pytest
import tensorflow as tf

import simharness as tff
from simharness.learning.algorithms import fed_recon_eval
from simharness.learning.metrics import counters
from simharness.learning.models import model_weights, reconstruction_model
from simharness.learning.optimizers import sgdm
from simharness.learning.templates import (
    LearningAlgorithmState,
    LearningProcessOutput,
    distributors,
)

ReconstructionModel = reconstruction_model.ReconstructionModel


def _create_input_spec():
    return collections.OrderedDict(
        x=tf.TensorSpec(shape=[None, 1], dtype=tf.float32),
        y=tf.TensorSpec(shape=[None, 1], dtype=tf.float32),
    )


class LinearModel(ReconstructionModel):
    """TFF's: ``y = x * weights + bias``; the weight is global, the bias local."""

    def __init__(self):
        self._weights = tf.Variable(
            lambda: tf.zeros(dtype=tf.float32, shape=(1, 1)), name='weights', trainable=True
        )
        self._bias = tf.Variable(
            lambda: tf.zeros(dtype=tf.float32, shape=(1, 1)), name='bias', trainable=True
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
        return _create_input_spec()

    @tf.function
    def forward_pass(self, batch, training=True):
        del training
        y = batch['x'] * self._weights + self._bias
        return reconstruction_model.ReconstructionBatchOutput(
            predictions=y, labels=batch['y'], num_examples=tf.size(batch['y'])
        )


class BiasLayer(keras.layers.Layer):
    """Adds a bias to inputs."""

    def build(self, input_shape):
        self.bias = self.add_weight(
            name='bias', shape=input_shape[1:], initializer='zeros', trainable=True
        )

    def call(self, x):
        return x + self.bias


def keras_linear_model_fn():
    """Should produce the same results as `LinearModel`."""
    inputs = keras.layers.Input(shape=[1])
    scaled_input = keras.layers.Dense(1, use_bias=False, kernel_initializer='zeros')(inputs)
    outputs = BiasLayer()(scaled_input)
    keras_model = keras.Model(inputs=inputs, outputs=outputs)
    return ReconstructionModel.from_keras_model_and_layers(
        keras_model=keras_model,
        global_layers=keras_model.layers[:-1],
        local_layers=keras_model.layers[-1:],
        input_spec=_create_input_spec(),
    )


class NumOverCounter(keras.metrics.Sum):
    """Counts the label examples greater than a threshold."""

    def __init__(self, threshold: float, name: str = 'num_over', dtype=tf.float32):
        super().__init__(name=name, dtype=dtype)
        self.threshold = threshold

    def update_state(self, y_true, y_pred, sample_weight=None):
        num_over = tf.reduce_sum(tf.cast(tf.greater(y_true, self.threshold), tf.float32))
        return super().update_state(num_over)

    def get_config(self):
        return {**super().get_config(), 'threshold': self.threshold}


def create_client_data():
    client1_data = collections.OrderedDict(
        [('x', [[1.0], [2.0], [3.0]]), ('y', [[5.0], [6.0], [8.0]])]
    )
    client2_data = collections.OrderedDict(
        [('x', [[1.0], [2.0], [3.0]]), ('y', [[5.0], [5.0], [9.0]])]
    )
    return [
        tf.data.Dataset.from_tensor_slices(client1_data).batch(1),
        tf.data.Dataset.from_tensor_slices(client2_data).batch(1),
    ]


def _get_tff_optimizer(learning_rate=0.1):
    return sgdm.build_sgdm(learning_rate=learning_rate, momentum=0.5)


def loss_fn():
    return keras.losses.MeanSquaredError()


def metrics_fn():
    return [counters.NumExamplesCounter(), NumOverCounter(5.0)]


def build_custom_distributor(model_weights_type) -> distributors.DistributionProcess:
    """TFF's: a broadcast counting its calls in its state, measuring 3.0."""

    @tff.federated_computation()
    def test_server_initialization():
        return tff.federated_value(0, tff.SERVER)

    @tff.federated_computation(
        tff.FederatedType(np.int32, tff.SERVER), tff.FederatedType(model_weights_type, tff.SERVER)
    )
    def stateful_broadcast(state, value):
        test_metrics = tff.federated_value(3.0, tff.SERVER)
        new_state = tff.federated_map(tff.tensorflow.computation(lambda x: x + 1), state)
        return tff.templates.MeasuredProcessOutput(
            state=new_state, result=tff.federated_broadcast(value), measurements=test_metrics
        )

    return distributors.DistributionProcess(
        initialize_fn=test_server_initialization, next_fn=stateful_broadcast
    )


MODEL_FNS = {'non_keras_model': LinearModel, 'keras_model': keras_linear_model_fn}


def _skip_recon_split_fn(client_dataset):
    return client_dataset.repeat(0), client_dataset.repeat(2)


#: TFF's test cases: the builder's arguments other than `model_fn` and `loss_fn`.
CASES = {
    'no_split_data': lambda: dict(
        metrics_fn=metrics_fn,
        reconstruction_optimizer_fn=_get_tff_optimizer(),
        dataset_split_fn=ReconstructionModel.build_dataset_split_fn(),
    ),
    'split_data': lambda: dict(
        metrics_fn=metrics_fn, reconstruction_optimizer_fn=_get_tff_optimizer()
    ),
    'split_data_multiple_epochs': lambda: dict(
        metrics_fn=metrics_fn,
        reconstruction_optimizer_fn=_get_tff_optimizer(),
        dataset_split_fn=ReconstructionModel.build_dataset_split_fn(
            recon_epochs=2, post_recon_epochs=10, post_recon_steps_max=7, split_dataset=True
        ),
    ),
    'recon_lr_0': lambda: dict(
        metrics_fn=metrics_fn,
        reconstruction_optimizer_fn=_get_tff_optimizer(0.0),
        dataset_split_fn=ReconstructionModel.build_dataset_split_fn(),
    ),
    'skip_recon': lambda: dict(
        metrics_fn=metrics_fn,
        reconstruction_optimizer_fn=_get_tff_optimizer(),
        dataset_split_fn=_skip_recon_split_fn,
    ),
    'metrics_none_loss_decreases': lambda: dict(
        reconstruction_optimizer_fn=_get_tff_optimizer(0.01),
        dataset_split_fn=ReconstructionModel.build_dataset_split_fn(recon_epochs=3),
    ),
}


@functools.cache
def _global_weights_type(model):
    return reconstruction_model.global_weights_type_from_model(MODEL_FNS[model]())


@functools.cache
def _process(case, model):
    """The process of TFF's `case` for `model`, built once for both stacks."""
    if case == 'custom_stateful_broadcaster':
        kwargs = dict(
            metrics_fn=metrics_fn,
            model_distributor=build_custom_distributor(_global_weights_type(model)),
        )
    else:
        kwargs = CASES[case]()
    return fed_recon_eval.build_fed_recon_eval(MODEL_FNS[model], loss_fn=loss_fn, **kwargs)


def _expected_next_type(
    model, with_metrics=True, distributor_state=(), distributor_measurements=()
):
    if with_metrics:
        unfinalized = collections.OrderedDict(
            num_examples=[np.int64], num_over=[np.float32], loss=[np.float32, np.float32]
        )
        finalized = collections.OrderedDict(
            num_examples=np.int64, num_over=np.float32, loss=np.float32
        )
    else:
        unfinalized = collections.OrderedDict(loss=[np.float32, np.float32])
        finalized = collections.OrderedDict(loss=np.float32)
    state_type = tff.FederatedType(
        LearningAlgorithmState(
            global_model_weights=_global_weights_type(model),
            distributor=distributor_state,
            client_work=((), unfinalized),
            aggregator=collections.OrderedDict(value_sum_process=(), weight_sum_process=()),
            finalizer=(),
        ),
        tff.SERVER,
    )
    client_data_type = tff.FederatedType(
        tff.SequenceType(
            collections.OrderedDict(
                x=tff.TensorType(np.float32, [None, 1]), y=tff.TensorType(np.float32, [None, 1])
            )
        ),
        tff.CLIENTS,
    )
    metrics_type = tff.FederatedType(
        collections.OrderedDict(
            distributor=distributor_measurements,
            client_work=collections.OrderedDict(
                eval=collections.OrderedDict(
                    current_round_metrics=finalized, total_rounds_metrics=finalized
                )
            ),
            aggregator=collections.OrderedDict(mean_value=(), mean_weight=()),
            finalizer=(),
        ),
        tff.SERVER,
    )
    return tff.FunctionType(
        parameter=collections.OrderedDict(state=state_type, client_data=client_data_type),
        result=LearningProcessOutput(state=state_type, metrics=metrics_type),
    )


def _assert_next_type(process, expected):
    actual = process.next.type_signature
    assert actual.is_identical_to(tff.to_type(expected)), f'{actual}\n!=\n{expected}'


def _evaluate(process, weight=None):
    state = process.initialize()
    if weight is not None:
        state = process.set_model_weights(
            state,
            model_weights.ModelWeights(
                trainable=(tf.convert_to_tensor([[weight]]),), non_trainable=()
            ),
        )
    _, result = process.next(state, create_client_data())
    return result


MODELS = pytest.mark.parametrize('model', sorted(MODEL_FNS))


@MODELS
def test_federated_reconstruction_no_split_data(tff_stack, model):
    process = _process('no_split_data', model)
    _assert_next_type(process, _expected_next_type(model))
    eval_result = _evaluate(process, 1.0)['client_work']['eval']['current_round_metrics']
    # Not the loss without reconstruction: MSE of (y - 1 * x), a mean of
    # (4^2 + 4^2 + 5^2 + 4^2 + 3^2 + 6^2) / 6 = 59/3.
    assert eval_result['loss'] != pytest.approx(19.666666, abs=1e-6)
    assert eval_result['num_examples'] == pytest.approx(6.0)
    assert eval_result['num_over'] == pytest.approx(3.0)
    # Ours: the loss of one reconstruction epoch, by hand (both models are the same function).
    assert eval_result['loss'] == pytest.approx(_numpy_no_split_loss(w=1.0), rel=1e-5)


def _numpy_no_split_loss(w, lr=0.1, momentum=0.5):
    """One reconstruction epoch of SGD-momentum on the bias (every batch), then the MSE."""
    total_sq, count = 0.0, 0
    for ds in create_client_data():
        xs = [float(b['x'][0, 0]) for b in ds]
        ys = [float(b['y'][0, 0]) for b in ds]
        bias, acc = 0.0, 0.0
        for x, y in zip(xs, ys):
            acc = momentum * acc + 2.0 * (x * w + bias - y)
            bias -= lr * acc
        for x, y in zip(xs, ys):
            total_sq += (x * w + bias - y) ** 2
            count += 1
    return total_sq / count


@MODELS
def test_federated_reconstruction_split_data(tff_stack, model):
    process = _process('split_data', model)
    _assert_next_type(process, _expected_next_type(model))
    state = process.initialize()
    for _ in range(2):  # ours: a second round, the totals accumulate and the weights stay
        state, result = process.next(state, create_client_data())
        eval_result = result['client_work']['eval']['current_round_metrics']
        assert eval_result['num_examples'] == pytest.approx(2.0)
        assert eval_result['num_over'] == pytest.approx(1.0)
    assert result['client_work']['eval']['total_rounds_metrics']['num_examples'] == 4
    np.testing.assert_array_equal(process.get_model_weights(state).trainable[0], [[0.0]])


@MODELS
def test_federated_reconstruction_split_data_multiple_epochs(tff_stack, model):
    process = _process('split_data_multiple_epochs', model)
    _assert_next_type(process, _expected_next_type(model))
    eval_result = _evaluate(process)['client_work']['eval']['current_round_metrics']
    assert eval_result['num_examples'] == pytest.approx(14.0)
    assert eval_result['num_over'] == pytest.approx(7.0)


@MODELS
def test_federated_reconstruction_recon_lr_0(tff_stack, model):
    process = _process('recon_lr_0', model)
    _assert_next_type(process, _expected_next_type(model))
    eval_result = _evaluate(process, 1.0)['client_work']['eval']['current_round_metrics']
    # The bias stays 0 (no reconstruction step moves it): the loss is 59/3.
    assert eval_result['loss'] == pytest.approx(19.666666, abs=1e-5)
    assert eval_result['num_examples'] == pytest.approx(6.0)
    assert eval_result['num_over'] == pytest.approx(3.0)


@MODELS
def test_federated_reconstruction_skip_recon(tff_stack, model):
    process = _process('skip_recon', model)
    _assert_next_type(process, _expected_next_type(model))
    eval_result = _evaluate(process, 1.0)['client_work']['eval']['current_round_metrics']
    assert eval_result['loss'] == pytest.approx(19.666666, abs=1e-5)
    assert eval_result['num_examples'] == pytest.approx(12.0)
    assert eval_result['num_over'] == pytest.approx(6.0)


@MODELS
def test_federated_reconstruction_metrics_none_loss_decreases(tff_stack, model):
    process = _process('metrics_none_loss_decreases', model)
    _assert_next_type(process, _expected_next_type(model, with_metrics=False))
    eval_result = _evaluate(process, 1.0)['client_work']['eval']['current_round_metrics']
    assert list(eval_result) == ['loss']
    assert eval_result['loss'] < 19.666666


@MODELS
def test_fed_recon_eval_custom_stateful_broadcaster(tff_stack, model):
    process = _process('custom_stateful_broadcaster', model)
    _assert_next_type(
        process,
        _expected_next_type(model, distributor_state=np.int32, distributor_measurements=np.float32),
    )
    result = _evaluate(process)
    assert result['distributor'] == 3.0


def test_evaluation_construction_calls_model_fn():
    mock_model_fn = mock.Mock(side_effect=keras_linear_model_fn)
    fed_recon_eval.build_fed_recon_eval(model_fn=mock_model_fn, loss_fn=loss_fn)
    assert mock_model_fn.call_count == 2


# Ours after TFF's cases (the reconstruction's math against numpy and the totals over
# rounds are checked inside TFF's no_split_data and split_data cases above).


def test_rejects_a_model_fn_of_another_model():
    with pytest.raises(TypeError, match='ReconstructionModel'):
        fed_recon_eval.build_fed_recon_eval(
            lambda: tff.learning.models.ModelWeights([], []), loss_fn=loss_fn
        )


def test_rejects_a_metrics_aggregation_process_of_another_type():
    with pytest.raises(TypeError, match='metrics_aggregation_process'):
        fed_recon_eval.build_fed_recon_eval(
            LinearModel, loss_fn=loss_fn, metrics_aggregation_process=object()
        )


def test_rejects_duplicate_metric_names():
    with pytest.raises(ValueError, match='Duplicate metric name'):
        fed_recon_eval.build_fed_recon_eval(
            LinearModel, loss_fn=loss_fn, metrics_fn=lambda: [NumOverCounter(5.0, name='loss')]
        )
