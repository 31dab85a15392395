"""Image classification on federated GLDv2 (TFF's ``baselines/landmark/landmark_tasks``)."""

from __future__ import annotations

from typing import Optional

import tensorflow as tf

from simharness.data.client_base import ClientData
from simharness.learning.models import keras_utils, variable
from simharness.simulation.baselines import baseline_task, client_spec, task_data
from simharness.simulation.baselines.landmark import landmark_preprocessing
from simharness.simulation.datasets import gldv2
from simharness.simulation.models import mobilenet_v2

__all__ = [
    'create_landmark_classification_task',
    'create_landmark_classification_task_from_datasets',
]

_IMAGE_SIZE = landmark_preprocessing.IMAGE_SIZE
_NUM_GROUPS = 8
_NUM_CLASSES = 2028


def create_landmark_classification_task_from_datasets(
    train_client_spec: client_spec.ClientSpec,
    eval_client_spec: Optional[client_spec.ClientSpec],
    train_data: ClientData,
    test_data: tf.data.Dataset,
    debug_seed: Optional[int] = None,
) -> baseline_task.BaselineTask:
    """A GLDv2 classification `BaselineTask` over the data given.

    Minimizes the sparse categorical cross-entropy of a MobileNetV2 (group
    normalization, 8 groups; 128 x 128 x 3 inputs; 2,028 classes).

    Args:
        train_client_spec: how train clients preprocess.
        eval_client_spec: how evaluation data is preprocessed; None: batches
            of 64, one epoch, no shuffle.
        train_data: the train `ClientData`.
        test_data: the test `tf.data.Dataset`.
        debug_seed: the shuffle's seed (tests).
    """
    if eval_client_spec is None:
        eval_client_spec = client_spec.ClientSpec(
            num_epochs=1, batch_size=64, shuffle_buffer_size=1
        )
    train_preprocess_fn = landmark_preprocessing.create_preprocess_fn(
        train_client_spec, is_training=True, debug_seed=debug_seed
    )
    eval_preprocess_fn = landmark_preprocessing.create_preprocess_fn(
        eval_client_spec, is_training=False, debug_seed=debug_seed
    )
    task_datasets = task_data.BaselineTaskDatasets(
        train_data=train_data,
        test_data=test_data,
        validation_data=None,
        train_preprocess_fn=train_preprocess_fn,
        eval_preprocess_fn=eval_preprocess_fn,
    )

    def model_fn() -> variable.VariableModel:
        return keras_utils.from_keras_model(
            keras_model=mobilenet_v2.create_mobilenet_v2(
                input_shape=(_IMAGE_SIZE, _IMAGE_SIZE, 3),
                num_groups=_NUM_GROUPS,
                num_classes=_NUM_CLASSES,
            ),
            input_spec=task_datasets.element_type_structure,
            loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=False),
            metrics=[tf.keras.metrics.SparseCategoricalAccuracy()],
        )

    return baseline_task.BaselineTask(task_datasets, model_fn)


def create_landmark_classification_task(
    train_client_spec: client_spec.ClientSpec,
    eval_client_spec: Optional[client_spec.ClientSpec] = None,
    use_gld23k: bool = False,
    cache_dir: Optional[str] = None,
    use_synthetic_data: bool = False,
    debug_seed: Optional[int] = None,
) -> baseline_task.BaselineTask:
    """A GLDv2 classification `BaselineTask` (see `..._from_datasets`).

    The data is `tff.simulation.datasets.gldv2.load_data(gld23k=use_gld23k,
    cache_dir=cache_dir or 'cache')`: TFF's cache of TFRecord files (or the csv
    files and images to write it) read from `cache_dir`; nothing is
    downloaded. With `use_synthetic_data`, `gldv2.get_synthetic()` serves as
    train data and its one client's dataset as test data.

    Raises:
        tff.simulation.datasets.DatasetFileNotFoundError: the files are not in
            `cache_dir` (its message names the paths expected).
    """
    if use_synthetic_data:
        landmark_train = gldv2.get_synthetic()
        landmark_test = landmark_train.create_tf_dataset_for_client(landmark_train.client_ids[0])
    else:
        landmark_train, landmark_test = gldv2.load_data(
            gld23k=use_gld23k, cache_dir=cache_dir if cache_dir else 'cache'
        )
    return create_landmark_classification_task_from_datasets(
        train_client_spec, eval_client_spec, landmark_train, landmark_test, debug_seed
    )
