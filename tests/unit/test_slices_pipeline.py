"""`ClientData.preprocess` datasets built by one call of a traced pipeline (`SlicesPipeline`):
the elements of the eager pipeline, and read by their recipe as a fresh copy reads."""

from __future__ import annotations

import collections

import numpy as np
import pytest

tf = pytest.importorskip('tensorflow')

import simharness as sh  # noqa: E402
from simharness.core import types as T  # noqa: E402
from simharness.core import tf_sequences  # noqa: E402
from simharness.executors.leaf.tf_values import as_dataset  # noqa: E402

OD = collections.OrderedDict


def _data():
    rng = np.random.default_rng(3)
    return sh.simulation.datasets.TestClientData(
        OD(
            (
                f'c{k}',
                OD(
                    pixels=rng.random((20 + 7 * k, 3, 2), dtype=np.float32),
                    label=rng.integers(0, 10, 20 + 7 * k).astype(np.int32),
                ),
            )
            for k in range(3)
        )
    )


def _flat(e):
    return OD(x=tf.reshape(e['pixels'], [-1, 6]), y=tf.reshape(e['label'], [-1, 1]))


PIPELINES = {
    'tutorial': lambda ds: ds.repeat(2).shuffle(16, seed=1).batch(5).map(_flat).prefetch(4),
    'rows': lambda ds: ds.shuffle(8, seed=2),
    'filter_take': lambda ds: ds.filter(lambda e: e['label'] % 3 != 0).take(11).batch(4),
    'seeded_random_map': lambda ds: ds.map(
        lambda e: OD(pixels=e['pixels'] + tf.random.uniform([3, 2], seed=4), label=e['label'])
    ).batch(6),
    'drop_remainder': lambda ds: ds.batch(6, drop_remainder=True).map(_flat),
}


def _elements(ds):
    return [tf.nest.map_structure(lambda t: t.numpy(), e) for e in ds]


def _same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        for u, v in zip(tf.nest.flatten(x), tf.nest.flatten(y)):
            np.testing.assert_array_equal(u, v)


@pytest.mark.parametrize('name', list(PIPELINES))
def test_a_traced_pipeline_gives_the_eager_pipelines_elements(name):
    data = _data()
    fn = PIPELINES[name]
    pre = data.preprocess(fn)
    for cid in data.client_ids:
        got = pre.create_tf_dataset_for_client(cid)
        assert hasattr(got, '_simharness_recipe'), 'built by the traced pipeline'
        assert got.element_spec == pre.element_type_structure
        _same(_elements(got), _elements(fn(data.create_tf_dataset_for_client(cid))))


@pytest.mark.parametrize('name', ['tutorial', 'rows', 'drop_remainder'])
def test_a_recipe_read_is_a_fresh_read(name):
    data = _data()
    pre = data.preprocess(PIPELINES[name])
    for cid in data.client_ids:
        ds = pre.create_tf_dataset_for_client(cid)
        t = T.SequenceType(T.from_tf_structure(ds.element_spec))
        list(ds)  # the program reads its object first: a fresh read is not moved by it
        by_recipe = tf_sequences.read_fresh(ds, t)
        generic = tf_sequences.materialize(tf_sequences.fresh_copy(ds), t)
        assert by_recipe is not None and generic is not None
        assert (by_recipe.batch_size, by_recipe.passes) == (generic.batch_size, generic.passes)
        _same(by_recipe.components, generic.components)
        assert tf_sequences.read_fresh(ds, t) is by_recipe  # seeded: read once, kept


def test_with_a_global_seed_seeded_pipelines_stay_traced_and_unseeded_are_eager():
    tf.random.set_seed(11)
    try:
        data = _data()
        seeded = data.preprocess(PIPELINES['tutorial'])
        got = seeded.create_tf_dataset_for_client('c1')
        assert hasattr(got, '_simharness_recipe')
        _same(
            _elements(got),
            _elements(PIPELINES['tutorial'](data.create_tf_dataset_for_client('c1'))),
        )
        # no seed of its own: eager code draws its seed per dataset, so it is built eagerly
        unseeded = data.preprocess(lambda ds: ds.shuffle(8).batch(4))
        assert not hasattr(unseeded.create_tf_dataset_for_client('c1'), '_simharness_recipe')
    finally:
        tf.random.set_seed(None)


def test_a_pipeline_that_does_not_trace_is_built_eagerly():
    data = _data()

    def reads_in_python(ds):
        n = len(list(ds))  # Python iteration: fine eagerly, no trace
        return ds.batch(n // 2)

    pre = data.preprocess(reads_in_python)
    got = pre.create_tf_dataset_for_client('c2')
    assert not hasattr(got, '_simharness_recipe')
    _same(_elements(got), _elements(reads_in_python(data.create_tf_dataset_for_client('c2'))))


def test_an_infinite_pipeline_has_no_recipe_read():
    data = _data()
    pre = data.preprocess(lambda ds: ds.repeat().batch(4))
    ds = pre.create_tf_dataset_for_client('c0')
    t = T.SequenceType(T.from_tf_structure(ds.element_spec))
    assert tf_sequences.read_fresh(ds, t) is None  # left to tf.data (and its checks)


def _recipe_through_the_codec(ds):
    from simharness.runtime import codec
    from simharness.runtime.datasets import dataset_to_wire

    sent = dataset_to_wire(ds)
    assert isinstance(sent, codec.DatasetRecipe)
    header, buffers = codec.encode([sent])
    return codec.decode(header, buffers)[0]


@pytest.mark.parametrize('name', ['tutorial', 'drop_remainder', 'irregular_batches'])
def test_a_recipe_read_in_another_process_gives_the_fresh_read(name):
    """What a worker does with a `DatasetRecipe`: import its read function once, call it."""
    from simharness.runtime.datasets import RecipeReader

    fns = dict(
        PIPELINES,
        irregular_batches=lambda ds: ds.batch(3).take(2).concatenate(ds.batch(5)).map(_flat),
    )
    data = _data()
    pre = data.preprocess(fns[name])
    reader = RecipeReader()
    for cid in data.client_ids:
        ds = pre.create_tf_dataset_for_client(cid)
        got = reader(_recipe_through_the_codec(ds))
        # not batches of one size: a dataset of them; else their arrays
        assert isinstance(got, tf.data.Dataset) == (name == 'irregular_batches')
        _same(_elements(as_dataset(got)), _elements(tf_sequences.fresh_copy(ds)))


def test_a_recipe_without_its_read_function_is_a_clear_error():
    import dataclasses
    from simharness.errors import SimharnessValueError
    from simharness.runtime.datasets import RecipeReader

    ds = _data().preprocess(PIPELINES['tutorial']).create_tf_dataset_for_client('c0')
    recipe = dataclasses.replace(_recipe_through_the_codec(ds), read=None)
    with pytest.raises(SimharnessValueError, match='without its read function'):
        RecipeReader()(recipe)
