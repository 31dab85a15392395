"""Stack Overflow next-word prediction tasks (TFF's ``stackoverflow/word_prediction_tasks``)."""

from typing import Any, Optional

import tensorflow as tf

from simharness.data.client_base import ClientData
from simharness.learning.models import keras_utils
from simharness.simulation.baselines import baseline_task, client_spec, keras_metrics, task_data
from simharness.simulation.baselines.stackoverflow import (
    constants,
    word_prediction_models,
    word_prediction_preprocessing,
)
from simharness.simulation.datasets import stackoverflow

__all__ = ['create_word_prediction_task', 'create_word_prediction_task_from_datasets']


def create_word_prediction_task_from_datasets(
    train_client_spec: client_spec.ClientSpec,
    eval_client_spec: Optional[client_spec.ClientSpec],
    sequence_length: int,
    vocab: list,
    num_out_of_vocab_buckets: int,
    train_data: ClientData,
    test_data: ClientData,
    validation_data: ClientData,
) -> baseline_task.BaselineTask:
    """A next-word prediction `BaselineTask` over Stack Overflow-format data you give.

    Args:
      train_client_spec: how training clients preprocess their data.
      eval_client_spec: the same for evaluation; `None`: batches of 64, one
        epoch, no shuffling.
      sequence_length: words per example (positive).
      vocab: the vocabulary (strings, in id order).
      num_out_of_vocab_buckets: out-of-vocabulary ids (positive).
      train_data, test_data, validation_data: `ClientData` whose elements have
        a ``tokens`` string (space-separated words).

    Returns:
      A `BaselineTask`: `word_prediction_models.create_recurrent_model` over the
      vocabulary plus the special ids, sparse categorical cross-entropy on
      logits, metrics ``num_tokens``, ``accuracy``,
      ``accuracy_without_out_of_vocab`` and
      ``accuracy_without_out_of_vocab_or_end_of_sentence`` (padding masked).

    Raises:
      ValueError: a non-positive `sequence_length` or
        `num_out_of_vocab_buckets`, or an empty `vocab`.
    """
    if sequence_length < 1:
        raise ValueError('sequence_length must be a positive integer')
    if len(vocab) < 1:
        raise ValueError('vocab must have length at least one')
    if num_out_of_vocab_buckets < 1:
        raise ValueError('num_out_of_vocab_buckets must be a positive integer')
    if eval_client_spec is None:
        eval_client_spec = client_spec.ClientSpec(
            num_epochs=1, batch_size=64, shuffle_buffer_size=1
        )

    def preprocess(spec: client_spec.ClientSpec) -> Any:
        return word_prediction_preprocessing.create_preprocess_fn(
            spec,
            vocab,
            sequence_length=sequence_length,
            num_out_of_vocab_buckets=num_out_of_vocab_buckets,
        )

    datasets = task_data.BaselineTaskDatasets(
        train_data=train_data,
        test_data=test_data,
        validation_data=validation_data,
        train_preprocess_fn=preprocess(train_client_spec),
        eval_preprocess_fn=preprocess(eval_client_spec),
    )
    special = word_prediction_preprocessing.get_special_tokens(
        len(vocab), num_out_of_vocab_buckets=num_out_of_vocab_buckets
    )
    pad, oov, eos = special.padding, special.out_of_vocab, special.end_of_sentence
    extended_vocab_size = len(vocab) + special.get_number_of_special_tokens()

    def model_fn() -> Any:
        return keras_utils.from_keras_model(
            keras_model=word_prediction_models.create_recurrent_model(
                vocab_size=extended_vocab_size
            ),
            loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            input_spec=datasets.element_type_structure,
            metrics=[
                keras_metrics.NumTokensCounter(masked_tokens=[pad]),
                keras_metrics.MaskedCategoricalAccuracy(name='accuracy', masked_tokens=[pad]),
                keras_metrics.MaskedCategoricalAccuracy(
                    name='accuracy_without_out_of_vocab', masked_tokens=[pad] + oov
                ),
                keras_metrics.MaskedCategoricalAccuracy(
                    name='accuracy_without_out_of_vocab_or_end_of_sentence',
                    masked_tokens=[pad, eos] + oov,
                ),
            ],
        )

    return baseline_task.BaselineTask(datasets, model_fn)


def create_word_prediction_task(
    train_client_spec: client_spec.ClientSpec,
    eval_client_spec: Optional[client_spec.ClientSpec] = None,
    sequence_length: int = constants.DEFAULT_SEQUENCE_LENGTH,
    vocab_size: int = constants.DEFAULT_WORD_VOCAB_SIZE,
    num_out_of_vocab_buckets: int = 1,
    cache_dir: Optional[str] = None,
    use_synthetic_data: bool = False,
) -> baseline_task.BaselineTask:
    """A next-word prediction `BaselineTask` on Stack Overflow (a client is a user): predict
    each next word of `sequence_length` words of a post, over the `vocab_size` most frequent
    words.

    The data is `tff.simulation.datasets.stackoverflow.load_data(cache_dir)` (train,
    held-out as validation, test) and the vocabulary `load_word_counts(cache_dir,
    vocab_size)`: TFF's files read from `cache_dir` (default ``~/.tff``); nothing is
    downloaded. (TFF reads the word counts from its default directory whatever
    `cache_dir` is; here they come from `cache_dir` too.) With `use_synthetic_data`,
    `get_synthetic()` is every split and `get_synthetic_word_counts()` the vocabulary.

    Raises:
      ValueError: `vocab_size` is not positive.
      tff.simulation.datasets.DatasetFileNotFoundError: a file is not in
        `cache_dir` (its message names the expected path).
    """
    if vocab_size < 1:
        raise ValueError('vocab_size must be a positive integer')
    if use_synthetic_data:
        train_data = validation_data = test_data = stackoverflow.get_synthetic()
        word_counts = stackoverflow.get_synthetic_word_counts()
    else:
        train_data, validation_data, test_data = stackoverflow.load_data(cache_dir=cache_dir)
        word_counts = stackoverflow.load_word_counts(cache_dir=cache_dir, vocab_size=vocab_size)
    vocab = list(word_counts.keys())[:vocab_size]
    return create_word_prediction_task_from_datasets(
        train_client_spec,
        eval_client_spec,
        sequence_length,
        vocab,
        num_out_of_vocab_buckets,
        train_data,
        test_data,
        validation_data,
    )
