"""Port of TFF's ``tensorflow_federated/python/program/file_program_state_manager_test.py``.

Ported: init, get_versions, the version <-> path helpers, load/save round
trips of materialized values and structures (Python scalars come back with
TF's dtypes: int32, bool, bytes), not-found and already-exists errors,
removing old program state (keep_total, keep_first, keep_every_k), remove_all
and load_latest; value references (materialized on save) and `Serializable`
values (saved as their bytes, rebuilt with the structure's class; more in
test_dataset_data_source.py). Left out: the SavedModel file format (we
write .npz).
"""

import asyncio
import collections
import os
import shutil
import tempfile

import attrs
import numpy as np
import pytest

import simharness as tff
from simharness.core.arrays import Serializable
from simharness.program import file_program_state_manager, program_state_manager
from simharness.program import value_reference

FileProgramStateManager = file_program_state_manager.FileProgramStateManager


def run(coro):
    return asyncio.run(coro)


NamedPair = collections.namedtuple('NamedPair', ['a', 'b'])


@attrs.define
class State:
    a: object
    b: object


def test_creates_new_dir_with_root_dir_str_and_path_like(tmp_path):
    FileProgramStateManager(str(tmp_path / 'a'))
    FileProgramStateManager(tmp_path / 'b')
    assert (tmp_path / 'a').is_dir() and (tmp_path / 'b').is_dir()


def test_raises_value_error_with_root_dir_empty():
    with pytest.raises(ValueError):
        FileProgramStateManager('')


@pytest.mark.parametrize('count', [1, 2, 10])
def test_returns_versions_with_program_state_only(tmp_path, count):
    for i in range(count):
        os.mkdir(tmp_path / f'program_state_{i}')
    assert run(FileProgramStateManager(tmp_path, keep_total=0).get_versions()) == list(range(count))


@pytest.mark.parametrize('prefix', ['file_', 'program_state_'])
def test_returns_versions_with_program_state_and_other_files(tmp_path, prefix):
    for i in range(10):
        os.mkdir(tmp_path / f'program_state_{i}')
        os.close(tempfile.mkstemp(prefix=os.path.join(tmp_path, prefix))[0])
    assert run(FileProgramStateManager(tmp_path, keep_total=0).get_versions()) == list(range(10))


def test_returns_none_if_root_does_not_exist_or_is_empty(tmp_path):
    mngr = FileProgramStateManager(tmp_path / 'root')
    assert run(mngr.get_versions()) is None
    shutil.rmtree(tmp_path / 'root')
    assert run(mngr.get_versions()) is None
    for _ in range(3):
        os.close(tempfile.mkstemp(prefix=os.path.join(tmp_path, 'file_'))[0])
    assert run(FileProgramStateManager(tmp_path).get_versions()) is None


@pytest.mark.parametrize(
    'path, expected', [('program_state_123', 123), ('/tmp/program_state_123', 123)]
)
def test_returns_version_with_path(tmp_path, path, expected):
    assert FileProgramStateManager(tmp_path)._get_version_for_path(path) == expected


@pytest.mark.parametrize('path', ['program_state_abc', 'other_123', '/tmp/program_state_'])
def test_returns_none_with_path(tmp_path, path):
    assert FileProgramStateManager(tmp_path)._get_version_for_path(path) is None


def test_returns_path_with_root_dir_and_prefix(tmp_path):
    mngr = FileProgramStateManager(tmp_path, prefix='a_prefix_')
    assert mngr._get_path_for_version(123) == os.path.join(tmp_path, 'a_prefix_123')


ROUND_TRIPS = [
    ('none', None, None),
    ('bool', True, np.bool_(True)),
    ('int', 1, np.int32(1)),
    ('str', 'abc', b'abc'),
    ('numpy_int', np.int32(1), np.int32(1)),
    ('numpy_array', np.array([1] * 3, np.int32), np.array([1] * 3, np.int32)),
    ('list', [True, 1, 'abc'], [np.bool_(True), np.int32(1), b'abc']),
    ('list_empty', [], []),
    (
        'list_nested',
        [[True, 1, 'abc'], [5]],
        [[np.bool_(True), np.int32(1), b'abc'], [np.int32(5)]],
    ),
    (
        'dict_ordered',
        {'a': True, 'b': 1, 'c': 'abc'},
        {'a': np.bool_(True), 'b': np.int32(1), 'c': b'abc'},
    ),
    (
        'dict_unordered',
        {'c': True, 'b': 1, 'a': 'abc'},
        {'c': np.bool_(True), 'b': np.int32(1), 'a': b'abc'},
    ),
    (
        'dict_nested',
        {'x': {'a': True, 'b': 1}, 'y': {'c': 5}},
        {'x': {'a': np.bool_(True), 'b': np.int32(1)}, 'y': {'c': np.int32(5)}},
    ),
    ('named_tuple', NamedPair(True, 1.5), NamedPair(np.bool_(True), np.float32(1.5))),
    ('attrs', State(a=np.arange(3.0), b='x'), State(a=np.arange(3.0), b=b'x')),
]


def assert_same(actual, expected):
    assert type(actual) is type(expected) or (
        isinstance(expected, np.generic) and np.asarray(actual).dtype == expected.dtype
    )
    if isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert_same(a, e)
    elif isinstance(expected, dict):
        assert list(actual) == list(expected)
        for k in expected:
            assert_same(actual[k], expected[k])
    elif attrs.has(type(expected)):
        assert_same(attrs.astuple(actual, recurse=False), attrs.astuple(expected, recurse=False))
    elif isinstance(expected, np.ndarray):
        np.testing.assert_array_equal(actual, expected)
        assert actual.dtype == expected.dtype
    else:
        assert actual == expected


@pytest.mark.parametrize('name, value, expected', ROUND_TRIPS, ids=[c[0] for c in ROUND_TRIPS])
def test_saves_and_loads_program_state(tmp_path, name, value, expected):
    mngr = FileProgramStateManager(tmp_path)
    run(mngr.save(value, 1))
    assert os.listdir(tmp_path) == ['program_state_1']
    assert_same(run(mngr.load(1, value)), expected)


def test_load_raises_program_state_not_found_error(tmp_path):
    mngr = FileProgramStateManager(tmp_path)
    with pytest.raises(program_state_manager.ProgramStateNotFoundError):
        run(mngr.load(0, None))


def test_save_raises_program_state_exists_error(tmp_path):
    mngr = FileProgramStateManager(tmp_path)
    run(mngr.save(1, 1))
    with pytest.raises(program_state_manager.ProgramStateExistsError):
        run(mngr.save(1, 1))


def test_load_latest(tmp_path):
    mngr = FileProgramStateManager(tmp_path)
    assert run(mngr.load_latest([0])) == (None, 0)
    for v in (1, 2, 3):
        run(mngr.save([v * 10], v))
    state, version = run(mngr.load_latest([0]))
    assert version == 3 and state == [np.int32(30)]


def _ten_states(root):
    for i in range(10):
        os.mkdir(root / f'program_state_{i}')


@pytest.mark.parametrize(
    'keep_total, keep_first, keep_every_k, expected',
    [
        (0, True, 1, list(range(10))),
        (3, True, 1, [0, 8, 9]),
        (3, False, 1, [7, 8, 9]),
        (1, True, 1, [0]),
        (1, False, 1, [9]),
        (3, True, 3, [0, 6, 9]),
        (3, False, 3, [3, 6, 9]),
        (0, True, 3, [0, 3, 6, 9]),
        (5, True, 3, [0, 3, 6, 9]),
    ],
    ids=[
        'keep_total_0',
        'keep_first_true',
        'keep_first_false',
        'only_first',
        'only_last',
        'every_k_keep_first_true',
        'every_k_keep_first_false',
        'every_k_unlimited_total',
        'every_k_total_has_not_reached',
    ],
)
def test_removes_old_program_state(tmp_path, keep_total, keep_first, keep_every_k, expected):
    _ten_states(tmp_path)
    mngr = FileProgramStateManager(
        tmp_path, keep_total=keep_total, keep_first=keep_first, keep_every_k=keep_every_k
    )
    run(mngr._remove_old_program_state())
    assert sorted(os.listdir(tmp_path)) == sorted(f'program_state_{i}' for i in expected)


def test_save_removes_old_program_state(tmp_path):
    mngr = FileProgramStateManager(tmp_path, keep_total=2, keep_first=False)
    for v in range(4):
        run(mngr.save(v, v))
    assert run(mngr.get_versions()) == [2, 3]


def test_remove_all(tmp_path):
    mngr = FileProgramStateManager(tmp_path)
    run(mngr.remove_all())
    assert os.listdir(tmp_path) == []
    _ten_states(tmp_path)
    run(mngr.remove_all())
    assert os.listdir(tmp_path) == []


class _Reference(value_reference.MaterializableValueReference):
    def __init__(self, value):
        self._value = value

    @property
    def type_signature(self):
        return tff.TensorType(np.int32)

    async def get_value(self):
        return self._value


class _Serializable(Serializable):
    def __init__(self, a):
        self.a = a

    @classmethod
    def from_bytes(cls, buffer):
        return cls(int.from_bytes(buffer, 'big'))

    def to_bytes(self):
        return self.a.to_bytes(2, 'big')


def test_save_materializes_references_and_serializes_serializables(tmp_path):
    manager = FileProgramStateManager(tmp_path)
    run(manager.save([_Reference(np.int32(7)), _Serializable(300)], 1))
    value, serializable = run(manager.load(1, [0, _Serializable(0)]))
    assert value == 7
    assert isinstance(serializable, _Serializable) and serializable.a == 300


def test_program_state_managers_are_generic_as_tffs():
    # TFF's program logic annotates ``ProgramStateManager[ProgramStateStructure]`` (its
    # program example does at import time).
    import typing
    from simharness import program as tff_program

    for cls in (tff_program.ProgramStateManager, tff_program.FileProgramStateManager):
        alias = cls[tff_program.ProgramStateStructure]
        assert typing.get_origin(alias) is cls
    assert issubclass(tff_program.FileProgramStateManager, tff_program.ProgramStateManager)
