"""Client updates written as TFF users write them, over client datasets, on every stack.

``dataset.reduce``, ``for batch in dataset`` (autograph, with and without
``break``), ``dataset.map`` / ``filter`` / ``take`` in the computation, a
Keras model and optimizer built inside it. Client data come as TFF users
build them: ``from_tensor_slices(...).batch(b)`` (lowered into tensor loops),
unbatched, from a list of elements, or through a pipeline simharness does
not recognize (run by `tf.data`).

Every result must be the same bits whichever way the data come (the
lowered loop and `tf.data` run the user's functions on the same elements in
the same order) and on every stack (`_FIRST` keeps the first stack's).
"""

from __future__ import annotations

import collections
from typing import Any, Dict

import numpy as np
import pytest
import tensorflow as tf

import simharness as sh

W_TYPE = sh.to_type((sh.TensorType(tf.float32, [4, 3]), sh.TensorType(tf.float32, [3])))
BATCH_TYPE = sh.to_type((sh.TensorType(tf.float32, [None, 4]), sh.TensorType(tf.int32, [None])))
DICT_BATCH_TYPE = sh.to_type(
    collections.OrderedDict(
        x=sh.TensorType(tf.float32, [None, 4]), y=sh.TensorType(tf.int32, [None])
    )
)
ROW_TYPE = sh.to_type((sh.TensorType(tf.float32, [4]), sh.TensorType(tf.int32, [])))
LR = 0.1

_FIRST: Dict[str, Any] = {}


def _same_on_every_stack(key: str, value: Any) -> None:
    leaves = [np.asarray(x) for x in tf.nest.flatten(value)]
    first = _FIRST.setdefault(key, leaves)
    assert len(first) == len(leaves)
    for a, b in zip(first, leaves):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert a.tobytes() == b.tobytes(), (key, a, b)


def _first_time(key: str) -> bool:
    """True on the first stack a case runs on (the `tf.data` comparison runs there only:
    later stacks are compared with the first stack's bits)."""
    return key not in _FIRST


def _same(a: Any, b: Any) -> None:
    la, lb = tf.nest.flatten(a), tf.nest.flatten(b)
    assert len(la) == len(lb)
    for x, y in zip(la, lb):
        assert np.asarray(x).tobytes() == np.asarray(y).tobytes(), (x, y)


def _step(w, x, y):
    with tf.GradientTape() as tape:
        tape.watch(w)
        logits = tf.matmul(x, w[0]) + w[1]
        loss = tf.reduce_mean(
            tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)
        )
    g = tape.gradient(loss, w)
    return tuple(v - LR * d for v, d in zip(w, g))


# ------------------------------------------------------------------ client updates


@sh.tf_computation(W_TYPE, sh.SequenceType(BATCH_TYPE))
def update_reduce(w, ds):
    def step(state, batch):
        v, n = state
        return _step(v, batch[0], batch[1]), n + tf.shape(batch[0])[0]

    v, n = ds.reduce((tuple(w), tf.constant(0)), step)
    return tuple(a - b for a, b in zip(v, w)), n


@tf.function
def _for_loop(w, ds):
    v = tuple(w)
    n = tf.constant(0)
    for x, y in ds:
        v = _step(v, x, y)
        n += tf.shape(x)[0]
    return v, n


@sh.tf_computation(W_TYPE, sh.SequenceType(BATCH_TYPE))
def update_for(w, ds):
    return _for_loop(tuple(w), ds)


@tf.function
def _for_break(w, ds):
    v = tuple(w)
    n = tf.constant(0)
    for x, y in ds:
        if n >= 6:
            break
        v = _step(v, x, y)
        n += tf.shape(x)[0]
    return v, n


@sh.tf_computation(W_TYPE, sh.SequenceType(BATCH_TYPE))
def update_for_break(w, ds):
    return _for_break(tuple(w), ds)


@sh.tf_computation(W_TYPE, sh.SequenceType(BATCH_TYPE))
def update_map_filter(w, ds):
    ds = ds.map(lambda x, y: (x * 2.0, y)).filter(lambda x, y: tf.reduce_sum(x) > 0.0)
    return ds.reduce(tuple(w), lambda v, b: _step(v, b[0], b[1]))


@sh.tf_computation(W_TYPE, sh.SequenceType(DICT_BATCH_TYPE))
def update_dict(w, ds):
    return ds.reduce(tuple(w), lambda v, b: _step(v, b['x'], b['y']))


@sh.tf_computation(W_TYPE, sh.SequenceType(ROW_TYPE))
def update_rows(w, ds):
    def step(v, row):
        return _step(v, row[0][tf.newaxis], row[1][tf.newaxis])

    return ds.reduce(tuple(w), step)


@sh.tf_computation(sh.SequenceType(BATCH_TYPE))
def take_two_and_count(ds):  # not lowered (take): runs through tf.data
    return ds.take(2).reduce(tf.constant(0), lambda n, b: n + tf.shape(b[0])[0])


@tf.function
def _keras_train(model, opt, loss_fn, w, ds):
    for v, t in zip(model.trainable_variables, w):
        v.assign(t)
    for x, y in ds:
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
    return tuple(v - t for v, t in zip(model.trainable_variables, w))


@sh.tf_computation(W_TYPE, sh.SequenceType(BATCH_TYPE))
def update_keras(w, ds):
    model = tf.keras.Sequential([tf.keras.layers.Input((4,)), tf.keras.layers.Dense(3)])
    opt = tf.keras.optimizers.SGD(learning_rate=LR)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    return _keras_train(model, opt, loss_fn, list(w), ds)


def _round(update, element_type):
    @sh.tf_computation(W_TYPE, W_TYPE)
    def apply(w, d):
        return tuple(a + b for a, b in zip(w, d))

    @sh.federated_computation(
        sh.type_at_server(W_TYPE), sh.type_at_clients(sh.SequenceType(element_type))
    )
    def round_fn(w, data):
        out = sh.federated_map(update, sh.federated_zip([sh.federated_broadcast(w), data]))
        delta = out if update.type_signature.result == W_TYPE else out[0]
        return sh.federated_map(apply, sh.federated_zip([w, sh.federated_mean(delta)]))

    return round_fn


# ------------------------------------------------------------------ data


def _arrays(num_clients: int, rows=lambda k: 10, seed: int = 0):
    rng = np.random.default_rng(seed)
    out = []
    for k in range(num_clients):
        n = rows(k)
        out.append(
            (
                rng.normal(size=(n, 4)).astype(np.float32),
                rng.integers(0, 3, size=n).astype(np.int32),
            )
        )
    return out


def _batched(arrays, b=4, drop=False):
    return [tf.data.Dataset.from_tensor_slices(a).batch(b, drop_remainder=drop) for a in arrays]


def _unrecognized(datasets):
    """The same elements through a pipeline simharness leaves to tf.data (a filter
    makes the number of elements unknown, so the executor does not read it ahead)."""
    return [d.filter(lambda *e: True) for d in datasets]


def _tutorial_pipeline(arrays, seed=1):
    """Client data as TFF's tutorials preprocess them: repeat, shuffle, batch, map."""
    return [
        tf.data.Dataset.from_tensor_slices(a)
        .repeat(2)
        .shuffle(8, seed=seed)
        .batch(4)
        .map(lambda x, y: (x * 0.5, y))
        .prefetch(2)
        for a in arrays
    ]


W0 = (np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3), np.zeros(3, np.float32))

CASES = {
    'reduce': (update_reduce, BATCH_TYPE),
    'for_loop': (update_for, BATCH_TYPE),
    'for_break': (update_for_break, BATCH_TYPE),
    'map_filter': (update_map_filter, BATCH_TYPE),
    'keras': (update_keras, BATCH_TYPE),
}


@pytest.mark.parametrize('case', list(CASES))
def test_client_update_over_batches(stack, case):
    update, et = CASES[case]
    round_fn = _round(update, et)
    arrays = _arrays(7)
    fast = round_fn(W0, _batched(arrays))
    if _first_time(f'batches-{case}'):
        _same(fast, round_fn(W0, _unrecognized(_batched(arrays))))
    _same_on_every_stack(f'batches-{case}', fast)
    assert not np.array_equal(fast[0], W0[0])  # it trained


@pytest.mark.parametrize('case', ['reduce', 'for_loop'])
def test_clients_of_different_sizes_and_partial_batches(stack, case):
    update, et = CASES[case]
    round_fn = _round(update, et)
    arrays = _arrays(6, rows=lambda k: 3 + 2 * k)
    for drop in (False, True):
        fast = round_fn(W0, _batched(arrays, 4, drop))
        if _first_time(f'sizes-{case}-{drop}'):
            _same(fast, round_fn(W0, _unrecognized(_batched(arrays, 4, drop))))
        _same_on_every_stack(f'sizes-{case}-{drop}', fast)


@pytest.mark.parametrize('case', ['reduce', 'for_loop'])
def test_pipelines_read_ahead_give_the_tf_data_bits(stack, case):
    """Small finite pipelines (repeat, seeded shuffle, batch, map) are read into
    arrays by the executor and lowered: the same elements as tf.data gives."""
    update, et = CASES[case]
    round_fn = _round(update, et)
    arrays = _arrays(5, rows=lambda k: 5 + k)
    fast = round_fn(W0, _tutorial_pipeline(arrays))
    if _first_time(f'pipeline-{case}'):
        _same(fast, round_fn(W0, _unrecognized(_tutorial_pipeline(arrays))))
    _same_on_every_stack(f'pipeline-{case}', fast)


def test_dict_elements_as_client_data_gives_them(stack):
    arrays = _arrays(5)
    cd = sh.data.ArrayClientData({f'c{k}': {'x': x, 'y': y} for k, (x, y) in enumerate(arrays)})
    datasets = [cd.create_tf_dataset_for_client(c).batch(3) for c in cd.client_ids]
    round_fn = _round(update_dict, DICT_BATCH_TYPE)
    fast = round_fn(W0, datasets)
    if _first_time('dict'):
        _same(fast, round_fn(W0, _unrecognized(datasets)))
    _same_on_every_stack('dict', fast)


def test_unbatched_rows_and_lists_of_elements(stack):
    arrays = _arrays(4, rows=lambda k: 3 + k)
    round_fn = _round(update_rows, ROW_TYPE)
    sliced = [tf.data.Dataset.from_tensor_slices(a) for a in arrays]
    listed = [[(x[i], y[i]) for i in range(len(y))] for x, y in arrays]
    fast = round_fn(W0, sliced)
    _same(fast, round_fn(W0, listed))
    if _first_time('rows'):
        _same(fast, round_fn(W0, _unrecognized(sliced)))
    _same_on_every_stack('rows', fast)


def test_uses_that_are_not_loops_still_run(stack):
    @sh.federated_computation(sh.type_at_clients(sh.SequenceType(BATCH_TYPE)))
    def counts(data):
        return sh.federated_map(take_two_and_count, data)

    arrays = _arrays(3, rows=lambda k: 2 + 3 * k)
    assert [int(c) for c in counts(_batched(arrays, 2))] == [2, 4, 4]


def test_sequences_come_back_as_datasets(stack):
    @sh.tf_computation(sh.SequenceType(BATCH_TYPE))
    def identity(ds):
        return ds

    arrays = _arrays(1, rows=lambda k: 5)
    out = identity(_batched(arrays, 2)[0])
    assert [len(b[1]) for b in out] == [2, 2, 1]
    np.testing.assert_array_equal(np.concatenate([b[0] for b in out]), arrays[0][0])
