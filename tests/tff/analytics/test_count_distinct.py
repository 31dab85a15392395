"""Port of TFF's ``tensorflow_federated/python/analytics/count_distinct_test.py`` (all cases).

Added: the estimate of a large count is within HyperLogLog's error
(1.04 / sqrt(32) ~ 18%, checked at 3 sigma), the secure max equals
``federated_max`` on sketches, and the secure computation aggregates only
securely.
"""

import numpy as np
import pytest
import tensorflow as tf

import simharness as tff
from simharness.analytics import count_distinct
from tests.tff.learning.algorithms.learning_test_utils import (
    assert_not_contains_unsecure_aggregation,
)


def hll_sketch_python(values):
    """The HyperLogLog sketch of int64 hashes, straight from the algorithm's definition."""
    ans = np.zeros(count_distinct.HLL_SKETCH_SIZE, dtype=np.int32)
    for val in values:
        binary = bin(val)[2:].zfill(count_distinct.HLL_SKETCH_SIZE)
        j = int(binary[: count_distinct.HLL_BIT_INDEX_HEAD], 2)
        w = binary[count_distinct.HLL_BIT_INDEX_HEAD :]
        rho_w = w.find('1') + 1  # the leftmost 1, from 1; 0 if none
        ans[j] = max(ans[j], rho_w)
    return ans


def test_constants():
    assert count_distinct.HLL_SKETCH_SIZE in [16, 32, 64]
    alpha = {16: 0.673, 32: 0.697, 64: 0.709}[count_distinct.HLL_SKETCH_SIZE]
    assert count_distinct.HLL_ALPHA == alpha
    head = {16: 4, 32: 5, 64: 6}[count_distinct.HLL_SKETCH_SIZE]
    assert count_distinct.HLL_BIT_INDEX_HEAD == head


def test_type_properties():
    client_hyperloglog = count_distinct.build_client_hyperloglog_computation()
    assert client_hyperloglog.type_signature == tff.FunctionType(
        tff.SequenceType(tff.TensorType(np.int64)),
        tff.TensorType(np.int64, [count_distinct.HLL_SKETCH_SIZE]),
    )


@pytest.mark.parametrize('secagg', [False, True], ids=['default', 'secure'])
def test_runs_end_to_end_without_error(tff_stack, secagg):
    data = [['a', 'b', 'c', 'a', 'c'], ['c', 'd', 'd', 'c'], ['a', 'd']]
    hll = count_distinct.create_federated_hyperloglog_computation(use_secagg=secagg)
    assert hll.type_signature.result == tff.FederatedType(np.int64, tff.SERVER)
    count = hll(data)
    assert np.shape(count) == ()
    if secagg:
        assert_not_contains_unsecure_aggregation(hll)
    # 4 distinct strings: 4 of the 32 registers are set (barring collisions) and the raw
    # estimate (no small-range correction, as TFF) is 0.697 * 32**2 / (28 + sum(2**-r)).
    assert 0 < count <= 0.697 * 32**2 / 28


def test_against_python_implementation(tff_stack):
    prng = np.random.RandomState(12345)
    hashed_data = prng.randint(0, 2**count_distinct.HLL_SKETCH_SIZE, size=100)
    client_hyperloglog = count_distinct.build_client_hyperloglog_computation()
    sketch = client_hyperloglog(tf.data.Dataset.from_tensor_slices(hashed_data))
    assert sketch.shape == (count_distinct.HLL_SKETCH_SIZE,)
    np.testing.assert_array_equal(sketch, hll_sketch_python(hashed_data))


def test_federated_secure_max(tff_stack):
    input1 = [
        3,
        1,
        4,
        1,
        5,
        9,
        2,
        6,
        5,
        3,
        5,
        8,
        9,
        7,
        9,
        3,
        2,
        3,
        8,
        4,
        6,
        2,
        6,
        4,
        3,
        3,
        8,
        0,
        0,
        0,
        0,
        0,
    ]
    input2 = [
        2,
        7,
        1,
        8,
        2,
        8,
        1,
        8,
        2,
        8,
        4,
        5,
        9,
        0,
        4,
        5,
        2,
        3,
        5,
        3,
        6,
        0,
        2,
        8,
        7,
        4,
        7,
        0,
        0,
        0,
        0,
        0,
    ]
    input3 = [
        1,
        6,
        1,
        8,
        0,
        3,
        3,
        9,
        8,
        8,
        7,
        4,
        9,
        8,
        9,
        4,
        8,
        4,
        8,
        2,
        0,
        4,
        5,
        8,
        6,
        8,
        3,
        0,
        0,
        0,
        0,
        0,
    ]
    expect = [
        3,
        7,
        4,
        8,
        5,
        9,
        3,
        9,
        8,
        8,
        7,
        8,
        9,
        8,
        9,
        5,
        8,
        4,
        8,
        4,
        6,
        4,
        6,
        8,
        7,
        8,
        8,
        0,
        0,
        0,
        0,
        0,
    ]
    federated_max = count_distinct.build_federated_secure_max_computation()
    np.testing.assert_array_equal(federated_max([input1, input2, input3]), expect)


def test_estimate_of_a_large_count(tff_stack):
    n = 800
    words = [f'word{i}' for i in range(n)]
    hll = count_distinct.create_federated_hyperloglog_computation()
    count = hll([words[:500], words[300:], words[100:200]])
    assert abs(count - n) < 3 * 1.04 / np.sqrt(32) * n
