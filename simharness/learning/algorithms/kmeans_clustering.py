"""Federated mini-batch k-means (TFF's ``learning/algorithms/kmeans_clustering.py``).

After "Web-Scale K-Means Clustering" (D. Sculley, WWW 2010): each round's
mini-batch is the union of the participating clients' points.

```
state:        LearningAlgorithmState(global_model_weights=centroids float32[k, *data_shape],
                                     distributor=(), client_work=(), aggregator=<sum's state>,
                                     finalizer=cluster weights float32[k], ones at first)
client_work:  each point goes to its nearest centroid (squared Euclidean distance; ties to the
              lowest index): update=(per-cluster sums of points, per-cluster counts),
              update_weight=(); measurements: OrderedDict(num_examples=float32), summed
aggregator:   the sum factory (default tff.aggregators.SumFactory) as a weighted aggregator
finalizer:    c' = w / (w + n) * c + [n > 0] / (w + n) * s, w' = w + n  (per cluster)
```
"""

from __future__ import annotations

import collections
from typing import Optional, Tuple

import numpy as np
import tensorflow as tf

from simharness.aggregators import factory, factory_utils, sum_factory
from simharness.core import intrinsics as I
from simharness.core import types as T
from simharness.core.computation import federated_computation, tf_computation
from simharness.core.tracing import Value
from simharness.errors import SimharnessTypeError, SimharnessValueError
from simharness.learning.templates import (
    client_works,
    composers,
    distributors,
    finalizers,
    learning_process,
)
from simharness.templates.measured_process import MeasuredProcessOutput

__all__ = ['build_fed_kmeans']

_INDEX_DTYPE = np.int32
_POINT_DTYPE = np.float32
_WEIGHT_DTYPE = np.float32
_MILLIS_PER_SECOND = 100000.0  # TFF's name and value (the default seed's timestamp scale)


@tf.function
def _find_closest_centroid(centroids: tf.Tensor, point: tf.Tensor) -> tf.Tensor:
    """The row of `centroids` nearest to `point` (shape ``centroids.shape[1:]``, same dtype)."""
    data_axes = tf.range(1, limit=tf.rank(centroids))
    shifted_centroids = centroids - point
    square_distances = tf.math.reduce_sum(shifted_centroids * shifted_centroids, axis=data_axes)
    return tf.math.argmin(square_distances, axis=0, output_type=_INDEX_DTYPE)


@tf.function
def _compute_kmeans_step(
    centroids: tf.Tensor, data: tf.data.Dataset
) -> tuple[client_works.ClientResult, collections.OrderedDict]:
    """One client's assignment of its points to the nearest centroids.

    Returns:
      ``(ClientResult(update=(cluster_sums, cluster_weights), update_weight=()),
      OrderedDict(num_examples=float32))``: ``cluster_sums[i]`` the sum of the
      points nearest centroid ``i`` (the centroids' shape and dtype),
      ``cluster_weights[i]`` their count (float32).
    """
    cluster_sums = tf.zeros_like(centroids)
    cluster_weights = tf.zeros(shape=(centroids.shape[0],), dtype=_WEIGHT_DTYPE)
    num_examples = tf.constant(0, dtype=_WEIGHT_DTYPE)

    def reduce_fn(
        state: tuple[tf.Tensor, tf.Tensor, tf.Tensor], point: tf.Tensor
    ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        cluster_sums, cluster_weights, num_examples = state
        scatter_index = [[_find_closest_centroid(centroids, point)]]
        cluster_sums = tf.tensor_scatter_nd_add(
            cluster_sums, scatter_index, tf.expand_dims(point, axis=0)
        )
        cluster_weights = tf.tensor_scatter_nd_add(
            cluster_weights, scatter_index, tf.ones([1], _WEIGHT_DTYPE)
        )
        return cluster_sums, cluster_weights, num_examples + 1

    cluster_sums, cluster_weights, num_examples = data.reduce(
        initial_state=(cluster_sums, cluster_weights, num_examples), reduce_func=reduce_fn
    )
    return (
        client_works.ClientResult(update=(cluster_sums, cluster_weights), update_weight=()),
        collections.OrderedDict(num_examples=num_examples),
    )


def _build_kmeans_client_work(
    centroids_type: T.TensorType, data_type: T.SequenceType
) -> client_works.ClientWorkProcess:
    """The k-means `ClientWorkProcess`: stateless, measurements the summed point counts."""

    @federated_computation()
    def init_fn() -> Value:
        return I.federated_value((), T.SERVER)

    @tf_computation(centroids_type, data_type)
    def client_update(
        centroids: tf.Tensor, client_data: tf.data.Dataset
    ) -> tuple[client_works.ClientResult, collections.OrderedDict]:
        return _compute_kmeans_step(centroids, client_data)

    @federated_computation(
        init_fn.type_signature.result,
        T.FederatedType(centroids_type, T.CLIENTS),
        T.FederatedType(data_type, T.CLIENTS),
    )
    def next_fn(state: Value, cluster_centers: Value, client_data: Value) -> MeasuredProcessOutput:
        client_result, stat_output = I.federated_map(client_update, (cluster_centers, client_data))
        return MeasuredProcessOutput(state, client_result, I.federated_sum(stat_output))

    return client_works.ClientWorkProcess(init_fn, next_fn)


@tf.function
def _update_centroids(
    current_centroids: tf.Tensor,
    current_weights: tf.Tensor,
    new_cluster_sums: tf.Tensor,
    new_weights: tf.Tensor,
) -> tuple[tf.Tensor, tf.Tensor]:
    """``(updated_centroids, updated_weights)``: per cluster, the weighted mean of old and new.

    A cluster with no new points keeps its centroid; the weights add up.
    """
    total_weights = current_weights + new_weights
    current_scale = tf.math.divide_no_nan(current_weights, total_weights)
    new_weights_indicator = tf.cast(tf.math.greater(new_weights, 0), _POINT_DTYPE)
    new_scale = tf.math.divide_no_nan(new_weights_indicator, total_weights)
    # Per-cluster scales broadcast over the data axes.
    num_centroids = current_centroids.shape[0]
    scale_shape = tf.concat(
        [[num_centroids], tf.ones((tf.rank(current_centroids) - 1,), dtype=tf.int32)], axis=0
    )
    current_scale = tf.reshape(current_scale, scale_shape)
    new_scale = tf.reshape(new_scale, scale_shape)
    updated_centroids = current_scale * current_centroids + new_scale * new_cluster_sums
    return updated_centroids, total_weights


def _build_kmeans_finalizer(
    centroids_type: T.TensorType, num_centroids: int
) -> finalizers.FinalizerProcess:
    """The k-means `FinalizerProcess`: its state the cluster weights (pseudo-counts of 1)."""

    @tf_computation
    def initialize_weights() -> tf.Tensor:
        return tf.ones((num_centroids,), dtype=_WEIGHT_DTYPE)

    @federated_computation()
    def init_fn() -> Value:
        return I.federated_eval(initialize_weights, T.SERVER)

    weights_type = initialize_weights.type_signature.result

    @tf_computation(centroids_type, weights_type, centroids_type, weights_type)
    def server_update_tf(
        current_centroids: tf.Tensor,
        current_weights: tf.Tensor,
        new_centroid_sums: tf.Tensor,
        new_weights: tf.Tensor,
    ) -> tuple[tf.Tensor, tf.Tensor]:
        return _update_centroids(current_centroids, current_weights, new_centroid_sums, new_weights)

    summed_updates_type = T.FederatedType(T.to_type((centroids_type, weights_type)), T.SERVER)

    @federated_computation(
        init_fn.type_signature.result,
        T.FederatedType(centroids_type, T.SERVER),
        summed_updates_type,
    )
    def next_fn(
        state: Value, current_centroids: Value, summed_updates: Value
    ) -> MeasuredProcessOutput:
        new_centroid_sums, new_weights = summed_updates
        updated_centroids, updated_weights = I.federated_map(
            server_update_tf, (current_centroids, state, new_centroid_sums, new_weights)
        )
        return MeasuredProcessOutput(
            updated_weights, updated_centroids, I.federated_value((), T.SERVER)
        )

    return finalizers.FinalizerProcess(init_fn, next_fn)


def _check_args(num_clusters: object, data_shape: object, random_seed: object) -> None:
    if isinstance(num_clusters, bool) or not isinstance(num_clusters, (int, np.integer)):
        raise SimharnessTypeError(
            f'num_clusters must be an int, got {num_clusters!r}',
            expected=int,
            actual=type(num_clusters),
        )
    if num_clusters <= 0:
        raise SimharnessValueError(f'num_clusters must be positive, got {num_clusters}')
    if not isinstance(data_shape, tuple) or not all(
        isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0 for d in data_shape
    ):
        raise SimharnessTypeError(
            f'data_shape must be a tuple of non-negative ints, got {data_shape!r}',
            expected=tuple,
            actual=type(data_shape),
        )
    if random_seed is not None and (
        not isinstance(random_seed, (tuple, list)) or len(random_seed) != 2
    ):
        raise SimharnessTypeError(
            f'random_seed must be a tuple of two ints, got {random_seed!r}',
            expected=tuple,
            actual=type(random_seed),
        )


def build_fed_kmeans(
    num_clusters: int,
    data_shape: Tuple[int, ...],
    random_seed: Optional[Tuple[int, int]] = None,
    distributor: Optional[distributors.DistributionProcess] = None,
    sum_aggregator: Optional[factory.UnweightedAggregationFactory] = None,
) -> learning_process.LearningProcess:
    """A `LearningProcess` of federated mini-batch k-means clustering.

    ``initialize()`` draws the centroids, float32 of shape ``(num_clusters,) +
    data_shape``, from a standard normal (``tf.random.stateless_normal`` with
    `random_seed`); ``next(state, client_datasets)`` takes datasets of
    unbatched float32 points of shape `data_shape`: clients assign their
    points to the nearest centroid, the server moves each centroid to the
    weighted mean of it and its new points. ``state.finalizer`` holds the
    points seen per cluster, from a pseudo-count of 1 (so centroids never
    collapse to zero). ``get_model_weights`` / ``set_model_weights`` read and
    replace the centroids.

    Args:
      num_clusters: the number of clusters.
      data_shape: the shape of one (unbatched) data point.
      random_seed: two ints seeding the centroids; None: TFF's default, a
        seed from the current time (different centroids on every build).
      distributor: a `DistributionProcess` of the centroids; default
        `tff.learning.templates.build_broadcast_process`.
      sum_aggregator: an unweighted factory summing the clients' updates;
        default `tff.aggregators.SumFactory`.

    Raises:
      TypeError: an argument has the wrong type.
      ValueError: `num_clusters` is not positive.
    """
    _check_args(num_clusters, data_shape, random_seed)
    centroids_shape = (int(num_clusters),) + tuple(int(d) for d in data_shape)
    if not random_seed:
        random_seed = (int(tf.cast(tf.timestamp() * _MILLIS_PER_SECOND, tf.int64).numpy()), 0)
    seed = tuple(int(s) for s in random_seed)

    @tf_computation
    def initialize_centers() -> tf.Tensor:
        return tf.random.stateless_normal(centroids_shape, seed, dtype=_POINT_DTYPE)

    centroids_type = T.TensorType(_POINT_DTYPE, centroids_shape)
    weights_type = T.TensorType(_WEIGHT_DTYPE, (num_clusters,))
    data_type = T.SequenceType(T.TensorType(_POINT_DTYPE, data_shape))

    if distributor is None:
        distributor = distributors.build_broadcast_process(centroids_type)
    client_work = _build_kmeans_client_work(centroids_type, data_type)
    if sum_aggregator is None:
        sum_aggregator = sum_factory.SumFactory()
    # As a weighted aggregator (empty weights), for the composer.
    weighted_aggregator = factory_utils.as_weighted_aggregator(sum_aggregator)
    value_type = T.StructType([centroids_type, weights_type], container=tuple)
    empty_weight_type = T.StructType([], container=tuple)
    aggregator = weighted_aggregator.create(value_type, empty_weight_type)
    finalizer = _build_kmeans_finalizer(centroids_type, num_clusters)
    return composers.compose_learning_process(
        initialize_centers, distributor, client_work, aggregator, finalizer
    )
