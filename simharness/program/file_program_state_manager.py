"""`FileProgramStateManager`: program state saved in versioned directories (TFF's, with .npz files).

::

    root_dir/
      program_state_0/state.npz     leaf_0, leaf_1, ... (the state's leaves in
      program_state_3/state.npz     structure_utils.flatten order)

TFF writes a SavedModel per version; we write the leaves as one ``.npz``
(written to a temporary name, then renamed: a crash never leaves half a
version). `load` packs them into the `structure` it is given, as TFF's does.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import tempfile
from typing import Any, Optional, Union

import numpy as np

from simharness.core.arrays import Serializable
from simharness.errors import SimharnessTypeError, SimharnessValueError
from simharness.program import structure_utils, value_reference
from simharness.program.program_state_manager import (
    ProgramStateExistsError,
    ProgramStateManager,
    ProgramStateNotFoundError,
    ProgramStateStructure,
)

__all__ = ['FileProgramStateManager']

_LOG = logging.getLogger(__name__)
_FILE = 'state.npz'


def _to_array(leaf: Any) -> np.ndarray:
    """A leaf as an array, with TF's dtypes for Python scalars (int32, float32, bytes)."""
    if hasattr(leaf, 'numpy'):
        leaf = leaf.numpy()
    if isinstance(leaf, bool):
        return np.asarray(leaf, np.bool_)
    if isinstance(leaf, int):
        return np.asarray(leaf, np.int32)
    if isinstance(leaf, float):
        return np.asarray(leaf, np.float32)
    if isinstance(leaf, str):
        leaf = leaf.encode('utf-8')
    a = np.asarray(leaf)
    if a.dtype == object or a.dtype.kind == 'U':
        try:
            a = a.astype(bytes)
        except (TypeError, ValueError) as e:
            raise SimharnessTypeError(
                f'cannot save a program state leaf of type {type(leaf).__name__}: {leaf!r:.80}',
                expected='numbers, arrays, strings or None',
                actual=type(leaf),
            ) from e
    return a


def _from_array(a: np.ndarray) -> Any:
    if a.dtype.kind == 'S':
        return a.item() if a.ndim == 0 else a.astype(object)
    return a[()] if a.ndim == 0 else a


def _save_leaf(i: int, leaf: Any) -> tuple[str, np.ndarray]:
    if leaf is None:
        return f'none_{i}', np.zeros(0, np.int8)
    if isinstance(leaf, Serializable):
        return f'serialized_{i}', np.frombuffer(leaf.to_bytes(), np.uint8)
    return f'leaf_{i}', _to_array(leaf)


def _load_leaf(npz: Any, i: int, templates: list) -> Any:
    if f'none_{i}' in npz.files:
        return None
    if f'serialized_{i}' in npz.files:
        template = templates[i] if i < len(templates) else None
        if not isinstance(template, Serializable):
            raise SimharnessTypeError(
                f'program state leaf {i} was saved as a Serializable, but the structure given '
                f'to load has {template!r} there',
                expected=Serializable,
                actual=type(template),
            )
        return type(template).from_bytes(npz[f'serialized_{i}'].tobytes())
    return _from_array(npz[f'leaf_{i}'])


class FileProgramStateManager(ProgramStateManager[ProgramStateStructure]):
    """Saves program state under `root_dir`, one directory per version.

    Args:
        root_dir: the directory (created if missing).
        prefix: the version directories' name prefix.
        keep_total: how many versions to keep (<= 0: no limit).
        keep_first: always keep the first version.
        keep_every_k: keep only versions divisible by k (and the latest).

    Raises:
        SimharnessValueError: an empty `root_dir`.
    """

    def __init__(
        self,
        root_dir: Union[str, os.PathLike],
        prefix: str = 'program_state_',
        keep_total: int = 5,
        keep_first: bool = True,
        keep_every_k: int = 1,
    ):
        if not root_dir:
            raise SimharnessValueError('Expected `root_dir` to not be an empty string.')
        if not prefix:
            raise SimharnessValueError('Expected `prefix` to not be an empty string.')
        if keep_every_k < 1:
            raise SimharnessValueError(f'Expected `keep_every_k` to be >= 1, got {keep_every_k}.')
        os.makedirs(root_dir, exist_ok=True)
        self._root_dir = os.fspath(root_dir)
        self._prefix = prefix
        self._keep_total = keep_total
        self._keep_first = keep_first
        self._keep_every_k = keep_every_k

    def _get_path_for_version(self, version: int) -> str:
        return os.path.join(self._root_dir, f'{self._prefix}{version}')

    _path = _get_path_for_version

    def _get_version_for_path(self, path: Union[str, os.PathLike]) -> Optional[int]:
        name = os.path.basename(os.fspath(path))
        if not name.startswith(self._prefix):
            return None
        try:
            return int(name[len(self._prefix) :])
        except ValueError:
            return None

    async def get_versions(self) -> Optional[list[int]]:
        if not os.path.isdir(self._root_dir):
            return None
        versions = [
            v
            for v in (self._get_version_for_path(n) for n in os.listdir(self._root_dir))
            if v is not None
        ]
        return sorted(versions) or None

    async def load(self, version: int, structure: Any) -> Any:
        path = os.path.join(self._path(version), _FILE)
        if not os.path.isfile(path):
            raise ProgramStateNotFoundError(version)
        templates = structure_utils.flatten(structure)
        with np.load(path, allow_pickle=False) as npz:
            leaves = [_load_leaf(npz, i, templates) for i in range(len(npz.files))]
        _LOG.info('Program state loaded: %s', path)
        return structure_utils.pack_as(structure, leaves)

    async def save(self, program_state: Any, version: int) -> None:
        """Saves `program_state` (value references materialized first) as `version`.

        `Serializable` leaves (a data source iterator, say) are saved as their
        `to_bytes`; `load` rebuilds them with the `from_bytes` of the class of
        the structure's leaf.

        Raises:
            ProgramStateExistsError: `version` is already saved.
            SimharnessTypeError: a leaf that cannot be saved.
        """
        path = self._path(version)
        if os.path.exists(path):
            raise ProgramStateExistsError(version=version, path=self._root_dir)
        program_state = await value_reference.materialize_value(program_state)
        arrays = dict(
            _save_leaf(i, leaf) for i, leaf in enumerate(structure_utils.flatten(program_state))
        )
        tmp = tempfile.mkdtemp(dir=self._root_dir, prefix='.tmp_')
        try:
            np.savez(os.path.join(tmp, _FILE), **arrays)  # type: ignore[arg-type]
            os.replace(tmp, path)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        _LOG.info('Program state saved: %s', path)
        await self._remove_old_program_state()

    async def _remove(self, version: int) -> None:
        path = self._path(version)
        if os.path.exists(path):
            shutil.rmtree(path)
            _LOG.info('Program state removed: %s', path)

    async def _remove_old_program_state(self) -> None:
        if self._keep_every_k == 1 and self._keep_total <= 0:
            return
        versions = await self.get_versions() or []
        keep = [
            v
            for i, v in enumerate(versions)
            if v % self._keep_every_k == 0
            or i == len(versions) - 1
            or (self._keep_first and i == 0)
        ]
        if 0 < self._keep_total < len(keep):
            start = 1 if self._keep_first else 0
            del keep[start : len(keep) - (self._keep_total - start)]
        await asyncio.gather(*[self._remove(v) for v in versions if v not in keep])

    async def remove_all(self) -> None:
        """Removes every saved version."""
        await asyncio.gather(*[self._remove(v) for v in (await self.get_versions() or [])])
