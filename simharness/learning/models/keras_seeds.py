"""Keras 3's random seeds in a federated model: not weights, and fresh at every step.

A Keras 3 layer that draws random numbers (``Dropout``, ``GaussianNoise``, an RNN's
``dropout``, the random augmentation layers) keeps its seed in a ``SeedGenerator``, whose
state is an ``int64[2]`` variable among the model's ``non_trainable_variables`` but not among
its weights (``non_trainable_weights``: "excludes metric state and random seeds"). TFF's
models are Keras 2 models, which have no such variable. Were it a weight, a
``tff.learning`` process's state would carry one ``int64[2]`` per random layer (its type
differing from TFF's), and, since a server keeps its non-trainable weights from round to
round, every client of every round would start from the same seed: the same dropout masks
in every round and on every client.

So the seed states are kept out of the model's weights (`KerasSeeds.weights_of` is the
weights' list), and when the model runs in training mode each seed state is set, before
the step, to ``[s0 XOR h, s1]``: ``[s0, s1]`` the state the layer was made with (from its
``seed`` argument, or Keras' default seed: ``keras.utils.set_random_seed`` makes it
reproducible) and ``h`` a hash of the step's inputs and of a sample of the trainable
weights (at most `SAMPLES` elements of each, evenly spaced). The masks thus differ from
step to step, client to client (their data differ) and round to round (the weights
differ), and depend on nothing else: the same bits on every stack and layout, and in an
XLA-compiled client update (the hash is exact integer arithmetic modulo the prime
``2**31 - 1``, whatever the order of the sum). Clients with the same data in the same
round draw the same masks. In evaluation (``training=False``) the layers draw nothing.
"""

from __future__ import annotations

from typing import Optional, Sequence

import keras
import numpy as np
import tensorflow as tf

from simharness.learning._typing import TensorStructure

__all__ = ['KerasSeeds', 'SAMPLES', 'step_hash']

#: The most elements of each trainable weight that enter a step's hash.
SAMPLES = 64

_P = 2**31 - 1  # a prime; every product of two residues fits in an int64
_A, _B, _C = 1103515245, 12345, 69069


def _words(x: tf.Tensor) -> tf.Tensor:
    """The bits of `x` as int64 words (one per 1-4 bytes; two per 8-byte element)."""
    x = tf.reshape(x, [-1])
    if x.dtype == tf.string:
        return tf.strings.to_hash_bucket_fast(x, _P)
    if x.dtype == tf.bool:
        return tf.cast(x, tf.int64)
    size = x.dtype.size
    if size >= 4:
        x = x if x.dtype == tf.int32 else tf.reshape(tf.bitcast(x, tf.int32), [-1])
    elif size == 2:
        x = x if x.dtype == tf.int16 else tf.bitcast(x, tf.int16)
    elif x.dtype != tf.int8:
        x = tf.bitcast(x, tf.int8)
    return tf.cast(x, tf.int64)


def _leaf_hash(x: tf.Tensor) -> tf.Tensor:
    """``sum_i w_i * m_i mod P`` over the words ``w_i`` of `x` (``m_i`` fixed by position):
    exact in int64, so its value does not depend on how the sum is ordered."""
    w = tf.math.floormod(_words(x), _P)
    n = tf.size(w, out_type=tf.int64)
    m = tf.math.floormod(tf.range(n, dtype=tf.int64) * _A + _B, _P)
    return tf.math.floormod(tf.reduce_sum(tf.math.floormod(w * m, _P)), _P)


def _sample(w: tf.Tensor) -> tf.Tensor:
    flat = tf.reshape(w, [-1])
    n = w.shape.num_elements()
    if n is None or n <= SAMPLES:
        return flat
    return flat[:: n // SAMPLES][:SAMPLES]


def step_hash(weights: Sequence[tf.Tensor], inputs: TensorStructure) -> tf.Tensor:
    """An int64 scalar in ``[0, 2**31 - 1)``: a hash of `inputs` (every dense tensor) and of
    a sample of `weights` (`SAMPLES` evenly spaced elements of each)."""
    h = tf.constant(0, tf.int64)
    leaves = [_sample(tf.convert_to_tensor(w)) for w in weights]
    leaves += [x for x in tf.nest.flatten(inputs) if isinstance(x, tf.Tensor)]
    for leaf in leaves:
        h = tf.math.floormod(h * _C + _leaf_hash(leaf) + 1, _P)
    return h


def _initial_state(state: keras.Variable) -> np.ndarray:
    """The value a seed state was made with (eagerly, or its initializer's constant in a
    graph); ``[0, 0]`` if it cannot be read without running the graph."""
    inner = getattr(state, 'value', state)
    if tf.executing_eagerly():
        return np.asarray(inner.numpy())
    value = tf.get_static_value(getattr(inner, 'initial_value', None))
    if value is None:
        return np.zeros([2], state.dtype)
    return np.asarray(value)


def _split(keras_model: keras.Model, seeds: bool) -> list:
    """Of `keras_model`'s non-trainable variables (in their order), the seed states (`seeds`)
    or the weights (Keras' ``non_trainable_weights``)."""
    weights = {id(v) for v in keras_model.non_trainable_weights}
    return [v for v in keras_model.non_trainable_variables if (id(v) in weights) != seeds]


class KerasSeeds:
    """The seed states of one Keras model and the values they were made with."""

    def __init__(self, keras_model: keras.Model):
        self._keras_model = keras_model
        self._states: Optional[list[keras.Variable]] = None
        self._initial: list[np.ndarray] = []

    @staticmethod
    def weights_of(keras_model: keras.Model) -> list:
        """The non-trainable weights of `keras_model`: its non-trainable variables but the seed
        states (in their order among the variables)."""
        return _split(keras_model, seeds=False)

    @property
    def states(self) -> list[keras.Variable]:
        """The model's seed states (found when first asked: a model builds its layers late)."""
        if self._states is None:
            self._states = _split(self._keras_model, seeds=True)
            self._initial = [_initial_state(s) for s in self._states]
        return self._states

    def values(self, weights: Sequence[tf.Tensor], inputs: TensorStructure) -> list[tf.Tensor]:
        """Each seed state's value for a training step on `inputs` with `weights`."""
        states = self.states
        if not states:
            return []
        h = step_hash(weights, inputs)
        return [
            tf.cast(
                tf.stack([tf.bitwise.bitwise_xor(tf.constant(int(s[0]), tf.int64), h), s[1]]),
                v.dtype,
            )
            for v, s in zip(states, self._initial)
        ]

    def assign(self, weights: Sequence[tf.Tensor], inputs: TensorStructure, training: bool) -> None:
        """Sets the seed states for a step on `inputs` with `weights` when `training` (the model
        runs on its variables); in evaluation the layers draw nothing and nothing is set."""
        if training is False:
            return
        for state, value in zip(self.states, self.values(weights, inputs)):
            state.assign(value)

    def merge(
        self,
        non_trainable: Sequence[tf.Tensor],
        weights: Sequence[tf.Tensor],
        inputs: TensorStructure,
        training: object,
    ) -> list[tf.Tensor]:
        """The values of all the model's non-trainable variables, in their order, for a
        ``stateless_call``: `non_trainable` (the weights') with the seed states between them
        (set for a step on `inputs` with `weights` when `training`, else as made)."""
        states = self.states
        if not states:
            return list(non_trainable)
        seeds = (
            self.values(weights, inputs)
            if training is not False
            else [tf.constant(s, v.dtype) for v, s in zip(states, self._initial)]
        )
        by_id = {id(v): t for v, t in zip(states, seeds)}
        given = iter(non_trainable)
        return [
            by_id[id(v)] if id(v) in by_id else next(given)
            for v in self._keras_model.non_trainable_variables
        ]

    def weights_part(self, values: Sequence[tf.Tensor]) -> list[tf.Tensor]:
        """Of values of all the non-trainable variables (``stateless_call``'s), the weights'."""
        states = {id(v) for v in self.states}
        return [
            t
            for v, t in zip(self._keras_model.non_trainable_variables, values)
            if id(v) not in states
        ]
