"""Federated EMNIST (TFF's `tff.simulation.datasets.emnist`), from a local file.

Elements: ``OrderedDict(label=int32 scalar, pixels=float32 [28, 28])``, pixel
1.0 the background (as TFF's data).
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

FILENAME = 'emnist_all.sqlite'


def _add_proto_parsing(dataset: Any) -> Any:
    def parse_proto(tensor_proto: Any) -> Any:
        parse_spec = {
            'pixels': tf.io.FixedLenFeature(shape=(28, 28), dtype=tf.float32),
            'label': tf.io.FixedLenFeature(shape=(), dtype=tf.int64),
        }
        parsed = tf.io.parse_example(tensor_proto, parse_spec)
        return collections.OrderedDict(
            label=tf.cast(parsed['label'], tf.int32), pixels=parsed['pixels']
        )

    return dataset.map(parse_proto, num_parallel_calls=tf.data.AUTOTUNE)


def load_data(
    only_digits: bool = True, cache_dir: Optional[str] = None
) -> tuple[ClientData, ClientData]:
    """The (train, test) Federated EMNIST `ClientData` from ``emnist_all.sqlite``.

    Args:
        only_digits: the 10 digit classes (3,383 writers) or all 62 (3,400).
        cache_dir: the directory holding ``emnist_all.sqlite`` (or its
            ``.lzma``); default ``~/.tff``. Nothing is downloaded.

    Raises:
        download.DatasetFileNotFoundError: the file is not there.
    """
    path = download.get_local_file(FILENAME, cache_dir)
    prefix = 'digits_only' if only_digits else 'all'
    train = sql_client_data.SqlClientData(path, f'{prefix}_train').preprocess(_add_proto_parsing)
    test = sql_client_data.SqlClientData(path, f'{prefix}_test').preprocess(_add_proto_parsing)
    return train, test


# Each digit drawn on a 7 x 7 grid of strokes (1: ink), scaled 4x to 28 x 28.
_GLYPHS = {
    0: ['0111110', '1100011', '1100011', '1100011', '1100011', '1100011', '0111110'],
    1: ['0001100', '0011100', '0001100', '0001100', '0001100', '0001100', '0011110'],
    2: ['0111110', '1100011', '0000011', '0001110', '0111000', '1100000', '1111111'],
    3: ['1111110', '0000011', '0000011', '0111110', '0000011', '0000011', '1111110'],
    4: ['0000110', '0001110', '0011010', '0110010', '1111111', '0000010', '0000010'],
    5: ['1111111', '1100000', '1111110', '0000011', '0000011', '1100011', '0111110'],
    6: ['0011110', '0110000', '1100000', '1111110', '1100011', '1100011', '0111110'],
    7: ['1111111', '0000011', '0000110', '0001100', '0011000', '0011000', '0011000'],
    8: ['0111110', '1100011', '1100011', '0111110', '1100011', '1100011', '0111110'],
    9: ['0111110', '1100011', '1100011', '0111111', '0000011', '0000110', '0111100'],
}


def _synthetic_digits() -> collections.OrderedDict:
    images = []
    for digit in range(10):
        ink = np.asarray([[int(c) for c in row] for row in _GLYPHS[digit]], np.float32)
        big = np.kron(ink, np.ones((4, 4), np.float32))
        # Soft edges in [0, 1]: ink 0.0, background 1.0, as the real data.
        blurred = big.copy()
        blurred[1:, :] = np.maximum(blurred[1:, :], 0.5 * big[:-1, :])
        images.append(1.0 - blurred)
    return collections.OrderedDict(
        label=np.arange(10, dtype=np.int32), pixels=np.stack(images).astype(np.float32)
    )


def get_synthetic() -> ClientData:
    """Two clients with one drawn example of each digit 0-9, in `load_data`'s element structure."""
    return TestClientData({'synthetic1': _synthetic_digits(), 'synthetic2': _synthetic_digits()})
