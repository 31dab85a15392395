"""Bit-identity across stacks and layouts for op families beyond matmul.

Convolutions (forward, filter and input gradients), max/avg pooling and their
gradients, batch norm (moments + normalize, and the fused kernel, with
gradients), an embedding lookup (gather and its gradient, unsorted segment
sum, scatter-add), large reductions and a large-K matmul, each a functional
`tf_computation` mapped over 20 clients with different data and then
averaged; and 2 rounds of FedAvg with the built-in CNN. Every result must be
bit-identical on the thread stacks (1 and 3 clients per thread), the local
stack and process stacks with 1 and 2 workers (1 and 7 clients per worker).

Several of these CPU kernels give other bits for another intra-op thread
count (see `simharness.core.determinism`), so every process that runs client
computations runs them on `INTRA_OP_THREADS`. The driver's TF takes a thread
count only before its first op: this module pins it when pytest imports it;
if an earlier module already ran an op with another count, the driver-side
layouts are skipped (the reference runs on a process stack).
"""

from __future__ import annotations

import collections
import hashlib
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import simharness as sh
from simharness.core import determinism
from simharness.learning import FedAvg, FedAvgConfig
from simharness.learning import models as M

from process.conftest import no_leaks  # noqa: F401  (autouse: no worker or segment leaks)

#: Whether TF in this pytest process runs ops on INTRA_OP_THREADS threads (pinned
#: here, before this module traces its computations: tracing a gradient runs TF).
#: False when a module collected earlier ran a TF op before anything pinned it.
DRIVER_PINNED = determinism.pin_tensorflow_threads()

NUM_CLIENTS = 20
SEEDS = np.arange(NUM_CLIENTS, dtype=np.int32) * 7919 + 11
KERNEL = np.random.default_rng(1).standard_normal((3, 3, 4, 8)).astype(np.float32)
TABLE = np.random.default_rng(2).standard_normal((1000, 32)).astype(np.float32)
GAMMA = np.random.default_rng(3).uniform(0.5, 1.5, 16).astype(np.float32)


def _normal(seed, shape, salt):
    return tf.random.stateless_normal(shape, seed=tf.stack([seed, tf.constant(salt, tf.int32)]))


@sh.tf_computation(tf.TensorSpec(KERNEL.shape, tf.float32), tf.int32)
def conv_fn(kernel, seed):
    x = _normal(seed, [8, 16, 16, 4], 0)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([x, kernel])
        y = tf.nn.relu(tf.nn.conv2d(x, kernel, strides=1, padding='SAME'))
        z = tf.nn.conv2d(y, tf.transpose(kernel, [0, 1, 3, 2]), strides=2, padding='VALID')
        loss = tf.reduce_sum(z * z)
    return [y, tape.gradient(loss, kernel), tape.gradient(loss, x)]


@sh.tf_computation(tf.int32)
def pool_fn(seed):
    x = _normal(seed, [8, 16, 16, 8], 1)
    with tf.GradientTape() as tape:
        tape.watch(x)
        mp = tf.nn.max_pool2d(x, 2, 2, 'VALID')
        ap = tf.nn.avg_pool2d(x, 3, 2, 'SAME')
        loss = tf.reduce_sum(mp * mp) + tf.reduce_sum(ap * ap * ap)
    return [mp, ap, tape.gradient(loss, x)]


@sh.tf_computation(tf.TensorSpec(GAMMA.shape, tf.float32), tf.int32)
def batch_norm_fn(gamma, seed):
    x = _normal(seed, [16, 8, 8, 16], 2) * 3.0 + 1.0
    beta = tf.zeros_like(gamma) + 0.25
    with tf.GradientTape() as tape:
        tape.watch([x, gamma])
        mean, var = tf.nn.moments(x, axes=[0, 1, 2])
        y = tf.nn.batch_normalization(x, mean, var, beta, gamma, 1e-3)
        fused, _, _ = tf.compat.v1.nn.fused_batch_norm(x, gamma, beta, epsilon=1e-3)
        loss = tf.reduce_sum(y * fused * x)
    gx, ggamma = tape.gradient(loss, [x, gamma])
    return [mean, var, y, fused, gx, ggamma]


@sh.tf_computation(tf.TensorSpec(TABLE.shape, tf.float32), tf.int32)
def embedding_fn(table, seed):
    ids = tf.random.stateless_uniform(
        [4000], seed=tf.stack([seed, 3]), minval=0, maxval=1000, dtype=tf.int32
    )
    w = _normal(seed, [4000, 32], 4)
    with tf.GradientTape() as tape:
        tape.watch(table)
        e = tf.gather(table, ids)
        loss = tf.reduce_sum(e * w)
    grad = tf.convert_to_tensor(tape.gradient(loss, table))  # IndexedSlices -> UnsortedSegmentSum
    seg = tf.math.unsorted_segment_sum(e * w, ids, 1000)
    scat = tf.tensor_scatter_nd_add(tf.zeros_like(table), ids[:, None], w)
    return [grad, seg, scat]


@sh.tf_computation(tf.int32)
def reduction_fn(seed):
    x = _normal(seed, [1 << 20], 5)
    m = tf.reshape(x, [1024, 1024])
    a = tf.reshape(x[:80000], [4, 20000])
    return [
        tf.reduce_sum(x),
        tf.reduce_mean(x),
        tf.reduce_sum(m, 0),
        tf.reduce_mean(m, 1),
        tf.reduce_sum(tf.abs(m)),
        tf.matmul(a, a, transpose_b=True),
    ]


def _with_server(fn, server_type):
    @sh.federated_computation(sh.type_at_server(server_type), sh.type_at_clients(tf.int32))
    def comp(value, seeds):
        out = sh.federated_map(fn, sh.federated_zip([sh.federated_broadcast(value), seeds]))
        return sh.federated_mean(out), out

    return comp


def _clients_only(fn):
    @sh.federated_computation(sh.type_at_clients(tf.int32))
    def comp(seeds):
        out = sh.federated_map(fn, seeds)
        return sh.federated_mean(out), out

    return comp


OP_CASES = {
    'conv2d': (_with_server(conv_fn, tf.TensorSpec(KERNEL.shape, tf.float32)), (KERNEL,)),
    'pooling': (_clients_only(pool_fn), ()),
    'batch_norm': (_with_server(batch_norm_fn, tf.TensorSpec(GAMMA.shape, tf.float32)), (GAMMA,)),
    'embedding': (_with_server(embedding_fn, tf.TensorSpec(TABLE.shape, tf.float32)), (TABLE,)),
    'reductions': (_clients_only(reduction_fn), ()),
}


def _cnn_fedavg():
    spec = M.get_model('cnn', (12, 12, 1), 4)
    fedavg = FedAvg(spec, FedAvgConfig(batch_size=10), 20)
    rng = np.random.default_rng(0)
    arrays = [
        {
            'x': rng.standard_normal((int(n), 12, 12, 1)).astype(np.float32),
            'y': rng.integers(0, 4, int(n)).astype(np.int32),
        }
        for n in rng.integers(5, 21, 14)
    ]
    return fedavg, fedavg.pad(arrays), fedavg.initialize(seed=1)


CNN = _cnn_fedavg()


def _leaves(x):
    return [np.asarray(v) for v in tf.nest.flatten(x)]


def run_all():
    """{case: list of arrays} for every op case and 2 CNN FedAvg rounds, in the current context."""
    out = collections.OrderedDict()
    for name, (comp, server_args) in OP_CASES.items():
        out[name] = _leaves(comp(*server_args, list(SEEDS)))
    fedavg, data, state = CNN
    rounds = []
    for _ in range(2):
        state, metrics = fedavg.next(state, data)
        rounds += _leaves(state['weights']) + [np.float64(metrics[k]) for k in sorted(metrics)]
    out['cnn_fedavg'] = rounds
    return out


def _digest(arrays):
    h = hashlib.sha256()
    for a in arrays:
        h.update(str((a.dtype, a.shape)).encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]


def assert_bit_identical(got, want, layout):
    assert list(got) == list(want)
    differ = [name for name in want if _digest(got[name]) != _digest(want[name])]
    assert not differ, f'{layout}: not bit-identical to process-2 (1 client per call) for {differ}'


def test_every_eager_executor_pins_the_thread_count(monkeypatch):
    from simharness.executors.leaf import eager_tf

    calls = []
    monkeypatch.setattr(determinism, 'pin_tensorflow_threads', lambda: calls.append(1) or True)
    eager_tf.EagerTFExecutor()
    assert calls == [1]


@pytest.fixture(scope='module')
def reference():
    """The results on a process stack (2 workers, one client per TF call).

    Its client computations run in the workers and its driver-side work (means,
    broadcasts, FedAvg's server update) is exactly rounded, so it does not
    depend on how this pytest process configured TF.
    """
    with sh.framework.process_executor_factory(num_workers=2, clients_per_worker=1) as factory:
        with sh.execution_context(factory):
            return run_all()


def test_results_are_not_trivial(reference):
    for name, arrays in reference.items():
        assert all(np.all(np.isfinite(a)) for a in arrays), name
        assert any(np.any(a != 0) for a in arrays), name
    # the mean's 3 leaves, then each client's 3 (y, filter gradient, input gradient): clients differ
    conv = reference['conv2d']
    assert not np.array_equal(conv[3], conv[6]) and not np.array_equal(conv[4], conv[7])


@pytest.mark.skipif(
    not DRIVER_PINNED,
    reason=(
        'TF ran an op in this pytest process, with another intra-op thread count, before '
        'simharness could pin it: driver-side stacks cannot match worker processes here '
        '(run this module on its own)'
    ),
)
@pytest.mark.parametrize('layout', ['thread-1', 'thread-3', 'local'])
def test_thread_layouts_are_bit_identical(reference, layout):
    factory = (
        sh.framework.local_executor_factory()
        if layout == 'local'
        else sh.framework.thread_debugging_executor_factory(clients_per_thread=int(layout[-1]))
    )
    with sh.execution_context(factory):
        got = run_all()
    assert_bit_identical(got, reference, layout)


@pytest.mark.process
@pytest.mark.parametrize('num_workers,clients_per_worker', [(1, 1), (1, 7), (2, 7)])
def test_process_layouts_are_bit_identical(reference, num_workers, clients_per_worker):
    with sh.framework.process_executor_factory(
        num_workers=num_workers, clients_per_worker=clients_per_worker
    ) as factory:
        with sh.execution_context(factory):
            got = run_all()
    assert_bit_identical(
        got, reference, f'process-{num_workers} clients_per_worker={clients_per_worker}'
    )


def test_a_program_that_runs_tf_before_its_first_computation_is_pinned_and_quiet():
    """TFF programs build datasets and Keras models before their first computation: TF
    starts with one intra-op thread (the workers' count) and nothing is said."""
    code = (
        'import warnings; warnings.simplefilter("error")\n'
        'import simharness as tff\n'
        'import tensorflow as tf\n'
        'ds = tf.data.Dataset.range(10).shuffle(10, seed=1).batch(2)\n'
        'assert len(list(ds)) == 5\n'
        'from simharness.core import determinism\n'
        'assert determinism.pin_tensorflow_threads() is True\n'
        '@tff.tf_computation(tf.float32)\n'
        'def f(x):\n'
        '    return x + 1.0\n'
        'print(f(1.0))\n'
    )
    env = {k: v for k, v in os.environ.items() if k != 'TF_NUM_INTRAOP_THREADS'}
    env['TF_CPP_MIN_LOG_LEVEL'] = '3'
    out = subprocess.run(
        [sys.executable, '-c', code], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == '2.0'
    assert 'RuntimeWarning' not in out.stderr and 'intra-op' not in out.stderr
    assert 'TensorFlow runs ops on' not in out.stderr, out.stderr
