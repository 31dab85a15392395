"""Port of TFF's ``tensorflow_federated/python/learning/algorithms/kmeans_clustering_test.py``.

No case left out. ``check_equivalent_to`` is ``assert ...is_equivalent_to``.
The processes of the FederatedKmeansTest cases share one traced process per
configuration (module scope). Ours after TFF's: the types, bad arguments, a
two-cluster run, the same bits on both stacks.
"""

import collections
import functools

import numpy as np
import pytest
import tensorflow as tf

import simharness as tff
from simharness.learning.algorithms import kmeans_clustering

_WEIGHT_DTYPE = kmeans_clustering._WEIGHT_DTYPE

SHAPES = pytest.mark.parametrize(
    'shape', [(1,), (2,), (2, 2), (5, 7, 1, 6)], ids=['shape1', 'shape2', 'shape3', 'shape4']
)
TF_DTYPES = pytest.mark.parametrize(
    'dtype',
    [tf.int32, tf.int64, tf.float32, tf.float64],
    ids=['int32', 'int64', 'float32', 'float64'],
)


# ClientWorkTest.


@SHAPES
def test_find_closest_centroid__with_different_shapes(shape):
    centroids = tf.convert_to_tensor([tf.fill(shape, -1), tf.fill(shape, 1)])
    point = tf.fill(shape, 2)
    assert kmeans_clustering._find_closest_centroid(centroids, point) == 1


@TF_DTYPES
def test_find_closest_centroid_with_different_dtypes(dtype):
    shape = (3, 2)
    centroids = tf.convert_to_tensor(
        [tf.fill(shape, tf.constant(-1, dtype=dtype)), tf.fill(shape, tf.constant(1, dtype=dtype))]
    )
    point = tf.constant(2, dtype=dtype)
    assert kmeans_clustering._find_closest_centroid(centroids, point) == 1


def _check_kmeans_step(shape, dtype):
    centroids = tf.convert_to_tensor(
        [tf.fill(shape, tf.constant(-1, dtype=dtype)), tf.fill(shape, tf.constant(1, dtype=dtype))]
    )
    cluster_zero_points = [tf.fill(shape, tf.constant(-2, dtype=dtype)) for _ in range(2)]
    cluster_one_points = [tf.fill(shape, tf.constant(2, dtype=dtype)) for _ in range(3)]
    data = tf.data.Dataset.from_tensor_slices(cluster_zero_points + cluster_one_points)
    actual_result, actual_metrics = kmeans_clustering._compute_kmeans_step(centroids, data)
    assert len(actual_result.update) == 2
    assert actual_result.update[0].dtype == dtype
    np.testing.assert_array_equal(actual_result.update[0], [np.full(shape, -4), np.full(shape, 6)])
    np.testing.assert_array_equal(actual_result.update[1], [2, 3])
    assert not actual_result.update_weight
    assert dict(actual_metrics) == {'num_examples': 5}


@SHAPES
def test_kmeans_step_with_different_shapes(shape):
    _check_kmeans_step(shape, tf.int32)


@TF_DTYPES
def test_kmeans_step_with_different_dtypes(dtype):
    _check_kmeans_step((3, 2), dtype)


def _check_client_work_types(shape, point_dtype):
    num_clusters = 5
    centroids_type = tff.TensorType(point_dtype, (num_clusters,) + shape)
    data_type = tff.SequenceType(tff.TensorType(point_dtype, shape))
    weight_type = tff.TensorType(_WEIGHT_DTYPE, (num_clusters,))
    empty_server_type = tff.FederatedType((), tff.SERVER)
    client_work = kmeans_clustering._build_kmeans_client_work(centroids_type, data_type)
    next_type = client_work.next.type_signature
    assert next_type.parameter[0].is_equivalent_to(empty_server_type)
    assert next_type.parameter[1].is_equivalent_to(tff.FederatedType(centroids_type, tff.CLIENTS))
    assert next_type.parameter[2].is_equivalent_to(tff.FederatedType(data_type, tff.CLIENTS))
    assert next_type.result[0].is_equivalent_to(empty_server_type)
    assert next_type.result[1].member.update.is_equivalent_to(
        tff.to_type((centroids_type, weight_type))
    )
    assert next_type.result[2].member.is_equivalent_to(
        tff.to_type(collections.OrderedDict(num_examples=tff.TensorType(_WEIGHT_DTYPE)))
    )


@SHAPES
def test_build_kmeans_client_work_with_different_shapes(shape):
    _check_client_work_types(shape, np.float32)


@pytest.mark.parametrize(
    'point_dtype',
    [np.int32, np.int64, np.float32, np.float64],
    ids=['int32', 'int64', 'float32', 'float64'],
)
def test_build_kmeans_client_work_with_different_dtypes(point_dtype):
    _check_client_work_types((3, 2), point_dtype)


# FinalizerTest.


def _update(current_centroids, current_weights, new_cluster_sums, new_weights):
    return kmeans_clustering._update_centroids(
        current_centroids, current_weights, new_cluster_sums, new_weights
    )


@SHAPES
def test_update_centroids_computes_average_with_weights_one(shape):
    centroids_shape = (5,) + shape
    current_centroids = np.full(centroids_shape, -3.0, np.float32)
    new_cluster_sums = np.full(centroids_shape, 1.0, np.float32)
    weights = np.ones((5,), np.float32)
    updated_centroids, total_weights = _update(
        current_centroids, weights, new_cluster_sums, weights
    )
    np.testing.assert_array_equal(updated_centroids, 0.5 * (current_centroids + new_cluster_sums))
    np.testing.assert_array_equal(total_weights, np.full((5,), 2.0))


@SHAPES
def test_update_centroids_is_no_op_on_new_weights_zero(shape):
    centroids_shape = (5,) + shape
    current_centroids = np.full(centroids_shape, -3.0, np.float32)
    current_weights = np.ones((5,), np.float32)
    updated_centroids, total_weights = _update(
        current_centroids,
        current_weights,
        np.full(centroids_shape, 1.0, np.float32),
        np.zeros((5,), np.float32),
    )
    np.testing.assert_array_equal(total_weights, current_weights)
    np.testing.assert_array_equal(updated_centroids, current_centroids)


@SHAPES
def test_update_centroids_with_current_weight_zero(shape):
    centroids_shape = (5,) + shape
    new_weights = np.full((5,), 8.0, np.float32)
    updated_centroids, total_weights = _update(
        np.full(centroids_shape, -3.0, np.float32),
        np.zeros((5,), np.float32),
        np.full(centroids_shape, 16.0, np.float32),
        new_weights,
    )
    np.testing.assert_array_equal(total_weights, new_weights)
    np.testing.assert_array_equal(updated_centroids, np.full(centroids_shape, 2.0))


def test_current_weights_applied_coordinate_wise():
    current_weights = np.array([1.0, 2.0, 3.0], np.float32)
    new_weights = np.ones((3,), np.float32)
    updated_centroids, total_weights = _update(
        np.ones((3, 2), np.float32), current_weights, np.zeros((3, 2), np.float32), new_weights
    )
    np.testing.assert_array_equal(total_weights, new_weights + current_weights)
    np.testing.assert_array_equal(
        updated_centroids, np.array([[1.0 / 2.0] * 2, [2.0 / 3.0] * 2, [3.0 / 4.0] * 2], np.float32)
    )


def test_new_weights_applied_coordinate_wise():
    current_weights = np.zeros((3,), np.float32)
    new_weights = np.array([1.0, 2.0, 3.0], np.float32)
    updated_centroids, total_weights = _update(
        np.zeros((3, 2), np.float32), current_weights, np.ones((3, 2), np.float32), new_weights
    )
    np.testing.assert_array_equal(total_weights, new_weights + current_weights)
    np.testing.assert_array_equal(
        updated_centroids, np.array([[1.0] * 2, [1.0 / 2.0] * 2, [1.0 / 3.0] * 2], np.float32)
    )


# FederatedKmeansTest.


@functools.lru_cache(maxsize=None)
def _kmeans(num_clusters, data_shape, random_seed):
    return kmeans_clustering.build_fed_kmeans(
        num_clusters=num_clusters, data_shape=data_shape, random_seed=random_seed
    )


def test_constructs_with_pseudocounts_of_one(tff_stack):
    state = _kmeans(3, (2, 2), None).initialize()
    np.testing.assert_array_equal(state.finalizer, np.ones(3))


def test_initialize_uses_random_seed(tff_stack):
    data_shape = (3, 4, 5)
    init_value1 = _kmeans(6, data_shape, (42, 2)).initialize().global_model_weights
    init_value2 = (
        kmeans_clustering.build_fed_kmeans(
            num_clusters=6, data_shape=data_shape, random_seed=(42, 2)
        )
        .initialize()
        .global_model_weights
    )
    init_value3 = _kmeans(6, data_shape, (43, 2)).initialize().global_model_weights
    init_value4 = _kmeans(6, data_shape, (42, 3)).initialize().global_model_weights
    np.testing.assert_allclose(init_value1, init_value2)
    assert not np.allclose(init_value1, init_value3)
    assert not np.allclose(init_value1, init_value4)


DATA_SHAPE = (3, 2)
POINT1 = np.full(DATA_SHAPE, 1.0, np.float32)
POINT2 = np.full(DATA_SHAPE, 2.0, np.float32)


def test_single_step_with_one_client(tff_stack):
    kmeans = _kmeans(1, DATA_SHAPE, (0, 0))
    dataset = tf.data.Dataset.from_tensor_slices([POINT1, POINT2])
    state = kmeans.initialize()
    initial_centroids = state.global_model_weights
    output = kmeans.next(state, [dataset])
    np.testing.assert_allclose(
        output.state.global_model_weights,
        (1 / 3) * (initial_centroids + (POINT1 + POINT2)[None]),
        rtol=1e-6,
        atol=1e-6,
    )
    np.testing.assert_array_equal(output.state.finalizer, [3])


def test_single_step_with_two_clients(tff_stack):
    kmeans = _kmeans(1, DATA_SHAPE, (0, 0))
    state = kmeans.initialize()
    initial_centroids = state.global_model_weights
    output = kmeans.next(
        state, [tf.data.Dataset.from_tensors(POINT1), tf.data.Dataset.from_tensors(POINT2)]
    )
    np.testing.assert_allclose(
        output.state.global_model_weights,
        (1 / 3) * (initial_centroids + (POINT1 + POINT2)[None]),
        rtol=1e-6,
        atol=1e-6,
    )
    np.testing.assert_array_equal(output.state.finalizer, [3])


def test_two_steps_with_one_cluster(tff_stack):
    kmeans = _kmeans(1, DATA_SHAPE, (0, 0))
    state = kmeans.initialize()
    initial_centroids = state.global_model_weights
    output = kmeans.next(state, [tf.data.Dataset.from_tensors(POINT1)])
    np.testing.assert_allclose(
        output.state.global_model_weights,
        0.5 * (initial_centroids + POINT1[None]),
        rtol=1e-6,
        atol=1e-6,
    )
    np.testing.assert_array_equal(output.state.finalizer, [2])
    output = kmeans.next(output.state, [tf.data.Dataset.from_tensors(POINT2)])
    np.testing.assert_allclose(
        output.state.global_model_weights,
        (1 / 3) * (initial_centroids + (POINT1 + POINT2)[None]),
        rtol=1e-6,
        atol=1e-6,
    )
    np.testing.assert_array_equal(output.state.finalizer, [3])


# Ours after TFF's.


def test_process_types():
    kmeans = _kmeans(1, DATA_SHAPE, (0, 0))
    state_type = kmeans.next.type_signature.parameter[0].member
    assert state_type.global_model_weights == tff.TensorType(np.float32, (1, 3, 2))
    assert state_type.finalizer == tff.TensorType(np.float32, (1,))
    assert kmeans.next.type_signature.parameter[1] == tff.FederatedType(
        tff.SequenceType(tff.TensorType(np.float32, DATA_SHAPE)), tff.CLIENTS
    )
    metrics_type = kmeans.next.type_signature.result.metrics.member
    assert metrics_type.client_work == tff.to_type(collections.OrderedDict(num_examples=np.float32))


@pytest.mark.parametrize(
    'kwargs, error',
    [
        (dict(num_clusters=0, data_shape=(2,)), ValueError),
        (dict(num_clusters='3', data_shape=(2,)), TypeError),
        (dict(num_clusters=3, data_shape=[2]), TypeError),
        (dict(num_clusters=3, data_shape=(2,), random_seed=5), TypeError),
    ],
)
def test_bad_arguments_raise(kwargs, error):
    with pytest.raises(error):
        kmeans_clustering.build_fed_kmeans(**kwargs)


_TWO_CLUSTER_RESULTS = []


def test_two_clusters_move_to_their_points_the_same_on_every_stack(tff_stack):
    kmeans = _kmeans(2, (2,), (7, 1))
    state = kmeans.initialize()
    state = kmeans.set_model_weights(state, np.array([[-1.0, 0.0], [1.0, 0.0]], np.float32))
    clients = [
        tf.data.Dataset.from_tensor_slices(np.array(points, np.float32))
        for points in ([[-3.0, 1.0], [2.0, 2.0]], [[-2.0, -1.0], [4.0, 1.0], [3.0, 0.0]])
    ]
    output = kmeans.next(state, clients)
    # Cluster 0 gets (-3, 1) and (-2, -1): (-1 + -5) / 3, (0 + 0) / 3; cluster 1 the other three.
    np.testing.assert_allclose(
        output.state.global_model_weights, [[-2.0, 0.0], [(1.0 + 9.0) / 4, 3.0 / 4]], rtol=1e-6
    )
    np.testing.assert_array_equal(output.state.finalizer, [3.0, 4.0])
    assert output.metrics['client_work']['num_examples'] == 5.0
    _TWO_CLUSTER_RESULTS.append(output.state.global_model_weights)
    np.testing.assert_array_equal(_TWO_CLUSTER_RESULTS[0], output.state.global_model_weights)
