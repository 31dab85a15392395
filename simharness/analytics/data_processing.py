"""Dataset helpers of federated analytics (TFF's ``analytics/data_processing.py``).

The string helpers take a dataset of batched rank-1 `tf.string` tensors and
read each coordinate as one element; `string_max_bytes` (if given) trims each
string to that many bytes. `to_stacked_tensor` inverts
`tf.data.Dataset.from_tensor_slices`.
"""

from __future__ import annotations

from typing import Optional

import tensorflow as tf

__all__ = [
    'get_all_elements',
    'get_capped_elements',
    'get_capped_elements_with_counts',
    'get_top_elements',
    'get_top_elements_with_counts',
    'get_top_multi_elements',
    'get_unique_elements',
    'get_unique_elements_with_counts',
    'to_stacked_tensor',
]


def _check_rank(dataset: tf.data.Dataset) -> None:
    rank = dataset.element_spec.shape.rank
    if rank != 1:
        raise ValueError(
            f'The shape of elements in `dataset` must be of rank 1,  found rank = {rank} instead.'
        )


def _check_string(dataset: tf.data.Dataset) -> None:
    dtype = dataset.element_spec.dtype
    if dtype != tf.string:
        raise TypeError(
            f'`dataset.element_spec.dtype` must be `tf.string`, found element type {dtype}'
        )


def _check_string_max_bytes(string_max_bytes: Optional[int]) -> None:
    if string_max_bytes is not None and string_max_bytes < 1:
        raise ValueError('`string_max_bytes` must be at least 1 when it is not None.')


def _trim(batch: tf.Tensor, string_max_bytes: Optional[int]) -> tf.Tensor:
    if string_max_bytes is None:
        return batch
    return tf.strings.substr(batch, 0, string_max_bytes, unit='BYTE')


@tf.function
def get_all_elements(dataset: tf.data.Dataset, string_max_bytes: Optional[int] = None):
    """All the elements of `dataset`, in order, as one rank-1 string tensor.

    Raises:
      ValueError: elements not of rank 1, or `string_max_bytes` < 1.
      TypeError: elements not `tf.string`.
    """
    _check_rank(dataset)
    _check_string(dataset)
    _check_string_max_bytes(string_max_bytes)

    def add_element(element_list, element_batch):
        return tf.concat([element_list, _trim(element_batch, string_max_bytes)], axis=0)

    return dataset.reduce(initial_state=tf.constant([], dtype=tf.string), reduce_func=add_element)


def _get_capped_dataset(dataset: tf.data.Dataset, max_user_contribution: int, batch_size: int = 1):
    """The first ``max_user_contribution // batch_size`` batches of `dataset`.

    Whole batches only: the result may hold fewer than `max_user_contribution`
    elements.

    Raises:
      ValueError: elements not of rank 1, `max_user_contribution` < 1 or
        `batch_size` < 1.
      TypeError: elements not `tf.string`.
    """
    _check_rank(dataset)
    if max_user_contribution < 1:
        raise ValueError('`max_user_contribution` must be at least 1.')
    if batch_size < 1:
        raise ValueError('`batch_size` must be at least 1.')
    _check_string(dataset)
    return dataset.take(max_user_contribution // batch_size)


def get_capped_elements(
    dataset: tf.data.Dataset,
    max_user_contribution: int,
    batch_size: int = 1,
    string_max_bytes: Optional[int] = None,
):
    """The elements of the first ``max_user_contribution // batch_size`` batches.

    Raises:
      ValueError: elements not of rank 1, `max_user_contribution`, `batch_size`
        or `string_max_bytes` < 1.
      TypeError: elements not `tf.string`.
    """
    _check_string_max_bytes(string_max_bytes)
    capped = _get_capped_dataset(
        dataset=dataset, max_user_contribution=max_user_contribution, batch_size=batch_size
    )
    return get_all_elements(capped, string_max_bytes)


def get_capped_elements_with_counts(
    dataset: tf.data.Dataset,
    max_user_contribution: int,
    batch_size: int = 1,
    string_max_bytes: Optional[int] = None,
):
    """``(unique elements, counts)`` of the capped dataset (see `get_capped_elements`).

    Raises:
      As `get_capped_elements`.
    """
    _check_string_max_bytes(string_max_bytes)
    capped = _get_capped_dataset(
        dataset=dataset, max_user_contribution=max_user_contribution, batch_size=batch_size
    )
    return get_unique_elements_with_counts(capped, string_max_bytes)


@tf.function
def get_unique_elements(dataset: tf.data.Dataset, string_max_bytes: Optional[int] = None):
    """The distinct elements of `dataset`, in order of first appearance.

    Raises:
      ValueError: elements not of rank 1, or `string_max_bytes` < 1.
      TypeError: elements not `tf.string`.
    """
    _check_rank(dataset)
    _check_string_max_bytes(string_max_bytes)
    _check_string(dataset)

    def add_unique_element(element_list, element_batch):
        element_list = tf.concat([element_list, _trim(element_batch, string_max_bytes)], axis=0)
        element_list, _ = tf.unique(element_list)
        return element_list

    return dataset.reduce(
        initial_state=tf.constant([], dtype=tf.string), reduce_func=add_unique_element
    )


def get_unique_elements_with_counts(
    dataset: tf.data.Dataset, string_max_bytes: Optional[int] = None
) -> tuple[tf.Tensor, tf.Tensor]:
    """``(elements, counts)``: the distinct elements (first-appearance order), int64 counts.

    Raises:
      ValueError: elements not of rank 1, or `string_max_bytes` < 1.
      TypeError: elements not `tf.string`.
    """
    _check_rank(dataset)
    _check_string_max_bytes(string_max_bytes)
    _check_string(dataset)
    elements, indices = tf.unique(get_all_elements(dataset, string_max_bytes))

    def accumulate_counts(counts, item):
        return counts + tf.one_hot(item, tf.shape(elements)[0], dtype=tf.int64)

    counts = tf.foldl(
        accumulate_counts, indices, initializer=tf.zeros_like(elements, dtype=tf.int64)
    )
    return elements, counts


@tf.function
def get_top_elements_with_counts(
    dataset: tf.data.Dataset, max_user_contribution: int, string_max_bytes: Optional[int] = None
) -> tuple[tf.Tensor, tf.Tensor]:
    """``(elements, counts)`` of the `max_user_contribution` most common distinct elements.

    All distinct elements when there are at most `max_user_contribution`;
    otherwise the top ones by count, not necessarily sorted.

    Raises:
      ValueError: elements not of rank 1, `max_user_contribution` or
        `string_max_bytes` < 1.
      TypeError: elements not `tf.string`.
    """
    if max_user_contribution < 1:
        raise ValueError('`max_user_contribution` must be at least 1.')
    elements, counts = get_unique_elements_with_counts(dataset, string_max_bytes)
    if tf.math.greater(tf.size(elements), max_user_contribution):
        counts, top_indices = tf.math.top_k(counts, max_user_contribution, sorted=False)
        return tf.gather(elements, top_indices), counts
    return elements, counts


def get_top_elements(
    dataset: tf.data.Dataset, max_user_contribution: int, string_max_bytes: Optional[int] = None
):
    """The `max_user_contribution` most common distinct elements (a set, unsorted).

    Raises:
      As `get_top_elements_with_counts`.
    """
    top_elements, _ = get_top_elements_with_counts(
        dataset=dataset,
        max_user_contribution=max_user_contribution,
        string_max_bytes=string_max_bytes,
    )
    return top_elements


def get_top_multi_elements(
    dataset: tf.data.Dataset, max_user_contribution: int, string_max_bytes: Optional[int] = None
):
    """The most common distinct elements, each repeated as often as in `dataset` (a multiset).

    Each distinct element counts once toward `max_user_contribution`.

    Raises:
      As `get_top_elements_with_counts`.
    """
    top_elements, counts = get_top_elements_with_counts(
        dataset=dataset,
        max_user_contribution=max_user_contribution,
        string_max_bytes=string_max_bytes,
    )
    return tf.repeat(top_elements, counts)


class _TensorShapeNotFullyDefinedError(ValueError):
    pass


@tf.function
def to_stacked_tensor(ds: tf.data.Dataset) -> tf.Tensor:
    """The elements of `ds` stacked along a new leading axis, per tensor of the structure.

    The inverse of `tf.data.Dataset.from_tensor_slices`: 5 elements of shape
    ``[3, 2]`` give a ``[5, 3, 2]`` tensor. Batched datasets need
    ``drop_remainder=True``.

    Raises:
      TypeError: `ds` is not a `tf.data.Dataset`.
      ValueError: an element shape is not fully defined.
    """
    if not isinstance(ds, tf.data.Dataset):
        raise TypeError(f'Expected ds to be of type tf.data.Dataset, found {type(ds).__name__}.')

    def expanded_empty_tensor(tensor_spec: tf.TensorSpec) -> tf.Tensor:
        if not tensor_spec.shape.is_fully_defined():
            raise _TensorShapeNotFullyDefinedError()
        return tf.zeros(shape=(0,) + tensor_spec.shape, dtype=tensor_spec.dtype)

    with tf.name_scope('to_stacked_tensor'):
        try:
            initial_state = tf.nest.map_structure(expanded_empty_tensor, ds.element_spec)
        except _TensorShapeNotFullyDefinedError as e:
            raise ValueError(
                f'Dataset elements must have fully-defined shapes. Found: {ds.element_spec}'
            ) from e

    @tf.function
    def append_tensor(stacked: tf.Tensor, tensor: tf.Tensor) -> tf.Tensor:
        return tf.concat((stacked, tf.expand_dims(tensor, axis=0)), axis=0)

    @tf.function
    def reduce_func(old_state, input_element):
        tf.nest.assert_same_structure(old_state, input_element)
        return tf.nest.map_structure(append_tensor, old_state, input_element)

    return ds.reduce(initial_state, reduce_func)
