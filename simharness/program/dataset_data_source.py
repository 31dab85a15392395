"""`DatasetDataSource` (``tff.program``): a federated data source of one `tf.data.Dataset` per client.

An iterator's ``select(k)`` gives `k` of the datasets, drawn uniformly at
random without replacement within one call, with replacement across calls
(TFF's sampling, Python's `random`).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, Optional, Tuple

from simharness.core import types as T
from simharness.errors import SimharnessTypeError, SimharnessValueError
from simharness.program import data_source, serialization_utils

__all__ = ['DatasetDataSource', 'DatasetDataSourceIterator']


def _check_datasets(datasets: Any) -> None:
    import tensorflow as tf

    if not isinstance(datasets, Sequence):
        raise SimharnessTypeError(
            f'Expected `datasets` to be a Sequence of tf.data.Dataset, found '
            f'{type(datasets).__name__}.',
            expected=Sequence,
            actual=type(datasets),
        )
    if not datasets:
        raise SimharnessValueError('Expected `datasets` to not be empty.')
    element_spec = None
    for i, dataset in enumerate(datasets):
        if not isinstance(dataset, tf.data.Dataset):
            raise SimharnessTypeError(
                f'Expected `datasets[{i}]` to be a tf.data.Dataset, found '
                f'{type(dataset).__name__}.',
                expected=tf.data.Dataset,
                actual=type(dataset),
            )
        if element_spec is None:
            element_spec = dataset.element_spec
        elif dataset.element_spec != element_spec:
            raise SimharnessValueError(
                'Expected each `tf.data.Dataset` in `datasets` to have the same type '
                f'specification, found {element_spec} and {dataset.element_spec}.'
            )


class DatasetDataSourceIterator(data_source.FederatedDataSourceIterator):
    """A `FederatedDataSourceIterator` over a sequence of `tf.data.Dataset` s, one per client.

    Args:
        datasets: the datasets (not empty, all of one element spec).
        federated_type: the type of what `select` returns.

    Raises:
        SimharnessValueError: `datasets` is empty or its element specs differ.
        SimharnessTypeError: a wrong type of argument.
    """

    def __init__(self, datasets: Sequence[Any], federated_type: T.FederatedType):
        _check_datasets(datasets)
        if not isinstance(federated_type, T.FederatedType):
            raise SimharnessTypeError(
                f'Expected `federated_type` to be a FederatedType, found {federated_type!r}.',
                expected=T.FederatedType,
                actual=type(federated_type),
            )
        self._datasets = datasets
        self._federated_type = federated_type

    @classmethod
    def from_bytes(cls, buffer: bytes) -> 'DatasetDataSourceIterator':
        """The iterator `to_bytes` packed.

        Raises:
            SimharnessTypeError: the packed type is not a `FederatedType`.
        """
        datasets, size = serialization_utils.unpack_sequence_from(
            serialization_utils.unpack_dataset_from, buffer
        )
        federated_type, _ = serialization_utils.unpack_type_spec_from(buffer, offset=size)
        if not isinstance(federated_type, T.FederatedType):
            raise SimharnessTypeError(
                f'Expected `federated_type` to be a `tff.FederatedType`, found '
                f'{type(federated_type)}.',
                expected=T.FederatedType,
                actual=type(federated_type),
            )
        return DatasetDataSourceIterator(datasets=datasets, federated_type=federated_type)

    def to_bytes(self) -> bytes:
        """The datasets (serialized graphs) and the type, as bytes."""
        return serialization_utils.pack_sequence(
            serialization_utils.pack_dataset, self._datasets
        ) + serialization_utils.pack_type_spec(self._federated_type)

    @property
    def federated_type(self) -> T.FederatedType:
        return self._federated_type

    @property
    def datasets(self) -> Tuple[Any, ...]:
        """The datasets it selects from (ours)."""
        return tuple(self._datasets)

    def select(self, k: Optional[int] = None) -> object:
        """`k` of the datasets, drawn at random (without replacement within this call).

        Raises:
            SimharnessValueError: `k` is None, negative or more than the number
                of datasets.
            SimharnessTypeError: `k` is not an int.
        """
        if k is not None and (not isinstance(k, int) or isinstance(k, bool)):
            raise SimharnessTypeError(
                f'Expected `k` to be an int, found {type(k).__name__}.',
                expected=int,
                actual=type(k),
            )
        if k is None or k < 0 or k > len(self._datasets):
            raise SimharnessValueError(
                'Expected `k` to be a positive integer and less than the number of `datasets`, '
                f'found `k` of {k} and number of `datasets` of {len(self._datasets)}.'
            )
        return random.sample(list(self._datasets), k)

    def __deepcopy__(self, memo: dict) -> 'DatasetDataSourceIterator':
        # Datasets are immutable (and cannot be deep-copied): the copy shares them.
        return DatasetDataSourceIterator(list(self._datasets), self._federated_type)

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, DatasetDataSourceIterator):
            return NotImplemented
        if self._federated_type != other.federated_type:
            return False
        theirs = other.datasets
        if len(self._datasets) != len(theirs):
            return False
        for a, b in zip(self._datasets, theirs):
            if not _same_elements(a, b):
                return False
        return True


def _same_elements(a: Any, b: Any) -> bool:
    import numpy as np
    import tensorflow as tf

    left, right = list(a.as_numpy_iterator()), list(b.as_numpy_iterator())
    if len(left) != len(right):
        return False
    for x, y in zip(left, right):
        try:
            tf.nest.assert_same_structure(x, y)
        except (ValueError, TypeError):
            return False
        if not all(np.array_equal(u, v) for u, v in zip(tf.nest.flatten(x), tf.nest.flatten(y))):
            return False
    return True


class DatasetDataSource(data_source.FederatedDataSource):
    """A `FederatedDataSource` of `tf.data.Dataset` s, one per client.

    Args:
        datasets: the datasets (not empty, all of one element spec).

    Raises:
        SimharnessValueError: `datasets` is empty or its element specs differ.
        SimharnessTypeError: `datasets` is not a sequence of datasets.
    """

    def __init__(self, datasets: Sequence[Any]):
        _check_datasets(datasets)
        self._datasets = datasets
        element_type = T.from_tf_structure(datasets[0].element_spec)
        self._federated_type = T.FederatedType(T.SequenceType(element_type), T.CLIENTS)

    @property
    def federated_type(self) -> T.FederatedType:
        return self._federated_type

    def iterator(self) -> DatasetDataSourceIterator:
        """A new iterator over the datasets."""
        return DatasetDataSourceIterator(self._datasets, self._federated_type)
