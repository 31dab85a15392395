"""Port of TFF's ``tensorflow_federated/python/learning/algorithms/fed_prox_test.py``.

Every case of TFF's module is here (construction only). Ours after them:
FedProx's math on `LinearRegression` against numpy with TFF's proximal term
(see `_numpy_fedprox_round`; the term changes the result; strength 0 is FedAvg), the lowered client loops, the same bits on
both stacks. At the end, v0.86's Keras-optimizer cases (TFF 0.87 dropped them).
"""

from unittest import mock

import numpy as np
import pytest
import tensorflow as tf

from simharness.aggregators import factory_utils
from simharness.learning import loop_builder, model_update_aggregator
from simharness.learning.algorithms import fed_avg, fed_prox
from simharness.learning.metrics import aggregator
from simharness.learning.models import model_weights
from simharness.learning.optimizers import sgdm
from simharness.learning.templates import distributors
from simharness.templates import IterativeProcess
from tests.tff.learning.algorithms import learning_test_utils as utils
from tests.tff.learning.models.model_examples import LinearRegression


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
    fed_prox.build_weighted_fed_prox(
        model_fn=mock_model_fn,
        proximal_strength=1.0,
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
        fed_prox.build_weighted_fed_prox(
            model_fn=LinearRegression,
            proximal_strength=1.0,
            client_optimizer_fn=sgdm.build_sgdm(1.0),
            loop_implementation=loop_implementation,
        )
    mock_method.assert_called_once_with(loop_implementation=loop_implementation)


@pytest.mark.parametrize(
    'build',
    [fed_prox.build_unweighted_fed_prox, fed_prox.build_weighted_fed_prox],
    ids=['unweighted', 'weighted'],
)
def test_build_functional_model_fed_prox(build):
    build(
        model_fn=utils.build_functional_linear_regression(feature_dim=2),
        proximal_strength=1.0,
        client_optimizer_fn=sgdm.build_sgdm(1.0),
    )


def test_build_weighted_fed_prox_called_by_unweighted_fed_prox():
    with mock.patch.object(fed_prox, 'build_weighted_fed_prox') as mock_fed_prox:
        fed_prox.build_unweighted_fed_prox(
            model_fn=LinearRegression,
            proximal_strength=1.0,
            client_optimizer_fn=sgdm.build_sgdm(1.0),
        )
    assert mock_fed_prox.call_count == 1


def test_aggregation_wrapper_called_by_unweighted():
    with (
        mock.patch.object(fed_prox, 'build_weighted_fed_prox'),
        mock.patch.object(factory_utils, 'as_weighted_aggregator') as mock_as_weighted,
    ):
        fed_prox.build_unweighted_fed_prox(
            model_fn=LinearRegression,
            proximal_strength=1.0,
            client_optimizer_fn=sgdm.build_sgdm(1.0),
        )
    assert mock_as_weighted.call_count == 1


def test_raises_on_non_callable_model_fn():
    with pytest.raises(TypeError):
        fed_prox.build_weighted_fed_prox(
            model_fn=LinearRegression(),
            proximal_strength=1.0,
            client_optimizer_fn=sgdm.build_sgdm(),
        )


def test_raises_on_negative_proximal_strength():
    with pytest.raises(ValueError):
        fed_prox.build_weighted_fed_prox(
            model_fn=LinearRegression, proximal_strength=-1.0, client_optimizer_fn=sgdm.build_sgdm()
        )


def test_raises_on_invalid_distributor():
    distributor = distributors.build_broadcast_process(
        model_weights.weights_type_from_model(LinearRegression)
    )
    with pytest.raises(TypeError):
        fed_prox.build_weighted_fed_prox(
            model_fn=LinearRegression,
            proximal_strength=1.0,
            client_optimizer_fn=sgdm.build_sgdm(1.0),
            model_distributor=IterativeProcess(distributor.initialize, distributor.next),
        )


def test_weighted_fed_prox_raises_on_unweighted_aggregator():
    with pytest.raises(TypeError, match='WeightedAggregationFactory'):
        fed_prox.build_weighted_fed_prox(
            model_fn=LinearRegression,
            proximal_strength=1.0,
            client_optimizer_fn=sgdm.build_sgdm(1.0),
            model_aggregator=model_update_aggregator.robust_aggregator(weighted=False),
        )


def test_unweighted_fed_prox_raises_on_weighted_aggregator():
    with pytest.raises(TypeError, match='UnweightedAggregationFactory'):
        fed_prox.build_unweighted_fed_prox(
            model_fn=LinearRegression,
            proximal_strength=1.0,
            client_optimizer_fn=sgdm.build_sgdm(1.0),
            model_aggregator=model_update_aggregator.robust_aggregator(weighted=True),
        )


@utils.NEEDS_SECURE_METRICS
@pytest.mark.parametrize('weighted', [True, False], ids=['weighted', 'unweighted'])
def test_fed_prox_with_only_secure_aggregation(weighted):
    build = fed_prox.build_weighted_fed_prox if weighted else fed_prox.build_unweighted_fed_prox
    process = build(
        LinearRegression,
        proximal_strength=1.0,
        client_optimizer_fn=sgdm.build_sgdm(),
        model_aggregator=model_update_aggregator.secure_aggregator(weighted=weighted),
        metrics_aggregator=aggregator.secure_sum_then_finalize,
    )
    utils.assert_not_contains_unsecure_aggregation(process.next)


# -- ours: execution -------------------------------------------------------------------------


def _numpy_fedprox_round(datasets, lr, mu):
    """One FedProx round from zero weights (float64): the new (a, b).

    TFF adds ``mu * (w_initial - w)`` to the gradient (its proximal_client_work:
    ``lambda x, y: mu * (y - x)`` over (weights, initial weights)), the opposite
    sign of Li et al.'s ``mu * (w - w_initial)``; we match TFF.
    """
    a0, b0 = np.zeros([2, 1]), 0.0
    deltas, counts = [], []
    for ds in datasets:
        a, b, n = a0.copy(), b0, 0
        for batch in ds.as_numpy_iterator():
            x, y = batch['x'].astype(np.float64), batch['y'].astype(np.float64)
            res = x @ a + b - y
            ga = x.T @ res / len(x) + mu * (a0 - a)
            gb = np.sum(res) / len(x) + mu * (b0 - b)
            a, b, n = a - lr * ga, b - lr * gb, n + len(x)
        deltas.append((a0 - a, b0 - b))
        counts.append(n)
    w = np.asarray(counts, np.float64)
    return (
        a0 - sum(wk * d[0] for wk, d in zip(w, deltas)) / w.sum(),
        b0 - sum(wk * d[1] for wk, d in zip(w, deltas)) / w.sum(),
    )


def test_fed_prox_math(tff_stack):
    datasets = utils.linear_datasets()
    process = fed_prox.build_weighted_fed_prox(
        LinearRegression, proximal_strength=0.5, client_optimizer_fn=sgdm.build_sgdm(0.5)
    )
    state, metrics = process.next(process.initialize(), datasets)
    a, b = _numpy_fedprox_round(datasets, 0.5, 0.5)
    weights = process.get_model_weights(state).trainable
    np.testing.assert_allclose(weights[0], a, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(weights[1], b, rtol=1e-5, atol=1e-6)
    assert metrics['client_work']['train']['num_examples'] == 8
    a_avg, _ = _numpy_fedprox_round(datasets, 0.5, 0.0)
    assert not np.allclose(a, a_avg)  # the proximal term matters


def test_zero_strength_is_fed_avg():
    datasets = utils.linear_datasets()
    prox = fed_prox.build_weighted_fed_prox(
        LinearRegression, proximal_strength=0.0, client_optimizer_fn=sgdm.build_sgdm(0.1)
    )
    avg = fed_avg.build_weighted_fed_avg(LinearRegression, sgdm.build_sgdm(0.1))
    prox_state, _ = prox.next(prox.initialize(), datasets)
    avg_state, _ = avg.next(avg.initialize(), datasets)
    for x, y in zip(
        utils.flat_arrays(prox.get_model_weights(prox_state)),
        utils.flat_arrays(avg.get_model_weights(avg_state)),
    ):
        np.testing.assert_array_equal(x, y)


def test_functional_lowered_and_same_bits_on_stacks(stack_registry):
    process = fed_prox.build_weighted_fed_prox(
        utils.build_functional_linear_regression(),
        proximal_strength=0.1,
        client_optimizer_fn=sgdm.build_sgdm(0.1),
    )
    assert utils.assert_client_loops_lowered(process) == 1
    datasets = utils.tuple_datasets(utils.linear_datasets(num_clients=3))

    def run():
        state = process.initialize()
        for _ in range(2):
            state, metrics = process.next(state, datasets)
        return state, metrics

    utils.assert_same_bits_on_stacks(stack_registry, run)


# -- Keras optimizers (TFF v0.86) ----------------------------------------------------------


def test_construction_calls_model_fn_with_keras_optimizer():
    mock_model_fn = mock.Mock(side_effect=LinearRegression)
    fed_prox.build_weighted_fed_prox(
        model_fn=mock_model_fn,
        proximal_strength=1.0,
        client_optimizer_fn=tf.keras.optimizers.SGD,
        model_aggregator=model_update_aggregator.robust_aggregator(),
    )
    assert mock_model_fn.call_count == 3


def test_build_functional_model_fed_prox_non_tff_optimizer_fails():
    with pytest.raises(
        TypeError, match='client_optimizer_fn` must be a `tff.learning.optimizers.Optimizer'
    ):
        fed_prox.build_weighted_fed_prox(
            model_fn=utils.build_functional_linear_regression(feature_dim=2),
            proximal_strength=1.0,
            client_optimizer_fn=tf.keras.optimizers.SGD,
        )


def test_keras_optimizers_run():
    """Keras SGD at the clients (proximal term on its gradients) and the server: one round,
    the same weights as `build_sgdm`."""
    datasets = utils.linear_datasets()
    weights = []
    for client, server in (
        (lambda: tf.keras.optimizers.SGD(0.1), lambda: tf.keras.optimizers.SGD(1.0)),
        (sgdm.build_sgdm(0.1), sgdm.build_sgdm(1.0)),
    ):
        process = fed_prox.build_weighted_fed_prox(LinearRegression, 0.5, client, server)
        state, _ = process.next(process.initialize(), datasets)
        weights.append(utils.flat_arrays(process.get_model_weights(state).trainable))
    for a, b in zip(*weights):
        np.testing.assert_array_equal(a, b)
