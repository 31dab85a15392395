"""Port of TFF's ``tensorflow_federated/python/program/client_id_data_source_test.py``.

All cases: the federated type, type and value errors of the arguments,
select with k (and its errors), serialization to and from bytes.
"""

import numpy as np
import pytest

import simharness as tff
from simharness.core import types as computation_types
from simharness.program import client_id_data_source

_CLIENT_IDS = ['a', 'b', 'c']
_FEDERATED_TYPE = computation_types.FederatedType(np.str_, tff.CLIENTS)


@pytest.mark.parametrize(
    'cls',
    [client_id_data_source.ClientIdDataSourceIterator, client_id_data_source.ClientIdDataSource],
)
def test_init_sets_federated_type(cls):
    assert cls(_CLIENT_IDS).federated_type == _FEDERATED_TYPE


@pytest.mark.parametrize(
    'cls',
    [client_id_data_source.ClientIdDataSourceIterator, client_id_data_source.ClientIdDataSource],
)
@pytest.mark.parametrize('client_ids', [None, True, 1, 'a', [True, 1, 'a']])
def test_init_raises_type_error_with_client_ids(cls, client_ids):
    with pytest.raises(TypeError):
        cls(client_ids)


@pytest.mark.parametrize(
    'cls',
    [client_id_data_source.ClientIdDataSourceIterator, client_id_data_source.ClientIdDataSource],
)
def test_init_raises_value_error_with_client_ids_empty(cls):
    with pytest.raises(ValueError):
        cls([])


@pytest.mark.parametrize('k', [0, 1, 2])
def test_select_returns_client_ids_with_k(k):
    iterator = client_id_data_source.ClientIdDataSource(_CLIENT_IDS).iterator()
    client_ids = iterator.select(k)
    assert len(client_ids) == k and len(set(client_ids)) == k
    assert set(client_ids) <= set(_CLIENT_IDS)


@pytest.mark.parametrize('k', ['a', []])
def test_select_raises_type_error_with_k(k):
    with pytest.raises(TypeError):
        client_id_data_source.ClientIdDataSourceIterator(_CLIENT_IDS).select(k)


@pytest.mark.parametrize('k', [None, -1, 4])
def test_select_raises_value_error_with_k(k):
    with pytest.raises(ValueError):
        client_id_data_source.ClientIdDataSourceIterator(_CLIENT_IDS).select(k)


def test_serializable():
    iterator = client_id_data_source.ClientIdDataSourceIterator(_CLIENT_IDS)
    actual = client_id_data_source.ClientIdDataSourceIterator.from_bytes(iterator.to_bytes())
    assert actual is not iterator
    assert actual == iterator
