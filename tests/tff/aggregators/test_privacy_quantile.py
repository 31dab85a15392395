"""Port of TFF's ``aggregators/privacy/quantile_test.py``: the ``QAdaClipTreeResSumQuery`` cases.

Condensed (the other classes there are covered by test_quantile_estimation.py
and test_differential_privacy.py): ``test_adaptation_target_zero`` and
``..._target_one_geometric`` (both ``reset`` modes), ``test_adaptation_linspace``
(one of its four start/update modes; 12 rounds, checked after 8, not 50
and 40), ``..._linspace_noise`` (one of four) and ``test_adaptation_clip_noise``
(50 rather than 1000 samples), to run in seconds. Left out (the same code
paths): ``..._target_zero_geometric``, ``..._target_one``, ``..._all_equal``,
``..._all_equal_noise``, ``..._linspace_noise_converge``.
Added: an int ``noise_seed`` makes all the noise (the clipped-count tree's
too, clock-seeded in TFF) reproducible.
"""

import numpy as np
import pytest
import tensorflow as tf

from simharness.aggregators.privacy import quantile as quantile_query


def run_query(query, records, global_state=None):
    """TFF's ``test_utils.run_query``: one round of `query` over `records`."""
    if global_state is None:
        global_state = query.initial_global_state()
    params = query.derive_sample_params(global_state)
    sample_state = query.initial_sample_state(records[0])
    for record in records:
        sample_state = query.accumulate_record(params, sample_state, record)
    result, global_state, _ = query.get_noised_result(sample_state, global_state)
    return result, global_state


def _query(**kwargs):
    args = dict(
        noise_multiplier=0.0,
        record_specs=tf.TensorSpec([]),
        learning_rate=0.0,
        clipped_count_stddev=0.0,
        expected_num_records=2.0,
    )
    args.update(kwargs)
    return quantile_query.QAdaClipTreeResSumQuery(**args)


@pytest.mark.parametrize(
    'clip,record1', [(10.0, [2.0, 0.0]), (5.0, [-6.0, 8.0])], ids=['no_clip', 'with_clip']
)
def test_sum_no_noise(clip, record1):
    record2 = [-1.0, 1.0] if clip == 10.0 else [4.0, -3.0]  # [-6, 8] is clipped to [-3, 4]
    query = _query(
        initial_l2_norm_clip=clip, record_specs=tf.TensorSpec([2]), target_unclipped_quantile=1.0
    )
    result, _ = run_query(query, [tf.constant(record1), tf.constant(record2)])
    np.testing.assert_allclose(result.numpy(), [1.0, 1.0], rtol=1e-6)


def test_sum_with_noise():
    size, stddev, clip = 1000, 1.0, 5.0
    query = _query(
        initial_l2_norm_clip=clip,
        noise_multiplier=stddev / clip,
        record_specs=tf.TensorSpec([size]),
        target_unclipped_quantile=1.0,
        noise_seed=1,
    )
    result, _ = run_query(
        query, [tf.constant(2.71828, shape=[size]), tf.constant(3.14159, shape=[size])]
    )
    assert abs(np.std(result.numpy()) - stddev) < 0.1
    assert not query.needs_noise_seed()


def _check_estimate_clip_expected_sum(query, records, expected_sums, expected_clips, reset):
    global_state = query.initial_global_state()
    for expected_sum, expected_clip in zip(expected_sums, expected_clips):
        initial_clip = global_state.sum_state.clip_value
        actual_sum, global_state = run_query(query, records, global_state)
        if reset:
            global_state = query.reset_state(actual_sum, global_state)
            np.testing.assert_allclose(
                global_state.sum_state.clip_value.numpy(), expected_clip, rtol=1e-5
            )
            np.testing.assert_allclose(actual_sum.numpy(), (expected_sum,), atol=1e-5)
        else:
            np.testing.assert_allclose(global_state.sum_state.clip_value.numpy(), initial_clip)
            np.testing.assert_allclose(
                global_state.quantile_estimator_state.current_estimate.numpy(),
                expected_clip,
                rtol=1e-5,
            )
            np.testing.assert_allclose(actual_sum.numpy(), (expected_sums[0],), atol=1e-5)


@pytest.mark.parametrize('reset', [True, False], ids=['adaptive', 'constant'])
def test_adaptation_target_zero(reset):
    query = _query(
        initial_l2_norm_clip=10.0,
        target_unclipped_quantile=0.0,
        learning_rate=1.0,
        geometric_update=False,
    )
    assert query.initial_global_state().sum_state.clip_value.numpy() == 10.0
    # Nothing clipped for two rounds (clip -1.0 each), then one record (-0.5),
    # then both: the clip stays at 7.0.
    _check_estimate_clip_expected_sum(
        query,
        [tf.constant([8.5]), tf.constant([-7.25])],
        [1.25, 1.25, 0.75, 0.25, 0.0],
        [9.0, 8.0, 7.5, 7.0, 7.0],
        reset,
    )


@pytest.mark.parametrize('reset', [True, False], ids=['adaptive', 'constant'])
def test_adaptation_target_one_geometric(reset):
    query = _query(
        initial_l2_norm_clip=0.5,
        target_unclipped_quantile=1.0,
        learning_rate=np.log(2.0),
        geometric_update=True,
    )
    two_root_two = 2 * np.sqrt(2.0)
    _check_estimate_clip_expected_sum(
        query,
        [tf.constant([-1.5]), tf.constant([3.0])],
        [0.0, 0.0, 0.5, two_root_two - 1.5, 1.5],
        [1.0, 2.0, two_root_two, 4.0, 4.0],
        reset,
    )


@pytest.mark.parametrize('start_low,geometric', [(False, True)], ids=['start_high_geometric'])
def test_adaptation_linspace(start_low, geometric):
    num_records = 21
    records = [tf.constant(x) for x in np.linspace(0.0, 10.0, num=num_records, dtype=np.float32)]
    query = _query(
        initial_l2_norm_clip=(1.0 if start_low else 10.0),
        target_unclipped_quantile=0.5,
        learning_rate=1.0,
        expected_num_records=num_records,
        geometric_update=geometric,
    )
    global_state = query.initial_global_state()
    for t in range(12):  # TFF: 50 rounds, checked after 40
        actual_sum, global_state = run_query(query, records, global_state)
        if t > 8:
            global_state = query.reset_state(actual_sum, global_state)
            assert abs(global_state.sum_state.clip_value.numpy() - 5.0) < 0.25


@pytest.mark.parametrize('start_low,geometric', [(False, True)], ids=['start_high_geometric'])
def test_adaptation_linspace_noise(start_low, geometric):
    num_records, size, noise_multiplier = 11, 1000, 0.1
    records = [
        tf.constant(size ** (-0.5) * x, shape=[size], dtype=tf.float32)
        for x in np.linspace(0.0, 10.0, num=num_records)
    ]
    query = _query(
        initial_l2_norm_clip=(1.0 if start_low else 10.0),
        noise_multiplier=noise_multiplier,
        record_specs=tf.TensorSpec([size]),
        target_unclipped_quantile=0.5,
        learning_rate=1.0,
        expected_num_records=num_records,
        geometric_update=geometric,
        noise_seed=1,
    )
    global_state = query.initial_global_state()
    for _ in range(10):
        actual_sum, global_state = run_query(query, records, global_state)
        expected_std = global_state.sum_state.clip_value * noise_multiplier
        np.testing.assert_allclose(
            global_state.sum_state.tree_state.value_generator_state.stddev, expected_std, rtol=1e-5
        )
        global_state = query.reset_state(actual_sum, global_state)
        np.testing.assert_allclose(tf.math.reduce_std(actual_sum), expected_std, rtol=0.15)


def test_adaptation_clip_noise():
    samples_num, stddev, initial_clip, expected_num_records = 50, 0.1, 5.0, 2.0
    query = _query(
        initial_l2_norm_clip=initial_clip,
        target_unclipped_quantile=0.5,
        learning_rate=1.0,
        clipped_count_stddev=stddev,
        expected_num_records=expected_num_records,
        geometric_update=False,
        noise_seed=1,
    )
    global_state = query.initial_global_state()
    samples = []
    for _ in range(samples_num):
        noised, global_state = run_query(query, [tf.constant(1.0), tf.constant(10.0)], global_state)
        samples.append(noised.numpy())
        global_state = query.reset_state(noised, global_state)
        assert global_state.quantile_estimator_state.current_estimate != initial_clip
        global_state = global_state._replace(
            quantile_estimator_state=global_state.quantile_estimator_state._replace(
                current_estimate=initial_clip
            )
        )
    # 1 (unclipped) + 5 (clipped) = 6.
    np.testing.assert_allclose(np.mean(samples), 6.0, atol=4 * stddev)
    np.testing.assert_allclose(np.std(samples), stddev / expected_num_records, rtol=0.3)


def test_int_noise_seed_makes_all_noise_reproducible():
    def rounds():
        query = _query(
            initial_l2_norm_clip=1.0,
            noise_multiplier=0.5,
            record_specs=tf.TensorSpec([3]),
            target_unclipped_quantile=0.5,
            learning_rate=0.2,
            clipped_count_stddev=0.5,
            noise_seed=7,
        )
        global_state, out = query.initial_global_state(), []
        for _ in range(3):
            result, global_state = run_query(query, [tf.ones([3]), 2 * tf.ones([3])], global_state)
            global_state = query.reset_state(result, global_state)
            out.append(np.append(result.numpy(), global_state.sum_state.clip_value.numpy()))
        return np.stack(out)

    first = rounds()
    np.testing.assert_array_equal(first, rounds())
    assert not np.allclose(first[0, :3], 3.0)  # noised
