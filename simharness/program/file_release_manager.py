"""`CSVFileReleaseManager`: released values as rows of a CSV file (TFF's).

A release with key k first drops the rows with keys >= k (a resumed program
rewrites its rounds), then adds ``{key_fieldname: k, 'a/b': ...}`` (the value
flattened with its key paths). New names add columns (the file is rewritten).
"""

from __future__ import annotations

import collections
import csv
import enum
import os
from typing import Any, Iterable, Mapping, Optional, Sequence, Union

import attrs
import numpy as np

from simharness.atomic import atomic_open
from simharness.errors import SimharnessValueError
from simharness.program import structure_utils
from simharness.program.release_manager import ReleaseManager
from simharness.program.value_reference import materialize_value

__all__ = ['CSVFileReleaseManager', 'CSVKeyFieldnameNotFoundError', 'CSVSaveMode']


class CSVKeyFieldnameNotFoundError(SimharnessValueError):
    """The CSV file has no key column."""

    def __init__(self, file_path: Any, key_fieldname: str):
        super().__init__(
            f'Expected the file {file_path} to contain the key fieldname of {key_fieldname}. It '
            'is possible that the file was not created by a `tff.program.CSVFileReleaseManager` '
            'or was created with a different `key_fieldname`.'
        )


@enum.unique
class CSVSaveMode(enum.Enum):
    APPEND = 'append'
    WRITE = 'write'


def _normalize(value: Any) -> Any:
    if attrs.has(type(value)):
        return value  # written as its repr, as TFF
    if hasattr(value, 'element_spec') and hasattr(value, 'reduce'):  # a tf.data.Dataset
        value = list(value)
    if hasattr(value, 'numpy'):
        value = value.numpy()
    return np.array(value).tolist()


class CSVFileReleaseManager(ReleaseManager):
    """Releases values (metrics, say) to a CSV file, one row per key.

    Args:
        file_path: the CSV file (created with a header if missing).
        save_mode: `CSVSaveMode.APPEND` (append a row when no column is new)
            or `CSVSaveMode.WRITE` (rewrite the file every release).
        key_fieldname: the key's column.

    Raises:
        SimharnessValueError: an empty path or key name.
        CSVKeyFieldnameNotFoundError: an existing file without the key column.
    """

    def __init__(
        self,
        file_path: Union[str, os.PathLike],
        save_mode: CSVSaveMode = CSVSaveMode.APPEND,
        key_fieldname: str = 'key',
    ):
        if not file_path:
            raise SimharnessValueError('Expected `file_path` to not be an empty string.')
        if not key_fieldname:
            raise SimharnessValueError('Expected `key_fieldname` to not be an empty string.')
        self._file_path = os.fspath(file_path)
        directory = os.path.dirname(self._file_path)
        if directory:
            os.makedirs(directory, exist_ok=True)
        self._save_mode = save_mode
        self._key_fieldname = key_fieldname
        self._latest_key: Optional[int] = None
        if os.path.exists(self._file_path):
            fieldnames, values = self._read_values()
            if key_fieldname not in fieldnames:
                raise CSVKeyFieldnameNotFoundError(self._file_path, key_fieldname)
            if values:
                self._latest_key = int(values[-1][key_fieldname])
        else:
            self._write_values([key_fieldname], [])

    def _read_values(self) -> tuple[list[str], list[dict[str, str]]]:
        with open(self._file_path, newline='', encoding='utf-8') as f:
            reader = csv.DictReader(f)
            fieldnames = list(reader.fieldnames) if reader.fieldnames is not None else []
            return fieldnames, list(reader)

    def _write_values(self, fieldnames: Sequence[str], values: Iterable[Mapping[str, Any]]) -> None:
        with atomic_open(self._file_path, 'w', newline='') as f:
            writer = csv.DictWriter(f, fieldnames=list(fieldnames))
            writer.writeheader()
            writer.writerows(values)

    async def _write_value(self, value: Mapping[str, Any]) -> None:
        fieldnames, values = self._read_values()
        fieldnames.extend(k for k in value if k not in fieldnames)
        values.append(dict(value))
        self._write_values(fieldnames, values)

    async def _append_value(self, value: Mapping[str, Any]) -> None:
        fieldnames, _ = self._read_values()
        if all(k in fieldnames for k in value):
            with open(self._file_path, 'a', newline='', encoding='utf-8') as f:
                csv.DictWriter(f, fieldnames=fieldnames).writerow(value)
        else:
            await self._write_value(value)

    async def _remove_values_greater_than_key(self, key: int) -> None:
        if self._latest_key is None or key > self._latest_key:
            return
        if key < 0:
            self._write_values([self._key_fieldname], [])
            self._latest_key = None
            return
        kept_fields = [self._key_fieldname]
        kept = []
        for row in self._read_values()[1]:
            if int(row[self._key_fieldname]) <= key:
                kept_fields.extend(k for k in row if k not in kept_fields)
                kept.append(row)
        self._write_values(kept_fields, kept)
        self._latest_key = key

    async def release(self, value: Any, key: int) -> None:
        """Writes `value` (flattened by key paths) as the row of `key`, after dropping keys >= `key`."""
        value = await materialize_value(value)
        await self._remove_values_greater_than_key(key - 1)
        row = collections.OrderedDict([(self._key_fieldname, key)])
        for name, leaf in structure_utils.flatten_with_name(value, attrs_as_leaves=True):
            row[name] = _normalize(leaf)
        if self._save_mode == CSVSaveMode.APPEND:
            await self._append_value(row)
        else:
            await self._write_value(row)
        self._latest_key = key
