"""Example models for the learning tests (ours, after TFF's ``learning/models/model_examples.py``).

`LinearRegression` is TFF's example `VariableModel`: ``y = x a + b + c``
(``c`` non-trainable), loss ``0.5 * sum(residual^2) / n``, metrics ``loss``
(sum, count) and ``num_examples``. `keras_linear_model` is the Keras
equivalent, `linear_functional_model` the `FunctionalModel` one.
"""

from __future__ import annotations

import collections

import keras
import numpy as np
import tensorflow as tf

import simharness as tff


class LinearRegression(tff.learning.models.VariableModel):
    """TFF's example linear regression, written directly on variables."""

    def __init__(self, feature_dim: int = 2, has_unconnected: bool = False):
        self._feature_dim = feature_dim
        self._num_examples = tf.Variable(0, trainable=False)
        self._num_batches = tf.Variable(0, trainable=False)
        self._loss_sum = tf.Variable(0.0, trainable=False)
        self._a = tf.Variable([[0.0]] * feature_dim, trainable=True)
        self._b = tf.Variable(0.0, trainable=True)
        self._c = tf.Variable(0.0, trainable=False)
        self._input_spec = collections.OrderedDict(
            x=tf.TensorSpec([None, feature_dim], tf.float32), y=tf.TensorSpec([None, 1], tf.float32)
        )
        self.has_unconnected = has_unconnected
        if has_unconnected:
            self._unconnected = tf.Variable(0.0, trainable=True)

    @property
    def trainable_variables(self):
        if self.has_unconnected:
            return [self._a, self._b, self._unconnected]
        return [self._a, self._b]

    @property
    def non_trainable_variables(self):
        return [self._c]

    @property
    def local_variables(self):
        return [self._num_examples, self._num_batches, self._loss_sum]

    @property
    def input_spec(self):
        return self._input_spec

    def predict_on_batch(self, x, training=True):
        del training
        return tf.matmul(x, self._a) + self._b + self._c

    def forward_pass(self, batch_input, training=True):
        predictions = self.predict_on_batch(batch_input['x'], training)
        residuals = predictions - batch_input['y']
        num_examples = tf.gather(tf.shape(predictions), 0)
        total_loss = 0.5 * tf.reduce_sum(tf.pow(residuals, 2))
        self._loss_sum.assign_add(total_loss)
        self._num_examples.assign_add(num_examples)
        self._num_batches.assign_add(1)
        return tff.learning.models.BatchOutput(
            loss=total_loss / tf.cast(num_examples, tf.float32),
            predictions=predictions,
            num_examples=num_examples,
        )

    def report_local_unfinalized_metrics(self):
        return collections.OrderedDict(
            loss=[tf.identity(self._loss_sum), tf.cast(self._num_examples, tf.float32)],
            num_examples=tf.identity(self._num_examples),
        )

    def metric_finalizers(self):
        return collections.OrderedDict(loss=lambda x: x[0] / x[1], num_examples=lambda x: x)

    def reset_metrics(self):
        for var in self.local_variables:
            var.assign(tf.zeros_like(var))


def keras_linear_model(feature_dims: int = 2) -> keras.Model:
    """A Keras linear model ``[None, feature_dims] -> [None, 1]`` with zero weights."""
    return keras.Sequential(
        [keras.Input((feature_dims,)), keras.layers.Dense(1, kernel_initializer='zeros')]
    )


def linear_functional_model(feature_dims: int = 2) -> tff.learning.models.FunctionalModel:
    """TFF's docstring example: a linear regression as a `FunctionalModel`."""

    @tf.function
    def predict_on_batch(model_weights, x, training):
        del training
        (w, b), _ = model_weights
        return tf.matmul(x, w, transpose_b=True) + b

    def loss(output, label, sample_weight=None):
        del sample_weight
        return tf.math.reduce_mean(tf.math.pow(output - label, 2.0))

    return tff.learning.models.FunctionalModel(
        initial_weights=((np.zeros([1, feature_dims], np.float32), np.zeros([1], np.float32)), ()),
        predict_on_batch_fn=predict_on_batch,
        loss_fn=loss,
        input_spec=(
            tf.TensorSpec([None, feature_dims], tf.float32),
            tf.TensorSpec([None, 1], tf.float32),
        ),
    )
