"""Federated data sources (``tff.program``): where a program's client data comes from.

`FederatedDataSource.iterator()` gives a `FederatedDataSourceIterator`, an
independent pass over the data; its `select(k)` gives the data of `k`
clients, an argument for a computation. Iterators are `Serializable`: a
program saves them in its state (`FileProgramStateManager`) to resume.
"""

from __future__ import annotations

import abc
from typing import Optional

from simharness.core import types as T
from simharness.core.arrays import Serializable

__all__ = ['FederatedDataSource', 'FederatedDataSourceIterator']


class FederatedDataSourceIterator(Serializable, abc.ABC):
    """An iterator over a federated data source: `select` gives new selections of its data."""

    @property
    @abc.abstractmethod
    def federated_type(self) -> T.FederatedType:
        """The type of what `select` returns (the data source's type)."""

    @abc.abstractmethod
    def select(self, k: Optional[int] = None) -> object:
        """A new selection of federated data (of `k` elements, a positive int, if given).

        Returns:
            A value of type `federated_type`, an argument of a computation.
        """


class FederatedDataSource(abc.ABC):
    """A source of federated data: its type and iterators over it."""

    @property
    @abc.abstractmethod
    def federated_type(self) -> T.FederatedType:
        """The type of what its iterators' `select` returns."""

    @abc.abstractmethod
    def iterator(self) -> FederatedDataSourceIterator:
        """A new iterator: an independent pass over the data."""
