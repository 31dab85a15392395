"""External data: `Data` building blocks resolved by the executor that holds the value."""

from __future__ import annotations

import collections

import numpy as np
import pytest
import tensorflow as tf

import simharness as sh
from simharness.core.building_blocks import Data
from simharness.data.uri import client_data_blocks, make_uri, parse_uri, resolve

ELEM = sh.to_type(collections.OrderedDict(x=sh.TensorType(tf.float32, [2]), y=tf.int32))
SEQ = sh.SequenceType(ELEM)


@sh.tf_computation(SEQ)
def client_total(ds):
    def add(acc, e):
        return acc + tf.reduce_sum(e['x']) + tf.cast(e['y'], tf.float32)

    return ds.reduce(tf.constant(0.0), add)


@sh.federated_computation(sh.type_at_clients(SEQ))
def federated_total(dss):
    return sh.federated_sum(sh.federated_map(client_total, dss))


def _write_clients(d, n):
    for c in range(n):
        np.savez(
            d / f'c{c}.npz',
            x=(np.arange(8, dtype=np.float32).reshape(4, 2) + c),
            y=np.arange(4, dtype=np.int32),
            extra=np.zeros(1, np.float64),
        )
    return [f'c{c}' for c in range(n)]


def _expected(n):
    return np.float32(sum(34 + 8 * c for c in range(n)))


def test_parse_and_make_uri(tmp_path, monkeypatch):
    p = tmp_path / 'a b.npz'
    uri = make_uri(p, ['x', 'y'])
    assert uri.startswith('npz:') and '%20' in uri
    assert parse_uri(uri) == (p, ['x', 'y'])
    monkeypatch.setenv('SIMHARNESS_DATA_DIR', str(tmp_path))
    assert parse_uri('npz:sub/c1.npz') == (tmp_path / 'sub' / 'c1.npz', None)
    for bad in ('file:/x.npz', 'x.npz', 'npz:', 'npz:x.npz?rows=1', 'npz:x.npz?keys='):
        with pytest.raises(ValueError):
            parse_uri(bad)


def test_resolution_checks_types_and_files(tmp_path):
    _write_clients(tmp_path, 1)
    uri = make_uri(tmp_path / 'c0.npz')
    cols = resolve(uri, SEQ)
    assert list(cols) == ['x', 'y'] and cols['x'].shape == (4, 2)
    assert resolve(make_uri(tmp_path / 'c0.npz', ['y']), sh.TensorType(tf.int32, [4])).shape == (4,)
    with pytest.raises(TypeError, match="array 'y' has dtype int32.*float32"):
        resolve(
            uri,
            sh.SequenceType(
                collections.OrderedDict(x=sh.TensorType(tf.float32, [2]), y=tf.float32)
            ),
        )
    with pytest.raises(TypeError, match='shape'):
        resolve(uri, sh.SequenceType(collections.OrderedDict(x=sh.TensorType(tf.float32, [3]))))
    with pytest.raises(ValueError, match=r"no array\(s\) \['z'\]"):
        resolve(uri, sh.SequenceType(collections.OrderedDict(z=tf.float32)))
    with pytest.raises(ValueError, match='no file'):
        resolve(make_uri(tmp_path / 'missing.npz'), SEQ)
    with pytest.raises(TypeError, match='exactly one'):
        resolve(uri, sh.TensorType(tf.float32))


def test_data_blocks_on_the_thread_stack(tmp_path, monkeypatch):
    ids = _write_clients(tmp_path, 5)
    assert federated_total(client_data_blocks(tmp_path, ids, SEQ)) == _expected(5)
    # Relative paths resolve against the executor's data directory.
    monkeypatch.setenv('SIMHARNESS_DATA_DIR', str(tmp_path))
    assert federated_total(client_data_blocks('.', ids, SEQ)) == _expected(5)
    with pytest.raises(TypeError, match='not assignable'):
        federated_total([Data(make_uri(tmp_path / 'c0.npz'), sh.SequenceType(tf.float32))] * 2)


@pytest.mark.parametrize(
    'stack',
    [
        pytest.param('process-2-cpw3', marks=pytest.mark.process),
        pytest.param('remote-2', marks=pytest.mark.remote),
    ],
)
def test_data_blocks_are_read_where_the_clients_live(tmp_path, make_factory, stack, monkeypatch):
    ids = _write_clients(tmp_path, 40)
    factory = make_factory(stack)  # its workers / services run with their own environment
    with sh.execution_context(factory):
        assert federated_total(client_data_blocks(tmp_path, ids, SEQ)) == _expected(40)
        # A relative path resolves where the client lives: the driver's data directory
        # means nothing there (the driver ships the reference, not the data).
        monkeypatch.setenv('SIMHARNESS_DATA_DIR', str(tmp_path))
        with pytest.raises(ValueError, match='no file'):
            federated_total(client_data_blocks('.', ids, SEQ))
