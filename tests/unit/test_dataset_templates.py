"""Datasets alike but for their arrays, read by one traced function (`dataset_templates`).

Every read must give what a fresh copy of the dataset's graph gives (TFF's executors
rebuild a dataset from its graph on every call): compared here element by element with
`tf_sequences.fresh_copy`, for the pipelines TFF programs build per client.
"""

from __future__ import annotations

import collections
import threading

import numpy as np
import pytest

tf = pytest.importorskip('tensorflow')

from simharness.core import dataset_templates as dt  # noqa: E402
from simharness.core import tf_sequences as tseq  # noqa: E402
from simharness.core import types as T  # noqa: E402
from simharness.core.sequences import TensorBatches  # noqa: E402
from simharness.executors.leaf.tf_values import sequence_from_value  # noqa: E402

OD = collections.OrderedDict
VOCAB = list('abcdefgh')
TABLE = tf.lookup.StaticHashTable(
    tf.lookup.KeyValueTensorInitializer(VOCAB, tf.range(len(VOCAB), dtype=tf.int64)), -1
)


def _rows(k, n=None):
    n = n or 20 + k
    return OD(
        x=np.arange(2 * n, dtype=np.float32).reshape(n, 2) + 100 * k,
        y=np.arange(n, dtype=np.int64) % 3,
    )


def _text(k):
    rng = np.random.default_rng(k)
    return np.array(
        [''.join(rng.choice(VOCAB, size=30 + 7 * i)).encode() for i in range(3 + k % 3)],
        dtype=object,
    )


PIPELINES = {
    'tutorial': lambda k: (
        tf.data.Dataset.from_tensor_slices(_rows(k))
        .repeat(2)
        .shuffle(16, seed=1)
        .batch(5)
        .map(lambda e: OD(x=e['x'] * 2.0, y=e['y']))
    ),
    'shuffle_then_repeat': lambda k: (
        tf.data.Dataset.from_tensor_slices(_rows(k)).shuffle(8, seed=4).repeat(3).batch(4)
    ),
    'text': lambda k: (
        tf.data.Dataset.from_tensor_slices(OD(s=_text(k)))
        .map(lambda e: TABLE.lookup(tf.strings.bytes_split(tf.reshape(e['s'], [1])).values))
        .unbatch()
        .batch(9, drop_remainder=True)
        .shuffle(20, seed=2)
        .batch(2, drop_remainder=True)
        .map(lambda c: (c[:, :-1], c[:, 1:]))
    ),
}


def _type(ds):
    return T.SequenceType(T.from_tf_structure(ds.element_spec))


def _fresh(ds):
    return tseq.materialize(tseq.fresh_copy(ds), _type(ds), unknown_size=True)


def _same(a, b):
    assert isinstance(a, TensorBatches) and isinstance(b, TensorBatches)
    assert a.batch_size == b.batch_size and len(a.components) == len(b.components)
    for x, y in zip(a.components, b.components):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.parametrize('name', list(PIPELINES))
def test_clients_share_one_template_and_read_as_fresh_copies(name):
    make = PIPELINES[name]
    traced = set()
    for k in range(4):
        ds = make(k)
        recipe = dt.template_recipe(ds, tseq.serialized_graph(ds))
        assert recipe is not None
        traced.add(id(recipe[0]))
        want = _fresh(ds)
        for _ in range(2):  # every read: the fresh copy's elements (its first shuffle order)
            _same(sequence_from_value(ds, _type(ds)), want)
            list(ds.take(2))  # the program reads its own object in between
    assert len(traced) == 1


def test_another_pipeline_is_another_template():
    a, b = PIPELINES['tutorial'](0), PIPELINES['tutorial'](0).unbatch().batch(4)
    ra = dt.template_recipe(a, tseq.serialized_graph(a))
    rb = dt.template_recipe(b, tseq.serialized_graph(b))
    assert ra is not None and rb is not None and ra[0] is not rb[0]


def test_an_unseeded_shuffle_reads_a_new_permutation_each_time():
    ds = tf.data.Dataset.from_tensor_slices(np.arange(64, dtype=np.int64)).shuffle(64).batch(64)
    t = _type(ds)
    orders = set()
    for _ in range(4):
        dt.attach_template_recipe(ds)
        got = sequence_from_value(ds, t)
        row = np.asarray(got.components[0]).ravel()
        assert sorted(row.tolist()) == list(range(64))
        orders.add(tuple(row.tolist()))
    assert len(orders) > 1


def test_reads_from_many_threads_at_once_are_each_a_fresh_copy():
    make = PIPELINES['text']
    datasets = [make(k) for k in range(8)]
    want = [_fresh(ds) for ds in datasets]
    errors = []

    def read(k):
        try:
            for _ in range(5):
                _same(sequence_from_value(datasets[k], _type(datasets[k])), want[k])
        except Exception as e:  # pylint: disable=broad-except
            errors.append(e)

    threads = [threading.Thread(target=read, args=(k,)) for k in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors[:1]


NOT_TEMPLATED = {
    # a random op in a function keeps its state in a kernel a traced reader reuses
    'random_map': lambda: (
        tf.data.Dataset.from_tensor_slices(_rows(0))
        .map(lambda e: OD(x=e['x'] + tf.random.uniform([2], seed=3), y=e['y']))
        .batch(4)
    ),
    # no array of the client's: nothing to lift
    'range': lambda: tf.data.Dataset.range(10).batch(3),
}


@pytest.mark.parametrize('name', list(NOT_TEMPLATED))
def test_other_graphs_are_read_as_fresh_copies(name):
    ds = NOT_TEMPLATED[name]()
    assert dt.template_recipe(ds, tseq.serialized_graph(ds)) is None


def test_a_dataset_with_python_state_or_no_end_gets_no_recipe():
    gen = tf.data.Dataset.from_generator(
        lambda: iter(range(5)), output_signature=tf.TensorSpec([], tf.int64)
    ).batch(2)
    endless = tf.data.Dataset.from_tensor_slices(_rows(0)).repeat().batch(4)
    for ds in (gen, endless):
        dt.attach_template_recipe(ds)
        assert tseq.recipe_known(ds) and tseq.recipe_of(ds) is None


def test_a_client_without_data_reads_as_empty_on_a_worker():
    """A recipe of a client with no rows (another client's pipeline made the template)
    reads as no elements where a worker reads it (`RecipeReader`), not as an error."""
    from simharness.runtime.codec import DatasetRecipe
    from simharness.runtime.datasets import RecipeReader, dataset_to_wire

    make = PIPELINES['shuffle_then_repeat']
    dataset_to_wire(make(1))  # the template, from a client with data
    empty = (
        tf.data.Dataset.from_tensor_slices(_rows(0, n=1))
        .take(0)
        .shuffle(8, seed=4)
        .repeat(3)
        .batch(4)
    )
    wire = dataset_to_wire(empty)
    assert isinstance(wire, DatasetRecipe)
    got = RecipeReader()(wire)
    assert len(list(got)) == 0 if isinstance(got, tf.data.Dataset) else got.num_elements == 0
