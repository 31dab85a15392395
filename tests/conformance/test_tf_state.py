"""`tf.Variable`s, Keras models and `tf.lookup` tables inside a `tf_computation`, on every stack.

As in TFF, state lives inside one call: variables start from their initial
values and tables are initialized on every call, so a `tf_computation` stays
a pure function (same result for the same argument, whichever client, worker
or batched TF call runs it). Results are also bit-identical across stacks:
each test records its first stack's result in `_FIRST` and compares later
stacks' results with it.
"""

from __future__ import annotations

from typing import Any, Dict

import numpy as np
import tensorflow as tf

import simharness as sh

F32_AT_C = sh.type_at_clients(tf.float32)
F32_SEQ = sh.SequenceType(tf.float32)

#: test name -> the result of the first stack that ran it (results must match across stacks)
_FIRST: Dict[str, Any] = {}


def _same_on_every_stack(key: str, value: Any) -> None:
    leaves = [np.asarray(x) for x in tf.nest.flatten(value)]
    first = _FIRST.setdefault(key, leaves)
    assert len(first) == len(leaves)
    for a, b in zip(first, leaves):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
        assert a.tobytes() == b.tobytes()  # bits, not just values (-0.0, NaN payloads)


# ---------------------------------------------------------------- variables


@sh.tf_computation(tf.float32)
def add_to_variable(x):
    v = tf.Variable(1.0)
    v.assign_add(x)  # no control dependency needed: ops run in program order
    return v.read_value()


@sh.tf_computation(tf.float32)
def variable_steps(x):
    v = tf.Variable(2.0, trainable=False)
    w = tf.Variable(tf.zeros([3]), name='w')
    v.assign(v * x)
    w.assign_add(tf.fill([3], v))
    v.assign_sub(1.0)
    return {'v': v, 'w': w.read_value()}  # a variable itself is read last


@sh.federated_computation(F32_AT_C)
def fed_add_to_variable(xs):
    return sh.federated_map(add_to_variable, xs)


@sh.federated_computation(sh.type_at_server(tf.float32))
def server_add_to_variable(x):
    return sh.federated_map(add_to_variable, x)


def test_variable_starts_from_its_initial_value_on_every_call(stack):
    assert add_to_variable(2.0) == 3.0
    assert add_to_variable(2.0) == 3.0
    assert add_to_variable(5.0) == 6.0
    assert server_add_to_variable(4.0) == 5.0
    out = variable_steps(3.0)
    assert out['v'] == 5.0
    np.testing.assert_array_equal(out['w'], [6.0, 6.0, 6.0])
    assert variable_steps(3.0)['v'] == 5.0


def test_variables_at_clients_do_not_share_state(stack):
    # 20 clients: one TF call per client block on the batching stacks
    xs = [float(i) for i in range(20)]
    for _ in range(2):
        assert fed_add_to_variable(xs) == [1.0 + x for x in xs]


# ---------------------------------------------------------------- Keras

W_TYPE = [(tf.float32, [3, 2]), (tf.float32, [2])]


def _dense_model():
    return tf.keras.Sequential([tf.keras.layers.Input((3,)), tf.keras.layers.Dense(2)])


@sh.tf_computation
def server_init():
    return _dense_model().trainable_variables


@sh.tf_computation((tf.float32, [None, 3]))
def predict_with_constant_weights(x):
    dense = tf.keras.layers.Dense(
        2, kernel_initializer='ones', bias_initializer=tf.keras.initializers.Constant(0.5)
    )
    model = tf.keras.Sequential([dense])
    return model(x)  # built on its first call, inside the computation


@sh.tf_computation(W_TYPE, (tf.float32, [None, 3]))
def predict(weights, x):
    model = _dense_model()
    # The TFF tutorials' pattern: assign the weights, then use the model.
    with tf.control_dependencies(
        tf.nest.map_structure(lambda v, t: v.assign(t), model.trainable_variables, list(weights))
    ):
        return tf.identity(model(x))


@sh.tf_computation(W_TYPE, (tf.float32, [None, 3]))
def predict_without_control_dependencies(weights, x):
    model = _dense_model()
    for v, t in zip(model.trainable_variables, weights):
        v.assign(t)
    return model(x)


@sh.federated_computation(sh.type_at_server(W_TYPE), sh.type_at_clients((tf.float32, [4, 3])))
def fed_predict(weights, xs):
    return sh.federated_map(predict, sh.federated_zip([sh.federated_broadcast(weights), xs]))


def _client_inputs(n):
    rng = np.random.default_rng(7)
    return [rng.standard_normal((4, 3)).astype(np.float32) for _ in range(n)]


def test_keras_model_built_inside_a_computation(stack):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(predict_with_constant_weights(x), [[3.5, 3.5], [12.5, 12.5]])
    weights = server_init()
    assert [w.shape for w in weights] == [(3, 2), (2,)]
    _same_on_every_stack('server_init', weights)  # traced once: the same initial weights
    np.testing.assert_array_equal(server_init()[0], weights[0])


def test_keras_weights_assigned_then_used(stack):
    rng = np.random.default_rng(3)
    weights = [
        rng.standard_normal((3, 2)).astype(np.float32),
        rng.standard_normal(2).astype(np.float32),
    ]
    xs = _client_inputs(7)
    out = fed_predict(weights, xs)
    assert len(out) == 7
    for x, y in zip(xs, out):
        np.testing.assert_allclose(y, x @ weights[0] + weights[1], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(predict(weights, xs[0]), out[0])
    np.testing.assert_array_equal(predict_without_control_dependencies(weights, xs[0]), out[0])
    _same_on_every_stack('fed_predict', out)


# ---------------------------------------------------------------- tables


@sh.tf_computation((tf.string, [None]))
def word_ids(words):
    table = tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(
            tf.constant(['a', 'b', 'c']), tf.constant([1, 2, 3], tf.int64)
        ),
        -1,
    )
    return table.lookup(words)


@sh.federated_computation(sh.type_at_clients((tf.string, [None])))
def fed_word_ids(words):
    return sh.federated_map(word_ids, words)


@sh.tf_computation(tf.int64)
def mutable_table_size(k):
    table = tf.lookup.experimental.MutableHashTable(tf.int64, tf.float32, default_value=-1.0)
    table.insert(tf.stack([k, k + 1]), tf.constant([1.0, 2.0]))
    return [table.size(), table.lookup(k + 1)]


@sh.federated_computation(sh.type_at_clients(tf.int64))
def fed_mutable_table_size(ks):
    return sh.federated_map(mutable_table_size, ks)


def test_static_hash_table(stack):
    np.testing.assert_array_equal(word_ids(np.array([b'a', b'z', b'c'])), [1, -1, 3])
    out = fed_word_ids([np.array([b'b']), np.array([b'c', b'a']), np.array([b'q'])])
    assert [list(o) for o in out] == [[2], [3, 1], [-1]]


def test_mutable_table_is_fresh_on_every_call(stack):
    out = fed_mutable_table_size(list(np.arange(0, 40, 4, dtype=np.int64)))
    assert [list(map(float, o)) for o in out] == [[2.0, 2.0]] * 10


# ---------------------------------------------------------------- datasets


@sh.tf_computation(F32_SEQ, tf.float32)
def reduce_into_variable(ds, scale):
    total = tf.Variable(0.0)
    count = tf.Variable(0, dtype=tf.int64)

    def step(n, x):
        total.assign_add(x * scale)
        count.assign_add(1)
        return n + 1

    n = ds.reduce(tf.constant(0, tf.int64), step)
    return [total.read_value(), count.read_value() + n]


@sh.federated_computation(sh.type_at_clients(F32_SEQ), sh.type_at_server(tf.float32))
def fed_reduce_into_variable(ds, scale):
    return sh.federated_map(
        reduce_into_variable, sh.federated_zip([ds, sh.federated_broadcast(scale)])
    )


CLIENT_SEQS = [[1.0, 2.0], [3.0], [4.0, 5.0, 6.0], []]


def test_dataset_reduce_updates_a_variable(stack):
    assert reduce_into_variable([1.0, 2.0, 3.0], 2.0) == [12.0, 6]
    out = fed_reduce_into_variable(CLIENT_SEQS, 0.5)
    assert out == [[1.5, 4], [1.5, 2], [7.5, 6], [0.0, 0]]
    assert fed_reduce_into_variable(CLIENT_SEQS, 0.5) == out


@sh.tf_computation(tf.float32)
def dataset_of_a_variable(x):
    v = tf.Variable([1.0, 2.0, 3.0])
    v.assign_add(tf.fill([3], x))
    ds = tf.data.Dataset.from_tensor_slices(v)  # reads the variable here, in program order
    v.assign(tf.zeros([3]))

    def add(a, b):
        return a + b

    return ds.reduce(0.0, add) + tf.reduce_sum(v)


def test_dataset_of_a_variable(stack):
    assert dataset_of_a_variable(1.0) == 9.0
    assert dataset_of_a_variable(1.0) == 9.0


# ---------------------------------------------------------------- aggregation with state


@sh.tf_computation(tf.float32, tf.float32)
def accumulate_through_variable(acc, x):
    v = tf.Variable(acc)
    v.assign_add(x)
    return v.read_value()


@sh.tf_computation(tf.float32, tf.float32)
def merge(a, b):
    return a + b


@sh.tf_computation(tf.float32)
def report(a):
    return tf.Variable(a).read_value()


@sh.federated_computation(F32_AT_C)
def fed_aggregate_with_variables(xs):
    return sh.federated_aggregate(xs, 0.0, accumulate_through_variable, merge, report)


def test_aggregation_functions_with_variables(stack):
    xs = [0.1 * i for i in range(37)]
    out = fed_aggregate_with_variables(xs)
    np.testing.assert_allclose(out, sum(xs), rtol=1e-5)
    _same_on_every_stack('fed_aggregate_with_variables', out)


# ---------------------------------------------------------------- the TFF tutorial's client update

BATCH = sh.StructType([('x', (tf.float32, [None, 3])), ('y', (tf.float32, [None, 1]))])
W1_TYPE = [(tf.float32, [3, 1]), (tf.float32, [1])]


@tf.function
def _client_update(model, dataset, server_weights, optimizer):
    weights = model.trainable_variables
    tf.nest.map_structure(lambda v, t: v.assign(t), weights, server_weights)
    for batch in dataset:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(batch['x']) - batch['y']) ** 2)
        optimizer.apply_gradients(zip(tape.gradient(loss, weights), weights))
    return [tf.identity(v) for v in weights]


@sh.tf_computation(sh.SequenceType(BATCH), W1_TYPE)
def client_update(dataset, server_weights):
    model = tf.keras.Sequential([tf.keras.layers.Input((3,)), tf.keras.layers.Dense(1)])
    optimizer = tf.keras.optimizers.SGD(learning_rate=0.1)
    return _client_update(model, dataset, list(server_weights), optimizer)


@sh.federated_computation(sh.type_at_clients(sh.SequenceType(BATCH)), sh.type_at_server(W1_TYPE))
def fed_client_update(datasets, weights):
    return sh.federated_map(
        client_update, sh.federated_zip([datasets, sh.federated_broadcast(weights)])
    )


def _sgd_reference(batches, w, b):
    w, b = w.astype(np.float64), b.astype(np.float64)
    for x, y in batches:
        err = x @ w + b - y
        gw, gb = 2 * x.T @ err / len(x), 2 * err.mean(0)
        w, b = w - 0.1 * gw, b - 0.1 * gb
    return w, b


def test_keras_model_and_optimizer_in_a_client_update(stack):
    rng = np.random.default_rng(5)
    clients = []
    for n in (8, 4, 6):
        x = rng.standard_normal((n, 3)).astype(np.float32)
        clients.append(
            [{'x': x[i : i + 4], 'y': x[i : i + 4].sum(1, keepdims=True)} for i in range(0, n, 4)]
        )
    datasets = [
        tf.data.Dataset.from_tensor_slices(
            {k: np.concatenate([b[k] for b in c]) for k in ('x', 'y')}
        ).batch(4)
        for c in clients
    ]
    weights = [np.full((3, 1), 0.5, np.float32), np.zeros(1, np.float32)]
    out = fed_client_update(datasets, weights)
    for c, (w, b) in zip(clients, out):
        ref_w, ref_b = _sgd_reference([(d['x'], d['y']) for d in c], weights[0], weights[1])
        np.testing.assert_allclose(w, ref_w, rtol=1e-5)
        np.testing.assert_allclose(b, ref_b, rtol=1e-5, atol=1e-6)
    again = fed_client_update(datasets, weights)  # the optimizer's state does not carry over
    for a, b in zip(tf.nest.flatten(again), tf.nest.flatten(out)):
        np.testing.assert_array_equal(a, b)
    _same_on_every_stack('fed_client_update', out)
