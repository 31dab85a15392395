"""Release managers that wrap others (``tff.program``): filtering, grouping, periodic, delayed.

* `FilteringReleaseManager(release_manager, filter_fn)`: releases the items
  whose path (a tuple of keys and indices) `filter_fn` keeps; structures left
  empty are dropped, nothing is released when nothing is kept.
* `GroupingReleaseManager(release_managers)`: releases to every one of them
  (concurrently).
* `PeriodicReleaseManager(release_manager, periodicity)`: every n-th value
  (an int), or a value when at least a `datetime.timedelta` has passed since
  the last one released.
* `DelayedReleaseManager(release_manager, delay)`: from the `delay`-th
  release on.
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Union

import attrs

from simharness.errors import SimharnessError, SimharnessTypeError, SimharnessValueError
from simharness.program.release_manager import Key, ReleasableStructure, ReleaseManager

__all__ = [
    'DelayedReleaseManager',
    'FilteringReleaseManager',
    'GroupingReleaseManager',
    'NotFilterableError',
    'PeriodicReleaseManager',
]


class NotFilterableError(SimharnessError):
    """The structure cannot be filtered (the fields of a `NamedTuple`)."""


_FILTERED = object()


def _check_release_manager(value: Any, what: str = 'release_manager') -> None:
    if not isinstance(value, ReleaseManager):
        raise SimharnessTypeError(
            f'Expected `{what}` to be a tff.program.ReleaseManager, found '
            f'{type(value).__name__} {value!r}.',
            expected=ReleaseManager,
            actual=type(value),
        )


def _is_nested(value: Any) -> bool:
    # As dm-tree (TFF's `tree`), without attrs classes: those are leaves here.
    return isinstance(value, (Mapping, list, tuple)) and not isinstance(value, (str, bytes))


class FilteringReleaseManager(ReleaseManager[ReleasableStructure, Key]):
    """Filters values (by the paths of their items) before releasing them to `release_manager`.

    `filter_fn(path)` is called with the path of every item (leaf) of the
    value: a tuple of the mapping keys and sequence indices that lead to it
    (``()`` for a bare value). Structures whose items are all filtered out are
    filtered out too. The fields of a `NamedTuple` cannot be filtered
    (`NotFilterableError`).

    Args:
        release_manager: where the filtered values go.
        filter_fn: ``path -> bool`` (True: keep).

    Raises:
        SimharnessTypeError: `release_manager` is not a `ReleaseManager`.
    """

    def __init__(
        self,
        release_manager: ReleaseManager,
        filter_fn: Callable[[tuple[Union[str, int], ...]], bool],
    ):
        _check_release_manager(release_manager)
        self._release_manager = release_manager
        self._filter_fn = filter_fn

    def _filter(self, path: tuple, value: Any) -> Any:
        if not _is_nested(value) or attrs.has(type(value)):
            return value if self._filter_fn(path) else _FILTERED
        if isinstance(value, Mapping):
            items = [(k, self._filter(path + (k,), v)) for k, v in value.items()]
            kept = [(k, v) for k, v in items if v is not _FILTERED]
            if not kept:
                return _FILTERED
            return type(value)(kept)  # type: ignore[call-arg]
        elements = [self._filter(path + (i,), v) for i, v in enumerate(value)]
        kept_elements = [v for v in elements if v is not _FILTERED]
        if not kept_elements:
            return _FILTERED
        if isinstance(value, tuple) and hasattr(value, '_fields'):
            if len(kept_elements) != len(elements):
                missing = [f for f, v in zip(value._fields, elements) if v is _FILTERED]
                raise NotFilterableError(
                    'The fields of a `NamedTuple` cannot be filtered. Expected '
                    f'{type(value)} to have fields {list(value._fields)}, found it was missing '
                    f'fields {missing}.'
                )
            return type(value)(*kept_elements)
        return type(value)(kept_elements)

    async def release(self, value: Any, key: Any) -> None:
        """Releases what of `value` the filter keeps (nothing if it keeps nothing).

        Raises:
            NotFilterableError: a field of a `NamedTuple` would be filtered out.
        """
        filtered = self._filter((), value)
        if filtered is not _FILTERED:
            await self._release_manager.release(filtered, key=key)


class GroupingReleaseManager(ReleaseManager[ReleasableStructure, Key]):
    """Releases each value to every release manager of `release_managers` (concurrently).

    Raises:
        SimharnessValueError: `release_managers` is empty.
        SimharnessTypeError: it is not a sequence of `ReleaseManager` s.
    """

    def __init__(self, release_managers: Sequence[ReleaseManager]):
        if not isinstance(release_managers, Sequence) or isinstance(release_managers, str):
            raise SimharnessTypeError(
                'Expected `release_managers` to be a sequence of tff.program.ReleaseManager, '
                f'found {type(release_managers).__name__}.',
                expected=Sequence,
                actual=type(release_managers),
            )
        if not release_managers:
            raise SimharnessValueError('Expected `release_managers` to not be empty.')
        for i, release_manager in enumerate(release_managers):
            _check_release_manager(release_manager, f'release_managers[{i}]')
        self._release_managers = release_managers

    async def release(self, value: Any, key: Any) -> None:
        await asyncio.gather(*[m.release(value, key=key) for m in self._release_managers])


class PeriodicReleaseManager(ReleaseManager[ReleasableStructure, Key]):
    """Releases every `periodicity`-th value (an int), or at most one per `periodicity` (a timedelta).

    An int n releases the n-th, 2n-th, ... values; a `datetime.timedelta`
    releases a value when at least that long has passed since the last
    released one (or since construction).

    Raises:
        SimharnessValueError: `periodicity` is an int < 1 or a timedelta under a second.
        SimharnessTypeError: `periodicity` is neither.
    """

    def __init__(
        self, release_manager: ReleaseManager, periodicity: Union[int, datetime.timedelta]
    ):
        if isinstance(periodicity, bool) or not isinstance(periodicity, (int, datetime.timedelta)):
            raise SimharnessTypeError(
                'Expected `periodicity` to be a positive integer or `datetime.timedelta`, found '
                f'{type(periodicity).__name__}.',
                expected=(int, datetime.timedelta),
                actual=type(periodicity),
            )
        if (isinstance(periodicity, int) and periodicity < 1) or (
            isinstance(periodicity, datetime.timedelta) and periodicity.total_seconds() < 1.0
        ):
            raise SimharnessValueError(
                'Expected `periodicity` to be a positive integer or '
                f'`datetime.timedelta`, found {periodicity}.'
            )
        self._release_manager = release_manager
        self._periodicity = periodicity
        self._count = 0
        self._timestamp = datetime.datetime.now()

    async def release(self, value: Any, key: Any) -> None:
        if isinstance(self._periodicity, int):
            self._count += 1
            if self._count % self._periodicity == 0:
                await self._release_manager.release(value, key=key)
        else:
            now = datetime.datetime.now()
            if now >= self._timestamp + self._periodicity:
                self._timestamp = now
                await self._release_manager.release(value, key=key)


class DelayedReleaseManager(ReleaseManager[ReleasableStructure, Key]):
    """Releases values from the `delay`-th call of `release` on (a delay of 1: every value).

    Raises:
        SimharnessValueError: `delay` < 1.
    """

    def __init__(self, release_manager: ReleaseManager, delay: int):
        if delay < 1:
            raise SimharnessValueError(f'The `delay` must be positive but found {delay}.')
        self._release_manager = release_manager
        self._count = 0
        self._delay = delay

    async def release(self, value: Any, key: Any) -> None:
        self._count += 1
        if self._count >= self._delay:
            await self._release_manager.release(value, key=key)
