"""Small synthetic stand-ins for the downloads of TFF's tutorials, in the same element structure.

``emnist_like``: a ``TestClientData`` whose elements are EMNIST's
(``OrderedDict(label=int32[], pixels=float32[28, 28])``), the label readable
from the pixels so that training makes progress. ``shakespeare_like``:
Shakespeare's (``OrderedDict(snippets=string[])``) over the text tutorial's
vocabulary. ``mnist_like``: ``tf.keras.datasets.mnist.load_data()``'s arrays
(uint8 images, uint8 labels). ``char_model``: a small untrained character
model in place of the text tutorial's downloaded one.
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
