"""Our array-backed `ClientData` (`ArrayClientData`, `FileClientData`) under TFF's API.

No TFF counterpart: these check that the classes our runtime uses are TFF
`ClientData`s — element structure, `dataset_computation` on every stack (an
.npz directory read by the graph itself, compressed files and in-memory data
put into the graph), the joined dataset in TFF's client order — and the size
limit of data put into a graph.
"""

import numpy as np
import pytest
import tensorflow as tf

import simharness as tff
from simharness.data import ArrayClientData, FileClientData, save_npz_dir
from simharness.data import client_data as cd_module
from simharness.data import files


def _arrays():
    rng = np.random.default_rng(0)
    return {
        f'c{i}': {
            'x': rng.normal(size=(i + 1, 3)).astype(np.float32),
            'y': np.arange(i + 1, dtype=np.int32) + 10 * i,
        }
        for i in range(5)
    }


@pytest.fixture
def array_data():
    return ArrayClientData(_arrays())


@pytest.fixture(params=['npz_dir', 'compressed', 'single_file'])
def file_data(request, tmp_path, array_data):
    if request.param == 'npz_dir':
        save_npz_dir(array_data, tmp_path)
        return FileClientData.from_npz_dir(tmp_path)
    if request.param == 'compressed':
        for cid, a in _arrays().items():
            np.savez_compressed(tmp_path / f'{cid}.npz', **a)
        return FileClientData.from_npz_dir(tmp_path)
    ids = np.concatenate([[cid] * len(a['y']) for cid, a in _arrays().items()])
    np.savez(
        tmp_path / 'all.npz',
        client_id=ids,
        x=np.concatenate([a['x'] for a in _arrays().values()]),
        y=np.concatenate([a['y'] for a in _arrays().values()]),
    )
    return FileClientData.from_single_file(tmp_path / 'all.npz')


def test_is_a_tff_client_data(array_data):
    assert isinstance(array_data, tff.simulation.datasets.ClientData)
    assert array_data.element_type_structure == {
        'x': tf.TensorSpec((3,), tf.float32),
        'y': tf.TensorSpec((), tf.int32),
    }
    assert array_data.dataset_computation.type_signature.is_equivalent_to(
        tff.FunctionType(
            tff.TensorType(np.str_), tff.SequenceType(array_data.element_type_structure)
        )
    )


def test_graph_reads_npz_files_by_byte_range(tmp_path, array_data):
    save_npz_dir(array_data, tmp_path)
    layout = files._npz_layout(tmp_path / 'c3.npz', ['x', 'y'])
    assert layout is not None and layout['x'][1:] == (4 * 3 * 4, 4)
    np.savez_compressed(tmp_path / 'packed.npz', x=np.ones(3))
    assert files._npz_layout(tmp_path / 'packed.npz', ['x']) is None


def _sums(client_data, ids):
    @tff.tf_computation(tff.SequenceType(client_data.element_type_structure))
    def sums(ds):
        return ds.reduce(
            (np.float32(0), np.int32(0)),
            lambda acc, e: (acc[0] + tf.reduce_sum(e['x']), acc[1] + e['y']),
        )

    @tff.federated_computation(tff.type_at_clients(np.str_))
    def per_client(client_ids):
        return tff.federated_map(
            sums, tff.federated_map(client_data.dataset_computation, client_ids)
        )

    return per_client(ids)


def test_dataset_computation_on_every_stack(array_data, file_data, tff_stack):
    ids = ['c4', 'c0', 'c2', 'c4']
    want = [
        tf.data.Dataset.from_tensor_slices(_arrays()[c]).reduce(
            (np.float32(0), np.int32(0)),
            lambda acc, e: (acc[0] + tf.reduce_sum(e['x']), acc[1] + e['y']),
        )
        for c in ids
    ]
    want = [(np.float32(s), int(n)) for s, n in want]
    for data in (array_data, file_data):
        got = _sums(data, ids)
        assert [(np.float32(s), int(n)) for s, n in got] == want


@pytest.mark.parametrize('seed', [0, 3, 7])
def test_joined_dataset_in_tff_client_order(array_data, file_data, seed):
    ids = list(array_data.client_ids)
    np.random.RandomState(seed).shuffle(ids)
    want = np.concatenate([_arrays()[c]['y'] for c in ids]).tolist()
    via_graph = tf.data.Dataset.from_tensor_slices(ids).flat_map(array_data.serializable_dataset_fn)
    for ds in (
        array_data.create_tf_dataset_from_all_clients(seed=seed),
        file_data.create_tf_dataset_from_all_clients(seed=seed),
        via_graph,
    ):
        assert [int(e['y']) for e in ds] == want


def test_too_much_data_for_a_graph(monkeypatch, array_data):
    monkeypatch.setattr(cd_module, 'MAX_EMBEDDED_BYTES', 64)
    with pytest.raises(ValueError, match='at most 64 bytes'):
        array_data.serializable_dataset_fn


def test_unknown_client_id_is_an_error(array_data):
    with pytest.raises(ValueError, match="unknown client id 'zz'"):
        array_data.create_tf_dataset_for_client('zz')
    with pytest.raises(tf.errors.InvalidArgumentError, match='No data found for client'):
        list(array_data.serializable_dataset_fn('zz'))
