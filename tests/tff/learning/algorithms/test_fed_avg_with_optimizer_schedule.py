"""Port of TFF's ``learning/algorithms/fed_avg_with_optimizer_schedule_test.py``.

Every case of TFF's module is here; `test_schedule_runs` (ours) runs two rounds
of a schedule and checks the reported learning rates and the state. At the end,
v0.86's Keras-optimizer cases (TFF 0.87 dropped them), each once.
"""

from unittest import mock

import numpy as np
import pytest
import tensorflow as tf

from simharness.learning import loop_builder, model_update_aggregator
from simharness.learning.algorithms import fed_avg_with_optimizer_schedule as scheduled
from simharness.learning.metrics import aggregator
from simharness.learning.optimizers import sgdm
from tests.tff.learning.algorithms import learning_test_utils as utils
from tests.tff.learning.models.model_examples import LinearRegression

build = scheduled.build_weighted_fed_avg_with_optimizer_schedule


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
    build(
        model_fn=mock_model_fn,
        client_learning_rate_fn=lambda x: 0.1,
        client_optimizer_fn=lambda x: sgdm.build_sgdm(learning_rate=x),
        model_aggregator=aggregation_factory(),
    )
    assert mock_model_fn.call_count == 3


def test_construction_of_functional_model():
    build(
        model_fn=utils.build_functional_linear_regression(),
        client_learning_rate_fn=lambda x: 0.1,
        client_optimizer_fn=lambda x: sgdm.build_sgdm(learning_rate=x),
    )


@pytest.mark.parametrize(
    'loop_implementation',
    list(loop_builder.LoopImplementation),
    ids=['dataset_iterator', 'dataset_reduce'],
)
def test_client_tf_dataset_reduce_fn(loop_implementation):
    with mock.patch.object(
        loop_builder, 'build_training_loop', wraps=loop_builder.build_training_loop
    ) as mock_reduce:
        build(
            model_fn=LinearRegression,
            client_learning_rate_fn=lambda x: 0.5,
            client_optimizer_fn=lambda x: sgdm.build_sgdm(),
            loop_implementation=loop_implementation,
        )
    mock_reduce.assert_called_once_with(loop_implementation=loop_implementation)


def test_construction_calls_client_learning_rate_fn():
    mock_learning_rate_fn = mock.Mock(side_effect=lambda x: 1.0)
    build(
        model_fn=LinearRegression,
        client_learning_rate_fn=mock_learning_rate_fn,
        client_optimizer_fn=lambda x: sgdm.build_sgdm(),
    )
    assert mock_learning_rate_fn.call_count == 2


def test_construction_calls_client_optimizer_fn():
    mock_optimizer_fn = mock.Mock(side_effect=lambda x: sgdm.build_sgdm())
    build(
        model_fn=LinearRegression,
        client_learning_rate_fn=lambda x: 0.5,
        client_optimizer_fn=mock_optimizer_fn,
    )
    assert mock_optimizer_fn.call_count == 2
    assert mock_optimizer_fn.call_args_list[0][0][0] == 1.0
    assert mock_optimizer_fn.call_args_list[1][0][0] == 0.5


def test_constructs_with_non_constant_learning_rate():
    def learning_rate_fn(round_num):
        return tf.cond(tf.less(round_num, 2), lambda: 0.1, lambda: 0.01)

    build(
        model_fn=LinearRegression,
        client_learning_rate_fn=learning_rate_fn,
        client_optimizer_fn=lambda x: sgdm.build_sgdm(),
    )


def test_constructs_with_tf_function():
    @tf.function
    def learning_rate_fn(round_num):
        if round_num < 2:
            return 0.1
        return 0.01

    build(
        model_fn=LinearRegression,
        client_learning_rate_fn=learning_rate_fn,
        client_optimizer_fn=lambda x: sgdm.build_sgdm(),
    )


def test_raises_on_non_callable_model_fn():
    with pytest.raises(TypeError):
        build(
            model_fn=LinearRegression(),
            client_learning_rate_fn=lambda x: 0.1,
            client_optimizer_fn=lambda _: sgdm.build_sgdm(),
        )


@utils.NEEDS_SECURE_METRICS
def test_construction_with_only_secure_aggregation():
    process = build(
        LinearRegression,
        client_learning_rate_fn=lambda x: 0.5,
        client_optimizer_fn=lambda x: sgdm.build_sgdm(),
        model_aggregator=model_update_aggregator.secure_aggregator(weighted=True),
        metrics_aggregator=aggregator.secure_sum_then_finalize,
    )
    utils.assert_not_contains_unsecure_aggregation(process.next)


def test_measurements_include_client_learning_rate():
    client_work = scheduled.build_scheduled_client_work(
        model_fn=LinearRegression,
        learning_rate_fn=lambda x: 1.0,
        optimizer_fn=lambda _: sgdm.build_sgdm(),
        metrics_aggregator=aggregator.sum_then_finalize,
    )
    assert hasattr(client_work.next.type_signature.result[2].member, 'client_learning_rate')


def test_schedule_runs(tff_stack):
    def learning_rate_fn(round_num):
        return 0.1 / tf.cast(round_num + 1, tf.float32)

    process = build(
        LinearRegression,
        client_learning_rate_fn=learning_rate_fn,
        client_optimizer_fn=lambda lr: sgdm.build_sgdm(learning_rate=lr),
    )
    state = process.initialize()
    assert state.client_work == 0
    datasets = utils.linear_datasets()
    for r in range(2):
        state, metrics = process.next(state, datasets)
        np.testing.assert_allclose(
            metrics['client_work']['client_learning_rate'], 0.1 / (r + 1), rtol=1e-6
        )
        assert metrics['client_work']['train']['num_examples'] == 8
    assert state.client_work == 2
    assert utils.assert_client_loops_lowered(process) == 1


# -- Keras optimizers (TFF v0.86) ----------------------------------------------------------


def test_construction_calls_optimizer_fns_with_keras_optimizers():
    """v0.86's keras_optimizer cases of the learning-rate and optimizer function calls, and
    its server-optimizer case."""
    mock_learning_rate_fn = mock.Mock(side_effect=lambda x: 0.5)
    mock_optimizer_fn = mock.Mock(side_effect=tf.keras.optimizers.SGD)
    mock_server_optimizer_fn = mock.Mock(side_effect=tf.keras.optimizers.SGD)
    build(
        model_fn=LinearRegression,
        client_learning_rate_fn=mock_learning_rate_fn,
        client_optimizer_fn=mock_optimizer_fn,
        server_optimizer_fn=mock_server_optimizer_fn,
    )
    assert mock_learning_rate_fn.call_count == 2
    assert mock_optimizer_fn.call_count == 2
    assert mock_optimizer_fn.call_args_list[0][0][0] == 1.0
    mock_server_optimizer_fn.assert_called()


def test_functional_model_with_keras_optimizer_raises():
    with pytest.raises(ValueError, match='FunctionalModel'):
        build(
            model_fn=utils.build_functional_linear_regression(),
            client_learning_rate_fn=lambda x: 0.1,
            client_optimizer_fn=tf.keras.optimizers.SGD,
        )


def test_keras_schedule_runs(tff_stack):
    """A Keras SGD made each round at the scheduled rate: `build_sgdm`'s weights."""

    def learning_rate_fn(round_num):
        return 0.1 / tf.cast(round_num + 1, tf.float32)

    datasets = utils.linear_datasets()
    weights = []
    for optimizer_fn in (tf.keras.optimizers.SGD, lambda lr: sgdm.build_sgdm(learning_rate=lr)):
        process = build(
            LinearRegression,
            client_learning_rate_fn=learning_rate_fn,
            client_optimizer_fn=optimizer_fn,
        )
        state = process.initialize()
        for r in range(2):
            state, metrics = process.next(state, datasets)
            np.testing.assert_allclose(
                metrics['client_work']['client_learning_rate'], 0.1 / (r + 1), rtol=1e-6
            )
        weights.append(utils.flat_arrays(process.get_model_weights(state).trainable))
    for a, b in zip(*weights):
        np.testing.assert_array_equal(a, b)
