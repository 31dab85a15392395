"""The Ray stack next to the process stack, interleaved in one run (issue 14).

Stacks, each with 2 workers:

* ``process-2``: 2 local worker processes (`process_executor_factory`), the
  baseline, alive for the whole module;
* ``ray-1node``: a local Ray started by the factory (``address=None``,
  ``ray.init(num_cpus=2)``), 2 actors on this one node;
* ``ray-2node``: a cluster of 2 Ray nodes on loopback (127.0.0.2 and
  127.0.0.3, each pinned to a core of its own; `tests/ray_cluster.py`), one
  actor on each (``placement_strategy='SPREAD'``).

Each Ray case times its rounds with a process-2 round run (and timed) just
before each of them, untimed by pytest-benchmark (`pedantic`'s setup), so
both stacks see the same load (this machine is shared and noisy).
``extra_info``: ``process_2_seconds`` (median of the interleaved process-2
rounds), ``ratio_to_process_2`` (Ray median / process median) and
``speed_relative_to_process_2`` (its inverse; issue 14's goal on one node:
>= 0.8).

* ``map+sum over 1000 clients``: a trivial federated_map + federated_sum: the
  per-call cost of the transport (``ms_per_client``).
* ``fedavg round``: the FedAvg reference round (fedavg-synthetic-mlp.md: 100
  clients, the reference MLP, 5 SGD steps each); the result is checked to be
  bit-identical to process-2's.

Ray is process-wide: the Ray stacks are set up one after the other. With
``--benchmark-disable`` (CI) the 2-node cluster is skipped (the conformance
suite runs on it) and each body runs once, checked. Skipped when Ray is not
installed, or already initialised in this process.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

import numpy as np
import pytest

from .helpers import disabled, median_seconds

_TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)
from stacks import have_ray  # noqa: E402  (tests/stacks.py)

pytestmark = [
    pytest.mark.ray,
    pytest.mark.skipif(
        not have_ray(), reason='Ray is not installed (pip install "simharness[ray]")'
    ),
]

RAY_STACKS = ['ray-1node', pytest.param('ray-2node', marks=pytest.mark.timing_only)]
FEDAVG_CLIENTS = 100
FEDAVG_ROUNDS = 7
MAP_SUM_ROUNDS = 15


@pytest.fixture(scope='module')
def process_2():
    """The baseline: 2 local worker processes, and an execution context on them."""
    import simharness as sh

    f = sh.framework.process_executor_factory(num_workers=2, start=True)
    ctx = sh.ExecutionContext(f)
    try:
        yield ctx
    finally:
        ctx.close()
        f.close()


@pytest.fixture(scope='module', params=RAY_STACKS)
def ray_stack(request):
    """(name, factory) of one Ray stack; pytest runs every case of one before the next."""
    import ray

    import simharness as sh

    name = request.param
    saved_auth = os.environ.get('RAY_AUTH_MODE')
    cluster = None
    if ray.is_initialized():
        pytest.skip('Ray is already initialised in this process')
    os.environ['RAY_AUTH_MODE'] = 'disabled'  # loopback only
    try:
        if name == 'ray-1node':
            f = sh.framework.ray_executor_factory(
                num_workers=2,
                start=True,
                ray_init_args={
                    'num_cpus': 2,
                    'object_store_memory': 200 << 20,
                    'log_to_driver': False,
                },
            )
        else:
            from ray_cluster import LoopbackCluster  # tests/ray_cluster.py

            cluster = LoopbackCluster(2)
            f = sh.framework.ray_executor_factory(
                num_workers=2, placement_strategy='SPREAD', start=True
            )
        try:
            yield name, f
        finally:
            f.close()  # the 1-node factory started its Ray: this shuts it down
    finally:
        if cluster is not None:
            cluster.close()
            left = cluster.leftover_processes()
            assert not left, f'Ray processes left: {left}'
        if saved_auth is None:
            os.environ.pop('RAY_AUTH_MODE', None)
        else:
            os.environ['RAY_AUTH_MODE'] = saved_auth


def interleaved(benchmark, fn, args, check, baseline_ctx, rounds):
    """Checks `fn(*args)` (current context) and `fn` on the baseline, then times `fn` with a
    timed baseline call before each round; returns the baseline's seconds (None: timing off)."""
    from simharness.framework import get_context_stack

    with get_context_stack().install(baseline_ctx):
        check(fn(*args), 'process-2')
    if disabled(benchmark):
        check(benchmark(fn, *args), 'ray')
        return None
    check(fn(*args), 'ray')  # warm-up: tracing, computations shipped to the actors
    base = []

    def setup():
        with get_context_stack().install(baseline_ctx):
            t0 = time.perf_counter()
            fn(*args)
            base.append(time.perf_counter() - t0)

    benchmark.pedantic(fn, args=args, setup=setup, rounds=rounds, warmup_rounds=0)
    return statistics.median(base)


def _report(benchmark, stack, factory, t, base, per):
    benchmark.extra_info.update(
        stack=stack, nodes=sorted({w['node_ip'] for w in factory.group.cluster()['workers']}), **per
    )
    benchmark.extra_info.update(
        process_2_seconds=base, ratio_to_process_2=t / base, speed_relative_to_process_2=base / t
    )


def test_map_sum_1000_clients(benchmark, process_2, ray_stack):
    import simharness as sh
    from computations import map_sum_add_one  # tests/computations.py

    benchmark.group = 'ray: map+sum over 1000 clients'
    stack, factory = ray_stack
    map_sum = map_sum_add_one()
    xs = [np.float32(i % 7) for i in range(1000)]
    expected = float(sum(i % 7 + 1 for i in range(1000)))

    def check(r, where):
        assert float(r) == expected, (where, r)

    with sh.execution_context(factory):
        base = interleaved(benchmark, map_sum, (xs,), check, process_2, MAP_SUM_ROUNDS)
    t = median_seconds(benchmark)
    if t is not None and base is not None:
        _report(benchmark, stack, factory, t, base, {'ms_per_client': 1e3 * t / 1000})


@pytest.fixture(scope='module')
def workload():
    from simharness.learning import reference_fedavg_workload
    from simharness.learning import FedAvg, FedAvgConfig
    from simharness.learning.models import reference_mlp_spec

    cd, w0 = reference_fedavg_workload()
    arrays = [cd.client_arrays(cid) for cid in cd.client_ids[:FEDAVG_CLIENTS]]
    fedavg = FedAvg(reference_mlp_spec(), FedAvgConfig(), 50)
    return {'fedavg': fedavg, 'padded': fedavg.pad(arrays), 'state': fedavg.initialize(w0)}


def test_fedavg_round(benchmark, process_2, ray_stack, workload):
    import simharness as sh

    benchmark.group = 'ray: fedavg round (100 clients, reference MLP)'
    stack, factory = ray_stack
    fedavg, state, padded = workload['fedavg'], workload['state'], workload['padded']
    results = {}

    def check(result, where):
        new_state, metrics = result
        assert metrics['num_examples'] == FEDAVG_CLIENTS * 50, metrics
        results[where] = [np.asarray(v).tobytes() for v in new_state['weights']]
        if len(results) == 2:  # the stacks agree bit for bit
            assert results['ray'] == results['process-2']

    with sh.execution_context(factory):
        base = interleaved(benchmark, fedavg.next, (state, padded), check, process_2, FEDAVG_ROUNDS)
    t = median_seconds(benchmark)
    if t is not None and base is not None:
        _report(benchmark, stack, factory, t, base, {'clients_per_second': FEDAVG_CLIENTS / t})
