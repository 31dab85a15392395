"""Port of TFF's ``.../simulation/baselines/cifar100/`` tests
(``image_classification_tasks_test.py``, ``image_classification_preprocessing_test.py``) and
of the input checks of ``.../simulation/models/resnet_models_test.py`` (our ResNets live in
``baselines/cifar100/resnet_models``).

No case left out. Added: the ``_with_datasets`` constructor on a `TestClientData`,
`create_image_classification_task` reading a tiny ``cifar100.sqlite`` and its error when the
file is absent, and the ResNets' output shapes.
"""

import collections
from unittest import mock

import numpy as np
import pytest
import tensorflow as tf

import simharness as tff
from simharness.simulation.baselines import baseline_task, client_spec
from simharness.simulation.baselines.cifar100 import (
    image_classification_preprocessing,
    image_classification_tasks,
    resnet_models,
)
from tests.tff.simulation.datasets_files import write_tff_sqlite

TRAIN_SPEC = client_spec.ClientSpec(
    num_epochs=2, batch_size=10, max_elements=3, shuffle_buffer_size=5
)

# --- image_classification_tasks_test.py ---------------------------------------------------


@pytest.mark.parametrize(
    'model_id, input_shape',
    [
        ('resnet18', (32, 32, 3)),
        ('resnet34', (24, 24, 3)),
        ('resnet50', (24, 1, 3)),
        ('resnet101', (1, 32, 3)),
        ('resnet152', (2, 5, 3)),
    ],
)
def test_get_resnet_model(model_id, input_shape):
    with mock.patch.object(resnet_models, f'create_{model_id}') as builder:
        image_classification_tasks._get_resnet_model(model_id=model_id, input_shape=input_shape)
        builder.assert_called_once_with(
            input_shape=input_shape, num_classes=image_classification_tasks._NUM_CLASSES
        )


def test_get_resnet_model_raises_on_unknown_id():
    with pytest.raises(ValueError, match='The model argument must be one of'):
        image_classification_tasks._get_resnet_model('resnet7', (32, 32, 3))


def test_constructs_with_eval_client_spec():
    task = image_classification_tasks.create_image_classification_task(
        TRAIN_SPEC,
        eval_client_spec=client_spec.ClientSpec(
            num_epochs=1, batch_size=2, max_elements=5, shuffle_buffer_size=10
        ),
        model_id='resnet18',
        use_synthetic_data=True,
    )
    assert isinstance(task, baseline_task.BaselineTask)


def test_constructs_with_no_eval_client_spec():
    task = image_classification_tasks.create_image_classification_task(
        TRAIN_SPEC, model_id='resnet18', use_synthetic_data=True
    )
    assert isinstance(task, baseline_task.BaselineTask)


@pytest.mark.parametrize('crop_height, crop_width', [(32, 32), (24, 24), (32, 1), (1, 32)])
def test_constructs_with_different_crop_sizes(crop_height, crop_width):
    task = image_classification_tasks.create_image_classification_task(
        TRAIN_SPEC,
        model_id='resnet18',
        crop_height=crop_height,
        crop_width=crop_width,
        use_synthetic_data=True,
    )
    assert isinstance(task, baseline_task.BaselineTask)


@pytest.mark.parametrize(
    'crop_height, crop_width', [(-20, 32), (50, 24), (24, -10), (26, 35), (33, 33)]
)
def test_raises_on_bad_crop_sizes(crop_height, crop_width):
    with pytest.raises(
        ValueError, match='The crop_height and crop_width must be between 1 and 32.'
    ):
        image_classification_tasks.create_image_classification_task(
            TRAIN_SPEC,
            model_id='resnet18',
            crop_height=crop_height,
            crop_width=crop_width,
            use_synthetic_data=True,
        )


def _first_two_examples(distort):
    task = image_classification_tasks.create_image_classification_task(
        client_spec.ClientSpec(num_epochs=1, batch_size=1, max_elements=1, shuffle_buffer_size=1),
        model_id='resnet18',
        distort_train_images=distort,
        use_synthetic_data=True,
    )
    preprocess_fn = task.datasets.train_preprocess_fn
    dataset = task.datasets.train_data.create_tf_dataset_from_all_clients()
    tf.random.set_seed(0)
    example1 = next(iter(preprocess_fn(dataset)))
    tf.random.set_seed(1)
    example2 = next(iter(preprocess_fn(dataset)))
    return example1[0].numpy(), example2[0].numpy()


@pytest.mark.slow  # a ResNet-18 built and its data preprocessed: ~1.5-2 s
def test_train_distortion_gives_nondeterministic_result():
    a, b = _first_two_examples(True)
    assert not np.allclose(a, b)


def test_no_train_distortion_gives_deterministic_result():
    a, b = _first_two_examples(False)
    assert np.allclose(a, b)


@pytest.mark.parametrize(
    'model_id',
    [
        'resnet18',
        pytest.param('resnet34', marks=pytest.mark.slow),
        pytest.param('resnet50', marks=pytest.mark.slow),
        pytest.param('resnet101', marks=pytest.mark.slow),
        pytest.param('resnet152', marks=pytest.mark.slow),
    ],
)
def test_constructs_with_different_models(model_id):
    task = image_classification_tasks.create_image_classification_task(
        TRAIN_SPEC, model_id=model_id, crop_height=3, crop_width=3, use_synthetic_data=True
    )
    assert isinstance(task, baseline_task.BaselineTask)


# --- image_classification_preprocessing_test.py -------------------------------------------

TEST_DATA = collections.OrderedDict(
    coarse_label=[tf.constant(1, dtype=tf.int64)],
    image=[tf.zeros((32, 32, 3), dtype=tf.uint8)],
    label=[tf.constant(1, dtype=tf.int64)],
)


def _length(ds):
    return int(ds.reduce(0, lambda x, _: x + 1))


def test_raises_non_iterable_crop():
    with pytest.raises(TypeError, match='crop_shape must be an iterable'):
        image_classification_preprocessing.create_preprocess_fn(
            client_spec.ClientSpec(num_epochs=1, batch_size=1), crop_shape=32
        )


def test_raises_iterable_length_2_crop():
    with pytest.raises(ValueError, match='The crop_shape must have length 3'):
        image_classification_preprocessing.create_preprocess_fn(
            client_spec.ClientSpec(num_epochs=1, batch_size=1), crop_shape=(32, 32)
        )


@pytest.mark.parametrize(
    'num_epochs, batch_size', [(1, 1), (4, 2), (9, 3), (12, 1), (3, 5), (7, 2)]
)
def test_ds_length_is_ceil_num_epochs_over_batch_size(num_epochs, batch_size):
    preprocess_fn = image_classification_preprocessing.create_preprocess_fn(
        client_spec.ClientSpec(num_epochs=num_epochs, batch_size=batch_size)
    )
    assert _length(preprocess_fn(tf.data.Dataset.from_tensor_slices(TEST_DATA))) == -(
        -num_epochs // batch_size
    )


@pytest.mark.parametrize('crop_shape', [(32, 32, 3), (28, 28, 3), (24, 26, 3)])
@pytest.mark.parametrize('distort_image', [False, True])
def test_preprocess_fn_returns_correct_element(crop_shape, distort_image):
    preprocess_fn = image_classification_preprocessing.create_preprocess_fn(
        client_spec.ClientSpec(num_epochs=1, batch_size=1, shuffle_buffer_size=1),
        crop_shape=crop_shape,
        distort_image=distort_image,
    )
    ds = preprocess_fn(tf.data.Dataset.from_tensor_slices(TEST_DATA))
    assert ds.element_spec == (
        tf.TensorSpec(shape=(None,) + crop_shape, dtype=tf.float32),
        tf.TensorSpec(shape=(None,), dtype=tf.int64),
    )
    x, y = next(iter(ds))
    assert x.shape == (1,) + crop_shape and np.allclose(x.numpy(), 0.0)
    assert y.numpy().tolist() == [1]


def test_preprocess_is_no_op_for_normalized_image():
    x = tf.constant([[[1.0, -1.0, 0.0]]])  # shape (1, 1, 3), mean 0
    x = x / tf.math.reduce_std(x)  # variance 1
    image_map = image_classification_preprocessing.build_image_map((1, 1, 3), distort=False)
    image, label = image_map(collections.OrderedDict(image=x, label=0))
    assert image.shape == (1, 1, 3)
    assert np.allclose(x.numpy(), image.numpy(), rtol=1e-3)
    assert label == 0


@pytest.mark.parametrize('max_elements', [1, 3, 7, 11, 18])
def test_ds_length_with_max_elements(max_elements):
    preprocess_fn = image_classification_preprocessing.create_preprocess_fn(
        client_spec.ClientSpec(num_epochs=1, batch_size=1, max_elements=max_elements)
    )
    ds = preprocess_fn(tf.data.Dataset.from_tensor_slices(TEST_DATA).repeat(10))
    assert _length(ds) == min(10, max_elements)


# --- resnet_models_test.py (input validation) ---------------------------------------------

_SHAPE = (32, 32, 3)
_SHAPE_MSG = 'input_shape must be an iterable of length 3 containing only positive integers'
_STRIDES_MSG = 'initial_strides must be an iterable of length 2 containing only positive integers'
_KERNEL_MSG = (
    'initial_kernel_size must be an iterable of length 2 containing only positive integers'
)
_REP_MSG = 'repetitions must be None or an iterable containing positive integers'


@pytest.mark.parametrize(
    'kwargs, message',
    [
        (dict(input_shape=100), _SHAPE_MSG),
        (dict(input_shape=(10, -1, 2)), _SHAPE_MSG),
        (dict(input_shape=(10, 10)), _SHAPE_MSG),
        (dict(input_shape=_SHAPE, num_classes=-5), 'num_classes must be a positive integer'),
        (
            dict(input_shape=_SHAPE, residual_block='bad_block'),
            'residual_block must be of type `ResidualBlock`',
        ),
        (dict(input_shape=_SHAPE, repetitions=5), _REP_MSG),
        (dict(input_shape=_SHAPE, repetitions=[2, -1]), _REP_MSG),
        (
            dict(input_shape=_SHAPE, initial_filters=-2),
            'initial_filters must be a positive integer',
        ),
        (dict(input_shape=_SHAPE, initial_strides=10), _STRIDES_MSG),
        (dict(input_shape=_SHAPE, initial_strides=(3, -1)), _STRIDES_MSG),
        (dict(input_shape=_SHAPE, initial_strides=(3, 3, 4)), _STRIDES_MSG),
        (dict(input_shape=_SHAPE, initial_kernel_size=10), _KERNEL_MSG),
        (dict(input_shape=_SHAPE, initial_kernel_size=(3, -1)), _KERNEL_MSG),
        (dict(input_shape=_SHAPE, initial_kernel_size=(3, 3, 4)), _KERNEL_MSG),
        (dict(input_shape=_SHAPE, norm_layer='bad_norm'), 'norm_layer must be of type `NormLayer`'),
    ],
)
def test_create_resnet_input_validation(kwargs, message):
    with pytest.raises(ValueError, match=message.replace('(', r'\(')):
        resnet_models.create_resnet(**kwargs)


@pytest.mark.parametrize(
    'block, norm',
    [
        (resnet_models.ResidualBlock.BASIC, resnet_models.NormLayer.GROUP_NORM),
        (resnet_models.ResidualBlock.BOTTLENECK, resnet_models.NormLayer.BATCH_NORM),
    ],
)
def test_resnet_output_shape(block, norm):
    model = resnet_models.create_resnet(
        (8, 8, 3), num_classes=7, residual_block=block, repetitions=[1, 1], norm_layer=norm
    )
    probs = model(tf.random.normal([2, 8, 8, 3])).numpy()
    assert probs.shape == (2, 7) and np.allclose(probs.sum(axis=1), 1.0, atol=1e-5)


# --- ours: data given, data read from local files -----------------------------------------


def _images(n, seed):
    return np.random.default_rng(seed).integers(0, 256, (n, 32, 32, 3)).astype(np.uint8)


@pytest.mark.slow  # a ResNet-18 built and its data preprocessed: ~1.5-2 s
def test_image_classification_task_with_datasets():
    data = tff.simulation.datasets.TestClientData(
        {
            'a': collections.OrderedDict(
                coarse_label=np.array([1, 2], np.int64),
                image=_images(2, 0),
                label=np.array([3, 4], np.int64),
            ),
            'b': collections.OrderedDict(
                coarse_label=np.array([5], np.int64),
                image=_images(1, 1),
                label=np.array([6], np.int64),
            ),
        }
    )
    task = tff.simulation.baselines.cifar100.create_image_classification_task_with_datasets(
        client_spec.ClientSpec(num_epochs=1, batch_size=4, shuffle_buffer_size=1),
        None,
        'resnet18',
        24,
        24,
        False,
        data,
        data,
    )
    assert task.datasets.element_type_structure == (
        tf.TensorSpec((None, 24, 24, 3), tf.float32),
        tf.TensorSpec((None,), tf.int64),
    )
    ((x, y),) = list(task.datasets.get_centralized_test_data())
    assert x.shape == (3, 24, 24, 3) and sorted(y.numpy().tolist()) == [3, 4, 6]


@pytest.mark.slow  # a ResNet-18 built and its data preprocessed: ~1.5-2 s
def test_image_classification_task_reads_local_file(tmp_path):
    def row(split, client, label):
        return (
            split,
            client,
            {
                'image': _images(1, label)[0].ravel().tolist(),
                'label': label,
                'coarse_label': label % 20,
            },
        )

    write_tff_sqlite(
        tmp_path / 'cifar100.sqlite',
        [row('train', '0', 1), row('train', '0', 2), row('train', '1', 3), row('test', '0', 4)],
    )
    task = tff.simulation.baselines.cifar100.create_image_classification_task(
        client_spec.ClientSpec(num_epochs=1, batch_size=2, shuffle_buffer_size=1),
        cache_dir=str(tmp_path),
    )
    assert task.datasets.train_data.client_ids == ['0', '1']
    ((x, y),) = list(task.datasets.get_centralized_test_data())
    assert x.shape == (1, 24, 24, 3) and y.numpy().tolist() == [4]


def test_image_classification_task_without_the_file_names_it(tmp_path):
    with pytest.raises(tff.simulation.datasets.DatasetFileNotFoundError, match='cifar100.sqlite'):
        tff.simulation.baselines.cifar100.create_image_classification_task(
            TRAIN_SPEC, cache_dir=str(tmp_path)
        )
