"""Port of TFF's ``.../simulation/datasets/from_tensor_slices_client_data_test.py``.

No case left out. Added: the dataset computation mapped over client ids at
CLIENTS (each client builds its dataset where it runs), on every stack.
"""

import collections
import copy

import numpy as np
import pytest
import tensorflow as tf

import simharness as tff
from simharness.simulation.datasets import from_tensor_slices_client_data

TestClientData = from_tensor_slices_client_data.TestClientData

TEST_DATA = {
    'CLIENT A': [[1, 2], [3, 4], [5, 6]],
    'CLIENT B': [[10, 11]],
    'CLIENT C': [[100, 101], [200, 201]],
    'CLIENT C2': [[100, 101], [202, 203]],
}
CLIENT_ID_NOT_IN_TEST_DATA = 'CLIENT D'
TEST_DATA_NOT_DICT = [[[1, 2]], [[1.0, 2.0]]]
ExampleNamedTuple = collections.namedtuple('ExampleNamedTuple', 'x')
TEST_DATA_WITH_NAMEDTUPLES = {'CLIENT A': ExampleNamedTuple(x=[[1, 2], [3, 4], [5, 6]])}
TEST_DATA_WITH_TUPLES = {
    'CLIENT A': tuple([[1, 3, 5], [2, 4, 6]]),
    'CLIENT B': tuple([[10], [11]]),
    'CLIENT C': tuple([[100, 200], [101, 201]]),
    'CLIENT C2': tuple([[100, 202], [101, 203]]),
}
TEST_DATA_WITH_ORDEREDDICTS = {
    'CLIENT A': collections.OrderedDict(
        x=[[1, 2], [3, 4], [5, 6]], y=[4.0, 5.0, 6.0], z=['a', 'b', 'c']
    ),
    'CLIENT B': collections.OrderedDict(x=[[10, 11]], y=[7.0], z=['d']),
    'CLIENT C': collections.OrderedDict(x=[[100, 101], [200, 201]], y=[8.0, 9.0], z=['e', 'f']),
    'CLIENT C2': collections.OrderedDict(
        x=[[100, 101], [202, 203]], y=[100.0, 200.0], z=['abc', 'def']
    ),
}
TEST_DATA_WITH_PART_LIST_AND_PART_DICT = {
    'CLIENT A': collections.OrderedDict(
        x=[[1, 2], [3, 4], [5, 6]], y=[4.0, 5.0, 6.0], z=['a', 'b', 'c']
    ),
    'CLIENT B': [[1.0, 2.0]],
}


def assert_same_datasets(a_dataset, b_dataset):
    a, b = list(a_dataset), list(b_dataset)
    assert len(a) == len(b)
    for x, y in zip(a, b):
        if isinstance(x, (dict, collections.OrderedDict)):
            assert list(x.keys()) == list(y.keys())
            for k in x:
                np.testing.assert_array_equal(np.asarray(x[k]), np.asarray(y[k]))
        else:
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_raises_on_dict_with_leaf_tf_tensors():
    with pytest.raises(TypeError):
        TestClientData({'a': [tf.constant(1)]})


@pytest.mark.parametrize(
    'data',
    [TEST_DATA, TEST_DATA_WITH_TUPLES, TEST_DATA_WITH_ORDEREDDICTS],
    ids=['list_data', 'tuple_data', 'ordered_dict_data'],
)
def test_constructor_does_not_modify_in_place(data):
    before = copy.deepcopy(data)
    TestClientData(data)
    assert data == before


def test_client_data_constructs_with_correct_clients_and_types():
    client_data = TestClientData({'a': [1, 2, 3], 'b': [4, 5]})
    assert sorted(client_data.client_ids) == ['a', 'b']
    assert client_data.element_type_structure == tf.TensorSpec(shape=(), dtype=tf.int32)


def test_create_tf_dataset_for_client_constructs():
    client_data = TestClientData({'a': [1, 2, 3], 'b': [4, 5]})
    assert [int(x) for x in client_data.create_tf_dataset_for_client('a')] == [1, 2, 3]
    assert [int(x) for x in client_data.create_tf_dataset_for_client('b')] == [4, 5]


def test_serializable_dataset_fn_constructs():
    client_data = TestClientData({'a': [1, 2, 3], 'b': [4, 5]})
    assert [int(x) for x in client_data.serializable_dataset_fn('a')] == [1, 2, 3]


def test_where_client_data_is_tensors():
    client_data = TestClientData(TEST_DATA)
    assert sorted(TEST_DATA) == sorted(client_data.client_ids)
    assert client_data.element_type_structure == tf.TensorSpec(shape=(2,), dtype=tf.int32)
    for client_id in TEST_DATA:
        assert_same_datasets(
            tf.data.Dataset.from_tensor_slices(TEST_DATA[client_id]),
            client_data.create_tf_dataset_for_client(client_id),
        )


def test_where_client_data_is_tuples():
    client_data = TestClientData(TEST_DATA_WITH_TUPLES)
    assert sorted(TEST_DATA_WITH_TUPLES) == sorted(client_data.client_ids)
    assert client_data.element_type_structure == (
        tf.TensorSpec(shape=(), dtype=tf.int32),
        tf.TensorSpec(shape=(), dtype=tf.int32),
    )
    for client_id in TEST_DATA_WITH_TUPLES:
        assert_same_datasets(
            tf.data.Dataset.from_tensor_slices(TEST_DATA_WITH_TUPLES[client_id]),
            client_data.create_tf_dataset_for_client(client_id),
        )


def test_where_client_data_is_ordered_dicts():
    client_data = TestClientData(TEST_DATA_WITH_ORDEREDDICTS)
    assert sorted(TEST_DATA_WITH_ORDEREDDICTS) == sorted(client_data.client_ids)
    assert client_data.element_type_structure == collections.OrderedDict(
        [
            ('x', tf.TensorSpec(shape=(2,), dtype=tf.int32)),
            ('y', tf.TensorSpec(shape=(), dtype=tf.float32)),
            ('z', tf.TensorSpec(shape=(), dtype=tf.string)),
        ]
    )
    for client_id in TEST_DATA_WITH_ORDEREDDICTS:
        assert_same_datasets(
            tf.data.Dataset.from_tensor_slices(TEST_DATA_WITH_ORDEREDDICTS[client_id]),
            client_data.create_tf_dataset_for_client(client_id),
        )


def test_raises_error_if_empty_client_found():
    with pytest.raises(ValueError):
        TestClientData({'a': []})


def test_init_raises_error_if_slices_is_not_dict():
    with pytest.raises(TypeError):
        TestClientData(TEST_DATA_NOT_DICT)


def test_init_raises_error_if_slices_are_namedtuples():
    with pytest.raises(TypeError):
        TestClientData(TEST_DATA_WITH_NAMEDTUPLES)


def test_init_raises_error_if_slices_are_part_list_and_part_dict():
    with pytest.raises(TypeError):
        TestClientData(TEST_DATA_WITH_PART_LIST_AND_PART_DICT)


def test_shuffle_client_ids():
    client_data = TestClientData({'a': [1, 1], 'b': [2, 2, 2], 'c': [3], 'd': [4, 4]})
    all_examples = [1, 1, 2, 2, 2, 3, 4, 4]

    def get_flat_dataset(seed):
        return [int(x) for x in client_data.create_tf_dataset_from_all_clients(seed=seed)]

    d1, d2 = get_flat_dataset(123), get_flat_dataset(456)
    assert d1 != d2
    assert sorted(d1) == all_examples and sorted(d2) == all_examples
    assert any(get_flat_dataset(None) != get_flat_dataset(None) for _ in range(100))


def test_dataset_computation_where_client_data_is_tensors(tff_stack):
    client_data = TestClientData(TEST_DATA)
    comp = client_data.dataset_computation
    assert isinstance(comp, tff.Computation)
    expected = tff.FunctionType(
        tff.TensorType(np.str_), tff.SequenceType(tff.TensorType(np.int32, (2,)))
    )
    assert comp.type_signature.is_equivalent_to(expected)
    for client_id in TEST_DATA:
        assert_same_datasets(
            tf.data.Dataset.from_tensor_slices(TEST_DATA[client_id]), comp(client_id)
        )


def test_dataset_computation_where_client_data_is_tuples(tff_stack):
    client_data = TestClientData(TEST_DATA_WITH_TUPLES)
    comp = client_data.dataset_computation
    assert isinstance(comp, tff.Computation)
    expected = tff.FunctionType(
        tff.TensorType(np.str_),
        tff.SequenceType((tff.TensorType(np.int32), tff.TensorType(np.int32))),
    )
    assert comp.type_signature.is_equivalent_to(expected)
    for client_id in TEST_DATA_WITH_TUPLES:
        assert_same_datasets(
            tf.data.Dataset.from_tensor_slices(TEST_DATA_WITH_TUPLES[client_id]), comp(client_id)
        )


def test_dataset_computation_where_client_data_is_ordered_dicts(tff_stack):
    client_data = TestClientData(TEST_DATA_WITH_ORDEREDDICTS)
    comp = client_data.dataset_computation
    expected = tff.FunctionType(
        tff.TensorType(np.str_),
        tff.SequenceType(
            collections.OrderedDict(
                [
                    ('x', tff.TensorType(np.int32, [2])),
                    ('y', tff.TensorType(np.float32)),
                    ('z', tff.TensorType(np.str_)),
                ]
            )
        ),
    )
    assert comp.type_signature.is_equivalent_to(expected)
    for client_id in TEST_DATA_WITH_ORDEREDDICTS:
        got = comp(client_id)
        want = tf.data.Dataset.from_tensor_slices(TEST_DATA_WITH_ORDEREDDICTS[client_id])
        assert len(got) == len(list(want))
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g['x'], w['x'])
            assert g['y'] == w['y'] and g['z'] == w['z'].numpy()


def test_dataset_computation_raises_error_if_unknown_client_id(tff_stack):
    comp = TestClientData(TEST_DATA).dataset_computation
    with pytest.raises(Exception):
        comp(CLIENT_ID_NOT_IN_TEST_DATA)


def test_dataset_computation_mapped_over_ids_at_clients(tff_stack):
    client_data = TestClientData(TEST_DATA_WITH_ORDEREDDICTS)
    element = tff.SequenceType(client_data.dataset_computation.type_signature.result.element)

    @tff.tf_computation(element)
    def total(ds):
        return ds.reduce(np.float32(0), lambda acc, e: acc + e['y'])

    @tff.federated_computation(tff.type_at_clients(np.str_))
    def totals(ids):
        return tff.federated_map(total, tff.federated_map(client_data.dataset_computation, ids))

    ids = ['CLIENT C2', 'CLIENT A', 'CLIENT B', 'CLIENT C']
    assert [float(x) for x in totals(ids)] == [300.0, 15.0, 7.0, 17.0]


def test_an_unknown_client_id_is_a_key_error_as_in_tff_and_a_value_error():
    # TFF's TestClientData indexes its dict (KeyError); its other ClientData raise ValueError.
    client_data = TestClientData(TEST_DATA)
    with pytest.raises(KeyError) as caught:
        client_data.create_tf_dataset_for_client(CLIENT_ID_NOT_IN_TEST_DATA)
    assert isinstance(caught.value, ValueError)
    assert str(caught.value).startswith(f'ID [{CLIENT_ID_NOT_IN_TEST_DATA}] is not a client')
