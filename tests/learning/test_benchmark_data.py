"""Loaders of the standard federated benchmarks, on tiny files of TFF's formats (issue 16)."""

from __future__ import annotations

import os
import sqlite3
import sys
from pathlib import Path

import numpy as np
import pytest

from simharness.data import benchmarks as B
from simharness.data.sampling import available_clients, sample_cohort
from simharness.errors import SimharnessValueError

tf = pytest.importorskip('tensorflow')


def _example(**features):
    f = {}
    for k, v in features.items():
        a = np.asarray(v)
        if a.dtype.kind == 'f':
            f[k] = tf.train.Feature(float_list=tf.train.FloatList(value=a.ravel().tolist()))
        elif a.dtype.kind in 'iu':
            f[k] = tf.train.Feature(int64_list=tf.train.Int64List(value=a.ravel().tolist()))
        else:
            f[k] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[bytes(v)]))
    return tf.train.Example(features=tf.train.Features(feature=f)).SerializeToString()


def write_tff_sqlite(path, rows):
    """rows: (split, client_id, example bytes), as TFF's SqlClientData tables."""
    con = sqlite3.connect(path)
    con.execute(
        'CREATE TABLE examples (split_name TEXT, client_id TEXT, serialized_example_proto BLOB)'
    )
    con.execute(
        'CREATE TABLE client_metadata (client_id TEXT, split_name TEXT, num_examples INTEGER)'
    )
    con.executemany('INSERT INTO examples VALUES (?, ?, ?)', rows)
    counts = {}
    for split, cid, _ in rows:
        counts[(split, cid)] = counts.get((split, cid), 0) + 1
    con.executemany(
        'INSERT INTO client_metadata VALUES (?, ?, ?)', [(c, s, n) for (s, c), n in counts.items()]
    )
    con.commit()
    con.close()


def make_emnist(d, clients=4, per_client=6):
    rng = np.random.default_rng(0)
    rows = []
    for split in ('all_train', 'all_test'):
        for c in range(clients):
            for _ in range(per_client):
                rows.append(
                    (
                        split,
                        f'f{c:04d}',
                        _example(
                            pixels=rng.random((28, 28)).astype(np.float32),
                            label=np.int64(rng.integers(62)),
                        ),
                    )
                )
    write_tff_sqlite(d / 'emnist_all.sqlite', rows)
    return rows


def test_emnist_sqlite_is_read_as_tff_does(tmp_path):
    rows = make_emnist(tmp_path)
    cd = B.load_emnist(tmp_path)
    assert cd.client_ids == ['f0000', 'f0001', 'f0002', 'f0003']
    a = cd.client_arrays('f0001')
    assert a['x'].shape == (6, 28, 28, 1) and a['x'].dtype == np.float32
    first = tf.train.Example.FromString(rows[6][2])
    np.testing.assert_array_equal(
        a['x'][0].ravel(), np.asarray(first.features.feature['pixels'].float_list.value, np.float32)
    )
    assert a['y'][0] == first.features.feature['label'].int64_list.value[0]
    with pytest.raises(SimharnessValueError, match="no clients in split 'digits_only_train'"):
        B.load_emnist(tmp_path, only_digits=True)
    # a missing file is downloaded, as TFF's loaders do (here from nowhere: tests/conftest.py)
    with pytest.raises(SimharnessValueError, match='none of emnist_all.sqlite.*refused') as e:
        B.load_emnist(tmp_path / 'empty')
    assert e.value.path == str(tmp_path / 'empty' / 'emnist_all.sqlite')
    assert list((tmp_path / 'empty').iterdir()) == []


def test_cifar100_h5_and_sqlite_give_the_same_arrays(tmp_path):
    import h5py

    rng = np.random.default_rng(1)
    images = rng.integers(0, 256, (2, 3, 32, 32, 3), dtype=np.int64)
    labels = rng.integers(0, 100, (2, 3))
    coarse = labels // 5
    with h5py.File(tmp_path / 'fed_cifar100_train.h5', 'w') as f:
        for c in range(2):
            g = f.create_group(f'examples/{c}')
            g['image'] = images[c].astype(np.uint8)
            g['label'] = labels[c]
            g['coarse_label'] = coarse[c]
    from_h5 = B.load_cifar100(tmp_path)
    sql_dir = tmp_path / 'sql'
    sql_dir.mkdir()
    write_tff_sqlite(
        sql_dir / 'cifar100.sqlite',
        [
            (
                'train',
                str(c),
                _example(
                    image=images[c, i],
                    label=np.int64(labels[c, i]),
                    coarse_label=np.int64(coarse[c, i]),
                ),
            )
            for c in range(2)
            for i in range(3)
        ],
    )
    from_sql = B.load_cifar100(sql_dir)
    assert from_h5.client_ids == from_sql.client_ids == ['0', '1']
    for c in ('0', '1'):
        a, b = from_h5.client_arrays(c), from_sql.client_arrays(c)
        for k in ('x', 'y', 'coarse_y'):
            np.testing.assert_array_equal(a[k], b[k])
    assert from_sql.client_arrays('1')['x'].max() <= 1.0


def test_shakespeare_next_character_sequences(tmp_path):
    write_tff_sqlite(
        tmp_path / 'shakespeare.sqlite',
        [
            ('train', 'KING_LEAR', _example(snippets=b'Hark!')),
            ('train', 'KING_LEAR', _example(snippets=b'When?')),
            ('train', 'EMILIA', _example(snippets=b'Never.')),
            ('test', 'EMILIA', _example(snippets=b'But now, my lord.')),
        ],
    )
    cd = B.load_shakespeare(tmp_path, sequence_length=4)
    a = cd.client_arrays('KING_LEAR')
    table = {ch: i + 1 for i, ch in enumerate(B.SHAKESPEARE_VOCAB)}
    bos, eos = len(table) + 2, len(table) + 3
    ids = [bos] + [table[ch] for ch in 'Hark!'] + [eos]
    assert a['x'][0].tolist() == ids[:4] and a['y'][0].tolist() == ids[1:5]
    assert a['x'][1].tolist() == [ids[4], ids[5], ids[6], 0]
    assert a['y'][1].tolist() == [ids[5], ids[6], 0, 0]
    assert a['x'].shape[1] == a['y'].shape[1] == 4 and a['x'].dtype == np.int32


def test_stackoverflow_vocabulary_by_frequency(tmp_path):
    write_tff_sqlite(
        tmp_path / 'stackoverflow.sqlite',
        [
            ('train', 'u1', _example(tokens=b'how to sort a list')),
            ('train', 'u2', _example(tokens=b'sort a dict')),
            ('train', 'u2', _example(tokens=b'a b')),
            ('heldout', 'u3', _example(tokens=b'x')),
        ],
    )
    cd = B.load_stackoverflow(tmp_path, vocab_size=2, sequence_length=8)
    x = cd.client_arrays('u1')['x'][0]
    # vocabulary: 'a' (3 uses) -> 1, 'sort' (2) -> 2; the rest oov = 3; bos 4, eos 5.
    assert x.tolist() == [4, 3, 3, 2, 1, 3, 5, 0]
    assert cd.client_arrays('u1')['y'][0].tolist()[:6] == [3, 3, 2, 1, 3, 5]
    # TFF's word-count file, when present, fixes the vocabulary.
    (tmp_path / 'stackoverflow.word_count').write_text('list 9\nhow 5\na 1\n')
    x = B.load_stackoverflow(tmp_path, vocab_size=2, sequence_length=8).client_arrays('u1')['x']
    assert x[0].tolist() == [4, 2, 3, 3, 3, 1, 5, 0]  # list -> 1, how -> 2


def test_hf_dataset_natural_and_dirichlet_partitions(tmp_path):
    datasets = pytest.importorskip('datasets')
    rng = np.random.default_rng(0)
    ds = datasets.Dataset.from_dict(
        {
            'features': rng.random((40, 3)).astype(np.float32).tolist(),
            'label': rng.integers(0, 4, 40).tolist(),
            'writer': [f'w{i % 5}' for i in range(40)],
        }
    )
    datasets.DatasetDict({'train': ds}).save_to_disk(str(tmp_path / 'saved'))
    natural = B.load_hf_dataset(
        str(tmp_path / 'saved'), 'features', 'label', split='train', client_id_column='writer'
    )
    assert natural.client_ids == [f'w{i}' for i in range(5)]
    assert natural.client_arrays('w2')['x'].shape == (8, 3)
    np.testing.assert_allclose(natural.client_arrays('w0')['x'][1], ds[5]['features'], rtol=1e-6)
    dirichlet = B.load_hf_dataset(
        str(tmp_path / 'saved'),
        'features',
        'label',
        split='train',
        partition='dirichlet',
        num_clients=4,
        alpha=0.3,
        seed=1,
    )
    assert sum(dirichlet.client_size(c) for c in dirichlet.client_ids) == 40
    # A name that is not in the local cache: an error, and no download (offline).
    with pytest.raises(SimharnessValueError, match='nor in the local cache'):
        B.load_hf_dataset(
            'no-such-user/no-such-dataset', 'x', 'y', cache_dir=str(tmp_path / 'hf-cache')
        )
    import datasets.config

    assert datasets.config.HF_HUB_OFFLINE is not True or os.environ.get('HF_HUB_OFFLINE')
    with pytest.raises(SimharnessValueError, match='choose a split'):
        B.load_hf_dataset(str(tmp_path / 'saved'), 'features', 'label')
    with pytest.raises(SimharnessValueError, match="no column 'nope'"):
        B.load_hf_dataset(
            str(tmp_path / 'saved'), 'nope', 'label', split='train', client_id_column='writer'
        )


def test_sampling_rules():
    ids = [f'c{i}' for i in range(10)]
    sizes = [1] * 9 + [1000]
    for r in range(3):
        assert sample_cohort(ids, 4, r, 7) == sample_cohort(ids, 4, r, 7)
    heavy = sum(
        'c9' in sample_cohort(ids, 2, r, 0, mode='weighted', sizes=sizes) for r in range(20)
    )
    assert heavy == 20
    rep = sample_cohort(ids, 30, 0, 0, mode='with_replacement')
    assert len(rep) == 30 and len(set(rep)) < 30
    avail = [len(available_clients(ids, 0.3, r, 0)) for r in range(50)]
    assert 1 <= min(avail) and max(avail) < 10 and 1.5 < np.mean(avail) < 4.5
    cohort = sample_cohort(ids, 5, 3, 0, availability=0.3)
    assert set(cohort) <= set(available_clients(ids, 0.3, 3, 0))
    with pytest.raises(SimharnessValueError, match='one size per client'):
        sample_cohort(ids, 2, 0, 0, mode='weighted')


def test_benchmarks_run_from_a_config(tmp_path):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / 'integration'))
    from experiment_helpers import make_config
    from simharness.experiments.runner import run_experiment

    make_emnist(tmp_path)
    cfg = make_config(
        data={'dataset': 'emnist', 'cache_dir': str(tmp_path)},
        model={'name': 'cnn', 'conv_filters': [2, 2]},
        training={'rounds': 1, 'clients_per_round': 2, 'tensorboard': False},
    )
    result = run_experiment(cfg, tmp_path / 'r', progress=False)
    assert result.summary['eval_on'] == 'test set' and result.status == 'complete'
    write_tff_sqlite(
        tmp_path / 'shakespeare.sqlite',
        [
            (split, c, _example(snippets=b'To be, or not to be'))
            for split in ('train', 'test')
            for c in ('A', 'B', 'C')
        ],
    )
    cfg = make_config(
        data={'dataset': 'shakespeare', 'cache_dir': str(tmp_path), 'sequence_length': 8},
        model={'name': 'keras', 'keras': 'simharness.learning.keras_examples:next_token'},
        training={'rounds': 2, 'clients_per_round': 2, 'tensorboard': False},
    )
    result = run_experiment(cfg, tmp_path / 'r', progress=False)
    assert result.status == 'complete' and 0 <= result.summary['final_accuracy'] <= 1
