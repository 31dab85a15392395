"""Port of TFF's ``tensorflow_federated/python/learning/models/serialization_test.py``.

Ported: the round trip of `save` / `load` (input spec, predict_on_batch and
forward_pass in training and inference, unfinalized and finalized metrics,
reset_metrics, saving a loaded model again) for TFF's `LinearRegression`,
its `_TestModel` (different outputs when training, with and without
reset_metrics) and a Keras model through `from_keras_model` (dict input,
Keras metrics; the tuple-input Keras model is saved with an `input_type`);
the serving signature; the functional
model's save / load (predict_on_batch both ways, loss, initial weights, a
loaded model as a `VariableModel` through `model_from_functional`, also inside
a tf_computation); errors for bad arguments. Left out: the
flatten / unflatten cases of TFF's private helpers (their protos are TFF's),
the TFLite conversion cases (TFLite's converter, a separate tool), the
"too large functional model" case (a 2 GiB graph: slow) and TFF's Keras
models with embedding / multiple inputs / multiple outputs (the tuple-input
and metrics cases cover the same code path here).
"""

import collections

import keras
import numpy as np
import pytest
import tensorflow as tf

import simharness as tff
from simharness.core.types import from_tf_structure
from simharness.learning.models import functional, serialization, variable
from tests.tff.learning.models import model_examples


class _TestModel(variable.VariableModel):
    """TFF's: logits when training, predicted classes in inference."""

    __test__ = False

    def __init__(self, has_reset_metrics_implemented=False):
        inputs = keras.Input(shape=(3,))
        logits = keras.layers.Dense(5)(inputs)
        predictions = keras.layers.Softmax()(logits)
        self._model = keras.Model(inputs=[inputs], outputs=[logits, predictions])
        self._has_reset_metrics_implemented = has_reset_metrics_implemented

    @tf.function
    def predict_on_batch(self, x, training=True):
        if training:
            return self._model(x)[0]
        return tf.argmax(self._model(x)[1], axis=1)

    @tf.function
    def forward_pass(self, batch_input, training=True):
        if training:
            loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
            logits = self.predict_on_batch(batch_input['x'], training=True)
            loss = loss_fn(y_true=batch_input['y'], y_pred=logits)
            return variable.BatchOutput(loss=loss, predictions=(), num_examples=tf.shape(logits)[0])
        predictions = self.predict_on_batch(batch_input['x'], training=False)
        return variable.BatchOutput(loss=(), predictions=predictions, num_examples=())

    @property
    def trainable_variables(self):
        return [v.value for v in self._model.trainable_variables]

    @property
    def non_trainable_variables(self):
        return [v.value for v in self._model.non_trainable_variables]

    @property
    def local_variables(self):
        return []

    @property
    def input_spec(self):
        return collections.OrderedDict(
            x=tf.TensorSpec(shape=(None, 3), dtype=tf.float32),
            y=tf.TensorSpec(shape=(None, 1), dtype=tf.int32),
        )

    @tf.function
    def report_local_unfinalized_metrics(self):
        return collections.OrderedDict()

    def metric_finalizers(self):
        return collections.OrderedDict()

    @tf.function
    def reset_metrics(self):
        if not self._has_reset_metrics_implemented:
            raise NotImplementedError("The `reset_metrics` method isn't implemented")
        for var in self.local_variables:
            var.assign(tf.zeros_like(var))


def _keras_tuple_input():
    return tff.learning.models.from_keras_model(
        model_examples.keras_linear_model(),
        loss=keras.losses.MeanSquaredError(),
        input_spec=(tf.TensorSpec([None, 2], tf.float32), tf.TensorSpec([None, 1], tf.float32)),
    )


def _keras_with_metrics():
    return tff.learning.models.from_keras_model(
        model_examples.keras_linear_model(),
        loss=keras.losses.MeanSquaredError(),
        input_spec=collections.OrderedDict(
            x=tf.TensorSpec([None, 2], tf.float32), y=tf.TensorSpec([None, 1], tf.float32)
        ),
        metrics=[keras.metrics.MeanAbsoluteError()],
    )


_TEST_MODEL_FNS = {
    'linear_regression': model_examples.LinearRegression,
    'inference_training_diff_has_reset_metrics_implemented': lambda: _TestModel(
        has_reset_metrics_implemented=True
    ),
    'inference_training_diff_has_reset_metrics_unimplemented': lambda: _TestModel(
        has_reset_metrics_implemented=False
    ),
    'keras_with_metrics': _keras_with_metrics,
}


def _build_ones(t):
    return np.ones(shape=[dim if dim else 1 for dim in t.shape], dtype=t.dtype.as_numpy_dtype)


def _assert_all_close(a, b):
    tf.nest.map_structure(
        lambda x, y: np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-6), a, b
    )


@pytest.mark.parametrize('name', sorted(_TEST_MODEL_FNS))
def test_round_trip(name, tmp_path):
    model = _TEST_MODEL_FNS[name]()
    test_dir = str(tmp_path / 'roundtrip_test')
    serialization.save(model, test_dir)
    loaded_model = serialization.load(test_dir)
    assert isinstance(loaded_model, variable.VariableModel)
    assert model.input_spec == loaded_model.input_spec
    # A loaded model saves again.
    serialization.save(loaded_model, str(tmp_path / 'again'))

    test_batch = tf.nest.map_structure(_build_ones, loaded_model.input_spec)
    predict_input = test_batch['x'] if isinstance(test_batch, dict) else test_batch[0]
    for training in [True, False]:
        _assert_all_close(
            model.predict_on_batch(predict_input, training),
            loaded_model.predict_on_batch(predict_input, training),
        )
        model_result = model.forward_pass(test_batch, training)
        loaded_result = loaded_model.forward_pass(test_batch, training)
        assert isinstance(loaded_result, variable.BatchOutput)
        _assert_all_close(model_result, loaded_result)

    # The same finalized metrics (the model's finalizers in a tf_computation, as TFF).
    unfinalized_metrics = model.report_local_unfinalized_metrics()
    loaded_unfinalized = loaded_model.report_local_unfinalized_metrics()
    _assert_all_close(unfinalized_metrics, loaded_unfinalized)
    for metric_name, finalizer in loaded_model.metric_finalizers().items():
        assert isinstance(finalizer, tff.Computation)
        value = tf.nest.map_structure(lambda t: np.asarray(t), loaded_unfinalized[metric_name])
        metric_type = from_tf_structure(
            tf.nest.map_structure(
                lambda t: tf.TensorSpec.from_tensor(tf.convert_to_tensor(t)),
                unfinalized_metrics[metric_name],
            )
        )
        expected = tff.tf_computation(model.metric_finalizers()[metric_name], metric_type)(value)
        _assert_all_close(expected, finalizer(value))
    assert list(loaded_model.metric_finalizers()) == sorted(model.metric_finalizers())

    try:
        model.reset_metrics()
        loaded_model_should_raise = False
    except NotImplementedError:
        loaded_model_should_raise = True
    if loaded_model_should_raise:
        with pytest.raises(NotImplementedError):
            loaded_model.reset_metrics()
    else:
        loaded_model.reset_metrics()
        _assert_all_close(
            model.report_local_unfinalized_metrics(),
            loaded_model.report_local_unfinalized_metrics(),
        )


def test_serving_signature_is_predict_on_batch_inference(tmp_path):
    model = model_examples.LinearRegression()
    serialization.save(model, str(tmp_path / 'm'))
    signature = tf.saved_model.load(str(tmp_path / 'm')).signatures['serving_default']
    x = np.ones([2, 2], np.float32)
    outputs = signature(tf.constant(x))
    np.testing.assert_allclose(list(outputs.values())[0], model.predict_on_batch(x, False))


def test_save_with_input_type(tmp_path):
    model = _keras_tuple_input()
    serialization.save(model, str(tmp_path / 'm'), input_type=tf.TensorSpec([None, 2], tf.float32))
    loaded = serialization.load(str(tmp_path / 'm'))
    x = np.ones([3, 2], np.float32)
    _assert_all_close(model.predict_on_batch(x, False), loaded.predict_on_batch(x, False))


def test_bad_arguments_raise(tmp_path):
    with pytest.raises(TypeError, match='VariableModel'):
        serialization.save(object(), str(tmp_path))
    with pytest.raises(TypeError, match='`path` must be a str'):
        serialization.save(model_examples.LinearRegression(), tmp_path)
    with pytest.raises(ValueError, match='non-empty'):
        serialization.load('')
    with pytest.raises(TypeError, match='FunctionalModel'):
        serialization.save_functional_model(model_examples.LinearRegression(), str(tmp_path))
    with pytest.raises(ValueError, match='non-empty'):
        serialization.load_functional_model('')


# ------------------------------------------------------------------ functional models

_FUNCTIONAL_MODEL_FNS = {
    'linear_functional': model_examples.linear_functional_model,
    'keras_functional': lambda: functional.functional_model_from_keras(
        model_examples.keras_linear_model(),
        loss_fn=keras.losses.MeanSquaredError(),
        input_spec=(tf.TensorSpec([None, 2], tf.float32), tf.TensorSpec([None, 1], tf.float32)),
    ),
}


@pytest.fixture(scope='module', params=sorted(_FUNCTIONAL_MODEL_FNS))
def saved_functional(request, tmp_path_factory):
    model = _FUNCTIONAL_MODEL_FNS[request.param]()
    path = str(tmp_path_factory.mktemp('functional') / request.param)
    serialization.save_functional_model(model, path)
    return model, path


def test_save_and_load_functional_model(saved_functional):
    model, path = saved_functional
    loaded = serialization.load_functional_model(path)
    assert isinstance(loaded, functional.FunctionalModel)
    assert loaded.input_spec == tuple(model.input_spec)
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    y = np.ones([3, 1], np.float32)
    weights = tf.nest.map_structure(lambda w: w + 0.5, model.initial_weights)
    for training in (True, False):
        expected = model.predict_on_batch(weights, x, training)
        _assert_all_close(expected, loaded.predict_on_batch(weights, x, training))
    _assert_all_close(model.loss(expected, y), loaded.loss(expected, y))


def test_initial_model_weights_before_after_save(saved_functional):
    model, path = saved_functional
    loaded = serialization.load_functional_model(path)
    _assert_all_close(model.initial_weights, loaded.initial_weights)


def test_save_load_convert_to_tff_model(saved_functional):
    model, path = saved_functional
    loaded = serialization.load_functional_model(path)
    tff_model = functional.model_from_functional(loaded)
    x = np.ones([2, 2], np.float32)
    _assert_all_close(
        functional.model_from_functional(model).predict_on_batch(x, False),
        tff_model.predict_on_batch(x, False),
    )


def test_convert_loaded_model_to_tff_model_within_tf_computation(saved_functional):
    model, path = saved_functional
    loaded = serialization.load_functional_model(path)

    @tff.tf_computation
    def predict():
        tff_model = functional.model_from_functional(loaded)
        return tff_model.predict_on_batch(tf.ones([2, 2], tf.float32), False)

    _assert_all_close(
        functional.model_from_functional(model).predict_on_batch(
            np.ones([2, 2], np.float32), False
        ),
        predict(),
    )
