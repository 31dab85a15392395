"""The Ray stack on a cluster of two loopback nodes: bit-identity, placement, data, faults."""

from __future__ import annotations

import glob
import os
import tempfile
import threading

import numpy as np
import pytest
import tensorflow as tf

import simharness as sh
from simharness.data import ArrayClientData, FileClientData, SourcedClients, save_npz_dir
from simharness.errors import (
    RetryableError,
    SimharnessTypeError,
    WorkerLostError,
    WorkerStartError,
    WorkerTimeoutError,
)
from simharness.learning import FedAvg, FedAvgConfig, get_model
from simharness.stacks import local_executor_factory, ray_executor_factory
from stacks import have_ray  # tests/stacks.py

from computations import round_data, run_round  # tests/computations.py

from fault_injection import (
    blocking_computation,
    kill_pid,
    slow_square,
    when_started,
)  # tests/fault_injection.py

pytestmark = [
    pytest.mark.ray,
    pytest.mark.skipif(
        not have_ray(), reason='Ray is not installed (pip install "simharness[ray]")'
    ),
]


def _bits(results):
    return [np.asarray(r).tobytes() for r in results]


def test_bit_identical_to_the_thread_and_process_stacks(ray_stack, make_factory):
    args = round_data(1000)
    thread = _bits(run_round(local_executor_factory(), args))
    ray_ = _bits(run_round(ray_executor_factory(workers=ray_stack.workers), args))
    process = _bits(run_round(make_factory('process-2-cpw3'), args))
    assert ray_ == thread
    assert ray_ == process
    # Not a trivial agreement: another client order gives other bits.
    xs, ws, s = args
    assert _bits(run_round(local_executor_factory(), (xs[::-1], ws[::-1], s)))[0] != thread[0]


def _clients(n, seed):
    rng = np.random.default_rng(seed)
    out = {}
    for k in range(n):
        m = int(rng.integers(4, 15))
        out[f'c{k}'] = {
            'x': rng.normal(size=(m, 6)).astype(np.float32),
            'y': rng.integers(0, 3, size=m).astype(np.int32),
        }
    return out


def test_fedavg_on_ray_is_bit_identical_to_the_process_stack(ray_stack, make_factory):
    clients = list(_clients(9, seed=5).values())
    model = get_model('mlp', (6,), 3, hidden_sizes=(8,))
    fa = FedAvg(model, FedAvgConfig(client_learning_rate=0.1, batch_size=4), 20)
    data = fa.pad(clients)

    def rounds(factory):
        with sh.execution_context(factory):
            state = fa.initialize(seed=1)
            out = []
            for _ in range(2):
                state, m = fa.next(state, data)
                out.append(sorted(m.items()))
            return [w.tobytes() for w in state['weights']], out

    assert rounds(ray_executor_factory(workers=ray_stack.workers)) == rounds(
        make_factory('process-2-cpw3')
    )


def test_one_actor_per_node_pinned_to_its_nodes_core(ray_stack):
    factory = ray_executor_factory(workers=ray_stack.workers)
    cluster = factory.group.cluster()
    assert sorted(n['address'] for n in cluster['nodes'] if n['alive']) == [
        '127.0.0.2',
        '127.0.0.3',
    ]
    assert cluster['resources']['CPU'] == 4
    workers = cluster['workers']
    assert sorted(w['node_ip'] for w in workers) == ['127.0.0.2', '127.0.0.3']
    # The nodes run on cores of their own; each actor pinned itself to its node's core.
    assert sorted(tuple(w['cpus']) for w in workers) == sorted(
        (c,) for c in (sorted(os.sched_getaffinity(0)) * 2)[:2]
    )
    before = [w['requests'] for w in factory.stats()['workers']]
    run_round(factory, round_data(40))
    stats = factory.stats()
    assert all(w['alive'] and w['rss_bytes'] > 0 for w in stats['workers'])
    assert all(w['requests'] > b for w, b in zip(stats['workers'], before))
    for w in stats['workers']:  # the actor process really is pinned
        assert tuple(sorted(os.sched_getaffinity(w['pid']))) == tuple(w['cpus'])


def test_broadcast_is_put_once_per_value(ray_stack):
    @sh.federated_computation(
        sh.type_at_server(sh.TensorType(tf.float32, [50_000])), sh.type_at_clients(tf.float32)
    )
    def scaled_sums(model, xs):
        @sh.tf_computation(sh.TensorType(tf.float32, [50_000]), tf.float32)
        def fn(m, x):
            return tf.reduce_sum(m) * x

        return sh.federated_sum(sh.federated_map(fn, [sh.federated_broadcast(model), xs]))

    factory = ray_executor_factory(workers=ray_stack.workers)
    model = np.linspace(0, 1, 50_000, dtype=np.float32)
    with sh.execution_context(factory):
        puts = ray_stack.workers.broadcast.puts
        got = scaled_sums(model, [1.0, 2.0, 3.0, 4.0])
        assert ray_stack.workers.broadcast.puts - puts <= 1  # both actors read one object
    with sh.execution_context(local_executor_factory()):
        assert (
            np.asarray(got).tobytes()
            == np.asarray(scaled_sums(model, [1.0, 2.0, 3.0, 4.0])).tobytes()
        )


def test_client_data_is_loaded_inside_the_actors(ray_stack, tmp_path):
    cd = ArrayClientData(_clients(8, seed=0))
    save_npz_dir(cd, tmp_path / 'clients')
    files = FileClientData.from_npz_dir(tmp_path / 'clients')
    model = get_model('mlp', (6,), 3, hidden_sizes=(8,))
    fa = FedAvg(model, FedAvgConfig(client_learning_rate=0.1, batch_size=4), 20)
    ids = cd.client_ids
    shipped = fa.pad([cd.client_arrays(c) for c in ids])
    sourced = fa.sourced(files, ids)
    assert isinstance(sourced, SourcedClients)

    def one_round(data):
        state = fa.initialize(seed=3)
        state, m = fa.next(state, data)
        return [w.tobytes() for w in state['weights']], m

    with sh.execution_context(local_executor_factory()):
        expected = one_round(shipped)
    factory = ray_executor_factory(workers=ray_stack.workers)
    with sh.execution_context(factory):
        assert one_round(shipped) == expected  # the computations travel once per session
        before = factory.stats()['bytes_to_workers']
        assert one_round(sourced) == expected
        sourced_bytes = factory.stats()['bytes_to_workers'] - before
        before = factory.stats()['bytes_to_workers']
        assert one_round(shipped) == expected
        shipped_bytes = factory.stats()['bytes_to_workers'] - before
    # Sourced data never travels through the driver: only ids and the model do.
    assert sourced_bytes < shipped_bytes


@sh.federated_computation(sh.type_at_clients(tf.float32), sh.type_at_server(tf.int32))
def sum_of_squares(xs, n):
    return sh.federated_sum(sh.federated_map(slow_square, [xs, sh.federated_broadcast(n)]))


def _kill_mid_round(directory, handle, killed):
    """A thread that kills `handle`'s actor (SIGKILL) once both actors run the blocking
    round's clients (one each), then releases them."""

    def kill():
        killed.append(handle.pid)
        kill_pid(handle.pid)

    return threading.Thread(target=when_started, args=(directory, BLOCKING_DATA, kill))


#: One client per actor: both are inside the blocking computation when all have started.
BLOCKING_DATA = [1.0, 2.0]


@pytest.mark.faults
def test_kill_9_an_actor_mid_round_and_the_retry_gives_the_right_answer(ray_stack, tmp_path):
    workers = ray_stack.workers
    factory = ray_executor_factory(workers=workers)
    h = workers.handles[1]
    generation = h.generation
    killed = []
    first, second = tmp_path / 'first', tmp_path / 'second'
    first.mkdir()
    second.mkdir()
    killer = _kill_mid_round(first, h, killed)
    killer.start()
    try:
        with sh.execution_context(factory, retries=2):
            got = blocking_computation(first)(BLOCKING_DATA)
    finally:
        killer.join()
    assert got == np.float32(3.0)
    assert killed and h.pid != killed[0]  # a new actor process (Ray restarted it)
    assert h.generation > generation
    # The killed actor's temporary directory (autograph's files) was removed when its
    # successor started; the successor has its own.
    temp = tempfile.gettempdir()
    assert not glob.glob(f'{temp}/pymp-{killed[0]}-*')
    assert len(glob.glob(f'{temp}/pymp-{h.pid}-*')) == 1
    # Without retries the loss reaches the caller as a retryable error.
    killed.clear()
    killer = _kill_mid_round(second, h, killed)
    killer.start()
    try:
        with pytest.raises(WorkerLostError) as info:
            with sh.execution_context(factory):
                blocking_computation(second)(BLOCKING_DATA)
    finally:
        killer.join()
    assert isinstance(info.value, RetryableError)
    assert 'run the computation again' in str(info.value)
    assert _run_sum(factory, [1.0, 2.0, 3.0, 4.0], 10, retries=0) == np.float32(30.0)  # back


def _run_sum(factory, xs, n, retries):
    with sh.execution_context(factory, retries=retries):
        return sum_of_squares(xs, n)


@pytest.mark.faults
def test_a_straggler_past_call_timeout_is_killed_and_retryable(ray_stack):
    from simharness.runtime.ray.workers import RayWorkers
    from simharness.hosts.ray_actor import RayWorker

    with RayWorkers(1, call_timeout=2.0, clients_per_worker=4, actor=RayWorker) as workers:
        factory = ray_executor_factory(workers=workers)
        with pytest.raises(WorkerTimeoutError, match='call_timeout') as info:
            _run_sum(factory, [1.0, 2.0], 50_000_000, retries=0)
        assert isinstance(info.value, RetryableError) and info.value.seconds == 2.0
        assert _run_sum(factory, [1.0, 2.0], 10, retries=0) == np.float32(5.0)
    assert workers.closed and not workers.handles[0].alive


def test_an_unsatisfiable_placement_group_is_an_error_naming_the_resources(ray_stack):
    import ray

    factory = ray_executor_factory(num_workers=2, num_cpus_per_worker=64, ready_timeout=1.0)
    with pytest.raises(WorkerStartError, match=r'64\.0.*ready_timeout.*4 CPU'):
        factory.group.start()
    factory.close()
    # Nothing left behind: no placement group waiting for resources, Ray still up.
    from ray.util.placement_group import placement_group_table

    pending = [
        pg for pg in placement_group_table().values() if pg['state'] not in ('REMOVED', 'CREATED')
    ]
    assert not pending and ray.is_initialized()


def test_shared_workers_must_be_ray_workers():
    with pytest.raises(SimharnessTypeError, match='RayWorkers'):
        ray_executor_factory(workers='127.0.0.2:6379')


def test_an_experiment_runs_on_ray_with_the_same_numbers(ray_stack, tmp_path):
    # The runner builds its own factory from [stack] kind = 'ray' (joining the session's
    # Ray), and records the cluster in environment.json.
    import json

    from integration.experiment_helpers import REPRO, make_config, math_only, read_metrics
    from simharness.experiments.runner import run_experiment

    thread = run_experiment(make_config(REPRO), tmp_path / 'thread', progress=False)
    ray_run = run_experiment(
        make_config(REPRO, stack={'kind': 'ray', 'num_workers': 2}),
        tmp_path / 'ray',
        progress=False,
    )
    assert math_only(read_metrics(ray_run.run_dir)) == math_only(read_metrics(thread.run_dir))
    env = json.loads((ray_run.run_dir / 'environment.json').read_text())
    assert sorted(n['address'] for n in env['ray']['nodes'] if n['alive']) == [
        '127.0.0.2',
        '127.0.0.3',
    ]
    assert env['ray']['resources']['CPU'] == 4 and len(env['ray']['workers']) == 2
    assert 'ray' not in json.loads((thread.run_dir / 'environment.json').read_text())
