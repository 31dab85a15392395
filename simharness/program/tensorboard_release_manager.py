"""`TensorBoardReleaseManager`: released values as TensorBoard summaries (TFF's)."""

from __future__ import annotations

import os
from typing import Any, Union

import numpy as np
import tensorflow as tf

from simharness.errors import SimharnessValueError
from simharness.program import structure_utils
from simharness.program.release_manager import ReleaseManager
from simharness.program.value_reference import materialize_value

__all__ = ['TensorBoardReleaseManager']


class TensorBoardReleaseManager(ReleaseManager):
    """Writes each released leaf as a scalar (0-d) or a histogram (arrays) at step `key`.

    Leaves that are not booleans or numbers (strings, None) are skipped. The summary name
    is the leaf's key path (``'client_work/train/loss'``).

    Raises:
        SimharnessValueError: an empty `summary_dir`.
    """

    def __init__(self, summary_dir: Union[str, os.PathLike]):
        if not summary_dir:
            raise SimharnessValueError('Expected `summary_dir` to not be an empty string.')
        self._summary_dir = os.fspath(summary_dir)
        os.makedirs(self._summary_dir, exist_ok=True)
        self._writer = tf.summary.create_file_writer(self._summary_dir)

    async def release(self, value: Any, key: int) -> None:
        value = await materialize_value(value)
        with self._writer.as_default():
            for name, leaf in structure_utils.flatten_with_name(value, attrs_as_leaves=True):
                if isinstance(leaf, tf.data.Dataset):
                    leaf = list(leaf)
                # Summaries hold booleans and numbers only; anything else is skipped.
                array = np.array(leaf)
                if array.dtype.kind not in 'biuf':
                    continue
                if array.shape:
                    tf.summary.histogram(name, leaf, step=key)
                else:
                    tf.summary.scalar(name, leaf, step=key)
        self._writer.flush()
