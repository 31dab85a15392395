"""Port of TFF's ``learning/templates/model_delta_client_work_test.py``.

Left out: ``test_functional_model_matches_model_fn`` (several rounds of a Keras
model against its functional twin; `test_fed_avg.test_keras_and_functional_models_agree`
and `test_mime.test_functional_matches_variable_model` check the same) and
v0.86's Keras-optimizer cases where they repeat a case already here (its four
type-signature cases are one, its executions with Keras SGD and SGD with momentum
one). The type-signature cases check one weighting each. Ours: the client loops
lower; Keras SGD gives the same bits as `build_sgdm`.
"""

import collections
from unittest import mock

import numpy as np
import pytest
import tensorflow as tf

import simharness as tff
from simharness.learning import loop_builder
from simharness.learning.client_weight_lib import ClientWeighting
from simharness.learning.metrics import counters
from simharness.learning.models import functional
from simharness.learning.models import model_weights as model_weights_lib
from simharness.learning.optimizers import sgdm
from simharness.learning.templates import client_works, model_delta_client_work
from simharness.templates import MeasuredProcessOutput
from tests.tff.learning.algorithms import learning_test_utils as utils
from tests.tff.learning.models.model_examples import LinearRegression, keras_linear_model

WEIGHTINGS = pytest.mark.parametrize(
    'weighting', list(ClientWeighting), ids=['uniform', 'num_examples']
)
LOOPS = pytest.mark.parametrize(
    'loop_implementation',
    list(loop_builder.LoopImplementation),
    ids=['dataset_iterator', 'dataset_reduce'],
)


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


STATE_TYPE = tff.FederatedType(collections.OrderedDict(learning_rate=np.float32), tff.SERVER)


def test_type_signatures():
    process = model_delta_client_work.build_model_delta_client_work(
        LinearRegression, sgdm.build_sgdm(learning_rate=1.0), ClientWeighting.NUM_EXAMPLES
    )
    assert process.initialize.type_signature.is_equivalent_to(tff.FunctionType(None, STATE_TYPE))
    mw_type = model_weights_lib.ModelWeights(
        trainable=tff.to_type([(np.float32, (2, 1)), np.float32]),
        non_trainable=tff.to_type([np.float32]),
    )
    element_type = tff.to_type(LinearRegression().input_spec)
    expected_next = tff.FunctionType(
        collections.OrderedDict(
            state=STATE_TYPE,
            weights=tff.FederatedType(tff.to_type(mw_type), tff.CLIENTS),
            client_data=tff.FederatedType(tff.SequenceType(element_type), tff.CLIENTS),
        ),
        MeasuredProcessOutput(
            STATE_TYPE,
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
    assert process.next.type_signature.is_equivalent_to(expected_next), process.next.type_signature
    hparams = STATE_TYPE.member
    assert process.get_hparams.type_signature.is_equivalent_to(tff.FunctionType(hparams, hparams))
    assert process.set_hparams.type_signature.is_equivalent_to(
        tff.FunctionType(tff.StructType([('state', hparams), ('hparams', hparams)]), hparams)
    )


def test_raises_with_created_model():
    with pytest.raises(TypeError):
        model_delta_client_work.build_model_delta_client_work(
            create_model(), sgdm.build_sgdm(1.0), client_weighting=ClientWeighting.NUM_EXAMPLES
        )


@LOOPS
@WEIGHTINGS
def test_client_tf(loop_implementation, weighting):
    client_tf = model_delta_client_work.build_model_delta_update_with_tff_optimizer(
        model_fn=create_model, weighting=weighting, loop_implementation=loop_implementation
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
    client_tf = model_delta_client_work.build_model_delta_update_with_tff_optimizer(
        model_fn=create_model,
        weighting=ClientWeighting.NUM_EXAMPLES,
        loop_implementation=loop_builder.LoopImplementation.DATASET_REDUCE,
    )
    weights = create_test_initial_weights()
    weights.trainable[1] = bad_value
    result, metrics = client_tf(sgdm.build_sgdm(learning_rate=0.1), weights, create_test_dataset())
    assert result.update_weight == 0.0
    np.testing.assert_allclose(result.update[0], [[0.0], [0.0]])
    assert result.update[1] == 0.0
    np.testing.assert_array_equal(metrics['loss'], [0.0, 0.0])
    assert metrics['num_examples'] == 0


def test_correct_update_weight_with_traced_function():
    client_tf = model_delta_client_work.build_model_delta_update_with_tff_optimizer(
        model_fn=create_model,
        weighting=ClientWeighting.NUM_EXAMPLES,
        loop_implementation=loop_builder.LoopImplementation.DATASET_REDUCE,
    )
    optimizer = sgdm.build_sgdm(learning_rate=0.1)
    init_weights = create_test_initial_weights()

    def dataset(last):
        return tf.data.Dataset.from_tensor_slices(
            collections.OrderedDict(
                x=[[0.0, 0.0], [1.0, 0.0], [2.0, 0.0], [3.0, last]], y=[[0.0], [0.0], [1.0], [1.0]]
            )
        ).batch(1)

    concrete = client_tf.get_concrete_function(
        optimizer, init_weights, dataset(0.0), optimizer_hparams=None
    )
    assert (
        concrete(optimizer, init_weights, dataset(0.0), optimizer_hparams=None)[0].update_weight
        > 0.0
    )
    assert (
        concrete(optimizer, init_weights, dataset(np.nan), optimizer_hparams=None)[0].update_weight
        == 0.0
    )


def test_custom_metrics_aggregator(tff_stack):
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

    process = model_delta_client_work.build_model_delta_client_work(
        model_fn=create_model,
        optimizer=sgdm.build_sgdm(learning_rate=1.0),
        client_weighting=ClientWeighting.NUM_EXAMPLES,
        metrics_aggregator=sum_then_finalize_then_times_two,
    )
    output = process.next(
        process.initialize(), [create_test_initial_weights()], [create_test_dataset()]
    )
    assert output.measurements['train']['num_examples'] == 24


@LOOPS
def test_client_tf_dataset_loops(loop_implementation):
    with mock.patch.object(loop_builder, 'build_training_loop') as mock_method:
        model_delta_client_work.build_model_delta_update_with_tff_optimizer(
            model_fn=create_model,
            weighting=ClientWeighting.NUM_EXAMPLES,
            loop_implementation=loop_implementation,
        )
    mock_method.assert_called_once_with(loop_implementation=loop_implementation)


@pytest.mark.parametrize(
    'optimizer',
    [sgdm.build_sgdm(learning_rate=1.0), sgdm.build_sgdm(learning_rate=1.0, momentum=0.9)],
    ids=['tff_simple', 'tff_momentum'],
)
def test_execution_with_optimizer(optimizer):
    process = model_delta_client_work.build_model_delta_client_work(
        create_model, optimizer, client_weighting=ClientWeighting.NUM_EXAMPLES
    )
    output = process.next(
        process.initialize(), [create_test_initial_weights()], [create_test_dataset()]
    )
    assert list(output.measurements) == ['train']


def test_get_and_set_hparams_with_tff_optimizer():
    process = model_delta_client_work.build_model_delta_client_work(
        create_model,
        sgdm.build_sgdm(learning_rate=1.0, momentum=0.9),
        client_weighting=ClientWeighting.NUM_EXAMPLES,
    )
    state = process.initialize()
    hparams = process.get_hparams(state)
    assert list(hparams) == ['learning_rate', 'momentum']
    np.testing.assert_allclose(
        [hparams['learning_rate'], hparams['momentum']], [1.0, 0.9], rtol=1e-6
    )
    new = collections.OrderedDict(learning_rate=0.5, momentum=0.3)
    state = process.set_hparams(state, new)
    assert list(state) == list(new)
    np.testing.assert_allclose(list(state.values()), list(new.values()), rtol=1e-6)


@WEIGHTINGS
def test_tff_client_work_uses_optimizer_hparams(weighting):
    hparams = collections.OrderedDict(learning_rate=1.0)
    results = []
    for lr in (0.0, 0.1):
        client_update = model_delta_client_work.build_model_delta_update_with_tff_optimizer(
            model_fn=create_model,
            weighting=weighting,
            loop_implementation=loop_builder.LoopImplementation.DATASET_REDUCE,
        )
        results.append(
            client_update(
                sgdm.build_sgdm(learning_rate=lr),
                create_test_initial_weights(),
                create_test_dataset(),
                hparams,
            )
        )
    for a, b in zip(utils.flat_arrays(results[0]), utils.flat_arrays(results[1])):
        np.testing.assert_allclose(a, b)


def _dataset_and_functional_model():
    dataset = create_test_dataset()
    model = functional.functional_model_from_keras(
        keras_linear_model(2),
        loss_fn=tf.keras.losses.MeanSquaredError(),
        input_spec=dataset.element_spec,
        metrics_constructor=lambda: collections.OrderedDict(
            num_examples=counters.NumExamplesCounter()
        ),
    )
    return dataset, model


def test_metrics_output(tff_stack):
    dataset, model = _dataset_and_functional_model()
    process = model_delta_client_work.build_functional_model_delta_client_work(
        model=model,
        optimizer=sgdm.build_sgdm(learning_rate=1.0),
        client_weighting=ClientWeighting.NUM_EXAMPLES,
    )
    weights = model_weights_lib.ModelWeights(*model.initial_weights)
    output = process.next(process.initialize(), [weights] * 3, [dataset] * 3)
    assert output.measurements['train']['num_examples'] == 36


@pytest.mark.parametrize('bad_value', [np.inf, np.nan], ids=['_inf', '_nan'])
def test_metrics_output_with_non_finite_updates(bad_value):
    dataset, model = _dataset_and_functional_model()
    process = model_delta_client_work.build_functional_model_delta_client_work(
        model=model,
        optimizer=sgdm.build_sgdm(learning_rate=1.0),
        client_weighting=ClientWeighting.NUM_EXAMPLES,
    )
    trainable = tuple(np.zeros_like(w) for w in model.initial_weights[0])
    trainable = (trainable[0], np.full_like(trainable[1], bad_value))
    weights = model_weights_lib.ModelWeights(trainable, model.initial_weights[1])
    output = process.next(process.initialize(), [weights] * 3, [dataset] * 3)
    assert output.measurements['train']['num_examples'] == 0


# -- ours ------------------------------------------------------------------------------------


def test_client_loops_are_lowered():
    for loop in loop_builder.LoopImplementation:
        process = model_delta_client_work.build_model_delta_client_work(
            create_model,
            sgdm.build_sgdm(0.1),
            ClientWeighting.NUM_EXAMPLES,
            loop_implementation=loop,
        )
        assert utils.assert_client_loops_lowered(process, batch_size=3) == 1


# -- Keras optimizers (TFF v0.86; TFF 0.87 dropped them) -----------------------------------


def _keras_sgd(**kwargs):
    return lambda: tf.keras.optimizers.SGD(learning_rate=1.0, **kwargs)


def test_types_with_keras_optimizer():
    """v0.86's four ``*_type_signature_with_keras_optimizer`` cases: state ``()``, no hparams."""
    process = model_delta_client_work.build_model_delta_client_work(
        LinearRegression, _keras_sgd(), ClientWeighting.UNIFORM
    )
    server_state = tff.FederatedType((), tff.SERVER)
    assert process.initialize.type_signature.is_equivalent_to(tff.FunctionType(None, server_state))
    next_type = process.next.type_signature
    assert next_type.parameter[0].is_equivalent_to(server_state)
    assert next_type.result[0].is_equivalent_to(server_state)
    weights_type = next_type.parameter[1].member
    assert next_type.result[1].member.update.is_equivalent_to(weights_type.trainable)
    no_hparams = tff.to_type(collections.OrderedDict())
    assert process.get_hparams.type_signature.result.is_equivalent_to(no_hparams)
    assert process.set_hparams.type_signature.result.is_equivalent_to(server_state.member)


def test_raises_with_created_keras_optimizer():
    with pytest.raises(TypeError):
        model_delta_client_work.build_model_delta_client_work(
            LinearRegression,
            tf.keras.optimizers.SGD(learning_rate=1.0),
            client_weighting=ClientWeighting.NUM_EXAMPLES,
        )


def _keras_update(weighting=ClientWeighting.NUM_EXAMPLES, loop=None):
    return model_delta_client_work.build_model_delta_update_with_keras_optimizer(
        model_fn=create_model,
        weighting=weighting,
        loop_implementation=loop or loop_builder.LoopImplementation.DATASET_REDUCE,
    )


def test_keras_tff_client_work_equal():
    """v0.86 checks allclose (for each weighting); Keras 3 SGD and `build_sgdm` give the
    same bits."""
    weighting = ClientWeighting.NUM_EXAMPLES
    keras_result = _keras_update(weighting)(
        tf.keras.optimizers.SGD(learning_rate=0.1),
        create_test_initial_weights(),
        create_test_dataset(),
    )
    tff_result = model_delta_client_work.build_model_delta_update_with_tff_optimizer(
        model_fn=create_model,
        weighting=weighting,
        loop_implementation=loop_builder.LoopImplementation.DATASET_REDUCE,
    )(sgdm.build_sgdm(learning_rate=0.1), create_test_initial_weights(), create_test_dataset())
    for a, b in zip(utils.flat_arrays(keras_result), utils.flat_arrays(tff_result)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    'loop, kwargs, expected_norm, weighting',
    [
        ('DATASET_ITERATOR', {}, 0.1, ClientWeighting.UNIFORM),
        ('DATASET_REDUCE', {'clipnorm': 0.2}, 0.05, ClientWeighting.NUM_EXAMPLES),
        ('DATASET_REDUCE', {'clipvalue': 0.1}, 0.02, ClientWeighting.NUM_EXAMPLES),
    ],
    ids=['dataset_iterator_noclip', 'clipnorm', 'clipvalue'],
)
def test_keras_client_tf(loop, kwargs, expected_norm, weighting):
    client_tf = _keras_update(weighting, loop_builder.LoopImplementation[loop])
    optimizer = tf.keras.optimizers.SGD(learning_rate=0.1, **kwargs)
    result, model_output = client_tf(
        optimizer, create_test_initial_weights(), create_test_dataset()
    )
    for param in result.update:
        assert np.linalg.norm(param) > expected_norm
    assert result.update_weight == (1.0 if weighting == ClientWeighting.UNIFORM else 12.0)
    assert model_output['num_examples'] == 12
    assert np.finfo(np.float32).eps < model_output['loss'][0] < 10.0
    assert int(optimizer.iterations) == 4  # its own 4 steps, one a batch


def test_keras_non_finite_aggregation():
    for bad_value in (np.inf, np.nan):
        weights = create_test_initial_weights()
        weights.trainable[1] = bad_value
        result, metrics = _keras_update()(
            tf.keras.optimizers.SGD(learning_rate=0.1), weights, create_test_dataset()
        )
        assert result.update_weight == 0.0
        np.testing.assert_array_equal(result.update[0], [[0.0], [0.0]])
        assert result.update[1] == 0.0
        np.testing.assert_array_equal(metrics['loss'], [0.0, 0.0])
        assert metrics['num_examples'] == 0


def test_keras_correct_update_weight_with_traced_function():
    client_tf = _keras_update()
    optimizer = tf.keras.optimizers.SGD(learning_rate=0.1)
    init_weights = create_test_initial_weights()

    def dataset(last):
        return tf.data.Dataset.from_tensor_slices(
            collections.OrderedDict(
                x=[[0.0, 0.0], [1.0, 0.0], [2.0, 0.0], [3.0, last]], y=[[0.0], [0.0], [1.0], [1.0]]
            )
        ).batch(1)

    concrete = client_tf.get_concrete_function(optimizer, init_weights, dataset(0.0))
    assert concrete(optimizer, init_weights, dataset(0.0))[0].update_weight > 0.0
    assert concrete(optimizer, init_weights, dataset(np.nan))[0].update_weight == 0.0


@LOOPS
def test_keras_client_tf_dataset_loops(loop_implementation):
    with mock.patch.object(loop_builder, 'build_training_loop') as mock_method:
        _keras_update(loop=loop_implementation)
    mock_method.assert_called_once_with(loop_implementation=loop_implementation)


def test_execution_and_hparams_with_keras_optimizer(tff_stack):
    """v0.86's keras_momentum execution and Keras get/set_hparams cases."""
    process = model_delta_client_work.build_model_delta_client_work(
        create_model, _keras_sgd(momentum=0.9), client_weighting=ClientWeighting.NUM_EXAMPLES
    )
    state = process.initialize()
    output = process.next(state, [create_test_initial_weights()], [create_test_dataset()])
    assert list(output.measurements) == ['train']
    assert output.measurements['train']['num_examples'] == 12
    assert process.get_hparams(state) == collections.OrderedDict()
    assert process.set_hparams(state, collections.OrderedDict()) == state


def test_keras_learning_rate_schedule_steps_with_the_clients_own_iterations():
    """A Keras SGD of a ``LearningRateSchedule``: 0.1 for its first two steps, then 0. Its
    step count starts at 0 in each client update (an optimizer per update), so training
    on 4 batches gives `build_sgdm(0.1)` on the first 2, to the bit."""
    schedule = tf.keras.optimizers.schedules.PiecewiseConstantDecay([1], [0.1, 0.0])
    keras_result = _keras_update()(
        tf.keras.optimizers.SGD(schedule), create_test_initial_weights(), create_test_dataset()
    )
    tff_result = model_delta_client_work.build_model_delta_update_with_tff_optimizer(
        model_fn=create_model,
        weighting=ClientWeighting.NUM_EXAMPLES,
        loop_implementation=loop_builder.LoopImplementation.DATASET_REDUCE,
    )(sgdm.build_sgdm(0.1), create_test_initial_weights(), create_test_dataset().take(2))
    for a, b in zip(
        utils.flat_arrays(keras_result[0].update), utils.flat_arrays(tff_result[0].update)
    ):
        assert a.tobytes() == b.tobytes()
    assert keras_result[1]['num_examples'] == 12
