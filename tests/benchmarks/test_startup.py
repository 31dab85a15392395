"""Worker pool start-up: ``create_worker_pool(num_workers=N).start()`` for 1, 2 and 8 workers.

Timed with the TF-preloading forkserver already running (it starts once
per driver process, with the session's first pool; that first start is
recorded as ``first_pool_start_seconds_with_forkserver`` when this session
started one). Each round starts a fresh pool and closes it untimed.
Correctness: every worker is alive, has its own pid and runs on the CPUs
its placement names, as a batch job (Linux). In extra_info: ``seconds_per_worker``.
"""

from __future__ import annotations

import os

import pytest

from .helpers import median_seconds

NUM_WORKERS = [1, 2, 8]
ROUNDS = 3


def _check_started(pool) -> None:
    import psutil

    pids = [h.pid for h in pool.handles]
    assert all(h.alive for h in pool.handles), pids
    assert len(set(pids)) == pool.num_workers, pids
    for h in pool.handles:
        assert sorted(psutil.Process(h.pid).cpu_affinity()) == sorted(h.placement.cpus), h.pid
        if hasattr(os, 'SCHED_BATCH'):  # Linux: woken by a request, it does not preempt
            assert os.sched_getscheduler(h.pid) == os.SCHED_BATCH, h.pid


@pytest.mark.parametrize('num_workers', NUM_WORKERS)
def test_pool_startup(benchmark, simharness_pools, num_workers):
    from simharness.stacks import create_worker_pool

    benchmark.group = 'worker pool start-up'
    simharness_pools.get(1)  # the forkserver is up: time warm starts only
    pools = []

    def setup():
        pool = create_worker_pool(num_workers=num_workers)
        pools.append(pool)
        return (pool,), {}

    def teardown(pool):
        pool.close()

    try:
        if benchmark.disabled:  # one start, checked
            benchmark.pedantic(lambda pool: pool.start(), setup=setup)
            _check_started(pools[-1])
        else:
            (pool,), _ = setup()  # checked once, then timed
            pool.start()
            _check_started(pool)
            pool.close()
            benchmark.pedantic(
                lambda pool: pool.start(),
                setup=setup,
                teardown=teardown,
                rounds=ROUNDS,
                warmup_rounds=0,
            )
    finally:
        for p in pools:
            p.close()
    t = median_seconds(benchmark)
    if t is not None:
        benchmark.extra_info.update(num_workers=num_workers, seconds_per_worker=t / num_workers)
        first = next(iter(simharness_pools.start_seconds.values()), None)
        if first is not None:
            benchmark.extra_info['first_pool_start_seconds_with_forkserver'] = first
