"""Port of TFF's ``analytics/hierarchical_histogram/hierarchical_histogram_factory_test.py``.

Differences: the state is ``DPAggregatorState`` with our fifth field
``noise_seed`` (int64[2]). The DP noise is checked as TFF does, within a
rough six-sigma bound (``300 * noise_multiplier``). Condensed (each case
traces and runs a process, ~0.7 s): the type tests run 2 of TFF's 4 shapes
x 2 mechanisms (``5_3`` sub-sampling with 'no-noise', ``3_2`` distinct
with 'central-gaussian'); each execution test runs 1 of TFF's 4 cases:
``no_noise_wo_clip`` ``3_5_2_distinct`` (TFF itself runs only ``1_1_2``),
``no_noise_w_clip`` ``2_3_3_sub_sampling``, the central-gaussian
``wo_clip`` ``3_5_2_distinct`` and ``w_clip`` ``5_3_3_distinct``.
Added: the noise's stddev is ``noise_multiplier`` times the L2 bound, and a
`TreeRangeSumQuery` in `DifferentiallyPrivateFactory` gives TFF's struct form of
its ragged tree (``<flat_values, nested_row_splits>``).
"""

import collections

import numpy as np
import pytest
import tensorflow as tf

import simharness as tff
from simharness.aggregators import differential_privacy, factory
from simharness.aggregators.privacy import query as dp_query
from simharness.aggregators.privacy import tree as tree_query
from simharness.analytics.hierarchical_histogram import build_tree_from_leaf
from simharness.analytics.hierarchical_histogram import (
    hierarchical_histogram_factory as hihi_factory,
)
from simharness.templates import AggregationProcess, MeasuredProcessOutput

TYPE_CASES = [
    (5, 3, 'sub-sampling', False, 'no-noise'),
    (3, 2, 'distinct', True, 'central-gaussian'),
]


def _expected_types(value_shape, arity, enable_secure_sum, central):
    inner_state = (
        tff.StructType([('l2_norm_clip', np.float32), ('stddev', np.float32)])
        if central
        else tff.StructType([])
    )
    query_state_type = tff.StructType(
        [('arity', tff.TensorType(np.int32)), ('inner_query_state', inner_state)]
    )
    dp_event_type = tff.StructType([('module_name', np.str_), ('class_name', np.str_)])
    server_state_type = tff.FederatedType(
        differential_privacy.DPAggregatorState(
            query_state_type, (), dp_event_type, np.bool_, tff.TensorType(np.int64, [2])
        ),
        tff.SERVER,
    )
    threshold = np.float32 if central else np.int32
    dp_measurements = (
        collections.OrderedDict(
            secure_upper_clipped_count=np.int32,
            secure_lower_clipped_count=np.int32,
            secure_upper_threshold=threshold,
            secure_lower_threshold=threshold,
        )
        if enable_secure_sum
        else ()
    )
    measurements_type = tff.FederatedType(
        collections.OrderedDict(dp_query_metrics=tff.StructType([]), dp=dp_measurements), tff.SERVER
    )
    tree_depth = hihi_factory._tree_depth(value_shape, arity)
    flat_tree_shape = (arity**tree_depth - 1) // (arity - 1)
    result_value_type = tff.to_type(
        collections.OrderedDict(
            [
                ('flat_values', (np.float32 if central else np.int32, (flat_tree_shape,))),
                ('nested_row_splits', [(np.int64, (tree_depth + 1,))]),
            ]
        )
    )
    value_type = tff.to_type((np.int32, (value_shape,)))
    init_type = tff.FunctionType(parameter=None, result=server_state_type)
    next_type = tff.FunctionType(
        parameter=collections.OrderedDict(
            state=server_state_type, value=tff.FederatedType(value_type, tff.CLIENTS)
        ),
        result=MeasuredProcessOutput(
            state=server_state_type,
            result=tff.FederatedType(result_value_type, tff.SERVER),
            measurements=measurements_type,
        ),
    )
    return init_type, next_type


@pytest.mark.parametrize(
    'value_shape, arity, clip_mechanism, enable_secure_sum, dp_mechanism', TYPE_CASES
)
def test_tree_aggregation_types(
    value_shape, arity, clip_mechanism, enable_secure_sum, dp_mechanism
):
    agg_factory = hihi_factory.create_hierarchical_histogram_aggregation_factory(
        num_bins=value_shape,
        arity=arity,
        clip_mechanism=clip_mechanism,
        dp_mechanism=dp_mechanism,
        enable_secure_sum=enable_secure_sum,
    )
    assert isinstance(agg_factory, factory.UnweightedAggregationFactory)
    process = agg_factory.create(tff.to_type((np.int32, (value_shape,))))
    assert isinstance(process, AggregationProcess)
    init_type, next_type = _expected_types(
        value_shape, arity, enable_secure_sum, dp_mechanism == 'central-gaussian'
    )
    assert process.initialize.type_signature.is_equivalent_to(init_type)
    assert process.next.type_signature.is_equivalent_to(next_type)


@pytest.mark.parametrize(
    'args',
    [
        (0, 2, 'sub-sampling', 1, 'central-gaussian', 1.0, False),
        (1, 1, 'sub-sampling', 1, 'central-gaussian', 1.0, False),
        (1, 2, 'invalid', 1, 'central-gaussian', 1.0, False),
        (1, 2, 'sub-sampling', 0, 'central-gaussian', 1.0, False),
        (1, 2, 'sub-sampling', 1, 'invalid', 1.0, False),
        (1, 2, 'sub-sampling', 1, 'central-gaussian', -1.0, False),
    ],
    ids=[
        'non_positive_value_shape',
        'invalid_arity',
        'invalid_clip_mechanism',
        'non_positive_max_records_per_user',
        'invalid_dp_mechanism',
        'negative_noise_multiplier',
    ],
)
def test_raises_error(args):
    with pytest.raises(ValueError):
        hihi_factory.create_hierarchical_histogram_aggregation_factory(*args)


def _run(
    value_shape,
    num_clients,
    arity,
    clip_mechanism,
    max_records_per_user,
    dp_mechanism,
    enable_secure_sum,
    noise_multiplier=0.0,
):
    client_records = [np.arange(value_shape, dtype=int).tolist() for _ in range(num_clients)]
    process = hihi_factory.create_hierarchical_histogram_aggregation_factory(
        num_bins=value_shape,
        arity=arity,
        clip_mechanism=clip_mechanism,
        max_records_per_user=max_records_per_user,
        dp_mechanism=dp_mechanism,
        noise_multiplier=noise_multiplier,
        enable_secure_sum=enable_secure_sum,
    ).create(tff.to_type((np.int32, (value_shape,))))
    output = process.next(process.initialize(), client_records).result
    tree = tf.RaggedTensor.from_nested_row_splits(
        flat_values=output['flat_values'], nested_row_splits=output['nested_row_splits']
    )
    return client_records, tree


def _reference_tree(client_records, arity, clip_mechanism):
    if clip_mechanism == 'distinct':
        client_records = np.minimum(client_records, 1)
    return build_tree_from_leaf.create_hierarchical_histogram(
        np.sum(client_records, axis=0).astype(float).tolist(), arity
    )


def _expected_l1_norm(client_records, clip_mechanism, max_records_per_user):
    order = 1 if clip_mechanism == 'sub-sampling' else 0
    return np.sum([min(np.linalg.norm(x, ord=order), max_records_per_user) for x in client_records])


def _assert_tree_close(tree, reference, atol=0.0):
    assert tree.shape[0] == len(reference)
    for layer, expected in zip(tree.to_list(), reference):
        np.testing.assert_allclose(layer, expected, atol=atol)


@pytest.mark.parametrize(
    'value_shape, num_clients, arity, clip_mechanism, enable_secure_sum',
    [(3, 5, 2, 'distinct', True)],
)
def test_no_noise_tree_aggregation_wo_clip(
    tff_stack, value_shape, num_clients, arity, clip_mechanism, enable_secure_sum
):
    client_records, tree = _run(
        value_shape, num_clients, arity, clip_mechanism, 5, 'no-noise', enable_secure_sum
    )
    assert tree.dtype == tf.int32
    _assert_tree_close(tree, _reference_tree(client_records, arity, clip_mechanism))


@pytest.mark.parametrize(
    'value_shape, num_clients, arity, clip_mechanism, max_records_per_user, enable_secure_sum',
    [(2, 3, 3, 'sub-sampling', 2, False)],
)
def test_no_noise_tree_aggregation_w_clip(
    tff_stack,
    value_shape,
    num_clients,
    arity,
    clip_mechanism,
    max_records_per_user,
    enable_secure_sum,
):
    client_records, tree = _run(
        value_shape,
        num_clients,
        arity,
        clip_mechanism,
        max_records_per_user,
        'no-noise',
        enable_secure_sum,
    )
    expected = _expected_l1_norm(client_records, clip_mechanism, max_records_per_user)
    for layer in range(hihi_factory._tree_depth(value_shape, arity)):
        assert np.sum(tree[layer]) == expected


@pytest.mark.parametrize(
    'value_shape, num_clients, arity, clip_mechanism, noise_multiplier, enable_secure_sum',
    [(3, 5, 2, 'distinct', 5.0, True)],
)
def test_central_gaussian_tree_aggregation_wo_clip(
    tff_stack, value_shape, num_clients, arity, clip_mechanism, noise_multiplier, enable_secure_sum
):
    client_records, tree = _run(
        value_shape,
        num_clients,
        arity,
        clip_mechanism,
        5,
        'central-gaussian',
        enable_secure_sum,
        noise_multiplier,
    )
    assert tree.dtype == tf.float32
    # 300: a rough six sigma, given the L2 bound and the composition (TFF's bound).
    _assert_tree_close(
        tree, _reference_tree(client_records, arity, clip_mechanism), atol=300.0 * noise_multiplier
    )


@pytest.mark.parametrize(
    'value_shape, num_clients, arity, clip_mechanism, max_records_per_user, noise_multiplier, '
    'enable_secure_sum',
    [(5, 3, 3, 'distinct', 2, 10.0, False)],
)
def test_central_gaussian_tree_aggregation_w_clip(
    tff_stack,
    value_shape,
    num_clients,
    arity,
    clip_mechanism,
    max_records_per_user,
    noise_multiplier,
    enable_secure_sum,
):
    client_records, tree = _run(
        value_shape,
        num_clients,
        arity,
        clip_mechanism,
        max_records_per_user,
        'central-gaussian',
        enable_secure_sum,
        noise_multiplier,
    )
    expected = _expected_l1_norm(client_records, clip_mechanism, max_records_per_user)
    for layer in range(hihi_factory._tree_depth(value_shape, arity)):
        np.testing.assert_allclose(
            np.sum(tree[layer]), expected, atol=300.0 * np.sqrt(arity**layer) * noise_multiplier
        )


def test_central_gaussian_noise_has_the_stddev_of_the_l2_bound():
    # sub-sampling, 512 bins, arity 2: depth 10, L2 bound 2 * sqrt(10); stddev 0.5 * that.
    process = hihi_factory.create_hierarchical_histogram_aggregation_factory(
        num_bins=512,
        max_records_per_user=2,
        dp_mechanism='central-gaussian',
        noise_multiplier=0.5,
        enable_secure_sum=False,
    ).create(tff.TensorType(np.int32, (512,)))
    output = process.next(process.initialize(), [np.zeros(512, np.int32)])
    noise = output.result['flat_values']
    assert noise.shape == (1023,)
    assert np.std(noise, ddof=1) == pytest.approx(np.sqrt(10.0), rel=0.1)
    assert abs(np.mean(noise)) < 0.5


def test_tree_range_sum_query_result_is_the_struct_of_its_ragged_tree():
    query = tree_query.TreeRangeSumQuery(dp_query.NoPrivacySumQuery(), arity=2)
    process = differential_privacy.DifferentiallyPrivateFactory(query).create(
        tff.TensorType(np.int32, (4,))
    )
    assert (
        str(process.next.type_signature.result.result.member)
        == '<flat_values=int32[7],nested_row_splits=<int64[4]>>'
    )
    out = process.next(process.initialize(), [np.arange(4, dtype=np.int32)] * 2).result
    tree = tf.RaggedTensor.from_nested_row_splits(out['flat_values'], out['nested_row_splits'])
    assert tree.to_list() == [[12], [2, 10], [0, 2, 4, 6]]
