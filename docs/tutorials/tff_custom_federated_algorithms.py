"""Tutorial 2: TFF's "Custom Federated Algorithms, Part 1", ported by renaming.

The core of TFF 0.88's notebook
(docs/tutorials/custom_federated_algorithms_1.ipynb), written as the notebook
writes it, with the two imports renamed (the whole notebook runs unchanged in
tests/tff/tutorials/test_custom_federated_algorithms_1.py). Run it:
`python docs/tutorials/tff_custom_federated_algorithms.py` (5-9 s on a shared
2-core machine).
"""
import numpy as np

# The renamed imports above TensorFlow's: simharness keeps TF's start-up
# lines quiet.
import simharness as federated_language  # was: import federated_language
import simharness as tff         # was: import tensorflow_federated as tff
import tensorflow as tf

# Federated types: a float at every client, a float at the server.
federated_float_on_clients = federated_language.FederatedType(
    np.float32, federated_language.CLIENTS)
print(federated_float_on_clients)          # {float32}@CLIENTS


# A federated computation: the average of the clients' temperature readings.
@federated_language.federated_computation(
    federated_language.FederatedType(np.float32, federated_language.CLIENTS))
def get_average_temperature(sensor_readings):
    return federated_language.federated_mean(sensor_readings)


# ({float32}@CLIENTS -> float32@SERVER)
print(get_average_temperature.type_signature)
assert get_average_temperature([68.5, 70.3, 69.8]) == np.float32(69.53333)


# A TensorFlow computation, mapped over the clients.
@tff.tensorflow.computation(np.float32, np.float32)
def exceeds_threshold_fn(reading, threshold):
    return tf.cast(reading > threshold, np.float32)


@federated_language.federated_computation(
    federated_language.FederatedType(np.float32, federated_language.CLIENTS),
    federated_language.FederatedType(np.float32, federated_language.SERVER))
def get_fraction_of_sensors_over_threshold(readings, threshold):
    return federated_language.federated_mean(
        federated_language.federated_map(
            exceeds_threshold_fn,
            [readings, federated_language.federated_broadcast(threshold)]))


fraction = get_fraction_of_sensors_over_threshold([68.5, 70.3, 69.8], 69.0)
print(fraction)                             # 0.6666667
assert np.isclose(fraction, 2 / 3)


# Sequences at the clients: each client's mean reading, then their mean.
@tff.tensorflow.computation(federated_language.SequenceType(np.float32))
def get_local_temperature_average(local_temperatures):
    sum_and_count = local_temperatures.reduce(
        (np.float32(0), np.int32(0)), lambda x, y: (x[0] + y, x[1] + 1))
    return sum_and_count[0] / tf.cast(sum_and_count[1], np.float32)


@federated_language.federated_computation(
    federated_language.FederatedType(
        federated_language.SequenceType(np.float32),
        federated_language.CLIENTS))
def get_global_temperature_average(sensor_readings):
    return federated_language.federated_mean(
        federated_language.federated_map(
            get_local_temperature_average, sensor_readings))


average = get_global_temperature_average(
    [[68.0, 70.0], [71.0], [68.0, 72.0, 70.0]])
print(average)                              # 70.0
assert np.isclose(average, 70.0)
