"""Port of TFF's ``tensorflow_federated/python/learning/algorithms/mime_test.py``.

TFF's cases are here, with fewer repetitions to keep the suite fast:
`test_execution_with_optimizer` (client work) runs three of TFF's six base
optimizers (adagrad, adam, sgdm; rmsprop, sgd and yogi left out);
`test_execution_with_optimizers` two of TFF's four (sgdm/sgd, adagrad/sgdm);
`test_functional_matches_variable_model` one pair (sgdm/adam) for 3 rounds,
not 10; the construction-only client-work cases use the VariableModel only.
The execution cases run on the thread stack; ours, last, runs a round on the
thread and process stacks (same bits) and checks the client loops are lowered.
"""

import collections
from unittest import mock

import numpy as np
import pytest
import tensorflow as tf

import simharness as tff
from simharness.aggregators import factory_utils, mean
from simharness.learning import loop_builder, model_update_aggregator
from simharness.learning.algorithms import fed_avg, mime
from simharness.learning.client_weight_lib import ClientWeighting
from simharness.learning.metrics import aggregator as metrics_aggregator
from simharness.learning.metrics import counters
from simharness.learning.models import functional
from simharness.learning.models import model_weights
from simharness.learning.optimizers import adagrad, adam, sgdm
from simharness.learning.optimizers import optimizer as optimizer_base
from simharness.learning.templates import client_works, distributors
from simharness.templates import IterativeProcess, MeasuredProcessOutput
from tests.tff.learning.algorithms import learning_test_utils as utils
from tests.tff.learning.models.model_examples import LinearRegression

LOOPS = pytest.mark.parametrize(
    'loop_implementation',
    list(loop_builder.LoopImplementation),
    ids=['dataset_iterator', 'dataset_reduce'],
)


def _create_model():
    return LinearRegression(feature_dim=2)


def _initial_weights():
    return model_weights.ModelWeights(
        trainable=[np.zeros([2, 1], np.float32), 0.0], non_trainable=[0.0]
    )


def _create_dataset():
    return (
        tf.data.Dataset.from_tensor_slices(
            collections.OrderedDict(
                x=[[0.0, 0.0], [1.0, 0.0], [2.0, 0.0], [3.0, 0.0]], y=[[0.0], [0.0], [1.0], [1.0]]
            )
        )
        .repeat(3)
        .batch(3)
    )


@pytest.mark.parametrize(
    'weighting',
    [ClientWeighting.UNIFORM, ClientWeighting.NUM_EXAMPLES],
    ids=['uniform', 'num_examples'],
)
def test_type_properties(weighting):
    process = mime._build_mime_lite_client_work(
        LinearRegression, sgdm.build_sgdm(learning_rate=0.1, momentum=0.9), weighting
    )
    assert isinstance(process, client_works.ClientWorkProcess)
    mw_type = model_weights.ModelWeights(
        trainable=tff.to_type([(np.float32, (2, 1)), np.float32]),
        non_trainable=tff.to_type([np.float32]),
    )
    element_type = tff.to_type(LinearRegression().input_spec)
    optimizer_state = tff.StructType(
        [
            ('learning_rate', tff.TensorType(np.float32)),
            ('momentum', tff.TensorType(np.float32)),
            ('accumulator', mw_type.trainable),
        ],
        container=collections.OrderedDict,
    )
    aggregator_state = tff.to_type(
        collections.OrderedDict(value_sum_process=(), weight_sum_process=())
    )
    state = tff.FederatedType((optimizer_state, aggregator_state), tff.SERVER)
    measurements = tff.FederatedType(
        collections.OrderedDict(
            train=collections.OrderedDict(loss=np.float32, num_examples=np.int32)
        ),
        tff.SERVER,
    )
    assert tff.FunctionType(None, state).is_equivalent_to(process.initialize.type_signature)
    expected_next = tff.FunctionType(
        collections.OrderedDict(
            state=state,
            weights=tff.FederatedType(tff.to_type(mw_type), tff.CLIENTS),
            client_data=tff.FederatedType(tff.SequenceType(element_type), tff.CLIENTS),
        ),
        MeasuredProcessOutput(
            state,
            tff.FederatedType(
                client_works.ClientResult(
                    update=mw_type.trainable, update_weight=tff.TensorType(np.float32)
                ),
                tff.CLIENTS,
            ),
            measurements,
        ),
    )
    assert expected_next.is_equivalent_to(process.next.type_signature), process.next.type_signature


def test_created_model_raises():
    with pytest.raises(TypeError):
        mime._build_mime_lite_client_work(
            LinearRegression(), sgdm.build_sgdm(1.0), client_weighting=ClientWeighting.NUM_EXAMPLES
        )


def test_unweighted_full_gradient_aggregator_raises():
    with pytest.raises(TypeError):
        mime._build_mime_lite_client_work(
            LinearRegression,
            sgdm.build_sgdm(1.0),
            client_weighting=ClientWeighting.NUM_EXAMPLES,
            full_gradient_aggregator=mean.UnweightedMeanFactory(),
        )


@LOOPS
@pytest.mark.parametrize('kind', ['variable', 'functional'])
def test_client_tf_dataset_reduce_fn(loop_implementation, kind):
    with mock.patch.object(
        loop_builder, 'build_training_loop', wraps=loop_builder.build_training_loop
    ) as mock_method:
        if kind == 'variable':
            process = mime._build_mime_lite_client_work(
                model_fn=_create_model,
                optimizer=sgdm.build_sgdm(learning_rate=0.1, momentum=0.9),
                client_weighting=ClientWeighting.NUM_EXAMPLES,
                loop_implementation=loop_implementation,
            )
            data, weights = [_create_dataset()], [_initial_weights()]
        else:
            model = utils.build_functional_linear_regression()
            process = mime._build_mime_lite_functional_client_work(
                model=model,
                optimizer=sgdm.build_sgdm(learning_rate=0.1, momentum=0.9),
                client_weighting=ClientWeighting.NUM_EXAMPLES,
                loop_implementation=loop_implementation,
            )
            data = [_create_dataset().map(lambda d: (d['x'], d['y']))]
            weights = [model_weights.ModelWeights(*model.initial_weights)]
        process.next(process.initialize(), weights, data)
    mock_method.assert_called_once_with(loop_implementation=loop_implementation)


@pytest.mark.parametrize(
    'optimizer',
    [adagrad.build_adagrad(0.1), adam.build_adam(0.1), sgdm.build_sgdm(0.1, momentum=0.9)],
    ids=['adagrad', 'adam', 'sgdm'],
)
def test_execution_with_optimizer(optimizer):
    process = mime._build_mime_lite_client_work(
        _create_model, optimizer, client_weighting=ClientWeighting.NUM_EXAMPLES
    )
    output = process.next(process.initialize(), [_initial_weights()], [_create_dataset()])
    assert output.measurements['train']['num_examples'] == 12


def test_custom_metrics_aggregator():
    def sum_then_finalize_then_times_two(metric_finalizers):
        @tff.federated_computation
        def aggregation_computation(client_local_unfinalized_metrics):
            summed = tff.federated_sum(client_local_unfinalized_metrics)

            @tff.tf_computation
            def finalizer_computation(unfinalized):
                return collections.OrderedDict(
                    (name, fn(unfinalized[name]) * 2) for name, fn in metric_finalizers.items()
                )

            return tff.federated_map(finalizer_computation, summed)

        return aggregation_computation

    process = mime._build_mime_lite_client_work(
        model_fn=_create_model,
        optimizer=sgdm.build_sgdm(learning_rate=0.01, momentum=0.9),
        client_weighting=ClientWeighting.NUM_EXAMPLES,
        metrics_aggregator=sum_then_finalize_then_times_two,
    )
    output = process.next(process.initialize(), [_initial_weights()], [_create_dataset()])
    assert output.measurements['train']['num_examples'] == 24


def test_construction_calls_model_fn():
    mock_model_fn = mock.Mock(side_effect=LinearRegression)
    mime.build_weighted_mime_lite(
        model_fn=mock_model_fn, base_optimizer=sgdm.build_sgdm(learning_rate=0.01, momentum=0.9)
    )
    assert mock_model_fn.call_count == 3


@LOOPS
def test_process_client_tf_dataset_reduce_fn(loop_implementation):
    with mock.patch.object(
        loop_builder, 'build_training_loop', wraps=loop_builder.build_training_loop
    ) as mock_method:
        mime.build_weighted_mime_lite(
            model_fn=LinearRegression,
            base_optimizer=sgdm.build_sgdm(0.01, momentum=0.9),
            loop_implementation=loop_implementation,
        )
    mock_method.assert_called_once_with(loop_implementation=loop_implementation)


def test_build_weighted_mime_lite_called_by_unweighted_mime_lite():
    with mock.patch.object(mime, 'build_weighted_mime_lite') as mock_mime_lite:
        mime.build_unweighted_mime_lite(
            model_fn=LinearRegression, base_optimizer=sgdm.build_sgdm(0.01, momentum=0.9)
        )
    assert mock_mime_lite.call_count == 1


def test_aggregation_wrapper_called_by_unweighted():
    with (
        mock.patch.object(mime, 'build_weighted_mime_lite'),
        mock.patch.object(factory_utils, 'as_weighted_aggregator') as mock_as_weighted,
    ):
        mime.build_unweighted_mime_lite(
            model_fn=LinearRegression, base_optimizer=sgdm.build_sgdm(0.01, momentum=0.9)
        )
    assert mock_as_weighted.call_count == 2  # the model and the full-gradient aggregators


def _invalid_distributor():
    weights_type = model_weights.weights_type_from_model(LinearRegression)
    distributor = distributors.build_broadcast_process(weights_type)
    return IterativeProcess(distributor.initialize, distributor.next)


@pytest.mark.parametrize('scheduled', [False, True], ids=['mime', 'scheduled'])
def test_raises_on_bad_arguments(scheduled):
    def build(**kwargs):
        args = dict(model_fn=LinearRegression, base_optimizer=sgdm.build_sgdm(0.01, momentum=0.9))
        args.update(kwargs)
        if scheduled:
            return mime.build_mime_lite_with_optimizer_schedule(
                learning_rate_fn=args.pop('learning_rate_fn', lambda x: tf.constant(0.1)), **args
            )
        args.pop('learning_rate_fn', None)
        return mime.build_weighted_mime_lite(**args)

    with pytest.raises(TypeError):
        build(model_fn=LinearRegression())
    with pytest.raises(TypeError):
        build(client_weighting='uniform')
    with pytest.raises(TypeError):
        build(model_distributor=_invalid_distributor())
    unweighted = model_update_aggregator.robust_aggregator(weighted=False)
    with pytest.raises(TypeError, match='WeightedAggregationFactory'):
        build(model_aggregator=unweighted)
    with pytest.raises(TypeError, match='WeightedAggregationFactory'):
        build(full_gradient_aggregator=unweighted)
    if scheduled:
        with pytest.raises(TypeError):
            build(learning_rate_fn=tf.constant(0.1))


def test_unweighted_mime_lite_raises_on_weighted_aggregator():
    weighted = model_update_aggregator.robust_aggregator(weighted=True)
    for kwarg in ('model_aggregator', 'full_gradient_aggregator'):
        with pytest.raises(TypeError, match='UnweightedAggregationFactory'):
            mime.build_unweighted_mime_lite(
                model_fn=LinearRegression,
                base_optimizer=sgdm.build_sgdm(0.01, momentum=0.9),
                **{kwarg: weighted},
            )


@utils.NEEDS_SECURE_METRICS
@pytest.mark.parametrize('weighted', [True, False], ids=['weighted', 'unweighted'])
def test_mime_lite_with_only_secure_aggregation(weighted):
    agg = model_update_aggregator.secure_aggregator(weighted=weighted)
    build = mime.build_weighted_mime_lite if weighted else mime.build_unweighted_mime_lite
    process = build(
        LinearRegression,
        base_optimizer=sgdm.build_sgdm(0.01, momentum=0.9),
        model_aggregator=agg,
        full_gradient_aggregator=agg,
        metrics_aggregator=metrics_aggregator.secure_sum_then_finalize,
    )
    utils.assert_not_contains_unsecure_aggregation(process.next)


def test_equivalent_to_vanilla_fed_avg():
    # Mime Lite with SGD without momentum is FedAvg.
    mime_process = mime.build_weighted_mime_lite(
        model_fn=_create_model, base_optimizer=sgdm.build_sgdm(0.1)
    )
    fed_avg_process = fed_avg.build_weighted_fed_avg(
        model_fn=_create_model, client_optimizer_fn=sgdm.build_sgdm(0.1)
    )
    client_data = [_create_dataset()]
    mime_state, fed_avg_state = mime_process.initialize(), fed_avg_process.initialize()
    for _ in range(3):
        mime_state, mime_metrics = mime_process.next(mime_state, client_data)
        fed_avg_state, fed_avg_metrics = fed_avg_process.next(fed_avg_state, client_data)
        for a, b in zip(
            tf.nest.flatten(mime_process.get_model_weights(mime_state)),
            tf.nest.flatten(fed_avg_process.get_model_weights(fed_avg_state)),
        ):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(
            mime_metrics['client_work']['train']['loss'],
            fed_avg_metrics['client_work']['train']['loss'],
            rtol=1e-6,
        )
        assert (
            mime_metrics['client_work']['train']['num_examples']
            == fed_avg_metrics['client_work']['train']['num_examples']
        )


@pytest.mark.parametrize(
    'base_optimizer, server_optimizer',
    [
        (sgdm.build_sgdm(0.1, 0.9), sgdm.build_sgdm(1.0)),
        (adagrad.build_adagrad(0.1), sgdm.build_sgdm(1.0, 0.9)),
    ],
    ids=['sgdm_sgd', 'adagrad_sgdm'],
)
def test_execution_with_optimizers(base_optimizer, server_optimizer):
    process = mime.build_weighted_mime_lite(
        model_fn=_create_model, base_optimizer=base_optimizer, server_optimizer=server_optimizer
    )
    state = process.initialize()
    for _ in range(3):
        state, metrics = process.next(state, [_create_dataset()])
        assert metrics['client_work']['train']['num_examples'] == 12


def test_construction_calls_learning_rate_fn():
    mock_learning_rate_fn = mock.Mock(side_effect=lambda x: tf.cast(x, tf.float32))
    process = mime.build_mime_lite_with_optimizer_schedule(
        model_fn=_create_model,
        learning_rate_fn=mock_learning_rate_fn,
        base_optimizer=sgdm.build_sgdm(0.1),
    )
    state = process.initialize()
    assert state.client_work[1][0][optimizer_base.LEARNING_RATE_KEY] == 0.0
    for x in range(2):
        state, _ = process.next(state, [_create_dataset()])
        assert state.client_work[1][0][optimizer_base.LEARNING_RATE_KEY] == x + 1.0
    assert mock_learning_rate_fn.call_count == 2


def test_functional_matches_variable_model():
    dataset = _create_dataset()
    base_optimizer, server_optimizer = sgdm.build_sgdm(0.1, 0.9), adam.build_adam(1.0)

    def create_keras_model():
        return tf.keras.Sequential(
            [
                tf.keras.layers.InputLayer(input_shape=(2,)),
                tf.keras.layers.Dense(
                    units=1, kernel_initializer='zeros', bias_initializer='zeros'
                ),
            ]
        )

    functional_model = functional.functional_model_from_keras(
        create_keras_model(),
        loss_fn=tf.keras.losses.MeanSquaredError(),
        input_spec=dataset.element_spec,
        metrics_constructor=collections.OrderedDict(
            loss=tf.keras.metrics.MeanSquaredError,
            num_examples=counters.NumExamplesCounter,
            num_batches=counters.NumBatchesCounter,
        ),
    )

    def create_tff_model():
        return tff.learning.models.from_keras_model(
            create_keras_model(),
            loss=tf.keras.losses.MeanSquaredError(),
            input_spec=dataset.element_spec,
        )

    functional_process = mime.build_weighted_mime_lite(
        model_fn=functional_model, base_optimizer=base_optimizer, server_optimizer=server_optimizer
    )
    variable_process = mime.build_weighted_mime_lite(
        model_fn=create_tff_model, base_optimizer=base_optimizer, server_optimizer=server_optimizer
    )
    variable_state, functional_state = (
        variable_process.initialize(),
        functional_process.initialize(),
    )
    for _ in range(3):
        variable_state, variable_metrics = variable_process.next(variable_state, [dataset])
        functional_state, functional_metrics = functional_process.next(functional_state, [dataset])
        for a, b in zip(utils.flat_arrays(variable_metrics), utils.flat_arrays(functional_metrics)):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        for a, b in zip(utils.flat_arrays(variable_state), utils.flat_arrays(functional_state)):
            np.testing.assert_allclose(np.reshape(a, -1), np.reshape(b, -1), rtol=1e-5, atol=1e-6)


# -- ours ------------------------------------------------------------------------------------


def test_lowered_and_same_bits_on_stacks(stack_registry):
    process = mime.build_weighted_mime_lite(LinearRegression, sgdm.build_sgdm(0.1, momentum=0.9))
    assert utils.assert_client_loops_lowered(process) == 1
    datasets = utils.linear_datasets(num_clients=3)

    def run():
        state = process.initialize()
        for _ in range(2):
            state, metrics = process.next(state, datasets)
        return state, metrics

    utils.assert_same_bits_on_stacks(stack_registry, run)
