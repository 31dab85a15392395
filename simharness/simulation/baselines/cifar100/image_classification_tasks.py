"""CIFAR-100 image classification tasks (TFF's ``baselines/cifar100/image_classification_tasks``)."""

import enum
from typing import Any, Optional, Sequence, Union

import tensorflow as tf

from simharness.data.client_base import ClientData
from simharness.learning.models import keras_utils
from simharness.simulation.baselines import baseline_task, client_spec, task_data
from simharness.simulation.baselines.cifar100 import (
    image_classification_preprocessing,
    resnet_models,
)
from simharness.simulation.datasets import cifar100

__all__ = [
    'DEFAULT_CROP_HEIGHT',
    'DEFAULT_CROP_WIDTH',
    'ResnetModel',
    'create_image_classification_task',
    'create_image_classification_task_with_datasets',
]


class ResnetModel(enum.Enum):
    """The model ids of the CIFAR-100 task (ResNets with group normalization)."""

    RESNET18 = 'resnet18'
    RESNET34 = 'resnet34'
    RESNET50 = 'resnet50'
    RESNET101 = 'resnet101'
    RESNET152 = 'resnet152'


_NUM_CLASSES = 100
_RESNET_MODELS = [e.value for e in ResnetModel]
DEFAULT_CROP_HEIGHT = 24
DEFAULT_CROP_WIDTH = 24


def _get_resnet_model(model_id: Union[str, ResnetModel], input_shape: Sequence[int]) -> Any:
    """The uncompiled ResNet of `model_id` with 100 classes.

    Raises:
      ValueError: `model_id` is not a `ResnetModel` value.
    """
    try:
        model_enum = ResnetModel(model_id)
    except ValueError as e:
        raise ValueError(
            f'The model argument must be one of {_RESNET_MODELS}, found {model_id}'
        ) from e
    # Looked up on the module at call time (TFF's tests patch these builders).
    builder = getattr(resnet_models, f'create_{model_enum.value}')
    return builder(input_shape=input_shape, num_classes=_NUM_CLASSES)


def create_image_classification_task_with_datasets(
    train_client_spec: client_spec.ClientSpec,
    eval_client_spec: Optional[client_spec.ClientSpec],
    model_id: Union[str, ResnetModel],
    crop_height: int,
    crop_width: int,
    distort_train_images: bool,
    train_data: ClientData,
    test_data: ClientData,
) -> baseline_task.BaselineTask:
    """An image classification `BaselineTask` over CIFAR-100-format data you give.

    Args:
      train_client_spec: how training clients preprocess their data.
      eval_client_spec: the same for evaluation; `None`: batches of 64, one
        epoch, no shuffling.
      model_id: ``'resnet18'``, ``'resnet34'``, ``'resnet50'``,
        ``'resnet101'`` or ``'resnet152'`` (group normalization in place of
        batch normalization).
      crop_height, crop_width: the image crop, each in 1..32.
      distort_train_images: random crops and flips in training preprocessing.
      train_data, test_data: `ClientData` of elements with ``image`` (uint8
        [32, 32, 3]) and ``label`` (int64).

    Returns:
      A `BaselineTask`: sparse categorical cross-entropy, sparse categorical
      accuracy.

    Raises:
      ValueError: a crop size outside 1..32.
    """
    if not (1 <= crop_height <= 32 and 1 <= crop_width <= 32):
        raise ValueError('The crop_height and crop_width must be between 1 and 32.')
    crop_shape = (crop_height, crop_width, 3)
    if eval_client_spec is None:
        eval_client_spec = client_spec.ClientSpec(
            num_epochs=1, batch_size=64, shuffle_buffer_size=1
        )
    datasets = task_data.BaselineTaskDatasets(
        train_data=train_data,
        test_data=test_data,
        validation_data=None,
        train_preprocess_fn=image_classification_preprocessing.create_preprocess_fn(
            train_client_spec, crop_shape=crop_shape, distort_image=distort_train_images
        ),
        eval_preprocess_fn=image_classification_preprocessing.create_preprocess_fn(
            eval_client_spec, crop_shape=crop_shape
        ),
    )

    def model_fn() -> Any:
        return keras_utils.from_keras_model(
            keras_model=_get_resnet_model(model_id, crop_shape),
            loss=tf.keras.losses.SparseCategoricalCrossentropy(),
            input_spec=datasets.element_type_structure,
            metrics=[tf.keras.metrics.SparseCategoricalAccuracy()],
        )

    return baseline_task.BaselineTask(datasets, model_fn)


def create_image_classification_task(
    train_client_spec: client_spec.ClientSpec,
    eval_client_spec: Optional[client_spec.ClientSpec] = None,
    model_id: Union[str, ResnetModel] = 'resnet18',
    crop_height: int = DEFAULT_CROP_HEIGHT,
    crop_width: int = DEFAULT_CROP_WIDTH,
    distort_train_images: bool = False,
    cache_dir: Optional[str] = None,
    use_synthetic_data: bool = False,
) -> baseline_task.BaselineTask:
    """An image classification `BaselineTask` on CIFAR-100 (100 labels), minimizing the
    sparse categorical cross-entropy (see `create_image_classification_task_with_datasets`).

    The data is `tff.simulation.datasets.cifar100.load_data(cache_dir)`: TFF's
    ``cifar100.sqlite`` read from `cache_dir` (default ``~/.tff``); nothing is
    downloaded. With `use_synthetic_data`, `cifar100.get_synthetic()` serves as
    train and test data.

    Raises:
      tff.simulation.datasets.DatasetFileNotFoundError: the file is not in
        `cache_dir` (its message names the expected path).
    """
    if use_synthetic_data:
        train_data = test_data = cifar100.get_synthetic()
    else:
        train_data, test_data = cifar100.load_data(cache_dir=cache_dir)
    return create_image_classification_task_with_datasets(
        train_client_spec,
        eval_client_spec,
        model_id,
        crop_height,
        crop_width,
        distort_train_images,
        train_data,
        test_data,
    )
