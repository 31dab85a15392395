"""Federated Stack Overflow (TFF's `tff.simulation.datasets.stackoverflow`), from local files.

Elements: ``OrderedDict(creation_date, score (int64), tags, title, tokens,
type)``, all but ``score`` ``tf.string`` scalars.
"""

from __future__ import annotations

import collections
import json
from typing import Any, Optional

import numpy as np
import tensorflow as tf

from simharness.data.client_base import ClientData
from simharness.data.client_data import TestClientData
from simharness.errors import SimharnessTypeError, SimharnessValueError
from simharness.data import tff_files as download
from simharness.simulation.datasets import sql_client_data

__all__ = [
    'create_synthetic_data_dictionary',
    'get_synthetic',
    'get_synthetic_tag_counts',
    'get_synthetic_word_counts',
    'load_data',
    'load_tag_counts',
    'load_word_counts',
]

FILENAME = 'stackoverflow.sqlite'
_STRING_FIELDS = ('creation_date', 'tags', 'title', 'tokens', 'type')


def _add_proto_parsing(dataset: Any) -> Any:
    def parse_proto(tensor_proto: Any) -> Any:
        spec = collections.OrderedDict(
            creation_date=tf.io.FixedLenFeature(dtype=tf.string, shape=()),
            score=tf.io.FixedLenFeature(dtype=tf.int64, shape=()),
            tags=tf.io.FixedLenFeature(dtype=tf.string, shape=()),
            title=tf.io.FixedLenFeature(dtype=tf.string, shape=()),
            tokens=tf.io.FixedLenFeature(dtype=tf.string, shape=()),
            type=tf.io.FixedLenFeature(dtype=tf.string, shape=()),
        )
        parsed = tf.io.parse_example(tensor_proto, spec)
        return collections.OrderedDict((k, parsed[k]) for k in spec)

    return dataset.map(parse_proto, num_parallel_calls=tf.data.AUTOTUNE)


def load_data(cache_dir: Optional[str] = None) -> tuple[ClientData, ClientData, ClientData]:
    """The (train, held_out, test) Stack Overflow `ClientData` from ``stackoverflow.sqlite``.

    Raises:
        download.DatasetFileNotFoundError: the file is not there (nothing is downloaded).
    """
    path = download.get_local_file(FILENAME, cache_dir)
    return tuple(
        sql_client_data.SqlClientData(path, split).preprocess(_add_proto_parsing)
        for split in ('train', 'heldout', 'test')
    )  # type: ignore[return-value]


def load_word_counts(
    cache_dir: Optional[str] = None, vocab_size: Optional[int] = None
) -> collections.OrderedDict:
    """Word -> count from ``stackoverflow.word_count`` (``word count`` per line, most frequent first).

    Raises:
        SimharnessTypeError: `vocab_size` neither None nor an int.
        SimharnessValueError: `vocab_size` <= 0.
        download.DatasetFileNotFoundError: the file is not there.
    """
    if vocab_size is not None:
        if not isinstance(vocab_size, int) or isinstance(vocab_size, bool):
            raise SimharnessTypeError(
                f'vocab_size should be None or int, got {type(vocab_size)}.',
                expected=int,
                actual=type(vocab_size),
            )
        if vocab_size <= 0:
            raise SimharnessValueError(f'vocab_size must be positive, got {vocab_size}.')
    path = download.get_local_file('stackoverflow.word_count', cache_dir)
    counts: collections.OrderedDict = collections.OrderedDict()
    with open(path, encoding='utf-8') as f:
        for line in f:
            word, count = line.split()
            counts[word] = int(count)
            if vocab_size is not None and len(counts) >= vocab_size:
                break
    return counts


def load_tag_counts(cache_dir: Optional[str] = None) -> collections.OrderedDict:
    """Tag -> count from ``stackoverflow.tag_count`` (JSON), most frequent first."""
    path = download.get_local_file('stackoverflow.tag_count', cache_dir)
    with open(path, encoding='utf-8') as f:
        counts = json.load(f)
    return collections.OrderedDict(sorted(counts.items(), key=lambda kv: kv[1], reverse=True))


_SYNTHETIC = {
    'synthetic_1': [
        (
            '2011-03-02 10:11:12 UTC',
            12,
            'python|numpy',
            'how to stack arrays in numpy',
            'use np.stack to join arrays along a new axis .',
            'answer',
        ),
        (
            '2012-05-06 07:08:09 UTC',
            3,
            'python|numpy',
            'how to stack arrays in numpy',
            'how do i join a list of arrays ?',
            'question',
        ),
        (
            '2012-05-06 07:18:09 UTC',
            5,
            'css|html',
            'center a div',
            'a div is a block element .',
            'answer',
        ),
    ],
    'synthetic_2': [
        (
            '2014-01-01 00:00:01 UTC',
            7,
            'sql|sqlite',
            'count rows in a table',
            'select count ( * ) from the table .',
            'answer',
        ),
        (
            '2014-01-02 00:00:02 UTC',
            1,
            'sql|sqlite',
            'count rows in a table',
            'is there a faster way ?',
            'question',
        ),
    ],
    'synthetic_3': [
        (
            '2016-09-10 11:12:13 UTC',
            20,
            'git',
            'undo the last commit',
            'git reset keeps the changes in the work tree .',
            'answer',
        ),
        (
            '2016-09-10 11:22:13 UTC',
            2,
            'git|github',
            'undo the last commit',
            'this is a question about git .',
            'question',
        ),
        (
            '2016-09-11 11:22:13 UTC',
            4,
            'git',
            'undo a pushed commit',
            'git revert makes a new commit .',
            'answer',
        ),
    ],
}


def _synthetic_client(rows: list) -> collections.OrderedDict:
    columns = list(zip(*rows))
    out: collections.OrderedDict = collections.OrderedDict()
    for name, column in zip(('creation_date', 'score', 'tags', 'title', 'tokens', 'type'), columns):
        out[name] = (
            np.asarray(column, np.int64) if name == 'score' else [c.encode() for c in column]
        )
    return out


def create_synthetic_data_dictionary() -> dict:
    """The tensor slices of `get_synthetic`: client id -> OrderedDict of columns."""
    return {cid: _synthetic_client(rows) for cid, rows in _SYNTHETIC.items()}


def get_synthetic() -> ClientData:
    """Three clients with 2-3 posts each, in `load_data`'s element structure."""
    return TestClientData(create_synthetic_data_dictionary())


def get_synthetic_word_counts() -> collections.OrderedDict:
    """Word counts of the tokens of `get_synthetic`, most frequent first (ties by first use)."""
    counts: collections.Counter = collections.Counter()
    order: dict[str, int] = {}
    for rows in _SYNTHETIC.values():
        for row in rows:
            for w in row[4].split():
                counts[w] += 1
                order.setdefault(w, len(order))
    return collections.OrderedDict(sorted(counts.items(), key=lambda kv: (-kv[1], order[kv[0]])))


def get_synthetic_tag_counts() -> collections.OrderedDict:
    """Tag counts of `get_synthetic`, most frequent first (ties by first use)."""
    counts: collections.Counter = collections.Counter()
    order: dict[str, int] = {}
    for rows in _SYNTHETIC.values():
        for row in rows:
            for t in row[2].split('|'):
                counts[t] += 1
                order.setdefault(t, len(order))
    return collections.OrderedDict(sorted(counts.items(), key=lambda kv: (-kv[1], order[kv[0]])))
