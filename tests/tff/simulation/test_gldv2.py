"""Port of TFF's ``gldv2_test.py`` and ``vision_datasets_utils_test.py``.

Added: `load_data` over files in TFF's layout written here (the split's csv
files and JPEG images where TFF's download leaves them): it writes TFF's cache
(a TFRecord file per user, ``test.tfRecord``), reads it back on a second call
without the images, and names the paths expected when they are missing.
"""

import collections
import csv
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

import simharness as tff
from simharness.simulation.datasets import gldv2
from simharness.simulation.datasets import vision_datasets_utils as utils


def _example(image_bytes, label):
    return tf.train.Example(
        features=tf.train.Features(
            feature={
                utils.KEY_IMAGE_BYTES: tf.train.Feature(
                    bytes_list=tf.train.BytesList(value=[image_bytes])
                ),
                utils.KEY_CLASS: tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
            }
        )
    )


def test_create_example():
    assert [utils.create_example(b'somebytes', 0), utils.create_example(b'other', 1)] == [
        _example(b'somebytes', 0),
        _example(b'other', 1),
    ]


def test_create_dataset_from_mapping(tmp_path):
    for name, content in {'image_1': b'somebytes', 'image_2': b'someotherbytes'}.items():
        (tmp_path / f'{name}.jpg').write_bytes(content)
    mapping = [
        {'image_id': 'image_1', 'class': '0'},
        {'image_id': 'image_2', 'class': '12'},
        {'image_id': 'image_3', 'class': '1'},  # not there: left out, as TFF
    ]
    assert gldv2._create_dataset_with_mapping(str(tmp_path), mapping) == [
        _example(b'somebytes', 0),
        _example(b'someotherbytes', 12),
    ]


def test_get_synthetic():
    client_data = gldv2.get_synthetic()
    assert len(client_data.client_ids) == 1
    assert client_data.element_type_structure == collections.OrderedDict(
        [
            ('image/decoded', tf.TensorSpec(shape=(600, 800, 3), dtype=tf.uint8)),
            ('class', tf.TensorSpec(shape=(1,), dtype=tf.int64)),
        ]
    )
    data = list(client_data.create_tf_dataset_for_client(client_data.client_ids[0]))
    assert len(data) == 3
    assert [e['class'].numpy().tolist() for e in data] == [[0], [1], [2]]


def _write_layout(cache_dir, gld23k):
    """TFF's download's leftovers: csv files of the split and ``images/<id>.jpg``."""
    rng = np.random.default_rng(0)
    images = {}
    os.makedirs(cache_dir / 'images')
    for i in range(7):
        pixels = rng.integers(0, 255, size=(20 + i, 30, 3), dtype=np.uint8)
        images[f'img{i}'] = tf.io.encode_jpeg(pixels).numpy()
        (cache_dir / 'images' / f'img{i}.jpg').write_bytes(images[f'img{i}'])
    train_csv, test_csv = gldv2.mapping_files(str(cache_dir), gld23k)
    os.makedirs(os.path.dirname(train_csv), exist_ok=True)
    train_rows = [('u1', 'img0', 3), ('u2', 'img1', 5), ('u1', 'img2', 7), ('u2', 'img3', 5)]
    with open(train_csv, 'w', newline='') as f:
        w = csv.writer(f)
        w.writerow(['user_id', 'image_id', 'class'])
        w.writerows(train_rows)
    with open(test_csv, 'w', newline='') as f:
        w = csv.writer(f)
        w.writerow(['image_id', 'class'])
        w.writerows([('img5', 1), ('img6', 2)])
    return images


def test_mapping_files_are_where_tffs_download_leaves_them(tmp_path):
    keras_dir = tmp_path / 'datasets'
    assert gldv2.mapping_files(str(tmp_path), gld23k=True) == (
        str(keras_dir / 'mini_gld_train_split.csv'),
        str(keras_dir / 'mini_gld_test.csv'),
    )
    assert gldv2.mapping_files(str(tmp_path), gld23k=False) == (
        str(keras_dir / 'landmarks-user-160k' / 'federated_train.csv'),
        str(keras_dir / 'landmarks-user-160k' / 'test.csv'),
    )


@pytest.mark.parametrize('gld23k', [True])  # gld160k differs in the paths only (above)
def test_load_data_writes_and_reads_tffs_cache(tmp_path, gld23k):
    images = _write_layout(tmp_path, gld23k)
    train, test = tff.simulation.datasets.gldv2.load_data(cache_dir=str(tmp_path), gld23k=gld23k)
    cache = tmp_path / ('gld23k' if gld23k else 'gld160k')
    assert sorted(os.listdir(cache / 'train')) == ['u1', 'u2']
    assert (cache / 'test.tfRecord').is_file()
    shutil.rmtree(tmp_path / 'images')  # the second load reads the cache only
    train, test = gldv2.load_data(cache_dir=str(tmp_path), gld23k=gld23k)
    assert train.client_ids == ['u1', 'u2']
    spec = train.element_type_structure
    assert list(spec) == ['image/decoded', 'class']
    assert spec['image/decoded'].dtype == tf.uint8 and spec['class'].shape == (1,)
    u1 = list(train.create_tf_dataset_for_client('u1'))
    assert [e['class'].numpy().tolist() for e in u1] == [[3], [7]]
    np.testing.assert_array_equal(
        u1[1]['image/decoded'].numpy(), tf.io.decode_jpeg(images['img2']).numpy()
    )
    assert u1[1]['image/decoded'].shape == (22, 30, 3)
    assert [e['class'].numpy().tolist() for e in test] == [[1], [2]]


def test_missing_files_are_named(tmp_path):
    with pytest.raises(tff.simulation.datasets.DatasetFileNotFoundError) as e:
        gldv2.load_data(cache_dir=str(tmp_path))
    message = str(e.value)
    assert 'federated_train.csv' in message and 'gld160k' in message
    assert 'downloads nothing' in message
