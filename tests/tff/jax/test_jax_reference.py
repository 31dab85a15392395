"""The FedAvg reference round with JAX client updates (`simharness.jax.reference`) on the
stacks, sequential and vectorized (``tff.jax.computation(..., vectorize=True)``).

Sequential: one XLA call per client, so the bits are those of every stack and layout.
Vectorized: one vmapped call per block of clients; the same bits on layouts that cut
the clients into the same blocks (here blocks of 3: two workers each cutting its 6
clients into 3s, in processes and behind the loopback codec, and one thread per 3
clients), close to the sequential results.
"""

from __future__ import annotations

import collections

import numpy as np
import pytest

jax = pytest.importorskip('jax', reason='the JAX frontend needs JAX: pip install -e ".[jax]"')

import simharness as tff  # noqa: E402
from simharness.pytest_plugin import parametrize_stacks  # noqa: E402

NUM_CLIENTS = 12
TRANSPORTS = ('remote-2', 'ray-2')


def pytest_generate_tests(metafunc):
    if 'transport_stack' in metafunc.fixturenames:
        parametrize_stacks(metafunc, 'transport_stack', TRANSPORTS)


@pytest.fixture
def transport_stack(request, stack_registry):
    with stack_registry.open(request.param) as handle:
        yield handle


@pytest.fixture(scope='module')
def workload():
    from simharness.jax import reference

    clients, w0 = reference.reference_clients()
    vectorized = reference.jax_reference_round(vectorize=True)
    update = vectorized.client_update
    model_type, data_type = update.type_signature.parameter

    @tff.federated_computation(tff.type_at_server(model_type), tff.type_at_clients(data_type))
    def summed_deltas(weights, data):
        # a sum of a map nothing else reads: a worker that sums in its calls still runs
        # the vectorized blocks
        return tff.federated_sum(
            tff.federated_map(update, tff.federated_zip([tff.federated_broadcast(weights), data]))
        )

    return {
        'clients': clients[:NUM_CLIENTS],
        'w0': tuple(w0),
        'sequential': reference.jax_reference_round(),
        'vectorized': vectorized,
        'summed': summed_deltas,
    }


def _plain_jax_round(workload):
    from simharness.jax.reference import client_update_fn

    update = jax.jit(client_update_fn)
    w0 = workload['w0']
    deltas = [update(w0, c)[0] for c in workload['clients']]
    return [w + np.mean([np.asarray(d[i]) for d in deltas], 0) for i, w in enumerate(w0)]


@pytest.fixture(scope='module')
def results(workload):
    """Stack name -> (sequential weights, vectorized weights), run on first use."""
    cache = {}

    def run(name, opener):
        if name not in cache:
            with opener():
                out = []
                for kind in ('sequential', 'vectorized'):
                    weights, count = workload[kind].next(workload['w0'], workload['clients'])
                    assert float(count) == 50.0 * NUM_CLIENTS
                    out.append([np.asarray(w) for w in weights])
                deltas, count = workload['summed'](workload['w0'], workload['clients'])
                assert float(count) == 50.0 * NUM_CLIENTS
                out.append([np.asarray(d) for d in deltas])
            cache[name] = out
        return cache[name]

    return run


def _same_bits(a, b):
    return all(x.tobytes() == y.tobytes() for x, y in zip(a, b))


def _thread_blocks_of_3():
    from simharness.stacks import thread_debugging_executor_factory

    return tff.execution_context(thread_debugging_executor_factory(clients_per_thread=3))


@pytest.mark.slow
def test_the_jax_round_is_the_plain_jax_round_and_vectorized_is_close(workload, results):
    sequential, vectorized, _ = results('blocks-of-3', _thread_blocks_of_3)
    expected = _plain_jax_round(workload)
    for got, want in zip(sequential, expected):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    for got, want in zip(vectorized, sequential):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.process
@pytest.mark.parametrize(
    'stack', ['local', 'thread-2', 'process-1', 'process-2', 'process-2-cpw3', 'loopback-2']
)
def test_sequential_bits_are_the_same_on_every_layout(stack, stack_registry, results):
    reference = results('blocks-of-3', _thread_blocks_of_3)[0]
    got = results(stack, lambda: stack_registry.open(stack))[0]
    assert _same_bits(got, reference), stack


@pytest.mark.slow
@pytest.mark.process
@pytest.mark.parametrize('stack', ['process-2-cpw3', 'loopback-2'])
def test_vectorized_bits_are_the_same_on_layouts_of_the_same_blocks(stack, stack_registry, results):
    reference = results('blocks-of-3', _thread_blocks_of_3)
    got = results(stack, lambda: stack_registry.open(stack))
    assert _same_bits(got[1], reference[1]), stack
    assert _same_bits(got[2], reference[2]), stack


@pytest.mark.slow
def test_jax_reference_round_on_the_transports(transport_stack, workload, results):
    reference = results('blocks-of-3', _thread_blocks_of_3)
    weights, count = workload['sequential'].next(workload['w0'], workload['clients'])
    assert float(count) == 50.0 * NUM_CLIENTS
    assert _same_bits([np.asarray(w) for w in weights], reference[0])


def test_a_vectorized_map_runs_one_vmapped_call_per_block(monkeypatch, workload):
    from simharness.executors.leaf import client_blocks

    made = []
    make = client_blocks.VmappedModule.make_block_fn

    def spy(self, mask, shared_sig, stacked_sig):
        made.append(mask)
        return make(self, mask, shared_sig, stacked_sig)

    monkeypatch.setattr(client_blocks.VmappedModule, 'make_block_fn', spy)
    vector = tff.TensorType(np.float32, (3,))

    @tff.jax.computation(vector, np.float32, vectorize=True)
    def scale(v, s):
        return v * s

    @tff.federated_computation(
        tff.FederatedType(vector, tff.CLIENTS), tff.FederatedType(np.float32, tff.SERVER)
    )
    def scaled_sum(vs, s):
        return tff.federated_sum(tff.federated_map(scale, (vs, tff.federated_broadcast(s))))

    vs = [np.full(3, i, np.float32) for i in range(6)]
    with _thread_blocks_of_3():
        np.testing.assert_array_equal(scaled_sum(vs, np.float32(2.0)), np.full(3, 30.0))
    assert made == [(False, True)]  # the vectors stacked, the scale shared: one function


def test_a_vectorized_computation_composed_with_tf_in_a_client_lambda():
    import tensorflow as tf

    vector = tff.TensorType(np.float32, (3,))

    @tff.tensorflow.computation(vector)
    def tf_norm(v):
        return tf.sqrt(tf.reduce_sum(v * v))

    @tff.jax.computation(vector, np.float32, vectorize=True)
    def scale(v, s):
        return v / s

    @tff.federated_computation(tff.FederatedType(vector, tff.CLIENTS))
    def normalized_sum(vs):
        @tff.federated_computation(vector)
        def normalize(v):
            return scale(v, tf_norm(v))

        return tff.federated_sum(tff.federated_map(normalize, vs))

    vectors = [np.array([i + 1.0, 0.0, 0.0], np.float32) for i in range(6)]
    with _thread_blocks_of_3():
        np.testing.assert_allclose(normalized_sum(vectors), [6.0, 0.0, 0.0], rtol=1e-6)


def test_vectorize_needs_a_parameter_and_a_bool():
    with pytest.raises(ValueError, match='needs a computation with a parameter'):
        tff.jax.computation(lambda: np.float32(1.0), vectorize=True)
    with pytest.raises(TypeError, match='vectorize must be a bool'):
        tff.jax.computation(np.float32, vectorize='yes')


def test_a_client_of_another_shape_is_refused_before_any_block_runs():
    vector = tff.TensorType(np.float32, (3,))

    @tff.jax.computation(vector, vectorize=True)
    def double(v):
        return v * 2.0

    @tff.federated_computation(tff.FederatedType(vector, tff.CLIENTS))
    def doubled_sum(vs):
        return tff.federated_sum(tff.federated_map(double, vs))

    with pytest.raises(TypeError):
        doubled_sum([np.ones(3, np.float32), np.ones(4, np.float32)])


def test_the_reference_client_data_has_the_round_s_types(workload):
    client = workload['clients'][0]
    assert isinstance(client, collections.OrderedDict)
    assert client['x'].shape == (50, 60) and client['x'].dtype == np.float32
    assert client['y'].shape == (50,) and client['y'].dtype == np.int32


def test_a_gpu_that_is_not_there_is_refused_before_any_worker_starts(monkeypatch):
    import multiprocessing

    from simharness.errors import DeviceNotFoundError
    from simharness.runtime import resources
    from simharness.stacks import process_executor_factory

    monkeypatch.setattr(
        resources, 'discover_gpus', lambda: resources.GpuInventory((), 'a machine without GPUs')
    )
    vector = tff.TensorType(np.float32, (3,))

    @tff.jax.computation(vector, vectorize=True)
    def total(v):
        return jax.numpy.sum(v)

    @tff.federated_computation(tff.FederatedType(vector, tff.CLIENTS))
    def sum_of_totals(vs):
        return tff.federated_sum(tff.federated_map(total, vs))

    children = multiprocessing.active_children()
    with pytest.raises(DeviceNotFoundError, match='no GPU 0'):
        factory = process_executor_factory(num_workers=1, devices='cuda:0')
        try:
            with tff.execution_context(factory):
                sum_of_totals([np.ones(3, np.float32)] * 2)
        finally:
            factory.close()
    assert multiprocessing.active_children() == children


def test_a_jax_computation_s_own_graph_runs_compiled_but_a_vectorized_one_does_not():
    from simharness.executors.leaf.embedded_function import EmbeddedFunction

    vector = tff.TensorType(np.float32, (3,))

    def scale(v, s):
        return v * s

    plain = EmbeddedFunction(tff.jax.computation(scale, vector, np.float32).to_building_block())
    vectorized = EmbeddedFunction(
        tff.jax.computation(scale, vector, np.float32, vectorize=True).to_building_block()
    )
    assert plain.module_call and plain.vmapped is None and plain.xla.compiled
    assert vectorized.module_call and vectorized.vmapped is not None
    assert not vectorized.xla.compiled  # its blocks run as calls of the block module
