"""`ReleaseManager`: federated_language's interface for releasing values (metrics) of a program."""

from __future__ import annotations

import abc
import collections
import logging
from typing import Any, Generic, Hashable, TypeVar, Union

from simharness.errors import SimharnessError
from simharness.program.value_reference import MaterializableValue, materialize_value

__all__ = [
    'Key',
    'LoggingReleaseManager',
    'MemoryReleaseManager',
    'ReleasableStructure',
    'ReleasableValue',
    'ReleaseManager',
    'ReleasedValueNotFoundError',
]

#: A value a release manager releases.
ReleasableValue = Union[object, MaterializableValue]
#: A structure (nested containers) of releasable values.
ReleasableStructure = TypeVar('ReleasableStructure')
#: The key a value is released under.
Key = TypeVar('Key')

_LOG = logging.getLogger(__name__)


class ReleasedValueNotFoundError(SimharnessError, LookupError):
    """No value was released under this key."""

    def __init__(self, key: Any):
        super().__init__(f'No released value found for key: {key}.')
        self.key = key


class ReleaseManager(abc.ABC, Generic[ReleasableStructure, Key]):
    """Releases values of a program, each under a key (a round number, say).

    Generic as TFF's: ``ReleaseManager[ReleasableStructure, int]`` in annotations.
    """

    @abc.abstractmethod
    async def release(self, value: Any, key: Any) -> None:
        """Releases `value` under `key`."""


class MemoryReleaseManager(ReleaseManager):
    """Keeps released values in memory: `values()` is ``{key: value}`` in release order."""

    def __init__(self) -> None:
        self._values: collections.OrderedDict = collections.OrderedDict()

    async def release(self, value: Any, key: Hashable) -> None:
        self._values[key] = await materialize_value(value)

    def remove_all(self) -> None:
        self._values.clear()

    def values(self) -> collections.OrderedDict:
        return collections.OrderedDict(self._values)


class LoggingReleaseManager(ReleaseManager):
    """Logs released values (Python `logging`, level INFO)."""

    async def release(self, value: Any, key: Any = None) -> None:
        value = await materialize_value(value)
        _LOG.info('Released value (key %s): %s', key, value)
