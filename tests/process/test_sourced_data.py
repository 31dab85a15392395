"""Client data loaded by each worker from a data source, by client id."""

from __future__ import annotations

import numpy as np
import pytest

import simharness as sh
from simharness.data import ArrayClientData, FileClientData, SourcedClients, save_npz_dir
from simharness.learning import FedAvg, FedAvgConfig, get_model
from simharness.stacks import local_executor_factory, process_executor_factory

pytestmark = pytest.mark.process


def _client_data(num_clients=12, seed=0):
    rng = np.random.default_rng(seed)
    data = {}
    for k in range(num_clients):
        n = int(rng.integers(5, 21))
        data[f'c{k}'] = {
            'x': rng.normal(size=(n, 6)).astype(np.float32),
            'y': rng.integers(0, 3, size=n).astype(np.int32),
        }
    return ArrayClientData(data)


def test_sourced_clients_match_shipped_values_on_every_stack(tmp_path, warm_pool):
    cd = _client_data()
    save_npz_dir(cd, tmp_path / 'clients')
    files = FileClientData.from_npz_dir(tmp_path / 'clients')
    model = get_model('mlp', (6,), 3, hidden_sizes=(8,))
    fa = FedAvg(model, FedAvgConfig(client_learning_rate=0.1, batch_size=4), 20)
    ids = cd.client_ids
    shipped = fa.pad([cd.client_arrays(c) for c in ids])
    sourced = fa.sourced(files, ids)
    assert isinstance(sourced, SourcedClients) and len(sourced) == len(ids)

    def two_rounds(data):
        state = fa.initialize(seed=3)
        metrics = []
        for _ in range(2):
            state, m = fa.next(state, data)
            metrics.append(m)
        return [w.tobytes() for w in state['weights']], metrics

    with sh.execution_context(local_executor_factory()):
        expected = two_rounds(shipped)
        assert two_rounds(sourced) == expected
    with process_executor_factory(pool=warm_pool) as factory:
        with sh.execution_context(factory):
            assert two_rounds(shipped) == expected
            before = factory.stats()['bytes_to_workers']
            assert two_rounds(sourced) == expected
            sourced_bytes = factory.stats()['bytes_to_workers'] - before
            before = factory.stats()['bytes_to_workers']
            two_rounds(shipped)
            shipped_bytes = factory.stats()['bytes_to_workers'] - before
    # Sourced data never travels through the driver: only the (broadcast) model does.
    assert sourced_bytes < shipped_bytes


def test_sourced_clients_is_a_lazy_sequence():
    cd = _client_data(4)
    s = SourcedClients(cd, cd.client_ids)
    part = s[1:3]
    assert isinstance(part, SourcedClients) and part.token == s.token
    assert part.client_ids == cd.client_ids[1:3]
    np.testing.assert_array_equal(s[2]['x'], cd.client_arrays(cd.client_ids[2])['x'])
    with pytest.raises(TypeError, match='client_arrays'):
        SourcedClients(object(), ['a'])
