"""`FilePerUserClientData`: one file per client, read by a `tf.data` function of its path (TFF's).

The client id -> path table is built inside the traced function, so
`dataset_computation` sends a worker only ids and reads the file there.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Mapping

import tensorflow as tf

from simharness.data.client_base import ClientData
from simharness.errors import SimharnessTypeError, SimharnessValueError

__all__ = ['FilePerUserClientData']


class FilePerUserClientData(ClientData):
    """A `ClientData` that maps each client id to one file and the file to a dataset.

    Args:
        client_ids_to_files: client id -> file path.
        dataset_fn: a function from a path (a str or a string tensor) to a
            `tf.data.Dataset` (e.g. ``tf.data.TFRecordDataset``).

    Raises:
        SimharnessTypeError: `client_ids_to_files` is not a mapping.
        SimharnessValueError: no clients.
    """

    def __init__(self, client_ids_to_files: Mapping[str, str], dataset_fn: Callable[[Any], Any]):
        if not isinstance(client_ids_to_files, Mapping):
            raise SimharnessTypeError(
                f'Expected collections.abc.Mapping (client id -> path) for '
                f'client_ids_to_files, found {type(client_ids_to_files).__name__}',
                expected='Mapping[str, str]',
                actual=type(client_ids_to_files),
            )
        if not client_ids_to_files:
            raise SimharnessValueError('`client_ids` must have at least one client ID')
        self._client_ids = sorted(client_ids_to_files)
        self._client_ids_to_files = dict(client_ids_to_files)
        self._dataset_fn = dataset_fn
        keys = [str(k) for k in client_ids_to_files]
        values = [str(v) for v in client_ids_to_files.values()]

        def serializable_dataset_fn(client_id: Any) -> Any:
            table = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(keys, values), '')
            return dataset_fn(table.lookup(client_id))

        self._serializable_dataset_fn = serializable_dataset_fn
        self._element_type_structure = serializable_dataset_fn(
            tf.constant(self._client_ids[0])
        ).element_spec

    @property
    def serializable_dataset_fn(self) -> Callable[[Any], Any]:
        return self._serializable_dataset_fn

    @property
    def client_ids(self) -> list[str]:
        return list(self._client_ids)

    def create_tf_dataset_for_client(self, client_id: str) -> Any:
        if client_id not in self._client_ids_to_files:
            raise self._unknown_client(client_id)
        dataset = self._dataset_fn(self._client_ids_to_files[client_id])
        try:
            tf.nest.assert_same_structure(dataset.element_spec, self._element_type_structure)
            same = all(
                a == b
                for a, b in zip(
                    tf.nest.flatten(dataset.element_spec),
                    tf.nest.flatten(self._element_type_structure),
                )
            )
        except (TypeError, ValueError):
            same = False
        if not same:
            raise SimharnessValueError(
                f'client {client_id!r}: dataset elements {dataset.element_spec} differ from '
                f'the element_type_structure {self._element_type_structure}'
            )
        return dataset

    @property
    def element_type_structure(self) -> Any:
        return self._element_type_structure

    @classmethod
    def create_from_dir(
        cls, path: str, create_tf_dataset_fn: Callable[[Any], Any] = (tf.data.TFRecordDataset)
    ) -> 'FilePerUserClientData':
        """One client per file in the directory `path` (not recursive); ids are file names."""
        mapping = {name: os.path.join(path, name) for name in tf.io.gfile.listdir(path)}
        return cls(mapping, create_tf_dataset_fn)

    def __repr__(self) -> str:
        return f'FilePerUserClientData({len(self._client_ids)} clients)'
