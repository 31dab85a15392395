"""Streaming map -> reduce (issue 15) on every stack: the same bits as materializing.

Each case runs a computation twice on the same stack: once as it runs by
default (client values made by maps, zips and selections and consumed only
by reductions are computed slice by slice inside each client group), once
with streaming switched off on the stack's strategy (every map's values
materialized, then reduced). Results must be equal bit for bit, and the
strategy's counters must show that the first run streamed. Slices of 16
clients (one chunk) make every group stream in several slices.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import simharness as sh

N = 70  # groups of uneven sizes, chunk boundaries inside groups

F32 = tf.float32
W_TYPE = sh.TensorType(tf.float32, [3])
DATA_TYPE = sh.to_type((sh.TensorType(tf.float32, [4, 3]), sh.TensorType(tf.float32, [4])))


def _strategy(stack, n):
    ex = stack.factory.create_executor({sh.CLIENTS: n})
    for _ in range(4):
        if hasattr(ex, 'strategy'):
            return ex.strategy
        ex = ex.target
    raise AssertionError(f'no federating strategy under {ex!r}')


@sh.tf_computation(W_TYPE, DATA_TYPE)
def local_step(w, data):
    x, y = data
    pred = tf.linalg.matvec(x, w)
    grad = tf.linalg.matvec(x, pred - y, transpose_a=True) / 4.0
    n = tf.reduce_sum(tf.ones_like(y))
    return w - 0.1 * grad - w, n, tf.reduce_sum(tf.square(pred - y))


@sh.tf_computation(sh.TensorType(tf.float32, [3]), sh.TensorType(tf.float32, [3]))
def apply_delta(w, d):
    return w + d


@sh.federated_computation(sh.type_at_server(W_TYPE), sh.type_at_clients(DATA_TYPE))
def fedavg_like(w, data):
    out = sh.federated_map(local_step, sh.federated_zip([sh.federated_broadcast(w), data]))
    delta = sh.federated_mean(out[0], weight=out[1])
    loss = sh.federated_sum(out[2])
    mean_n = sh.federated_mean(out[1])
    new_w = sh.federated_map(apply_delta, sh.federated_zip([w, delta]))
    return new_w, loss, mean_n


@sh.federated_computation(sh.type_at_server(W_TYPE), sh.type_at_clients(DATA_TYPE))
def client_work(w, data):
    """As TFF's client work: its result stays at CLIENTS, its metrics are summed inside."""
    out = sh.federated_map(local_step, sh.federated_zip([sh.federated_broadcast(w), data]))
    return (out[0], out[1]), sh.federated_sum(out[2])


@sh.federated_computation(sh.type_at_clients(W_TYPE), sh.type_at_clients(F32))
def aggregator(update, weight):
    return sh.federated_mean(update, weight=weight)


@sh.federated_computation(sh.type_at_server(W_TYPE), sh.type_at_clients(DATA_TYPE))
def composed_round(w, data):
    """TFF's composed learning process: the aggregator reduces the client work's result."""
    result, metrics = client_work(w, data)
    delta = aggregator(result[0], result[1])
    return sh.federated_map(apply_delta, sh.federated_zip([w, delta])), metrics


@sh.tf_computation(F32)
def scaled(x):
    return x * 1.37 + 0.1


@sh.tf_computation(F32)
def to_int(x):
    return tf.cast(tf.math.floormod(x * 7.0, 100.0), tf.int32)


@sh.tf_computation(F32, F32)
def acc_fn(a, v):
    return a * 0.5 + v


@sh.tf_computation(F32, F32)
def merge_fn(a, b):
    return a * 0.25 + b


@sh.tf_computation(F32)
def report_fn(a):
    return a * 2.0


@sh.federated_computation(sh.type_at_clients(F32))
def aggregates(xs):
    ys = sh.federated_map(scaled, xs)
    agg = sh.federated_aggregate(ys, 0.0, acc_fn, merge_fn, report_fn)
    ints = sh.federated_map(to_int, ys)
    return (
        agg,
        sh.federated_sum(ys),
        sh.federated_secure_sum_bitwidth(ints, 7),
        sh.federated_secure_modular_sum(ints, 13),
    )


@sh.federated_computation(sh.type_at_clients(F32))
def reduce_and_keep(xs):
    ys = sh.federated_map(scaled, xs)
    return sh.federated_sum(ys), ys


def _data(n):
    rng = np.random.default_rng(5)
    return [
        (rng.normal(size=(4, 3)).astype(np.float32), rng.normal(size=4).astype(np.float32))
        for _ in range(n)
    ]


def _bits(x):
    if isinstance(x, (list, tuple)):
        return [_bits(v) for v in x]
    return np.asarray(x).tobytes()


def _run_both(stack, n, comp, *args):
    strategy = _strategy(stack, n)
    strategy.stream_slice = 16
    before = dict(strategy.stream_stats)
    try:
        streamed = comp(*args)
        stats = {k: strategy.stream_stats[k] - before[k] for k in before}
        strategy.stream = False
        materialized = comp(*args)
    finally:
        strategy.stream = True
        strategy.stream_slice = None
    return streamed, materialized, stats


def test_fedavg_round_streams_with_the_same_bits(stack):
    w = np.array([0.5, -0.25, 1.0], np.float32)
    streamed, materialized, stats = _run_both(stack, N, fedavg_like, w, _data(N))
    assert _bits(streamed) == _bits(materialized)
    # One pass over the clients for the round's three reductions.
    assert stats == {'reductions': 3, 'batches': 1, 'recomputed': 0}
    assert np.all(np.isfinite(streamed[0])) and streamed[2] == np.float32(4.0)


def test_aggregate_and_secure_sums_stream_with_the_same_bits(stack):
    xs = [np.float32(v) for v in np.linspace(-3.0, 40.0, N)]
    streamed, materialized, stats = _run_both(stack, N, aggregates, xs)
    assert _bits(streamed) == _bits(materialized)
    assert stats['reductions'] == 4 and stats['batches'] == 1 and stats['recomputed'] == 0
    ints = [
        int(
            np.floor(
                np.float32(np.float32(x * np.float32(1.37)) + np.float32(0.1))
                * np.float32(7.0)
                % 100
            )
        )
        for x in xs
    ]
    assert streamed[3] == sum(ints) % 13


def test_values_also_returned_are_computed_again_with_the_same_bits(stack):
    xs = [np.float32(v) for v in range(N)]
    streamed, materialized, stats = _run_both(stack, N, reduce_and_keep, xs)
    assert _bits(streamed) == _bits(materialized)
    assert stats['reductions'] == 1 and stats['recomputed'] == 1
    assert _bits(streamed[1]) == _bits([scaled(x) for x in xs])


def test_a_map_error_surfaces_from_the_streamed_reduction(stack):
    @sh.tf_computation(F32)
    def check_positive(x):
        tf.debugging.assert_non_negative(x, message='negative client value')
        return x

    @sh.federated_computation(sh.type_at_clients(F32))
    def total(xs):
        return sh.federated_sum(sh.federated_map(check_positive, xs))

    xs = [np.float32(v) for v in range(N)]
    assert total(xs) == np.float32(sum(range(N)))
    xs[N - 3] = np.float32(-1.0)
    with pytest.raises(tf.errors.InvalidArgumentError, match='negative client value'):
        total(xs)


def test_composed_round_reduces_the_client_work_in_one_pass(stack):
    """The client work's metrics sum and the aggregator's mean, made by two nested
    computations, stream in one batch: the clients' updates are computed once."""
    w = np.array([0.5, -0.25, 1.0], np.float32)
    streamed, materialized, stats = _run_both(stack, N, composed_round, w, _data(N))
    assert _bits(streamed) == _bits(materialized)
    assert stats == {'reductions': 2, 'batches': 1, 'recomputed': 0}
    flat, _, _ = _run_both(stack, N, fedavg_like, w, _data(N))
    assert _bits(streamed[0]) == _bits(flat[0]) and _bits(streamed[1]) == _bits(flat[1])
