"""Soak: 300 FedAvg rounds on 2 workers; driver and worker RSS must not grow.

``test_soak_fedavg_rss`` runs the reference round (100 clients, rotating
over the 1,000 clients, as in the reference workload), records the RSS of
the driver and of each worker after round 10, runs the rounds up to 300,
and records the RSS again (issue 15: RSS after 300 rounds vs after 10). In
extra_info: ``driver_rss_growth_pct``, ``worker_rss_growth_pct`` (the
largest of the workers), the RSS in MB after round 10 and after round 300,
the RSS every 50 rounds, and the seconds per round. The goal is below 2 %
growth. Timing-only: it runs for a minute or more.
"""

from __future__ import annotations

import os
import time

import numpy as np
import psutil
import pytest

WARMUP = 10
ROUNDS = 300 - WARMUP


@pytest.mark.timing_only
def test_soak_fedavg_rss(benchmark):
    import simharness as sh
    from simharness.learning import reference_fedavg_workload
    from simharness.learning import FedAvg, FedAvgConfig
    from simharness.learning.models import reference_mlp_spec

    cd, w0 = reference_fedavg_workload()
    fedavg = FedAvg(reference_mlp_spec(), FedAvgConfig(), 50)
    cohorts = [
        fedavg.pad([cd.client_arrays(c) for c in cd.client_ids[r * 100 : (r + 1) * 100]])
        for r in range(10)
    ]
    driver = psutil.Process(os.getpid())
    benchmark.group = 'soak: 300 FedAvg rounds, 2 workers'
    with sh.framework.process_executor_factory(num_workers=2, start=True) as factory:
        with sh.execution_context(factory):
            state = fedavg.initialize(w0)
            for r in range(WARMUP):
                state, _ = fedavg.next(state, cohorts[r % 10])
            workers = [psutil.Process(h.pid) for h in factory.group.handles]
            before = (driver.memory_info().rss, [w.memory_info().rss for w in workers])

            samples = []  # (round, driver MB, [worker MB]) every 50 rounds: growth or plateau

            def soak():
                nonlocal state
                for r in range(ROUNDS):
                    state, metrics = fedavg.next(state, cohorts[r % 10])
                    if (WARMUP + r + 1) % 50 == 0:
                        samples.append(
                            (
                                WARMUP + r + 1,
                                round(driver.memory_info().rss / 2**20, 1),
                                [round(w.memory_info().rss / 2**20, 1) for w in workers],
                            )
                        )
                return metrics

            t0 = time.perf_counter()
            metrics = benchmark.pedantic(soak, rounds=1, iterations=1)
            seconds = time.perf_counter() - t0
            after = (driver.memory_info().rss, [w.memory_info().rss for w in workers])
    assert np.isfinite(metrics['loss'])
    growth_driver = 100.0 * (after[0] - before[0]) / before[0]
    growth_workers = max(100.0 * (a - b) / b for a, b in zip(after[1], before[1]))
    mb = 1 << 20
    benchmark.extra_info.update(
        rounds=WARMUP + ROUNDS,
        measured_after_round=WARMUP,
        seconds_per_round=seconds / ROUNDS,
        driver_rss_mb_before=before[0] / mb,
        driver_rss_mb_after=after[0] / mb,
        worker_rss_mb_before=[b / mb for b in before[1]],
        worker_rss_mb_after=[a / mb for a in after[1]],
        driver_rss_growth_pct=growth_driver,
        worker_rss_growth_pct=growth_workers,
        rss_mb_every_50_rounds=samples,
        final_loss=float(metrics['loss']),
    )
