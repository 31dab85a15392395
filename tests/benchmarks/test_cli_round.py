"""The CLI's rounds beside the hand-written 2-process TF loop of the same run.

Each round of ``simharness run CONFIG`` is ``rounds.run_round(process, state,
clients(cohort))`` on the config's own stack (process, 2 workers): the
``tff.learning`` process composed with the data as the CLI builds it. Timed
here for `experiments/reference.toml` (the FedAvg reference workload: 100
clients of 50 rows a round) and `configs/quickstart.toml` (digits: 10 of 20
clients of 37-102 rows a round, 2 local epochs, an MLP 64-64-10), beside the
round a user would write by hand: two plain-TF processes
(`plain_tf_worker.py`), each holding every client of the same data, given the
round's weights and half of the same cohort, the server averaging their sums.

``ratio_to_hand_written`` (extra_info): the hand-written round's median over
the CLI's, the two timed interleaved (`helpers.interleaved_medians`), so that
the ratio is of one run. Before timing, the hand-written round is checked to
compute the CLI's round: the same new weights from the same start and cohort,
to float32 rounding (the CLI weights clients by examples seen, the
hand-written loop by rows: the same proportions). Timing only: the CLI's
rounds are tested in tests/cli and tests/experiments.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List

import numpy as np
import pytest

from .helpers import check_then_time, interleaved_medians, median_seconds
from .test_fedavg import PlainTF, close_all

CONFIGS = ('experiments/reference.toml', 'configs/quickstart.toml')
PAIRS = 30
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class _Run:
    """A config's CLI process and stack, and the hand-written loop over the same clients."""

    def __init__(self, config: str):
        from simharness.experiments.config import load_config
        from simharness.experiments.runner.rounds import _make_factory, _weights
        from simharness.experiments.runner.workload import (
            _build_model,
            _build_process,
            _build_workload,
        )

        self.cfg = load_config(os.path.join(ROOT, config))
        work = _build_workload(self.cfg)
        self.ids: List[str] = list(work.client_data.client_ids)
        model = _build_model(self.cfg, work)
        self.process, self.clients = _build_process(self.cfg, model.functional, work)
        self.state = self.process.initialize()
        self.start = [np.asarray(w, np.float32) for w in _weights(self.state)]
        self.weights = self.start
        self.factory = _make_factory(self.cfg)
        self.round = 0
        self.procs: List[PlainTF] = []
        arrays = [work.client_data.client_arrays(c) for c in self.ids]
        xs = [np.asarray(a[work.x_key], np.float32).reshape(len(a[work.x_key]), -1) for a in arrays]
        ys = [np.asarray(a[work.y_key], np.int32).reshape(-1) for a in arrays]
        cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else [0]
        algo = self.cfg.algorithm
        self.procs.extend(PlainTF(cpus[i % len(cpus)]) for i in range(2))
        for p in self.procs:
            assert p.recv()[0] == 'ready'
            p.send('setup', algo.client_learning_rate, algo.local_epochs)
            assert p.recv() == 'ok'
            p.send('load', 'all', xs, ys)
            assert p.recv() == 'ok'

    def cohort(self, round_num: int) -> List[str]:
        from simharness.experiments.runner.workload import _cohort

        return _cohort(self.cfg, self.ids, round_num)

    def cli_round(self) -> Any:
        from simharness.experiments.runner.rounds import run_round

        self.state, metrics = run_round(
            self.process, self.state, self.clients(self.cohort(self.round))
        )
        self.round += 1
        return metrics

    def hand_round(self, weights: List[np.ndarray], round_num: int) -> List[np.ndarray]:
        index = {c: i for i, c in enumerate(self.ids)}
        chosen = [index[c] for c in self.cohort(round_num)]
        half = len(chosen) // 2
        for p, part in zip(self.procs, (chosen[:half], chosen[half:])):
            p.send('round', 'all', weights, part)
        sums = [p.recv() for p in self.procs]
        total = sum(s[1] for s in sums)
        return [w + sum(s[0][i] for s in sums) / np.float32(total) for i, w in enumerate(weights)]

    def close(self) -> None:
        close_all(self.procs)
        self.factory.close()


@pytest.fixture(scope='module', params=CONFIGS)
def cli_run(request):
    run = _Run(request.param)
    try:
        yield request.param, run
    finally:
        run.close()


@pytest.mark.timing_only
def test_cli_round(benchmark, cli_run):
    import simharness
    from simharness.experiments.runner.rounds import _weights

    config, run = cli_run
    benchmark.group = f'the CLI round beside the hand-written 2-process loop: {config}'
    with simharness.execution_context(run.factory):

        def check(_: Any) -> None:
            # The first round, from the same start and cohort: the same new weights.
            ours = [np.asarray(w) for w in _weights(run.state)]
            theirs = run.hand_round(run.start, 0)
            for a, b in zip(ours, theirs):
                np.testing.assert_allclose(a, b, rtol=0, atol=2e-5)

        check_then_time(benchmark, run.cli_round, (), check, rounds=20, min_rounds=10)
        if median_seconds(benchmark) is None:
            return

        def hand() -> None:
            run.weights = run.hand_round(run.weights, run.round)

        ours, theirs = interleaved_medians([run.cli_round, hand], PAIRS)
    info: Dict[str, Any] = dict(
        config=config,
        clients_per_round=run.cfg.training.clients_per_round,
        cli_seconds=ours,
        hand_written_seconds=theirs,
        ratio_to_hand_written=theirs / ours,
    )
    benchmark.extra_info.update(info)
