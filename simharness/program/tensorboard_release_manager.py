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

    Leaves that are not booleans or numbers (strings, None) are skipped.
    Without the `tensorboard` package (``tf.summary.scalar`` needs it) the
    same summaries are written with ``tf.summary.write`` and TensorBoard's
    plugin tags. The summary name is the
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
                    self._histogram(name, leaf, array, key)
                else:
                    self._scalar(name, leaf, array, key)
        self._writer.flush()

    @staticmethod
    def _scalar(name: str, leaf: Any, array: np.ndarray, step: int) -> None:
        try:
            tf.summary.scalar(name, leaf, step=step)
        except Exception as e:  # pylint: disable=broad-except
            if type(e).__name__ != 'TBNotInstalledError':
                raise
            _write(name, tf.constant(array.astype(np.float32)), step, 'scalars')

    @staticmethod
    def _histogram(name: str, leaf: Any, array: np.ndarray, step: int) -> None:
        try:
            tf.summary.histogram(name, leaf, step=step)
        except Exception as e:  # pylint: disable=broad-except
            if type(e).__name__ != 'TBNotInstalledError':
                raise
            _write(name, tf.constant(_buckets(array)), step, 'histograms')


def _write(name: str, tensor: Any, step: int, plugin: str) -> None:
    """`tf.summary.write` with TensorBoard's plugin tag (when TensorBoard is not installed)."""
    from tensorflow.core.framework import summary_pb2  # pylint: disable=import-outside-toplevel

    metadata = summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name=plugin)
    )
    tf.summary.write(name, tensor, step=step, metadata=metadata.SerializeToString())


def _buckets(array: np.ndarray, count: int = 30) -> np.ndarray:
    """TensorBoard's histogram tensor: ``[count, 3]`` rows of (left edge, right edge, count)."""
    values = array.astype(np.float64).reshape(-1)
    if values.size == 0:
        return np.zeros((0, 3), np.float64)
    lo, hi = float(values.min()), float(values.max())
    if lo == hi:
        return np.asarray([[lo, hi, float(values.size)]], np.float64)
    counts, edges = np.histogram(values, bins=count, range=(lo, hi))
    return np.stack([edges[:-1], edges[1:], counts.astype(np.float64)], axis=1)
