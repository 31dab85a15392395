"""TFF's randomness semantics: port of TFF's ``docs/tutorials/random_noise_generation.ipynb``.

The tutorial's assertions, run on the thread stack and on 2 worker
processes: stateless noise from a broadcast seed is identical on all clients
(and equals TF's own stateless draw); a generator from non-deterministic
state gives fresh values per client and per call; an unseeded
``tf.random.normal`` gives fresh values per call; generators from a seed and
ops given a seed draw the same values on every call and every client.

Differences from the tutorial text: a Keras model built inside a computation
gets the same initial weights on every client and every call -- as in TFF
0.88 with Keras 3 (its initializers take their seeds when the computation is
traced), where the tutorial's older text asserts they differ.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

import simharness as federated_language
import simharness as tff

_SEED_AT_SERVER = federated_language.FederatedType(
    federated_language.to_type((np.int64, [2])), federated_language.SERVER
)


def _clients_values(fn, n):
    @federated_language.federated_computation(
        federated_language.FederatedType(np.int32, federated_language.CLIENTS)
    )
    def comp(xs):
        return federated_language.federated_map(fn, xs)

    return [float(v) for v in comp(list(range(n)))]


def test_identical_noise_on_clients(tff_stack):
    @tff.tensorflow.computation
    def noise_from_seed(seed):
        return tf.random.stateless_normal((), seed=seed)

    @federated_language.federated_computation(
        _SEED_AT_SERVER, federated_language.FederatedType(np.int32, federated_language.CLIENTS)
    )
    def min_and_max(seed, clients):
        del clients  # the number of clients (TFF: default_num_clients=10)
        seed_on_clients = federated_language.federated_broadcast(seed)
        noise = federated_language.federated_map(noise_from_seed, seed_on_clients)
        return federated_language.federated_min(noise), federated_language.federated_max(noise)

    for seed in ([1, 1], [2, 2]):
        low, high = min_and_max(np.array(seed, np.int64), list(range(10)))
        assert low == high
        assert low == tf.random.stateless_normal((), seed=seed).numpy()


def test_independent_noise_on_clients(tff_stack):
    @federated_language.federated_computation(
        federated_language.FederatedType(np.int32, federated_language.CLIENTS)
    )
    def min_and_max(xs):
        noise = federated_language.federated_map(_noise_of_int, xs)
        return federated_language.federated_min(noise), federated_language.federated_max(noise)

    low, high = min_and_max([0, 1, 2, 3])
    assert low != high
    new_low, new_high = min_and_max([0, 1, 2, 3])
    assert new_low != new_high
    assert new_low != low and new_high != high


@tff.tensorflow.computation(np.int32)
def _noise_of_int(_):
    return tf.random.Generator.from_non_deterministic_state().normal(())


def test_unseeded_op_on_every_client_of_a_broadcast_value(tff_stack):
    # A random function mapped over a value equal on all clients runs on each client.
    @tff.tensorflow.computation(np.int32)
    def noise(_):
        return tf.random.normal([])

    @federated_language.federated_computation(
        federated_language.FederatedType(np.int32, federated_language.SERVER),
        federated_language.FederatedType(np.int32, federated_language.CLIENTS),
    )
    def draw(x, xs):
        return federated_language.federated_map(noise, federated_language.federated_broadcast(x))

    values = draw(np.int32(0), [0, 0, 0, 0, 0])
    assert len(set(float(v) for v in values)) == 5


def test_keras_model_initializer_on_clients(tff_stack):
    @tff.tensorflow.computation(np.int32)
    def model_init(_):
        inputs = tf.keras.Input(shape=(1,))
        outputs = tf.keras.layers.Dense(1)(inputs)
        model = tf.keras.Model(inputs=inputs, outputs=outputs)
        return tf.reshape(model.trainable_variables[0], [-1])[0]

    first = _clients_values(model_init, 4)
    assert len(set(first)) == 1  # the same on every client (TFF 0.88, Keras 3)
    assert _clients_values(model_init, 4) == first  # and on every call


def test_unseeded_noise_on_the_server_differs_per_call(tff_stack):
    tf.random.set_seed(1)  # not part of a traced computation: TFF ignores it too

    @tff.tensorflow.computation(np.int32)
    def return_one_noise(_):
        return tf.random.normal([])

    assert return_one_noise(1) != return_one_noise(2)


def test_generator_from_seed(tff_stack):
    @tff.tensorflow.computation(np.int64)
    def one_noise(i):
        g = tf.random.Generator.from_seed(i)

        @tf.function
        def draw():
            return g.normal([])

        return draw()

    @federated_language.federated_computation
    def two_noise():
        return one_noise(np.int64(1)), one_noise(np.int64(2))

    n1, n2 = two_noise()
    assert n1 != n2
    again = two_noise()
    assert (again[0], again[1]) == (n1, n2)
    # The tutorial's own output under TFF: the same draws.
    assert (n1, n2) == (np.float32(0.3052047), np.float32(-0.38260335))


def test_seeded_ops_are_reproducible_on_every_client_and_call(tff_stack):
    @tff.tensorflow.computation(np.int32)
    def op_seed(_):
        return tf.random.normal([2], seed=7)

    @tff.tensorflow.computation(np.int32)
    def graph_seed(_):
        tf.random.set_seed(3)
        return tf.random.uniform([2]) + tf.random.truncated_normal([2])

    @tff.tensorflow.computation(np.int32)
    def in_tf_function(_):
        @tf.function
        def draw():
            return tf.random.uniform([2], maxval=100, dtype=tf.int32, seed=5)

        return tf.cast(draw(), tf.float32)

    for fn in (op_seed, graph_seed, in_tf_function):
        draw = _mapped(fn)
        first = np.stack(draw([0, 1, 2, 3, 4]))
        np.testing.assert_array_equal(first, np.stack([first[0]] * 5))  # every client
        np.testing.assert_array_equal(np.stack(draw([0, 1, 2, 3, 4])), first)  # every call
        np.testing.assert_array_equal(fn(0), first[0])  # unplaced, too


def _mapped(fn):
    @federated_language.federated_computation(
        federated_language.FederatedType(np.int32, federated_language.CLIENTS)
    )
    def draw(xs):
        return federated_language.federated_map(fn, xs)

    return draw


def test_stateless_seed_state_helper(tff_stack):
    @tff.tensorflow.computation(federated_language.TensorType(np.int64, [2]))
    def one_noise(seed_state):
        weights = [tf.ones([2, 2], dtype=tf.float32), tf.constant([2], dtype=tf.float32)]
        seeds = [seed_state + tf.constant([0, i], tf.int64) for i in range(len(weights))]
        noise = [tf.random.stateless_normal(tf.shape(w), seed=s) for w, s in zip(weights, seeds)]
        return noise, seeds[-1] + tf.constant([0, 1], tf.int64)

    @tff.tensorflow.computation
    def init_state():
        return tf.stack([tf.cast(tf.timestamp() * 1e6, tf.int64), tf.constant(0, tf.int64)])

    @federated_language.federated_computation
    def return_two_noise():
        seed_state = init_state()
        n1, seed_state = one_noise(seed_state)
        n2, seed_state = one_noise(seed_state)
        return n1, n2

    n1, n2 = return_two_noise()
    assert n1[1] != n2[1]
