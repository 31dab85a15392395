"""Port of TFF's ``analytics/hierarchical_histogram/hierarchical_histogram_lib_test.py``.

Each execution case runs both ``build_hierarchical_histogram_computation``
and ``build_hierarchical_histogram_process``, as TFF's. Condensed (building
a case's computation and process traces ~20 TF functions, 1-3 s): of TFF's 4
cases each, the no-noise ``wo_clip`` test runs ``test_binary_1`` (secure sum;
on the thread stack and on 2 worker processes, with the same result) and the
central-gaussian ``wo_clip`` test ``test_binary_1`` (noise multiplier 5,
secure sum). Left out: the two ``w_clip`` tests (the clipping through the
factory is checked in test_hierarchical_histogram_factory.py, and TFF's
central-gaussian ``w_clip`` passes no noise multiplier); ``test_secure_sum``
checks the central-gaussian computation (and process) only. All error and
client-work cases run.
"""

import functools
from unittest import mock

import numpy as np
import pytest
import tensorflow as tf

from simharness.analytics.hierarchical_histogram import hierarchical_histogram_lib as hihi
from tests.tff.learning.algorithms.learning_test_utils import (
    assert_not_contains_unsecure_aggregation,
)

MOCK_TIME_SECONDS = 314159.2653
EXPECTED_ROUND_TIMESTAMP = 314159


def _ds(values):
    return tf.data.Dataset.from_tensor_slices(values)


@pytest.mark.parametrize(
    'values, data_range, num_bins, reference',
    [
        ([1.0, 2.0, 3.0, 4.0], [1, 5], 4, [1.0, 1.0, 1.0, 1.0]),
        ([2.0, 7.0, 5.0, 3.0], [1, 8], 7, [0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0]),
    ],
)
def test_discretized_histogram_counts(values, data_range, num_bins, reference):
    histogram = hihi._discretized_histogram_counts(
        _ds(values), data_range[0], data_range[1], num_bins
    )
    np.testing.assert_allclose(histogram, reference)


def test_discretized_histogram_counts_drops_records_outside_the_range():
    histogram = hihi._discretized_histogram_counts(_ds([0.5, 1.0, 2.9, 3.0, 5.0]), 1.0, 3.0, 2)
    np.testing.assert_array_equal(histogram, [1, 1])
    with pytest.raises(ValueError, match='tf.float32'):
        hihi._discretized_histogram_counts(_ds([1, 2]), 1.0, 3.0, 2)


@pytest.mark.parametrize(
    'data_range, num_bins',
    [([2, 1], 4), ([1, 2], 0)],
    ids=['test_data_range_error', 'test_num_bins_error'],
)
def test_discretized_histogram_counts_raises(data_range, num_bins):
    with pytest.raises(ValueError):
        hihi._discretized_histogram_counts(
            _ds(np.zeros(4, dtype=np.float32)), data_range[0], data_range[1], num_bins
        )


ERROR_CASES = [
    ([2, 1], 1, 2, 'sub-sampling', 1, 'central-gaussian', 0.1),
    ([1, 2], 0, 2, 'sub-sampling', 1, 'central-gaussian', 0.1),
    ([1, 2], 1, 1, 'sub-sampling', 1, 'central-gaussian', 0.1),
    ([1, 2], 1, 2, 'invalid', 1, 'central-gaussian', 0.1),
    ([1, 2], 1, 2, 'sub-sampling', 0, 'central-gaussian', 0.1),
    ([1, 2], 1, 2, 'sub-sampling', 1, 'invalid', 0.1),
    ([1, 2], 1, 2, 'sub-sampling', 1, 'central-gaussian', -0.1),
]
ERROR_IDS = [
    'data_range_error',
    'num_bins_error',
    'arity_error',
    'clip_mechanism_error',
    'max_records_per_user_error',
    'dp_mechanism_error',
    'noise_multiplier_error',
]


@pytest.mark.parametrize(
    'builder',
    [hihi.build_hierarchical_histogram_computation, hihi.build_hierarchical_histogram_process],
    ids=['hh_computation', 'hh_process'],
)
@pytest.mark.parametrize('case', ERROR_CASES, ids=ERROR_IDS)
def test_raises_error(builder, case):
    data_range, num_bins, arity, clip_mechanism, max_records, dp_mechanism, noise = case
    with pytest.raises(ValueError):
        builder(
            lower_bound=data_range[0],
            upper_bound=data_range[1],
            num_bins=num_bins,
            arity=arity,
            clip_mechanism=clip_mechanism,
            max_records_per_user=max_records,
            dp_mechanism=dp_mechanism,
            noise_multiplier=noise,
        )


def _ragged(result):
    hist = result.aggregated_hierarchical_histogram
    return tf.RaggedTensor.from_nested_row_splits(
        flat_values=hist['flat_values'], nested_row_splits=hist['nested_row_splits']
    )


@functools.lru_cache(maxsize=None)
def _build(
    data_range,
    num_bins,
    arity=2,
    clip_mechanism='sub-sampling',
    max_records_per_user=10,
    dp_mechanism='no-noise',
    noise_multiplier=0.0,
    enable_secure_sum=False,
):
    """``(computation, process)`` of these arguments, built once per module."""
    kwargs = dict(
        lower_bound=data_range[0],
        upper_bound=data_range[1],
        num_bins=num_bins,
        arity=arity,
        clip_mechanism=clip_mechanism,
        max_records_per_user=max_records_per_user,
        dp_mechanism=dp_mechanism,
        noise_multiplier=noise_multiplier,
        enable_secure_sum=enable_secure_sum,
    )
    return (
        hihi.build_hierarchical_histogram_computation(**kwargs),
        hihi.build_hierarchical_histogram_process(**kwargs),
    )


def _results(values, *args, **kwargs):
    """The trees of the computation and of the process's first round on `values`."""
    computation, process = _build(*args, **kwargs)
    client_data = [_ds(v) for v in values]
    process_result, _ = process.next(process.initialize(), client_data)
    return _ragged(computation(client_data)), _ragged(process_result)


def _assert_tree_close(tree, reference, atol=0.0):
    assert tree.shape[0] == len(reference)
    for layer, expected in zip(tree.to_list(), reference):
        np.testing.assert_allclose(layer, expected, atol=atol)


BINARY_1 = ([[1.0, 2.0, 3.0, 4.0], [1.0, 1.0, 3.0, 3.0]], (1, 5), 4, 2)
CENTRAL_ARGS = dict(
    max_records_per_user=4,
    dp_mechanism='central-gaussian',
    noise_multiplier=5.0,
    enable_secure_sum=True,
)


def test_central_no_noise_hierarchical_histogram_wo_clip_on_both_stacks(stack_registry):
    values, data_range, num_bins, arity = BINARY_1
    reference = [[8], [4, 4], [3, 1, 3, 1]]
    trees = {}
    for name in ('local', 'process-2'):
        with stack_registry.open(name):
            trees[name] = _results(
                values, data_range, num_bins, arity, max_records_per_user=4, enable_secure_sum=True
            )
    for tree in trees['local'] + trees['process-2']:
        assert tree.dtype == tf.int32
        _assert_tree_close(tree, reference)
    assert trees['local'][0].to_list() == trees['process-2'][0].to_list()


def test_central_gaussian_hierarchical_histogram_wo_clip(tff_stack):
    values, data_range, num_bins, arity = BINARY_1
    for tree in _results(values, data_range, num_bins, arity, **CENTRAL_ARGS):
        assert tree.dtype == tf.float32
        # 300: a rough six sigma (TFF's bound).
        _assert_tree_close(
            tree,
            [[8.0], [4.0, 4.0], [3.0, 1.0, 3.0, 1.0]],
            atol=300.0 * CENTRAL_ARGS['noise_multiplier'],
        )


def test_secure_sum():
    _, data_range, num_bins, arity = BINARY_1
    computation, process = _build(data_range, num_bins, arity, **CENTRAL_ARGS)
    assert_not_contains_unsecure_aggregation(computation)
    assert_not_contains_unsecure_aggregation(process.next)


def test_round_timestamp(tff_stack):
    client_data = [_ds([1.0, 2.0, 3.0, 4.0]), _ds([1.0, 1.0, 3.0, 3.0])]
    with mock.patch('tensorflow.timestamp', side_effect=lambda: np.float64(MOCK_TIME_SECONDS)):
        computation = hihi.build_hierarchical_histogram_computation(
            lower_bound=1, upper_bound=5, num_bins=4
        )
        process = hihi.build_hierarchical_histogram_process(
            lower_bound=1, upper_bound=5, num_bins=4
        )
    initial_state = process.initialize()
    assert initial_state.round_timestamp == 0
    np.testing.assert_array_equal(
        initial_state.aggregated_hierarchical_histogram['flat_values'], np.zeros(7)
    )
    process_result, _ = process.next(initial_state, client_data)
    assert computation(client_data).round_timestamp == EXPECTED_ROUND_TIMESTAMP
    assert process_result.round_timestamp == EXPECTED_ROUND_TIMESTAMP
