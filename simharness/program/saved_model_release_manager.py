"""`SavedModelFileReleaseManager` (``tff.program``): released values as TensorFlow SavedModels.

Each release writes ``root_dir/<prefix><key>`` (a SavedModel of a module
whose call returns the value; leaves that convert to tensors become
variables), written to a temporary directory first and renamed. Value
references are materialized first. `get_value(key)` reads it back, tensors
as numpy values, in the value's structure (as TFF's: mappings come back as
dicts with sorted keys, namedtuples as namedtuples of the same name and
fields).
"""

from __future__ import annotations

import asyncio
import os
import random
from typing import Any, Union

import tensorflow as tf

from simharness.errors import SimharnessTypeError, SimharnessValueError
from simharness.program import structure_utils
from simharness.program.release_manager import (
    Key,
    ReleasableStructure,
    ReleasedValueNotFoundError,
    ReleaseManager,
)
from simharness.program.value_reference import materialize_value

__all__ = ['SavedModelFileReleaseManager']


class _ValueModule(tf.Module):
    """A module whose call returns `value` (TFF's file_utils module)."""

    def __init__(self, value: Any):
        super().__init__()
        self._value = value

    @tf.function(input_signature=())
    def __call__(self) -> Any:
        return self._value


def _map(fn: Any, value: Any) -> Any:
    return structure_utils.pack_as(value, [fn(leaf) for leaf in structure_utils.flatten(value)])


def _wrap_as_variable(value: Any) -> Any:
    try:
        return tf.Variable(initial_value=value)
    except (ValueError, TypeError):
        return value


def _write_saved_model(value: Any, path: str) -> None:
    temp_path = f'{path}_temp{random.randint(1000, 9999)}'
    if tf.io.gfile.exists(temp_path):
        tf.io.gfile.rmtree(temp_path)
    tf.io.gfile.makedirs(temp_path)
    # Leaves as variables: saved one by one, not as one large constant.
    module = _ValueModule(_map(_wrap_as_variable, value))
    tf.saved_model.save(module, temp_path, signatures={})
    if tf.io.gfile.exists(path):
        tf.io.gfile.rmtree(path)
    tf.io.gfile.rename(temp_path, path)


def _read_saved_model(path: str) -> Any:
    value = tf.saved_model.load(path)()

    def read(leaf: Any) -> Any:
        if isinstance(leaf, tf.Variable):
            leaf = leaf.read_value()
        return leaf.numpy() if isinstance(leaf, tf.Tensor) else leaf

    return _map(read, value)


class SavedModelFileReleaseManager(ReleaseManager[ReleasableStructure, Key]):
    """Releases values to ``root_dir/<prefix><key>`` as SavedModels.

    Only values that convert to tensors (and structures of them, None) can
    be released; the structure comes back with `get_value`.

    Args:
        root_dir: the directory (created if missing).
        prefix: the file names' prefix.

    Raises:
        SimharnessTypeError: `root_dir` is not a str or path, or `prefix` not a str.
        SimharnessValueError: `root_dir` is empty.
    """

    def __init__(self, root_dir: Union[str, os.PathLike], prefix: str = 'release_'):
        if not isinstance(root_dir, (str, os.PathLike)):
            raise SimharnessTypeError(
                f'Expected `root_dir` to be a str or os.PathLike, found {type(root_dir).__name__}.',
                expected=(str, os.PathLike),
                actual=type(root_dir),
            )
        if not root_dir:
            raise SimharnessValueError('Expected `root_dir` to not be an empty string.')
        if not isinstance(prefix, str):
            raise SimharnessTypeError(
                f'Expected `prefix` to be a str, found {type(prefix).__name__}.',
                expected=str,
                actual=type(prefix),
            )
        root_dir = os.fspath(root_dir)
        if not tf.io.gfile.exists(root_dir):
            tf.io.gfile.makedirs(root_dir)
        self._root_dir = root_dir
        self._prefix = prefix

    def _get_path_for_key(self, key: Any) -> str:
        return os.path.join(self._root_dir, f'{self._prefix}{key}')

    async def release(self, value: Any, key: Any) -> None:
        """Writes `value` (value references materialized) as the SavedModel of `key`."""
        materialized = await materialize_value(value)
        await asyncio.get_running_loop().run_in_executor(
            None, _write_saved_model, materialized, self._get_path_for_key(key)
        )

    async def get_value(self, key: Any) -> Any:
        """The value released under `key` (tensors as numpy values).

        Raises:
            ReleasedValueNotFoundError: nothing was released under `key`.
        """
        path = self._get_path_for_key(key)
        if not tf.io.gfile.exists(path):
            raise ReleasedValueNotFoundError(key)
        return await asyncio.get_running_loop().run_in_executor(None, _read_saved_model, path)
