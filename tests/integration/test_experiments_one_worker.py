"""Reproducibility on the process stack with ONE worker (this module's one pool).

The same config and seed must give the same metrics as on the thread stack;
`test_experiments.py` checks two workers.
"""

from __future__ import annotations

import pytest

from simharness.experiments.runner import run_experiment

from experiment_helpers import REPRO, make_config, math_only, read_metrics


@pytest.fixture(scope='module')
def runs(tmp_path_factory):
    """REPRO on the thread stack and on the process stack with 1 worker."""
    root = tmp_path_factory.mktemp('one-worker')
    thread = run_experiment(make_config(REPRO), root / 'thread', progress=False)
    process = run_experiment(
        make_config(REPRO, stack={'kind': 'process', 'num_workers': 1}),
        root / 'process',
        progress=False,
    )
    return thread, process


def test_one_worker_run(runs):
    _, process = runs
    assert process.summary['status'] == 'complete' and process.summary['num_workers'] == 1
    for r in read_metrics(process.run_dir):
        # shared-memory bytes only: the tiny model's arrays travel inline (may be 0)
        assert len(r['worker_rss_bytes']) == 1 and r['bytes_moved'] >= 0


def test_one_worker_gives_the_same_weights_and_evaluation(runs):
    fields = ('round', 'num_examples', 'eval_loss', 'eval_accuracy', 'weights_sha256')
    thread, process = runs
    a, b = read_metrics(thread.run_dir), read_metrics(process.run_dir)
    assert [{k: r[k] for k in fields} for r in b] == [{k: r[k] for k in fields} for r in a]


def test_one_worker_gives_bit_identical_metrics(runs):
    thread, process = runs
    assert math_only(read_metrics(process.run_dir)) == math_only(read_metrics(thread.run_dir))
