"""`TensorBoardReleaseManager`: released values as TensorBoard summaries (TFF's)."""

from __future__ import annotations

import os
from typing import Any, Union

import numpy as np
import tensorflow as tf

from simharness.errors import SimharnessValueError
from simharness.program import structure_utils
from simharness.program.release_manager import ReleaseManager

__all__ = ['TensorBoardReleaseManager']


class TensorBoardReleaseManager(ReleaseManager):
    """Writes each released leaf as a scalar (0-d) or a histogram (arrays) at step `key`.

    Leaves that are not numbers (strings) are skipped. The summary name is the
    leaf's key path (``'client_work/train/loss'``).

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
        with self._writer.as_default():
            for name, leaf in structure_utils.flatten_with_name(value):
                if hasattr(leaf, 'numpy'):
                    leaf = leaf.numpy()
                array = np.asarray(leaf)
                if array.dtype.kind not in 'biuf':
                    continue
                if array.ndim == 0:
                    tf.summary.scalar(name, array, step=key)
                else:
                    tf.summary.histogram(name, array, step=key)
        self._writer.flush()
