"""Port of TFF's ``tensorflow_federated/python/program/file_release_manager_test.py`` (CSV part).

Ported: CSVFileReleaseManager init, _read/_write values, _write_value,
_append_value, _remove_values_greater_than_key and release of materialized
values and structures (same rows and key order as TFF). Left out:
materializable value references and `Serializable` values (not program values
here), the permission-error case of appending to a compressed file (TFF's
GFile), and SavedModelFileReleaseManager (not provided: no TFF 0.88 tutorial
or example uses it).
"""

import asyncio
import collections
import csv
import os
from unittest import mock

import attrs
import numpy as np
import pytest

from simharness.program import file_release_manager

CSVFileReleaseManager = file_release_manager.CSVFileReleaseManager


def run(coro):
    return asyncio.run(coro)


def _read(path):
    with open(path, newline='') as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


def _write(path, fieldnames, values):
    with open(path, 'w', newline='') as f:
        writer = csv.DictWriter(f, fieldnames)
        writer.writeheader()
        writer.writerows(values)


def _str(values):
    return [{k: str(v) for k, v in row.items()} for row in values]


@pytest.fixture
def path(tmp_path):
    return tmp_path / 'metrics.csv'


def test_creates_new_file_and_dir(tmp_path):
    for p in (
        str(tmp_path / 'a.csv'),
        tmp_path / 'b.csv',
        str(tmp_path / 'd1' / 'c.csv'),
        tmp_path / 'd2' / 'd.csv',
    ):
        CSVFileReleaseManager(p)
        assert os.path.exists(p)


def test_initializes_with_empty_and_existing_file(path):
    _write(path, ['key'], [])
    assert CSVFileReleaseManager(path)._latest_key is None
    _write(path, ['key', 'a', 'b'], [{'key': 1, 'a': 11, 'b': 12}])
    assert CSVFileReleaseManager(path)._latest_key == 1


def test_raises_value_errors(path):
    with pytest.raises(ValueError):
        CSVFileReleaseManager('')
    with pytest.raises(ValueError):
        CSVFileReleaseManager(path, key_fieldname='')


def test_raises_key_fieldname_not_found_error(path):
    _write(path, ['key', 'a', 'b'], [{'key': 1, 'a': 11, 'b': 12}])
    with pytest.raises(file_release_manager.CSVKeyFieldnameNotFoundError):
        CSVFileReleaseManager(path, key_fieldname='unknown')
    path.write_text('')
    with pytest.raises(file_release_manager.CSVKeyFieldnameNotFoundError):
        CSVFileReleaseManager(path)


@pytest.mark.parametrize(
    'fieldnames, values',
    [
        (['key', 'a', 'b'], [{'key': 1, 'a': 11, 'b': 12}]),
        (['key', 'a', 'b'], [{'key': 1, 'a': 11, 'b': 12}, {'key': 2, 'a': 21, 'b': 22}]),
        (['key', 'a', 'b'], [{'key': 1, 'a': 11}, {'key': 2, 'b': 22}]),
    ],
    ids=['one', 'two', 'sparse'],
)
def test_read_and_write_values(path, fieldnames, values):
    mngr = CSVFileReleaseManager(path)
    assert mngr._read_values() == (['key'], [])
    mngr._write_values(fieldnames, values)
    want = [{n: str(row.get(n, '')) for n in fieldnames} for row in values]
    assert _read(path) == (fieldnames, want)
    assert mngr._read_values() == (fieldnames, want)


EXISTING = {'key': 1, 'a': 11, 'b': 12}


@pytest.mark.parametrize('mode', ['write', 'append'])
@pytest.mark.parametrize(
    'value',
    [{}, {'a': 11, 'b': 12}, {'a': 11}, {'a': 11, 'b': 12, 'c': 13}],
    ids=['empty', 'same_fields', 'less_fields', 'more_fields'],
)
def test_writes_or_appends_value_to_existing_file(path, mode, value):
    _write(path, ['key', 'a', 'b'], [EXISTING])
    mngr = CSVFileReleaseManager(path, save_mode=file_release_manager.CSVSaveMode(mode))
    run(mngr._write_value(value) if mode == 'write' else mngr._append_value(value))
    fieldnames, values = _read(path)
    want_fields = ['key', 'a', 'b'] + [k for k in value if k not in ('key', 'a', 'b')]
    assert fieldnames == want_fields
    rows = []
    for v in (EXISTING, value):
        row = {n: '' for n in want_fields}
        row.update(v)
        rows.append(row)
    assert values == _str(rows)


@pytest.mark.parametrize('mode', ['write', 'append'])
@pytest.mark.parametrize('value', [{}, {'a': 11, 'b': 12, 'c': 13}], ids=['empty', 'more_fields'])
def test_writes_or_appends_value_to_empty_file(path, mode, value):
    mngr = CSVFileReleaseManager(path, save_mode=file_release_manager.CSVSaveMode(mode))
    run(mngr._write_value(value) if mode == 'write' else mngr._append_value(value))
    fieldnames, values = _read(path)
    assert fieldnames == ['key'] + list(value)
    row = {n: '' for n in fieldnames}
    row.update(value)
    assert values == _str([row])


@pytest.mark.parametrize('key', [0, 1])
def test_removes_values_from_empty_file(path, key):
    mngr = CSVFileReleaseManager(path)
    run(mngr._remove_values_greater_than_key(key))
    assert _read(path) == (['key'], [])


@pytest.mark.parametrize('key', [0, 1, 2])
def test_removes_values_from_existing_file(path, key):
    values = [{'key': 1, 'a': 11, 'b': 12}, {'key': 2, 'a': 21, 'b': 22}]
    _write(path, ['key', 'a', 'b'], values)
    mngr = CSVFileReleaseManager(path)
    run(mngr._remove_values_greater_than_key(key))
    fieldnames, actual = _read(path)
    assert fieldnames == (['key'] if key == 0 else ['key', 'a', 'b'])
    assert actual == _str(values[0:key])


@attrs.define
class TestAttrs:
    __test__ = False  # not a pytest class
    a: int
    b: int


NT1 = collections.namedtuple('NT1', ['a', 'b', 'c'])
NT2 = collections.namedtuple('NT2', ['a'])
NT3 = collections.namedtuple('NT3', ['x', 'y'])

RELEASES = [
    ('none', None, [{'key': '1', '': ''}]),
    ('bool', True, [{'key': '1', '': 'True'}]),
    ('int', 1, [{'key': '1', '': '1'}]),
    ('str', 'abc', [{'key': '1', '': 'abc'}]),
    ('numpy_int', np.int32(1), [{'key': '1', '': '1'}]),
    ('numpy_array', np.array([1] * 3, np.int32), [{'key': '1', '': '[1, 1, 1]'}]),
    ('attrs', TestAttrs(1, 2), [{'key': '1', '': 'TestAttrs(a=1, b=2)'}]),
    ('list', [True, 1, 'abc'], [{'key': '1', '0': 'True', '1': '1', '2': 'abc'}]),
    ('list_empty', [], [{'key': '1'}]),
    (
        'list_nested',
        [[True, 1, 'abc'], [5]],
        [{'key': '1', '0/0': 'True', '0/1': '1', '0/2': 'abc', '1/0': '5'}],
    ),
    (
        'dict_ordered',
        {'a': True, 'b': 1, 'c': 'abc'},
        [{'key': '1', 'a': 'True', 'b': '1', 'c': 'abc'}],
    ),
    (
        'dict_unordered',
        {'c': True, 'b': 1, 'a': 'abc'},
        [{'key': '1', 'a': 'abc', 'b': '1', 'c': 'True'}],
    ),
    ('dict_empty', {}, [{'key': '1'}]),
    (
        'dict_nested',
        {'x': {'a': True, 'b': 1, 'c': 'abc'}, 'y': {'a': 5}},
        [{'key': '1', 'x/a': 'True', 'x/b': '1', 'x/c': 'abc', 'y/a': '5'}],
    ),
    ('named_tuple', NT1(a=True, b=1, c='abc'), [{'key': '1', 'a': 'True', 'b': '1', 'c': 'abc'}]),
    (
        'named_tuple_nested',
        NT3(x=NT1(a=True, b=1, c='abc'), y=NT2(a=5)),
        [{'key': '1', 'x/a': 'True', 'x/b': '1', 'x/c': 'abc', 'y/a': '5'}],
    ),
]


@pytest.mark.parametrize('name, value, expected', RELEASES, ids=[r[0] for r in RELEASES])
def test_release_writes_value(path, name, value, expected):
    mngr = CSVFileReleaseManager(path)
    run(mngr.release(value, key=1))
    _, actual = _read(path)
    assert actual == expected
    assert [list(r) for r in actual] == [list(r) for r in expected]


@pytest.mark.parametrize('existing', [False, True], ids=['empty_file', 'existing_file'])
def test_release_removes_values_greater_than_key(path, existing):
    if existing:
        _write(path, ['key', 'a', 'b'], [{'key': 1, 'a': 11, 'b': 12}])
    mngr = CSVFileReleaseManager(path)
    with mock.patch.object(mngr, '_remove_values_greater_than_key') as remove:
        run(mngr.release({'a': 11, 'b': 12}, key=1))
        remove.assert_called_once_with(0)
    assert mngr._latest_key == 1


def test_release_again_rewrites_later_rounds(path):
    mngr = CSVFileReleaseManager(path)
    for k in (1, 2, 3):
        run(mngr.release({'loss': float(k)}, key=k))
    run(mngr.release({'loss': 9.0, 'acc': 0.5}, key=2))
    fieldnames, rows = _read(path)
    assert fieldnames == ['key', 'loss', 'acc']
    assert rows == [
        {'key': '1', 'loss': '1.0', 'acc': ''},
        {'key': '2', 'loss': '9.0', 'acc': '0.5'},
    ]
