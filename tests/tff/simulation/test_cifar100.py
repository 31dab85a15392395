"""Port of TFF's ``.../simulation/datasets/cifar100_test.py``.

``test_get_synthetic`` as TFF's (labels as TFF's; our images differ).
``test_load_from_gcs`` (skipped in TFF's CI: it downloads) becomes a test of
`load_data` on a tiny ``cifar100.sqlite`` written here.
"""

import collections

import numpy as np
import tensorflow as tf

from simharness.simulation.datasets import cifar100
from tests.tff.simulation.datasets_files import write_tff_sqlite

EXPECTED_ELEMENT_TYPE = collections.OrderedDict(
    coarse_label=tf.TensorSpec(shape=(), dtype=tf.int64),
    image=tf.TensorSpec(shape=(32, 32, 3), dtype=tf.uint8),
    label=tf.TensorSpec(shape=(), dtype=tf.int64),
)


def test_get_synthetic():
    client_data = cifar100.get_synthetic()
    assert len(client_data.client_ids) == 2
    assert client_data.element_type_structure == EXPECTED_ELEMENT_TYPE
    for client_id in client_data.client_ids:
        data = list(client_data.create_tf_dataset_for_client(client_id).as_numpy_iterator())
        assert sorted(int(x['coarse_label']) for x in data) == [4, 4, 4, 8, 10]
        assert sorted(int(x['label']) for x in data) == [0, 51, 51, 71, 88]
        assert len(data) == 5
        assert data[0]['image'].shape == (32, 32, 3) and data[-1]['image'].shape == (32, 32, 3)


def test_load_data(tmp_path):
    image = list(range(32 * 32 * 3))
    write_tff_sqlite(
        tmp_path / 'cifar100.sqlite',
        [
            ('train', '0', {'coarse_label': 3, 'image': [v % 256 for v in image], 'label': 17}),
            ('test', '5', {'coarse_label': 1, 'image': [7] * len(image), 'label': 2}),
        ],
    )
    train, test = cifar100.load_data(str(tmp_path))
    assert train.client_ids == ['0'] and test.client_ids == ['5']
    assert test.element_type_structure == EXPECTED_ELEMENT_TYPE
    (x,) = list(train.create_tf_dataset_for_client('0').as_numpy_iterator())
    assert int(x['label']) == 17 and int(x['coarse_label']) == 3
    np.testing.assert_array_equal(x['image'].reshape(-1), np.asarray(image) % 256)
