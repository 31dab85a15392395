"""A probe, not a test: what running a worker's block of ragged clients as one vectorized
TensorFlow call would cost, and whether a client's result would still be the same bits
whatever block it is in. Run by hand; docs/benchmarks.md has what it printed.

    python tests/benchmarks/vectorized_clients_probe.py

The quickstart's client update (configs/quickstart.toml: an MLP 64-64-10, SGD 0.1, 2
epochs of batches of 10) on 5 ragged clients (37-102 rows), one process pinned to one
core, one TF thread each way:

- ``sequential``: one ``tf.function`` per client, its batches unrolled (the hand-written
  loop's client update, `plain_tf_worker.py`), graph runtime or XLA;
- ``vectorized``: the 5 clients as one call, the weights given a leading client axis
  (batched matmuls), every client padded to the block's most steps and each batch to 10
  rows, with row masks (a padded row adds nothing to the loss) and a client's padded steps
  leaving its weights as they are (``tf.where``); graph runtime (unrolled or a
  ``tf.while_loop``) or XLA.

Then the layout check: 7 clients, each run in several blocks (alone, with others, with
extra padded steps), its result compared bit for bit with its result in the block of all 7.
"""

from __future__ import annotations

import os
import time

os.environ.setdefault('TF_NUM_INTRAOP_THREADS', '1')
os.environ.setdefault('TF_NUM_INTEROP_THREADS', '1')

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

BATCH, EPOCHS, LR = 10, 2, 0.1
RNG = np.random.default_rng(0)
W0 = [
    RNG.normal(0, 0.1, (64, 64)).astype(np.float32),
    np.zeros(64, np.float32),
    RNG.normal(0, 0.1, (64, 10)).astype(np.float32),
    np.zeros(10, np.float32),
]
CLIENTS = [
    (RNG.random((n, 64)).astype(np.float32), RNG.integers(0, 10, n).astype(np.int32))
    for n in (37, 52, 78, 95, 102, 41, 66)
]


def _batches(x, y):
    xs, ys = [], []
    for _ in range(EPOCHS):
        for i in range(0, len(x), BATCH):
            xs.append(x[i : i + BATCH])
            ys.append(y[i : i + BATCH])
    return xs, ys


def _step(w, x, y):
    with tf.GradientTape() as tape:
        tape.watch(w)
        h = tf.nn.relu(tf.matmul(x, w[0]) + w[1])
        logits = tf.matmul(h, w[2]) + w[3]
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
    return [a - LR * g for a, g in zip(w, tape.gradient(loss, w))]


def _block_step(w, x, y, mask):
    count = tf.reduce_sum(mask, 1)  # real rows of each client's batch
    with tf.GradientTape() as tape:
        tape.watch(w)
        h = tf.nn.relu(tf.matmul(x, w[0]) + w[1][:, None, :])
        logits = tf.matmul(h, w[2]) + w[3][:, None, :]
        ce = tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits) * mask
        loss = tf.reduce_sum(tf.math.divide_no_nan(tf.reduce_sum(ce, 1), count))
    live = count > 0
    return [
        tf.where(tf.reshape(live, [-1] + [1] * (len(a.shape) - 1)), a - LR * g, a)
        for a, g in zip(w, tape.gradient(loss, w))
    ]


def _sequential(jit: bool):
    @tf.function(jit_compile=jit)
    def client(w, xs, ys):
        for x, y in zip(xs, ys):
            w = _step(w, x, y)
        return w

    return client


def _vectorized(jit: bool, unrolled_steps: int = 0):
    @tf.function(jit_compile=jit)
    def block(w, xs, ys, masks):
        if unrolled_steps:
            for s in range(unrolled_steps):
                w = _block_step(w, xs[s], ys[s], masks[s])
            return w
        n = tf.shape(xs)[0]

        def body(i, *w):
            return (i + 1,) + tuple(_block_step(list(w), xs[i], ys[i], masks[i]))

        return list(tf.while_loop(lambda i, *w: i < n, body, (tf.constant(0),) + tuple(w))[1:])

    return block


def _block_inputs(clients, extra_steps=0):
    steps = max(len(_batches(*c)[0]) for c in clients) + extra_steps
    c = len(clients)
    xs = np.zeros((steps, c, BATCH, 64), np.float32)
    ys = np.zeros((steps, c, BATCH), np.int32)
    masks = np.zeros((steps, c, BATCH), np.float32)
    for k, (x, y) in enumerate(clients):
        for s, (bx, by) in enumerate(zip(*_batches(x, y))):
            xs[s, k, : len(bx)] = bx
            ys[s, k, : len(by)] = by
            masks[s, k, : len(bx)] = 1
    w = [tf.constant(np.stack([a] * c)) for a in W0]
    return w, tf.constant(xs), tf.constant(ys), tf.constant(masks)


def _timings(rounds: int = 200, repeats: int = 3) -> None:
    five = CLIENTS[:5]
    seq_args = [
        (
            [tf.constant(a) for a in W0],
            [tf.constant(a) for a in _batches(x, y)[0]],
            [tf.constant(a) for a in _batches(x, y)[1]],
        )
        for x, y in five
    ]
    block_args = _block_inputs(five)
    steps = int(block_args[1].shape[0])
    cases = {
        'sequential, graph runtime': (_sequential(False), True),
        'sequential, XLA': (_sequential(True), True),
        'vectorized, graph runtime, unrolled': (_vectorized(False, steps), False),
        'vectorized, graph runtime, while_loop': (_vectorized(False), False),
        'vectorized, XLA': (_vectorized(True), False),
    }

    def runner(fn, per_client):
        if per_client:
            return lambda: [fn(*a) for a in seq_args]
        return lambda: fn(*block_args)

    runs = {name: runner(fn, per_client) for name, (fn, per_client) in cases.items()}
    for run in runs.values():
        for _ in range(20):
            run()
    ms: dict = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            t = time.perf_counter()
            for _ in range(rounds):
                run()
            ms[name].append((time.perf_counter() - t) / rounds * 1e3)
    for name, values in ms.items():
        print(f'{name}: ' + ' / '.join(f'{v:.2f}' for v in values) + ' ms per 5 clients')


def _layout_check(jit: bool) -> bool:
    block = _vectorized(jit)

    def results(idx, extra_steps=0):
        out = block(*_block_inputs([CLIENTS[i] for i in idx], extra_steps))
        return {i: [np.asarray(o[k]) for o in out] for k, i in enumerate(idx)}

    reference = results(list(range(len(CLIENTS))))
    same = True
    for idx, extra in [
        ([4], 0),
        ([2, 4], 0),
        ([4, 0, 1], 0),
        ([6, 5, 4, 3], 3),
        ([0], 5),
        ([1, 0], 0),
    ]:
        got = results(idx, extra)
        for i in idx:
            if not all(np.array_equal(a, b) for a, b in zip(got[i], reference[i])):
                same = False
                print(f'  client {i} in block {idx} (+{extra} padded steps): other bits')
    return same


def main() -> None:
    if hasattr(os, 'sched_setaffinity'):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    _timings()
    for jit in (True, False):
        same = _layout_check(jit)
        print(
            f'vectorized, {"XLA" if jit else "graph runtime"}: a client gives the same bits '
            f'in every block: {same}'
        )


if __name__ == '__main__':
    main()
