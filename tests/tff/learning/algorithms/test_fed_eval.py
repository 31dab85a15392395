"""Port of TFF's ``tensorflow_federated/python/learning/algorithms/fed_eval_test.py``.

Every case of TFF's module is here (``skip_test_for_*gpu`` does not apply: no
GPU). Keras model of the functional-vs-Keras case: `keras_linear_model` (TFF's
``build_linear_regression_keras_functional_model`` builds the same layer).
Ours after them: the client loops lowered, and the same bits on both stacks.
"""

import collections
from unittest import mock

import numpy as np
import pytest
import tensorflow as tf

import simharness as tff
from simharness.learning.algorithms import fed_eval
from simharness.learning.metrics import aggregator, counters, sum_aggregation_factory
from simharness.learning.models import functional
from simharness.learning.models import model_weights as model_weights_lib
from simharness.learning.models import variable
from simharness.learning.templates import composers, distributors, learning_process
from simharness.templates import AggregationProcess, MeasuredProcessOutput
from tests.tff.learning.algorithms import learning_test_utils as utils
from tests.tff.learning.models.model_examples import keras_linear_model


class TestModel(variable.VariableModel):
    """TFF's: counts the temperatures over ``max_temp`` (the only weight)."""

    __test__ = False  # not a pytest class

    def __init__(self):
        self._max_temp = tf.Variable(
            lambda: tf.zeros(dtype=tf.float32, shape=[]), name='max_temp', trainable=True
        )
        self._num_over = tf.Variable(0.0, name='num_over', trainable=False)

    @property
    def trainable_variables(self):
        return [self._max_temp]

    @property
    def non_trainable_variables(self):
        return []

    @property
    def local_variables(self):
        return [self._num_over]

    @property
    def input_spec(self):
        return collections.OrderedDict(temp=tf.TensorSpec([None], tf.float32))

    @tf.function
    def predict_on_batch(self, batch, training=True):
        del training
        return tf.zeros_like(batch['temp'])

    @tf.function
    def forward_pass(self, batch, training=True):
        assert not training
        num_over = tf.reduce_sum(tf.cast(tf.greater(batch['temp'], self._max_temp), tf.float32))
        self._num_over.assign_add(num_over)
        predictions = self.predict_on_batch(batch, training)
        return variable.BatchOutput(
            loss=tf.constant(0.0), predictions=predictions, num_examples=tf.shape(predictions)[0]
        )

    @tf.function
    def report_local_unfinalized_metrics(self):
        return collections.OrderedDict(num_over=self._num_over)

    def metric_finalizers(self):
        return collections.OrderedDict(num_over=tf.function(func=lambda x: x))

    @tf.function
    def reset_metrics(self):
        for var in self.local_variables:
            var.assign(tf.zeros_like(var))


def _metrics_type(metrics):
    return tff.StructType(
        [
            (
                k,
                tff.TensorType(
                    tf.convert_to_tensor(v).dtype.as_numpy_dtype,
                    tf.convert_to_tensor(v).shape.as_list(),
                ),
            )
            for k, v in metrics.items()
        ],
        container=collections.OrderedDict,
    )


def _custom_metrics_aggregation_process(metric_finalizers, metrics_type):
    """TFF's: the max of the clients' metrics, and the max over rounds."""

    @tff.tf_computation
    def zeros():
        return collections.OrderedDict(
            (name, tf.zeros(t.shape, tf.as_dtype(t.dtype))) for name, t in metrics_type.items()
        )

    @tff.federated_computation()
    def init_fn():
        return tff.federated_eval(zeros, tff.SERVER)

    @tff.tf_computation(metrics_type, metrics_type)
    def get_max(a, b):
        return tf.nest.map_structure(tf.math.maximum, a, b)

    @tff.tf_computation(metrics_type)
    def finalize(unfinalized):
        return collections.OrderedDict(
            (name, fn(unfinalized[name])) for name, fn in metric_finalizers.items()
        )

    @tff.federated_computation(
        init_fn.type_signature.result, tff.FederatedType(metrics_type, tff.CLIENTS)
    )
    def next_fn(state, unfinalized_metrics):
        max_metrics = tff.federated_max(unfinalized_metrics)
        state = tff.federated_map(get_max, (state, max_metrics))
        return MeasuredProcessOutput(
            state=state,
            result=tff.federated_zip(
                (tff.federated_map(finalize, max_metrics), tff.federated_map(finalize, state))
            ),
            measurements=tff.federated_value((), tff.SERVER),
        )

    return AggregationProcess(init_fn, next_fn)


def _temp_dict(temps):
    return {'temp': np.array(temps, dtype=np.float32)}


CLIENTS_DATA = [
    [_temp_dict([1.0, 10.0, 2.0, 7.0]), _temp_dict([6.0, 11.0, 0.0, 0.0])],
    [_temp_dict([9.0, 12.0, 13.0, 0.0])],
    [_temp_dict([1.0, 0.0, 0.0, 0.0]), _temp_dict([22.0, 23.0, 0.0, 0.0])],
]


def test_fed_eval_process_type_properties():
    test_model = TestModel()
    weights_type = model_weights_lib.weights_type_from_model(test_model)
    unfinalized = test_model.report_local_unfinalized_metrics()
    metrics_type = _metrics_type(unfinalized)
    finalizers = test_model.metric_finalizers()
    finalized_type = _metrics_type(
        collections.OrderedDict((k, fn(unfinalized[k])) for k, fn in finalizers.items())
    )
    aggregator_state = (
        sum_aggregation_factory.SumThenFinalizeFactory(finalizers)
        .create(metrics_type)
        .initialize.type_signature.result.member
    )

    process = fed_eval.build_fed_eval(TestModel)
    assert isinstance(process, learning_process.LearningProcess)
    state_type = tff.FederatedType(
        composers.LearningAlgorithmState(
            global_model_weights=weights_type,
            distributor=(),
            client_work=aggregator_state,
            aggregator=collections.OrderedDict(value_sum_process=(), weight_sum_process=()),
            finalizer=(),
        ),
        tff.SERVER,
    )
    metrics = tff.FederatedType(
        collections.OrderedDict(
            distributor=(),
            client_work=collections.OrderedDict(
                eval=collections.OrderedDict(
                    current_round_metrics=finalized_type, total_rounds_metrics=finalized_type
                )
            ),
            aggregator=collections.OrderedDict(mean_value=(), mean_weight=()),
            finalizer=(),
        ),
        tff.SERVER,
    )
    assert process.initialize.type_signature.is_equivalent_to(tff.FunctionType(None, state_type))
    data_type = tff.FederatedType(
        tff.SequenceType(tff.StructType([('temp', tff.TensorType(np.float32, [None]))])),
        tff.CLIENTS,
    )
    expected_next = tff.FunctionType(
        tff.StructType([('state', state_type), ('client_data', data_type)]),
        learning_process.LearningProcessOutput(state=state_type, metrics=metrics),
    )
    assert process.next.type_signature.is_equivalent_to(expected_next), process.next.type_signature
    assert process.get_model_weights.type_signature.is_equivalent_to(
        tff.FunctionType(state_type.member, weights_type)
    )
    assert process.set_model_weights.type_signature.is_equivalent_to(
        tff.FunctionType(
            tff.StructType([('state', state_type.member), ('model_weights', weights_type)]),
            state_type.member,
        )
    )


def test_fed_eval_process_execution(tff_stack):
    process = fed_eval.build_fed_eval(TestModel)
    weights = model_weights_lib.ModelWeights(trainable=[5.0], non_trainable=[])
    state = process.set_model_weights(process.initialize(), weights)
    assert process.get_model_weights(state) == weights
    output = process.next(state, CLIENTS_DATA)
    assert process.get_model_weights(output.state) == weights
    _, accumulated = output.state.client_work
    assert accumulated == collections.OrderedDict(num_over=9.0)
    assert output.metrics['client_work'] == collections.OrderedDict(
        eval=collections.OrderedDict(
            current_round_metrics=collections.OrderedDict(num_over=9.0),
            total_rounds_metrics=collections.OrderedDict(num_over=9.0),
        )
    )


def test_fed_eval_with_model_distributor():
    weights_type = model_weights_lib.weights_type_from_model(TestModel)

    def test_distributor():
        @tff.federated_computation()
        def init_fn():
            return tff.federated_value((), tff.SERVER)

        @tff.federated_computation(
            init_fn.type_signature.result, tff.FederatedType(weights_type, tff.SERVER)
        )
        def next_fn(state, value):
            return MeasuredProcessOutput(
                state, tff.federated_broadcast(value), tff.federated_value((), tff.SERVER)
            )

        return distributors.DistributionProcess(init_fn, next_fn)

    process = fed_eval.build_fed_eval(TestModel, test_distributor())
    dist = test_distributor()
    assert process.initialize.type_signature.result.member.distributor.is_equivalent_to(
        dist.initialize.type_signature.result.member
    )
    assert process.next.type_signature.result.state.member.distributor.is_equivalent_to(
        dist.next.type_signature.result.state.member
    )
    assert process.next.type_signature.result.metrics.member.distributor.is_equivalent_to(
        dist.next.type_signature.result.measurements.member
    )


def test_fed_eval_with_metrics_aggregation_process(tff_stack):
    test_model = TestModel()
    process = fed_eval.build_fed_eval(
        TestModel,
        metrics_aggregation_process=_custom_metrics_aggregation_process(
            test_model.metric_finalizers(),
            _metrics_type(test_model.report_local_unfinalized_metrics()),
        ),
    )
    state = process.initialize()
    assert state.client_work == collections.OrderedDict([('num_over', 0.0)])
    output = process.next(state, CLIENTS_DATA)
    assert output.state.client_work == collections.OrderedDict([('num_over', 6.0)])
    assert output.metrics['client_work'] == collections.OrderedDict(
        eval=collections.OrderedDict(
            current_round_metrics=collections.OrderedDict(num_over=6.0),
            total_rounds_metrics=collections.OrderedDict(num_over=6.0),
        )
    )


def test_invalid_metrics_aggregation_process_raises():
    metrics_aggregator = aggregator.sum_then_finalize(TestModel().metric_finalizers())
    with pytest.raises(TypeError, match='AggregationProcess'):
        fed_eval.build_fed_eval(TestModel, metrics_aggregation_process=metrics_aggregator)


def test_invalid_model_distributor_raises():
    with pytest.raises(TypeError, match='DistributionProcess'):
        fed_eval.build_fed_eval(TestModel, model_distributor=tff.tf_computation(lambda x: x))


def test_construction_calls_model_fn():
    mock_model_fn = mock.Mock(side_effect=TestModel)
    fed_eval.build_fed_eval(mock_model_fn)
    assert mock_model_fn.call_count == 3


def _functional_test_datasets():
    d1 = tf.data.Dataset.from_tensor_slices(
        collections.OrderedDict(
            x=[[0.0, 0.0], [1.0, 0.0], [2.0, 0.0], [3.0, 0.0]], y=[[0.0], [0.0], [1.0], [1.0]]
        )
    )
    d2 = tf.data.Dataset.from_tensor_slices(
        collections.OrderedDict(
            x=[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]], y=[[1.0], [2.0], [3.0], [4.0]]
        )
    )
    return [d1.repeat(3).batch(3), d2.repeat(3).batch(3)]


def test_raises_on_non_callable_or_functional_model():
    with pytest.raises(TypeError, match='is not a callable'):
        fed_eval.build_fed_eval(model_fn=0)


def test_functional_evaluation_matches_non_functional(tff_stack):
    datasets = _functional_test_datasets()
    batch_type = tff.to_type(datasets[0].element_spec)

    def tff_model_fn():
        return tff.learning.models.from_keras_model(
            keras_linear_model(2), loss=tf.keras.losses.MeanSquaredError(), input_spec=batch_type
        )

    output = fed_eval.build_fed_eval(tff_model_fn)
    output = output.next(output.initialize(), datasets)

    def build_metrics_fn():
        return collections.OrderedDict(
            loss=tf.keras.metrics.MeanSquaredError(),
            num_examples=counters.NumExamplesCounter(),
            num_batches=counters.NumBatchesCounter(),
        )

    functional_model = functional.functional_model_from_keras(
        keras_model=lambda: keras_linear_model(2),
        loss_fn=tf.keras.losses.MeanSquaredError(),
        input_spec=batch_type,
        metrics_constructor=build_metrics_fn,
    )
    functional_process = fed_eval.build_fed_eval(functional_model)
    functional_output = functional_process.next(functional_process.initialize(), datasets)
    assert output.metrics == functional_output.metrics


# -- ours ------------------------------------------------------------------------------------


def test_client_loops_are_lowered():
    assert utils.assert_client_loops_lowered(fed_eval.build_fed_eval(TestModel)) == 1
    assert (
        utils.assert_client_loops_lowered(
            fed_eval.build_fed_eval(utils.build_functional_linear_regression())
        )
        == 1
    )


def test_same_bits_on_stacks(stack_registry):
    process = fed_eval.build_fed_eval(utils.build_functional_linear_regression())
    datasets = utils.tuple_datasets(utils.linear_datasets(num_clients=3))

    def run():
        state = process.initialize()
        return process.next(state, datasets)

    output = utils.assert_same_bits_on_stacks(stack_registry, run)
    assert output.metrics['client_work']['eval']['total_rounds_metrics']['num_examples'] == 11
