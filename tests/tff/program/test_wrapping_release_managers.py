"""Port of TFF's ``tensorflow_federated/python/program/release_manager_test.py`` (the wrappers).

FilteringReleaseManager (type errors; values and structures filtered and
delegated, or not delegated when all is filtered; empty structures dropped;
NotFilterableError for a NamedTuple's fields), GroupingReleaseManager
(type and value errors, delegation to all), PeriodicReleaseManager (bad
periodicity, int and timedelta periodicity), DelayedReleaseManager (bad
delay, delegation after the delay). TFF's program_test_utils classes are
written here; tensors are left out of the leaf cases (numpy values stand for
them).
"""

import asyncio
import collections
import datetime
from unittest import mock

import attrs
import numpy as np
import pytest

import simharness as tff
from simharness.program import release_manager, wrapping_release_managers as wrm


@attrs.define
class _Attrs:
    a: object
    b: object


_NamedTuple1 = collections.namedtuple('_NamedTuple1', ['a', 'b', 'c'])
_NamedTuple2 = collections.namedtuple('_NamedTuple2', ['a'])
_NamedTuple3 = collections.namedtuple('_NamedTuple3', ['x', 'y'])


def _mock_manager():
    return mock.AsyncMock(spec=release_manager.ReleaseManager)


def _released(manager):
    manager.release.assert_called_once()
    _, args, kwargs = manager.release.mock_calls[0]
    assert kwargs == {'key': 1}
    return args[0]


@pytest.mark.parametrize('release_mngr', [None, True, 1, 'a', []])
def test_filtering_init_raises_type_error_with_release_manager(release_mngr):
    with pytest.raises(TypeError):
        wrm.FilteringReleaseManager(release_mngr, lambda _: True)


@pytest.mark.parametrize(
    'value,filter_fn,expected',
    [
        (None, lambda _: True, None),
        (1, lambda _: True, 1),
        ('a', lambda _: True, 'a'),
        (np.int32(1), lambda _: True, np.int32(1)),
        (_Attrs(1, 2), lambda _: True, _Attrs(1, 2)),
        ([True, 1, 'a', _Attrs(3, 4)], lambda _: True, [True, 1, 'a', _Attrs(3, 4)]),
        ([True, 1, 'a', _Attrs(3, 4)], lambda path: path in ((1,), (2,)), [1, 'a']),
        ({'a': True, 'b': 1, 'c': 'a'}, lambda path: path in (('b',), ('c',)), {'b': 1, 'c': 'a'}),
        (_NamedTuple1(True, 1, 'a'), lambda _: True, _NamedTuple1(True, 1, 'a')),
        ([True, 1, 'a', [], [2]], lambda _: True, [True, 1, 'a', [2]]),
        ([True, 1, 'a', [], [2]], lambda path: path != (4, 0), [True, 1, 'a']),
        ({'a': True, 'd': {}, 'e': {'a': 2}}, lambda _: True, {'a': True, 'e': {'a': 2}}),
        (
            collections.OrderedDict(z=1, a=2),
            lambda path: path == ('a',),
            collections.OrderedDict(a=2),
        ),
        (
            _NamedTuple3(_NamedTuple1(True, 1, 'a'), _NamedTuple2(5)),
            lambda _: True,
            _NamedTuple3(_NamedTuple1(True, 1, 'a'), _NamedTuple2(5)),
        ),
    ],
    ids=[
        'none',
        'int',
        'str',
        'numpy',
        'attrs',
        'list_filter_none',
        'list_filter_some',
        'dict_filter_some',
        'named_tuple_filter_none',
        'list_empty_dropped',
        'list_nested_filtered',
        'dict_empty_dropped',
        'ordered_dict',
        'named_tuple_nested',
    ],
)
def test_release_filters_and_delegates_value(value, filter_fn, expected):
    manager = _mock_manager()
    filtering = wrm.FilteringReleaseManager(manager, filter_fn)
    asyncio.run(filtering.release(value, key=1))
    actual = _released(manager)
    assert type(actual) is type(expected)
    assert actual == expected


@pytest.mark.parametrize(
    'value',
    [
        None,
        True,
        1,
        'a',
        np.array([1] * 3, np.int32),
        _Attrs(1, 2),
        [True, 1],
        [],
        [[1], [5]],
        {'a': 1},
        {},
        {'x': {'a': 1}, 'y': {'a': 5}},
        _NamedTuple1(True, 1, 'a'),
    ],
)
def test_release_filters_and_does_not_delegate_value(value):
    manager = _mock_manager()
    asyncio.run(wrm.FilteringReleaseManager(manager, lambda _: False).release(value, key=1))
    manager.release.assert_not_called()


@pytest.mark.parametrize(
    'value,filter_fn',
    [
        (_NamedTuple1(True, 1, 'a'), lambda path: path == (1,)),
        (_NamedTuple3(_NamedTuple1(True, 1, 'a'), _NamedTuple2(5)), lambda path: path[0] == 0),
    ],
    ids=['named_tuple', 'named_tuple_nested'],
)
def test_release_raises_not_filterable_error(value, filter_fn):
    manager = _mock_manager()
    filtering = wrm.FilteringReleaseManager(manager, filter_fn)
    with pytest.raises(wrm.NotFilterableError, match='cannot be filtered'):
        asyncio.run(filtering.release(value, key=1))
    manager.release.assert_not_called()


def test_grouping_release_delegates_value():
    managers = [_mock_manager(), _mock_manager(), _mock_manager()]
    asyncio.run(wrm.GroupingReleaseManager(managers).release(1, key=1))
    for manager in managers:
        manager.release.assert_called_once_with(1, key=1)


def test_grouping_release_to_memory_managers():
    memories = [tff.program.MemoryReleaseManager() for _ in range(2)]
    asyncio.run(wrm.GroupingReleaseManager(memories).release({'a': 1}, key=3))
    assert [m.values() for m in memories] == [{3: {'a': 1}}, {3: {'a': 1}}]


@pytest.mark.parametrize('release_mngrs', [None, True, 1, 'a', [True, 1, 'a']])
def test_grouping_init_raises_type_error_with_release_managers(release_mngrs):
    with pytest.raises(TypeError):
        wrm.GroupingReleaseManager(release_mngrs)


def test_grouping_init_raises_value_error_with_release_manager_empty():
    with pytest.raises(ValueError):
        wrm.GroupingReleaseManager([])


@pytest.mark.parametrize(
    'periodicity', [-1, 0, datetime.timedelta(seconds=-1), datetime.timedelta()]
)
def test_periodic_init_raises_value_error_with_period(periodicity):
    with pytest.raises(ValueError):
        wrm.PeriodicReleaseManager(_mock_manager(), periodicity)


def test_periodic_init_raises_type_error_with_period():
    with pytest.raises(TypeError):
        wrm.PeriodicReleaseManager(_mock_manager(), 'a')


@pytest.mark.parametrize(
    'periodicity,total,expected',
    [
        (1, 10, 10),
        (2, 10, 5),
        (10, 10, 1),
        (3, 10, 3),
        (11, 10, 0),
    ],
    ids=[
        'all_releases',
        'some_releases',
        'last_release',
        'drops_trailing_releases',
        'drops_all_releases',
    ],
)
def test_periodic_release_with_periodicity_int(periodicity, total, expected):
    manager = _mock_manager()
    periodic = wrm.PeriodicReleaseManager(manager, periodicity)

    async def body():
        for i in range(total):
            await periodic.release(i, key=i)

    asyncio.run(body())
    assert manager.release.call_count == expected
    assert [call.kwargs['key'] for call in manager.release.call_args_list] == [
        i for i in range(total) if (i + 1) % periodicity == 0
    ]


@pytest.mark.parametrize(
    'periodicity,total,expected',
    [
        (datetime.timedelta(seconds=1), 10, 10),
        (datetime.timedelta(seconds=2), 10, 5),
        (datetime.timedelta(seconds=10), 10, 1),
        (datetime.timedelta(seconds=11), 10, 0),
    ],
    ids=['all_releases', 'some_releases', 'last_release', 'drops_all_releases'],
)
def test_periodic_release_with_periodicity_timedelta(periodicity, total, expected):
    manager = _mock_manager()
    start = datetime.datetime(2023, 1, 1)
    with mock.patch('datetime.datetime', wraps=datetime.datetime) as mock_datetime:
        mock_datetime.now.side_effect = [
            start + datetime.timedelta(seconds=i) for i in range(total + 1)
        ]
        periodic = wrm.PeriodicReleaseManager(manager, periodicity)

        async def body():
            for i in range(total):
                await periodic.release(i, key=i)

        asyncio.run(body())
    assert manager.release.call_count == expected


@pytest.mark.parametrize('delay', [-1, 0])
def test_delayed_init_raises_value_error_with_bad_delay(delay):
    with pytest.raises(ValueError):
        wrm.DelayedReleaseManager(_mock_manager(), delay)


@pytest.mark.parametrize(
    'delay,total,expected',
    [(1, 10, 10), (3, 10, 8), (10, 10, 1), (11, 10, 0)],
    ids=['all_releases', 'some_releases', 'last_release', 'drops_all_releases'],
)
def test_delayed_release_with_delay(delay, total, expected):
    manager = _mock_manager()
    delayed = wrm.DelayedReleaseManager(manager, delay)

    async def body():
        for i in range(total):
            await delayed.release(i, key=i)

    asyncio.run(body())
    assert manager.release.call_count == expected
