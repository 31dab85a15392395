"""XLA-compiled client computations give the same bits on every stack and layout.

A compiled block of clients is one XLA computation (a loop over its clients):
its per-client results must be the bits of one compiled call per client (the
``thread-1`` layout: one client per thread), however a stack cuts the clients
into blocks (2 per thread, uneven blocks, 3 per worker, services, Ray actors).
Seven clients, so that every layout has an uneven block. The rule and the
forcing are in `simharness.core.xla` (tests/unit/test_xla_rule.py).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

import simharness as sh
from simharness.core import xla
from simharness.executors.leaf.embedded_function import EmbeddedFunction

N = 7
W = sh.TensorType(tf.float32, [256, 256])  # 65,536 elements: the rule compiles the step
X = sh.TensorType(tf.float32, [8, 256])


@sh.tf_computation(W, X)
def client_step(w, x):
    h = tf.tanh(tf.matmul(x, w) * 0.05)
    return w - 0.01 * tf.matmul(x, h, transpose_a=True), tf.reduce_sum(h * h)


@sh.federated_computation(sh.type_at_server(W), sh.type_at_clients(X))
def step_round(w, xs):
    out = sh.federated_map(client_step, sh.federated_zip([sh.federated_broadcast(w), xs]))
    return out, sh.federated_sum(out[1])


@sh.federated_computation(sh.type_at_server(W), sh.type_at_clients(X))
def sum_round(w, xs):
    # Nothing but the sum reads the map: worker processes sum each block inside its compiled
    # call (`stream_eval.summed_map`), client threads map then fold with numpy.
    return sh.federated_sum(
        sh.federated_map(client_step, sh.federated_zip([sh.federated_broadcast(w), xs]))
    )


@sh.tf_computation(W, sh.SequenceType(sh.TensorType(tf.float32, [4, 256])), jit_compile=True)
def client_loop(w, ds):
    return ds.reduce(
        w, lambda acc, x: acc - 0.01 * tf.matmul(x, tf.tanh(tf.matmul(x, acc)), transpose_a=True)
    )


@sh.federated_computation(
    sh.type_at_server(W), sh.type_at_clients(sh.SequenceType(sh.TensorType(tf.float32, [4, 256])))
)
def loop_round(w, datasets):
    return sh.federated_map(client_loop, sh.federated_zip([sh.federated_broadcast(w), datasets]))


def _inputs():
    rng = np.random.default_rng(11)
    w = (rng.normal(size=(256, 256)) * 0.05).astype(np.float32)
    xs = [rng.normal(size=(8, 256)).astype(np.float32) for _ in range(N)]
    return w, xs


def _bits(x):
    if isinstance(x, (list, tuple)):
        return [_bits(v) for v in x]
    return np.asarray(x).tobytes()


def _one_client_per_thread(stack, comp, *args):
    factory = stack.registry.make_factory('thread-1')
    try:
        with sh.execution_context(factory):
            return comp(*args)
    finally:
        factory.close()


def test_the_rule_compiles_the_client_step():
    decision = xla.report(client_step)
    assert [d['compiled'] for d in decision.values()] == [True], decision


def test_compiled_blocks_give_the_bits_of_one_compiled_call_per_client(stack):
    w, xs = _inputs()
    got = step_round(w, xs)
    want = _one_client_per_thread(stack, step_round, w, xs)
    assert _bits(got) == _bits(want)
    fn = EmbeddedFunction(client_step.to_building_block())
    assert fn.xla.compiled
    for (new_w, energy), x in zip(got[0], xs):
        single = fn.call_flat([tf.constant(w), tf.constant(x)])
        assert np.asarray(new_w).tobytes() == single[0].numpy().tobytes()
        assert np.asarray(energy).tobytes() == single[1].numpy().tobytes()


def test_a_sum_made_inside_compiled_calls_gives_the_bits_of_the_numpy_fold(stack):
    w, xs = _inputs()
    got = sum_round(w, xs)
    want = _one_client_per_thread(stack, sum_round, w, xs)  # mapped, then numpy's fold
    assert _bits(got) == _bits(want)
    fn = EmbeddedFunction(client_step.to_building_block())
    rows = [[o.numpy() for o in fn.call_flat([tf.constant(w), tf.constant(x)])] for x in xs]
    total = [rows[0][0].copy(), rows[0][1].copy()]
    for r in rows[1:]:  # one chunk: the clients' results added in client order
        total = [total[0] + r[0], total[1] + r[1]]
    assert _bits(got) == _bits(total)


def test_lowered_dataset_loops_compile_with_the_same_bits_on_every_layout(stack):
    w, _ = _inputs()
    rng = np.random.default_rng(3)
    data = [
        tf.data.Dataset.from_tensor_slices(
            rng.normal(size=(4 * (i % 3 + 1), 256)).astype(np.float32)
        ).batch(4, drop_remainder=True)
        for i in range(N)
    ]
    got = loop_round(w, data)
    want = _one_client_per_thread(stack, loop_round, w, data)
    assert _bits(got) == _bits(want)
    assert np.all(np.isfinite(np.asarray(got)))


BATCH = sh.TensorType(tf.float32, [None, 256])


@sh.tf_computation(W, sh.SequenceType(BATCH))
def client_auto_loop(w, ds):
    return ds.reduce(
        w, lambda acc, x: acc - 0.01 * tf.matmul(x, tf.tanh(tf.matmul(x, acc)), transpose_a=True)
    )


@sh.federated_computation(sh.type_at_server(W), sh.type_at_clients(sh.SequenceType(BATCH)))
def auto_loop_round(w, datasets):
    return sh.federated_map(
        client_auto_loop, sh.federated_zip([sh.federated_broadcast(w), datasets])
    )


# rows per client: full batches of 4 (the lowered loop is specialized to the number of rows and
# compiled by the rule), a partial last batch and more than UNROLL_LIMIT batches (graph runtime)
ROWS = [8, 8, 10, 12, 12, 80, 8]


def _lowered(rows):
    from simharness.core.sequences import TensorBatches

    fn = EmbeddedFunction(client_auto_loop.to_building_block())
    tb = TensorBatches([tf.zeros([rows, 256])], 4, False, BATCH)
    return fn.lowered({1: tb})


def test_the_rule_compiles_a_lowered_loop_over_full_batches_only():
    full, partial, long = _lowered(8), _lowered(10), _lowered(80)
    assert full.xla.compiled, full.xla
    assert full.type_signature.parameter[-1].shape == (8, 256)
    assert _lowered(8) is not None and _lowered(12).type_signature.parameter[-1].shape == (12, 256)
    assert not partial.xla.compiled and 'unknown shape' in partial.xla.reason, partial.xla
    assert not long.xla.compiled and 'unknown shape' in long.xla.reason, long.xla


def test_lowered_loops_chosen_by_the_rule_give_the_same_bits_on_every_layout(stack):
    """Clients of several sizes, compiled and not, in one map: each client's result is the bits
    of its own call on the thread-1 layout, however the clients are cut into blocks."""
    w, _ = _inputs()
    rng = np.random.default_rng(5)
    data = [
        tf.data.Dataset.from_tensor_slices(rng.normal(size=(r, 256)).astype(np.float32)).batch(4)
        for r in ROWS
    ]
    got = auto_loop_round(w, data)
    assert _bits(got) == _bits(_one_client_per_thread(stack, auto_loop_round, w, data))
    full = _lowered(8)
    x = next(iter(data[0].unbatch().batch(8)))
    single = full.call_flat([tf.constant(w), x])
    assert np.asarray(got[0]).tobytes() == single[0].numpy().tobytes()


V = sh.TensorType(tf.float32, [64])


@sh.tf_computation(V, V, jit_compile=True)
def accumulate(acc, x):
    return acc * 0.75 + x * x


@sh.tf_computation(V, V)
def merge(a, b):
    return a + b


@sh.tf_computation(V)
def report(a):
    return a


@sh.federated_computation(sh.type_at_clients(V))
def aggregate_round(xs):
    return sh.federated_aggregate(xs, np.zeros(64, np.float32), accumulate, merge, report)


def test_a_compiled_accumulate_folds_to_the_same_bits_on_every_layout(stack):
    """40 clients: whole chunks of 16 and a part; the accumulate is forced to compile (an
    elementwise function, which the graph runtime would fold 16 chunks at once)."""
    rng = np.random.default_rng(7)
    xs = [rng.normal(size=64).astype(np.float32) for _ in range(40)]
    got = aggregate_round(xs)
    assert _bits(got) == _bits(_one_client_per_thread(stack, aggregate_round, xs))
