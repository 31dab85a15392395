"""Unit tests of simharness.data: client data, synthetic, digits, files."""

from __future__ import annotations

import hashlib
import os
import pickle

import numpy as np
import pytest

from simharness.data import (
    ArrayClientData,
    FileClientData,
    dirichlet_partition,
    iid_partition,
    load_digits_federated,
    sample_clients,
    save_npz_dir,
    synthetic_alpha_beta,
)
from simharness.data.digits import load_digits_arrays
from simharness.errors import SimharnessTypeError, SimharnessValueError


def _stack(cd, key):
    return np.stack([cd.client_arrays(c)[key] for c in cd.client_ids])


def _reference_recipe():
    """fedavg-synthetic-mlp.md section 1, written out independently."""
    rng = np.random.default_rng(0)
    diag = np.array([j**-1.2 for j in range(1, 61)], dtype=np.float64)
    xs, ys = [], []
    for _ in range(1000):
        u = rng.normal(0, 1.0)
        b_mean = rng.normal(0, 1.0)
        w = rng.normal(u, 1, size=(10, 60))
        b = rng.normal(u, 1, size=(10,))
        v = rng.normal(b_mean, 1, size=(60,))
        x = v + rng.standard_normal((50, 60)) * np.sqrt(diag)
        y = np.argmax(x @ w.T + b, axis=1)
        xs.append(x.astype(np.float32))
        ys.append(y.astype(np.int32))
    return np.stack(xs), np.stack(ys)


@pytest.fixture(scope='module')
def reference():
    from simharness.learning import reference_fedavg_workload  # imports TensorFlow

    return reference_fedavg_workload()


# ------------------------------------------------------------------ synthetic


class TestSynthetic:
    def test_reference_shapes_and_dtypes(self, reference):
        cd, _ = reference
        assert cd.client_ids == [str(k) for k in range(1000)]
        x, y = _stack(cd, 'x'), _stack(cd, 'y')
        assert x.shape == (1000, 50, 60) and x.dtype == np.float32
        assert y.shape == (1000, 50) and y.dtype == np.int32
        assert y.min() >= 0 and y.max() < 10
        assert cd.client_size('7') == 50
        assert list(cd.array_spec) == ['x', 'y']

    def test_reference_bit_for_bit(self, reference):
        cd, _ = reference
        x_ref, y_ref = _reference_recipe()
        np.testing.assert_array_equal(_stack(cd, 'x'), x_ref)
        np.testing.assert_array_equal(_stack(cd, 'y'), y_ref)

    def test_reference_initial_weights(self, reference):
        _, w = reference
        assert [a.shape for a in w] == [(60, 256), (256,), (256, 256), (256,), (256, 10), (10,)]
        assert all(a.dtype == np.float32 for a in w)
        assert sum(a.size for a in w) == 83_978
        assert sum(a.nbytes for a in w) == 335_912
        for b in w[1::2]:
            assert not b.any()
        rng = np.random.default_rng(1)
        for a, (fi, fo) in zip(w[0::2], [(60, 256), (256, 256), (256, 10)]):
            lim = np.sqrt(6 / (fi + fo))
            np.testing.assert_array_equal(
                a, rng.uniform(-lim, lim, size=(fi, fo)).astype(np.float32)
            )

    def test_determinism(self):
        a = synthetic_alpha_beta(num_clients=30, seed=3)
        b = synthetic_alpha_beta(num_clients=30, seed=3)
        c = synthetic_alpha_beta(num_clients=30, seed=4)
        np.testing.assert_array_equal(_stack(a, 'x'), _stack(b, 'x'))
        np.testing.assert_array_equal(_stack(a, 'y'), _stack(b, 'y'))
        assert not np.array_equal(_stack(a, 'x'), _stack(c, 'x'))

    def test_prefix_of_reference(self, reference):
        # Fewer clients: the same generator stream, so a prefix of the reference.
        cd = synthetic_alpha_beta(num_clients=10)
        np.testing.assert_array_equal(_stack(cd, 'x'), _stack(reference[0], 'x')[:10])

    def test_lognormal_sizes(self):
        a = synthetic_alpha_beta(num_clients=40, samples_per_client=None, seed=5)
        b = synthetic_alpha_beta(num_clients=40, samples_per_client=None, seed=5)
        sizes = [a.client_size(c) for c in a.client_ids]
        assert min(sizes) >= 50 and len(set(sizes)) > 10
        expected = np.random.default_rng(5).lognormal(4, 2, 40).astype(int) + 50
        assert sizes == expected.tolist()
        for c in a.client_ids[:5]:
            np.testing.assert_array_equal(a.client_arrays(c)['x'], b.client_arrays(c)['x'])
            assert a.client_arrays(c)['x'].dtype == np.float32
            assert a.client_arrays(c)['y'].dtype == np.int32

    def test_iid_and_other_sizes(self):
        cd = synthetic_alpha_beta(
            beta=0.0, num_clients=8, samples_per_client=20, dim=5, num_classes=3, iid=True, seed=1
        )
        x, y = _stack(cd, 'x'), _stack(cd, 'y')
        assert x.shape == (8, 20, 5) and y.shape == (8, 20)
        assert set(np.unique(y)) <= {0, 1, 2}
        # beta=0 and iid: every client's inputs have mean ~0 in the first coord.
        assert abs(x[..., 0].mean()) < 0.5

    @pytest.mark.parametrize(
        'kwargs, err, match',
        [
            ({'alpha': -1.0}, SimharnessValueError, 'alpha'),
            ({'beta': float('nan')}, SimharnessValueError, 'beta'),
            ({'num_clients': 0}, SimharnessValueError, 'num_clients'),
            ({'num_clients': 2.0}, SimharnessTypeError, 'num_clients'),
            ({'samples_per_client': 0}, SimharnessValueError, 'samples_per_client'),
            ({'num_classes': 1}, SimharnessValueError, 'num_classes'),
            ({'seed': -1}, SimharnessValueError, 'seed'),
            ({'iid': 'yes'}, SimharnessTypeError, 'iid'),
        ],
    )
    def test_argument_errors(self, kwargs, err, match):
        with pytest.raises(err, match=match):
            synthetic_alpha_beta(num_clients=kwargs.pop('num_clients', 2), **kwargs)


# ---------------------------------------------------------------- client data


def _small():
    return ArrayClientData(
        {
            'a': {
                'x': np.arange(6, dtype=np.float32).reshape(3, 2),
                'y': np.array([0, 1, 2], np.int32),
            },
            'b': {'x': np.ones((2, 2), np.float32), 'y': np.array([1, 1], np.int32)},
        }
    )


class TestArrayClientData:
    def test_basics(self):
        cd = _small()
        assert cd.client_ids == ['a', 'b']
        assert cd.client_size('a') == 3 and cd.client_size('b') == 2
        arrays = cd.client_arrays('a')
        np.testing.assert_array_equal(arrays['y'], [0, 1, 2])
        assert not arrays['x'].flags.writeable
        assert cd.array_spec == {'x': (np.dtype(np.float32), (2,)), 'y': (np.dtype(np.int32), ())}
        assert 'ArrayClientData(2 clients' in repr(cd)

    def test_client_ids_is_a_copy(self):
        cd = _small()
        cd.client_ids.append('zzz')
        assert cd.client_ids == ['a', 'b']

    def test_tf_dataset_and_element_spec(self):
        import tensorflow as tf

        cd = _small()
        spec = cd.element_spec
        assert spec['x'] == tf.TensorSpec((2,), tf.float32)
        assert spec['y'] == tf.TensorSpec((), tf.int32)
        elems = list(cd.create_tf_dataset_for_client('a').as_numpy_iterator())
        assert len(elems) == 3
        np.testing.assert_array_equal(elems[1]['x'], [2.0, 3.0])
        assert len(list(cd.create_tf_dataset_from_all_clients())) == 5

    def test_preprocess(self):
        import tensorflow as tf

        cd = synthetic_alpha_beta(num_clients=3)
        pre = cd.preprocess(lambda ds: ds.batch(10))
        assert pre.client_ids == cd.client_ids
        assert pre.element_spec['x'].shape.as_list() == [None, 60]
        arrays = pre.client_arrays('1')
        assert arrays['x'].shape == (5, 10, 60)
        np.testing.assert_array_equal(arrays['x'].reshape(50, 60), cd.client_arrays('1')['x'])
        assert pre.client_size('1') == 5
        fixed = cd.preprocess(lambda ds: ds.batch(10, drop_remainder=True))
        assert fixed.array_spec['x'] == (np.dtype(np.float32), (10, 60))
        mapped = cd.preprocess(lambda ds: ds.map(lambda e: {'x': e['x'] * 2.0, 'y': e['y']}))
        np.testing.assert_allclose(mapped.client_arrays('0')['x'], 2 * cd.client_arrays('0')['x'])
        assert isinstance(pre.create_tf_dataset_for_client('0'), tf.data.Dataset)

    def test_preprocess_errors(self):
        cd = synthetic_alpha_beta(num_clients=2, samples_per_client=15)
        with pytest.raises(SimharnessTypeError, match='callable'):
            cd.preprocess(3)
        with pytest.raises(SimharnessValueError, match='ragged'):
            cd.preprocess(lambda ds: ds.batch(10)).client_arrays('0')
        with pytest.raises(SimharnessValueError, match='infinite'):
            cd.preprocess(lambda ds: ds.repeat()).client_arrays('0')
        with pytest.raises(SimharnessTypeError, match='dict'):
            cd.preprocess(lambda ds: ds.map(lambda e: (e['x'], e['y']))).client_arrays('0')
        with pytest.raises(SimharnessValueError, match='unknown client id'):
            cd.preprocess(lambda ds: ds).client_arrays('nope')

    def test_from_stacked(self):
        x = np.zeros((4, 3, 2), np.float32)
        y = np.zeros((4, 3), np.int32)
        cd = ArrayClientData.from_stacked(x, y, client_ids=['p', 'q', 'r', 's'])
        assert cd.client_ids == ['p', 'q', 'r', 's']
        assert cd.client_arrays('r')['x'].shape == (3, 2)
        cd2 = ArrayClientData.from_stacked(x, y, x_key='pixels', y_key='label')
        assert list(cd2.client_arrays('0')) == ['pixels', 'label']
        with pytest.raises(SimharnessValueError, match=r'\[K, n\]'):
            ArrayClientData.from_stacked(x, y[:3])
        with pytest.raises(SimharnessValueError, match='3 client ids for 4'):
            ArrayClientData.from_stacked(x, y, client_ids=['a', 'b', 'c'])
        with pytest.raises(SimharnessValueError, match='not unique'):
            ArrayClientData.from_stacked(x, y, client_ids=['a', 'a', 'b', 'c'])
        with pytest.raises(SimharnessValueError, match='shapes'):
            ArrayClientData.from_stacked(np.zeros(4), y)

    def test_errors(self):
        f32 = np.zeros((2, 3), np.float32)
        i32 = np.zeros(2, np.int32)
        with pytest.raises(SimharnessValueError, match='at least one client'):
            ArrayClientData({})
        with pytest.raises(SimharnessTypeError, match='mapping'):
            ArrayClientData([1, 2])
        with pytest.raises(SimharnessTypeError, match='client ids must be str'):
            ArrayClientData({0: {'x': f32}})
        with pytest.raises(SimharnessValueError, match='same leading length'):
            ArrayClientData({'a': {'x': f32, 'y': np.zeros(3, np.int32)}})
        with pytest.raises(SimharnessValueError, match=r"arrays \['x'\], expected"):
            ArrayClientData({'a': {'x': f32, 'y': i32}, 'b': {'x': f32}})
        with pytest.raises(SimharnessTypeError, match='dtype float64 differs') as e:
            ArrayClientData({'a': {'x': f32}, 'b': {'x': f32.astype(np.float64)}})
        assert e.value.expected == np.float32 and e.value.actual == np.float64
        with pytest.raises(SimharnessValueError, match='trailing shape'):
            ArrayClientData({'a': {'x': f32}, 'b': {'x': np.zeros((2, 4), np.float32)}})
        with pytest.raises(SimharnessTypeError, match='object arrays'):
            ArrayClientData({'a': {'x': np.array([None, 1], dtype=object)}})
        with pytest.raises(SimharnessValueError, match='scalar'):
            ArrayClientData({'a': {'x': np.float32(1)}})
        with pytest.raises(SimharnessValueError, match="unknown client id 'zz'"):
            _small().client_arrays('zz')
        with pytest.raises(SimharnessValueError, match='unknown client id'):
            _small().client_size(['a'])


class TestSampleClients:
    def test_reproducible(self):
        ids = [str(i) for i in range(100)]
        a = sample_clients(ids, 10, round_num=3, seed=7)
        assert a == sample_clients(ids, 10, round_num=3, seed=7)
        assert len(set(a)) == 10 and set(a) <= set(ids)
        assert a != sample_clients(ids, 10, round_num=4, seed=7)
        assert a != sample_clients(ids, 10, round_num=3, seed=8)
        idx = np.random.default_rng((7, 3)).choice(100, 10, replace=False)
        assert a == [ids[i] for i in idx]
        assert sorted(sample_clients(ids, 100, 0, 0)) == sorted(ids)
        assert sample_clients(ids, 0, 0, 0) == []

    def test_errors(self):
        ids = ['a', 'b', 'c']
        with pytest.raises(SimharnessValueError, match='cannot sample 4 distinct clients'):
            sample_clients(ids, 4, 0, 0)
        with pytest.raises(SimharnessValueError, match='seed must be >= 0'):
            sample_clients(ids, 1, 0, -1)
        with pytest.raises(SimharnessValueError, match='round_num'):
            sample_clients(ids, 1, -2, 0)
        with pytest.raises(SimharnessTypeError, match='num_clients must be an int'):
            sample_clients(ids, 1.5, 0, 0)


# --------------------------------------------------------------------- digits


class TestDigits:
    def test_dirichlet(self):
        cd, (xt, yt) = load_digits_federated(num_clients=20, alpha=0.5, seed=0)
        assert len(cd.client_ids) == 20
        assert xt.shape == (360, 64) and xt.dtype == np.float32
        assert yt.dtype == np.int32
        sizes = [cd.client_size(c) for c in cd.client_ids]
        assert min(sizes) >= 5
        assert sum(sizes) + len(yt) == 1797
        ys = np.concatenate([cd.client_arrays(c)['y'] for c in cd.client_ids])
        xs = np.concatenate([cd.client_arrays(c)['x'] for c in cd.client_ids])
        assert xs.min() >= 0 and xs.max() <= 1 and xs.dtype == np.float32
        np.testing.assert_array_equal(
            np.bincount(np.concatenate([ys, yt]), minlength=10),
            [178, 182, 177, 183, 181, 182, 181, 179, 174, 180],  # scikit-learn's digits' counts
        )
        # Label skew: some client misses at least one class.
        assert any(len(np.unique(cd.client_arrays(c)['y'])) < 10 for c in cd.client_ids)

    def test_the_shipped_digits_are_scikit_learns(self):
        # SHA-256 of `load_digits().data / 16` (float32) and `.target` (int32), scikit-learn 1.9.1.
        x, y = load_digits_arrays()
        assert x.shape == (1797, 64) and x.dtype == np.float32 and y.dtype == np.int32
        assert hashlib.sha256(x.tobytes()).hexdigest() == (
            '9f578524b6cec1fc800cc52dfc87ebe56264983d490aa72a4bd928ba2570ec77'
        )
        assert hashlib.sha256(y.tobytes()).hexdigest() == (
            '3a0e68456f9a3c609b399717dd9ca55bb9153be1bccf72e38e3319cb740c75cd'
        )

    def test_dirichlet_partition_covers_once(self):
        labels = np.random.default_rng(0).integers(0, 10, size=1000)
        for alpha in (0.1, 1.0, 100.0):
            parts = dirichlet_partition(labels, 15, alpha, np.random.default_rng(2), min_size=10)
            allidx = np.concatenate(parts)
            np.testing.assert_array_equal(np.sort(allidx), np.arange(1000))
            assert min(len(p) for p in parts) >= 10

    def test_iid(self):
        cd, (xt, yt) = load_digits_federated(
            num_clients=7, partition='iid', test_fraction=0.1, seed=1
        )
        sizes = [cd.client_size(c) for c in cd.client_ids]
        assert max(sizes) - min(sizes) <= 1
        assert sum(sizes) + len(yt) == 1797 and len(yt) == 180
        parts = iid_partition(100, 7, np.random.default_rng(0))
        np.testing.assert_array_equal(np.sort(np.concatenate(parts)), np.arange(100))

    def test_determinism_and_images(self):
        a, (ta, _) = load_digits_federated(seed=3, as_images=True)
        b, (tb, _) = load_digits_federated(seed=3, as_images=True)
        c, (tc, _) = load_digits_federated(seed=4, as_images=True)
        assert a.client_arrays('0')['x'].shape[1:] == (8, 8, 1) and ta.shape[1:] == (8, 8, 1)
        for cid in a.client_ids:
            np.testing.assert_array_equal(a.client_arrays(cid)['x'], b.client_arrays(cid)['x'])
        np.testing.assert_array_equal(ta, tb)
        assert not np.array_equal(ta, tc)
        assert a.client_size('0') != c.client_size('0') or not np.array_equal(
            a.client_arrays('0')['y'], c.client_arrays('0')['y']
        )

    def test_no_test_split(self):
        cd, (xt, yt) = load_digits_federated(num_clients=4, partition='iid', test_fraction=0.0)
        assert xt.shape == (0, 64) and yt.shape == (0,)
        assert sum(cd.client_size(c) for c in cd.client_ids) == 1797

    def test_errors(self):
        with pytest.raises(SimharnessValueError, match='allowed: dirichlet, iid'):
            load_digits_federated(partition='shards')
        with pytest.raises(SimharnessValueError, match='alpha must be finite and > 0'):
            load_digits_federated(alpha=0.0)
        with pytest.raises(SimharnessValueError, match=r'test_fraction must be in \[0, 1\)'):
            load_digits_federated(test_fraction=1.0)
        with pytest.raises(SimharnessValueError, match='cannot give 200 clients'):
            load_digits_federated(num_clients=200, min_size=10)
        with pytest.raises(SimharnessValueError, match='no draw in 3 attempts'):
            load_digits_federated(num_clients=50, alpha=0.001, min_size=20, max_attempts=3)
        with pytest.raises(SimharnessValueError, match='fewer than min_size'):
            load_digits_federated(num_clients=300, partition='iid', min_size=5)
        with pytest.raises(SimharnessTypeError, match='num_clients must be an int'):
            load_digits_federated(num_clients='4')


# ---------------------------------------------------------------------- files


class TestFiles:
    def test_npz_dir_round_trip(self, tmp_path):
        cd = synthetic_alpha_beta(num_clients=12, samples_per_client=4, dim=3)
        save_npz_dir(cd, tmp_path / 'd')
        assert not [p for p in os.listdir(tmp_path / 'd') if not p.endswith('.npz')]
        back = FileClientData.from_npz_dir(tmp_path / 'd')
        assert back.client_ids == cd.client_ids  # natural order: '2' before '10'
        assert back.array_spec == cd.array_spec
        for cid in cd.client_ids:
            for k in ('x', 'y'):
                np.testing.assert_array_equal(back.client_arrays(cid)[k], cd.client_arrays(cid)[k])
            assert back.client_size(cid) == 4
        assert back.element_spec == cd.element_spec
        lazy = FileClientData.from_npz_dir(tmp_path / 'd', validate=False)
        assert lazy.client_size('11') == 4
        np.testing.assert_array_equal(lazy.client_arrays('11')['x'], cd.client_arrays('11')['x'])
        clone = pickle.loads(pickle.dumps(lazy))
        np.testing.assert_array_equal(clone.client_arrays('3')['y'], cd.client_arrays('3')['y'])

    def test_npz_dir_lazy_reads_only_requested(self, tmp_path):
        cd = synthetic_alpha_beta(num_clients=3, samples_per_client=4, dim=3)
        save_npz_dir(cd, tmp_path, compressed=True)
        data = FileClientData.from_npz_dir(tmp_path)
        (tmp_path / '2.npz').write_bytes(b'garbage')  # never loaded below
        np.testing.assert_array_equal(data.client_arrays('0')['x'], cd.client_arrays('0')['x'])
        with pytest.raises(SimharnessValueError, match='not a readable .npz'):
            data.client_arrays('2')

    def test_npz_dir_keys_and_extra_arrays(self, tmp_path):
        for i in range(2):
            np.savez(
                tmp_path / f'c{i}.npz',
                pixels=np.zeros((3, 2), np.float32),
                label=np.zeros(3, np.int64),
                extra=np.zeros(5),
            )
        data = FileClientData.from_npz_dir(tmp_path, x_key='pixels', y_key='label')
        assert list(data.client_arrays('c1')) == ['pixels', 'label']
        unlabeled = FileClientData.from_npz_dir(tmp_path, x_key='pixels', y_key=None)
        assert list(unlabeled.client_arrays('c0')) == ['pixels']

    def test_npz_dir_errors(self, tmp_path):
        with pytest.raises(SimharnessValueError, match='does not exist'):
            FileClientData.from_npz_dir(tmp_path / 'missing')
        (tmp_path / 'file.txt').write_text('hi')
        with pytest.raises(SimharnessValueError, match='is not a directory'):
            FileClientData.from_npz_dir(tmp_path / 'file.txt')
        with pytest.raises(SimharnessValueError, match='no .npz files'):
            FileClientData.from_npz_dir(tmp_path)
        np.savez(tmp_path / 'a.npz', features=np.zeros((2, 3), np.float32), y=np.zeros(2, np.int32))
        with pytest.raises(
            SimharnessValueError, match="array 'x' not found; the file holds 'features', 'y'"
        ):
            FileClientData.from_npz_dir(tmp_path)
        np.savez(tmp_path / 'b.npz', features=np.zeros((2, 3), np.float64), y=np.zeros(2, np.int32))
        with pytest.raises(SimharnessTypeError, match="client 'b'.*float64 differs"):
            FileClientData.from_npz_dir(tmp_path, x_key='features')
        lazy = FileClientData.from_npz_dir(tmp_path, x_key='features', validate=False)
        with pytest.raises(SimharnessTypeError, match='float64 differs'):
            lazy.client_arrays('b')
        np.savez(tmp_path / 'b.npz', features=np.zeros((2, 4), np.float32), y=np.zeros(2, np.int32))
        with pytest.raises(SimharnessValueError, match='trailing shape'):
            FileClientData.from_npz_dir(tmp_path, x_key='features')
        np.savez(tmp_path / 'b.npz', features=np.zeros((2, 3), np.float32), y=np.zeros(5, np.int32))
        with pytest.raises(SimharnessValueError, match='same leading length'):
            FileClientData.from_npz_dir(tmp_path, x_key='features')
        with pytest.raises(SimharnessValueError, match='unknown client id'):
            lazy.client_arrays('zzz')

    def test_save_npz_dir_overwrite(self, tmp_path):
        big = synthetic_alpha_beta(num_clients=5, samples_per_client=2, dim=2)
        small = synthetic_alpha_beta(num_clients=3, samples_per_client=2, dim=2, seed=1)
        save_npz_dir(big, tmp_path)
        with pytest.raises(SimharnessValueError, match='already holds 5 .npz files'):
            save_npz_dir(small, tmp_path)
        save_npz_dir(small, tmp_path, overwrite=True)
        back = FileClientData.from_npz_dir(tmp_path)
        assert back.client_ids == ['0', '1', '2']
        np.testing.assert_array_equal(back.client_arrays('1')['x'], small.client_arrays('1')['x'])
        bad = ArrayClientData({'../evil': {'x': np.zeros(1)}})
        with pytest.raises(SimharnessValueError, match='cannot be file names'):
            save_npz_dir(bad, tmp_path / 'other')

    def test_single_npz(self, tmp_path):
        ids = np.array([3, 1, 3, 2, 1, 3])
        x = np.arange(12, dtype=np.float32).reshape(6, 2)
        y = np.arange(6, dtype=np.int32)
        np.savez(tmp_path / 'all.npz', client_id=ids, x=x, y=y)
        data = FileClientData.from_single_file(tmp_path / 'all.npz')
        assert data.client_ids == ['3', '1', '2']  # first appearance
        np.testing.assert_array_equal(data.client_arrays('3')['y'], [0, 2, 5])
        np.testing.assert_array_equal(data.client_arrays('1')['x'], x[[1, 4]])
        assert data.client_size('2') == 1
        np.savez(tmp_path / 'bad.npz', client_id=ids, x=x[:5], y=y)
        with pytest.raises(SimharnessValueError, match="array 'x' has shape"):
            FileClientData.from_single_file(tmp_path / 'bad.npz')
        with pytest.raises(
            SimharnessValueError,
            match="array 'user' not found; the file holds 'client_id', 'x', 'y'",
        ):
            FileClientData.from_single_file(tmp_path / 'all.npz', client_id_key='user')

    def test_single_csv(self, tmp_path):
        path = tmp_path / 'data.csv'
        path.write_text('f1,client_id,f2,y\n0.5,alice,1,0\n1.5,bob,2,1\n2.5,alice,3,2\n')
        data = FileClientData.from_single_file(path)
        assert data.client_ids == ['alice', 'bob']
        a = data.client_arrays('alice')
        np.testing.assert_array_equal(a['x'], np.array([[0.5, 1], [2.5, 3]], np.float32))
        assert a['x'].dtype == np.float32 and a['y'].dtype == np.int32
        np.testing.assert_array_equal(a['y'], [0, 2])
        path.write_text('f1,client_id,target\n0.5,a,0.25\n')
        reg = FileClientData.from_single_file(path, y_key='target')
        assert reg.client_arrays('a')['target'].dtype == np.float32

    def test_single_file_errors(self, tmp_path):
        with pytest.raises(SimharnessValueError, match='does not exist'):
            FileClientData.from_single_file(tmp_path / 'nope.csv')
        (tmp_path / 'd.json').write_text('{}')
        with pytest.raises(SimharnessValueError, match='unsupported file type'):
            FileClientData.from_single_file(tmp_path / 'd.json')
        path = tmp_path / 'd.csv'
        path.write_text('f1,user,y\n1,a,0\n')
        with pytest.raises(
            SimharnessValueError,
            match="column 'client_id' not found; the header has 'f1', 'user', 'y'",
        ):
            FileClientData.from_single_file(path)
        path.write_text('f1,client_id,y\nabc,a,0\n')
        with pytest.raises(SimharnessValueError, match="column 'f1' has non-numeric"):
            FileClientData.from_single_file(path)
        path.write_text('f1,client_id,y\n1,a\n')
        with pytest.raises(SimharnessValueError, match='line 2: 2 fields'):
            FileClientData.from_single_file(path)
        path.write_text('f1,client_id,y\n')
        with pytest.raises(SimharnessValueError, match='no data rows'):
            FileClientData.from_single_file(path)
        with pytest.raises(SimharnessValueError, match='must differ'):
            FileClientData.from_single_file(path, x_key='client_id')


def test_stacked_rows_read_slices_across_clients_as_the_concatenation():
    from simharness.data import ArrayClientData, StackedRows

    rng = np.random.default_rng(4)
    arrays = {
        f'c{k}': {
            'x': rng.standard_normal((n, 3)).astype(np.float32),
            'y': np.arange(n, dtype=np.int32),
        }
        for k, n in enumerate([4, 1, 0, 7, 2])
    }
    cd = ArrayClientData(arrays)
    whole = np.concatenate([arrays[c]['x'] for c in cd.client_ids])
    rows = StackedRows(cd, 'x')
    assert rows.shape == whole.shape and rows.dtype == whole.dtype and len(rows) == 14
    for lo, hi in [(0, 14), (0, 4), (3, 6), (4, 5), (5, 12), (13, 20), (6, 6), (-3, None)]:
        assert np.array_equal(rows[lo:hi], whole[lo:hi])
    assert np.array_equal(np.asarray(rows), whole)
    with pytest.raises(SimharnessValueError, match='step'):
        rows[::2]
    with pytest.raises(SimharnessTypeError, match='slices'):
        rows[3]
    with pytest.raises(SimharnessValueError, match="no array 'z'"):
        StackedRows(cd, 'z')
