"""Tiny SQLite files in TFF's data set format (``examples`` + ``client_metadata``), for tests."""

import sqlite3

import tensorflow as tf


def feature(value):
    """A `tf.train.Feature` of a float list, an int list or bytes."""
    if isinstance(value, bytes):
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if all(isinstance(v, int) for v in values):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=values))
    return tf.train.Feature(float_list=tf.train.FloatList(value=[float(v) for v in values]))


def write_tff_sqlite(path, rows):
    """rows: (split, client_id, {feature name: value}) in order."""
    with sqlite3.connect(str(path)) as con:
        con.execute(
            'CREATE TABLE examples (split_name TEXT NOT NULL, client_id TEXT NOT NULL, '
            'serialized_example_proto BLOB NOT NULL);'
        )
        con.execute(
            'CREATE TABLE client_metadata (client_id TEXT NOT NULL, split_name TEXT '
            'NOT NULL, num_examples INTEGER NOT NULL);'
        )
        counts = {}
        for split, client_id, features in rows:
            example = tf.train.Example(
                features=tf.train.Features(feature={k: feature(v) for k, v in features.items()})
            )
            con.execute(
                'INSERT INTO examples VALUES (?, ?, ?);',
                (split, client_id, example.SerializeToString()),
            )
            counts[(split, client_id)] = counts.get((split, client_id), 0) + 1
        for (split, client_id), n in counts.items():
            con.execute('INSERT INTO client_metadata VALUES (?, ?, ?);', (client_id, split, n))
