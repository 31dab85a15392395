"""Port of TFF's ``tensorflow_federated/python/learning/algorithms/fed_multi_model_eval_test.py``.

Every case of TFF's module is here (``skip_test_for_*gpu`` does not apply: no
GPU). `TestModel`, the custom metrics aggregation process, the client data
and the functional datasets are those of our port of ``fed_eval_test.py``
(TFF's two test modules define them identically). The processes are traced
once for the module. Ours after TFF's: bad argument counts, and
the process built from two processes gives each model's metrics of
`build_fed_eval` alone.
"""

import collections
from unittest import mock

import numpy as np
import pytest
import tensorflow as tf

import simharness as tff
from simharness.learning.algorithms import fed_eval, fed_multi_model_eval
from simharness.learning.metrics import aggregator, counters, sum_aggregation_factory
from simharness.learning.models import functional
from simharness.learning.models import model_weights as model_weights_lib
from simharness.learning.templates import composers, distributors, learning_process
from simharness.templates import MeasuredProcessOutput
from tests.tff.learning.algorithms.test_fed_eval import (
    CLIENTS_DATA,
    TestModel,
    _custom_metrics_aggregation_process,
    _functional_test_datasets,
    _metrics_type,
)
from tests.tff.learning.models.model_examples import LinearRegression, keras_linear_model


@pytest.fixture(scope='module')
def multi_eval_process():
    return fed_multi_model_eval.build_fed_multi_model_eval((TestModel, TestModel))


@pytest.fixture(scope='module')
def from_processes_process():
    return fed_multi_model_eval.build_fed_multi_model_eval_from_processes(
        [fed_eval.build_fed_eval(TestModel) for _ in range(2)]
    )


def _expected_types():
    test_model = TestModel()
    model_weights_type = model_weights_lib.weights_type_from_model(test_model)
    unfinalized_metrics = test_model.report_local_unfinalized_metrics()
    metric_finalizers = test_model.metric_finalizers()
    finalized_metrics_type = _metrics_type(
        collections.OrderedDict(
            (metric, finalizer(unfinalized_metrics[metric]))
            for metric, finalizer in metric_finalizers.items()
        )
    )
    aggregator_state_type = (
        sum_aggregation_factory.SumThenFinalizeFactory(metric_finalizers)
        .create(_metrics_type(unfinalized_metrics))
        .initialize.type_signature.result.member
    )
    eval_metrics = collections.OrderedDict(
        eval=collections.OrderedDict(
            current_round_metrics=finalized_metrics_type,
            total_rounds_metrics=finalized_metrics_type,
        )
    )
    return model_weights_type, aggregator_state_type, eval_metrics


_CLIENT_DATA_TYPE = tff.FederatedType(
    tff.SequenceType(tff.StructType([('temp', tff.TensorType(dtype=np.float32, shape=[None]))])),
    tff.CLIENTS,
)


def _check_signatures(
    eval_process, expected_state_type, expected_metrics_type, expected_model_weights_type
):
    assert isinstance(eval_process, learning_process.LearningProcess)
    assert eval_process.initialize.type_signature.is_equivalent_to(
        tff.FunctionType(parameter=None, result=expected_state_type)
    )
    assert eval_process.next.type_signature.is_equivalent_to(
        tff.FunctionType(
            parameter=tff.StructType(
                [('state', expected_state_type), ('client_data', _CLIENT_DATA_TYPE)]
            ),
            result=learning_process.LearningProcessOutput(
                state=expected_state_type, metrics=expected_metrics_type
            ),
        )
    ), eval_process.next.type_signature
    assert eval_process.get_model_weights.type_signature.is_equivalent_to(
        tff.FunctionType(parameter=expected_state_type.member, result=expected_model_weights_type)
    )
    assert eval_process.set_model_weights.type_signature.is_equivalent_to(
        tff.FunctionType(
            parameter=tff.StructType(
                [
                    ('state', expected_state_type.member),
                    ('model_weights', expected_model_weights_type),
                ]
            ),
            result=expected_state_type.member,
        )
    )


def _check_execution(eval_process):
    state = eval_process.initialize()
    model_weights = {
        'a': model_weights_lib.ModelWeights(trainable=[5.0], non_trainable=[]),
        'b': model_weights_lib.ModelWeights(trainable=[10.0], non_trainable=[]),
    }
    new_state = eval_process.set_model_weights(state, model_weights)
    tf.nest.map_structure(
        np.testing.assert_array_equal, model_weights, eval_process.get_model_weights(new_state)
    )
    output = eval_process.next(new_state, CLIENTS_DATA)
    tf.nest.map_structure(
        np.testing.assert_array_equal, model_weights, eval_process.get_model_weights(output.state)
    )
    assert list(output.state.client_work.keys()) == ['a', 'b']
    assert list(output.metrics['client_work'].keys()) == ['a', 'b']
    for state_per_model, metrics_per_model, expected_num_over in zip(
        output.state.client_work.values(), output.metrics['client_work'].values(), [9.0, 5.0]
    ):
        _, accumulated_unfinalized_metrics = state_per_model
        assert accumulated_unfinalized_metrics == collections.OrderedDict(
            [('num_over', expected_num_over)]
        )
        assert metrics_per_model == collections.OrderedDict(
            eval=collections.OrderedDict(
                current_round_metrics=collections.OrderedDict(num_over=expected_num_over),
                total_rounds_metrics=collections.OrderedDict(num_over=expected_num_over),
            )
        )
    return output


# FedMultiModelEvalProcessTest.


def test_fed_multi_model_eval_process_type_properties(multi_eval_process):
    model_weights_type, aggregator_state_type, eval_metrics = _expected_types()
    expected_model_weights_type = {'a': model_weights_type, 'b': model_weights_type}
    expected_state_type = tff.FederatedType(
        composers.LearningAlgorithmState(
            global_model_weights=expected_model_weights_type,
            distributor=(),
            client_work={'a': aggregator_state_type, 'b': aggregator_state_type},
            aggregator=collections.OrderedDict(value_sum_process=(), weight_sum_process=()),
            finalizer=(),
        ),
        tff.SERVER,
    )
    expected_metrics_type = tff.FederatedType(
        collections.OrderedDict(
            distributor=(),
            client_work={'a': eval_metrics, 'b': eval_metrics},
            aggregator=collections.OrderedDict(mean_value=(), mean_weight=()),
            finalizer=(),
        ),
        tff.SERVER,
    )
    _check_signatures(
        multi_eval_process, expected_state_type, expected_metrics_type, expected_model_weights_type
    )


def test_fed_multi_model_eval_process_execution(tff_stack, multi_eval_process):
    _check_execution(multi_eval_process)


def test_fed_multi_model_eval_with_model_distributor():
    model_weights_type = model_weights_lib.weights_type_from_model(TestModel)
    model_weights_type = {'a': model_weights_type, 'b': model_weights_type}

    def test_distributor():
        @tff.federated_computation()
        def init_fn():
            return tff.federated_value((), tff.SERVER)

        @tff.federated_computation(
            init_fn.type_signature.result, tff.FederatedType(model_weights_type, tff.SERVER)
        )
        def next_fn(state, value):
            return MeasuredProcessOutput(
                state, tff.federated_broadcast(value), tff.federated_value((), tff.SERVER)
            )

        return distributors.DistributionProcess(init_fn, next_fn)

    eval_process = fed_multi_model_eval.build_fed_multi_model_eval(
        (TestModel, TestModel), test_distributor()
    )
    dist = test_distributor()
    assert eval_process.initialize.type_signature.result.member.distributor.is_equivalent_to(
        dist.initialize.type_signature.result.member
    )
    assert eval_process.next.type_signature.result.state.member.distributor.is_equivalent_to(
        dist.next.type_signature.result.state.member
    )
    assert eval_process.next.type_signature.result.metrics.member.distributor.is_equivalent_to(
        dist.next.type_signature.result.measurements.member
    )


@pytest.fixture(scope='module')
def custom_metrics_process():
    test_model = TestModel()
    metrics_aggregation_process = _custom_metrics_aggregation_process(
        test_model.metric_finalizers(), _metrics_type(test_model.report_local_unfinalized_metrics())
    )
    eval_process = fed_multi_model_eval.build_fed_multi_model_eval(
        (TestModel, TestModel),
        metrics_aggregation_processes=(metrics_aggregation_process, metrics_aggregation_process),
    )
    return eval_process


def test_fed_multi_model_eval_with_metrics_aggregation_process(tff_stack, custom_metrics_process):
    eval_process = custom_metrics_process
    state = eval_process.initialize()
    assert state.client_work == {
        'a': collections.OrderedDict([('num_over', 0.0)]),
        'b': collections.OrderedDict([('num_over', 0.0)]),
    }
    output = eval_process.next(state, CLIENTS_DATA)
    assert output.state.client_work == {
        'a': collections.OrderedDict([('num_over', 6.0)]),
        'b': collections.OrderedDict([('num_over', 6.0)]),
    }
    per_model = collections.OrderedDict(
        eval=collections.OrderedDict(
            current_round_metrics=collections.OrderedDict(num_over=6.0),
            total_rounds_metrics=collections.OrderedDict(num_over=6.0),
        )
    )
    assert output.metrics['client_work'] == {'a': per_model, 'b': per_model}


def test_invalid_metrics_aggregation_process_raises():
    metrics_aggregator = aggregator.sum_then_finalize(TestModel().metric_finalizers())
    with pytest.raises(TypeError, match='AggregationProcess'):
        fed_multi_model_eval.build_fed_multi_model_eval(
            (TestModel, TestModel),
            metrics_aggregation_processes=(metrics_aggregator, metrics_aggregator),
        )


def test_invalid_model_distributor_raises():
    with pytest.raises(TypeError, match='DistributionProcess'):
        fed_multi_model_eval.build_fed_multi_model_eval(
            (TestModel, TestModel), model_distributor=tff.tf_computation(lambda x: x)
        )


def test_construction_calls_model_fn():
    # Building must not call `model_fn` too many times (it can be expensive).
    mock_model_fn = mock.Mock(side_effect=TestModel)
    fed_multi_model_eval.build_fed_multi_model_eval((mock_model_fn, mock_model_fn))
    assert mock_model_fn.call_count == 3 * 2


# FunctionalFedMultiModelEvalProcessTest.


def test_raises_on_non_callable_or_functional_model():
    with pytest.raises(TypeError, match='FunctionalModel'):
        fed_multi_model_eval.build_fed_multi_model_eval(model_fns=(0,))


@pytest.fixture(scope='module')
def keras_and_functional_processes():
    batch_type = tff.to_type(_functional_test_datasets()[0].element_spec)
    loss_fn = tf.keras.losses.MeanSquaredError

    def tff_model_fn():
        return tff.learning.models.from_keras_model(
            keras_linear_model(2), loss=loss_fn(), input_spec=batch_type
        )

    eval_process = fed_multi_model_eval.build_fed_multi_model_eval((tff_model_fn,))

    def build_metrics_fn():
        return collections.OrderedDict(
            loss=tf.keras.metrics.MeanSquaredError(),
            num_examples=counters.NumExamplesCounter(),
            num_batches=counters.NumBatchesCounter(),
        )

    functional_model = functional.functional_model_from_keras(
        keras_model=lambda: keras_linear_model(2),
        loss_fn=loss_fn(),
        input_spec=batch_type,
        metrics_constructor=build_metrics_fn,
    )
    functional_eval_process = fed_multi_model_eval.build_fed_multi_model_eval((functional_model,))
    return eval_process, functional_eval_process


def test_functional_evaluation_matches_non_functional(tff_stack, keras_and_functional_processes):
    datasets = _functional_test_datasets()
    eval_process, functional_eval_process = keras_and_functional_processes
    eval_output = eval_process.next(eval_process.initialize(), datasets)
    functional_eval_output = functional_eval_process.next(
        functional_eval_process.initialize(), datasets
    )
    assert eval_output.metrics == functional_eval_output.metrics


# FedMultiModelEvalProcessFromEvalProcessesTest.


def test_multi_model_eval_process_type_properties(from_processes_process):
    model_weights_type, aggregator_state_type, eval_metrics = _expected_types()
    expected_model_weights_type = {'a': model_weights_type, 'b': model_weights_type}
    agg_state = collections.OrderedDict(value_sum_process=(), weight_sum_process=())
    agg_metrics = collections.OrderedDict(mean_value=(), mean_weight=())
    expected_state_type = tff.FederatedType(
        composers.LearningAlgorithmState(
            global_model_weights=expected_model_weights_type,
            distributor={'a': (), 'b': ()},
            client_work={'a': aggregator_state_type, 'b': aggregator_state_type},
            aggregator={'a': agg_state, 'b': agg_state},
            finalizer={'a': (), 'b': ()},
        ),
        tff.SERVER,
    )
    expected_metrics_type = tff.FederatedType(
        collections.OrderedDict(
            distributor={'a': (), 'b': ()},
            client_work={'a': eval_metrics, 'b': eval_metrics},
            aggregator={'a': agg_metrics, 'b': agg_metrics},
            finalizer={'a': (), 'b': ()},
        ),
        tff.SERVER,
    )
    _check_signatures(
        from_processes_process,
        expected_state_type,
        expected_metrics_type,
        expected_model_weights_type,
    )


def test_multi_model_eval_process_execution(tff_stack, from_processes_process):
    _check_execution(from_processes_process)


def test_multi_model_eval_process_raises_on_less_than_two_eval_processes():
    with pytest.raises(ValueError, match='At least two evaluation processes must be provided'):
        fed_multi_model_eval.build_fed_multi_model_eval_from_processes(
            [fed_eval.build_fed_eval(TestModel)]
        )


def test_multi_model_eval_process_raises_on_inconsistent_dataset_type():
    eval_processes = [fed_eval.build_fed_eval(TestModel), fed_eval.build_fed_eval(LinearRegression)]
    with pytest.raises(ValueError, match='same dataset type'):
        fed_multi_model_eval.build_fed_multi_model_eval_from_processes(eval_processes)


# Ours after TFF's.


def test_raises_on_no_model_or_wrong_number_of_processes():
    with pytest.raises(ValueError, match='At least one model_fn'):
        fed_multi_model_eval.build_fed_multi_model_eval(())
    with pytest.raises(ValueError, match='length 2'):
        fed_multi_model_eval.build_fed_multi_model_eval(
            (TestModel, TestModel), metrics_aggregation_processes=()
        )


def test_from_processes_gives_each_process_metrics(tff_stack, from_processes_process):
    single = fed_eval.build_fed_eval(TestModel)
    single_state = single.set_model_weights(
        single.initialize(), model_weights_lib.ModelWeights(trainable=[10.0], non_trainable=[])
    )
    single_output = single.next(single_state, CLIENTS_DATA)
    output = _check_execution(from_processes_process)
    assert output.metrics['client_work']['b'] == single_output.metrics['client_work']
