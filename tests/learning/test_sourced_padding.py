"""`FedAvg.sourced`: clients by reference, with the bits of `FedAvg.pad`.

`next` and `evaluate` keep a `SourcedClients` lazy (the stack loads each
client where it computes it; on process stacks the workers read a file-backed
source themselves), and the padding travels as plain data (`Pad.to_spec`).
"""

from __future__ import annotations

import numpy as np
import pytest

from simharness.data import FileClientData, SourcedClients, save_npz_dir, synthetic_alpha_beta
from simharness.data.sourced import Pad, transform_from_spec, transform_spec
from simharness.learning import models as M
from simharness.learning.fedavg import FedAvg, FedAvgConfig

DATA = synthetic_alpha_beta(num_clients=7, samples_per_client=9, dim=5, num_classes=3, seed=4)


@pytest.fixture(scope='module')
def process():
    spec = M.get_model('mlp', (5,), 3, hidden_sizes=(8,))
    return FedAvg(spec, FedAvgConfig(batch_size=5, client_learning_rate=0.1), 12)


@pytest.fixture(scope='module')
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp('sourced') / 'clients'
    save_npz_dir(DATA, root)
    return FileClientData.from_npz_dir(root)


def test_padding_travels_as_plain_data_and_casts_and_reshapes():
    pad = Pad(4, 'tokens', 'next', 'int32', 'int64', (3,), (3,))
    again = transform_from_spec(transform_spec(pad))
    assert again == pad
    out = again(
        {'tokens': np.arange(6, dtype=np.float64).reshape(2, 3), 'next': np.ones((2, 3), np.int32)}
    )
    assert out['x'].dtype == np.int32 and out['x'].shape == (4, 3)
    assert out['y'].dtype == np.int64 and out['y'].shape == (4, 3)
    assert out['n'] == 2 and not out['x'][2:].any() and out['x'][1, 2] == 5
    # the spec of a Pad written before dtypes and shapes were part of it
    old = transform_from_spec({'kind': 'pad', 'max_examples': 4, 'x_key': 'x', 'y_key': 'y'})
    assert old == Pad(4)


def test_sourced_pads_as_pad_does(process, files):
    ids = files.client_ids[:5]
    by_value = process.pad([files.client_arrays(c) for c in ids])
    sourced = process.sourced(files, ids)
    assert isinstance(sourced, SourcedClients) and transform_spec(sourced.transform) is not None
    for a, b in zip(by_value, sourced.load()):
        assert a.keys() == b.keys()
        for k in a:
            assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k])


def test_next_and_evaluate_by_reference_give_the_bits_by_value(stack, process, files):
    ids = files.client_ids[1:6]
    state = process.initialize()
    s_val, m_val = process.next(state, process.pad([files.client_arrays(c) for c in ids]))
    s_ref, m_ref = process.next(state, process.sourced(files, ids))
    assert m_ref == m_val
    for part in ('weights', 'momentum'):
        for a, b in zip(s_ref[part], s_val[part]):
            assert np.array_equal(a, b), part
    w = s_ref['weights']
    every = files.client_ids
    assert process.evaluate(w, process.sourced(files, every)) == process.evaluate(
        w, process.pad([files.client_arrays(c) for c in every])
    )
