"""The built-in FedAvg's server step is the example-weighted mean of the client deltas.

The reference (`benchmarks/fedavg-synthetic-mlp.md`): ``w <- w + lr * sum_k(n_k * delta_k) /
sum_k(n_k)``. The clients send ``n_k * delta_k`` (made in their computation) and the server
divides the canonical sum of those by the sum of the ``n_k``; these tests check that against
each client's own delta, taken from a round with that client alone.
"""

from __future__ import annotations

import numpy as np
import pytest

import simharness as sh
from simharness.data import synthetic_alpha_beta
from simharness.learning import models as M
from simharness.learning.fedavg import FedAvg, FedAvgConfig
from simharness.stacks import thread_debugging_executor_factory

DATA = synthetic_alpha_beta(num_clients=3, samples_per_client=30, dim=6, num_classes=3, seed=2)
SIZES = (30, 7, 18)  # examples kept per client: the weights of the mean


def _clients():
    out = []
    for cid, n in zip(DATA.client_ids, SIZES):
        a = DATA.client_arrays(cid)
        out.append({'x': a['x'][:n], 'y': a['y'][:n]})
    return out


@pytest.fixture(scope='module')
def rounds():
    spec = M.get_model('mlp', (6,), 3, hidden_sizes=(8,))
    fedavg = FedAvg(spec, FedAvgConfig(batch_size=5, client_learning_rate=0.1), 30)
    padded = fedavg.pad(_clients())
    with sh.execution_context(thread_debugging_executor_factory()):
        state = fedavg.initialize(seed=3)
        alone = [fedavg.next(state, [c]) for c in padded]
        together = fedavg.next(state, padded)
    return state, alone, together


def test_the_server_step_is_the_example_weighted_mean_of_the_client_deltas(rounds):
    state, alone, (new_state, metrics) = rounds
    w0 = [np.asarray(v, np.float64) for v in state['weights']]
    deltas = [[np.asarray(v, np.float64) - b for v, b in zip(s['weights'], w0)] for s, _ in alone]
    n = np.asarray(SIZES, np.float64)
    for j, base in enumerate(w0):
        want = base + sum(n[k] * deltas[k][j] for k in range(len(n))) / n.sum()
        got = np.asarray(new_state['weights'][j], np.float64)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    # A plain mean would be far off: the client sizes differ by up to 4x.
    plain = w0[0] + sum(d[0] for d in deltas) / len(deltas)
    assert not np.allclose(np.asarray(new_state['weights'][0]), plain, rtol=1e-3, atol=1e-4)
    assert metrics['num_examples'] == float(sum(SIZES))
    assert int(new_state['round_num']) == 1


def test_a_client_alone_moves_the_weights_by_its_own_delta(rounds):
    # One client: sum(n * delta) / n is delta up to the rounding of the product and quotient.
    state, alone, _ = rounds
    for (s, m), n in zip(alone, SIZES):
        assert m['num_examples'] == float(n)
        moved = [np.asarray(a) - np.asarray(b) for a, b in zip(s['weights'], state['weights'])]
        assert any(np.abs(d).max() > 0 for d in moved)
