"""Port of TFF's ``tensorflow_federated/python/learning/algorithms/fed_sgd_test.py``.

Every case of TFF's module is here (``skip_test_for_multi_gpu`` does not apply:
no GPU). Ours after them: FedSGD rounds (math, metrics) on both stacks with the
same bits, and the lowered client loops.
"""

import collections
from unittest import mock

import numpy as np
import pytest
import tensorflow as tf

import simharness as tff
from simharness.learning import loop_builder, model_update_aggregator
from simharness.learning.algorithms import fed_sgd
from simharness.learning.metrics import aggregator
from simharness.learning.models.model_weights import ModelWeights
from simharness.learning.optimizers import sgdm
from tests.tff.learning.algorithms import learning_test_utils as utils
from tests.tff.learning.models.model_examples import LinearRegression

LOOPS = pytest.mark.parametrize(
    'loop_implementation',
    list(loop_builder.LoopImplementation),
    ids=['dataset_iterator', 'dataset_reduce'],
)


def _dataset():
    return (
        tf.data.Dataset.from_tensor_slices(
            collections.OrderedDict(x=[[1.0, 0.0]] * 4, y=[[1.0]] * 4)
        )
        .repeat(3)
        .batch(3)
    )


def _initial_weights(unconnected=False):
    trainable = [tf.constant([[0.0], [0.0]]), tf.constant(0.0)]
    if unconnected:
        trainable.append(tf.constant(0.0))
    return ModelWeights(trainable=trainable, non_trainable=[0.0])


def _close(actual, expected):
    for a, e in zip(actual, expected):
        np.testing.assert_allclose(np.reshape(a, -1), np.reshape(e, -1), rtol=1e-6)


@LOOPS
@pytest.mark.parametrize('unconnected', [False, True], ids=['connected', 'unconnected'])
def test_client_update(loop_implementation, unconnected):
    client_update = fed_sgd._build_client_update(
        LinearRegression(feature_dim=2, has_unconnected=unconnected),
        loop_implementation=loop_implementation,
    )
    result, model_output = client_update(_initial_weights(unconnected), _dataset())
    _close(result.update, [[[-1.0], [0.0]], -1.0] + ([0.0] if unconnected else []))
    assert result.update_weight == 12.0
    assert model_output['num_examples'] == 12


@pytest.mark.parametrize('bad_value', [np.inf, np.nan], ids=['_inf', '_nan'])
def test_non_finite_aggregation(bad_value):
    client_update = fed_sgd._build_client_update(
        LinearRegression(feature_dim=2),
        loop_implementation=loop_builder.LoopImplementation.DATASET_REDUCE,
    )
    weights = _initial_weights()
    weights.trainable[1] = bad_value
    result, _ = client_update(weights, _dataset())
    assert result.update_weight == 0.0
    _close(result.update, [[[0.0], [0.0]], 0.0])


@LOOPS
def test_client_tf_dataset_reduce_fn(loop_implementation):
    with mock.patch.object(
        loop_builder, 'build_training_loop', wraps=loop_builder.build_training_loop
    ) as mock_method:
        client_update = fed_sgd._build_client_update(
            LinearRegression(feature_dim=2), loop_implementation=loop_implementation
        )
        client_update(_initial_weights(), _dataset())
    mock_method.assert_called_once_with(loop_implementation=loop_implementation)


@pytest.mark.parametrize(
    'aggregation_factory',
    [
        model_update_aggregator.robust_aggregator,
        pytest.param(model_update_aggregator.compression_aggregator, marks=utils.NEEDS_ENCODED),
        model_update_aggregator.secure_aggregator,
    ],
    ids=['robust', 'compression', 'secure'],
)
def test_construction_calls_model_fn(aggregation_factory):
    mock_model_fn = mock.Mock(side_effect=LinearRegression)
    fed_sgd.build_fed_sgd(model_fn=mock_model_fn, model_aggregator=aggregation_factory())
    assert mock_model_fn.call_count == 3


@utils.NEEDS_SECURE_METRICS
@pytest.mark.parametrize('functional', [False, True], ids=['variable', 'functional'])
def test_no_unsecure_aggregation_with_secure_aggregator(functional):
    model_fn = utils.build_functional_linear_regression() if functional else LinearRegression
    process = fed_sgd.build_fed_sgd(
        model_fn,
        model_aggregator=model_update_aggregator.secure_aggregator(),
        metrics_aggregator=aggregator.secure_sum_then_finalize,
    )
    utils.assert_not_contains_unsecure_aggregation(process.next)


def _tuple_dataset():
    return _dataset().map(lambda b: (b['x'], b['y']))


@LOOPS
@pytest.mark.parametrize('unconnected', [False, True], ids=['connected', 'unconnected'])
def test_functional_client_update(loop_implementation, unconnected):
    model = utils.build_functional_linear_regression(feature_dim=2, has_unconnected=unconnected)
    client_update = fed_sgd._build_functional_client_update(
        model, loop_implementation=loop_implementation
    )
    result, model_output = client_update(_initial_weights(unconnected), _dataset())
    _close(result.update, [[[-2.0], [0.0]], -2.0] + ([0.0] if unconnected else []))
    assert result.update_weight == 12.0
    assert model_output['num_examples'] == 12


@pytest.mark.parametrize('bad_value', [np.inf, np.nan], ids=['_inf', '_nan'])
def test_functional_non_finite_aggregation(bad_value):
    client_update = fed_sgd._build_functional_client_update(
        utils.build_functional_linear_regression(),
        loop_implementation=loop_builder.LoopImplementation.DATASET_REDUCE,
    )
    weights = _initial_weights()
    weights.trainable[1] = tf.constant(bad_value)
    result, _ = client_update(weights, _dataset())
    assert result.update_weight == 0.0
    _close(result.update, [[[0.0], [0.0]], 0.0])


@LOOPS
def test_functional_client_tf_dataset_reduce_fn(loop_implementation):
    with mock.patch.object(
        loop_builder, 'build_training_loop', wraps=loop_builder.build_training_loop
    ) as mock_method:
        client_update = fed_sgd._build_functional_client_update(
            utils.build_functional_linear_regression(), loop_implementation=loop_implementation
        )
        client_update(_initial_weights(), _dataset())
    mock_method.assert_called_once_with(loop_implementation=loop_implementation)


def test_build_functional_client_work_without_functional_model_fails():
    with pytest.raises(TypeError, match='FunctionalModel'):
        fed_sgd._build_functional_fed_sgd_client_work(
            model=lambda: 0,
            metrics_aggregator=aggregator.sum_then_finalize,
            loop_implementation=loop_builder.LoopImplementation.DATASET_REDUCE,
        )


def test_build_functional_fed_sgd_succeeds():
    fed_sgd.build_fed_sgd(model_fn=utils.build_functional_linear_regression())


# -- ours: execution -------------------------------------------------------------------------


def test_fed_sgd_rounds(tff_stack):
    process = fed_sgd.build_fed_sgd(LinearRegression, server_optimizer_fn=sgdm.build_sgdm(1.0))
    state = process.initialize()
    state, metrics = process.next(state, [_dataset(), _dataset()])
    # Both clients' mean gradient is ([-1, 0], -1): one server SGD step at 1.0.
    weights = process.get_model_weights(state)
    _close(weights.trainable, [[[1.0], [0.0]], 1.0])
    train = metrics['client_work']['train']
    assert train['num_examples'] == 24
    np.testing.assert_allclose(train['loss'], 0.5, rtol=1e-6)


def test_fed_sgd_functional_same_bits_on_stacks(stack_registry):
    process = fed_sgd.build_fed_sgd(utils.build_functional_linear_regression())
    datasets = utils.tuple_datasets(utils.linear_datasets(num_clients=3))
    assert utils.assert_client_loops_lowered(process) == 1

    def run():
        state = process.initialize()
        for _ in range(2):
            state, metrics = process.next(state, datasets)
        return state, metrics

    state, metrics = utils.assert_same_bits_on_stacks(stack_registry, run)
    assert metrics['client_work']['train']['num_examples'] == 3 + 5 + 3


def test_keras_server_optimizer_with_learning_rate_schedule():
    """google-research/federated's FedSGD test: ``build_fed_sgd(model_fn,
    server_optimizer_fn)`` with a Keras SGD of a ``LearningRateSchedule`` (TFF up to
    v0.86; there the default server optimizer was Keras SGD at 0.1). The schedule steps
    with the optimizer's ``iterations``, carried in the server state, as
    `schedule_learning_rate` steps with the rounds."""
    datasets = utils.linear_datasets(num_clients=1)
    schedule = tf.keras.optimizers.schedules.ExponentialDecay(0.5, decay_steps=1, decay_rate=0.5)
    tff_schedule = lambda r: 0.5 * tf.pow(0.5, tf.cast(r, tf.float32))  # noqa: E731
    results = []
    for server in (
        lambda: tf.keras.optimizers.SGD(schedule),
        tff.learning.optimizers.schedule_learning_rate(sgdm.build_sgdm(1.0), tff_schedule),
    ):
        process = fed_sgd.build_fed_sgd(LinearRegression, server_optimizer_fn=server)
        state = process.initialize()
        for _ in range(2):
            state, _ = process.next(state, datasets)
        results.append(state)
    # A schedule is no variable: the state is [iteration] (Keras 2's structure too).
    assert [int(v) for v in results[0].finalizer] == [2]
    for a, b in zip(
        utils.flat_arrays(results[0].global_model_weights.trainable),
        utils.flat_arrays(results[1].global_model_weights.trainable),
    ):
        np.testing.assert_allclose(a, b, rtol=1e-6)
        assert np.any(a != 0.0)
