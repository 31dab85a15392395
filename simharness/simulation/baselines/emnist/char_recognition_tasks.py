"""EMNIST character recognition tasks (TFF's ``baselines/emnist/char_recognition_tasks``)."""

import enum
from typing import Any, Callable, Dict, Optional, Union

import tensorflow as tf

from simharness.data.client_base import ClientData
from simharness.learning.models import keras_utils
from simharness.simulation.baselines import baseline_task, client_spec, task_data
from simharness.simulation.baselines.emnist import emnist_models, emnist_preprocessing
from simharness.simulation.datasets import emnist

__all__ = [
    'CharacterRecognitionModel',
    'create_character_recognition_task',
    'create_character_recognition_task_from_datasets',
]


class CharacterRecognitionModel(enum.Enum):
    """The model ids of the EMNIST character recognition task."""

    CNN_DROPOUT = 'cnn_dropout'
    CNN = 'cnn'
    TWO_LAYER_DNN = '2nn'


_CHARACTER_RECOGNITION_MODELS = [e.value for e in CharacterRecognitionModel]


def _get_character_recognition_model(
    model_id: Union[str, CharacterRecognitionModel],
    only_digits: bool,
    debug_seed: Optional[int] = None,
) -> Any:
    """The uncompiled Keras model of `model_id`.

    Raises:
      ValueError: `model_id` is not one of ``'cnn_dropout'``, ``'cnn'``, ``'2nn'``.
    """
    try:
        model_enum = CharacterRecognitionModel(model_id)
    except ValueError as e:
        raise ValueError(
            f'The model argument must be one of {_CHARACTER_RECOGNITION_MODELS}, found {model_id}'
        ) from e
    # Looked up on the module at call time (TFF's tests patch these builders).
    builders: Dict[CharacterRecognitionModel, Callable[..., Any]] = {
        CharacterRecognitionModel.CNN_DROPOUT: emnist_models.create_conv_dropout_model,
        CharacterRecognitionModel.CNN: emnist_models.create_original_fedavg_cnn_model,
        CharacterRecognitionModel.TWO_LAYER_DNN: emnist_models.create_two_hidden_layer_model,
    }
    return builders[model_enum](only_digits=only_digits, debug_seed=debug_seed)


def create_character_recognition_task_from_datasets(
    train_client_spec: client_spec.ClientSpec,
    eval_client_spec: Optional[client_spec.ClientSpec],
    model_id: Union[str, CharacterRecognitionModel],
    only_digits: bool,
    train_data: ClientData,
    test_data: ClientData,
    debug_seed: Optional[int] = None,
) -> baseline_task.BaselineTask:
    """A character recognition `BaselineTask` over EMNIST-format data you give.

    Args:
      train_client_spec: how training clients preprocess their data.
      eval_client_spec: the same for evaluation; `None`: batches of 64, one
        epoch, no shuffling.
      model_id: ``'cnn_dropout'``, ``'cnn'`` or ``'2nn'`` (see
        `create_character_recognition_task`).
      only_digits: 10 output classes (EMNIST-10), else 62.
      train_data, test_data: `ClientData` of elements
        ``OrderedDict(label=int32, pixels=float32 [28, 28])``.
      debug_seed: seeds model initialization and the shuffle buffers, for tests.

    Returns:
      A `BaselineTask`: elements ``(pixels [None, 28, 28, 1], label [None])``,
      sparse categorical cross-entropy, sparse categorical accuracy.
    """
    if eval_client_spec is None:
        eval_client_spec = client_spec.ClientSpec(
            num_epochs=1, batch_size=64, shuffle_buffer_size=1
        )
    train_preprocess_fn = emnist_preprocessing.create_preprocess_fn(
        train_client_spec, emnist_task='character_recognition', debug_seed=debug_seed
    )
    eval_preprocess_fn = emnist_preprocessing.create_preprocess_fn(
        eval_client_spec, emnist_task='character_recognition', debug_seed=debug_seed
    )
    datasets = task_data.BaselineTaskDatasets(
        train_data=train_data,
        test_data=test_data,
        validation_data=None,
        train_preprocess_fn=train_preprocess_fn,
        eval_preprocess_fn=eval_preprocess_fn,
    )

    def model_fn() -> Any:
        return keras_utils.from_keras_model(
            keras_model=_get_character_recognition_model(model_id, only_digits, debug_seed),
            loss=tf.keras.losses.SparseCategoricalCrossentropy(),
            input_spec=datasets.element_type_structure,
            metrics=[tf.keras.metrics.SparseCategoricalAccuracy()],
        )

    return baseline_task.BaselineTask(datasets, model_fn)


def create_character_recognition_task(
    train_client_spec: client_spec.ClientSpec,
    eval_client_spec: Optional[client_spec.ClientSpec] = None,
    model_id: Union[str, CharacterRecognitionModel] = 'cnn_dropout',
    only_digits: bool = False,
    cache_dir: Optional[str] = None,
    use_synthetic_data: bool = False,
    debug_seed: Optional[int] = None,
) -> baseline_task.BaselineTask:
    """A character recognition `BaselineTask` on Federated EMNIST.

    Minimizes the sparse categorical cross-entropy of the labels (10 digits with
    `only_digits`, else 62 digits and letters). Models (`model_id`):
    ``'cnn_dropout'`` (two convolutions, max pooling, dropout, two dense
    layers), ``'cnn'`` (the FedAvg paper's CNN, no dropout), ``'2nn'`` (two
    hidden dense layers of 200 ReLU units).

    The data is `tff.simulation.datasets.emnist.load_data(only_digits,
    cache_dir)`: TFF's ``emnist_all.sqlite`` read from `cache_dir` (default
    ``~/.tff``); nothing is downloaded. With `use_synthetic_data`, the small
    `emnist.get_synthetic()` data serves as train and test data.

    Raises:
      tff.simulation.datasets.DatasetFileNotFoundError: the file is not in
        `cache_dir` (its message names the expected path).
    """
    if use_synthetic_data:
        train_data = test_data = emnist.get_synthetic()
    else:
        train_data, test_data = emnist.load_data(only_digits=only_digits, cache_dir=cache_dir)
    return create_character_recognition_task_from_datasets(
        train_client_spec,
        eval_client_spec,
        model_id,
        only_digits,
        train_data,
        test_data,
        debug_seed,
    )
