"""TFF 0.88's ``docs/tutorials/custom_federated_algorithms_1.ipynb``, renamed.

``import federated_language`` / ``import tensorflow_federated as tff`` become
``import simharness as ...``; every code cell runs as written, on the default
context. Left out: the ``!pip install`` cell. The tutorial's printed values
(types' strings, the average temperature 69.53333, ...) are asserted.
"""

import collections

import numpy as np
import pytest
import tensorflow as tf

import simharness as federated_language
import simharness as tff


def test_types_and_placements():
    @federated_language.federated_computation
    def hello_world():
        return 'Hello, World!'

    assert hello_world() == b'Hello, World!'

    federated_float_on_clients = federated_language.FederatedType(np.float32, federated_language.CLIENTS)
    assert str(federated_float_on_clients.member) == 'float32'
    assert str(federated_float_on_clients.placement) == 'CLIENTS'
    assert str(federated_float_on_clients) == '{float32}@CLIENTS'
    assert federated_float_on_clients.all_equal is False
    assert str(federated_language.FederatedType(np.float32, federated_language.CLIENTS,
                                                all_equal=True)) == 'float32@CLIENTS'
    simple_regression_model_type = federated_language.StructType([('a', np.float32), ('b', np.float32)])
    assert str(simple_regression_model_type) == '<a=float32,b=float32>'
    assert str(federated_language.FederatedType(simple_regression_model_type, federated_language.CLIENTS,
                                                all_equal=True)) == '<a=float32,b=float32>@CLIENTS'


def test_federated_mean_and_tracing(capsys):
    @federated_language.federated_computation(
        federated_language.FederatedType(np.float32, federated_language.CLIENTS))
    def get_average_temperature(sensor_readings):
        return federated_language.federated_mean(sensor_readings)

    assert str(get_average_temperature.type_signature) == '({float32}@CLIENTS -> float32@SERVER)'
    assert get_average_temperature([68.5, 70.3, 69.8]) == pytest.approx(69.53333, abs=1e-4)

    @federated_language.federated_computation(
        federated_language.FederatedType(np.float32, federated_language.CLIENTS))
    def get_average_temperature(sensor_readings):  # noqa: F811  (the tutorial redefines it)
        print('Getting traced, the argument is "{}".'.format(type(sensor_readings).__name__))
        return federated_language.federated_mean(sensor_readings)

    assert 'Getting traced' in capsys.readouterr().out


def test_tensorflow_computations():
    @tff.tensorflow.computation(np.float32)
    def add_half(x):
        return tf.add(x, 0.5)

    assert str(add_half.type_signature) == '(float32 -> float32)'

    @federated_language.federated_computation(
        federated_language.FederatedType(np.float32, federated_language.CLIENTS))
    def add_half_on_clients(x):
        return federated_language.federated_map(add_half, x)

    assert str(add_half_on_clients.type_signature) == '({float32}@CLIENTS -> {float32}@CLIENTS)'
    assert add_half_on_clients([1.0, 3.0, 2.0]) == [1.5, 3.5, 2.5]

    # The tutorial shows this failing: an eager tensor captured from outside.
    constant_10 = tf.constant(10.0)
    with pytest.raises(Exception, match='EagerTensor'):
        @tff.tensorflow.computation(np.float32)
        def add_ten(x):
            return x + constant_10

    def get_constant_10():
        return tf.constant(10.0)

    @tff.tensorflow.computation(np.float32)
    def add_ten(x):  # noqa: F811
        return x + get_constant_10()

    assert add_ten(5.0) == 15.0


def test_sequences():
    float32_sequence = federated_language.SequenceType(np.float32)
    assert str(float32_sequence) == 'float32*'

    @tff.tensorflow.computation(federated_language.SequenceType(np.float32))
    def get_local_temperature_average(local_temperatures):
        sum_and_count = local_temperatures.reduce((0.0, 0), lambda x, y: (x[0] + y, x[1] + 1))
        return sum_and_count[0] / tf.cast(sum_and_count[1], tf.float32)

    assert str(get_local_temperature_average.type_signature) == '(float32* -> float32)'

    @tff.tensorflow.computation(federated_language.SequenceType(np.int32))
    def foo(x):
        return x.reduce(np.int32(0), lambda x, y: x + y)

    assert foo([1, 2, 3]) == 6
    assert get_local_temperature_average([68.5, 70.3, 69.8]) == pytest.approx(69.53333, abs=1e-4)

    @tff.tensorflow.computation(federated_language.SequenceType(
        collections.OrderedDict([('A', np.int32), ('B', np.int32)])))
    def foo(ds):  # noqa: F811
        print('element_structure = {}'.format(ds.element_spec))
        return ds.reduce(np.int32(0), lambda total, x: total + x['A'] * x['B'])

    assert str(foo.type_signature) == '(<A=int32,B=int32>* -> int32)'
    assert foo([{'A': 2, 'B': 3}, {'A': 4, 'B': 5}]) == 26

    @federated_language.federated_computation(federated_language.FederatedType(
        federated_language.SequenceType(np.float32), federated_language.CLIENTS))
    def get_global_temperature_average(sensor_readings):
        return federated_language.federated_mean(
            federated_language.federated_map(get_local_temperature_average, sensor_readings))

    assert str(get_global_temperature_average.type_signature) == '({float32*}@CLIENTS -> float32@SERVER)'
    assert get_global_temperature_average([[68.0, 70.0], [71.0], [68.0, 72.0, 70.0]]) == pytest.approx(70.0)
