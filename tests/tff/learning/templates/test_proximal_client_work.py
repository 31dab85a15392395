"""Port of TFF's ``learning/templates/proximal_client_work_test.py``.

TFF's cases, with fewer parameter repetitions (one weighting per loop
implementation for `test_client_tf`, one optimizer for
`test_execution_with_optimizer`, the type-property case for one optimizer and
weighting), and v0.86's Keras-optimizer cases (TFF 0.87 dropped them), fewer
too: one weighting for the Keras/TFF equality (ours: the same bits), one Keras
`test_client_tf` (with clipnorm), the non-finite case for inf.
"""

import collections
from unittest import mock

import numpy as np
import pytest
import tensorflow as tf

import simharness as tff
from simharness.learning import loop_builder
from simharness.learning.client_weight_lib import ClientWeighting
from simharness.learning.models import model_weights as model_weights_lib
from simharness.learning.optimizers import sgdm
from simharness.learning.templates import client_works, proximal_client_work
from simharness.templates import MeasuredProcessOutput
from tests.tff.learning.algorithms import learning_test_utils as utils
from tests.tff.learning.models.model_examples import LinearRegression


def create_test_dataset():
    return (
        tf.data.Dataset.from_tensor_slices(
            collections.OrderedDict(
                x=[[0.0, 0.0], [1.0, 0.0], [2.0, 0.0], [3.0, 0.0]], y=[[0.0], [0.0], [1.0], [1.0]]
            )
        )
        .repeat(3)
        .batch(3)
    )


def create_test_initial_weights():
    return model_weights_lib.ModelWeights(
        trainable=[np.zeros([2, 1], np.float32), 0.0], non_trainable=[0.0]
    )


def create_model():
    return LinearRegression(feature_dim=2)


def _norm(update):
    return float(np.sqrt(sum(np.sum(np.square(u)) for u in update)))


def test_type_properties():
    process = proximal_client_work.build_model_delta_client_work(
        LinearRegression,
        sgdm.build_sgdm(learning_rate=0.1, momentum=0.9),
        ClientWeighting.NUM_EXAMPLES,
        delta_l2_regularizer=0.1,
        loop_implementation=loop_builder.LoopImplementation.DATASET_REDUCE,
    )
    assert isinstance(process, client_works.ClientWorkProcess)
    mw_type = model_weights_lib.ModelWeights(
        trainable=tff.to_type([(np.float32, (2, 1)), np.float32]),
        non_trainable=tff.to_type([np.float32]),
    )
    state = tff.FederatedType((), tff.SERVER)
    expected_next = tff.FunctionType(
        collections.OrderedDict(
            state=state,
            weights=tff.FederatedType(tff.to_type(mw_type), tff.CLIENTS),
            client_data=tff.FederatedType(
                tff.SequenceType(tff.to_type(LinearRegression().input_spec)), tff.CLIENTS
            ),
        ),
        MeasuredProcessOutput(
            state,
            tff.FederatedType(
                client_works.ClientResult(
                    update=mw_type.trainable, update_weight=tff.TensorType(np.float32)
                ),
                tff.CLIENTS,
            ),
            tff.FederatedType(
                collections.OrderedDict(
                    train=collections.OrderedDict(loss=np.float32, num_examples=np.int32)
                ),
                tff.SERVER,
            ),
        ),
    )
    assert process.initialize.type_signature.is_equivalent_to(tff.FunctionType(None, state))
    assert process.next.type_signature.is_equivalent_to(expected_next)


def test_created_model_raises():
    with pytest.raises(TypeError):
        proximal_client_work.build_model_delta_client_work(
            create_model(),
            sgdm.build_sgdm(1.0),
            client_weighting=ClientWeighting.NUM_EXAMPLES,
            delta_l2_regularizer=0.1,
            loop_implementation=loop_builder.LoopImplementation.DATASET_REDUCE,
        )


def test_negative_proximal_strength_raises():
    with pytest.raises(ValueError):
        proximal_client_work.build_model_delta_client_work(
            create_model,
            sgdm.build_sgdm(1.0),
            client_weighting=ClientWeighting.NUM_EXAMPLES,
            delta_l2_regularizer=-1.0,
            loop_implementation=loop_builder.LoopImplementation.DATASET_REDUCE,
        )


@pytest.mark.parametrize(
    'loop_implementation, weighting',
    [
        (loop_builder.LoopImplementation.DATASET_REDUCE, ClientWeighting.UNIFORM),
        (loop_builder.LoopImplementation.DATASET_ITERATOR, ClientWeighting.NUM_EXAMPLES),
    ],
    ids=['dataset_reduce_uniform', 'dataset_iterator_num_examples'],
)
def test_client_tf(loop_implementation, weighting):
    client_tf = proximal_client_work.build_model_delta_update_with_tff_optimizer(
        model_fn=create_model,
        weighting=weighting,
        delta_l2_regularizer=0.1,
        loop_implementation=loop_implementation,
    )
    result, model_output = client_tf(
        sgdm.build_sgdm(learning_rate=0.1), create_test_initial_weights(), create_test_dataset()
    )
    for param in result.update:
        assert np.linalg.norm(param) > 0.1
    assert result.update_weight == (1.0 if weighting == ClientWeighting.UNIFORM else 12.0)
    assert model_output['num_examples'] == 12
    assert np.finfo(np.float32).eps < model_output['loss'][0] < 10.0


@pytest.mark.parametrize('bad_value', [np.inf, np.nan], ids=['_inf', '_nan'])
def test_non_finite_aggregation(bad_value):
    client_tf = proximal_client_work.build_model_delta_update_with_tff_optimizer(
        model_fn=create_model,
        weighting=ClientWeighting.NUM_EXAMPLES,
        delta_l2_regularizer=0.1,
        loop_implementation=loop_builder.LoopImplementation.DATASET_REDUCE,
    )
    weights = create_test_initial_weights()
    weights.trainable[1] = bad_value
    result, _ = client_tf(sgdm.build_sgdm(learning_rate=0.1), weights, create_test_dataset())
    assert result.update_weight == 0.0
    assert _norm(result.update) == 0.0


@pytest.mark.parametrize(
    'loop_implementation',
    list(loop_builder.LoopImplementation),
    ids=['dataset_iterator', 'dataset_reduce'],
)
def test_client_tf_dataset_reduce_fn(loop_implementation):
    with mock.patch.object(
        loop_builder, 'build_training_loop', wraps=loop_builder.build_training_loop
    ) as mock_method:
        client_tf = proximal_client_work.build_model_delta_update_with_tff_optimizer(
            model_fn=create_model,
            weighting=ClientWeighting.NUM_EXAMPLES,
            delta_l2_regularizer=0.1,
            loop_implementation=loop_implementation,
        )
        client_tf(
            sgdm.build_sgdm(learning_rate=0.1), create_test_initial_weights(), create_test_dataset()
        )
    mock_method.assert_called_once_with(loop_implementation=loop_implementation)


def test_custom_metrics_aggregator_and_execution(tff_stack):
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

    process = proximal_client_work.build_model_delta_client_work(
        model_fn=create_model,
        optimizer=sgdm.build_sgdm(learning_rate=0.1, momentum=0.9),
        client_weighting=ClientWeighting.NUM_EXAMPLES,
        delta_l2_regularizer=0.1,
        metrics_aggregator=sum_then_finalize_then_times_two,
        loop_implementation=loop_builder.LoopImplementation.DATASET_REDUCE,
    )
    output = process.next(
        process.initialize(), [create_test_initial_weights()], [create_test_dataset()]
    )
    assert output.measurements['train']['num_examples'] == 24


@pytest.mark.parametrize('functional', [False, True], ids=['variable', 'functional'])
def test_delta_regularizer_yields_smaller_model_delta(functional):
    norms = []
    for mu in (0.01, 1.0):
        if functional:
            model = utils.build_functional_linear_regression()
            process = proximal_client_work.build_functional_model_delta_client_work(
                model=model,
                optimizer=sgdm.build_sgdm(1.0),
                client_weighting=ClientWeighting.NUM_EXAMPLES,
                delta_l2_regularizer=mu,
            )
            weights = model_weights_lib.ModelWeights(*model.initial_weights)
            data = create_test_dataset().map(lambda d: (d['x'], d['y']))
        else:
            process = proximal_client_work.build_model_delta_client_work(
                create_model,
                sgdm.build_sgdm(1.0),
                client_weighting=ClientWeighting.NUM_EXAMPLES,
                delta_l2_regularizer=mu,
                loop_implementation=loop_builder.LoopImplementation.DATASET_REDUCE,
            )
            weights, data = create_test_initial_weights(), create_test_dataset()
        output = process.next(process.initialize(), [weights], [data])
        norms.append(_norm(output.result[0].update))
        assert output.measurements['train']['num_examples'] == 12
    assert norms[0] > norms[1]


@pytest.mark.parametrize(
    'mu, weighting',
    [(0.1, ClientWeighting.UNIFORM), (0.2, ClientWeighting.NUM_EXAMPLES)],
    ids=['uniform_weighting', 'num_examples_weighting_new_prox'],
)
def test_functional_client_tf(mu, weighting):
    model = utils.build_functional_linear_regression()
    client_tf = proximal_client_work._build_functional_model_delta_update(
        model=model, weighting=weighting, delta_l2_regularizer=mu
    )
    result, model_output = client_tf(
        sgdm.build_sgdm(learning_rate=0.1), model.initial_weights, create_test_dataset()
    )
    for param in result.update:
        assert np.linalg.norm(param) > 0.1
    assert result.update_weight == (1.0 if weighting == ClientWeighting.UNIFORM else 12.0)
    assert model_output['num_examples'] == 12
    assert np.finfo(np.float32).eps < model_output['loss'] < 10.0


# -- Keras optimizers (TFF v0.86) ----------------------------------------------------------


def test_created_keras_optimizer_raises():
    with pytest.raises(TypeError):
        proximal_client_work.build_model_delta_client_work(
            LinearRegression,
            tf.keras.optimizers.SGD(1.0),
            client_weighting=ClientWeighting.NUM_EXAMPLES,
            delta_l2_regularizer=0.1,
            loop_implementation=loop_builder.LoopImplementation.DATASET_REDUCE,
        )


def _keras_update(loop=loop_builder.LoopImplementation.DATASET_REDUCE):
    return proximal_client_work.build_model_delta_update_with_keras_optimizer(
        model_fn=create_model,
        weighting=ClientWeighting.NUM_EXAMPLES,
        delta_l2_regularizer=0.1,
        loop_implementation=loop,
    )


def test_keras_tff_client_work_equal():
    """v0.86 checks allclose; with the proximal term, Keras 3 SGD and `build_sgdm` give
    the same bits."""
    keras_result = _keras_update()(
        tf.keras.optimizers.SGD(learning_rate=0.1),
        create_test_initial_weights(),
        create_test_dataset(),
    )
    tff_result = proximal_client_work.build_model_delta_update_with_tff_optimizer(
        model_fn=create_model,
        weighting=ClientWeighting.NUM_EXAMPLES,
        delta_l2_regularizer=0.1,
        loop_implementation=loop_builder.LoopImplementation.DATASET_REDUCE,
    )(sgdm.build_sgdm(learning_rate=0.1), create_test_initial_weights(), create_test_dataset())
    for a, b in zip(utils.flat_arrays(keras_result), utils.flat_arrays(tff_result)):
        np.testing.assert_array_equal(a, b)


def test_keras_client_tf_and_non_finite_aggregation():
    client_tf = _keras_update(loop_builder.LoopImplementation.DATASET_ITERATOR)
    optimizer = tf.keras.optimizers.SGD(learning_rate=0.1, clipnorm=0.2)
    result, model_output = client_tf(
        optimizer, create_test_initial_weights(), create_test_dataset()
    )
    for param in result.update:
        assert np.linalg.norm(param) > 0.05
    assert result.update_weight == 12.0
    assert model_output['num_examples'] == 12
    assert np.finfo(np.float32).eps < model_output['loss'][0] < 10.0
    weights = create_test_initial_weights()
    weights.trainable[1] = np.inf
    result, model_output = _keras_update()(
        tf.keras.optimizers.SGD(learning_rate=0.1), weights, create_test_dataset()
    )
    assert result.update_weight == 0.0
    assert _norm(result.update) == 0.0
    assert model_output['num_examples'] == 12  # the proximal work keeps its metrics (TFF's)


def test_keras_delta_regularizer_yields_smaller_model_delta(tff_stack):
    """v0.86's keras_optimizer case (a Keras SGD at mu=0.01 against `build_sgdm` at mu=1.0),
    with momentum (v0.86's keras_momentum execution case)."""
    norms = []
    for mu, optimizer in (
        (0.01, lambda: tf.keras.optimizers.SGD(1.0, momentum=0.9)),
        (1.0, sgdm.build_sgdm(1.0, momentum=0.9)),
    ):
        process = proximal_client_work.build_model_delta_client_work(
            create_model,
            optimizer,
            client_weighting=ClientWeighting.NUM_EXAMPLES,
            delta_l2_regularizer=mu,
            loop_implementation=loop_builder.LoopImplementation.DATASET_REDUCE,
        )
        output = process.next(
            process.initialize(), [create_test_initial_weights()], [create_test_dataset()]
        )
        assert list(output.measurements) == ['train']
        assert output.measurements['train']['num_examples'] == 12
        norms.append(_norm(output.result[0].update))
    assert norms[0] > norms[1]
