"""Client dataset preprocessing of the Shakespeare tasks (TFF's ``char_prediction_preprocessing``).

Characters become ids: 0 is padding, ``1..len(CHAR_VOCAB)`` the vocabulary (in
`CHAR_VOCAB`'s order), then out-of-vocabulary, beginning and end of snippet.
"""

from __future__ import annotations

from typing import Any, Callable

import tensorflow as tf

from simharness.simulation.baselines import client_spec
from simharness.simulation.baselines.client_spec import shuffle_repeat_take

__all__ = [
    'CHAR_VOCAB',
    'DEFAULT_SEQUENCE_LENGTH',
    'DEFAULT_SHUFFLE_BUFFER_SIZE',
    'create_preprocess_fn',
    'get_special_tokens',
]

DEFAULT_SEQUENCE_LENGTH = 80  # McMahan et al., AISTATS 2017
#: TFF's character vocabulary, in TFF's order (the ids depend on it).
CHAR_VOCAB = list(
    'dhlptx@DHLPTX $(,048cgkoswCGKOSW[_#\'/37;?bfjnrvzBFJNRVZ"&*.26:\naeimquyAEIMQUY]!%)-159\r'
)
DEFAULT_SHUFFLE_BUFFER_SIZE = 50


def get_special_tokens() -> tuple:
    """The ids ``(pad, oov, bos, eos)`` preprocessing adds."""
    n = len(CHAR_VOCAB)
    return 0, n + 1, n + 2, n + 3


def _build_tokenize_fn(split_length: int = DEFAULT_SEQUENCE_LENGTH + 1) -> Callable[[Any], Any]:
    """A map from ``{'snippets': string}`` to its int64 ids: ``bos``, the characters'
    ids, ``eos``, then padding (0) up to a multiple of `split_length`."""
    _, _, bos, eos = get_special_tokens()
    table = tf.lookup.StaticVocabularyTable(
        tf.lookup.KeyValueTensorInitializer(CHAR_VOCAB, tf.range(len(CHAR_VOCAB), dtype=tf.int64)),
        num_oov_buckets=1,
    )

    def to_tokens_and_pad(example: Any) -> Any:
        tokens = table.lookup(keys=tf.strings.bytes_split(example['snippets'])) + 1
        tokens = tf.concat([[bos], tokens, [eos]], 0)
        padding = (-tf.shape(tokens)[0]) % split_length
        return tf.concat([tokens, tf.zeros(padding, dtype=tf.int64)], 0)

    return to_tokens_and_pad


def _split_target(sequence_batch: Any) -> tuple:
    """A batch of N + 1 ids as (its first N, its last N)."""
    return sequence_batch[:, :-1], sequence_batch[:, 1:]


def create_preprocess_fn(
    preprocess_spec: client_spec.ClientSpec,
    sequence_length: int = DEFAULT_SEQUENCE_LENGTH,
    num_parallel_calls: Any = tf.data.experimental.AUTOTUNE,
) -> Callable[[Any], Any]:
    """A function preprocessing a Shakespeare client dataset (elements ``{'snippets'}``).

    In order: shuffle (unless the buffer is 1; default
    `DEFAULT_SHUFFLE_BUFFER_SIZE`), repeat `num_epochs` times, take
    `max_elements` snippets, tokenize and pad each snippet to a multiple of
    ``sequence_length + 1``, cut the token stream into sequences of
    ``sequence_length + 1``, batch them, and split each batch into
    ``(input ids, target ids)`` shifted by one.

    Raises:
      ValueError: `sequence_length` is not positive.
    """
    if sequence_length < 1:
        raise ValueError('sequence_length must be a positive integer.')
    shuffle_buffer_size = preprocess_spec.shuffle_buffer_size or DEFAULT_SHUFFLE_BUFFER_SIZE

    def preprocess_fn(dataset: Any) -> Any:
        dataset = shuffle_repeat_take(dataset, preprocess_spec, shuffle_buffer_size)
        to_tokens = _build_tokenize_fn(split_length=sequence_length + 1)
        dataset = dataset.map(to_tokens, num_parallel_calls=num_parallel_calls).unbatch()
        # Every snippet was padded to a multiple of sequence_length + 1: nothing is dropped.
        dataset = dataset.batch(sequence_length + 1, drop_remainder=True)
        dataset = dataset.batch(preprocess_spec.batch_size)
        return dataset.map(_split_target, num_parallel_calls=num_parallel_calls)

    return preprocess_fn
