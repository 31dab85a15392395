"""Port of TFF's ``tensorflow_federated/python/learning/algorithms/personalization_eval_test.py``.

No case left out. `_evaluate_fn` resets a variable without ``initial_value``
(Keras 3's, of the Keras model's metrics) to zeros. The ``tff_struct_type``
Keras case (an input spec of a struct type with no container) runs as TFF's. The samples come in the order
of our reservoir sampling (a function of the client values); as in TFF, the
assertions do not depend on it. The computations are traced once for the
module. Ours after TFF's: the types, the same bits on both stacks.
"""

import collections
import functools
from unittest import mock

import numpy as np
import pytest
import tensorflow as tf

import simharness as tff
from simharness.learning import loop_builder
from simharness.learning.algorithms import personalization_eval as p13n_eval
from simharness.learning.models import model_weights
from tests.tff.learning.models.model_examples import LinearRegression

dataset_reduce_fn = loop_builder.build_training_loop(
    loop_builder.LoopImplementation.DATASET_ITERATOR
)


@tf.function
def _evaluate_fn(model, dataset, batch_size=1):
    """Evaluates a `VariableModel` on `dataset` (its metrics reset first)."""
    for var in model.local_variables:
        # Keras 3 variables (the metrics' of a Keras model) have no `initial_value`.
        if getattr(var, 'initial_value', None) is not None:
            var.assign(var.initial_value)
        else:
            var.assign(tf.zeros_like(var))

    def eval_fn(whimsy_state, batch):
        model.forward_pass(batch, training=False)
        return whimsy_state

    dataset_reduce_fn(
        reduce_fn=eval_fn,
        dataset=dataset.batch(batch_size),
        initial_state_fn=lambda: tf.constant(0),
    )
    results = collections.OrderedDict()
    for name, metric in model.report_local_unfinalized_metrics().items():
        if isinstance(metric, list) and len(metric) == 2:
            # (sum, count) -> one scalar.
            results[name] = metric[0] / metric[1]
        else:
            results[name] = metric[0] if isinstance(metric, list) else metric
    return results


def _build_personalize_fn(optimizer_fn, train_batch_size, test_batch_size):
    optimizer = optimizer_fn()

    @tf.function
    def personalize_fn(model, train_data, test_data):
        def train_fn(num_examples_sum, batch):
            with tf.GradientTape() as tape:
                output = model.forward_pass(batch)
            grads = tape.gradient(output.loss, model.trainable_variables)
            optimizer.apply_gradients(
                zip(tf.nest.flatten(grads), tf.nest.flatten(model.trainable_variables))
            )
            return num_examples_sum + output.num_examples

        num_examples_sum = dataset_reduce_fn(
            reduce_fn=train_fn,
            dataset=train_data.batch(train_batch_size),
            initial_state_fn=lambda: tf.constant(0),
        )
        results = collections.OrderedDict()
        results['num_examples'] = num_examples_sum
        results['test_outputs'] = _evaluate_fn(model, test_data, test_batch_size)
        return results

    return personalize_fn


def _create_p13n_fn_dict(learning_rate):
    """Two strategies, of training batch sizes 1 and 2."""
    p13n_fn_dict = collections.OrderedDict()
    opt_fn = lambda: tf.keras.optimizers.SGD(learning_rate=learning_rate)  # noqa: E731
    p13n_fn_dict['batch_size_1'] = lambda: _build_personalize_fn(opt_fn, 1, 3)
    p13n_fn_dict['batch_size_2'] = lambda: _build_personalize_fn(opt_fn, 2, 3)
    return p13n_fn_dict


def _create_dataset(scale):
    """Three unbatched points."""
    x = np.array([[-1.0, -1.0], [1.0, 1.0], [1.0, 1.0]]) * scale
    y = np.array([[1.0], [1.0], [1.0]]) * scale
    return tf.data.Dataset.from_tensor_slices(
        collections.OrderedDict(x=x.astype(np.float32), y=y.astype(np.float32))
    )


def _create_client_input(train_scale, test_scale):
    return collections.OrderedDict(
        train_data=_create_dataset(train_scale), test_data=_create_dataset(test_scale)
    )


def _create_zero_model_weights(model_fn):
    return tf.nest.map_structure(np.zeros_like, model_weights.ModelWeights.from_model(model_fn()))


def _linear_model_fn():
    return LinearRegression(feature_dim=2)


@pytest.fixture(scope='module')
def linear_p13n_eval():
    return p13n_eval.build_personalization_eval_computation(
        _linear_model_fn, _create_p13n_fn_dict(learning_rate=1.0), _evaluate_fn
    )


def _two_clients():
    # Equal train data, test data of different scales.
    return [
        _create_client_input(train_scale=1.0, test_scale=1.0),
        _create_client_input(train_scale=1.0, test_scale=2.0),
    ]


def test_failure_with_invalid_model_fn():
    p13n_fn_dict = _create_p13n_fn_dict(learning_rate=1.0)
    with pytest.raises(TypeError):
        p13n_eval.build_personalization_eval_computation(6, p13n_fn_dict, _evaluate_fn)
    with pytest.raises(TypeError):
        p13n_eval.build_personalization_eval_computation(lambda: 6, p13n_fn_dict, _evaluate_fn)


def test_failure_with_invalid_p13n_fns():
    with pytest.raises(TypeError):
        p13n_eval.build_personalization_eval_computation(_linear_model_fn, {'a': 6}, _evaluate_fn)
    with pytest.raises(TypeError):
        p13n_eval.build_personalization_eval_computation(
            _linear_model_fn, collections.OrderedDict(a=6), _evaluate_fn
        )
    with pytest.raises(TypeError):
        p13n_eval.build_personalization_eval_computation(
            _linear_model_fn, collections.OrderedDict(x=lambda: 2), _evaluate_fn
        )
    with pytest.raises(ValueError):
        p13n_eval.build_personalization_eval_computation(
            _linear_model_fn, collections.OrderedDict(baseline_metrics=lambda: 2), _evaluate_fn
        )


def test_failure_with_invalid_baseline_eval_fn():
    with pytest.raises(TypeError):
        p13n_eval.build_personalization_eval_computation(
            _linear_model_fn, _create_p13n_fn_dict(learning_rate=1.0), 6
        )


def test_success_with_directly_constructed_model(tff_stack, linear_p13n_eval):
    results = linear_p13n_eval(_create_zero_model_weights(_linear_model_fn), _two_clients())

    baseline_metrics = results['baseline_metrics']
    np.testing.assert_array_equal(baseline_metrics['num_examples'], [3, 3])
    # Zero weights: client 1 0.5 * (1 + 1 + 1) / 3 = 0.5, client 2 0.5 * (4 + 4 + 4) / 3 = 2.0.
    np.testing.assert_array_equal(sorted(baseline_metrics['loss']), [0.5, 2.0])
    client_1_idx, client_2_idx = (0, 1) if baseline_metrics['loss'][0] == 0.5 else (1, 0)

    bs1_metrics = results['batch_size_1']
    np.testing.assert_array_equal(bs1_metrics['num_examples'], [3, 3])
    bs1_test_outputs = bs1_metrics['test_outputs']
    np.testing.assert_array_equal(bs1_test_outputs['num_examples'], [3, 3])
    # Both clients' weights become [-3, -3, -1]: losses 24 and 88.5.
    assert bs1_test_outputs['loss'][client_1_idx] == pytest.approx(24.0)
    assert bs1_test_outputs['loss'][client_2_idx] == pytest.approx(88.5)

    bs2_metrics = results['batch_size_2']
    np.testing.assert_array_equal(bs2_metrics['num_examples'], [3, 3])
    bs2_test_outputs = bs2_metrics['test_outputs']
    np.testing.assert_array_equal(bs2_test_outputs['num_examples'], [3, 3])
    # Both clients' weights become [0, 0, 1]: losses 0 and 0.5.
    assert bs2_test_outputs['loss'][client_1_idx] == pytest.approx(0.0)
    assert bs2_test_outputs['loss'][client_2_idx] == pytest.approx(0.5)


_INPUT_SPECS = {
    'python_container': collections.OrderedDict(
        x=tf.TensorSpec(shape=[None, 2], dtype=tf.float32),
        y=tf.TensorSpec(shape=[None, 1], dtype=tf.float32),
    ),
    'tff_struct_with_python_type': tff.StructWithPythonType(
        collections.OrderedDict(
            x=tff.TensorType(shape=[None, 2], dtype=np.float32),
            y=tff.TensorType(shape=[None, 1], dtype=np.float32),
        ),
        container_type=collections.OrderedDict,
    ),
    'tff_struct_type': tff.StructType(
        collections.OrderedDict(
            x=tff.TensorType(shape=[None, 2], dtype=np.float32),
            y=tff.TensorType(shape=[None, 1], dtype=np.float32),
        )
    ),
}


@functools.lru_cache(maxsize=None)
def _keras_p13n_eval(spec_name):
    input_spec = _INPUT_SPECS[spec_name]

    def model_fn():
        inputs = tf.keras.Input(shape=(2,))  # feature dim = 2
        outputs = tf.keras.layers.Dense(1)(inputs)
        keras_model = tf.keras.Model(inputs=inputs, outputs=outputs)
        return tff.learning.models.from_keras_model(
            keras_model, input_spec=input_spec, loss=tf.keras.losses.MeanSquaredError()
        )

    federated_p13n_eval = p13n_eval.build_personalization_eval_computation(
        model_fn, _create_p13n_fn_dict(learning_rate=0.5), _evaluate_fn
    )
    return federated_p13n_eval, _create_zero_model_weights(model_fn)


@pytest.mark.parametrize('spec_name', list(_INPUT_SPECS))
def test_success_with_model_constructed_from_keras(tff_stack, spec_name):
    federated_p13n_eval, zero_model_weights = _keras_p13n_eval(spec_name)
    results = federated_p13n_eval(zero_model_weights, _two_clients())

    # Zero weights: mean squared errors 1.0 and 4.0.
    np.testing.assert_array_equal(sorted(results['baseline_metrics']['loss']), [1.0, 4.0])
    bs1_metrics = results['batch_size_1']
    np.testing.assert_array_equal(bs1_metrics['num_examples'], [3, 3])
    # Weights [-3, -3, -1] after training: MSE 48 and 177.
    np.testing.assert_allclose(
        sorted(bs1_metrics['test_outputs']['loss']), [48.0, 177.0], rtol=1e-6
    )
    bs2_metrics = results['batch_size_2']
    np.testing.assert_array_equal(bs2_metrics['num_examples'], [3, 3])
    # Weights [0, 0, 1] after training: MSE 0 and 1.0.
    np.testing.assert_allclose(sorted(bs2_metrics['test_outputs']['loss']), [0.0, 1.0], atol=1e-6)


def test_failure_with_batched_datasets(linear_p13n_eval):
    with pytest.raises(TypeError):
        # The client input must hold unbatched datasets.
        bad_client_input = collections.OrderedDict(
            train_data=_create_dataset(scale=1.0).batch(1),
            test_data=_create_dataset(scale=1.0).batch(1),
        )
        linear_p13n_eval(_create_zero_model_weights(_linear_model_fn), [bad_client_input])


def test_failure_with_invalid_sample_size():
    p13n_fn_dict = _create_p13n_fn_dict(learning_rate=1.0)
    with pytest.raises(TypeError):
        p13n_eval.build_personalization_eval_computation(
            _linear_model_fn, p13n_fn_dict, _evaluate_fn, max_num_clients=1.0
        )
    with pytest.raises(ValueError):
        p13n_eval.build_personalization_eval_computation(
            _linear_model_fn, p13n_fn_dict, _evaluate_fn, max_num_clients=0
        )


@pytest.fixture(scope='module')
def small_sample_p13n_eval():
    return p13n_eval.build_personalization_eval_computation(
        _linear_model_fn, _create_p13n_fn_dict(learning_rate=1.0), _evaluate_fn, max_num_clients=1
    )


def test_success_with_small_sample_size(tff_stack, small_sample_p13n_eval):
    federated_p13n_eval = small_sample_p13n_eval
    results = federated_p13n_eval(_create_zero_model_weights(_linear_model_fn), _two_clients())
    # Metrics of one client only.
    assert len(results['baseline_metrics']['loss']) == 1
    assert len(results['batch_size_1']['test_outputs']['loss']) == 1
    assert len(results['batch_size_2']['test_outputs']['loss']) == 1


def test_construction_calls_model_fn():
    # Building must not call `model_fn` too many times (it can be expensive).
    mock_model_fn = mock.Mock(side_effect=LinearRegression)
    p13n_eval.build_personalization_eval_computation(
        mock_model_fn, _create_p13n_fn_dict(learning_rate=1.0), _evaluate_fn, max_num_clients=1
    )
    assert mock_model_fn.call_count == 3


# Ours after TFF's.


def test_computation_type(linear_p13n_eval):
    element = tff.to_type(
        collections.OrderedDict(
            x=tff.TensorType(np.float32, [2]), y=tff.TensorType(np.float32, [1])
        )
    )
    parameter = linear_p13n_eval.type_signature.parameter
    assert parameter[1] == tff.FederatedType(
        tff.to_type(
            collections.OrderedDict(
                train_data=tff.SequenceType(element), test_data=tff.SequenceType(element)
            )
        ),
        tff.CLIENTS,
    )
    result = linear_p13n_eval.type_signature.result
    assert result.placement is tff.SERVER
    assert list(result.member.names) == ['baseline_metrics', 'batch_size_1', 'batch_size_2']
    assert result.member.baseline_metrics.loss == tff.TensorType(np.float32, [None])


_RESULTS = []


def test_same_bits_on_every_stack(tff_stack, linear_p13n_eval):
    results = linear_p13n_eval(
        _create_zero_model_weights(_linear_model_fn),
        _two_clients() + [_create_client_input(2.0, 0.5)],
    )
    flat = [np.asarray(x) for x in tf.nest.flatten(results)]
    _RESULTS.append(flat)
    for a, b in zip(_RESULTS[0], flat):
        np.testing.assert_array_equal(a, b)
