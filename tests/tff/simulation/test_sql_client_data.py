"""Port of TFF's ``.../simulation/datasets/sql_client_data_test.py``.

No case left out; TFF's subTests are parameters. The type signature is
compared by equivalence with ``(str -> str*)``: our types print TF's string
type as ``string``. Added: the dataset computation mapped over client ids at
CLIENTS (on the process stack the workers query the SQLite file).
"""

import functools
import sqlite3

import numpy as np
import pytest
import tensorflow as tf

import simharness as tff
from simharness.simulation.datasets import sql_client_data

SPLITS = {
    None: {'test_a': 1, 'test_b': 2, 'test_c': 3},
    'train': {'test_a': 1, 'test_b': 1, 'test_c': 2},
    'test': {'test_b': 1, 'test_c': 1},
}  # no test examples for client test_a
TEST_C = {None: 3, 'train': 2, 'test': 1}
SPLIT_IDS = ['no_split', 'train', 'test']
STR_TO_STR_SEQ = tff.FunctionType(tff.TensorType(np.str_), tff.SequenceType(np.str_))


def make_test_example(client_id: str, e: int) -> bytes:
    return tf.train.Example(
        features=tf.train.Features(
            feature={
                'client_id': tf.train.Feature(
                    bytes_list=tf.train.BytesList(value=[client_id.encode('utf-8')])
                ),
                'example_num': tf.train.Feature(int64_list=tf.train.Int64List(value=[e])),
            }
        )
    ).SerializeToString()


def write_test_database(path: str) -> None:
    with sqlite3.connect(path) as con:
        con.execute(
            'CREATE TABLE examples (split_name TEXT NOT NULL, client_id TEXT NOT NULL, '
            'serialized_example_proto BLOB NOT NULL);'
        )
        con.execute('CREATE INDEX idx_client_id_split ON examples (split_name, client_id);')
        con.execute(
            'CREATE TABLE client_metadata (client_id TEXT NOT NULL, split_name TEXT '
            'NOT NULL, num_examples INTEGER NOT NULL);'
        )
        for i, client_id in enumerate(['test_a', 'test_b', 'test_c']):
            counts = {'train': 0, 'test': 0}
            for e in range(i + 1):
                split = 'train' if e % 2 == 0 else 'test'
                counts[split] += 1
                con.execute(
                    'INSERT INTO examples (split_name, client_id, '
                    'serialized_example_proto) VALUES (?, ?, ?);',
                    (split, client_id, make_test_example(client_id, e)),
                )
            for split, count in counts.items():
                if count:
                    con.execute(
                        'INSERT INTO client_metadata (client_id, split_name, '
                        'num_examples) VALUES (?, ?, ?);',
                        (client_id, split, count),
                    )


@pytest.fixture(scope='module')
def db_path(tmp_path_factory):
    path = str(tmp_path_factory.mktemp('sql') / 'test.sqlite')
    write_test_database(path)
    return path


def count(dataset):
    return functools.reduce(lambda s, _: s + 1, dataset, 0)


PREPROCESS = {'plain': None, 'identity': lambda x: x, 'take_one': lambda x: x.take(1)}


def make(db_path, split, preprocess):
    client_data = sql_client_data.SqlClientData(db_path, split_name=split)
    fn = PREPROCESS[preprocess]
    return client_data if fn is None else client_data.preprocess(fn)


def test_client_missing(db_path):
    client_data = sql_client_data.SqlClientData(db_path)
    with pytest.raises(ValueError, match='not a client in this ClientData'):
        client_data.create_tf_dataset_for_client('missing_client_id')


@pytest.mark.parametrize('preprocess', list(PREPROCESS))
@pytest.mark.parametrize('split', list(SPLITS), ids=SPLIT_IDS)
def test_create_dataset_for_client(db_path, split, preprocess):
    client_data = make(db_path, split, preprocess)
    assert client_data.client_ids == list(SPLITS[split])
    assert client_data.element_type_structure == tf.TensorSpec(shape=(), dtype=tf.string)
    for client_id, expected in SPLITS[split].items():
        want = 1 if preprocess == 'take_one' else expected
        assert count(client_data.create_tf_dataset_for_client(client_id)) == want, client_id


@pytest.mark.parametrize('preprocess', list(PREPROCESS))
@pytest.mark.parametrize('split', list(SPLITS), ids=SPLIT_IDS)
def test_create_dataset_from_all_clients(db_path, split, preprocess):
    client_data = make(db_path, split, preprocess)
    want = len(client_data.client_ids) if preprocess == 'take_one' else sum(SPLITS[split].values())
    assert count(client_data.create_tf_dataset_from_all_clients()) == want


@pytest.mark.parametrize('preprocess', list(PREPROCESS))
@pytest.mark.parametrize('split', list(SPLITS), ids=SPLIT_IDS)
def test_dataset_computation(db_path, split, preprocess, tff_stack):
    client_data = make(db_path, split, preprocess)
    assert client_data.dataset_computation.type_signature.is_equivalent_to(STR_TO_STR_SEQ)
    want = 1 if preprocess == 'take_one' else TEST_C[split]
    assert count(client_data.dataset_computation('test_c')) == want


@pytest.mark.parametrize('split', list(SPLITS), ids=SPLIT_IDS)
def test_preprocess_with_identity_gives_same_structure(db_path, split):
    client_data = sql_client_data.SqlClientData(db_path, split_name=split)
    assert (
        client_data.preprocess(lambda x: x).element_type_structure
        == client_data.element_type_structure
    )


def test_queried_where_each_client_runs(db_path, tff_stack):
    client_data = sql_client_data.SqlClientData(db_path, split_name='train')

    @tff.tf_computation(tff.SequenceType(np.str_))
    def num_examples(ds):
        return ds.reduce(np.int32(0), lambda n, _: n + 1)

    @tff.federated_computation(tff.type_at_clients(np.str_))
    def counts(ids):
        return tff.federated_map(
            num_examples, tff.federated_map(client_data.dataset_computation, ids)
        )

    assert [int(c) for c in counts(['test_c', 'test_a', 'test_b'])] == [2, 1, 1]


def test_missing_tables_raise(tmp_path):
    path = str(tmp_path / 'empty.sqlite')
    sqlite3.connect(path).close()
    with pytest.raises(sql_client_data.DatabaseFormatError, match='required'):
        sql_client_data.SqlClientData(path)


def test_rows_are_read_from_the_file_when_iterated(tmp_path):
    """Nothing but the ids is read at load: a client's dataset queries the file when
    iterated, and the all-clients dataset one client at a time (rows added to the file
    after load are read; no copy of the examples is kept)."""
    path = str(tmp_path / 'many.sqlite')
    ids = [f'c{i:04d}' for i in range(3400)]
    with sqlite3.connect(path) as con:
        con.execute(
            'CREATE TABLE examples (split_name TEXT NOT NULL, client_id TEXT NOT NULL, '
            'serialized_example_proto BLOB NOT NULL);'
        )
        con.execute('CREATE INDEX idx_client_id_split ON examples (split_name, client_id);')
        con.execute(
            'CREATE TABLE client_metadata (client_id TEXT NOT NULL, split_name TEXT '
            'NOT NULL, num_examples INTEGER NOT NULL);'
        )
        con.executemany(
            'INSERT INTO examples VALUES (?, ?, ?);',
            [('train', c, make_test_example(c, 0)) for c in ids],
        )
        con.executemany(
            'INSERT INTO client_metadata VALUES (?, ?, ?);', [(c, 'train', 1) for c in ids]
        )
    client_data = sql_client_data.SqlClientData(path, split_name='train')
    assert client_data.client_ids == ids
    client_data.check_client_id('c3399')
    with pytest.raises(ValueError, match='not a client'):
        client_data.check_client_id('c3400')
    dataset = client_data.create_tf_dataset_for_client('c1234')
    everything = client_data.create_tf_dataset_from_all_clients(seed=0)
    with sqlite3.connect(path) as con:
        con.execute(
            'INSERT INTO examples VALUES (?, ?, ?);',
            ('train', 'c1234', make_test_example('c1234', 1)),
        )
    parsed = [tf.train.Example.FromString(x.numpy()) for x in dataset]
    assert [e.features.feature['example_num'].int64_list.value[0] for e in parsed] == [0, 1]
    assert count(everything) == 3401
