"""Helpers of the vision data sets (TFF's ``vision_datasets_utils``, used by `gldv2`).

TFF keeps each client's images as a TFRecord file of ``tf.train.Example``
(``image/encoded_jpeg``: the JPEG's bytes, ``class``: an int64); a client's
dataset decodes them into ``OrderedDict(image/decoded=uint8 [h, w, c],
class=int64 [1])``.
"""

from __future__ import annotations

import collections
import csv
import logging
import os
from typing import Mapping, Union

import tensorflow as tf

from simharness.data.client_base import ClientData
from simharness.simulation.datasets.file_per_user_client_data import FilePerUserClientData

__all__ = [
    'KEY_CLASS',
    'KEY_IMAGE_BYTES',
    'KEY_IMAGE_DECODED',
    'create_example',
    'load_data_from_cache',
    'load_tfrecord',
    'read_csv',
]

KEY_IMAGE_BYTES = 'image/encoded_jpeg'
KEY_IMAGE_DECODED = 'image/decoded'
KEY_CLASS = 'class'


def read_csv(path: str) -> list[dict[str, str]]:
    """The rows of a csv file, each a dict keyed by the column names."""
    with open(path, 'r') as f:
        return list(csv.DictReader(f))


def _feature_description() -> dict[str, tf.io.FixedLenFeature]:
    return {
        KEY_IMAGE_BYTES: tf.io.FixedLenFeature([], tf.string, default_value=''),
        KEY_CLASS: tf.io.FixedLenFeature([], tf.int64, default_value=-1),
    }


def load_tfrecord(fname: Union[str, tf.Tensor], logger_tag: str = 'gldv2') -> tf.data.Dataset:
    """The dataset of the TFRecord file `fname`, each example decoded (read when iterated)."""
    logging.getLogger(logger_tag).info('Start loading dataset for file %s', fname)

    def parse(example_proto: tf.Tensor) -> collections.OrderedDict:
        return collections.OrderedDict(
            tf.io.parse_single_example(example_proto, _feature_description())
        )

    def transform(item: Mapping[str, tf.Tensor]) -> collections.OrderedDict:
        return collections.OrderedDict(
            [
                (KEY_IMAGE_DECODED, tf.io.decode_jpeg(item[KEY_IMAGE_BYTES])),
                (KEY_CLASS, tf.reshape(item[KEY_CLASS], [1])),
            ]
        )

    return tf.data.TFRecordDataset([fname]).map(parse).map(transform)


def load_data_from_cache(
    cache_dir: str, train_sub_dir: str, test_file_name: str, logger_tag: str
) -> tuple[ClientData, tf.data.Dataset]:
    """``(train, test)``: a `FilePerUserClientData` of ``cache_dir/train_sub_dir/<user>``
    files and the dataset of ``cache_dir/test_file_name``."""
    train_dir = os.path.join(cache_dir, train_sub_dir)
    logging.getLogger(logger_tag).info('Loading train data from %s', train_dir)
    train = FilePerUserClientData.create_from_dir(
        train_dir, lambda fname: load_tfrecord(fname, logger_tag)
    )
    test = load_tfrecord(os.path.join(cache_dir, test_file_name), logger_tag)
    return train, test


def create_example(image_bytes: bytes, label: int) -> tf.train.Example:
    """The ``tf.train.Example`` of one image: its encoded bytes and its class."""
    return tf.train.Example(
        features=tf.train.Features(
            feature={
                KEY_IMAGE_BYTES: tf.train.Feature(
                    bytes_list=tf.train.BytesList(value=[image_bytes])
                ),
                KEY_CLASS: tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
            }
        )
    )
