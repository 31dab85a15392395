"""A plain TensorFlow process running FedAvg client updates: the baseline of the FedAvg benchmark.

No simharness inside: this is the hand-written loop a user would write, the
limit of what one core can do for the reference workload
(``shared/benchmarks/fedavg-synthetic-mlp.md``)::

    driver (the benchmark)  --pickle over stdin-->  this process, pinned to one CPU,
                            <--pickle over stdout--  TF with 1 intra-op and 1 inter-op thread

Messages (length-prefixed pickles):

* ``('load', key, x [K, 50, 60] float32, y [K, 50] int32)`` -> ``'ok'``: a
  set of clients, kept as tensors (like a user's prebuilt datasets).
* ``('round', key, weights)`` -> ``(sum_k n_k * delta_k, sum_k n_k)``: one
  FedAvg client update per client of set `key` (a `tf.function` called per client: 5 SGD
  steps of batch 10, learning rate 0.05), reduced in this process, so one
  partial sum goes back whatever the number of clients.
  ``('round', key, weights, indices)``: the clients of set `key` at those indices (a
  cohort drawn from the clients this process holds).
* ``('setup', learning_rate, epochs)`` -> ``'ok'``: another workload's client update (any
  dense ReLU network given as (kernel, bias) pairs; clients of any number of rows, cut
  into batches of 10, the last one partial, `epochs` passes over them, as the CLI's
  datasets are).
* ``('close',)``: exit.

Run as ``python plain_tf_worker.py CPU [xla]`` (CPU: the id to pin to, or -1; ``xla``: the
client update is compiled, ``tf.function(jit_compile=True)``).
"""

from __future__ import annotations

import os
import pickle
import struct
import sys

BATCH = 10
LEARNING_RATE = 0.05


def _read(stream):
    header = stream.read(8)
    if len(header) < 8:
        return None
    (n,) = struct.unpack('<Q', header)
    return pickle.loads(stream.read(n))


def _write(stream, obj) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(struct.pack('<Q', len(data)))
    stream.write(data)
    stream.flush()


def build_client_update(
    jit_compile: bool = False, learning_rate: float = LEARNING_RATE, epochs: int = 1
):
    """The client update as a `tf.function` ``(weights, x [n, d], y [n]) -> delta``
    (compiled by XLA with `jit_compile`): SGD over the rows in batches of `BATCH` (the
    last one partial), `epochs` passes (``.batch(BATCH).repeat(epochs)``), of the dense
    ReLU network whose (kernel, bias) pairs are `weights` (the reference's: 60-256-256-10,
    5 full batches)."""
    import tensorflow as tf

    def forward(w, x):
        h = x
        for i in range(0, len(w) - 2, 2):
            h = tf.nn.relu(tf.matmul(h, w[i]) + w[i + 1])
        return tf.matmul(h, w[-2]) + w[-1]

    @tf.function(jit_compile=jit_compile)
    def client_update(w, x, y):
        w0 = list(w)
        w = list(w)
        for j in list(range(-(-x.shape[0] // BATCH))) * epochs:
            xb, yb = x[j * BATCH : (j + 1) * BATCH], y[j * BATCH : (j + 1) * BATCH]
            with tf.GradientTape() as tape:
                tape.watch(w)
                loss = tf.reduce_mean(
                    tf.nn.sparse_softmax_cross_entropy_with_logits(labels=yb, logits=forward(w, xb))
                )
            grads = tape.gradient(loss, w)
            w = [v - learning_rate * g for v, g in zip(w, grads)]
        return [a - b for a, b in zip(w, w0)]

    return client_update


def run_clients(client_update, clients, weights):
    """``(sum_k n_k * delta_k, sum_k n_k)`` over `clients` (a list of (x, y) tensors)."""
    import numpy as np
    import tensorflow as tf

    w = [tf.constant(v) for v in weights]
    acc = [np.zeros(np.shape(v), np.float32) for v in weights]
    total = 0.0
    for x, y in clients:
        n = float(x.shape[0])
        for a, d in zip(acc, client_update(w, x, y)):
            a += n * d.numpy()
        total += n
    return acc, total


def main() -> None:
    cpu = int(sys.argv[1]) if len(sys.argv) > 1 else -1
    jit_compile = len(sys.argv) > 2 and sys.argv[2] == 'xla'
    if cpu >= 0 and hasattr(os, 'sched_setaffinity'):
        os.sched_setaffinity(0, {cpu})
    os.environ.setdefault('CUDA_VISIBLE_DEVICES', '')
    # Our messages use the original stdout; anything printed goes to stderr.
    out = os.fdopen(os.dup(1), 'wb')
    os.dup2(2, 1)
    inp = sys.stdin.buffer

    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    client_update = build_client_update(jit_compile)

    client_sets = {}
    _write(out, ('ready', os.getpid()))
    while True:
        msg = _read(inp)
        if msg is None or msg[0] == 'close':
            return
        if msg[0] == 'load':
            _, key, xs, ys = msg
            client_sets[key] = [(tf.constant(x), tf.constant(y)) for x, y in zip(xs, ys)]
            _write(out, 'ok')
        elif msg[0] == 'round':
            key, weights = msg[1], msg[2]
            chosen = client_sets[key]
            if len(msg) > 3:
                chosen = [chosen[i] for i in msg[3]]
            _write(out, run_clients(client_update, chosen, weights))
        elif msg[0] == 'setup':
            client_update = build_client_update(jit_compile, float(msg[1]), int(msg[2]))
            _write(out, 'ok')
        else:
            _write(out, ('error', f'unknown message {msg[0]!r}'))


if __name__ == '__main__':
    main()
