"""Port of TFF's ``.../simulation/datasets/sql_client_data_utils_test.py``. No case left out.

Added: the written file's clients build their datasets on the workers
(`dataset_computation` mapped over ids), on every stack.
"""

import collections

import numpy as np
import pytest
import tensorflow as tf

import simharness as tff
from simharness.simulation.datasets import sql_client_data_utils as utils


@pytest.mark.parametrize(
    'element_spec',
    [
        None,
        tf.TensorSpec(shape=()),
        tf.TensorSpec(shape=(None,)),
        (tf.TensorSpec(shape=()), tf.TensorSpec(shape=())),
        [tf.TensorSpec(shape=()), tf.TensorSpec(shape=())],
        {1: tf.TensorSpec(shape=())},
        {('a', 'b'): tf.TensorSpec(shape=())},
        {'outer': {'inner': tf.TensorSpec(shape=())}},
    ],
    ids=[
        'none',
        'tensorspec',
        'tensorspec_batched',
        'tuple',
        'list',
        'integer_key',
        'tuple_key',
        'nested_mapping',
    ],
)
def test_check_element_spec_raises_type_error(element_spec):
    with pytest.raises(utils.ElementSpecCompatibilityError):
        utils._validate_element_spec(element_spec)


@pytest.mark.parametrize(
    'tensor',
    [
        tf.convert_to_tensor(0, dtype=tf.int8),
        tf.convert_to_tensor(1, dtype=tf.int32),
        tf.convert_to_tensor(2, dtype=tf.int64),
        tf.convert_to_tensor([3, 4, 5], dtype=tf.int64),
        tf.eye(3, dtype=tf.int64),
        tf.ones((2, 3, 4), dtype=tf.int64),
        tf.convert_to_tensor(1.0, dtype=tf.float32),
        tf.convert_to_tensor([3.0, 4.0, 5.0], dtype=tf.float32),
        tf.convert_to_tensor(np.random.randn(3, 4), dtype=tf.float32),
        tf.convert_to_tensor(np.random.randn(3, 4, 5), dtype=tf.float32),
        tf.convert_to_tensor('test', dtype=tf.string),
    ],
    ids=[
        'int8_scalar',
        'int32_scalar',
        'int64_scalar',
        'int64_1darray',
        'int64_2darray',
        'int64_3darray',
        'float32_scalar',
        'float32_1darray',
        'float32_2darray',
        'float32_3darray',
        'string',
    ],
)
def test_serializer_parser_on_a_single_elem(tensor):
    elem = collections.OrderedDict(test_key=tensor)
    spec = collections.OrderedDict(test_key=tf.TensorSpec.from_tensor(tensor))
    rebuilt = utils._build_parser(spec)(utils._build_serializer(spec)(elem))
    assert list(rebuilt) == list(elem)
    np.testing.assert_array_equal(rebuilt['test_key'].numpy(), tensor.numpy())


def _datasets(second=None):
    ds1 = tf.data.Dataset.from_tensor_slices(
        collections.OrderedDict(i=[1, 2, 3], f=[4.0, 5.0, 6.0], s=['a', 'b', 'c'])
    )
    ds2 = tf.data.Dataset.from_tensor_slices(
        second or collections.OrderedDict(i=[4, 5], f=[7.0, 8.0], s=['d', 'e'])
    )
    return {'foo': ds1, 'bar': ds2}


def _assert_same(rebuilt_cd, mapping):
    for client_id in rebuilt_cd.client_ids:
        pairs = zip(rebuilt_cd.create_tf_dataset_for_client(client_id), mapping[client_id])
        for rebuilt, original in pairs:
            assert list(rebuilt) == list(original)
            for k in rebuilt:
                np.testing.assert_array_equal(rebuilt[k].numpy(), original[k].numpy())


def test_save_to_sql_client_data(tmp_path):
    mapping = _datasets()
    path = str(tmp_path / 'db')
    utils.save_to_sql_client_data(list(mapping), mapping.__getitem__, path)
    rebuilt = utils.load_and_parse_sql_client_data(path, mapping['foo'].element_spec)
    assert sorted(rebuilt.client_ids) == sorted(mapping)
    _assert_same(rebuilt, mapping)


def test_save_to_sql_client_data_with_split_names(tmp_path):
    mapping = _datasets()
    path = str(tmp_path / 'db')
    utils.save_to_sql_client_data(
        client_ids=list(mapping),
        dataset_fn=mapping.__getitem__,
        database_filepath=path,
        allow_overwrite=False,
        split_names_by_client_id={'foo': 'first', 'bar': 'second'},
    )
    rebuilt = utils.load_and_parse_sql_client_data(path, mapping['foo'].element_spec, 'first')
    assert rebuilt.client_ids == ['foo']
    _assert_same(rebuilt, mapping)


@pytest.mark.parametrize('split_names', [{}, {'foo': 'first'}], ids=['empty', 'missing'])
def test_save_to_sql_client_data_with_empty_or_missing_split_names(tmp_path, split_names):
    mapping = _datasets()
    with pytest.raises(ValueError):
        utils.save_to_sql_client_data(
            list(mapping),
            mapping.__getitem__,
            str(tmp_path / 'db'),
            allow_overwrite=False,
            split_names_by_client_id=split_names,
        )


def test_save_to_sql_client_overwrite(tmp_path):
    mapping = _datasets()
    path = str(tmp_path / 'db')
    utils.save_to_sql_client_data(list(mapping)[:1], mapping.__getitem__, path)
    with pytest.raises(FileExistsError):
        utils.save_to_sql_client_data(
            list(mapping), mapping.__getitem__, path, allow_overwrite=False
        )
    utils.save_to_sql_client_data(list(mapping), mapping.__getitem__, path, allow_overwrite=True)
    rebuilt = utils.load_and_parse_sql_client_data(path, mapping['foo'].element_spec)
    assert sorted(rebuilt.client_ids) == sorted(mapping)
    _assert_same(rebuilt, mapping)


def test_save_to_sql_client_data_raises_type_error(tmp_path):
    mapping = _datasets(collections.OrderedDict(i=[7.0, 8.0], f=[4, 5], s=['d', 'e']))
    with pytest.raises(utils.ElementSpecCompatibilityError):
        utils.save_to_sql_client_data(list(mapping), mapping.__getitem__, str(tmp_path / 'db'))


def test_load_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        utils.load_and_parse_sql_client_data(
            str(tmp_path / 'none'), {'i': tf.TensorSpec((), tf.int32)}
        )


def test_written_clients_read_on_the_workers(tmp_path, tff_stack):
    mapping = _datasets()
    path = str(tmp_path / 'db')
    utils.save_to_sql_client_data(list(mapping), mapping.__getitem__, path)
    cd = utils.load_and_parse_sql_client_data(path, mapping['foo'].element_spec)

    @tff.tf_computation(tff.SequenceType(cd.element_type_structure))
    def total(ds):
        return ds.reduce(np.int32(0), lambda acc, e: acc + e['i'])

    @tff.federated_computation(tff.type_at_clients(np.str_))
    def totals(ids):
        return tff.federated_map(total, tff.federated_map(cd.dataset_computation, ids))

    assert [int(t) for t in totals(['bar', 'foo'])] == [9, 6]
