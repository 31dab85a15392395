"""`SqlClientData`: TFF's SQLite-backed `ClientData` (the format of TFF's published data sets).

The database has a table ``examples`` (``split_name``, ``client_id``,
``serialized_example_proto``: a serialized ``tf.train.Example``) and a table
``client_metadata`` (``client_id``, ``split_name``, ``num_examples``). A
client's dataset is a ``tf.data.experimental.SqlDataset`` of its serialized
examples, read where the dataset is built (on a worker, for
`dataset_computation` on the process stack).

Nothing is read at load but the client ids: each client's rows are read by its
own query when its dataset is iterated, and
`create_tf_dataset_from_all_clients` runs one query per client, in turn, so
memory does not grow with the file (EMNIST's is ~1 GB; measured in
docs/benchmarks.md, "A 3,400-client EMNIST file streams").
"""

from __future__ import annotations

import logging
import os
import sqlite3
from typing import Any, Callable, Optional

import tensorflow as tf

from simharness.data.client_base import ClientData
from simharness.errors import SimharnessTypeError, SimharnessValueError

__all__ = ['DatabaseFormatError', 'SqlClientData']

_LOG = logging.getLogger(__name__)

REQUIRED_TABLES = frozenset(['examples', 'client_metadata'])
REQUIRED_EXAMPLES_COLUMNS = frozenset(['split_name', 'client_id', 'serialized_example_proto'])


class DatabaseFormatError(SimharnessValueError):
    """The SQLite file lacks TFF's tables or columns."""


def _connect(path: str) -> sqlite3.Connection:
    if not os.path.isfile(path):
        raise SimharnessValueError(f'SQLite database {path} does not exist')
    return sqlite3.connect(f'file:{path}?mode=ro', uri=True)


def _check_database_format(path: str) -> None:
    con = _connect(path)
    try:
        tables = {r[0] for r in con.execute('SELECT name FROM sqlite_master;')}
        missing = REQUIRED_TABLES - tables
        if missing:
            raise DatabaseFormatError(
                f'Database at [{path}] does not have the required {sorted(missing)} tables.'
            )
        columns = {r[1] for r in con.execute('PRAGMA table_info(examples);')}
        missing = REQUIRED_EXAMPLES_COLUMNS - columns
        if missing:
            raise DatabaseFormatError(
                f'Database table `examples` must contain columns '
                f'{sorted(REQUIRED_EXAMPLES_COLUMNS)}, but is missing columns {sorted(missing)}.'
            )
    finally:
        con.close()


def _fetch_client_ids(path: str, split_name: Optional[str]) -> list[str]:
    con = _connect(path)
    try:
        if split_name is None:
            rows = con.execute('SELECT DISTINCT client_id FROM client_metadata;')
        else:
            rows = con.execute(
                'SELECT DISTINCT client_id FROM client_metadata WHERE split_name = ?;',
                (split_name,),
            )
        return [r[0] for r in rows]
    finally:
        con.close()


class SqlClientData(ClientData):
    """A `ClientData` backed by a SQLite file in TFF's format.

    Elements are the serialized ``tf.train.Example`` protos (``tf.string``
    scalars); TFF's loaders parse them with `preprocess`.

    Args:
        database_filepath: the SQLite file.
        split_name: only the clients and examples of this split (None: all).

    Raises:
        SimharnessTypeError: a path that is not a str.
        SimharnessValueError: a missing file; `DatabaseFormatError` for a
            file without TFF's tables.
    """

    def __init__(self, database_filepath: str, split_name: Optional[str] = None):
        if not isinstance(database_filepath, str):
            raise SimharnessTypeError(
                f'database_filepath must be a str, got {type(database_filepath).__name__}',
                expected=str,
                actual=type(database_filepath),
            )
        _check_database_format(database_filepath)
        self._filepath = database_filepath
        self._split_name = split_name
        self._client_ids = sorted(_fetch_client_ids(database_filepath, split_name))
        self._id_set = frozenset(self._client_ids)
        _LOG.info('Loaded %d client ids from SQL database.', len(self._client_ids))
        self._element_type_structure = tf.TensorSpec(dtype=tf.string, shape=())

    def _create_dataset(self, client_id: Any) -> Any:
        # The id goes into the query as TFF's does; quotes in it are doubled
        # so that an id cannot change the query.
        quoted = tf.strings.regex_replace(client_id, "'", "''")
        parts = ["SELECT serialized_example_proto FROM examples WHERE client_id = '", quoted, "'"]
        if self._split_name is not None:
            parts.extend([" and split_name ='", self._split_name.replace("'", "''"), "'"])
        return tf.data.experimental.SqlDataset(
            driver_name='sqlite',
            data_source_name=self._filepath,
            query=tf.strings.join(parts),
            output_types=tf.string,
        )

    def check_client_id(self, client_id: Any) -> None:
        # A set lookup: `client_ids` is a copy of thousands of ids (3,400 for EMNIST).
        if not isinstance(client_id, str) or client_id not in self._id_set:
            raise self._unknown_client(client_id)

    @property
    def serializable_dataset_fn(self) -> Callable[[Any], Any]:
        return self._create_dataset

    @property
    def client_ids(self) -> list[str]:
        return list(self._client_ids)

    @property
    def element_type_structure(self) -> Any:
        return self._element_type_structure

    def __repr__(self) -> str:
        return (
            f'SqlClientData({self._filepath!r}, split {self._split_name!r}, '
            f'{len(self._client_ids)} clients)'
        )
