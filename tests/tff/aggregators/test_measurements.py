"""Port of TFF's ``tensorflow_federated/python/aggregators/measurements_test.py``. No case left out."""

import collections

import numpy as np
import pytest
import tensorflow as tf

import simharness as tff
from simharness.aggregators import mean, measurements, sum_factory
from simharness.aggregators import tensor_utils as tu
from tests.tff.aggregators.aggregator_test_utils import assert_all_close

_struct_type = tff.to_type([(np.float32, (3,)), np.float32])
_float_type = tff.to_type(np.float32)


@tff.tf_computation
def _get_norm(value):
    return tf.linalg.global_norm(tu.flatten(value))


def _make_struct(x):
    return [np.full(shape=[3], fill_value=x, dtype=np.float32), x]  # L2 norm: 2 * x


def _get_min_norm(value):
    return collections.OrderedDict(min_norm=tff.federated_min(tff.federated_map(_get_norm, value)))


@tff.tf_computation
def _mul_struct(value, weight):
    return tu.map_structure(lambda x: x * weight, value)


def _get_min_weighted_norm(value, weight):
    weighted = tff.federated_map(_mul_struct, (value, weight))
    return collections.OrderedDict(
        min_weighted_norm=tff.federated_min(tff.federated_map(_get_norm, weighted))
    )


def _get_server_norm(value):
    return collections.OrderedDict(server_norm=tff.federated_map(_get_norm, value))


def test_raises_bad_measurement_fn():
    with pytest.raises(ValueError, match='single parameter'):
        measurements.add_measurements(
            sum_factory.SumFactory(), client_measurement_fn=_get_min_weighted_norm
        )
    with pytest.raises(ValueError, match='single parameter'):
        measurements.add_measurements(
            sum_factory.SumFactory(), server_measurement_fn=_get_min_weighted_norm
        )
    with pytest.raises(ValueError, match='two parameters'):
        measurements.add_measurements(mean.MeanFactory(), client_measurement_fn=_get_min_norm)
    with pytest.raises(ValueError, match='Must specify'):
        measurements.add_measurements(mean.MeanFactory())
    with pytest.raises(TypeError):
        measurements.add_measurements('not a factory', client_measurement_fn=_get_min_norm)


DATA = [_make_struct(x) for x in [1.0, 2.0, 3.0]]


def test_unweighted_client(tff_stack):
    f = measurements.add_measurements(sum_factory.SumFactory(), client_measurement_fn=_get_min_norm)
    process = f.create(_struct_type)
    output = process.next(process.initialize(), DATA)
    assert_all_close(output.result, _make_struct(6.0))
    assert output.measurements == collections.OrderedDict(min_norm=2.0)


def test_weighted_client(tff_stack):
    f = measurements.add_measurements(
        mean.MeanFactory(), client_measurement_fn=_get_min_weighted_norm
    )
    process = f.create(_struct_type, _float_type)
    output = process.next(process.initialize(), DATA, [3.0, 1.0, 2.0])
    assert_all_close(output.result, _make_struct(11 / 6))
    assert output.measurements == collections.OrderedDict(
        mean_value=(), mean_weight=(), min_weighted_norm=4.0
    )


def test_server(tff_stack):
    f = measurements.add_measurements(
        sum_factory.SumFactory(), server_measurement_fn=_get_server_norm
    )
    process = f.create(_struct_type)
    output = process.next(process.initialize(), DATA)
    assert_all_close(output.result, _make_struct(6.0))
    assert output.measurements == collections.OrderedDict(server_norm=12.0)


def test_unweighted_client_and_server(tff_stack):
    f = measurements.add_measurements(
        sum_factory.SumFactory(),
        client_measurement_fn=_get_min_norm,
        server_measurement_fn=_get_server_norm,
    )
    process = f.create(_struct_type)
    output = process.next(process.initialize(), DATA)
    assert output.measurements == collections.OrderedDict(min_norm=2.0, server_norm=12.0)


def test_weighted_client_and_server(tff_stack):
    f = measurements.add_measurements(
        mean.MeanFactory(),
        client_measurement_fn=_get_min_weighted_norm,
        server_measurement_fn=_get_server_norm,
    )
    process = f.create(_struct_type, _float_type)
    output = process.next(process.initialize(), DATA, [3.0, 1.0, 2.0])
    assert_all_close(output.result, _make_struct(11 / 6))
    assert_all_close(
        output.measurements,
        collections.OrderedDict(
            mean_value=(), mean_weight=(), min_weighted_norm=4.0, server_norm=11 / 3
        ),
    )
