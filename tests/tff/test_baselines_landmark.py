"""Ports of TFF's ``landmark_preprocessing_test.py``, ``landmark_tasks_test.py`` and
``mobilenet_v2_test.py``.

Left out: the mobilenet tests that compare parameter counts of several 224 x 224
models (seconds each), the task's construction with an evaluation `ClientSpec` and
3 of the 5 preprocessing cases of each kind (each builds the same pipeline); instead one model's count is checked against Keras's own
MobileNetV2 (3,538,984 parameters at 1,000 classes, 34,112 of them batch
normalization's moving statistics, which group normalization has not).
"""

import collections

import numpy as np
import pytest
import tensorflow as tf

import simharness as tff
from simharness.simulation.baselines.landmark import landmark_preprocessing
from simharness.simulation.models import mobilenet_v2

_IMAGE_SIZE = landmark_preprocessing.IMAGE_SIZE
TEST_DATA = collections.OrderedDict(
    {
        'image/decoded': tf.zeros(shape=(200, 200, 3), dtype=tf.int32),
        'class': tf.zeros(shape=(1), dtype=tf.int64),
    }
)


def test_map_fn_returns_correct_output_shape_and_dtype():
    for is_training in (True, False):
        model = landmark_preprocessing._create_model(is_training=is_training)
        ds = tf.data.Dataset.from_tensors(TEST_DATA)
        image, label = next(iter(ds.map(lambda e: landmark_preprocessing._map_fn(e, model))))
        assert image.shape.as_list() == [_IMAGE_SIZE, _IMAGE_SIZE, 3]
        assert label.shape.as_list() == [1]
        assert image.dtype == tf.float32 and label.dtype == tf.int64


@pytest.mark.parametrize(
    'is_training, num_epochs, batch_size, max_elements',
    [(True, 200, 1, 100), (False, 100, 1, 200)],
)
def test_create_preprocess_fn_returns_correct_output(
    is_training, num_epochs, batch_size, max_elements
):
    spec = tff.simulation.baselines.ClientSpec(
        num_epochs=num_epochs, batch_size=batch_size, max_elements=max_elements
    )
    preprocess_fn = landmark_preprocessing.create_preprocess_fn(spec, is_training=is_training)
    ds = preprocess_fn(tf.data.Dataset.from_tensors(TEST_DATA))
    assert ds.element_spec == (
        tf.TensorSpec(shape=(None, _IMAGE_SIZE, _IMAGE_SIZE, 3), dtype=tf.float32),
        tf.TensorSpec(shape=(None, 1), dtype=tf.int64),
    )
    expected_length = num_epochs if max_elements is None else min(num_epochs, max_elements)
    assert len(ds) == expected_length
    image, label = next(iter(ds))
    np.testing.assert_allclose(image, -np.ones((1, _IMAGE_SIZE, _IMAGE_SIZE, 3)))
    np.testing.assert_array_equal(label, np.zeros((1, 1)))


@pytest.mark.slow  # ~4 s: the task checks its model (a MobileNetV2 of 2,028 classes)
def test_constructs_without_eval_client_spec():
    train_spec = tff.simulation.baselines.ClientSpec(
        num_epochs=2, batch_size=10, max_elements=3, shuffle_buffer_size=5
    )
    task = tff.simulation.baselines.landmark.create_landmark_classification_task(
        train_client_spec=train_spec, use_synthetic_data=True
    )
    assert isinstance(task, tff.simulation.baselines.BaselineTask)
    # The default evaluation: central crops in batches of 64 (the synthetic client has 3).
    x, y = next(iter(task.datasets.get_centralized_test_data()))
    assert x.shape == (3, _IMAGE_SIZE, _IMAGE_SIZE, 3) and y.shape == (3, 1)


@pytest.mark.parametrize(
    'kwargs, match',
    [
        (dict(input_shape=100), 'input_shape must be a tuple of length 3'),
        (dict(input_shape=(10, -1, 2)), 'input_shape must be a tuple of length 3'),
        (dict(input_shape=(10, 2)), 'input_shape must be a tuple of length 3'),
        (dict(input_shape=(32, 32, 3), alpha=-1.0), 'alpha must be positive'),
        (dict(input_shape=(32, 32, 3), pooling='min'), 'pooling must be one of avg or max'),
        (dict(input_shape=(32, 32, 3), num_groups=-1), 'num_groups must be a positive integer'),
        (dict(input_shape=(32, 32, 3), dropout_prob=-0.5), 'dropout_prob must be `None`'),
        (dict(input_shape=(32, 32, 3), num_classes=-1), 'num_classes must be a positive'),
    ],
)
def test_mobilenet_input_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        mobilenet_v2.create_mobilenet_v2(**kwargs)


def test_mobilenet_has_kerass_mobilenet_v2_parameters_without_batch_norm_statistics():
    # The count does not depend on the input size; a small input keeps it cheap.
    model = mobilenet_v2.create_mobilenet_v2(input_shape=(32, 32, 3), num_classes=1000)
    assert isinstance(model, tf.keras.Model)
    assert model.count_params() == 3_538_984 - 34_112
    assert model.layers[-1].name == 'logits' and model.output_shape == (None, 1000)


def test_decoded_jpegs_of_any_size_are_cropped_or_resized():
    """The loader's images have no static height or width (``decode_jpeg``); one
    smaller than 128 x 128 is resized from its central square (Keras 2's ``smart_resize``)."""
    images = [np.full((150, 140, 3), 255, np.uint8), np.zeros((60, 100, 3), np.uint8)]
    encoded = tf.stack([tf.io.encode_jpeg(i) for i in images])
    ds = tf.data.Dataset.from_tensor_slices(encoded).map(
        lambda b: collections.OrderedDict(
            [('image/decoded', tf.io.decode_jpeg(b)), ('class', tf.constant([1], tf.int64))]
        )
    )
    assert ds.element_spec['image/decoded'].shape.as_list() == [None, None, None]
    spec = tff.simulation.baselines.ClientSpec(num_epochs=1, batch_size=2, shuffle_buffer_size=1)
    for is_training in (True, False):
        preprocess_fn = landmark_preprocessing.create_preprocess_fn(spec, is_training=is_training)
        x, y = next(iter(preprocess_fn(ds)))
        assert x.shape == (2, _IMAGE_SIZE, _IMAGE_SIZE, 3)
        np.testing.assert_allclose(x[0], 1.0, atol=0.02)
        np.testing.assert_allclose(x[1], -1.0, atol=0.02)
        np.testing.assert_array_equal(y, [[1], [1]])
