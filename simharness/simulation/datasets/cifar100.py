"""Federated CIFAR-100 (TFF's `tff.simulation.datasets.cifar100`), from a local file.

Elements: ``OrderedDict(coarse_label=int64, image=uint8 [32, 32, 3],
label=int64)``.
"""

from __future__ import annotations

import collections
from typing import Any, Optional

import numpy as np
import tensorflow as tf

from simharness.data.client_base import ClientData
from simharness.data.client_data import TestClientData
from simharness.data import tff_files as download
from simharness.simulation.datasets import sql_client_data

__all__ = ['get_synthetic', 'load_data']

FILENAME = 'cifar100.sqlite'


def _add_proto_parsing(dataset: Any) -> Any:
    def parse_proto(tensor_proto: Any) -> Any:
        spec = {
            'coarse_label': tf.io.FixedLenFeature(shape=(), dtype=tf.int64),
            'image': tf.io.FixedLenFeature(shape=(32, 32, 3), dtype=tf.int64),
            'label': tf.io.FixedLenFeature(shape=(), dtype=tf.int64),
        }
        parsed = tf.io.parse_example(tensor_proto, spec)
        return collections.OrderedDict(
            coarse_label=parsed['coarse_label'],
            image=tf.cast(parsed['image'], tf.uint8),
            label=parsed['label'],
        )

    return dataset.map(parse_proto, num_parallel_calls=tf.data.AUTOTUNE)


def load_data(cache_dir: Optional[str] = None) -> tuple[ClientData, ClientData]:
    """The (train, test) CIFAR-100 `ClientData` (500 / 100 clients) from ``cifar100.sqlite``.

    Raises:
        download.DatasetFileNotFoundError: the file is not there (nothing is downloaded).
    """
    path = download.get_local_file(FILENAME, cache_dir)
    train = sql_client_data.SqlClientData(path, 'train').preprocess(_add_proto_parsing)
    test = sql_client_data.SqlClientData(path, 'test').preprocess(_add_proto_parsing)
    return train, test


def _synthetic_images() -> collections.OrderedDict:
    # Five smooth colour gradients (deterministic), labels as TFF's synthetic set.
    yy, xx = np.meshgrid(np.arange(32), np.arange(32), indexing='ij')
    images = []
    for k in range(5):
        r = (xx * (4 + k) + 16 * k) % 256
        g = (yy * (3 + k) + 40 * k) % 256
        b = ((xx + yy) * (2 + k) + 80 * k) % 256
        images.append(np.stack([r, g, b], axis=-1).astype(np.uint8))
    return collections.OrderedDict(
        coarse_label=np.asarray([4, 4, 4, 8, 10], np.int64),
        image=np.stack(images),
        label=np.asarray([0, 51, 51, 88, 71], np.int64),
    )


def get_synthetic() -> ClientData:
    """Two clients with five images each, in `load_data`'s element structure."""
    return TestClientData({'synthetic1': _synthetic_images(), 'synthetic2': _synthetic_images()})
