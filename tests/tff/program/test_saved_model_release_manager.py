"""Port of TFF's ``tensorflow_federated/python/program/file_release_manager_test.py``
(its ``SavedModelFileReleaseManager`` cases).

Ported: the root directory is created (str and path-like), type and value
errors of root_dir and prefix, the path of a key, releasing with keys of
several types, and get_value of released values and structures (tensors come
back as numpy values, strings as bytes; value references materialized;
None, lists, dicts, namedtuples, nested) and a missing key. Left out: TFF's
mocked `file_utils.write_saved_model` calls (we check what is read back),
Serializable and attrs values (they do not convert to tensors: an error, as
in TFF).
"""

import asyncio
import collections
import os

import numpy as np
import pytest
import tensorflow as tf

from simharness.core import types as computation_types
from simharness.program import release_manager, saved_model_release_manager, value_reference

SavedModelFileReleaseManager = saved_model_release_manager.SavedModelFileReleaseManager


class _Reference(value_reference.MaterializableValueReference):
    def __init__(self, value):
        self._value = value

    @property
    def type_signature(self):
        return computation_types.TensorType(np.int32)

    async def get_value(self):
        return self._value


_NamedTuple1 = collections.namedtuple('_NamedTuple1', ['a', 'b', 'c', 'd', 'e'])


def test_creates_new_dir(tmp_path):
    SavedModelFileReleaseManager(str(tmp_path / 'a'))
    SavedModelFileReleaseManager(tmp_path / 'b')
    assert (tmp_path / 'a').is_dir() and (tmp_path / 'b').is_dir()


@pytest.mark.parametrize('root_dir', [None, True, 1, []])
def test_raises_type_error_with_root_dir(root_dir):
    with pytest.raises(TypeError):
        SavedModelFileReleaseManager(root_dir)


def test_raises_value_error_with_root_dir_empty():
    with pytest.raises(ValueError):
        SavedModelFileReleaseManager('')


@pytest.mark.parametrize('prefix', [None, True, 1, []])
def test_raises_type_error_with_prefix(prefix, tmp_path):
    with pytest.raises(TypeError):
        SavedModelFileReleaseManager(tmp_path, prefix=prefix)


@pytest.mark.parametrize('prefix,key,expected', [('a_', 123, 'a_123'), ('', 123, '123')])
def test_returns_path_with_root_dir_and_prefix(tmp_path, prefix, key, expected):
    manager = SavedModelFileReleaseManager(tmp_path, prefix=prefix)
    assert manager._get_path_for_key(key) == os.path.join(str(tmp_path), expected)


def _release_and_get(tmp_path, value, key=1):
    manager = SavedModelFileReleaseManager(tmp_path)

    async def body():
        await manager.release(value, key=key)
        return await manager.get_value(key)

    return asyncio.run(body())


def test_returns_saved_value_with_keys(tmp_path):
    manager = SavedModelFileReleaseManager(tmp_path)
    keys = [-1, 'a']

    async def body():
        for i, key in enumerate(keys):
            await manager.release(i, key=key)
        return [await manager.get_value(key) for key in keys]

    assert asyncio.run(body()) == [0, 1]


# TFF's value cases, released together (a SavedModel write takes about a second).
_VALUES = collections.OrderedDict(
    none=(None, None),
    bool=(True, np.bool_(True)),
    int=(1, np.int32(1)),
    str=('a', b'a'),
    tensor_array=(tf.constant([1] * 3), np.array([1] * 3, np.int32)),
    numpy_array=(np.array([1] * 3, np.int32), np.array([1] * 3, np.int32)),
    reference=(_Reference(np.int32(1)), np.int32(1)),
    list=(
        [True, 1, 'a', _Reference(2), None],
        [np.bool_(True), np.int32(1), b'a', np.int32(2), None],
    ),
    list_nested=([[True, 1], [5]], [[np.bool_(True), np.int32(1)], [np.int32(5)]]),
    dict=(
        {'a': True, 'b': 1, 'c': 'a', 'd': _Reference(2), 'e': None},
        {'a': np.bool_(True), 'b': np.int32(1), 'c': b'a', 'd': np.int32(2), 'e': None},
    ),
    dict_nested=(
        {'x': {'a': 1}, 'y': {'a': 5}},
        {'x': {'a': np.int32(1)}, 'y': {'a': np.int32(5)}},
    ),
    named_tuple=(
        _NamedTuple1(True, 1, 'a', _Reference(2), None),
        _NamedTuple1(np.bool_(True), np.int32(1), b'a', np.int32(2), None),
    ),
)


def _check(actual, expected):
    # A namedtuple comes back as a namedtuple of the same name and fields (not the class).
    if isinstance(expected, tuple) and hasattr(expected, '_fields'):
        assert type(actual).__name__ == type(expected).__name__
        assert actual._fields == expected._fields
    else:
        assert type(actual) is type(expected)
    flat_actual = [None if x is None else np.asarray(x).tolist() for x in tf.nest.flatten(actual)]
    flat_expected = [
        None if x is None else np.asarray(x).tolist() for x in tf.nest.flatten(expected)
    ]
    assert flat_actual == flat_expected


def test_returns_saved_values(tmp_path):
    actual = _release_and_get(
        tmp_path, collections.OrderedDict((name, value) for name, (value, _) in _VALUES.items())
    )
    assert sorted(actual) == sorted(_VALUES)  # a SavedModel keeps dicts with sorted keys
    for name, (_, expected) in _VALUES.items():
        _check(actual[name], expected)


@pytest.mark.parametrize(
    'value,expected',
    [(None, None), ('a', b'a'), ([], []), ({}, {})],
    ids=['none', 'str', 'list_empty', 'dict_empty'],
)
def test_returns_saved_value(tmp_path, value, expected):
    _check(_release_and_get(tmp_path, value), expected)


def test_raises_released_value_not_found_error(tmp_path):
    manager = SavedModelFileReleaseManager(tmp_path)
    with pytest.raises(release_manager.ReleasedValueNotFoundError, match='key: 7'):
        asyncio.run(manager.get_value(7))


def test_release_overwrites_a_key(tmp_path):
    manager = SavedModelFileReleaseManager(tmp_path)

    async def body():
        await manager.release([1, 2], key=1)
        await manager.release({'a': 3}, key=1)
        return await manager.get_value(1)

    assert asyncio.run(body()) == {'a': 3}
