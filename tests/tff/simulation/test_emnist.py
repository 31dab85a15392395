"""Port of TFF's ``.../simulation/datasets/emnist_test.py``.

``test_get_synthetic`` as TFF's. TFF's ``test_load_from_gcs`` (skipped in
TFF's CI: it downloads) becomes tests of `load_data` on a tiny
``emnist_all.sqlite`` written here, of reading the ``.lzma`` TFF publishes, of
downloading it (from an HTTP server on loopback standing for TFF's bucket), and of
the error naming the URL and the expected file when the download fails. Our
synthetic digits are drawn by us, not TFF's pixel values.
"""

import collections
import functools
import http.server
import lzma
import shutil
import threading

import numpy as np
import pytest
import tensorflow as tf

import simharness as tff
from simharness.data import tff_files as download
from simharness.simulation.datasets import emnist
from tests.tff.simulation.datasets_files import write_tff_sqlite

EXPECTED_ELEMENT_TYPE = collections.OrderedDict(
    label=tf.TensorSpec(shape=(), dtype=tf.int32),
    pixels=tf.TensorSpec(shape=(28, 28), dtype=tf.float32),
)


def test_get_synthetic():
    client_data = emnist.get_synthetic()
    assert len(client_data.client_ids) == 2
    assert client_data.element_type_structure == EXPECTED_ELEMENT_TYPE
    for client_id in client_data.client_ids:
        data = list(client_data.create_tf_dataset_for_client(client_id).as_numpy_iterator())
        labels = [x['label'] for x in data]
        assert sorted(labels) == list(range(10))
        assert data[0]['pixels'].shape == (28, 28) and data[-1]['pixels'].shape == (28, 28)
        assert all(0.0 <= x['pixels'].min() and x['pixels'].max() <= 1.0 for x in data)


def _pixels(v):
    return [v] * (28 * 28)


@pytest.fixture
def emnist_dir(tmp_path):
    rows = [
        ('digits_only_train', 'f0', {'label': 3, 'pixels': _pixels(0.5)}),
        ('digits_only_train', 'f0', {'label': 4, 'pixels': _pixels(0.25)}),
        ('digits_only_train', 'f1', {'label': 7, 'pixels': _pixels(1.0)}),
        ('digits_only_test', 'f0', {'label': 1, 'pixels': _pixels(0.0)}),
        ('all_train', 'f2', {'label': 40, 'pixels': _pixels(0.75)}),
        ('all_test', 'f2', {'label': 41, 'pixels': _pixels(0.5)}),
    ]
    write_tff_sqlite(tmp_path / 'emnist_all.sqlite', rows)
    return tmp_path


def test_load_data(emnist_dir, tff_stack):
    train, test = emnist.load_data(cache_dir=str(emnist_dir))
    assert train.client_ids == ['f0', 'f1'] and test.client_ids == ['f0']
    assert train.element_type_structure == EXPECTED_ELEMENT_TYPE
    assert test.element_type_structure == EXPECTED_ELEMENT_TYPE
    got = list(train.create_tf_dataset_for_client('f0').as_numpy_iterator())
    assert [int(x['label']) for x in got] == [3, 4]
    np.testing.assert_allclose(got[1]['pixels'], np.full((28, 28), 0.25, np.float32))
    assert train.client_arrays('f0')['label'].tolist() == [3, 4]
    all_train, _ = emnist.load_data(only_digits=False, cache_dir=str(emnist_dir))
    assert all_train.client_ids == ['f2']

    @tff.tf_computation(tff.SequenceType(EXPECTED_ELEMENT_TYPE))
    def label_sum(ds):
        return ds.reduce(np.int32(0), lambda acc, e: acc + e['label'])

    @tff.federated_computation(tff.type_at_clients(np.str_))
    def sums(ids):
        return tff.federated_map(label_sum, tff.federated_map(train.dataset_computation, ids))

    assert [int(s) for s in sums(['f1', 'f0'])] == [7, 7]


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def bucket(tmp_path, monkeypatch):
    """A directory served over HTTP on loopback, standing for TFF's bucket."""
    served = tmp_path / 'bucket'
    served.mkdir()
    handler = functools.partial(_QuietHandler, directory=str(served))
    server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv(download.URL_VARIABLE, f'http://127.0.0.1:{server.server_port}/')
    try:
        yield served
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_a_missing_file_is_downloaded_and_decompressed(emnist_dir, bucket, tmp_path):
    with open(emnist_dir / 'emnist_all.sqlite', 'rb') as src:
        with lzma.open(bucket / 'emnist_all.sqlite.lzma', 'wb') as dst:
            shutil.copyfileobj(src, dst)
    cache = tmp_path / 'cache'  # made by the download
    train, test = emnist.load_data(cache_dir=str(cache))
    assert train.client_ids == ['f0', 'f1'] and test.client_ids == ['f0']
    assert sorted(p.name for p in cache.iterdir()) == ['emnist_all.sqlite']
    assert (cache / 'emnist_all.sqlite').read_bytes() == (
        emnist_dir / 'emnist_all.sqlite'
    ).read_bytes()
    # the CLI's loader ([data] dataset = "emnist") downloads the same file where it is missing
    from simharness.data import benchmarks

    other = tmp_path / 'cli-cache'
    arrays = benchmarks.load_emnist(other, only_digits=True)
    assert arrays.client_ids == ['f0', 'f1']
    assert arrays.client_arrays('f0')['y'].tolist() == [3, 4]
    assert sorted(p.name for p in other.iterdir()) == ['emnist_all.sqlite']


def test_a_failed_download_names_the_url_and_path_and_leaves_nothing(bucket, tmp_path):
    (bucket / 'emnist_all.sqlite.lzma').write_bytes(lzma.compress(b'x' * 1000)[:-20])  # cut short
    with pytest.raises(ValueError, match='emnist_all.sqlite.lzma failed') as e:
        emnist.load_data(cache_dir=str(tmp_path / 'c1'))
    assert str(tmp_path / 'c1' / 'emnist_all.sqlite') in str(e.value)
    assert list((tmp_path / 'c1').iterdir()) == []  # no half-written file
    with pytest.raises(ValueError, match='404') as e:  # not in the bucket
        download.get_local_file('nothing_here.sqlite', cache_dir=str(tmp_path / 'c2'))
    assert list((tmp_path / 'c2').iterdir()) == []


def test_an_unreachable_server_fails_fast_with_the_reason(tmp_path):
    # The suite's bucket (tests/conftest.py): a loopback port where nothing listens.
    with pytest.raises(download.DatasetFileNotFoundError, match='refused') as e:
        emnist.load_data(cache_dir=str(tmp_path))
    assert e.value.path == str(tmp_path / 'emnist_all.sqlite')
    assert list(tmp_path.iterdir()) == []


def test_reads_the_published_lzma(emnist_dir):
    plain = emnist_dir / 'emnist_all.sqlite'
    with open(plain, 'rb') as src, lzma.open(str(plain) + '.lzma', 'wb') as dst:
        shutil.copyfileobj(src, dst)
    plain.unlink()
    train, _ = emnist.load_data(cache_dir=str(emnist_dir))
    assert train.client_ids == ['f0', 'f1']
    assert plain.is_file()
