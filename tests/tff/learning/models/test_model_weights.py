"""TFF's learning/models/model_weights_test.py, renamed. Left out: the ``tf.keras`` (Keras 2)
parameterizations (Keras 3 only here)."""

import collections

import keras
import numpy as np
import pytest
import tensorflow as tf

import simharness as tff

MW = tff.learning.models.ModelWeights


class TestModel(tff.learning.models.VariableModel):
    """A very simple model for type signatures."""

    def __init__(self):
        self.w = tf.Variable([0.0, 0.0, 0.0], name='w')
        self.b = tf.Variable([0.0], name='b')
        self.c = tf.Variable(0, name='c')
        self.num_examples = tf.Variable(0, name='num_examples', trainable=False)

    @property
    def trainable_variables(self):
        return [self.w, self.b]

    @property
    def non_trainable_variables(self):
        return [self.c]

    @property
    def local_variables(self):
        return [self.num_examples]

    @property
    def input_spec(self):
        return (tf.TensorSpec([3], tf.float32), tf.TensorSpec([1], tf.float32))

    def predict_on_batch(self, batch_input, training=True):
        return 1.0

    def forward_pass(self, batch_input, training=True):
        return tff.learning.models.BatchOutput(loss=0.0, predictions=1.0, num_examples=0)

    def report_local_unfinalized_metrics(self):
        return collections.OrderedDict(num_examples=self.num_examples.read_value())

    def metric_finalizers(self):
        return collections.OrderedDict(num_examples=lambda x: x)

    def reset_metrics(self):
        for var in self.local_variables:
            var.assign(tf.zeros_like(var))


def test_weights_type_fails_not_callable_or_model():
    with pytest.raises(TypeError):
        tff.learning.models.weights_type_from_model(0)
    with pytest.raises(TypeError):
        tff.learning.models.weights_type_from_model(lambda: 0)


@pytest.mark.parametrize('model', [TestModel(), TestModel], ids=['model', 'callable'])
def test_returns_model_weights_type(model):
    weights_type = tff.learning.models.weights_type_from_model(model)
    expected = tff.StructType(
        [
            (
                'trainable',
                tff.StructType(
                    [tff.TensorType(np.float32, [3]), tff.TensorType(np.float32, [1])],
                    container=list,
                ),
            ),
            ('non_trainable', tff.StructType([tff.TensorType(np.int32)], container=list)),
        ],
        container=MW,
    )
    assert weights_type == expected
    assert weights_type.python_container is MW
    assert weights_type.trainable.python_container is list


def test_from_model_keras():
    keras_model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(1, use_bias=False)])
    weights = MW.from_model(keras_model)
    assert isinstance(weights, MW)
    assert len(weights.trainable) == 1 and not weights.non_trainable


def test_from_model_variable_model():
    weights = MW.from_model(TestModel())
    assert isinstance(weights, MW)
    np.testing.assert_allclose(weights.trainable[0], np.zeros([3]))
    np.testing.assert_allclose(weights.trainable[1], np.zeros([1]))
    assert int(weights.non_trainable[0]) == 0


def test_weights_to_keras_model():
    keras_model = keras.Sequential(
        [keras.Input((5,)), keras.layers.Dense(1, use_bias=False, kernel_initializer='zeros')]
    )
    np.testing.assert_array_equal(keras_model.trainable_weights[0].numpy(), np.zeros([5, 1]))
    MW(trainable=(tf.ones([5, 1]),), non_trainable=()).assign_weights_to(keras_model)
    np.testing.assert_array_equal(keras_model.trainable_weights[0].numpy(), np.ones([5, 1]))


def test_weights_to_variable_model():
    model = TestModel()
    MW(
        trainable=[tf.ones([3]), tf.ones([1])], non_trainable=[tf.ones([], dtype=tf.int32)]
    ).assign_weights_to(model)
    np.testing.assert_allclose(model.trainable_variables[0].numpy(), np.ones([3]))
    assert int(model.non_trainable_variables[0].numpy()) == 1


def test_assign_to_not_a_model_raises():
    with pytest.raises(TypeError, match='VariableModel'):
        MW([], []).assign_weights_to(object())


def test_convert_variables_to_arrays():
    arrays = MW.from_model(TestModel()).convert_variables_to_arrays()
    assert all(isinstance(a, np.ndarray) for a in arrays.trainable + arrays.non_trainable)


def test_convert_raises_exception_in_graph_context():
    w = MW(0.0, 0.0)
    with tf.Graph().as_default():
        with pytest.raises(ValueError, match='eager'):
            w.convert_variables_to_arrays()


def test_from_tff_result():
    weights = MW.from_tff_result(
        tff.Struct(
            [
                ('trainable', tff.Struct([(None, 1), (None, 2)])),
                ('non_trainable', tff.Struct([(None, 3)])),
            ]
        )
    )
    assert weights == MW([1, 2], [3])


def test_weights_travel_through_computations(tff_stack):
    """ModelWeights in, ModelWeights out; assigned to a model built inside the computation."""
    weights_type = tff.learning.models.weights_type_from_model(TestModel)

    @tff.tf_computation(weights_type)
    def add_one(weights):
        model = TestModel()
        weights.assign_weights_to(model)
        return tf.nest.map_structure(
            lambda v: v + tf.ones_like(v),
            MW(list(model.trainable_variables), list(model.non_trainable_variables)),
        )

    @tff.federated_computation(tff.type_at_server(weights_type))
    def run(weights):
        return tff.federated_map(add_one, tff.federated_map(add_one, weights))

    result = run(MW([np.zeros([3], np.float32), np.ones([1], np.float32)], [np.int32(5)]))
    assert isinstance(result, MW)
    np.testing.assert_array_equal(result.trainable[0], [2.0, 2.0, 2.0])
    np.testing.assert_array_equal(result.trainable[1], [3.0])
    assert int(result.non_trainable[0]) == 7
