"""Writing a federated data set into TFF's SQLite format and reading it back (TFF's utilities).

`save_to_sql_client_data` writes every client's ``tf.train.Example``s
(features from a flat ``Mapping[str, TensorSpec]`` element: strings as bytes,
floats as float lists, integers as int64 lists) into the ``examples`` and
``client_metadata`` tables `SqlClientData` reads; `load_and_parse_sql_client_data`
reads them back, parsed into the given element spec.
"""

from __future__ import annotations

import collections
import logging
import os
import sqlite3
from typing import Any, Callable, Mapping, Optional, Sequence

import tensorflow as tf

from simharness.atomic import atomic_path
from simharness.data.client_base import ClientData
from simharness.errors import SimharnessTypeError, SimharnessValueError
from simharness.simulation.datasets import sql_client_data

__all__ = [
    'ElementSpecCompatibilityError',
    'load_and_parse_sql_client_data',
    'save_to_sql_client_data',
]

_LOG = logging.getLogger(__name__)
_DEFAULT_SPLIT_NAME = 'default_split'


class ElementSpecCompatibilityError(SimharnessTypeError):
    """The element spec is not a flat ``Mapping[str, tf.TensorSpec]`` (or differs between clients)."""


def _validate_element_spec(element_spec: Any) -> None:
    if not isinstance(element_spec, Mapping):
        raise ElementSpecCompatibilityError(
            f'{element_spec} has type {type(element_spec)}, but expected '
            '`Mapping[str, tf.TensorSpec]`.',
            expected='Mapping[str, tf.TensorSpec]',
            actual=type(element_spec),
        )
    for key, spec in element_spec.items():
        if not isinstance(key, str):
            raise ElementSpecCompatibilityError(
                f'{key} has type {type(key)}, but expected str.', expected=str, actual=type(key)
            )
        if not isinstance(spec, tf.TensorSpec):
            raise ElementSpecCompatibilityError(
                f'{spec} has type {type(spec)}, but expected `tf.TensorSpec`.',
                expected=tf.TensorSpec,
                actual=type(spec),
            )


def _feature_fn(spec: Any) -> Callable[[Any], Any]:
    if spec.dtype == tf.string:
        return lambda t: tf.train.Feature(bytes_list=tf.train.BytesList(value=[t.numpy()]))
    if spec.dtype.is_floating:
        return lambda t: tf.train.Feature(float_list=tf.train.FloatList(value=t.numpy().flatten()))
    if spec.dtype.is_integer:
        return lambda t: tf.train.Feature(int64_list=tf.train.Int64List(value=t.numpy().flatten()))
    raise ElementSpecCompatibilityError(
        f'Unsupported dtype {spec.dtype}.',
        expected='string, floating or integer dtype',
        actual=spec.dtype,
    )


def _build_serializer(element_spec: Mapping[str, Any]) -> Callable[[Mapping[str, Any]], bytes]:
    _validate_element_spec(element_spec)
    features = collections.OrderedDict((k, _feature_fn(s)) for k, s in element_spec.items())

    def serializer(element: Mapping[str, Any]) -> bytes:
        feature = {k: features[k](t) for k, t in element.items()}
        return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()

    return serializer


def _build_parser(element_spec: Mapping[str, Any]) -> Callable[[Any], Mapping[str, Any]]:
    _validate_element_spec(element_spec)
    parse_specs = collections.OrderedDict()
    for key, spec in element_spec.items():
        if spec.dtype == tf.string:
            dtype = tf.string
        elif spec.dtype.is_floating:
            dtype = tf.float32
        elif spec.dtype.is_integer:
            dtype = tf.int64
        else:
            raise SimharnessValueError(f'unsupported dtype {spec.dtype}')
        parse_specs[key] = tf.io.FixedLenFeature(shape=spec.shape, dtype=dtype)

    def parser(tensor_proto: Any) -> Mapping[str, Any]:
        parsed = tf.io.parse_example(tensor_proto, parse_specs)
        return collections.OrderedDict(
            (k, tf.cast(parsed[k], s.dtype)) for k, s in element_spec.items()
        )

    return parser


def save_to_sql_client_data(
    client_ids: Sequence[str],
    dataset_fn: Callable[[str], Any],
    database_filepath: str,
    allow_overwrite: bool = False,
    split_names_by_client_id: Optional[Mapping[str, str]] = None,
) -> None:
    """Writes each client's dataset into a SQLite file that `SqlClientData` reads.

    Raises:
        FileExistsError: the file exists and `allow_overwrite` is False.
        ElementSpecCompatibilityError: elements that are not a flat mapping of
            tensor specs, or that differ between clients.
        SimharnessValueError: a client without a split name in
            `split_names_by_client_id`.
    """
    if os.path.exists(database_filepath) and not allow_overwrite:
        raise FileExistsError(
            f'A file already exists at {database_filepath}; pass '
            'allow_overwrite=True to replace it.'
        )
    example_id = client_ids[0]
    example_spec = dataset_fn(example_id).element_spec
    if not isinstance(example_spec, Mapping):
        raise ElementSpecCompatibilityError(
            'The element_spec of the local dataset must be a Mapping, found '
            f'{example_spec} instead',
            expected=Mapping,
            actual=example_spec,
        )
    for key, val in example_spec.items():
        if not isinstance(val, tf.TensorSpec):
            raise ElementSpecCompatibilityError(
                'The element_spec of the local dataset must be a Mapping[str, TensorSpec], and '
                f'must not be nested, found {key}:{val} instead.',
                expected=tf.TensorSpec,
                actual=val,
            )
    serializer = _build_serializer(example_spec)
    directory = os.path.dirname(os.path.abspath(database_filepath))
    os.makedirs(directory, exist_ok=True)
    with atomic_path(database_filepath) as tmp:
        with sqlite3.connect(tmp) as con:
            con.execute(
                'CREATE TABLE examples (split_name TEXT NOT NULL, client_id TEXT NOT '
                'NULL, serialized_example_proto BLOB NOT NULL);'
            )
            con.execute(
                'CREATE TABLE client_metadata (client_id TEXT NOT NULL, split_name '
                'TEXT NOT NULL, num_examples INTEGER NOT NULL);'
            )
            for client_id in client_ids:
                local_ds = dataset_fn(client_id)
                if local_ds.element_spec != example_spec:
                    raise ElementSpecCompatibilityError(
                        'All the clients must share the same dataset element type. The local '
                        f"dataset of client '{client_id}' has element type "
                        f'{local_ds.element_spec}, which is different from client '
                        f"'{example_id}' which has element type {example_spec}.",
                        expected=example_spec,
                        actual=local_ds.element_spec,
                    )
                if split_names_by_client_id is not None:
                    split_name = split_names_by_client_id.get(client_id)
                    if split_name is None:
                        raise SimharnessValueError(f'No split defined for client {client_id}')
                else:
                    split_name = _DEFAULT_SPLIT_NAME
                count = 0
                for elem in local_ds:
                    count += 1
                    con.execute(
                        'INSERT INTO examples (split_name, client_id, '
                        'serialized_example_proto) VALUES (?, ?, ?);',
                        (split_name, client_id, serializer(elem)),
                    )
                con.execute(
                    'INSERT INTO client_metadata (client_id, split_name, num_examples) '
                    'VALUES (?, ?, ?);',
                    (client_id, split_name, count),
                )
        con.close()
    _LOG.info('SQL database saved at %s', database_filepath)


def load_and_parse_sql_client_data(
    database_filepath: str, element_spec: Mapping[str, Any], split_name: Optional[str] = None
) -> ClientData:
    """`SqlClientData` of the file, its examples parsed into `element_spec`.

    Raises:
        FileNotFoundError: no such file.
        ElementSpecCompatibilityError: `element_spec` is not a flat mapping of
            tensor specs.
    """
    parser = _build_parser(element_spec)
    if not os.path.exists(database_filepath):
        raise FileNotFoundError(f'No such file or directory: {database_filepath}')

    def dataset_parser(ds: Any) -> Any:
        return ds.map(parser, num_parallel_calls=tf.data.AUTOTUNE)

    return sql_client_data.SqlClientData(database_filepath, split_name).preprocess(dataset_parser)
