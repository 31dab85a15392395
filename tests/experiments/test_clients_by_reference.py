"""The runner passes each cohort by reference (issues 15 and 25).

The runner's tff.learning process is composed with the data's dataset
computation (`processes.compose_with_client_data`): ``next`` takes client
ids and each executor builds its clients' datasets. A round by id gives the
same bits as the same round by value (the clients' ``tf.data`` datasets
built in the driver), on the thread and the process stack; and on the
process stack a file-backed cohort is read by the workers, never by the
driver.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from simharness.data import FileClientData, save_npz_dir, synthetic_alpha_beta
from simharness.experiments import processes as P
from simharness.experiments.runner import rounds, workload
from simharness.experiments.runner import TIMING_FIELDS, run_experiment
from simharness.runtime.local.pool import WorkerPool

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / 'integration'))
from experiment_helpers import make_config, read_metrics  # noqa: E402

ROUNDS, K = 3, 12


@pytest.fixture(scope='module')
def npz_dir(tmp_path_factory):
    """20 clients of 8..12 examples, one .npz file each."""
    root = tmp_path_factory.mktemp('npz') / 'clients'
    cd = synthetic_alpha_beta(
        alpha=1.0, beta=1.0, num_clients=20, samples_per_client=10, dim=6, num_classes=3, seed=2
    )
    save_npz_dir(cd, root)
    return root


def _config(npz_dir, stack):
    return make_config(
        {
            'name': 'byref',
            'data': {'dataset': 'files', 'path': str(npz_dir)},
            'model': {'name': 'mlp', 'hidden_sizes': [8]},
            'algorithm': {'batch_size': 5, 'client_learning_rate': 0.1},
            'training': {
                'rounds': ROUNDS,
                'clients_per_round': K,
                'seed': 1,
                'eval_every': 1,
                'federated_eval': True,
            },
            'stack': {'kind': 'thread'},
        },
        stack=stack,
    )


class _ByValue:
    """A process whose ``next(state, client_ids)`` builds the clients' datasets in the
    driver and passes them by value (the process not composed with the data)."""

    def __init__(
        self,
        process,
        client_data,
        batch_size,
        local_epochs=1,
        x_key='x',
        y_key='y',
        x_dtype=np.float32,
    ):
        self._process, self._cd = process, client_data
        self._args = (batch_size, local_epochs, x_key, y_key, x_dtype)

    def __getattr__(self, name):
        return getattr(self._process, name)

    def next(self, state, client_ids):
        arrays = [self._cd.client_arrays(c) for c in client_ids]
        return self._process.next(state, P.client_datasets(arrays, *self._args))


def _math(rows):
    """The rows without timing, bytes and RSS (federated evaluation included)."""
    assert {'weights_sha256', 'loss', 'fed_eval_loss', 'fed_eval_accuracy'} <= set(rows[0])
    return [{k: v for k, v in r.items() if k not in TIMING_FIELDS} for r in rows]


def _run(config, root, monkeypatch, by_value=False):
    with monkeypatch.context() as mp:
        if by_value:
            mp.setattr(P, 'compose_with_client_data', _ByValue)
        result = run_experiment(config, root, progress=False)
    assert result.status == 'complete'
    return read_metrics(result.run_dir)


@pytest.mark.parametrize(
    'stack',
    [{'kind': 'thread'}, {'kind': 'process', 'num_workers': 2}],
    ids=['thread', 'process-2'],
)
def test_a_round_by_reference_gives_the_bits_of_a_round_by_value(
    npz_dir, tmp_path, monkeypatch, stack
):
    config = _config(npz_dir, stack)
    by_ref = _run(config, tmp_path / 'ref', monkeypatch)
    by_val = _run(config, tmp_path / 'val', monkeypatch, by_value=True)
    assert len(by_ref) == ROUNDS
    assert _math(by_ref) == _math(by_val)
    assert all(np.isfinite(r['fed_eval_loss']) for r in by_ref)


def test_the_process_driver_never_reads_a_cohort(npz_dir, tmp_path, monkeypatch):
    """The driver reads every file once while it sets up (central evaluation on all
    clients); from then on only the workers read clients, when the cohort goes by
    reference. By value (the path before) the driver reads each cohort."""
    config = _config(npz_dir, {'kind': 'process', 'num_workers': 2})
    for by_value in (False, True):
        loads, at_setup, passed = [], [], []
        real_load, real_start, real_next = (
            FileClientData.client_arrays,
            WorkerPool.start,
            rounds.run_round,
        )

        def load(cd, client_id):
            loads.append(client_id)
            return real_load(cd, client_id)

        def start(pool):
            # the run waits for its workers (their start began in the background): everything
            # before is setup
            if threading.current_thread() is threading.main_thread():
                at_setup.append(len(loads))
            return real_start(pool)

        def next_(process, state, data):
            passed.append(sorted({type(c) for c in data}))
            return real_next(process, state, data)

        with monkeypatch.context() as mp:
            mp.setattr(FileClientData, 'client_arrays', load)
            mp.setattr(WorkerPool, 'start', start)
            mp.setattr(rounds, 'run_round', next_)
            if by_value:
                mp.setattr(P, 'compose_with_client_data', _ByValue)
            result = run_experiment(config, tmp_path / str(by_value), progress=False)
        assert result.status == 'complete'
        assert at_setup and at_setup[0] >= 20  # the counter sees the driver's reads
        after_setup = len(loads) - at_setup[0]
        if by_value:
            # each round's cohort, and every client for each federated evaluation
            assert after_setup == ROUNDS * K + ROUNDS * 20
        else:
            assert passed == [[str]] * ROUNDS  # client ids
            assert after_setup == 0


def test_a_central_evaluation_read_lazily_gives_the_bits_of_one_held(
    npz_dir, tmp_path, monkeypatch
):
    """All clients' examples bigger than `EVAL_IN_MEMORY_BYTES` are read from the files a
    batch at a time at each evaluation, never held whole: the same metrics as held."""
    config = _config(npz_dir, {'kind': 'thread'})
    held = _run(config, tmp_path / 'held', monkeypatch)
    loads = []
    real_load = FileClientData.client_arrays

    def load(cd, client_id):
        loads.append(client_id)
        return real_load(cd, client_id)

    with monkeypatch.context() as mp:
        mp.setattr(workload, 'EVAL_IN_MEMORY_BYTES', 0)
        mp.setattr(workload, '_stack_clients', _labels_only(workload._stack_clients))
        mp.setattr(FileClientData, 'client_arrays', load)
        lazy = _run(config, tmp_path / 'lazy', monkeypatch)
    assert [(r['eval_loss'], r['eval_accuracy']) for r in lazy] == [
        (r['eval_loss'], r['eval_accuracy']) for r in held
    ]
    assert _math(lazy) == _math(held)
    assert loads.count('0') >= ROUNDS  # read again at each evaluation


def _labels_only(stack_clients):
    def only_y(cd, key):
        assert key == 'y', 'the examples of all clients were stacked in the driver'
        return stack_clients(cd, key)

    return only_y
