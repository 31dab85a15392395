"""`ClippingIbltFactory`: clip client words, then aggregate by IBLT (TFF's ``iblt/iblt_clipping.py``).

Clients hold datasets of batched words; each is turned into a dataset of
``OrderedDict(key=word, value=[count] or [count, 1])`` (capped as
`build_iblt_computation` caps) and handed to an `IbltFactory`'s process.
"""

from __future__ import annotations

import collections
from typing import Optional

import numpy as np
import tensorflow as tf

from simharness.aggregators import factory
from simharness.analytics import data_processing
from simharness.analytics.heavy_hitters.iblt import iblt_factory
from simharness.core import intrinsics
from simharness.core import types as T
from simharness.core.computation import federated_computation, tf_computation
from simharness.templates import AggregationProcess

__all__ = ['ClippingIbltFactory', 'clipped_words_and_counts', 'get_clipped_elements_with_counts']


@tf.function
def get_clipped_elements_with_counts(
    dataset: tf.data.Dataset,
    max_words_per_user: Optional[int] = None,
    multi_contribution: bool = True,
    batch_size: int = 1,
    string_max_bytes: int = 10,
    unique_counts: bool = False,
) -> tf.data.Dataset:
    """A dataset of ``OrderedDict(key=word, value=...)``: each word's clipped count.

    The value is the count (a scalar), or ``[count, 1]`` with `unique_counts`.

    Args:
      dataset: batches of words.
      max_words_per_user: caps the client's total count (whole first batches
        with `multi_contribution`, else its top distinct words); `None`: no cap.
      multi_contribution: full counts (True) or 1 per distinct word (False).
      batch_size: the number of words in each batch of `dataset`.
      string_max_bytes: the longest word in bytes; longer words are trimmed.
      unique_counts: also give each word a count of 1 (its number of clients).
    """
    k_words, counts = clipped_words_and_counts(
        dataset, max_words_per_user, multi_contribution, batch_size, string_max_bytes
    )
    values = tf.stack([counts, tf.ones_like(counts)], axis=1) if unique_counts else counts
    return tf.data.Dataset.from_tensor_slices(
        collections.OrderedDict([('key', k_words), ('value', values)])
    )


class ClippingIbltFactory(factory.UnweightedAggregationFactory):
    """Clips each client's words (`get_clipped_elements_with_counts`), then `inner_iblt_agg`.

    Args:
      inner_iblt_agg: an `IbltFactory`.
      max_words_per_user, multi_contribution, batch_size, string_max_bytes,
        unique_counts: as `get_clipped_elements_with_counts`.
    """

    def __init__(
        self,
        inner_iblt_agg: iblt_factory.IbltFactory,
        max_words_per_user: Optional[int] = None,
        multi_contribution: bool = True,
        batch_size: int = 1,
        string_max_bytes: int = 10,
        unique_counts: bool = False,
    ):
        self.inner_iblt_agg = inner_iblt_agg
        self.max_words_per_user = max_words_per_user
        self.multi_contribution = multi_contribution
        self.batch_size = batch_size
        self.string_max_bytes = string_max_bytes
        self.unique_counts = unique_counts

    def create(self, value_type: factory.ValueType) -> AggregationProcess:
        """The process over client datasets of `value_type` (``string[?]*``).

        Raises:
          ValueError: `value_type` is not ``SequenceType(TensorType(str, [None]))``.
        """
        expected_type = T.SequenceType(T.TensorType(np.str_, [None]))
        if value_type != expected_type:
            raise ValueError(f'Expected value_type to be {expected_type}, got {value_type}')

        @tf_computation(value_type)
        @tf.function
        def preprocess(client_data):
            return get_clipped_elements_with_counts(
                client_data,
                self.max_words_per_user,
                self.multi_contribution,
                self.batch_size,
                self.string_max_bytes,
                self.unique_counts,
            )

        inner_process = self.inner_iblt_agg.create(preprocess.type_signature.result)

        @federated_computation(
            inner_process.initialize.type_signature.result, T.FederatedType(value_type, T.CLIENTS)
        )
        def next_fn(state, client_data):
            return inner_process.next(state, intrinsics.federated_map(preprocess, client_data))

        return AggregationProcess(inner_process.initialize, next_fn)


def clipped_words_and_counts(
    dataset: tf.data.Dataset,
    max_words_per_user: Optional[int],
    multi_contribution: bool,
    batch_size: int,
    string_max_bytes: int,
) -> tuple:
    """A client's words and their counts, capped as `build_iblt_computation` caps them
    (also its client work): ``(words, counts)``, rank-1 tensors (traced in the caller's graph)."""
    if max_words_per_user is not None:
        if multi_contribution:
            k_words, counts = data_processing.get_capped_elements_with_counts(
                dataset,
                max_words_per_user,
                batch_size=batch_size,
                string_max_bytes=string_max_bytes,
            )
        else:
            k_words, counts = data_processing.get_top_elements_with_counts(
                dataset, max_words_per_user, string_max_bytes=string_max_bytes
            )
            counts = tf.ones_like(counts)
    else:
        k_words, counts = data_processing.get_unique_elements_with_counts(
            dataset, string_max_bytes=string_max_bytes
        )
        if not multi_contribution:
            counts = tf.ones_like(counts)
    return k_words, counts
