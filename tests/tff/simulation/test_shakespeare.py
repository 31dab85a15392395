"""Port of TFF's ``.../simulation/datasets/shakespeare_test.py``.

``test_get_synthetic`` as TFF's (our synthetic lines differ from TFF's).
``test_load_from_gcs`` (skipped in TFF's CI: it downloads) becomes a test of
`load_data` on a tiny ``shakespeare.sqlite`` written here.
"""

import collections

import tensorflow as tf

from simharness.simulation.datasets import shakespeare
from tests.tff.simulation.datasets_files import write_tff_sqlite

EXPECTED_ELEMENT_TYPE = collections.OrderedDict(snippets=tf.TensorSpec(shape=[], dtype=tf.string))


def test_get_synthetic():
    client_data = shakespeare.get_synthetic()
    assert sorted(client_data.client_ids) == sorted(shakespeare._SYNTHETIC_SHAKESPEARE_DATA)
    assert client_data.element_type_structure == EXPECTED_ELEMENT_TYPE
    dataset = client_data.create_tf_dataset_for_client(
        next(iter(shakespeare._SYNTHETIC_SHAKESPEARE_DATA))
    )
    assert dataset.element_spec == EXPECTED_ELEMENT_TYPE


def test_load_data(tmp_path):
    write_tff_sqlite(
        tmp_path / 'shakespeare.sqlite',
        [
            ('train', 'KING_LEAR_KING', {'snippets': b'Nothing will come of nothing.'}),
            ('train', 'KING_LEAR_KING', {'snippets': b'Speak again.'}),
            ('test', 'KING_LEAR_KING', {'snippets': b'Never, never.'}),
        ],
    )
    train, test = shakespeare.load_data(cache_dir=str(tmp_path))
    assert train.element_type_structure == EXPECTED_ELEMENT_TYPE
    assert test.element_type_structure == EXPECTED_ELEMENT_TYPE
    got = [
        x['snippets']
        for x in train.create_tf_dataset_for_client('KING_LEAR_KING').as_numpy_iterator()
    ]
    assert got == [b'Nothing will come of nothing.', b'Speak again.']
    assert len(list(test.create_tf_dataset_for_client('KING_LEAR_KING'))) == 1
