"""The Keras classes simharness takes: Keras 3's (``keras``, TensorFlow 2.16+'s ``tf.keras``)
and, once a program has imported it, ``tf_keras``'s (Keras 2: TFF 0.87's ``tf.keras``, and
TensorFlow's under ``TF_USE_LEGACY_KERAS=1``).

A TFF program written for TensorFlow 2.14 that keeps Keras 2 (``import tf_keras``, or the
environment variable) builds its models, losses and metrics with ``tf_keras``; they run as
TFF ran them (its metrics finalized by TFF's recipe, its model through the stateful client
update). ``tf_keras`` is never imported here: a model of it exists only once the program
has imported it."""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Tuple, Type, cast

import keras

__all__ = ['is_tf_keras', 'losses', 'metrics', 'models', 'modules']


def modules() -> Tuple[ModuleType, ...]:
    """``keras``, and ``tf_keras`` when the program has imported it."""
    legacy = sys.modules.get('tf_keras')
    return (keras,) if legacy is None else (keras, legacy)


# Typed as Keras 3's classes: ``tf_keras``'s have the members simharness calls on them (a
# Keras 3-only call, such as a stateless one, checks `is_tf_keras` first).


def models() -> Tuple[Type[keras.Model], ...]:
    """The Keras model classes (for `isinstance`)."""
    return cast(Tuple[Type[keras.Model], ...], tuple(m.Model for m in modules()))


def losses() -> Tuple[Type[keras.losses.Loss], ...]:
    """The Keras loss classes."""
    return cast(Tuple[Type[keras.losses.Loss], ...], tuple(m.losses.Loss for m in modules()))


def metrics() -> Tuple[Type[keras.metrics.Metric], ...]:
    """The Keras metric classes."""
    return cast(Tuple[Type[keras.metrics.Metric], ...], tuple(m.metrics.Metric for m in modules()))


def is_tf_keras(obj: object) -> bool:
    """Whether `obj` (a model, layer, loss or metric) is one of ``tf_keras``'s."""
    return type(obj).__module__.startswith('tf_keras')
