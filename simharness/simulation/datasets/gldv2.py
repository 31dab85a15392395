"""Federated Google Landmarks v2 (TFF's `tff.simulation.datasets.gldv2`), from local files.

TFF's `load_data` downloads the federated split's csv files and the GLDv2
image shards into ``cache_dir``, then writes its cache: one TFRecord file per
user and one test file,

::

    cache_dir/gld160k/train/<user_id>   cache_dir/gld160k/test.tfRecord
    cache_dir/gld23k/train/<user_id>    cache_dir/gld23k/test.tfRecord

Ours reads the same cache; where it is missing, it writes it as TFF does
from the csv files and images already in ``cache_dir`` (where TFF's download
leaves them: ``datasets/landmarks-user-160k/federated_train.csv`` and
``test.csv``, ``datasets/mini_gld_train_split.csv`` and ``mini_gld_test.csv``,
``images/<image_id>.jpg``). Nothing is downloaded: without them a
`DatasetFileNotFoundError` names the paths expected.

Elements: ``OrderedDict(image/decoded=uint8 [h, w, 3], class=int64 [1])``.
"""

from __future__ import annotations

import collections
import logging
import os
from typing import Mapping, Sequence

import tensorflow as tf

from simharness.data.client_base import ClientData
from simharness.data.client_data import TestClientData
from simharness.simulation.datasets import vision_datasets_utils
from simharness.data.tff_files import DatasetFileNotFoundError

__all__ = ['get_synthetic', 'load_data']

FED_GLD_SPLIT_FILE_BUNDLE = 'landmarks-user-160k'
FED_GLD_SPLIT_FILE_DOWNLOAD_URL = f'http://storage.googleapis.com/gresearch/federated-vision-datasets/{FED_GLD_SPLIT_FILE_BUNDLE}.zip'
FED_GLD_TRAIN_SPLIT_FILE = 'federated_train.csv'
FED_GLD_TEST_SPLIT_FILE = 'test.csv'
GLD_SHARD_BASE_URL = 'https://s3.amazonaws.com/google-landmark'
NUM_SHARD_TRAIN = 500
MINI_GLD_TRAIN_DOWNLOAD_URL = (
    'https://storage.googleapis.com/tff-datasets-public/mini_gld_train_split.csv'
)
MINI_GLD_TRAIN_SPLIT_FILE = 'mini_gld_train_split.csv'
MINI_GLD_TEST_DOWNLOAD_URL = 'https://storage.googleapis.com/tff-datasets-public/mini_gld_test.csv'
MINI_GLD_TEST_SPLIT_FILE = 'mini_gld_test.csv'
FED_GLD_CACHE = 'gld160k'
MINI_GLD_CACHE = 'gld23k'
TRAIN_SUB_DIR = 'train'
TEST_FILE_NAME = 'test.tfRecord'
IMAGE_SUB_DIR = 'images'
#: Where ``tf.keras.utils.get_file`` (TFF's download) leaves the csv files in ``cache_dir``.
KERAS_CACHE_SUBDIR = 'datasets'
LOGGER = 'gldv2'

_LOG = logging.getLogger(LOGGER)


def _create_dataset_with_mapping(image_dir: str, mapping: Sequence[Mapping[str, str]]) -> list:
    """The ``tf.train.Example`` of each row's ``image_id`` (``<image_dir>/<id>.jpg``) and
    ``class``; an image that is not there is logged and left out (as TFF)."""
    examples = []
    for row in mapping:
        img_path = os.path.join(image_dir, f'{row["image_id"]}.jpg')
        try:
            with open(img_path, 'rb') as f:
                examples.append(vision_datasets_utils.create_example(f.read(), int(row['class'])))
        except IOError as e:
            _LOG.warning('Image %s is not found. Exception: %s', img_path, e)
    return examples


def _check_columns(mapping_file: str, table: list[dict[str, str]], expected: list[str]) -> None:
    if not table or not all(col in table[0] for col in expected):
        found = ','.join(table[0]) if table else 'none (an empty file)'
        raise ValueError(
            f'The mapping file must contain {", ".join(expected)} columns. The existing columns '
            f'are {found} ({mapping_file})'
        )


def _create_train_data_files(cache_dir: str, image_dir: str, mapping_file: str) -> None:
    """Writes one TFRecord file per ``user_id`` of `mapping_file` into `cache_dir`."""
    if not os.path.isdir(image_dir):
        raise ValueError(f'{image_dir} does not exist or is not a directory')
    table = vision_datasets_utils.read_csv(mapping_file)
    _check_columns(mapping_file, table, ['user_id', 'image_id', 'class'])
    os.makedirs(cache_dir, exist_ok=True)
    per_user: dict[str, list[dict[str, str]]] = collections.defaultdict(list)
    for row in table:
        per_user[row['user_id']].append(row)
    for user_id, rows in per_user.items():
        examples = _create_dataset_with_mapping(image_dir, rows)
        with tf.io.TFRecordWriter(os.path.join(cache_dir, str(user_id))) as writer:
            for example in examples:
                writer.write(example.SerializeToString())
        _LOG.info('Created tfrecord file for user %s with %d examples', user_id, len(examples))


def _create_test_data_file(cache_dir: str, image_dir: str, mapping_file: str) -> None:
    """Writes the images of `mapping_file` into ``cache_dir/test.tfRecord``."""
    if not os.path.isdir(image_dir):
        raise ValueError(f'{image_dir} does not exist or is not a directory')
    table = vision_datasets_utils.read_csv(mapping_file)
    _check_columns(mapping_file, table, ['image_id', 'class'])
    os.makedirs(cache_dir, exist_ok=True)
    examples = _create_dataset_with_mapping(image_dir, table)
    with tf.io.TFRecordWriter(os.path.join(cache_dir, TEST_FILE_NAME)) as writer:
        for example in examples:
            writer.write(example.SerializeToString())


def mapping_files(cache_dir: str, gld23k: bool) -> tuple[str, str]:
    """The (train, test) csv files of the split, where TFF's download leaves them."""
    keras_dir = os.path.join(cache_dir, KERAS_CACHE_SUBDIR)
    if gld23k:
        return (
            os.path.join(keras_dir, MINI_GLD_TRAIN_SPLIT_FILE),
            os.path.join(keras_dir, MINI_GLD_TEST_SPLIT_FILE),
        )
    bundle = os.path.join(keras_dir, FED_GLD_SPLIT_FILE_BUNDLE)
    return (
        os.path.join(bundle, FED_GLD_TRAIN_SPLIT_FILE),
        os.path.join(bundle, FED_GLD_TEST_SPLIT_FILE),
    )


def load_data(
    num_worker: int = 1,
    cache_dir: str = 'cache',
    gld23k: bool = False,
    base_url: str = GLD_SHARD_BASE_URL,
) -> tuple[ClientData, tf.data.Dataset]:
    """The federated GLDv2 data set: ``(train ClientData, test tf.data.Dataset)``.

    gld160k (``gld23k=False``): 2,028 classes, 1,262 users, 164,172 images;
    gld23k: 203 classes, 233 users, 23,080 images. Each user's images are read
    from its TFRecord file when its dataset is iterated.

    Args:
        num_worker, base_url: TFF's download settings; unused (nothing is
            downloaded).
        cache_dir: the directory of TFF's cache (default ``'cache'``, as TFF).
        gld23k: the small split.

    Raises:
        DatasetFileNotFoundError: neither the cache nor the csv files and
            images to write it are in `cache_dir`.
    """
    del num_worker, base_url  # TFF's download settings
    cache_dir = os.path.expanduser(cache_dir)
    cache = os.path.join(cache_dir, MINI_GLD_CACHE if gld23k else FED_GLD_CACHE)
    train_dir = os.path.join(cache, TRAIN_SUB_DIR)
    test_file = os.path.join(cache, TEST_FILE_NAME)
    if not (os.path.isdir(train_dir) and os.path.isfile(test_file)):
        train_csv, test_csv = mapping_files(cache_dir, gld23k)
        image_dir = os.path.join(cache_dir, IMAGE_SUB_DIR)
        missing = [p for p in (train_csv, test_csv, image_dir) if not os.path.exists(p)]
        if missing:
            source = (
                f'{MINI_GLD_TRAIN_DOWNLOAD_URL} and {MINI_GLD_TEST_DOWNLOAD_URL}'
                if gld23k
                else FED_GLD_SPLIT_FILE_DOWNLOAD_URL
            )
            raise DatasetFileNotFoundError(
                f'expected the GLDv2 cache {train_dir}/ and {test_file}, or, to write it, '
                f'{train_csv}, {test_csv} and {image_dir}/<image_id>.jpg; missing: '
                f'{", ".join(missing)}. simharness downloads nothing: fetch the split from '
                f'{source} and the images from {GLD_SHARD_BASE_URL} (train shards '
                f'0-{NUM_SHARD_TRAIN - 1}) into {cache_dir}, or pass cache_dir= where they are',
                path=missing[0],
            )
        _create_train_data_files(train_dir, image_dir, train_csv)
        _create_test_data_file(cache, image_dir, test_csv)
    return vision_datasets_utils.load_data_from_cache(cache, TRAIN_SUB_DIR, TEST_FILE_NAME, LOGGER)


def get_synthetic() -> ClientData:
    """One client with 3 pseudo-random 600 x 800 RGB images, classes 0, 1, 2 (TFF's)."""
    images = tf.random.stateless_uniform(
        shape=(3, 600, 800, 3), minval=0, maxval=255, dtype=tf.int32, seed=(0, 0)
    )
    labels = tf.constant([[0], [1], [2]], dtype=tf.int64)
    data = collections.OrderedDict(
        [('image/decoded', tf.cast(images, dtype=tf.uint8)), ('class', labels)]
    )
    return TestClientData({'synthetic': tf.nest.map_structure(lambda x: x.numpy(), data)})
