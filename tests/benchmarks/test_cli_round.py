"""The CLI's rounds beside the hand-written 2-process TF loop of the same run.

Each round of ``simharness run CONFIG`` is ``rounds.run_round(process, state,
clients(cohort))`` on the config's own stack (process, 2 workers): the
``tff.learning`` process composed with the data as the CLI builds it. Timed
here for `experiments/reference.toml` (the FedAvg reference workload: 100
clients of 50 rows a round) and `configs/quickstart.toml` (digits: 10 of 20
clients of 37-102 rows a round, 2 local epochs, an MLP 64-64-10), beside the
round a user would write by hand: two plain-TF processes
(`plain_tf_worker.py`), each holding every client of the same data, given the
round's weights and half of the same cohort, the server averaging their sums;
and the TFF-style program of the same run, on the same stack: what a TFF user
writes for it (a Keras model of the same layers through
``tff.learning.models.from_keras_model``, ``build_weighted_fed_avg`` with
``build_sgdm``, and each round ``process.next(state, datasets)`` over
``from_tensor_slices((x, y)).batch(b).repeat(epochs)`` of the cohort's arrays,
made in the round).

``ratio_to_hand_written`` and ``ratio_to_tff_style`` (extra_info): their
median rounds over the CLI's, each timed interleaved with the CLI's
(`helpers.interleaved_medians`: 30 pairs, then 10), so that the ratios are
of one run (the goals: >= 1.2 and >= 0.9). The TFF-style rounds come last,
as they run on the CLI's workers, and include making their datasets, as the
program does (TF's ``from_tensor_slices``, ``batch`` and ``repeat`` take
~2 ms a client here). Before its timing, each is checked to compute the
CLI's first round: the same new weights from the same start and cohort, to
float32 rounding (the hand-written loop weights clients by rows, the others
by examples seen: the same proportions). Timing only: the CLI's rounds are
tested in tests/cli and tests/experiments.
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
TFF_PAIRS = 10
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
        self.tff_round_num = 0
        self.procs: List[PlainTF] = []
        arrays = [work.client_data.client_arrays(c) for c in self.ids]
        xs = [np.asarray(a[work.x_key], np.float32).reshape(len(a[work.x_key]), -1) for a in arrays]
        ys = [np.asarray(a[work.y_key], np.int32).reshape(-1) for a in arrays]
        self.xs, self.ys = xs, ys
        self.tff_process, self.tff_state = self._tff_style(xs[0].shape[1])
        cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else [0]
        algo = self.cfg.algorithm
        self.procs.extend(PlainTF(cpus[i % len(cpus)]) for i in range(2))
        for p in self.procs:
            assert p.recv()[0] == 'ready'
            p.send('setup', algo.client_learning_rate, algo.local_epochs)
            assert p.recv() == 'ok'
            p.send('load', 'all', xs, ys)
            assert p.recv() == 'ok'

    def _tff_style(self, features: int) -> Any:
        """The TFF-style program of the run and its state, started from the CLI's weights."""
        import tensorflow as tf

        import simharness as tff

        cfg = self.cfg
        hidden = list(getattr(cfg.model, 'hidden_sizes', None) or [])

        def model_fn():
            layers: List[Any] = [tf.keras.Input(shape=(features,))]
            layers += [tf.keras.layers.Dense(h, activation='relu') for h in hidden]
            layers.append(tf.keras.layers.Dense(10))
            spec = (
                tf.TensorSpec([None, features], tf.float32),
                tf.TensorSpec([None], tf.int32),
            )
            return tff.learning.models.from_keras_model(
                tf.keras.Sequential(layers),
                input_spec=spec,
                loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                metrics=[tf.keras.metrics.SparseCategoricalAccuracy()],
            )

        algo = cfg.algorithm
        process = tff.learning.algorithms.build_weighted_fed_avg(
            model_fn,
            client_optimizer_fn=tff.learning.optimizers.build_sgdm(algo.client_learning_rate),
            server_optimizer_fn=tff.learning.optimizers.build_sgdm(
                getattr(algo, 'server_learning_rate', 1.0)
            ),
        )
        state = process.set_model_weights(
            process.initialize(),
            tff.learning.models.ModelWeights(trainable=list(self.start), non_trainable=[]),
        )
        return process, state

    def tff_round(self) -> Any:
        import tensorflow as tf

        algo = self.cfg.algorithm
        index = {c: i for i, c in enumerate(self.ids)}
        datasets = [
            tf.data.Dataset.from_tensor_slices((self.xs[i], self.ys[i]))
            .batch(algo.batch_size)
            .repeat(algo.local_epochs)
            for i in (index[c] for c in self.cohort(self.tff_round_num))
        ]
        out = self.tff_process.next(self.tff_state, datasets)
        self.tff_state = out.state
        self.tff_round_num += 1
        return out

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
            first[:] = [np.asarray(w) for w in _weights(run.state)]
            for a, b in zip(first, run.hand_round(run.start, 0)):
                np.testing.assert_allclose(a, b, rtol=0, atol=2e-5)

        first: List[np.ndarray] = []

        check_then_time(benchmark, run.cli_round, (), check, rounds=20, min_rounds=10)
        if median_seconds(benchmark) is None:
            return

        def hand() -> None:
            run.weights = run.hand_round(run.weights, run.round)

        ours, theirs = interleaved_medians([run.cli_round, hand], PAIRS)
        # Apart, after: the program's rounds run on the CLI's workers (and build 10-100
        # datasets in the driver), which would weigh on the CLI's rounds next to them.
        # Its first round, from the same start and cohort: the CLI's first weights.
        tff_first = run.tff_process.get_model_weights(run.tff_round().state).trainable
        for a, c in zip(first, tff_first):
            np.testing.assert_allclose(a, np.asarray(c), rtol=0, atol=2e-5)
        ours_again, tff_style = interleaved_medians([run.cli_round, run.tff_round], TFF_PAIRS)
    info: Dict[str, Any] = dict(
        config=config,
        clients_per_round=run.cfg.training.clients_per_round,
        cli_seconds=ours,
        hand_written_seconds=theirs,
        ratio_to_hand_written=theirs / ours,
        tff_style_seconds=tff_style,
        ratio_to_tff_style=tff_style / ours_again,
    )
    benchmark.extra_info.update(info)
