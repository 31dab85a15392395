"""Client dataset preprocessing of the Stack Overflow next-word task (TFF's
``word_prediction_preprocessing``).

Word ids: 0 is padding, ``1..len(vocab)`` the vocabulary in its order, then
`num_out_of_vocab_buckets` out-of-vocabulary ids, then beginning and end of
sentence (`get_special_tokens`).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import tensorflow as tf

from simharness.simulation.baselines import client_spec
from simharness.simulation.baselines.stackoverflow import constants
from simharness.simulation.baselines.client_spec import shuffle_repeat_take

__all__ = [
    'SpecialTokens',
    'batch_and_split',
    'build_to_ids_fn',
    'create_preprocess_fn',
    'get_special_tokens',
    'split_input_target',
]


class SpecialTokens(NamedTuple):
    """The ids preprocessing adds: `padding`, `out_of_vocab` (a list),
    `beginning_of_sentence`, `end_of_sentence`."""

    padding: int
    out_of_vocab: list
    beginning_of_sentence: int
    end_of_sentence: int

    def get_number_of_special_tokens(self) -> int:
        return 3 + len(self.out_of_vocab)


def get_special_tokens(vocab_size: int, num_out_of_vocab_buckets: int = 1) -> SpecialTokens:
    """The special ids for a vocabulary of `vocab_size` words."""
    return SpecialTokens(
        padding=0,
        out_of_vocab=[vocab_size + 1 + n for n in range(num_out_of_vocab_buckets)],
        beginning_of_sentence=vocab_size + num_out_of_vocab_buckets + 1,
        end_of_sentence=vocab_size + num_out_of_vocab_buckets + 2,
    )


def split_input_target(chunk: Any) -> tuple:
    """A batch of id sequences as (all but the last id, all but the first)."""
    return chunk[:, :-1], chunk[:, 1:]


def build_to_ids_fn(
    vocab: list, max_sequence_length: int, num_out_of_vocab_buckets: int = 1
) -> Callable[[Any], Any]:
    """A map from an element's space-separated ``tokens`` to int64 ids: ``bos``, the
    first `max_sequence_length` words' ids, and ``eos`` when the sentence was shorter."""
    special = get_special_tokens(len(vocab), num_out_of_vocab_buckets)
    bos, eos = special.beginning_of_sentence, special.end_of_sentence
    table = tf.lookup.StaticVocabularyTable(
        tf.lookup.KeyValueTensorInitializer(vocab, tf.range(len(vocab), dtype=tf.int64)),
        num_oov_buckets=num_out_of_vocab_buckets,
    )

    def to_ids(example: Any) -> Any:
        words = tf.strings.split(tf.reshape(example['tokens'], shape=[1]), sep=' ').values
        ids = table.lookup(words[:max_sequence_length]) + 1
        ids = tf.cond(
            tf.less(tf.size(ids), max_sequence_length),
            lambda: tf.concat([ids, [eos]], 0),
            lambda: ids,
        )
        return tf.concat([[bos], ids], 0)

    return to_ids


def batch_and_split(dataset: Any, sequence_length: int, batch_size: int) -> Any:
    """Batches id sequences padded (with 0) to ``sequence_length + 1``, then splits them
    into (inputs, targets)."""
    return dataset.padded_batch(batch_size, padded_shapes=[sequence_length + 1]).map(
        split_input_target, num_parallel_calls=tf.data.experimental.AUTOTUNE
    )


def create_preprocess_fn(
    preprocess_spec: client_spec.ClientSpec,
    vocab: list,
    sequence_length: int = constants.DEFAULT_SEQUENCE_LENGTH,
    num_out_of_vocab_buckets: int = 1,
    num_parallel_calls: Any = tf.data.experimental.AUTOTUNE,
) -> Callable[[Any], Any]:
    """A function preprocessing a Stack Overflow client dataset for next-word prediction.

    In order: shuffle (unless the buffer is 1; default
    `constants.DEFAULT_SHUFFLE_BUFFER_SIZE`), repeat `num_epochs` times, take
    `max_elements`, map each sentence to ids (`build_to_ids_fn`), pad and batch,
    split into (inputs, targets) of `sequence_length`.

    Raises:
      ValueError: an empty `vocab`, or a non-positive `sequence_length` or
        `num_out_of_vocab_buckets`.
    """
    if not vocab:
        raise ValueError('vocab must be non-empty.')
    if sequence_length < 1:
        raise ValueError('sequence_length must be a positive integer.')
    if num_out_of_vocab_buckets <= 0:
        raise ValueError('num_out_of_vocab_buckets must be a positive integer.')
    shuffle_buffer_size = (
        preprocess_spec.shuffle_buffer_size or constants.DEFAULT_SHUFFLE_BUFFER_SIZE
    )

    def preprocess_fn(dataset: Any) -> Any:
        to_ids = build_to_ids_fn(
            vocab=vocab,
            max_sequence_length=sequence_length,
            num_out_of_vocab_buckets=num_out_of_vocab_buckets,
        )
        dataset = shuffle_repeat_take(dataset, preprocess_spec, shuffle_buffer_size)
        dataset = dataset.map(to_ids, num_parallel_calls=num_parallel_calls)
        return batch_and_split(dataset, sequence_length, preprocess_spec.batch_size)

    return preprocess_fn
