"""EMNIST autoencoder tasks (TFF's ``baselines/emnist/autoencoder_tasks``)."""

from typing import Any, Optional

import tensorflow as tf

from simharness.data.client_base import ClientData
from simharness.learning.models import keras_utils
from simharness.simulation.baselines import baseline_task, client_spec, task_data
from simharness.simulation.baselines.emnist import emnist_models, emnist_preprocessing
from simharness.simulation.datasets import emnist

__all__ = ['create_autoencoder_task', 'create_autoencoder_task_from_datasets']


def create_autoencoder_task_from_datasets(
    train_client_spec: client_spec.ClientSpec,
    eval_client_spec: Optional[client_spec.ClientSpec],
    train_data: ClientData,
    test_data: ClientData,
) -> baseline_task.BaselineTask:
    """An autoencoder `BaselineTask` over EMNIST-format data you give.

    Elements become ``(x, x)`` with ``x = 1 - pixels`` flattened to 784; the
    model is `emnist_models.create_autoencoder_model`, the loss mean squared
    error, the metrics mean squared and mean absolute error. `eval_client_spec`
    `None`: batches of 64, one epoch, no shuffling.
    """
    if eval_client_spec is None:
        eval_client_spec = client_spec.ClientSpec(
            num_epochs=1, batch_size=64, shuffle_buffer_size=1
        )
    datasets = task_data.BaselineTaskDatasets(
        train_data=train_data,
        test_data=test_data,
        validation_data=None,
        train_preprocess_fn=emnist_preprocessing.create_preprocess_fn(
            train_client_spec, emnist_task='autoencoder'
        ),
        eval_preprocess_fn=emnist_preprocessing.create_preprocess_fn(
            eval_client_spec, emnist_task='autoencoder'
        ),
    )

    def model_fn() -> Any:
        return keras_utils.from_keras_model(
            keras_model=emnist_models.create_autoencoder_model(),
            loss=tf.keras.losses.MeanSquaredError(),
            input_spec=datasets.element_type_structure,
            metrics=[tf.keras.metrics.MeanSquaredError(), tf.keras.metrics.MeanAbsoluteError()],
        )

    return baseline_task.BaselineTask(datasets, model_fn)


def create_autoencoder_task(
    train_client_spec: client_spec.ClientSpec,
    eval_client_spec: Optional[client_spec.ClientSpec] = None,
    only_digits: bool = False,
    cache_dir: Optional[str] = None,
    use_synthetic_data: bool = False,
) -> baseline_task.BaselineTask:
    """An autoencoder `BaselineTask` on Federated EMNIST (a dense bottleneck network of widths
    1000, 500, 250, 30, 250, 500, 1000, 784), minimizing the mean squared reconstruction error.

    The data is `tff.simulation.datasets.emnist.load_data(only_digits, cache_dir)`
    (read locally; nothing is downloaded), or `emnist.get_synthetic()` with
    `use_synthetic_data`.

    Raises:
      tff.simulation.datasets.DatasetFileNotFoundError: the file is not in `cache_dir`.
    """
    if use_synthetic_data:
        train_data = test_data = emnist.get_synthetic()
    else:
        train_data, test_data = emnist.load_data(only_digits=only_digits, cache_dir=cache_dir)
    return create_autoencoder_task_from_datasets(
        train_client_spec, eval_client_spec, train_data, test_data
    )
