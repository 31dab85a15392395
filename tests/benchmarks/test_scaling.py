"""Scaling with workers: FedAvg rounds next to a hand-written N-process TF loop, and driver CPU.

Cases (issue: "the driver caps scaling"):

* ``test_scaling_handwritten[W-N]``: the hand-written baseline: W plain-TF
  processes (`plain_tf_worker.py`, pinned to CPU ``i % cores``), each holding
  a contiguous W-th of the N clients of the cohort and sending back one
  partial sum per round.
* ``test_scaling_fedavg[W-N]``: `learning.FedAvg.next` on
  ``process_executor_factory(num_workers=W)`` over the same N clients. In
  extra_info: ``clients_per_second``, ``handwritten_clients_per_second`` and
  ``speed_vs_handwritten`` (handwritten seconds / our seconds: above 1 is
  faster than the hand-written loop; the goal is >= 0.9), and
  ``driver_cpu_ms_per_round`` (CPU time of the whole driver process, all
  threads, per timed round; before 2026-11-27 the first, untimed round was
  counted too, which added its tracing and shipping to the average) and ``driver_cpu_ms_per_round_by_thread`` (the same
  by thread name, Linux only: the stack's context and reactor threads, the
  main thread, TF's pools; which of them grows with the machine's cores).
* ``test_driver_cpu_trivial[W-N]``: map + sum of a trivial function over N
  (100, 1,000) clients on W workers: ``driver_cpu_ms_per_round`` (the goal of
  issue 26: at 100 clients, 16 workers cost at most 3x the driver CPU of 2) and
  ``driver_cpu_ms_per_round_per_worker``, the driver's own cost of talking to
  one more worker. ``active_workers``: the workers the round uses (a cohort with
  fewer than 16 clients a worker goes to fewer, `split_for_workers`: 100 clients
  on 8 or 16 workers use 7).

With more workers than cores (this 2-core machine at 4-16 workers) the rows
show the driver's own cost, not parallel speed-up. Under
``--benchmark-disable`` only the 1- and 2-worker rows of 100 clients run.
"""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

from .helpers import check_then_time, cpu_by_thread, median_seconds, thread_cpu, time_median
from .test_fedavg import PlainTF, _finish, close_all

WORKERS = (1, 2, 4, 8, 16)
COHORTS = (100, 1000)
ROUNDS = 5
timing_only = pytest.mark.timing_only


def _cases():
    for n in COHORTS:
        for w in WORKERS:
            marks = () if (n == 100 and w <= 2) else (timing_only,)
            yield pytest.param(w, n, id=f'{w}w-{n}c', marks=marks)


@pytest.fixture(scope='module')
def cohort_workload():
    from simharness.learning import reference_fedavg_workload
    from simharness.learning import FedAvg, FedAvgConfig
    from simharness.learning.models import reference_mlp_spec

    cd, w0 = reference_fedavg_workload()
    arrays = [cd.client_arrays(cid) for cid in cd.client_ids[: max(COHORTS)]]
    fedavg = FedAvg(reference_mlp_spec(), FedAvgConfig(), 50)
    return {
        'fedavg': fedavg,
        'padded': fedavg.pad(arrays),
        'state': fedavg.initialize(w0),
        'w0': [np.asarray(v, np.float32) for v in w0],
        'x': np.stack([a['x'] for a in arrays]),
        'y': np.stack([a['y'] for a in arrays]),
    }


class HandWritten:
    """W plain-TF processes holding contiguous parts of the cohort; one partial sum each
    (their client update compiled by XLA with `xla`)."""

    def __init__(self, workload, xla: bool = False):
        self._workload = workload
        self._xla = xla
        self._procs: list = []
        self._loaded: set = set()
        self._cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else [0]

    def procs(self, w: int, n: int) -> list:
        new = [
            PlainTF(self._cpus[i % len(self._cpus)], self._xla) for i in range(len(self._procs), w)
        ]  # started together: ~3 s of TF import each
        self._procs.extend(new)
        for p in new:
            assert p.recv()[0] == 'ready'
        if (w, n) not in self._loaded:
            bounds = np.linspace(0, n, w + 1).astype(int)
            x, y = self._workload['x'], self._workload['y']
            for i in range(w):
                self._procs[i].send(
                    'load', f'{w}-{n}', x[bounds[i] : bounds[i + 1]], y[bounds[i] : bounds[i + 1]]
                )
            for i in range(w):
                assert self._procs[i].recv() == 'ok'
            self._loaded.add((w, n))
        return self._procs[:w]

    def round(self, w: int, n: int):
        procs = self.procs(w, n)
        w0 = self._workload['w0']
        for p in procs:
            p.send('round', f'{w}-{n}', w0)
        return _finish(w0, [p.recv() for p in procs])

    def close(self) -> None:
        close_all(self._procs)


@pytest.fixture(scope='module')
def handwritten(cohort_workload):
    hw = HandWritten(cohort_workload)
    try:
        yield hw
    finally:
        hw.close()


@pytest.fixture(scope='module')
def handwritten_xla(cohort_workload):
    hw = HandWritten(cohort_workload, xla=True)
    try:
        yield hw
    finally:
        hw.close()


GROUP = 'scaling: FedAvg round vs hand-written N-process TF'


def _active(cohort: int, workers: int) -> int:
    """The workers a round of `cohort` clients uses (a small cohort goes to fewer)."""
    from simharness.stack_factories import split_for_workers

    return sum(1 for n in split_for_workers(cohort, min(workers, cohort)) if n)


def _time_handwritten(
    benchmark, baselines, hw: HandWritten, key: str, workers: int, cohort: int
) -> None:
    """Times `hw`'s round and keeps its median as the baseline `key`."""
    benchmark.group = f'{GROUP} ({cohort} clients)'
    check_then_time(benchmark, hw.round, (workers, cohort), rounds=ROUNDS)
    t = median_seconds(benchmark)
    baselines.put(key, t)
    if t is not None:
        benchmark.extra_info.update(
            workers=workers, num_clients=cohort, clients_per_second=cohort / t
        )


@timing_only
@pytest.mark.parametrize('workers,cohort', list(_cases()))
def test_scaling_handwritten(benchmark, baselines, handwritten, workers, cohort):
    _time_handwritten(
        benchmark, baselines, handwritten, f'scaling_hand_{workers}_{cohort}', workers, cohort
    )


@timing_only
@pytest.mark.parametrize('workers,cohort', list(_cases()))
def test_scaling_handwritten_xla(benchmark, baselines, handwritten_xla, workers, cohort):
    _time_handwritten(
        benchmark,
        baselines,
        handwritten_xla,
        f'scaling_hand_xla_{workers}_{cohort}',
        workers,
        cohort,
    )


@pytest.mark.parametrize('workers,cohort', list(_cases()))
def test_scaling_fedavg(benchmark, baselines, handwritten, cohort_workload, workers, cohort):
    import simharness as sh

    benchmark.group = f'{GROUP} ({cohort} clients)'
    fedavg, state = cohort_workload['fedavg'], cohort_workload['state']
    data = cohort_workload['padded'][:cohort]

    start: dict = {}

    def check(result) -> None:
        new_state, metrics = result
        assert metrics['num_examples'] == cohort * 50, metrics
        assert np.isfinite(metrics['loss']) and int(new_state['round_num']) == 1
        # The driver's CPU is counted from here: over the timed rounds, not the first
        # (tracing, shipping the computations: tens of ms that would weigh on 5 rounds).
        start.update(cpu=time.process_time(), threads=thread_cpu())

    with sh.framework.process_executor_factory(num_workers=workers, start=True) as factory:
        with sh.execution_context(factory):
            check_then_time(benchmark, fedavg.next, (state, data), check, rounds=ROUNDS)
            cpu, threads = time.process_time() - start['cpu'], thread_cpu()
    t = median_seconds(benchmark)
    if t is None:
        return
    hand = baselines.get(
        f'scaling_hand_{workers}_{cohort}',
        lambda: time_median(lambda: handwritten.round(workers, cohort), ROUNDS),
    )
    benchmark.extra_info.update(
        workers=workers,
        active_workers=_active(cohort, workers),
        num_clients=cohort,
        clients_per_second=cohort / t,
        handwritten_seconds=hand,
        handwritten_clients_per_second=cohort / hand,
        speed_vs_handwritten=hand / t,
        driver_cpu_ms_per_round=1e3 * cpu / ROUNDS,
        driver_cpu_ms_per_round_by_thread=cpu_by_thread(start['threads'], threads, ROUNDS),
    )
    hand_xla = baselines.get(f'scaling_hand_xla_{workers}_{cohort}')
    if hand_xla is not None:
        benchmark.extra_info.update(
            handwritten_xla_clients_per_second=cohort / hand_xla,
            speed_vs_handwritten_xla=hand_xla / t,
        )


@pytest.mark.parametrize(
    'workers,cohort',
    [
        pytest.param(w, n, id=f'{w}w-{n}c', marks=() if (w <= 2 and n == 100) else (timing_only,))
        for n in COHORTS
        for w in WORKERS
    ],
)
def test_driver_cpu_trivial(benchmark, workers, cohort):
    import simharness as sh
    from computations import map_sum_add_one  # tests/computations.py

    map_sum = map_sum_add_one()

    data = list(np.ones(cohort, np.float32))
    benchmark.group = f'driver CPU per round: map+sum over {cohort} clients'
    with sh.framework.process_executor_factory(num_workers=workers, start=True) as factory:
        with sh.execution_context(factory):
            map_sum(data)  # warm up
            cpu0, threads0 = time.process_time(), thread_cpu()
            result = (
                benchmark.pedantic(map_sum, args=(data,), rounds=20, warmup_rounds=0, iterations=1)
                if not getattr(benchmark, 'disabled', False)
                else benchmark(map_sum, data)
            )
            cpu, threads = time.process_time() - cpu0, thread_cpu()
    assert result == 2.0 * cohort
    rounds = 1 if getattr(benchmark, 'disabled', False) else 20
    benchmark.extra_info.update(
        workers=workers,
        active_workers=_active(cohort, workers),
        num_clients=cohort,
        driver_cpu_ms_per_round=1e3 * cpu / rounds,
        driver_cpu_ms_per_round_per_worker=1e3 * cpu / rounds / workers,
        driver_cpu_ms_per_round_by_thread=cpu_by_thread(threads0, threads, rounds),
    )
