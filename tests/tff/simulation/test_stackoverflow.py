"""Port of TFF's ``.../simulation/datasets/stackoverflow_test.py``.

The synthetic cases as TFF's (our synthetic posts differ). TFF's download
cases (skipped in TFF's CI) become tests of `load_data`, `load_word_counts`
and `load_tag_counts` on tiny files written here.
"""

import collections
import json

import pytest
import tensorflow as tf

from simharness.simulation.datasets import stackoverflow
from tests.tff.simulation.datasets_files import write_tff_sqlite

EXPECTED_ELEMENT_TYPE = collections.OrderedDict(
    creation_date=tf.TensorSpec(shape=[], dtype=tf.string),
    score=tf.TensorSpec(shape=[], dtype=tf.int64),
    tags=tf.TensorSpec(shape=[], dtype=tf.string),
    title=tf.TensorSpec(shape=[], dtype=tf.string),
    tokens=tf.TensorSpec(shape=[], dtype=tf.string),
    type=tf.TensorSpec(shape=[], dtype=tf.string),
)


def test_get_synthetic():
    client_data = stackoverflow.get_synthetic()
    synthetic = stackoverflow.create_synthetic_data_dictionary()
    assert sorted(client_data.client_ids) == sorted(synthetic)
    assert client_data.element_type_structure == EXPECTED_ELEMENT_TYPE
    assert (
        client_data.create_tf_dataset_for_client(next(iter(synthetic))).element_spec
        == EXPECTED_ELEMENT_TYPE
    )


@pytest.mark.parametrize(
    'fn',
    [stackoverflow.get_synthetic_word_counts, stackoverflow.get_synthetic_tag_counts],
    ids=['words', 'tags'],
)
def test_get_synthetic_counts(fn):
    counts = fn()
    assert isinstance(counts, collections.OrderedDict) and counts
    for k, v in counts.items():
        assert isinstance(k, str) and isinstance(v, int) and v > 0
    assert list(counts.values()) == sorted(counts.values(), reverse=True)


def test_load_word_and_tag_counts(tmp_path):
    (tmp_path / 'stackoverflow.word_count').write_text('. 342309\nthe 341937\nto 1\n')
    (tmp_path / 'stackoverflow.tag_count').write_text(json.dumps({'css': 3, 'html': 9}))
    words = stackoverflow.load_word_counts(cache_dir=str(tmp_path))
    assert len(words) == 3 and words['.'] == 342309 and words['the'] == 341937
    assert list(stackoverflow.load_word_counts(str(tmp_path), vocab_size=2)) == ['.', 'the']
    assert list(stackoverflow.load_tag_counts(str(tmp_path)).items()) == [('html', 9), ('css', 3)]
    with pytest.raises(ValueError, match='positive'):
        stackoverflow.load_word_counts(str(tmp_path), vocab_size=0)
    with pytest.raises(TypeError, match='None or int'):
        stackoverflow.load_word_counts(str(tmp_path), vocab_size='10')


def test_load_data(tmp_path):
    post = {
        'creation_date': b'2010-01-01 00:00:00 UTC',
        'score': 4,
        'tags': b'css',
        'title': b'a title',
        'tokens': b'some words .',
        'type': b'answer',
    }
    write_tff_sqlite(
        tmp_path / 'stackoverflow.sqlite',
        [
            ('train', 'u1', post),
            ('heldout', 'u2', post),
            ('test', 'u3', post),
            ('test', 'u4', post),
        ],
    )
    train, heldout, test = stackoverflow.load_data(cache_dir=str(tmp_path))
    assert (train.client_ids, heldout.client_ids, test.client_ids) == (['u1'], ['u2'], ['u3', 'u4'])
    for split in (train, heldout, test):
        assert split.element_type_structure == EXPECTED_ELEMENT_TYPE
    (x,) = list(train.create_tf_dataset_for_client('u1').as_numpy_iterator())
    assert x['tokens'] == b'some words .' and int(x['score']) == 4
