"""Shakespeare next-character prediction tasks (TFF's ``baselines/shakespeare/char_prediction_tasks``)."""

from typing import Any, Optional

import tensorflow as tf

from simharness.data.client_base import ClientData
from simharness.learning.models import keras_utils
from simharness.simulation.baselines import baseline_task, client_spec, keras_metrics, task_data
from simharness.simulation.baselines.shakespeare import (
    char_prediction_models,
    char_prediction_preprocessing,
)
from simharness.simulation.datasets import shakespeare

__all__ = [
    'DEFAULT_SEQUENCE_LENGTH',
    'VOCAB_LENGTH',
    'create_character_prediction_task',
    'create_character_prediction_task_from_datasets',
]

#: The vocabulary plus padding, out-of-vocabulary, beginning and end of snippet.
VOCAB_LENGTH = len(char_prediction_preprocessing.CHAR_VOCAB) + 4
DEFAULT_SEQUENCE_LENGTH = 80


def create_character_prediction_task_from_datasets(
    train_client_spec: client_spec.ClientSpec,
    eval_client_spec: Optional[client_spec.ClientSpec],
    sequence_length: int,
    train_data: ClientData,
    test_data: ClientData,
) -> baseline_task.BaselineTask:
    """A next-character prediction `BaselineTask` over Shakespeare-format data you give.

    Args:
      train_client_spec: how training clients preprocess their data.
      eval_client_spec: the same for evaluation; `None`: batches of 32, one
        epoch, no shuffling.
      sequence_length: the characters per example (positive).
      train_data, test_data: `ClientData` of elements ``{'snippets': string}``.

    Returns:
      A `BaselineTask`: `char_prediction_models.create_recurrent_model`, sparse
      categorical cross-entropy on logits, metrics ``num_tokens`` and
      ``accuracy`` with padding masked.

    Raises:
      ValueError: `sequence_length` is not positive.
    """
    if sequence_length < 1:
        raise ValueError('sequence_length must be a positive integer')
    if eval_client_spec is None:
        eval_client_spec = client_spec.ClientSpec(
            num_epochs=1, batch_size=32, shuffle_buffer_size=1
        )
    datasets = task_data.BaselineTaskDatasets(
        train_data=train_data,
        test_data=test_data,
        validation_data=None,
        train_preprocess_fn=char_prediction_preprocessing.create_preprocess_fn(
            train_client_spec, sequence_length
        ),
        eval_preprocess_fn=char_prediction_preprocessing.create_preprocess_fn(
            eval_client_spec, sequence_length
        ),
    )
    pad_token, _, _, _ = char_prediction_preprocessing.get_special_tokens()

    def model_fn() -> Any:
        return keras_utils.from_keras_model(
            keras_model=char_prediction_models.create_recurrent_model(
                vocab_size=VOCAB_LENGTH, sequence_length=sequence_length
            ),
            loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            input_spec=datasets.element_type_structure,
            metrics=[
                keras_metrics.NumTokensCounter(masked_tokens=[pad_token]),
                keras_metrics.MaskedCategoricalAccuracy(masked_tokens=[pad_token]),
            ],
        )

    return baseline_task.BaselineTask(datasets, model_fn)


def create_character_prediction_task(
    train_client_spec: client_spec.ClientSpec,
    eval_client_spec: Optional[client_spec.ClientSpec] = None,
    sequence_length: int = DEFAULT_SEQUENCE_LENGTH,
    cache_dir: Optional[str] = None,
    use_synthetic_data: bool = False,
) -> baseline_task.BaselineTask:
    """A next-character prediction `BaselineTask` on Shakespeare (a client is a role in a
    play): predict each next character of `sequence_length` characters.

    The data is `tff.simulation.datasets.shakespeare.load_data(cache_dir)`:
    TFF's ``shakespeare.sqlite`` read from `cache_dir` (default ``~/.tff``);
    nothing is downloaded. With `use_synthetic_data`,
    `shakespeare.get_synthetic()` serves as train and test data.

    Raises:
      tff.simulation.datasets.DatasetFileNotFoundError: the file is not in
        `cache_dir` (its message names the expected path).
    """
    if use_synthetic_data:
        train_data = test_data = shakespeare.get_synthetic()
    else:
        train_data, test_data = shakespeare.load_data(cache_dir=cache_dir)
    return create_character_prediction_task_from_datasets(
        train_client_spec, eval_client_spec, sequence_length, train_data, test_data
    )
