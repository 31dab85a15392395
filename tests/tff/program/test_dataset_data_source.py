"""Port of TFF's ``tensorflow_federated/python/program/dataset_data_source_test.py``.

All cases: the iterator's and the data source's arguments (type and value
errors), select with k (and its errors), serialization to and from bytes,
the data source's federated type. Added: a deep copy shares the datasets,
and the iterator as a leaf of a program state saved by
FileProgramStateManager.
"""

import asyncio
import copy

import numpy as np
import pytest
import tensorflow as tf

import simharness as tff
from simharness.core import types as computation_types
from simharness.program import dataset_data_source, file_program_state_manager

_FEDERATED_TYPE = computation_types.FederatedType(
    computation_types.SequenceType(np.int32), tff.CLIENTS
)


def _datasets():
    return [tf.data.Dataset.from_tensor_slices([1, 2, 3])] * 3


def test_iterator_init_does_not_raise_type_error():
    dataset_data_source.DatasetDataSourceIterator(_datasets(), _FEDERATED_TYPE)


@pytest.mark.parametrize('datasets', [None, True, 1, 'a', [True, 1, 'a']])
def test_iterator_init_raises_type_error_with_datasets(datasets):
    with pytest.raises(TypeError):
        dataset_data_source.DatasetDataSourceIterator(datasets, _FEDERATED_TYPE)


@pytest.mark.parametrize(
    'federated_type',
    [
        computation_types.FunctionType(np.int32, np.int32),
        computation_types.PlacementType(),
        computation_types.SequenceType(np.int32),
        computation_types.StructWithPythonType([np.bool_, np.int32, np.str_], list),
        computation_types.TensorType(np.int32),
    ],
    ids=['function', 'placement', 'sequence', 'struct', 'tensor'],
)
def test_iterator_init_raises_type_error_with_federated_type(federated_type):
    with pytest.raises(TypeError):
        dataset_data_source.DatasetDataSourceIterator(_datasets(), federated_type)


def test_iterator_init_raises_value_error_with_datasets_empty():
    with pytest.raises(ValueError):
        dataset_data_source.DatasetDataSourceIterator([], _FEDERATED_TYPE)


def test_iterator_init_raises_value_error_with_datasets_different_types():
    datasets = [
        tf.data.Dataset.from_tensor_slices([1, 2, 3]),
        tf.data.Dataset.from_tensor_slices(['a', 'b', 'c']),
    ]
    with pytest.raises(ValueError, match='same type specification'):
        dataset_data_source.DatasetDataSourceIterator(datasets, _FEDERATED_TYPE)


@pytest.mark.parametrize('k', [0, 1, 2])
def test_select_returns_datasets_with_k(k):
    iterator = dataset_data_source.DatasetDataSourceIterator(_datasets(), _FEDERATED_TYPE)
    actual_datasets = iterator.select(k)
    assert len(actual_datasets) == k
    for actual_dataset in actual_datasets:
        assert sorted(actual_dataset.as_numpy_iterator()) == [1, 2, 3]


@pytest.mark.parametrize('k', ['a', []])
def test_select_raises_type_error_with_k(k):
    iterator = dataset_data_source.DatasetDataSourceIterator(_datasets(), _FEDERATED_TYPE)
    with pytest.raises(TypeError):
        iterator.select(k)


@pytest.mark.parametrize('k', [None, -1, 4])
def test_select_raises_value_error_with_k(k):
    iterator = dataset_data_source.DatasetDataSourceIterator(_datasets(), _FEDERATED_TYPE)
    with pytest.raises(ValueError):
        iterator.select(k)


def test_serializable():
    iterator = dataset_data_source.DatasetDataSourceIterator(_datasets(), _FEDERATED_TYPE)
    actual_iterator = dataset_data_source.DatasetDataSourceIterator.from_bytes(iterator.to_bytes())
    assert actual_iterator is not iterator
    assert actual_iterator == iterator
    assert actual_iterator.federated_type == _FEDERATED_TYPE


def test_deepcopy_shares_datasets():
    iterator = dataset_data_source.DatasetDataSourceIterator(_datasets(), _FEDERATED_TYPE)
    copied = copy.deepcopy(iterator)
    assert copied is not iterator and copied == iterator


def test_saved_in_program_state(tmp_path):
    source = dataset_data_source.DatasetDataSource(_datasets())
    manager = file_program_state_manager.FileProgramStateManager(tmp_path)
    state = {'round': 3, 'iterator': source.iterator()}
    asyncio.run(manager.save(state, version=1))
    loaded = asyncio.run(manager.load(1, {'round': 0, 'iterator': source.iterator()}))
    assert loaded['round'] == 3
    assert isinstance(loaded['iterator'], dataset_data_source.DatasetDataSourceIterator)
    assert loaded['iterator'] == source.iterator()
    with pytest.raises(TypeError, match='saved as a Serializable'):
        asyncio.run(manager.load(1, {'round': 0, 'iterator': 0}))


@pytest.mark.parametrize(
    'tensors,dtype', [([1, 2, 3], np.int32), (['a', 'b', 'c'], np.str_)], ids=['int', 'str']
)
def test_data_source_init_sets_federated_type(tensors, dtype):
    data_source = dataset_data_source.DatasetDataSource(
        [tf.data.Dataset.from_tensor_slices(tensors)] * 3
    )
    assert data_source.federated_type == computation_types.FederatedType(
        computation_types.SequenceType(dtype), tff.CLIENTS
    )


@pytest.mark.parametrize('datasets', [None, True, 1, 'a', [True, 1, 'a']])
def test_data_source_init_raises_type_error_with_datasets(datasets):
    with pytest.raises(TypeError):
        dataset_data_source.DatasetDataSource(datasets)


def test_data_source_init_raises_value_error_with_datasets_empty():
    with pytest.raises(ValueError):
        dataset_data_source.DatasetDataSource([])


def test_data_source_init_raises_value_error_with_datasets_different_types():
    with pytest.raises(ValueError):
        dataset_data_source.DatasetDataSource(
            [
                tf.data.Dataset.from_tensor_slices([1, 2, 3]),
                tf.data.Dataset.from_tensor_slices(['a']),
            ]
        )
