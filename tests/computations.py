"""Computations several test modules and benchmarks share."""

from __future__ import annotations

from typing import Any, List, Tuple

import numpy as np
import tensorflow as tf

import simharness as sh


def broadcast_aggregate(num_floats: int, twice: bool = False) -> Any:
    """``federated_sum(federated_map(x * 0.5, federated_broadcast(w)))`` for a float32[num_floats]
    model at the server: with 2 clients the result is exactly ``w``. `twice`: the
    computation returns that one sum twice, as ``(s, s)``."""
    spec = sh.TensorType(np.float32, (num_floats,))

    @sh.tf_computation(spec)
    def half(x):
        return x * 0.5

    @sh.federated_computation(sh.type_at_server(spec))
    def broadcast_aggregate(w):
        s = sh.federated_sum(sh.federated_map(half, sh.federated_broadcast(w)))
        return (s, s) if twice else s

    return broadcast_aggregate


def broadcast_scaled_sum(num_floats: int) -> Any:
    """``federated_sum(federated_map(w * x, federated_zip([federated_broadcast(w), xs])))``
    for a float32[num_floats] model `w` at the server and float32 clients `xs`: a round's
    shape (a broadcast read with each client's own value) at its smallest."""
    spec = sh.TensorType(np.float32, (num_floats,))

    @sh.tf_computation(spec, tf.float32)
    def scaled(w, x):
        return w * x

    @sh.federated_computation(sh.type_at_server(spec), sh.type_at_clients(tf.float32))
    def broadcast_scaled_sum(w, xs):
        return sh.federated_sum(
            sh.federated_map(scaled, sh.federated_zip([sh.federated_broadcast(w), xs]))
        )

    return broadcast_scaled_sum


def map_sum_add_one() -> Any:
    """``federated_sum(federated_map(x + 1, xs))`` over float32 clients: the trivial round
    whose cost is the stack's own (driver CPU, messages per worker)."""

    @sh.tf_computation(tf.float32)
    def add_one(x):
        return x + 1.0

    @sh.federated_computation(sh.type_at_clients(tf.float32))
    def map_sum(xs):
        return sh.federated_sum(sh.federated_map(add_one, xs))

    return map_sum


# ------------------------------------------------------------------ a weighted round
# One FedAvg-like round (broadcast, map, weighted mean, sums) whose client math is not
# exactly rounded (sin, matmul, reductions): stacks agree bit for bit only if they fold
# alike. The remote and Ray stacks are checked against the thread stack with it.

DIM = 16


@sh.tf_computation(sh.TensorType(tf.float32, [DIM]), tf.float32)
def client_update(x, w):
    m = tf.reshape(tf.range(DIM * DIM, dtype=tf.float32), [DIM, DIM]) / 97.0
    y = tf.linalg.matvec(m, tf.sin(x) * w)
    return y / (1.0 + tf.reduce_sum(tf.abs(y)))


@sh.tf_computation(sh.TensorType(tf.float32, [DIM]))
def norm(x):
    return tf.sqrt(tf.reduce_sum(x * x))


@sh.federated_computation(
    sh.type_at_clients(sh.TensorType(tf.float32, [DIM])),
    sh.type_at_clients(tf.float32),
    sh.type_at_server(tf.float32),
)
def round_fn(xs, ws, scale):
    """``(weighted mean of the updates, sum of their norms, sum of the weights)``."""
    updates = sh.federated_map(client_update, [xs, sh.federated_broadcast(scale)])
    mean = sh.federated_mean(updates, weight=ws)
    total = sh.federated_sum(sh.federated_map(norm, updates))
    return mean, total, sh.federated_sum(ws)


def round_data(n: int, seed: int = 0) -> Tuple[List[np.ndarray], List[np.float32], np.float32]:
    """`round_fn`'s arguments for `n` clients: (xs, weights, scale)."""
    rng = np.random.default_rng(seed)
    xs = list(rng.normal(size=(n, DIM)).astype(np.float32))
    ws = list(rng.uniform(0.5, 2.0, size=n).astype(np.float32))
    return xs, ws, np.float32(1.7)


def run_round(factory: Any, args: Any, retries: int = 0) -> Any:
    """`round_fn(*args)` on stacks of `factory`."""
    with sh.execution_context(factory, retries=retries):
        return round_fn(*args)


def listed(value: object) -> object:
    """`value` with each `tf.data.Dataset` in it (a sequence result, which a context returns
    as TFF's do) replaced by the list of its elements, lists of them recursively."""
    if isinstance(value, tf.data.Dataset):
        return [listed(e) for e in value.as_numpy_iterator()]
    if isinstance(value, list):
        return [listed(e) for e in value]
    return value
