"""Port of TFF's ``tensorflow_federated/python/learning/algorithms/fed_avg_test.py``.

Every case of TFF's module is here. TFF's module only builds processes; the
execution cases below it are ours: FedAvg's math on `LinearRegression` against
numpy, the state and metric structures, Keras and functional models, the client
loops lowered to tensor loops, and the same bits on the thread and process stacks.
"""

import collections
from unittest import mock

import numpy as np
import pytest
import tensorflow as tf

import simharness as tff
from simharness.aggregators import factory_utils
from simharness.learning import loop_builder, model_update_aggregator
from simharness.learning.algorithms import fed_avg
from simharness.learning.metrics import aggregator
from simharness.learning.models.model_weights import ModelWeights
from simharness.learning.optimizers import sgdm
from simharness.learning.templates import LearningAlgorithmState, LearningProcess
from tests.tff.learning.algorithms import learning_test_utils as utils
from tests.tff.learning.models.model_examples import (
    LinearRegression,
    keras_linear_model,
    linear_functional_model,
)


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
    fed_avg.build_weighted_fed_avg(
        model_fn=mock_model_fn,
        client_optimizer_fn=sgdm.build_sgdm(learning_rate=0.1),
        model_aggregator=aggregation_factory(),
    )
    assert mock_model_fn.call_count == 3


@pytest.mark.parametrize(
    'loop_implementation',
    list(loop_builder.LoopImplementation),
    ids=['dataset_iterator', 'dataset_reduce'],
)
def test_client_tf_dataset_reduce_fn(loop_implementation):
    with mock.patch.object(
        loop_builder, 'build_training_loop', wraps=loop_builder.build_training_loop
    ) as mock_method:
        fed_avg.build_weighted_fed_avg(
            model_fn=LinearRegression,
            client_optimizer_fn=sgdm.build_sgdm(1.0),
            loop_implementation=loop_implementation,
        )
    mock_method.assert_called_once_with(loop_implementation=loop_implementation)


def test_build_weighted_fed_avg_called_by_unweighted_fed_avg():
    with mock.patch.object(fed_avg, 'build_weighted_fed_avg') as mock_fed_avg:
        fed_avg.build_unweighted_fed_avg(
            model_fn=LinearRegression, client_optimizer_fn=sgdm.build_sgdm(1.0)
        )
    assert mock_fed_avg.call_count == 1


def test_aggregation_wrapper_called_by_unweighted():
    with (
        mock.patch.object(fed_avg, 'build_weighted_fed_avg'),
        mock.patch.object(factory_utils, 'as_weighted_aggregator') as mock_as_weighted,
    ):
        fed_avg.build_unweighted_fed_avg(
            model_fn=LinearRegression, client_optimizer_fn=sgdm.build_sgdm(1.0)
        )
    assert mock_as_weighted.call_count == 1


def test_raises_on_callable_non_model_fn():
    with pytest.raises(TypeError, match='callable returned type:'):
        fed_avg.build_weighted_fed_avg(model_fn=lambda: 0, client_optimizer_fn=sgdm.build_sgdm())
    with pytest.raises(TypeError, match='callable returned type:'):
        fed_avg.build_unweighted_fed_avg(model_fn=lambda: 0, client_optimizer_fn=sgdm.build_sgdm())


def test_raises_on_invalid_client_weighting():
    with pytest.raises(TypeError, match='client_weighting'):
        fed_avg.build_weighted_fed_avg(
            model_fn=LinearRegression,
            client_optimizer_fn=sgdm.build_sgdm(1.0),
            client_weighting='uniform',
        )


def test_weighted_fed_avg_raises_on_unweighted_aggregator():
    with pytest.raises(TypeError, match='WeightedAggregationFactory'):
        fed_avg.build_weighted_fed_avg(
            model_fn=LinearRegression,
            client_optimizer_fn=sgdm.build_sgdm(1.0),
            model_aggregator=model_update_aggregator.robust_aggregator(weighted=False),
        )


def test_unweighted_fed_avg_raises_on_weighted_aggregator():
    with pytest.raises(TypeError, match='UnweightedAggregationFactory'):
        fed_avg.build_unweighted_fed_avg(
            model_fn=LinearRegression,
            client_optimizer_fn=sgdm.build_sgdm(1.0),
            model_aggregator=model_update_aggregator.robust_aggregator(weighted=True),
        )


@utils.NEEDS_SECURE_METRICS
@pytest.mark.parametrize('weighted', [True, False], ids=['weighted', 'unweighted'])
def test_fed_avg_with_only_secure_aggregation(weighted):
    build = fed_avg.build_weighted_fed_avg if weighted else fed_avg.build_unweighted_fed_avg
    process = build(
        LinearRegression,
        client_optimizer_fn=sgdm.build_sgdm(),
        model_aggregator=model_update_aggregator.secure_aggregator(weighted=weighted),
        metrics_aggregator=aggregator.secure_sum_then_finalize,
    )
    utils.assert_not_contains_unsecure_aggregation(process.next)


@pytest.mark.parametrize(
    'constructor',
    [fed_avg.build_weighted_fed_avg, fed_avg.build_unweighted_fed_avg],
    ids=['weighted', 'unweighted'],
)
def test_raises_on_non_callable_or_functional_model(constructor):
    with pytest.raises(TypeError, match='is not a callable'):
        constructor(model_fn=0, client_optimizer_fn=sgdm.build_sgdm(learning_rate=0.1))


@pytest.mark.parametrize(
    'constructor',
    [fed_avg.build_weighted_fed_avg, fed_avg.build_unweighted_fed_avg],
    ids=['weighted', 'unweighted'],
)
@utils.NEEDS_SECURE_METRICS
def test_functional_fed_avg_with_only_secure_aggregation(constructor):
    process = constructor(
        model_fn=utils.build_functional_linear_regression(),
        client_optimizer_fn=sgdm.build_sgdm(learning_rate=0.1),
        server_optimizer_fn=sgdm.build_sgdm(),
        model_aggregator=model_update_aggregator.secure_aggregator(
            weighted=constructor is fed_avg.build_weighted_fed_avg
        ),
        metrics_aggregator=aggregator.secure_sum_then_finalize,
    )
    utils.assert_not_contains_unsecure_aggregation(process.next)


# -- ours: execution -------------------------------------------------------------------------


def _numpy_fedavg_round(weights, datasets, client_lr, weighted=True):
    """One FedAvg round of `LinearRegression` in float64: (new (a, b), loss, num_examples)."""
    a0, b0 = weights
    deltas, counts, loss_sum = [], [], 0.0
    for ds in datasets:
        a, b, n = a0.astype(np.float64), np.float64(b0), 0
        for batch in ds.as_numpy_iterator():
            x, y = batch['x'].astype(np.float64), batch['y'].astype(np.float64)
            res = x @ a + b - y
            loss_sum += 0.5 * np.sum(res**2)
            a = a - client_lr * x.T @ res / len(x)
            b = b - client_lr * np.sum(res) / len(x)
            n += len(x)
        deltas.append((a0 - a, b0 - b))
        counts.append(n)
    w = np.asarray(counts, np.float64) if weighted else np.ones(len(counts))
    mean_a = sum(wk * d[0] for wk, d in zip(w, deltas)) / w.sum()
    mean_b = sum(wk * d[1] for wk, d in zip(w, deltas)) / w.sum()
    return (a0 - mean_a, b0 - mean_b), loss_sum / sum(counts), sum(counts)


@pytest.mark.parametrize('weighted', [True, False], ids=['weighted', 'unweighted'])
def test_fed_avg_math_and_structures(tff_stack, weighted):
    build = fed_avg.build_weighted_fed_avg if weighted else fed_avg.build_unweighted_fed_avg
    process = build(LinearRegression, client_optimizer_fn=sgdm.build_sgdm(0.1))
    assert isinstance(process, LearningProcess)
    datasets = utils.linear_datasets()
    state = process.initialize()
    assert isinstance(state, LearningAlgorithmState)
    assert isinstance(state.global_model_weights, ModelWeights)
    assert state.finalizer == collections.OrderedDict(learning_rate=np.float32(1.0))
    weights = (np.zeros([2, 1], np.float32), 0.0)
    for _ in range(2):
        state, metrics = process.next(state, datasets)
        weights, loss, n = _numpy_fedavg_round(weights, datasets, 0.1, weighted)
        new = process.get_model_weights(state)
        np.testing.assert_allclose(new.trainable[0], weights[0], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(new.trainable[1], weights[1], rtol=1e-5, atol=1e-6)
        assert list(metrics) == ['distributor', 'client_work', 'aggregator', 'finalizer']
        train = metrics['client_work']['train']
        assert list(train) == ['loss', 'num_examples']
        np.testing.assert_allclose(train['loss'], loss, rtol=1e-5)
        assert train['num_examples'] == n
        assert metrics['finalizer'] == collections.OrderedDict(update_non_finite=0)


def test_set_model_weights_and_hparams(tff_stack):
    process = fed_avg.build_weighted_fed_avg(
        LinearRegression, sgdm.build_sgdm(0.1), sgdm.build_sgdm(0.5, momentum=0.9)
    )
    state = process.initialize()
    hparams = process.get_hparams(state)
    assert list(hparams) == ['client_work', 'finalizer']
    np.testing.assert_allclose(hparams['client_work']['learning_rate'], 0.1, rtol=1e-6)
    np.testing.assert_allclose(
        [hparams['finalizer']['learning_rate'], hparams['finalizer']['momentum']],
        [0.5, 0.9],
        rtol=1e-6,
    )
    hparams['client_work']['learning_rate'] = np.float32(0.0)
    state = process.set_hparams(state, hparams)
    weights = ModelWeights([np.ones([2, 1], np.float32), np.float32(2.0)], [np.float32(0.0)])
    state = process.set_model_weights(state, weights)
    state, _ = process.next(state, utils.linear_datasets())
    # A client learning rate of 0: no update, the weights stay.
    new = process.get_model_weights(state)
    np.testing.assert_array_equal(new.trainable[0], weights.trainable[0])
    assert new.trainable[1] == 2.0


def _keras_model_fn():
    return tff.learning.models.from_keras_model(
        keras_linear_model(),
        loss=tf.keras.losses.MeanSquaredError(),
        input_spec=(tf.TensorSpec([None, 2], tf.float32), tf.TensorSpec([None, 1], tf.float32)),
        metrics=[tf.keras.metrics.MeanSquaredError()],
    )


def test_keras_and_functional_models_agree(tff_stack):
    """The same linear model as Keras (VariableModel) and FunctionalModel: same weights."""
    datasets = utils.tuple_datasets(utils.linear_datasets())
    results = []
    for model_fn in (_keras_model_fn, linear_functional_model()):
        process = fed_avg.build_weighted_fed_avg(model_fn, sgdm.build_sgdm(0.05))
        state = process.initialize()
        state, metrics = process.next(state, datasets)
        if model_fn is _keras_model_fn:  # the functional model has no metrics
            assert metrics['client_work']['train']['num_examples'] == 8
        w = process.get_model_weights(state).trainable
        results.append((np.reshape(w[0], [-1]), np.reshape(w[1], [-1])))
    np.testing.assert_allclose(results[0][0], results[1][0], rtol=1e-5)
    np.testing.assert_allclose(results[0][1], results[1][1], rtol=1e-5)


@pytest.mark.parametrize('model', ['variable', 'keras', 'functional'])
def test_client_loops_are_lowered(model):
    model_fn = {
        'variable': LinearRegression,
        'keras': _keras_model_fn,
        'functional': linear_functional_model(),
    }[model]
    for loop in loop_builder.LoopImplementation:
        process = fed_avg.build_weighted_fed_avg(
            model_fn, sgdm.build_sgdm(0.1), loop_implementation=loop
        )
        assert utils.assert_client_loops_lowered(process) == 1


def test_same_bits_on_thread_and_process_stacks(stack_registry):
    process = fed_avg.build_weighted_fed_avg(
        LinearRegression, sgdm.build_sgdm(0.1), sgdm.build_sgdm(1.0, momentum=0.9)
    )
    datasets = utils.linear_datasets(num_clients=5, sizes=(3, 5, 4))

    def run():
        state = process.initialize()
        for _ in range(2):
            state, metrics = process.next(state, datasets)
        return state, metrics

    utils.assert_same_bits_on_stacks(stack_registry, run)


# -- Keras optimizers (TFF v0.86; TFF 0.87 dropped them) -----------------------------------


def test_construction_calls_model_fn_with_keras_optimizer():
    mock_model_fn = mock.Mock(side_effect=LinearRegression)
    fed_avg.build_weighted_fed_avg(
        model_fn=mock_model_fn,
        client_optimizer_fn=tf.keras.optimizers.SGD,
        model_aggregator=model_update_aggregator.robust_aggregator(),
    )
    assert mock_model_fn.call_count == 3


@pytest.mark.parametrize(
    'constructor',
    [fed_avg.build_weighted_fed_avg, fed_avg.build_unweighted_fed_avg],
    ids=['weighted', 'unweighted'],
)
def test_functional_model_raises_on_non_tff_optimizer(constructor):
    model = linear_functional_model()
    with pytest.raises(TypeError, match='client_optimizer_fn'):
        constructor(
            model_fn=model,
            client_optimizer_fn=tf.keras.optimizers.SGD,
            server_optimizer_fn=sgdm.build_sgdm(),
        )
    with pytest.raises(TypeError, match='server_optimizer_fn'):
        constructor(
            model_fn=model,
            client_optimizer_fn=sgdm.build_sgdm(learning_rate=0.1),
            server_optimizer_fn=tf.keras.optimizers.SGD,
        )


def test_keras_sgd_gives_build_sgdm_bits_on_both_stacks(stack_registry):
    """Keras SGD(0.1) at the clients and the server: the weights and metrics of
    `build_sgdm(0.1)` to the bit over 3 rounds (Keras steps the model's variables, the
    TFF optimizer the stateless Keras forward pass), on the thread and process stacks."""
    datasets = utils.tuple_datasets(utils.linear_datasets())

    def run(client, server):
        process = fed_avg.build_weighted_fed_avg(_keras_model_fn, client, server)
        state = process.initialize()
        for _ in range(3):
            state, metrics = process.next(state, datasets)
        return state, metrics

    keras_sgd = lambda: tf.keras.optimizers.SGD(0.1)  # noqa: E731
    state, metrics = utils.assert_same_bits_on_stacks(
        stack_registry, lambda: run(keras_sgd, keras_sgd)
    )
    assert [int(state.finalizer[0]), float(state.finalizer[1])] == [3, np.float32(0.1)]
    assert state.client_work == ()
    with stack_registry.open('local'):
        tff_state, tff_metrics = run(sgdm.build_sgdm(0.1), sgdm.build_sgdm(0.1))
    for a, b in zip(
        utils.flat_arrays(state.global_model_weights),
        utils.flat_arrays(tff_state.global_model_weights),
    ):
        assert a.tobytes() == b.tobytes()
    for a, b in zip(
        utils.flat_arrays(metrics['client_work']), utils.flat_arrays(tff_metrics['client_work'])
    ):
        assert a.tobytes() == b.tobytes()


def test_keras_server_momentum_carries_across_rounds():
    """The server state is the Keras optimizer's variables: its momentum carries over, so
    Keras SGD with momentum follows `build_sgdm` with momentum (Keras keeps -lr times TFF's
    accumulator)."""
    datasets = utils.linear_datasets()
    results = []
    for server in (
        lambda: tf.keras.optimizers.SGD(0.5, momentum=0.9),
        sgdm.build_sgdm(0.5, momentum=0.9),
    ):
        process = fed_avg.build_weighted_fed_avg(LinearRegression, sgdm.build_sgdm(0.1), server)
        state = process.initialize()
        for _ in range(3):
            state, _ = process.next(state, datasets)
        results.append(state)
    keras_state, tff_state = results
    iteration, learning_rate, *momentums = keras_state.finalizer
    assert (int(iteration), float(learning_rate)) == (3, 0.5)
    for m, acc in zip(momentums, tf.nest.flatten(tff_state.finalizer['accumulator'])):
        np.testing.assert_allclose(m, -0.5 * np.asarray(acc), rtol=1e-5)
        assert np.any(np.asarray(m) != 0.0)
    for a, b in zip(
        utils.flat_arrays(keras_state.global_model_weights),
        utils.flat_arrays(tff_state.global_model_weights),
    ):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
