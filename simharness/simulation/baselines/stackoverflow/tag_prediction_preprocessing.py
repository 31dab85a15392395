"""Client dataset preprocessing of the Stack Overflow tag task (TFF's
``tag_prediction_preprocessing``)."""

from __future__ import annotations

from typing import Any, Callable

import tensorflow as tf

from simharness.simulation.baselines import client_spec
from simharness.simulation.baselines.stackoverflow import constants
from simharness.simulation.baselines.client_spec import shuffle_repeat_take

__all__ = ['build_to_ids_fn', 'create_preprocess_fn']


def _vocab_table(vocab: list) -> Any:
    return tf.lookup.StaticVocabularyTable(
        tf.lookup.KeyValueTensorInitializer(vocab, tf.range(len(vocab), dtype=tf.int64)),
        num_oov_buckets=1,
    )


def build_to_ids_fn(word_vocab: list, tag_vocab: list) -> Callable[[Any], tuple]:
    """A map from an element to ``(words, tags)``: `words` the bag of words of
    ``tokens + ' ' + title`` over `word_vocab` normalized to sum 1 (out-of-vocabulary
    words dropped; zeros when none is in it), `tags` the 0/1 indicator over `tag_vocab`
    of its ``|``-separated ``tags``."""
    word_table, tag_table = _vocab_table(word_vocab), _vocab_table(tag_vocab)
    num_words, num_tags = len(word_vocab), len(tag_vocab)

    def to_ids(example: Any) -> tuple:
        sentence = tf.strings.join([example['tokens'], example['title']], separator=' ')
        counts = tf.reduce_sum(
            tf.one_hot(word_table.lookup(tf.strings.split(sentence)), num_words), axis=0
        )
        words = tf.math.divide_no_nan(counts, tf.reduce_sum(counts))
        tag_ids = tag_table.lookup(tf.strings.split(example['tags'], sep='|'))
        tags = tf.reduce_sum(tf.one_hot(tag_ids, num_tags + 1), axis=0)[:num_tags]
        return words, tags

    return to_ids


def create_preprocess_fn(
    preprocess_spec: client_spec.ClientSpec,
    word_vocab: list,
    tag_vocab: list,
    num_parallel_calls: Any = tf.data.experimental.AUTOTUNE,
) -> Callable[[Any], Any]:
    """A function preprocessing a Stack Overflow client dataset for tag prediction.

    In order: shuffle (unless the buffer is 1; default
    `constants.DEFAULT_SHUFFLE_BUFFER_SIZE`), repeat `num_epochs` times, take
    `max_elements`, map to ``(bag of words, tag indicators)`` (`build_to_ids_fn`), batch.

    Raises:
      ValueError: an empty `word_vocab` or `tag_vocab`.
    """
    if not word_vocab:
        raise ValueError('word_vocab must be non-empty.')
    if not tag_vocab:
        raise ValueError('tag_vocab must be non-empty.')
    shuffle_buffer_size = (
        preprocess_spec.shuffle_buffer_size or constants.DEFAULT_SHUFFLE_BUFFER_SIZE
    )

    def preprocess_fn(dataset: Any) -> Any:
        dataset = shuffle_repeat_take(dataset, preprocess_spec, shuffle_buffer_size)
        dataset = dataset.map(
            build_to_ids_fn(word_vocab, tag_vocab), num_parallel_calls=num_parallel_calls
        )
        return dataset.batch(preprocess_spec.batch_size)

    return preprocess_fn
