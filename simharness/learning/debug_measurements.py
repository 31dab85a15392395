"""Debugging measurements of an aggregator (TFF's ``learning/debug_measurements.py``).

``add_debug_measurements(factory)`` wraps an aggregation factory (weighted or
unweighted) with `simharness.aggregators.add_measurements`; the aggregation is
unchanged and its measurements gain

```
average_client_norm   (weighted) mean of the clients' update L2 norms
std_dev_client_norm   their standard deviation, from the unbiased variance
                      (correction a**2 / (a**2 - b), a = sum of weights, b = sum of squares)
server_update_max     largest entry of the aggregate
server_update_norm    L2 norm of the aggregate
server_update_min     smallest entry of the aggregate
```
An unweighted factory weighs every client 1.0. The ``_with_mixed_dtype``
variant casts every tensor to float32 first (mixed float dtypes allowed).
"""

from __future__ import annotations

import collections
from typing import Callable, TypeVar, cast

import tensorflow as tf

from simharness.aggregators import factory, measurements
from simharness.aggregators import tensor_utils
from simharness.core import intrinsics as I
from simharness.core import types as T
from simharness.core.computation import Computation, tf_computation
from simharness.core.tracing import Value
from simharness.learning._typing import TensorStructure

__all__ = ['add_debug_measurements', 'add_debug_measurements_with_mixed_dtype']

_AggregationFactory = TypeVar('_AggregationFactory', bound=factory.AggregationFactory)


@tf_computation
def _calculate_global_norm(tensor_struct: TensorStructure) -> tf.Tensor:
    """The Euclidean norm of all the tensors of a structure together."""
    return tf.linalg.global_norm(tensor_utils.flatten(tensor_struct))


@tf_computation
def _calculate_global_norm_mixed_dtype(tensor_struct: TensorStructure) -> tf.Tensor:
    """The Euclidean norm of all the tensors of a structure together, in float32."""
    squares = [
        tf.cast(tf.norm(t, ord=2) ** 2, tf.float32) for t in tensor_utils.flatten(tensor_struct)
    ]
    return tf.math.sqrt(tf.reduce_sum(tf.stack(squares)))


@tf_computation
def _square_value(tensor_value: tf.Tensor) -> tf.Tensor:
    return tensor_value**2


@tf_computation
def _calculate_server_update_statistics_mixed_dtype(
    server_update: TensorStructure,
) -> collections.OrderedDict[str, tf.Tensor]:
    """Max, L2 norm and min over all entries of a structure, every tensor cast to float32."""
    leaves = tensor_utils.flatten(server_update)
    max_value = tf.math.reduce_max([tf.cast(tf.math.reduce_max(t), tf.float32) for t in leaves])
    min_value = tf.math.reduce_min([tf.cast(tf.math.reduce_min(t), tf.float32) for t in leaves])
    return collections.OrderedDict(
        server_update_max=max_value,
        server_update_norm=_calculate_global_norm_mixed_dtype(server_update),
        server_update_min=min_value,
    )


@tf_computation
def _calculate_server_update_statistics(
    server_update: TensorStructure,
) -> collections.OrderedDict[str, tf.Tensor]:
    """Max, L2 norm and min over all entries of a structure (one dtype)."""
    leaves = tensor_utils.flatten(server_update)
    max_value = tf.math.reduce_max([tf.math.reduce_max(t) for t in leaves])
    min_value = tf.math.reduce_min([tf.math.reduce_min(t) for t in leaves])
    return collections.OrderedDict(
        server_update_max=max_value,
        server_update_norm=_calculate_global_norm(server_update),
        server_update_min=min_value,
    )


@tf_computation
def _calculate_unbiased_std_dev(
    expected_value: tf.Tensor,
    expected_squared_value: tf.Tensor,
    sum_of_weights: tf.Tensor,
    sum_of_squared_weights: tf.Tensor,
) -> tf.Tensor:
    """The standard deviation of a weighted discrete distribution, from the unbiased variance.

    The biased variance ``E[x**2] - E[x]**2`` is multiplied by ``a**2 / (a**2 - b)``
    (``a`` the sum of the weights, ``b`` the sum of their squares: Bessel's
    ``n / (n - 1)`` for equal weights; 0 where ``a**2 == b``).
    """
    biased_variance = expected_squared_value - expected_value**2
    correction_factor = tf.math.divide_no_nan(
        sum_of_weights**2, sum_of_weights**2 - sum_of_squared_weights
    )
    return tf.math.sqrt(correction_factor * biased_variance)


def _calculate_client_update_statistics_with_norm(
    client_norms: Value, client_weights: Value
) -> Value:
    client_norms_squared = I.federated_map(_square_value, client_norms)
    average_client_norm = I.federated_mean(client_norms, client_weights)
    average_client_norm_squared = I.federated_mean(client_norms_squared, client_weights)
    sum_of_client_weights = I.federated_sum(client_weights)
    sum_of_client_weights_squared = I.federated_sum(I.federated_map(_square_value, client_weights))
    unbiased_std_dev = I.federated_map(
        _calculate_unbiased_std_dev,
        (
            average_client_norm,
            average_client_norm_squared,
            sum_of_client_weights,
            sum_of_client_weights_squared,
        ),
    )
    return I.federated_zip(
        collections.OrderedDict(
            average_client_norm=average_client_norm, std_dev_client_norm=unbiased_std_dev
        )
    )


def _calculate_client_update_statistics(client_updates: Value, client_weights: Value) -> Value:
    """Weighted mean and unbiased standard deviation of the clients' update norms (at SERVER)."""
    client_norms = I.federated_map(_calculate_global_norm, client_updates)
    return _calculate_client_update_statistics_with_norm(client_norms, client_weights)


def _calculate_client_update_statistics_mixed_dtype(
    client_updates: Value, client_weights: Value
) -> Value:
    """As `_calculate_client_update_statistics`, the norms taken in float32."""
    client_norms = I.federated_map(_calculate_global_norm_mixed_dtype, client_updates)
    return _calculate_client_update_statistics_with_norm(client_norms, client_weights)


def _build_aggregator_measurement_fns(
    client_measurement_fn: Callable[[Value, Value], Value] = (_calculate_client_update_statistics),
    server_measurement_fn: Computation = _calculate_server_update_statistics,
    weighted_aggregator: bool = True,
) -> tuple:
    """``(client_measurement_fn, server_measurement_fn)`` for `add_measurements`.

    The client function takes ``(value, weight)`` when `weighted_aggregator`,
    else ``value`` (every client weighted 1.0); the server one takes the
    aggregate at SERVER and maps `server_measurement_fn` (a TF computation) on it.
    """
    federated_client_measurement_fn: Callable[..., Value]
    if weighted_aggregator:
        federated_client_measurement_fn = client_measurement_fn
    else:

        def federated_client_measurement_fn(value: Value) -> Value:
            client_weights = I.federated_value(1.0, T.CLIENTS)
            return client_measurement_fn(value, client_weights)

    def federated_server_measurement_fn(value: Value) -> Value:
        return I.federated_map(server_measurement_fn, value)

    return federated_client_measurement_fn, federated_server_measurement_fn


def _add(
    aggregation_factory: _AggregationFactory,
    client_fn: Callable[[Value, Value], Value],
    server_fn: Computation,
) -> _AggregationFactory:
    factory.check_factory(
        aggregation_factory,
        (factory.UnweightedAggregationFactory, factory.WeightedAggregationFactory),
        'aggregation_factory',
    )
    weighted = isinstance(aggregation_factory, factory.WeightedAggregationFactory)
    client_measurement_fn, server_measurement_fn = _build_aggregator_measurement_fns(
        client_measurement_fn=client_fn,
        server_measurement_fn=server_fn,
        weighted_aggregator=weighted,
    )
    # `add_measurements` keeps the factory's kind (weighted or not).
    return cast(
        _AggregationFactory,
        measurements.add_measurements(
            aggregation_factory,
            client_measurement_fn=client_measurement_fn,
            server_measurement_fn=server_measurement_fn,
        ),
    )


def add_debug_measurements(aggregation_factory: _AggregationFactory) -> _AggregationFactory:
    """`aggregation_factory` (weighted or unweighted) with debugging measurements added.

    The aggregation is unchanged. Measurements added: ``average_client_norm``
    and ``std_dev_client_norm`` (the clients' update L2 norms, weighted as the
    factory weighs, uniformly for an unweighted one; standard deviation from
    the unbiased variance), ``server_update_max``, ``server_update_norm`` and
    ``server_update_min`` (of the aggregate, an entry being any coordinate of
    any tensor). E.g. unweighted clients ``[[-1, -3, -5], [2]]`` and
    ``[[-1, -3, 1], [0]]`` aggregate to ``[[-1, -3, -2], [1]]``: max 1, min -3,
    norm sqrt(15).

    Args:
      aggregation_factory: a `tff.aggregators` weighted or unweighted factory.

    Returns:
      A factory of the same kind.

    Raises:
      TypeError: `aggregation_factory` is not an aggregation factory.
    """
    return _add(
        aggregation_factory,
        _calculate_client_update_statistics,
        _calculate_server_update_statistics,
    )


def add_debug_measurements_with_mixed_dtype(
    aggregation_factory: _AggregationFactory,
) -> _AggregationFactory:
    """`add_debug_measurements` for updates of mixed dtypes: every tensor cast to float32.

    Precision is lost for integers over about 2**24, and float64 narrows to
    float32; prefer `add_debug_measurements` where the updates are float32.
    Same measurements, same arguments and errors.
    """
    return _add(
        aggregation_factory,
        _calculate_client_update_statistics_mixed_dtype,
        _calculate_server_update_statistics_mixed_dtype,
    )
