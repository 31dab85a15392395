"""Port of TFF's ``.../simulation/datasets/file_per_user_client_data_test.py``.

No case left out. Added: the dataset computation mapped over client ids at
CLIENTS, so that on the process stack the workers read the clients' files.
"""

import collections
import functools
import os
import tempfile

import numpy as np
import pytest
import tensorflow as tf

import simharness as tff
from simharness.simulation.datasets import file_per_user_client_data

FilePerUserClientData = file_per_user_client_data.FilePerUserClientData

FAKE_TEST_DATA = [
    ('ClientA', 3, 4.0, [5.0, 6.5]),
    ('ClientB', 1, 4.2, [1.0, 6.1]),
    ('ClientB', 2, 5.3, [5.0, 6.3]),
    ('ClientA', 5, 4.7, [3.0, 6.8]),
    ('ClientC', 3, 1.0, [5.0, 6.4]),
    ('ClientA', 2, 7.5, [7.0, 6.2]),
    ('ClientA', 3, 4.0, [9.0, 6.9]),
]
EXPECTED_STRUCTURE = (
    tf.TensorSpec(shape=[], dtype=tf.int64),
    tf.TensorSpec(shape=[], dtype=tf.float32),
    tf.TensorSpec(shape=[2], dtype=tf.float32),
)


def _create_example(features):
    out = collections.OrderedDict()
    for i, feature in enumerate(features):
        if isinstance(feature, int):
            out[str(i)] = tf.train.Feature(int64_list=tf.train.Int64List(value=[feature]))
        elif isinstance(feature, float):
            out[str(i)] = tf.train.Feature(float_list=tf.train.FloatList(value=[feature]))
        else:
            out[str(i)] = tf.train.Feature(float_list=tf.train.FloatList(value=feature))
    return tf.train.Example(features=tf.train.Features(feature=out)).SerializeToString()


def create_test_dataset_fn(client_path):
    features = {
        '0': tf.io.FixedLenFeature(shape=[], dtype=tf.int64),
        '1': tf.io.FixedLenFeature(shape=[], dtype=tf.float32),
        '2': tf.io.FixedLenFeature(shape=[2], dtype=tf.float32),
    }

    def parse_example(e):
        d = tf.io.parse_single_example(serialized=e, features=features)
        return tuple(d[k] for k in sorted(d))

    return tf.data.TFRecordDataset(client_path).map(parse_example)


@pytest.fixture(scope='module')
def user_files():
    """Per-user TFRecord files of `FAKE_TEST_DATA`: (temp dir, client id -> path)."""
    with tempfile.TemporaryDirectory() as temp_dir:
        writers, files = {}, {}
        for client_id, *features in FAKE_TEST_DATA:
            if client_id not in writers:
                fd, path = tempfile.mkstemp(suffix=client_id, dir=temp_dir)
                os.close(fd)
                files[client_id] = path
                writers[client_id] = tf.io.TFRecordWriter(path=path)
            writers[client_id].write(_create_example(features))
        for w in writers.values():
            w.close()
        yield temp_dir, files


@pytest.fixture
def data(user_files):
    return FilePerUserClientData(user_files[1], create_test_dataset_fn)


def _check_examples(client_id, dataset):
    expected = [ex[1:] for ex in FAKE_TEST_DATA if ex[0] == client_id]
    for actual in dataset:
        want = expected.pop(0)
        assert len(actual) == len(want)
        for a, e in zip(actual, want):
            np.testing.assert_allclose(np.asarray(a), e, atol=1e-4)
    assert not expected


def test_construct_with_non_dict():
    with pytest.raises(TypeError, match=r'Expected collections.abc.Mapping'):
        FilePerUserClientData(client_ids_to_files=[], dataset_fn=tf.data.TFRecordDataset)


def test_client_ids_property(data):
    assert data.client_ids == sorted(set(ex[0] for ex in FAKE_TEST_DATA))


def test_element_type_structure(data):
    assert data.element_type_structure == EXPECTED_STRUCTURE


def test_create_tf_dataset_for_client(data):
    counts = collections.Counter(ex[0] for ex in FAKE_TEST_DATA)
    for client_id, expected_num in counts.items():
        ds = data.create_tf_dataset_for_client(client_id)
        assert isinstance(ds, tf.data.Dataset)
        assert int(ds.reduce(0, lambda x, _: x + 1)) == expected_num
        _check_examples(client_id, ds)


def test_create_tf_dataset_from_all_clients(data):
    ds = data.create_tf_dataset_from_all_clients()
    assert isinstance(ds, tf.data.Dataset)
    assert int(ds.reduce(0, lambda x, _: x + 1)) == len(FAKE_TEST_DATA)


def test_dataset_computation(data, tff_stack):
    assert isinstance(data.dataset_computation, tff.Computation)
    counts = collections.Counter(ex[0] for ex in FAKE_TEST_DATA)
    for client_id, expected_num in counts.items():
        ds = data.dataset_computation(client_id)
        assert functools.reduce(lambda x, _: x + 1, ds, 0) == expected_num
        _check_examples(client_id, ds)


def test_build_client_file_dict(user_files):
    built = FilePerUserClientData.create_from_dir(
        path=user_files[0], create_tf_dataset_fn=tf.data.TFRecordDataset
    )
    assert len(built.client_ids) == len(set(ex[0] for ex in FAKE_TEST_DATA))


def test_build_client_file_dict_default_create_fn(user_files):
    built = FilePerUserClientData.create_from_dir(path=user_files[0])
    assert len(built.client_ids) == len(set(ex[0] for ex in FAKE_TEST_DATA))


@pytest.mark.parametrize('preprocess', [False, True], ids=['plain', 'preprocessed'])
def test_dataset_from_large_number_of_clients(preprocess):
    client_data = FilePerUserClientData(
        client_ids_to_files={str(x): str(x) for x in range(100_000)},
        dataset_fn=lambda _: tf.data.Dataset.range(100),
    )
    if preprocess:
        client_data = client_data.preprocess(lambda x: x)
    client_data.create_tf_dataset_from_all_clients(seed=42)


def test_preprocess_with_identity_gives_same_structure(data):
    assert data.preprocess(lambda x: x).element_type_structure == EXPECTED_STRUCTURE


def test_preprocess_with_identity_gives_same_num_elements(data):
    ds = data.preprocess(lambda x: x).create_tf_dataset_from_all_clients()
    assert isinstance(ds, tf.data.Dataset)
    assert int(ds.reduce(0, lambda x, _: x + 1)) == len(FAKE_TEST_DATA)


def test_preprocess_with_take_and_create_tf_dataset(data):
    pre = data.preprocess(lambda x: x.take(1))
    for client_id in pre.client_ids:
        ds = pre.create_tf_dataset_for_client(client_id)
        assert isinstance(ds, tf.data.Dataset)
        assert int(ds.reduce(0, lambda x, _: x + 1)) == 1


def test_preprocess_with_take_and_dataset_computation(data, tff_stack):
    pre = data.preprocess(lambda x: x.take(1))
    for client_id in pre.client_ids:
        assert functools.reduce(lambda x, _: x + 1, pre.dataset_computation(client_id), 0) == 1


def test_files_read_where_each_client_runs(data, tff_stack):
    @tff.tf_computation(tff.SequenceType(EXPECTED_STRUCTURE))
    def first_feature_sum(ds):
        return ds.reduce(np.int64(0), lambda acc, e: acc + e[0])

    @tff.federated_computation(tff.type_at_clients(np.str_))
    def sums(ids):
        return tff.federated_map(
            first_feature_sum, tff.federated_map(data.dataset_computation, ids)
        )

    assert [int(s) for s in sums(['ClientC', 'ClientA', 'ClientB'])] == [3, 13, 3]
