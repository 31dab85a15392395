"""Small synthetic stand-ins for the downloads of TFF's tutorials, in the same element structure.

``emnist_like``: a ``TestClientData`` whose elements are EMNIST's
(``OrderedDict(label=int32[], pixels=float32[28, 28])``), the label readable
from the pixels so that training makes progress. ``shakespeare_like``:
Shakespeare's (``OrderedDict(snippets=string[])``) over the text tutorial's
vocabulary. ``mnist_like``: ``tf.keras.datasets.mnist.load_data()``'s arrays
(uint8 images, uint8 labels). ``char_model``: a small untrained character
model in place of the text tutorial's downloaded one. ``movielens_like``:
MovieLens 1M's ``.dat`` files, ratings of a low-rank matrix.
"""

from __future__ import annotations

import collections

import numpy as np

import simharness as tff

#: The text generation tutorial's vocabulary.
SHAKESPEARE_VOCAB = list('dhlptx@DHLPTX $(,048cgkoswCGKOSW[_#\'/37;?bfjnrvzBFJNRVZ"&*.26:\naeimquyAEIMQUY]!%)-159\r')


def emnist_like(num_clients: int = 3, examples: int = 12, seed: int = 0):
    """``num_clients`` clients of ``examples`` EMNIST-shaped examples each (ids ``f0000``, ...)."""
    rng = np.random.default_rng(seed)
    clients = collections.OrderedDict()
    for k in range(num_clients):
        labels = rng.integers(0, 10, size=examples).astype(np.int32)
        pixels = (rng.random((examples, 28, 28)) * 0.1
                  + labels[:, None, None] / 10.0).astype(np.float32)
        clients[f'f{k:04d}'] = collections.OrderedDict(label=labels, pixels=pixels)
    return tff.simulation.datasets.TestClientData(clients)


def shakespeare_like(names, seed: int = 0, snippets: int = 3, length: int = 200):
    """One client per name, ``snippets`` random strings over `SHAKESPEARE_VOCAB` each."""
    rng = np.random.default_rng(seed)
    return tff.simulation.datasets.TestClientData({
        name: collections.OrderedDict(snippets=np.array(
            [''.join(rng.choice(SHAKESPEARE_VOCAB, size=length)) for _ in range(snippets)],
            dtype=object))
        for name in names})


def mnist_like(n: int, seed: int = 0):
    """``(images uint8[n, 28, 28], labels uint8[n])``, every digit ``n // 10`` times."""
    rng = np.random.default_rng(seed)
    labels = np.tile(np.arange(10, dtype=np.uint8), n // 10)
    images = (rng.random((labels.size, 28, 28)) * 20 + labels[:, None, None] * 8).astype(np.uint8)
    return images, labels


def char_model(batch_size: int, vocab_size: int = len(SHAKESPEARE_VOCAB)):
    """Embedding -> GRU -> Dense logits, as the text tutorial's model but tiny and untrained."""
    import tensorflow as tf
    return tf.keras.Sequential([
        tf.keras.Input(shape=(None,), batch_size=batch_size, dtype=tf.int64),
        tf.keras.layers.Embedding(vocab_size, 8),
        tf.keras.layers.GRU(16, return_sequences=True),
        tf.keras.layers.Dense(vocab_size)])


#: MovieLens' genre names (``movies.dat``'s ``Genres`` field is ``|``-separated ones of these).
MOVIELENS_GENRES = ['Action', 'Adventure', 'Animation', "Children's", 'Comedy', 'Crime',
                    'Documentary', 'Drama', 'Fantasy', 'Film-Noir', 'Horror', 'Musical',
                    'Mystery', 'Romance', 'Sci-Fi', 'Thriller', 'War', 'Western']


def movielens_like(directory, num_users: int = 40, num_movies: int = 40,
                   ratings_per_user=(30, 41), rank: int = 2, seed: int = 0):
    """Writes ``ml-1m/{ratings,movies,users}.dat`` under ``directory``, in MovieLens 1M's format.

    ``ratings.dat``: ``UserID::MovieID::Rating::Timestamp`` with 1-based,
    non-contiguous ids (as MovieLens': the tutorial remaps them), each user
    rating ``ratings_per_user[0]`` to ``ratings_per_user[1] - 1`` movies,
    integer ratings 1-5 rounded from a rank-``rank`` user x movie matrix, so
    that matrix factorization can learn them. ``movies.dat`` also lists one
    movie no one rated (the tutorial drops it). Returns the ratings matrix
    (users x movies, before rounding) in the remapped ids' order.
    """
    import os
    rng = np.random.default_rng(seed)
    users = rng.normal(size=(num_users, rank))
    movies = rng.normal(size=(num_movies, rank))
    full = 3.0 + users @ movies.T / np.sqrt(rank)
    user_ids = 1 + 2 * np.arange(num_users)  # old ids 1, 3, 5, ...: remapped to 0, 1, 2, ...
    movie_ids = 1 + 3 * np.arange(num_movies)
    path = os.path.join(str(directory), 'ml-1m')
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, 'ratings.dat'), 'w') as f:
        for u in range(num_users):
            count = rng.integers(*ratings_per_user)
            for m in sorted(rng.choice(num_movies, size=count, replace=False)):
                rating = int(np.clip(np.rint(full[u, m]), 1, 5))
                f.write(f'{user_ids[u]}::{movie_ids[m]}::{rating}::{978300000 + u * 100 + m}\n')
    with open(os.path.join(path, 'movies.dat'), 'w', encoding='ISO-8859-1') as f:
        for m in range(num_movies):
            genres = '|'.join(rng.choice(MOVIELENS_GENRES, size=1 + m % 3, replace=False))
            f.write(f'{movie_ids[m]}::Movie {m} ({1950 + m % 50})::{genres}\n')
        f.write(f'{movie_ids[-1] + 1}::Unrated (2000)::Drama\n')
    with open(os.path.join(path, 'users.dat'), 'w') as f:
        for u in range(num_users):
            f.write(f'{user_ids[u]}::{"MF"[u % 2]}::25::{u % 21}::{10000 + u}\n')
    return full
