"""Port of TFF's ``tensorflow_federated/python/tests/temperature_sensor_example.py``: the
temperature sensor example (each client counts its readings above a threshold the server
broadcasts; the server averages the fraction over threshold, weighted by each client's
number of readings). Nothing left out.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

import simharness as federated_language
import simharness as tff

_READINGS = federated_language.SequenceType(np.float32)


@tff.tensorflow.computation(_READINGS, np.float32)
def count_over(readings, threshold):
    """How many of `readings` exceed `threshold` (a float32)."""

    def add_if_over(count, reading):
        return count + tf.cast(reading > threshold, tf.float32)

    return readings.reduce(np.float32(0.0), add_if_over)


@tff.tensorflow.computation(_READINGS)
def count_total(readings):
    """How many `readings` there are (a float32)."""
    return readings.reduce(np.float32(0.0), lambda count, _: count + 1.0)


@federated_language.federated_computation(
    federated_language.FederatedType(_READINGS, federated_language.CLIENTS),
    federated_language.FederatedType(np.float32, federated_language.SERVER),
)
def mean_over_threshold(temperatures, threshold):
    """The clients' counts of readings above `threshold`, averaged at the server with
    their numbers of readings as weights."""
    at_clients = federated_language.federated_broadcast(threshold)
    over = federated_language.federated_map(
        count_over, federated_language.federated_zip([temperatures, at_clients])
    )
    totals = federated_language.federated_map(count_total, temperatures)
    return federated_language.federated_mean(over, totals)
