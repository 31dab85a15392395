"""Stack Overflow tag prediction tasks (TFF's ``stackoverflow/tag_prediction_tasks``)."""

from typing import Any, Optional

import tensorflow as tf

from simharness.data.client_base import ClientData
from simharness.learning.models import keras_utils
from simharness.simulation.baselines import baseline_task, client_spec, task_data
from simharness.simulation.baselines.stackoverflow import constants, tag_prediction_preprocessing
from simharness.simulation.datasets import stackoverflow

__all__ = ['create_tag_prediction_task', 'create_tag_prediction_task_from_datasets']


def _build_logistic_regression_model(input_size: int, output_size: int) -> Any:
    """One sigmoid dense layer from `input_size` word frequencies to `output_size` tags."""
    return tf.keras.Sequential(
        [
            tf.keras.Input(shape=(input_size,)),
            tf.keras.layers.Dense(output_size, activation='sigmoid'),
        ]
    )


def create_tag_prediction_task_from_datasets(
    train_client_spec: client_spec.ClientSpec,
    eval_client_spec: Optional[client_spec.ClientSpec],
    word_vocab: list,
    tag_vocab: list,
    train_data: ClientData,
    test_data: ClientData,
    validation_data: ClientData,
) -> baseline_task.BaselineTask:
    """A tag prediction `BaselineTask` over Stack Overflow-format data you give.

    Args:
      train_client_spec: how training clients preprocess their data.
      eval_client_spec: the same for evaluation; `None`: batches of 100, one
        epoch, no shuffling.
      word_vocab, tag_vocab: the word and tag vocabularies (strings).
      train_data, test_data, validation_data: `ClientData` whose elements have
        ``tokens``, ``title`` and ``tags`` (``|``-separated) strings.

    Returns:
      A `BaselineTask`: logistic regression (one sigmoid dense layer) from the
      bag of words to the tags, binary cross-entropy summed over the batch,
      metrics ``precision`` and ``recall_at_5``.
    """
    if eval_client_spec is None:
        eval_client_spec = client_spec.ClientSpec(
            num_epochs=1, batch_size=100, shuffle_buffer_size=1
        )
    datasets = task_data.BaselineTaskDatasets(
        train_data=train_data,
        test_data=test_data,
        validation_data=validation_data,
        train_preprocess_fn=tag_prediction_preprocessing.create_preprocess_fn(
            train_client_spec, word_vocab, tag_vocab
        ),
        eval_preprocess_fn=tag_prediction_preprocessing.create_preprocess_fn(
            eval_client_spec, word_vocab, tag_vocab
        ),
    )

    def model_fn() -> Any:
        return keras_utils.from_keras_model(
            keras_model=_build_logistic_regression_model(
                input_size=len(word_vocab), output_size=len(tag_vocab)
            ),
            # Keras 3 names the reduction by string (TFF: tf.keras.losses.Reduction.SUM).
            loss=tf.keras.losses.BinaryCrossentropy(from_logits=False, reduction='sum'),
            input_spec=datasets.element_type_structure,
            metrics=[
                tf.keras.metrics.Precision(name='precision'),
                tf.keras.metrics.Recall(top_k=5, name='recall_at_5'),
            ],
        )

    return baseline_task.BaselineTask(datasets, model_fn)


def create_tag_prediction_task(
    train_client_spec: client_spec.ClientSpec,
    eval_client_spec: Optional[client_spec.ClientSpec] = None,
    word_vocab_size: int = constants.DEFAULT_WORD_VOCAB_SIZE,
    tag_vocab_size: int = constants.DEFAULT_TAG_VOCAB_SIZE,
    cache_dir: Optional[str] = None,
    use_synthetic_data: bool = False,
) -> baseline_task.BaselineTask:
    """A tag prediction `BaselineTask` on Stack Overflow: predict a post's tags (the
    `tag_vocab_size` most frequent) from its bag of words (the `word_vocab_size` most
    frequent).

    The data is `tff.simulation.datasets.stackoverflow.load_data(cache_dir)` (train,
    held-out as validation, test), the vocabularies `load_word_counts(cache_dir,
    word_vocab_size)` and `load_tag_counts(cache_dir)`: TFF's files read from
    `cache_dir` (default ``~/.tff``); nothing is downloaded. (TFF reads the counts
    from its default directory whatever `cache_dir` is; here they come from
    `cache_dir` too.) With `use_synthetic_data`, `get_synthetic()` is every split and
    the synthetic word and tag counts the vocabularies.

    Raises:
      ValueError: a non-positive vocabulary size.
      tff.simulation.datasets.DatasetFileNotFoundError: a file is not in
        `cache_dir` (its message names the expected path).
    """
    if word_vocab_size < 1:
        raise ValueError('word_vocab_size must be a positive integer')
    if tag_vocab_size < 1:
        raise ValueError('tag_vocab_size must be a positive integer')
    if use_synthetic_data:
        train_data = validation_data = test_data = stackoverflow.get_synthetic()
        word_counts = stackoverflow.get_synthetic_word_counts()
        tag_counts = stackoverflow.get_synthetic_tag_counts()
    else:
        train_data, validation_data, test_data = stackoverflow.load_data(cache_dir=cache_dir)
        word_counts = stackoverflow.load_word_counts(
            cache_dir=cache_dir, vocab_size=word_vocab_size
        )
        tag_counts = stackoverflow.load_tag_counts(cache_dir=cache_dir)
    return create_tag_prediction_task_from_datasets(
        train_client_spec,
        eval_client_spec,
        list(word_counts.keys())[:word_vocab_size],
        list(tag_counts.keys())[:tag_vocab_size],
        train_data,
        test_data,
        validation_data,
    )
