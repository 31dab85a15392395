"""Port of TFF's ``tensorflow_federated/python/simulation/datasets/dataset_utils_test.py``.

No case left out. ``test_filter_single_label_dataset`` expects TFF's count of
103 under ``tf.test.TestCase``'s fixed global seed; here the source labels are
drawn from a numpy generator and the filtered count must equal the number of
6s among them (same check of the filter, without TF's seed).
"""

import collections

import numpy as np
import tensorflow as tf

from simharness.simulation.datasets import dataset_utils, from_tensor_slices_client_data


def test_deterministic_dataset_mixture():
    a = tf.data.Dataset.range(5)
    b = tf.data.Dataset.range(5).map(lambda x: x + 5)
    m1 = dataset_utils.build_dataset_mixture(a, b, a_probability=0.5, seed=0)
    m2 = dataset_utils.build_dataset_mixture(a, b, a_probability=0.5, seed=0)
    assert [int(x) for x in m1] == [int(x) for x in m2]


def test_deterministic_dataset_mixture_distribution():
    a = tf.data.Dataset.from_tensor_slices([8]).repeat(None)
    b = tf.data.Dataset.from_tensor_slices(
        np.random.default_rng(0).normal(5, 2.0, 1000).astype(np.int32)
    )
    counts = [
        collections.Counter(
            int(x) for x in dataset_utils.build_dataset_mixture(a, b, a_probability=0.8, seed=seed)
        )
        for seed in (0, 0, 1)
    ]
    assert counts[0] == counts[1]
    assert counts[0] != counts[2]


def test_non_deterministic_dataset_mixture_different():
    a = tf.data.Dataset.from_tensor_slices([0] * 100)
    b = tf.data.Dataset.from_tensor_slices([1] * 100)
    m1 = dataset_utils.build_dataset_mixture(a, b, a_probability=0.5)
    m2 = dataset_utils.build_dataset_mixture(a, b, a_probability=0.5)
    assert [int(x) for x in m1] != [int(x) for x in m2]


def test_filter_single_label_dataset():
    labels = np.random.default_rng(1).integers(0, 9, 1000).astype(np.int32)
    d = tf.data.Dataset.from_tensor_slices({'label': labels})
    filtered = list(dataset_utils.build_single_label_dataset(d, label_key='label', desired_label=6))
    assert len(filtered) == int((labels == 6).sum())
    assert all(int(x['label']) == 6 for x in filtered)


def test_build_synthethic_iid_client_data():
    client_data = from_tensor_slices_client_data.TestClientData(
        collections.OrderedDict(a=[1] * 3, b=[2] * 5, c=[3] * 7)
    )
    it = iter(dataset_utils.build_synthethic_iid_datasets(client_data, client_dataset_size=5))
    runs = []
    for _ in range(5):
        datasets = [[int(x) for x in next(it)] for _ in range(3)]
        assert [len(d) for d in datasets] == [5, 5, 5]
        runs.append(datasets)
    for i, run_a in enumerate(runs[:-1]):
        for run_b in runs[i + 1 :]:
            assert run_a != run_b
