"""Datasets sent to workers as graphs: which ones a worker may read once and keep
(`tf_sequences.repeatable`), and the worker's reader that keeps them (`BlobReader`)."""

from __future__ import annotations

import collections

import numpy as np
import pytest

tf = pytest.importorskip('tensorflow')

from simharness.core.sequences import TensorBatches  # noqa: E402
from simharness.core.tf_sequences import detach_resources, repeatable  # noqa: E402
from simharness.core import types as T  # noqa: E402
from simharness.runtime.codec import DatasetBlob  # noqa: E402
from simharness.runtime.datasets import BlobReader, dataset_from_blob, dataset_to_wire  # noqa: E402

OD = collections.OrderedDict


def _base():
    return tf.data.Dataset.from_tensor_slices(
        OD(x=np.arange(40, dtype=np.float32).reshape(20, 2), y=np.arange(20, dtype=np.int32))
    )


def _serialized(ds):
    return ds._as_serialized_graph(
        external_state_policy=tf.data.experimental.ExternalStatePolicy.WARN
    ).numpy()


def _graph(ds):
    gd = tf.compat.v1.GraphDef()
    gd.ParseFromString(_serialized(ds))
    return gd


def _blob(ds):
    """The dataset as a worker receives it (random ops allowed here, to test them): its
    graph detached from the object's seed generators, as the driver sends it."""
    return DatasetBlob(detach_resources(_serialized(ds)), T.from_tf_structure(ds.element_spec))


REPEATABLE = {
    'batch': lambda: _base().batch(5),
    'batch_then_map': lambda: _base().batch(5).map(lambda e: (e['x'] * 2.0, e['y'])),
    'seeded_shuffle_once': lambda: (
        _base()
        .repeat(2)
        .shuffle(8, seed=1, reshuffle_each_iteration=False)
        .batch(5)
        .map(lambda e: OD(x=e['x'], y=e['y']))
        .prefetch(2)
    ),
    'filter': lambda: _base().filter(lambda e: e['y'] % 2 == 0).batch(3),
    'parallel_map_in_order': lambda: _base().map(lambda e: e, num_parallel_calls=2).batch(4),
    # TFF's tutorials: every fresh copy (TFF's executors rebuild one per call) reads the
    # first seeded order
    'seeded_reshuffle': lambda: (
        _base()
        .repeat(2)
        .shuffle(8, seed=1)
        .batch(5)
        .map(lambda e: OD(x=e['x'], y=e['y']))
        .prefetch(2)
    ),
}
NOT_REPEATABLE = {
    'shuffle_without_seed': lambda: _base().shuffle(8).batch(5),
    'random_map': lambda: _base().map(lambda e: (e['x'] + tf.random.uniform([2]), e['y'])),
    'stateless_random_map': lambda: _base().map(
        lambda e: (e['x'] + tf.random.stateless_uniform([2], seed=[1, 2]), e['y'])
    ),
    'parallel_map_out_of_order': lambda: _base().map(
        lambda e: e, num_parallel_calls=2, deterministic=False
    ),
}


@pytest.mark.parametrize('make', list(REPEATABLE.values()), ids=list(REPEATABLE))
def test_repeatable_pipelines(make):
    assert repeatable(_graph(make()))


@pytest.mark.parametrize('make', list(NOT_REPEATABLE.values()), ids=list(NOT_REPEATABLE))
def test_pipelines_read_afresh(make):
    assert not repeatable(_graph(make()))


def _elements(value):
    ds = value if isinstance(value, tf.data.Dataset) else None
    if ds is None:
        from simharness.executors.leaf.tf_values import as_dataset

        ds = as_dataset(value)
    return [tf.nest.map_structure(lambda t: t.numpy(), e) for e in ds]


def _same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        for u, v in zip(tf.nest.flatten(x), tf.nest.flatten(y)):
            np.testing.assert_array_equal(u, v)


#: Repeatable, and small enough for `materialize` (a filter's size is unknown to TF: read
#: too, from a fresh copy).
KEPT = list(REPEATABLE)


@pytest.mark.parametrize('name', KEPT)
def test_a_repeatable_graph_met_again_is_read_and_kept(name):
    blob = _blob(REPEATABLE[name]())
    reader = BlobReader()
    first = reader(blob)  # met once: rebuilt, no check (new datasets every round pay nothing)
    assert isinstance(first, tf.data.Dataset)
    second = reader(DatasetBlob(bytes(blob.graph), blob.element_type))  # sent again
    assert isinstance(second, TensorBatches)
    assert reader(blob) is second and reader.hits == 1
    _same(_elements(second), _elements(dataset_from_blob(blob)))


@pytest.mark.parametrize('name', list(NOT_REPEATABLE))
def test_other_graphs_are_rebuilt_every_time(name):
    blob = _blob(NOT_REPEATABLE[name]())
    reader = BlobReader()
    a, b = reader(blob), reader(blob)
    assert isinstance(a, tf.data.Dataset) and isinstance(b, tf.data.Dataset) and a is not b
    assert reader.hits == 0


def test_a_graph_of_unknown_size_larger_than_the_limit_is_left_to_tf_data(monkeypatch):
    from simharness.core import tf_sequences

    monkeypatch.setattr(tf_sequences, 'MATERIALIZE_MAX_ELEMENTS', 3)
    blob = _blob(REPEATABLE['filter']())  # 3 batches of 3, then one of 1: 4 elements
    reader = BlobReader()
    a, b = reader(blob), reader(blob)
    assert isinstance(a, tf.data.Dataset) and a is not b and reader.hits == 0
    _same(_elements(a), _elements(b))


def test_an_unseeded_shuffle_still_shuffles_anew():
    blob = _blob(tf.data.Dataset.range(64).shuffle(64))
    reader = BlobReader()
    orders = {tuple(int(x) for x in reader(blob)) for _ in range(4)}
    assert len(orders) > 1


def test_the_driver_serializes_a_dataset_once():
    ds = REPEATABLE['batch_then_map']()
    assert dataset_to_wire(ds) is dataset_to_wire(ds)


def test_what_is_kept_is_bounded():
    reader = BlobReader(max_items=2)
    blobs = [_blob(_base().batch(k)) for k in (2, 3, 4)]
    kept = []
    for b in blobs:
        reader(b)
        kept.append(reader(b))
    assert reader(blobs[2]) is kept[2] and reader(blobs[1]) is kept[1]
    assert reader(blobs[0]) is not kept[0]  # the least recently used went first
    small = BlobReader(max_bytes=8)
    small(blobs[0])
    assert small(blobs[0]) is not small(blobs[0])  # larger than all it may keep


def test_the_driver_reads_a_fresh_copy_of_unknown_size_into_tensors():
    """A pipeline whose size TF cannot tell (``unbatch``, as TFF's text tutorial) is read
    into tensors from a fresh copy, as a computation would read it: a reshuffling
    seeded shuffle gives its first order, however often the object was read before."""
    from simharness.executors.leaf.tf_values import sequence_from_value

    def make():
        return (
            _base()
            .batch(6)
            .unbatch()
            .batch(4, drop_remainder=True)
            .shuffle(5, seed=2)
            .batch(2, drop_remainder=True)
        )

    ds = make()
    assert int(ds.cardinality()) == int(tf.data.UNKNOWN_CARDINALITY)
    want = _elements(make())  # a new object's first read
    t = T.SequenceType(T.from_tf_structure(ds.element_spec))
    for _ in range(2):
        held = sequence_from_value(ds, t)
        assert isinstance(held, TensorBatches)
        _same(_elements(held), want)
        list(ds)  # the program reads its own object in between
