"""Port of TFF's ``.../simulation/datasets/transforming_client_data_test.py``. No case left out.

The dataset computations run on every stack of `tff_stack`.
"""

import collections
import re

import numpy as np
import pytest
import tensorflow as tf

from simharness.simulation.datasets import from_tensor_slices_client_data, transforming_client_data

TEST_DATA = {
    'CLIENT A': collections.OrderedDict(
        x=[[1, 2], [3, 4], [5, 6]], y=[4.0, 5.0, 6.0], z=['a', 'b', 'c']
    ),
    'CLIENT B': collections.OrderedDict(x=[[10, 11]], y=[7.0], z=['d']),
    'CLIENT C': collections.OrderedDict(x=[[100, 101], [200, 201]], y=[8.0, 9.0], z=['e', 'f']),
}
NUM_EXPANDED_CLIENTS = 3


def _make_transform_expanded(client_id):
    index = tf.cast(
        tf.strings.to_number(tf.strings.split(client_id, sep='_', maxsplit=1)[0]), tf.int32
    )

    def fn(data):
        return collections.OrderedDict(
            [('x', data['x'] + 10 * index), ('y', data['y']), ('z', data['z'])]
        )

    return fn


def _make_transform_raw(client_id):
    del client_id

    def fn(data):
        data['x'] = data['x'] + 10
        return data

    return fn


def expand_client_id(client_id):
    return [str(i) + '_' + client_id for i in range(NUM_EXPANDED_CLIENTS)]


def reduce_client_id(client_id):
    return tf.strings.split(client_id, sep='_')[1]


@pytest.fixture(scope='module')
def test_client_data():
    return from_tensor_slices_client_data.TestClientData(TEST_DATA)


@pytest.fixture(scope='module')
def transformed(test_client_data):
    return transforming_client_data.TransformingClientData(
        test_client_data, _make_transform_expanded, expand_client_id, reduce_client_id
    )


def test_client_ids_property(transformed):
    client_ids = transformed.client_ids
    assert len(client_ids) == len(TEST_DATA) * NUM_EXPANDED_CLIENTS
    assert all(isinstance(c, str) for c in client_ids)
    assert client_ids == sorted(client_ids)


def test_default_num_transformed_clients(test_client_data):
    data = transforming_client_data.TransformingClientData(test_client_data, _make_transform_raw)
    assert sorted(data.client_ids) == sorted(TEST_DATA)


def test_fail_on_bad_client_id(transformed):
    for ok in ('0_CLIENT A', '1_CLIENT B', '0_CLIENT C'):
        transformed.create_tf_dataset_for_client(ok)
    for bad in ('CLIENT A', '0_CLIENT D', '3_CLIENT B'):
        with pytest.raises(ValueError, match='is not a client in this ClientData'):
            transformed.create_tf_dataset_for_client(bad)


def test_dataset_computation(transformed, test_client_data, tff_stack):
    for client_id in transformed.client_ids:
        actual = list(transformed.dataset_computation(client_id).as_numpy_iterator())
        client = re.search(r'^(\d*)_(.*)$', client_id).group(2)
        expected = test_client_data.create_tf_dataset_for_client(client).map(
            _make_transform_expanded(client_id)
        )
        expected = list(expected.as_numpy_iterator())
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            np.testing.assert_array_equal(a['x'], e['x'])
            assert a['y'] == e['y'] and a['z'] == e['z']


def test_create_tf_dataset_from_all_clients():
    def expand(client_id):
        return [client_id + '-' + str(i) for i in range(int(client_id[-1]))]

    def make_transform_fn(client_id):
        index = tf.cast(tf.strings.to_number(tf.strings.split(client_id, '-')[1]), tf.int32)
        return lambda x: x + index

    raw_data = {'CLIENT 1': [0], 'CLIENT 2': [1, 3, 5], 'CLIENT 3': [7, 10]}
    data = transforming_client_data.TransformingClientData(
        from_tensor_slices_client_data.TestClientData(raw_data),
        make_transform_fn,
        expand,
        lambda client_id: tf.strings.split(client_id, sep='-')[0],
    )
    flat = data.create_tf_dataset_from_all_clients()
    assert isinstance(flat, tf.data.Dataset)
    assert sorted(int(x) for x in flat) == list(range(13))
