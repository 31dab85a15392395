"""`ProgramStateManager`: federated_language's interface for saving and loading program state."""

from __future__ import annotations

import abc
from typing import Any, Generic, Optional, TypeVar, Union

from simharness.core.arrays import Serializable
from simharness.errors import SimharnessError, SimharnessValueError
from simharness.program.value_reference import MaterializableValue

__all__ = [
    'ProgramStateExistsError',
    'ProgramStateManager',
    'ProgramStateNotFoundError',
    'ProgramStateStructure',
    'ProgramStateValue',
]

#: A value of a program state (a `Serializable` is saved as its bytes).
ProgramStateValue = Union[object, MaterializableValue, Serializable]
#: A structure (nested containers) of program state values.
ProgramStateStructure = TypeVar('ProgramStateStructure')


class ProgramStateExistsError(SimharnessValueError):
    """Program state is already saved for this version."""

    def __init__(self, *, version: int, path: str):
        super().__init__(f'Program state already exists for version [{version}] at path [{path}].')
        self.version = version
        self.path = path


class ProgramStateNotFoundError(SimharnessError, LookupError):
    """No program state is saved for this version."""

    def __init__(self, version: int):
        super().__init__(f'No program state found for version: {version}.')
        self.version = version


class ProgramStateManager(abc.ABC, Generic[ProgramStateStructure]):
    """Saves and loads versions of a program's state (fault tolerance); all methods are async.

    Generic as TFF's: ``ProgramStateManager[ProgramStateStructure]`` in annotations.
    """

    @abc.abstractmethod
    async def get_versions(self) -> Optional[list[int]]:
        """The saved versions, ascending, or None when there are none."""

    @abc.abstractmethod
    async def load(self, version: int, structure: Any) -> Any:
        """The state saved as `version`, shaped like `structure`.

        Raises:
            ProgramStateNotFoundError: nothing saved for `version`.
        """

    async def load_latest(self, structure: Any) -> tuple[Any, int]:
        """``(state, version)`` of the latest saved version, or ``(None, 0)``."""
        versions = await self.get_versions()
        if not versions:
            return None, 0
        latest = max(versions)
        try:
            return await self.load(latest, structure), latest
        except ProgramStateNotFoundError:
            return None, 0

    @abc.abstractmethod
    async def save(self, program_state: Any, version: int) -> None:
        """Saves `program_state` as `version` (strictly increasing).

        Raises:
            ProgramStateExistsError: `version` is already saved.
        """
