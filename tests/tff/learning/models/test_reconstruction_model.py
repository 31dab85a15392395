"""Port of TFF's ``tensorflow_federated/python/learning/models/reconstruction_model_test.py``.

Ported (Keras 3 models): from_keras_model_and_layers with global and local
layers and with only global layers, the global weights type of each, the
forward pass the same whatever the global / local split, bad input specs, a
local or global layer not in the model, overlapping variables (a layer
shared by two layers), from_keras_model_and_variables with global and local
variables, with only global ones, a variable not in the model, overlapping
lists, and an unbuilt model. Added: build_dataset_split_fn (epochs, step
limits, split) and read_metric_variables.
"""

import collections

import keras
import numpy as np
import pytest
import tensorflow as tf

import simharness as tff
from simharness.learning.models import model_weights, reconstruction_model

ReconstructionModel = reconstruction_model.ReconstructionModel


def _get_two_layer_model():
    return keras.Sequential(
        [
            keras.Input((5,)),
            keras.layers.Dense(
                5, activation='relu', kernel_initializer='zeros', bias_initializer='zeros'
            ),
            keras.layers.Dense(
                2, activation='relu', kernel_initializer='zeros', bias_initializer='zeros'
            ),
        ]
    )


class _EncapsulatingLayer(keras.layers.Layer):
    def __init__(self, layer_to_encapsulate):
        super().__init__()
        self._layer_to_encapsulate = layer_to_encapsulate

    def call(self, x):
        return self._layer_to_encapsulate(x)


class _EncapsulatedLayerModel(keras.Model):
    """The encapsulated layer shares the dense layer's variables (TFF's case)."""

    def __init__(self):
        super().__init__(name='encapsulated_layer_model')
        self.dense_to_encapsulate = keras.layers.Dense(
            5, activation='relu', kernel_initializer='zeros'
        )
        self.encapsulated_dense = _EncapsulatingLayer(self.dense_to_encapsulate)
        self.regular_dense = keras.layers.Dense(2, activation='relu', kernel_initializer='zeros')

    def call(self, inputs, training=True):
        return self.regular_dense(self.encapsulated_dense(inputs))


def _get_input_spec():
    return collections.OrderedDict(
        x=tf.TensorSpec(shape=[None, 5], dtype=tf.float32),
        y=tf.TensorSpec(shape=[None, 2], dtype=tf.float32),
    )


def _vars(layers, attr='trainable_variables'):
    return [v for layer in layers for v in getattr(layer, attr)]


def test_from_keras_model_and_layers_with_global_and_local_layers():
    keras_model = _get_two_layer_model()
    local_layers, global_layers = keras_model.layers[:1], keras_model.layers[1:]
    recon_model = ReconstructionModel.from_keras_model_and_layers(
        keras_model,
        global_layers=global_layers,
        local_layers=local_layers,
        input_spec=_get_input_spec(),
    )
    assert not ReconstructionModel.has_only_global_variables(recon_model)
    local = ReconstructionModel.get_local_variables(recon_model).trainable
    assert len(local) == 2 and all(a is b for a, b in zip(local, _vars(local_layers)))
    global_ = ReconstructionModel.get_global_variables(recon_model).trainable
    assert len(global_) == 2 and all(a is b for a, b in zip(global_, _vars(global_layers)))
    assert reconstruction_model.global_weights_type_from_model(recon_model) == tff.to_type(
        model_weights.ModelWeights(
            trainable=[tf.TensorSpec([5, 2], tf.float32), tf.TensorSpec([2], tf.float32)],
            non_trainable=[],
        )
    )


def test_from_keras_model_and_layers_with_only_global_layers():
    keras_model = _get_two_layer_model()
    recon_model = ReconstructionModel.from_keras_model_and_layers(
        keras_model, global_layers=keras_model.layers, local_layers=[], input_spec=_get_input_spec()
    )
    assert ReconstructionModel.has_only_global_variables(recon_model)
    assert len(ReconstructionModel.get_global_variables(recon_model).trainable) == 4
    assert reconstruction_model.global_weights_type_from_model(recon_model) == tff.to_type(
        model_weights.ModelWeights(
            trainable=[
                tf.TensorSpec([5, 5], tf.float32),
                tf.TensorSpec([5], tf.float32),
                tf.TensorSpec([5, 2], tf.float32),
                tf.TensorSpec([2], tf.float32),
            ],
            non_trainable=[],
        )
    )


def test_forward_pass_is_same_regardless_of_global_local_layer_split():
    keras_model = _get_two_layer_model()
    keras_model.set_weights([np.full(w.shape, 0.1, np.float32) for w in keras_model.get_weights()])
    batch = collections.OrderedDict(x=np.ones([3, 5], np.float32), y=np.zeros([3, 2], np.float32))
    outputs = []
    for n_local in (0, 1, 2):
        recon_model = ReconstructionModel.from_keras_model_and_layers(
            keras_model,
            global_layers=keras_model.layers[n_local:],
            local_layers=keras_model.layers[:n_local],
            input_spec=_get_input_spec(),
        )
        outputs.append(recon_model.forward_pass(batch))
    for output in outputs:
        assert isinstance(output, reconstruction_model.ReconstructionBatchOutput)
        np.testing.assert_allclose(output.predictions, outputs[0].predictions)
        np.testing.assert_array_equal(output.labels, batch['y'])
        assert int(output.num_examples) == 3
    # A tuple batch gives the same.
    tuple_model = ReconstructionModel.from_keras_model_and_layers(
        keras_model,
        global_layers=keras_model.layers,
        local_layers=[],
        input_spec=(tf.TensorSpec([None, 5], tf.float32), tf.TensorSpec([None, 2], tf.float32)),
    )
    np.testing.assert_allclose(
        tuple_model.forward_pass((batch['x'], batch['y'])).predictions, outputs[0].predictions
    )


@pytest.mark.parametrize(
    'input_spec',
    [
        tf.TensorSpec(shape=[None, 1], dtype=tf.float32),
        (tf.TensorSpec([None, 1], tf.float32),) * 3,
        collections.OrderedDict(
            foo=tf.TensorSpec([None, 1], tf.float32), y=tf.TensorSpec([None, 1], tf.float32)
        ),
        collections.OrderedDict(
            x=tf.TensorSpec([None, 1], tf.float32), bar=tf.TensorSpec([None, 1], tf.float32)
        ),
    ],
    ids=['single_tensor_spec', 'tuple_three_elements', 'dict_without_x', 'dict_without_y'],
)
def test_bad_input_spec_raises_error(input_spec):
    keras_model = _get_two_layer_model()
    with pytest.raises((ValueError, TypeError)):
        ReconstructionModel.from_keras_model_and_layers(
            keras_model,
            global_layers=keras_model.layers[1:],
            local_layers=keras_model.layers[:1],
            input_spec=input_spec,
        )


def test_layer_not_in_model_raises_error():
    keras_model, other_model = _get_two_layer_model(), _get_two_layer_model()
    with pytest.raises(ValueError, match='must include all trainable'):
        ReconstructionModel.from_keras_model_and_layers(
            keras_model,
            global_layers=keras_model.layers[1:],
            local_layers=other_model.layers[:1],
            input_spec=_get_input_spec(),
        )
    with pytest.raises(ValueError, match='must include all trainable'):
        ReconstructionModel.from_keras_model_and_layers(
            keras_model,
            global_layers=other_model.layers[1:],
            local_layers=keras_model.layers[:1],
            input_spec=_get_input_spec(),
        )


def test_from_keras_model_and_layers_non_disjoint_raises_error():
    keras_model = _EncapsulatedLayerModel()
    keras_model(np.zeros([1, 5], np.float32))
    with pytest.raises(ValueError, match='must be disjoint'):
        ReconstructionModel.from_keras_model_and_layers(
            keras_model,
            global_layers=[keras_model.encapsulated_dense, keras_model.regular_dense],
            local_layers=[keras_model.dense_to_encapsulate],
            input_spec=_get_input_spec(),
        )


def test_from_keras_model_and_layers_builds_an_unbuilt_model():
    keras_model = _EncapsulatedLayerModel()
    recon_model = ReconstructionModel.from_keras_model_and_layers(
        keras_model,
        global_layers=[keras_model.regular_dense],
        local_layers=[keras_model.dense_to_encapsulate],
        input_spec=_get_input_spec(),
    )
    assert len(recon_model.local_trainable_variables) == 2


def test_from_keras_model_and_variables_with_global_and_local_variables():
    keras_model = _get_two_layer_model()
    variables = keras_model.trainable_variables
    recon_model = ReconstructionModel.from_keras_model_and_variables(
        keras_model,
        global_trainable_variables=variables[2:],
        global_non_trainable_variables=[],
        local_trainable_variables=variables[:2],
        local_non_trainable_variables=[],
        input_spec=_get_input_spec(),
    )
    assert not ReconstructionModel.has_only_global_variables(recon_model)
    assert recon_model.global_trainable_variables == variables[2:]
    assert recon_model.local_trainable_variables == variables[:2]


def test_from_keras_model_and_variables_with_only_global_variables():
    keras_model = _get_two_layer_model()
    recon_model = ReconstructionModel.from_keras_model_and_variables(
        keras_model,
        global_trainable_variables=keras_model.trainable_variables,
        global_non_trainable_variables=[],
        local_trainable_variables=[],
        local_non_trainable_variables=[],
        input_spec=_get_input_spec(),
    )
    assert ReconstructionModel.has_only_global_variables(recon_model)


def test_from_keras_model_and_variables_errors():
    keras_model, other_model = _get_two_layer_model(), _get_two_layer_model()
    variables = keras_model.trainable_variables
    with pytest.raises(ValueError, match='must include all trainable'):
        ReconstructionModel.from_keras_model_and_variables(
            keras_model,
            global_trainable_variables=variables[2:],
            global_non_trainable_variables=[],
            local_trainable_variables=other_model.trainable_variables[:2],
            local_non_trainable_variables=[],
            input_spec=_get_input_spec(),
        )
    with pytest.raises(ValueError, match='must be disjoint'):
        ReconstructionModel.from_keras_model_and_variables(
            keras_model,
            global_trainable_variables=variables,
            global_non_trainable_variables=[],
            local_trainable_variables=variables[:1],
            local_non_trainable_variables=[],
            input_spec=_get_input_spec(),
        )
    unbuilt = _EncapsulatedLayerModel()
    with pytest.raises(ValueError, match='must be built'):
        ReconstructionModel.from_keras_model_and_variables(
            unbuilt,
            global_trainable_variables=[],
            global_non_trainable_variables=[],
            local_trainable_variables=[],
            local_non_trainable_variables=[],
            input_spec=_get_input_spec(),
        )
    with pytest.raises(TypeError, match='keras.Model'):
        ReconstructionModel.from_keras_model_and_variables(
            object(),
            global_trainable_variables=[],
            global_non_trainable_variables=[],
            local_trainable_variables=[],
            local_non_trainable_variables=[],
            input_spec=_get_input_spec(),
        )


@pytest.mark.parametrize(
    'kwargs,expected_recon,expected_post',
    [
        ({}, [0, 1, 2, 3], [0, 1, 2, 3]),
        (dict(recon_epochs=2, recon_steps_max=5), [0, 1, 2, 3, 0], [0, 1, 2, 3]),
        (dict(post_recon_epochs=2, post_recon_steps_max=6), [0, 1, 2, 3], [0, 1, 2, 3, 0, 1]),
        (dict(split_dataset=True), [0, 2], [1, 3]),
        (dict(split_dataset=True, recon_epochs=2, post_recon_steps_max=1), [0, 2, 0, 2], [1]),
    ],
    ids=[
        'default',
        'recon_epochs_and_max',
        'post_recon_epochs_and_max',
        'split',
        'split_with_epochs',
    ],
)
def test_build_dataset_split_fn(kwargs, expected_recon, expected_post):
    split_fn = ReconstructionModel.build_dataset_split_fn(**kwargs)
    recon, post = split_fn(tf.data.Dataset.range(4))
    assert list(recon.as_numpy_iterator()) == expected_recon
    assert list(post.as_numpy_iterator()) == expected_post
    dataset = tf.data.Dataset.range(2)
    assert ReconstructionModel.simple_dataset_split_fn(dataset) == (dataset, dataset)


def test_read_metric_variables():
    metric = keras.metrics.Sum(name='total')
    metric.update_state([1.0, 2.0])
    values = ReconstructionModel.read_metric_variables([metric])
    assert list(values) == ['total'] and float(values['total'][0]) == 3.0
    with pytest.raises(ValueError, match='Duplicate metric name'):
        ReconstructionModel.read_metric_variables([metric, keras.metrics.Sum(name='total')])
