"""Port of TFF's ``tensorflow_federated/python/aggregators/privacy/tree_test.py``.

TFF's ``test_utils.run_query`` is `_run_query` here; the records of
``test_sum`` (``test_residual_sums_to_cumulative_sum``) come from a seeded
numpy generator. Condensed (each step retraces the tree aggregator's
``tf.function`` as its buffer grows, ~0.1 s): the two
``test_scalar_tree_aggregation_reset`` tests (restart query, residual query)
run 3 of TFF's 6 cases (``s0t1f1``, ``s1t2f2``, ``s1t5f6``); ``test_sum``
runs 1 of its 4 (``r3d5n1s1`` efficient, 8 steps instead of 32; the plain
`TreeAggregator` runs in the reset tests and against hand-computed sums). Added: the inner
query's seeded noise goes through ``noise_seed``; the tree aggregators' noise
against hand-computed sums of node values (plain and Honaker's weights); a
Gaussian generator's seeded noise is reproducible and has its stddev; a
`TreeResidualSumQuery` runs in `DifferentiallyPrivateFactory` (its growing
tree state has a dynamic leading dimension).
"""

import math

import numpy as np
import pytest
import tensorflow as tf

import simharness as tff
from simharness.aggregators import differential_privacy
from simharness.aggregators.privacy import query as dp_query
from simharness.aggregators.privacy import tree as tree_query


@pytest.mark.parametrize('dtype', [tf.int32, tf.float32])
@pytest.mark.parametrize('arity', [2, 3])
@pytest.mark.parametrize('leaf_nodes_size', [1, 2, 3, 4, 5])
def test_build_tree_from_leaf(leaf_nodes_size, arity, dtype):
    leaf_nodes = tf.cast(tf.range(leaf_nodes_size), dtype)
    depth = math.ceil(math.log(leaf_nodes_size, arity)) + 1
    tree = tree_query._build_tree_from_leaf(leaf_nodes, arity)
    assert tree.shape[0] == depth
    assert tree.dtype == dtype
    for layer in range(depth):
        span_size = arity ** (depth - layer - 1)
        for idx in range(arity**layer):
            expected = sum(leaf_nodes.numpy()[idx * span_size : (idx + 1) * span_size])
            assert tree[layer][idx].numpy() == expected


@pytest.mark.parametrize('params', [(0.0, 1.0, 2), (1.0, -1.0, 2), (1.0, 1.0, 1)])
def test_raises_error(params):
    clip_norm, stddev, arity = params
    with pytest.raises(ValueError):
        tree_query.TreeRangeSumQuery.build_central_gaussian_query(clip_norm, stddev, arity)


@pytest.mark.parametrize('stddev', [0.1, 1.0, 10.0])
@pytest.mark.parametrize('clip_norm', [0.1, 1.0, 10.0])
def test_initial_global_state_type(clip_norm, stddev):
    query = tree_query.TreeRangeSumQuery.build_central_gaussian_query(clip_norm, stddev)
    assert isinstance(query.initial_global_state(), tree_query.TreeRangeSumQuery.GlobalState)


@pytest.mark.parametrize('arity', [2, 3, 4])
@pytest.mark.parametrize('stddev', [0.1, 1.0, 10.0])
@pytest.mark.parametrize('clip_norm', [0.1, 1.0, 10.0])
def test_derive_sample_params(clip_norm, stddev, arity):
    query = tree_query.TreeRangeSumQuery.build_central_gaussian_query(clip_norm, stddev, arity)
    derived_arity, inner_query_params = query.derive_sample_params(query.initial_global_state())
    np.testing.assert_allclose(derived_arity, arity)
    np.testing.assert_allclose(inner_query_params, clip_norm)


@pytest.mark.parametrize(
    'arity, expected_tree',
    [
        (2, [1, 1, 0, 1, 0, 0, 0]),
        (3, [1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0]),
    ],
)
def test_preprocess_record(arity, expected_tree):
    query = tree_query.TreeRangeSumQuery.build_central_gaussian_query(10.0, 0.0, arity)
    params = query.derive_sample_params(query.initial_global_state())
    preprocessed = query.preprocess_record(params, tf.constant([1, 0, 0, 0], dtype=tf.float32))
    np.testing.assert_allclose(preprocessed, expected_tree)
    assert preprocessed.shape == (len(expected_tree),)


@pytest.mark.parametrize(
    'arity, expected_tree',
    [
        (2, [[1], [1, 0], [1, 0, 0, 0]]),
        (3, [[1], [1, 0, 0], [1, 0, 0, 0, 0, 0, 0, 0, 0]]),
    ],
)
def test_get_noised_result(arity, expected_tree):
    query = tree_query.TreeRangeSumQuery.build_central_gaussian_query(10.0, 0.0, arity)
    global_state = query.initial_global_state()
    params = query.derive_sample_params(global_state)
    preprocessed = query.preprocess_record(params, tf.constant([1, 0, 0, 0], dtype=tf.float32))
    tree, new_state, event = query.get_noised_result(preprocessed, global_state)
    assert isinstance(tree, tf.RaggedTensor)
    assert tree.to_list() == [[float(v) for v in row] for row in expected_tree]
    assert isinstance(new_state, tree_query.TreeRangeSumQuery.GlobalState)
    assert type(event).__name__ == 'UnsupportedDpEvent'


@pytest.mark.parametrize('stddev', [0.1, 1.0, 10.0])
def test_central_get_noised_result_with_noise(stddev):
    query = tree_query.TreeRangeSumQuery.build_central_gaussian_query(10.0, stddev)
    global_state = query.initial_global_state()
    params = query.derive_sample_params(global_state)
    preprocessed = query.preprocess_record(params, tf.constant([1.0, 0.0]))
    tree, _, _ = query.get_noised_result(preprocessed, global_state)
    assert tree.shape[0] == 2
    np.testing.assert_allclose(tree.flat_values, [1.0, 1.0, 0.0], atol=10 * stddev)


def test_no_privacy_inner_query_sums_exactly():
    query = tree_query.TreeRangeSumQuery(dp_query.NoPrivacySumQuery(), arity=2)
    assert not query.needs_noise_seed()
    global_state = query.initial_global_state()
    params = query.derive_sample_params(global_state)
    sample = query.initial_sample_state(tf.TensorSpec([3], tf.int32))
    np.testing.assert_array_equal(sample, [0] * 7)
    for record in ([1, 2, 3], [4, 0, 1]):
        sample = query.accumulate_record(params, sample, tf.constant(record))
    tree, _, _ = query.get_noised_result(sample, global_state)
    assert tree.to_list() == [[11], [7, 4], [5, 2, 4, 0]]


def test_noise_seed_reaches_the_gaussian_inner_query():
    query = tree_query.TreeRangeSumQuery.build_central_gaussian_query(10.0, 1.0)
    assert query.needs_noise_seed()
    global_state = query.initial_global_state()
    params = query.derive_sample_params(global_state)
    record = query.preprocess_record(params, tf.constant([1.0, 0.0]))
    seed = tf.constant([3, 4], tf.int64)
    a, _, _ = query.get_noised_result(record, global_state, noise_seed=seed)
    b, _, _ = query.get_noised_result(record, global_state, noise_seed=seed)
    np.testing.assert_array_equal(a.flat_values, b.flat_values)
    assert not np.allclose(a.flat_values, [1.0, 1.0, 0.0])


# --- DP-FTRL: restart indicators, restart and tree residual queries ---------------------------


def _run_query(query, records, global_state=None):
    """TFF's ``test_utils.run_query``: one sample of `records` -> (result, new global state)."""
    if not global_state:
        global_state = query.initial_global_state()
    params = query.derive_sample_params(global_state)
    sample_state = query.initial_sample_state(next(iter(records)))
    for record in records:
        sample_state = query.accumulate_record(params, sample_state, record)
    result, global_state, _ = query.get_noised_result(sample_state, global_state)
    return result, global_state


def _assert_restarts_on_period(indicator, state, total_steps, period, offset):
    for step in range(total_steps):
        flag, state = indicator.next(state)
        assert bool(flag) == (step % period == offset - 1)


@pytest.mark.parametrize('period', [0, -1])
def test_round_raise(period):
    with pytest.raises(ValueError, match='Restart period should be equal or larger than 1'):
        tree_query.PeriodicRoundRestartIndicator(period)


@pytest.mark.parametrize('warmup', [0, -1, 2, 3])
def test_round_raise_warmup(warmup):
    period = 2
    with pytest.raises(ValueError, match=f'Warmup must be between 1 and `period`-1={period - 1}'):
        tree_query.PeriodicRoundRestartIndicator(period, warmup)


@pytest.mark.parametrize('period', [1, 2, 4, 5])
def test_round_indicator(period):
    indicator = tree_query.PeriodicRoundRestartIndicator(period)
    _assert_restarts_on_period(indicator, indicator.initialize(), 20, period, period)


@pytest.mark.parametrize('period, warmup', [(2, 1), (4, 3), (5, 2)])
def test_round_indicator_warmup(period, warmup):
    indicator = tree_query.PeriodicRoundRestartIndicator(period, warmup)
    _assert_restarts_on_period(indicator, indicator.initialize(), 20, period, warmup)


def _l2_clip_fn(record_as_list, clip_value):
    clipped_record, _ = tf.clip_by_global_norm(record_as_list, clip_value)
    return clipped_record


RESET_CASES = [(0.0, 1.0, 1), (1.0, 2.0, 2), (1.0, 5.0, 6)]


def _expected_residual(scalar_value, tree_node_value, i, period):
    # The signal plus the change of the tree noise: the number of nodes covering the
    # leaves so far is the number of 1 bits of the (restarted) step count.
    return scalar_value + tree_node_value * (
        bin(i % period + 1)[2:].count('1') - bin(i % period)[2:].count('1')
    )


@pytest.mark.parametrize('scalar_value, tree_node_value, period', RESET_CASES)
def test_restart_query_scalar_tree_aggregation_reset(scalar_value, tree_node_value, period):
    query = tree_query.TreeResidualSumQuery(
        clip_fn=_l2_clip_fn,
        clip_value=scalar_value + 1.0,  # no clip
        noise_generator=lambda: tree_node_value,
        record_specs=tf.TensorSpec([]),
        use_efficient=False,
    )
    query = tree_query.RestartQuery(query, tree_query.PeriodicRoundRestartIndicator(period))
    global_state = query.initial_global_state()
    params = query.derive_sample_params(global_state)
    for i in range(20):
        sample_state = query.initial_sample_state(scalar_value)
        sample_state = query.accumulate_record(params, sample_state, scalar_value)
        result, global_state, _ = query.get_noised_result(sample_state, global_state)
        assert result == _expected_residual(scalar_value, tree_node_value, i, period)


def test_restart_query_requires_reset_state():
    with pytest.raises(ValueError, match='reset_state'):
        tree_query.RestartQuery(
            dp_query.NoPrivacySumQuery(), tree_query.PeriodicRoundRestartIndicator(2)
        )


@pytest.mark.parametrize(
    'records_num, record_dim, noise_multiplier, seed, total_steps, clip, use_efficient',
    [(3, 5, 1.0, 1, 8, 1.0, True)],
    ids=['r3d5n1s1s8eff'],
)
def test_residual_sums_to_cumulative_sum(
    records_num, record_dim, noise_multiplier, seed, total_steps, clip, use_efficient
):
    record_specs = tf.TensorSpec(shape=[record_dim])
    kwargs = dict(
        clip_norm=clip,
        noise_multiplier=noise_multiplier,
        record_specs=record_specs,
        noise_seed=seed,
        use_efficient=use_efficient,
    )
    query = tree_query.TreeResidualSumQuery.build_l2_gaussian_query(**kwargs)
    sum_query = tree_query.TreeCumulativeSumQuery.build_l2_gaussian_query(**kwargs)
    global_state = query.initial_global_state()
    sum_global_state = sum_query.initial_global_state()
    cumsum_result = tf.zeros(shape=[record_dim])
    rng = np.random.RandomState(seed)
    for _ in range(total_steps):
        records = [
            tf.constant(rng.uniform(0, records_num, [record_dim]), tf.float32)
            for _ in range(records_num)
        ]
        query_result, global_state = _run_query(query, records, global_state)
        sum_query_result, sum_global_state = _run_query(sum_query, records, sum_global_state)
        cumsum_result += query_result
        np.testing.assert_allclose(cumsum_result, sum_query_result, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    'use_efficient, tree_class',
    [(True, tree_query.EfficientTreeAggregator), (False, tree_query.TreeAggregator)],
    ids=['efficient', 'normal'],
)
def test_sum_tree_aggregator_instance(use_efficient, tree_class):
    specs = tf.TensorSpec([])
    query = tree_query.TreeResidualSumQuery(
        clip_fn=_l2_clip_fn,
        clip_value=1.0,
        noise_generator=tree_query.GaussianNoiseGenerator(1.0, specs, seed=1),
        record_specs=specs,
        use_efficient=use_efficient,
    )
    assert isinstance(query._tree_aggregator, tree_class)


def test_derive_metrics():
    specs = tf.TensorSpec([])
    query = tree_query.TreeResidualSumQuery(
        clip_fn=_l2_clip_fn, clip_value=2, noise_generator=lambda: 1.0, record_specs=specs
    )
    metrics = query.derive_metrics(query.initial_global_state())
    assert metrics['tree_agg_dpftrl_clip'] == 2


@pytest.mark.parametrize('scalar_value, tree_node_value, frequency', RESET_CASES)
def test_residual_scalar_tree_aggregation_reset(scalar_value, tree_node_value, frequency):
    query = tree_query.TreeResidualSumQuery(
        clip_fn=_l2_clip_fn,
        clip_value=scalar_value + 1.0,  # no clip
        noise_generator=lambda: tree_node_value,
        record_specs=tf.TensorSpec([]),
        use_efficient=False,
    )
    global_state = query.initial_global_state()
    params = query.derive_sample_params(global_state)
    for i in range(20):
        sample_state = query.initial_sample_state(scalar_value)
        sample_state = query.accumulate_record(params, sample_state, scalar_value)
        result, global_state, _ = query.get_noised_result(sample_state, global_state)
        if i % frequency == frequency - 1:
            global_state = query.reset_state(result, global_state)
        assert result == _expected_residual(scalar_value, tree_node_value, i, frequency)


def test_tree_aggregators_against_node_sums():
    # Every node value 1: the plain noise of step i is the number of nodes covering leaves
    # 0..i, i.e. the 1 bits of i + 1.
    aggregator = tree_query.TreeAggregator(lambda: 1.0)
    state = aggregator.init_state()
    noises = []
    for _ in range(4):
        noise, state = aggregator.get_cumsum_and_update(state)
        noises.append(float(noise))
    assert noises == [1.0, 1.0, 2.0, 1.0]
    # Honaker: a node keeps v + (l + r) / 2 (leaves 1, level 1: 2, level 2: 3), weighted
    # 1 / (2 - 2 ** -level) in the sum: 1, 2 * 2/3, 1 + 2 * 2/3, 3 * 4/7.
    efficient = tree_query.EfficientTreeAggregator(lambda: 1.0)
    state = efficient.init_state()
    noises = []
    for _ in range(4):
        noise, state = efficient.get_cumsum_and_update(state)
        noises.append(float(noise))
    np.testing.assert_allclose(noises, [1.0, 4 / 3, 7 / 3, 12 / 7], rtol=1e-6)


def test_gaussian_noise_generator():
    specs = [tf.TensorSpec([2000]), tf.TensorSpec([3])]
    generator = tree_query.GaussianNoiseGenerator(2.0, specs, seed=7)
    state = generator.initialize()
    np.testing.assert_array_equal(state.seeds, [7, 7])
    first, next_state = generator.next(state)
    again, _ = generator.next(state)
    np.testing.assert_array_equal(first[0], again[0])
    np.testing.assert_array_equal(next_state.seeds, [9, 9])
    assert np.std(first[0]) == pytest.approx(2.0, rel=0.1)
    assert first[1].shape == (3,)


def test_residual_query_in_differentially_private_factory(tff_stack):
    # The tree state's buffers have a dynamic leading dimension (float32[?,3], int32[?]).
    query = tree_query.TreeResidualSumQuery.build_l2_gaussian_query(
        clip_norm=1.0, noise_multiplier=0.0, record_specs=tf.TensorSpec([3]), noise_seed=1
    )
    process = differential_privacy.DifferentiallyPrivateFactory(query).create(
        tff.TensorType(np.float32, [3])
    )
    tree_state_type = process.initialize.type_signature.result.member.query_state.tree_state
    assert tree_state_type.level_buffer == tff.TensorType(np.float32, [None, 3])
    state = process.initialize()
    value = np.array([0.0, 3.0, 4.0], np.float32)  # norm 5, clipped to 1
    buffer_levels = []
    for _ in range(4):
        output = process.next(state, [value])
        np.testing.assert_allclose(output.result, value / 5.0, rtol=1e-6)
        state = output.state
        buffer_levels.append(list(state.query_state.tree_state.level_buffer_idx))
    assert buffer_levels == [[1], [0, 1], [2], [0, 2]]
