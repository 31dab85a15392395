"""A checkpoint of the padded-array processes (removed by issue 25) is refused by name, and
`latest_checkpoint` passes over it (the runner then runs again from round 0)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from simharness.errors import SimharnessValueError
from simharness.experiments import checkpoints as CK


def _padded_checkpoint(run_dir):
    d = run_dir / CK.CHECKPOINT_DIR
    d.mkdir(parents=True)
    np.savez(
        d / 'ckpt-000002.npz',
        **{
            'weights/0': np.zeros(3, np.float32),
            'optimizer/0': np.zeros(3, np.float32),
            'aggregator/0': np.float32(0.0),
            'round_num': np.int32(2),
            'meta': np.asarray(json.dumps({'rounds_done': 2})),
        },
    )
    return d / 'ckpt-000002.npz'


def test_a_padded_path_checkpoint_is_refused_by_name(tmp_path):
    path = _padded_checkpoint(tmp_path)
    with pytest.raises(SimharnessValueError, match='padded-array processes') as e:
        CK.load_checkpoint(path, like={'w': np.zeros(3, np.float32)})
    assert '--restart' in str(e.value)
    assert CK.latest_checkpoint(tmp_path, like={'w': np.zeros(3, np.float32)}) is None


def test_a_nested_state_round_trips_leaf_by_leaf(tmp_path):
    state = {'a': np.arange(3, dtype=np.float32), 'b': (np.int64(7), np.ones((2, 2)))}
    CK.save_checkpoint(tmp_path, state, 4, {'note': 1})
    back, meta = CK.latest_checkpoint(tmp_path, like=state)
    assert meta == {'rounds_done': 4, 'note': 1}
    assert np.array_equal(back['a'], state['a']) and back['b'][0] == 7
    assert back['b'][1].dtype == np.float64
