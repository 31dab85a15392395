"""JAX computations in federated computations, on the thread stack and on worker processes
(TFF runs them on its XLA backend only; see docs/tff/jax.md).

A JAX computation is a TF graph running its StableHLO module (``XlaCallModule``): a
block of clients runs it in one TF call, a federated lambda that calls it is compiled
into one graph with the TF computations it calls, and a worker process runs it with no
JAX imported.
"""

from __future__ import annotations

import collections

import numpy as np
import pytest

jax = pytest.importorskip('jax', reason='the JAX frontend needs JAX: pip install -e ".[jax]"')

import simharness as tff  # noqa: E402
from simharness.pytest_plugin import parametrize_stacks  # noqa: E402

STACKS = [pytest.param('local', id='local'), pytest.param('process-2', marks=pytest.mark.process)]

#: The other transports a JAX computation reaches as graph bytes (the suite's session
#: stacks, tests/stacks.py: started once per session, their tests grouped by id).
TRANSPORTS = ('loopback-2', 'remote-2', 'ray-2')


def pytest_generate_tests(metafunc):
    if 'transport_stack' in metafunc.fixturenames:
        parametrize_stacks(metafunc, 'transport_stack', TRANSPORTS)


@pytest.fixture
def transport_stack(request, stack_registry):
    with stack_registry.open(request.param) as handle:
        yield handle


_VECTOR = tff.TensorType(np.float32, (3,))
_MODEL = collections.OrderedDict(w=_VECTOR, b=tff.TensorType(np.float32))
_BATCH = collections.OrderedDict(
    x=tff.TensorType(np.float32, (4, 3)), y=tff.TensorType(np.float32, (4,))
)


@tff.jax.computation(_MODEL, _BATCH)
def _local_step(model, batch):
    """One gradient step of a linear regression on a client's batch (`jax.grad`)."""

    def loss(m):
        pred = batch['x'] @ m['w'] + m['b']
        return jax.numpy.mean((pred - batch['y']) ** 2)

    grads = jax.grad(loss)(model)
    return jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, model, grads)


def _numpy_step(model, batch):
    pred = batch['x'] @ model['w'] + model['b']
    err = 2.0 * (pred - batch['y']) / len(batch['y'])
    return collections.OrderedDict(
        w=model['w'] - 0.1 * (batch['x'].T @ err), b=model['b'] - 0.1 * np.sum(err)
    )


@tff.federated_computation(
    tff.FederatedType(_MODEL, tff.SERVER), tff.FederatedType(_BATCH, tff.CLIENTS)
)
def _round(model, batches):
    updated = tff.federated_map(_local_step, (tff.federated_broadcast(model), batches))
    return tff.federated_mean(updated)


def _batches(n):
    rng = np.random.default_rng(0)
    return [
        collections.OrderedDict(
            x=rng.normal(size=(4, 3)).astype(np.float32),
            y=rng.normal(size=(4,)).astype(np.float32),
        )
        for _ in range(n)
    ]


@pytest.mark.process
def test_a_round_of_jax_client_updates_gives_the_same_bits_on_both_stacks(stack_registry):
    model = collections.OrderedDict(w=np.ones(3, np.float32), b=np.float32(0.5))
    batches = _batches(40)
    results = []
    for stack in ('local', 'process-2'):
        with stack_registry.open(stack):
            results.append(_round(model, batches))
    expected = [_numpy_step(model, b) for b in batches]
    for result in results:
        np.testing.assert_allclose(result['w'], np.mean([e['w'] for e in expected], 0), rtol=1e-5)
        np.testing.assert_allclose(result['b'], np.mean([e['b'] for e in expected]), rtol=1e-5)
    local, process = results
    assert local['w'].tobytes() == process['w'].tobytes()
    assert local['b'].tobytes() == process['b'].tobytes()


@pytest.mark.parametrize('tff_stack', STACKS, indirect=True)
def test_jax_and_tf_computations_in_one_client_lambda(tff_stack):
    import tensorflow as tf

    @tff.tensorflow.computation(_VECTOR)
    def tf_norm(v):
        return tf.sqrt(tf.reduce_sum(v * v))

    @tff.jax.computation(_VECTOR, np.float32)
    def scale(v, s):
        return v / s

    @tff.federated_computation(tff.FederatedType(_VECTOR, tff.CLIENTS))
    def normalized_sum(vs):
        @tff.federated_computation(_VECTOR)
        def normalize(v):
            return scale(v, tf_norm(v))

        return tff.federated_sum(tff.federated_map(normalize, vs))

    vectors = [np.array([i + 1.0, 0.0, 0.0], np.float32) for i in range(6)]
    vectors += [np.array([0.0, 0.0, -(i + 2.0)], np.float32) for i in range(6)]
    np.testing.assert_allclose(normalized_sum(vectors), [6.0, 0.0, -6.0], rtol=1e-6)


@pytest.mark.process
def test_worker_processes_import_no_jax(stack_registry):
    from multiprocess import forkserver
    import psutil

    @tff.jax.computation(_VECTOR)
    def total(v):
        return jax.numpy.sum(v)

    @tff.federated_computation(tff.FederatedType(_VECTOR, tff.CLIENTS))
    def sum_of_totals(vs):
        return tff.federated_sum(tff.federated_map(total, vs))

    with stack_registry.open('process-2'):
        assert sum_of_totals([np.ones(3, np.float32)] * 8) == 24.0
        pid = forkserver._forkserver._forkserver_pid
        assert pid, 'the pool started no forkserver'
        processes = [psutil.Process(pid)] + psutil.Process(pid).children()
        assert len(processes) >= 3  # the forkserver and the 2 workers
        for p in processes:
            with open(f'/proc/{p.pid}/maps') as f:
                assert not any('/jaxlib/' in line for line in f), f'process {p.pid} loaded JAX'


def test_jax_computations_on_every_transport(transport_stack):
    model = collections.OrderedDict(w=np.ones(3, np.float32), b=np.float32(0.5))
    batches = _batches(8)
    result = _round(model, batches)
    expected = [_numpy_step(model, b) for b in batches]
    np.testing.assert_allclose(result['w'], np.mean([e['w'] for e in expected], 0), rtol=1e-5)
    np.testing.assert_allclose(result['b'], np.mean([e['b'] for e in expected]), rtol=1e-5)
