"""Federated Shakespeare (TFF's `tff.simulation.datasets.shakespeare`), from a local file.

Elements: ``OrderedDict(snippets=tf.string scalar)``; a client is a speaking
role of a play.
"""

from __future__ import annotations

import collections
from typing import Any, Optional

import tensorflow as tf

from simharness.data.client_base import ClientData
from simharness.data.client_data import TestClientData
from simharness.data import tff_files as download
from simharness.simulation.datasets import sql_client_data

__all__ = ['get_synthetic', 'load_data']

FILENAME = 'shakespeare.sqlite'


def _add_parsing(dataset: Any) -> Any:
    def parse(serialized: Any) -> Any:
        fields = tf.io.parse_example(
            serialized, {'snippets': tf.io.FixedLenFeature(shape=(), dtype=tf.string)}
        )
        return collections.OrderedDict(snippets=fields['snippets'])

    return dataset.map(parse, num_parallel_calls=tf.data.AUTOTUNE)


def load_data(cache_dir: Optional[str] = None) -> tuple[ClientData, ClientData]:
    """The (train, test) Shakespeare `ClientData` from ``shakespeare.sqlite`` in `cache_dir`.

    Raises:
        download.DatasetFileNotFoundError: the file is not there (nothing is downloaded).
    """
    path = download.get_local_file(FILENAME, cache_dir)
    train = sql_client_data.SqlClientData(path, split_name='train').preprocess(_add_parsing)
    test = sql_client_data.SqlClientData(path, split_name='test').preprocess(_add_parsing)
    return train, test


# A few lines of some roles (our own choice of lines; TFF's synthetic set has other roles).
_SYNTHETIC_SHAKESPEARE_DATA = {
    'THE_TRAGEDY_OF_KING_LEAR_KING': collections.OrderedDict(
        snippets=[
            b'Nothing will come of nothing: speak again.',
            b'Blow, winds, and crack your cheeks! rage! blow!',
            b"I am a man more sinn'd against than sinning.",
            b"Come, let's away to prison.",
        ]
    ),
    'THE_TRAGEDY_OF_MACBETH_MACBETH': collections.OrderedDict(
        snippets=[
            b'So foul and fair a day I have not seen.',
            b'Is this a dagger which I see before me?',
            b'To-morrow, and to-morrow, and to-morrow,',
            b'Lay on, Macduff.',
            b'I have almost forgot the taste of fears.',
        ]
    ),
    'MUCH_ADO_ABOUT_NOTHING_BEATRICE': collections.OrderedDict(
        snippets=[
            b'I had rather hear my dog bark at a crow than a man swear he loves me.',
        ]
    ),
    # The two roles TFF's text generation tutorial reads.
    'ALL_S_WELL_THAT_ENDS_WELL_CELIA': collections.OrderedDict(
        snippets=[
            b'Love all, trust a few, do wrong to none.',
            b'Our remedies oft in ourselves do lie.',
            b"It is like a barber's chair that fits all buttocks.",
        ]
    ),
    'MUCH_ADO_ABOUT_NOTHING_OTHELLO': collections.OrderedDict(
        snippets=[
            b'Sigh no more, ladies, sigh no more.',
            b'Men were deceivers ever.',
            b'Speak low, if you speak love.',
        ]
    ),
}


def get_synthetic() -> ClientData:
    """A few roles with a few lines each, in `load_data`'s element structure (including the
    two roles TFF's text generation tutorial reads and King Lear's king)."""
    return TestClientData(_SYNTHETIC_SHAKESPEARE_DATA)
