"""`ClientIdDataSource` (``tff.program``): a federated data source of client ids (strings).

An iterator's ``select(k)`` gives `k` of the ids, drawn uniformly at random
without replacement within one call, with replacement across calls; the
computation it is passed to builds each client's data from its id.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, Optional, Tuple

import numpy as np

from simharness.core import types as T
from simharness.errors import SimharnessTypeError, SimharnessValueError
from simharness.program import data_source, serialization_utils

__all__ = ['ClientIdDataSource', 'ClientIdDataSourceIterator']


def _check_client_ids(client_ids: Any) -> None:
    if not isinstance(client_ids, Sequence) or isinstance(client_ids, (str, bytes)):
        raise SimharnessTypeError(
            f'Expected `client_ids` to be a sequence of str, found {type(client_ids).__name__}.',
            expected=Sequence,
            actual=type(client_ids),
        )
    for i, client_id in enumerate(client_ids):
        if not isinstance(client_id, str):
            raise SimharnessTypeError(
                f'Expected `client_ids[{i}]` to be a str, found {type(client_id).__name__} '
                f'{client_id!r}.',
                expected=str,
                actual=type(client_id),
            )
    if not client_ids:
        raise SimharnessValueError('Expected `client_ids` to not be empty.')


def _federated_type() -> T.FederatedType:
    return T.FederatedType(np.str_, T.CLIENTS)


class ClientIdDataSourceIterator(data_source.FederatedDataSourceIterator):
    """A `FederatedDataSourceIterator` over client ids.

    Raises:
        SimharnessTypeError: `client_ids` is not a sequence of str.
        SimharnessValueError: `client_ids` is empty.
    """

    def __init__(self, client_ids: Sequence[str]):
        _check_client_ids(client_ids)
        self._client_ids = client_ids
        self._federated_type = _federated_type()

    @classmethod
    def from_bytes(cls, buffer: bytes) -> 'ClientIdDataSourceIterator':
        client_ids, _ = serialization_utils.unpack_sequence_from(
            serialization_utils.unpack_str_from, buffer
        )
        return ClientIdDataSourceIterator(client_ids)

    def to_bytes(self) -> bytes:
        return serialization_utils.pack_sequence(serialization_utils.pack_str, self._client_ids)

    @property
    def federated_type(self) -> T.FederatedType:
        return self._federated_type

    @property
    def client_ids(self) -> Tuple[str, ...]:
        """The client ids it selects from (ours)."""
        return tuple(self._client_ids)

    def select(self, k: Optional[int] = None) -> object:
        """`k` of the client ids, drawn at random (without replacement within this call).

        Raises:
            SimharnessValueError: `k` is None, negative or more than the number of ids.
            SimharnessTypeError: `k` is not an int.
        """
        if k is not None and (not isinstance(k, int) or isinstance(k, bool)):
            raise SimharnessTypeError(
                f'Expected `k` to be an int, found {type(k).__name__}.',
                expected=int,
                actual=type(k),
            )
        if k is None or k < 0 or k > len(self._client_ids):
            raise SimharnessValueError(
                'Expected `k` to be a positive integer and less than the number of '
                f'`client_ids`, found `k` of {k} and number of `client_ids` of '
                f'{len(self._client_ids)}.'
            )
        return random.sample(list(self._client_ids), k)

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, ClientIdDataSourceIterator):
            return NotImplemented
        return list(self._client_ids) == list(other.client_ids)


class ClientIdDataSource(data_source.FederatedDataSource):
    """A `FederatedDataSource` of client ids.

    Raises:
        SimharnessTypeError: `client_ids` is not a sequence of str.
        SimharnessValueError: `client_ids` is empty.
    """

    def __init__(self, client_ids: Sequence[str]):
        _check_client_ids(client_ids)
        self._client_ids = client_ids
        self._federated_type = _federated_type()

    @property
    def federated_type(self) -> T.FederatedType:
        return self._federated_type

    def iterator(self) -> ClientIdDataSourceIterator:
        """A new iterator over the client ids."""
        return ClientIdDataSourceIterator(self._client_ids)
