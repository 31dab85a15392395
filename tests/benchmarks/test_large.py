"""Large simulations (issue 15): FedAvg reference rounds of 1,000 to 100,000 clients.

``test_large_round`` runs one FedAvg round of the reference workload (MLP
60-256-256-10, 5 local SGD steps; client k holds reference client k mod
1000's data) on the thread stack and on 2 worker processes, in two modes:

- ``streaming``: what a large simulation does now. The clients come by
  reference (`FedAvg.sourced`: the reference data written once as one
  ``.npz`` file per client, and the cohort's client ids); each worker (each
  client group on the thread stack) loads, trains and folds its clients
  slice by slice (at most ``clients_per_worker`` at a time) into the round's
  reductions.
- ``materialized``: the path before issue 15, in the same run: padded
  arrays built in the driver and shipped, every client's update held until
  the mean (streaming switched off on the stack's strategy). It runs at
  1,000 clients, and at 10,000 when 18 GB are free (it peaked at 8-12 GB).

Each case gets a fresh pool (process stack) so that the workers' RSS is the
case's own, warms the stack up with a 100-client round (tracing), then times
one round while a thread samples the RSS of the driver and the workers
every 20 ms. ``extra_info``: ``clients_per_second``, ``peak_total_rss_mb``
(driver + workers at one instant), ``peak_driver_rss_mb``,
``peak_workers_rss_mb``, the ``*_rss_before_mb`` values. The result is
checked: every client's 50 examples seen, finite loss and weights.

100,000 clients take a few minutes per stack: that size runs only with
``SIMHARNESS_LARGE=1`` in the environment. With ``--benchmark-disable``
(CI) the case runs 300 clients, streaming, on both stacks.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from simharness.runtime.local.pool import WorkerPool

from .helpers import MB, RssSampler, median_seconds

SIZES = (1_000, 10_000, 100_000)
CI_SIZE = 300
#: The materialized path peaked at 8-12 GB at 10,000 clients.
MATERIALIZED_FREE_BYTES = 18 << 30


def _large_enabled() -> bool:
    return os.environ.get('SIMHARNESS_LARGE', '') not in ('', '0')


@pytest.fixture(scope='module')
def reference_files(tmp_path_factory):
    """The reference workload as one .npz file per client, and the FedAvg process."""
    from simharness.learning import reference_fedavg_workload
    from simharness.data.files import FileClientData, save_npz_dir
    from simharness.learning import FedAvg, FedAvgConfig
    from simharness.learning.models import reference_mlp_spec

    cd, w0 = reference_fedavg_workload()
    path = tmp_path_factory.mktemp('reference-npz')
    save_npz_dir(cd, path)
    files = FileClientData.from_npz_dir(path)
    fedavg = FedAvg(reference_mlp_spec(), FedAvgConfig(), 50)
    return fedavg, cd, files, fedavg.initialize(w0)


def _strategy(factory, n):
    ex = factory.create_executor({__import__('simharness').CLIENTS: n})
    for _ in range(4):
        if hasattr(ex, 'strategy'):
            return ex.strategy
        ex = ex.target
    raise AssertionError(f'no federating strategy under {ex!r}')


@pytest.mark.parametrize('mode', ['streaming', 'materialized'])
@pytest.mark.parametrize('size', SIZES)
@pytest.mark.parametrize('stack_name', ['thread', 'process-2'])
def test_large_round(benchmark, reference_files, timing_disabled, stack_name, size, mode):
    import psutil
    import simharness as sh
    from simharness.pytest_plugin import StackSpec, WorkerPools, make_factory, stack_config

    fedavg, cd, files, state = reference_files
    n = size
    if timing_disabled:
        if size != SIZES[0] or mode != 'streaming':
            pytest.skip('CI mode runs one small streaming round per stack')
        n = CI_SIZE
    elif size >= 100_000 and not _large_enabled():
        pytest.skip('100,000 clients per round: set SIMHARNESS_LARGE=1')
    if mode == 'materialized':
        if size >= 100_000:
            pytest.skip('the materialized path needs about 1 MB per client')
        free = psutil.virtual_memory().available
        if size >= 10_000 and free < MATERIALIZED_FREE_BYTES:
            pytest.skip(
                f'needs {MATERIALIZED_FREE_BYTES >> 30} GB of free memory, '
                f'{free / (1 << 30):.1f} GB available'
            )
    benchmark.group = f'large: fedavg round of {n} clients'
    ids = [str(k % 1000) for k in range(n)]
    spec = StackSpec.parse(stack_name)
    with WorkerPools() as pools:
        factory = make_factory(spec, pools)
        try:
            benchmark.extra_info['simharness_stack'] = stack_config(spec, factory)
            pool = getattr(factory, 'group', None)
            pool = pool if isinstance(pool, WorkerPool) else None
            if pool is not None:
                pool.start()

            def worker_pids():
                return [h.pid for h in pool.handles if h.alive] if pool is not None else []

            with sh.execution_context(factory):
                fedavg.next(state, fedavg.sourced(files, ids[:100]))  # warm-up: tracing
                if mode == 'materialized':
                    _strategy(factory, n).stream = False
                    data = fedavg.pad([cd.client_arrays(c) for c in ids])
                else:
                    data = fedavg.sourced(files, ids)
                with RssSampler(worker_pids) as rss:
                    new_state, metrics = benchmark.pedantic(
                        fedavg.next, args=(state, data), rounds=1, warmup_rounds=0
                    )
                del data
        finally:
            factory.close()
    assert metrics['num_examples'] == n * 50, metrics
    assert np.isfinite(metrics['loss']), metrics
    assert all(np.all(np.isfinite(w)) for w in new_state['weights'])
    benchmark.extra_info.update(rss.extra_info())
    benchmark.extra_info.update(num_clients=n, mode=mode)
    t = median_seconds(benchmark)
    if t is not None:
        benchmark.extra_info['clients_per_second'] = n / t
        print(
            f'\n{stack_name} {mode} {n} clients: {n / t:.0f} clients/s, peak RSS total '
            f'{rss.peak["total"] / MB:.0f} MB (driver {rss.peak["driver"] / MB:.0f}, '
            f'workers {rss.peak["workers"] / MB:.0f})'
        )
