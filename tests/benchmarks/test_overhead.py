"""Per-client overhead: a trivial federated_map + federated_sum over 10 ... 10,000 clients.

Baseline: the same client work as a plain TF loop in this process (a
`tf.function` called per client, then `tf.add_n`; with --benchmark-disable
its 10,000-client size is skipped). Ratios in extra_info:
``ms_per_client`` and ``ratio_to_single_process_tf`` (stack median / baseline median).
"""

from __future__ import annotations

import numpy as np
import pytest

from .helpers import STACKS, check_then_time, median_seconds, time_median

NUM_CLIENTS = [10, 100, 1000, 10_000]
# The plain loop over 10,000 clients takes seconds: with --benchmark-disable it is skipped.
PLAIN_NUM_CLIENTS = [10, 100, 1000, pytest.param(10_000, marks=pytest.mark.timing_only)]

on_stacks = pytest.mark.parametrize('simharness_stack', STACKS, indirect=True)


def _values(n: int) -> list:
    # Small integers: every partial sum is exact in float32, so the check is exact.
    return [np.float32(i % 7) for i in range(n)]


def _expected(n: int) -> float:
    return float(sum(i % 7 + 1 for i in range(n)))


def _check(n: int):
    def check(result) -> None:
        assert float(result) == _expected(n), (float(result), _expected(n))

    return check


@pytest.fixture(scope='module')
def map_sum():
    from computations import map_sum_add_one  # tests/computations.py

    return map_sum_add_one()


@pytest.fixture(scope='module')
def plain_tf_map_sum():
    import tensorflow as tf

    @tf.function
    def add_one(x):
        return x + 1.0

    def run(xs):
        return tf.add_n([add_one(x) for x in xs]).numpy()

    return run


def _plain_key(n: int) -> str:
    return f'map_sum_plain_tf[{n}]'


@pytest.mark.parametrize('num_clients', PLAIN_NUM_CLIENTS)
def test_map_sum_plain_tf(benchmark, baselines, plain_tf_map_sum, num_clients):
    """Baseline: the same client work in a plain TF loop, one process."""
    benchmark.group = f'map_sum {num_clients} clients'
    xs = _values(num_clients)
    check_then_time(benchmark, plain_tf_map_sum, (xs,), _check(num_clients))
    t = median_seconds(benchmark)
    baselines.put(_plain_key(num_clients), t)
    if t is not None:
        benchmark.extra_info['ms_per_client'] = 1e3 * t / num_clients


@on_stacks
@pytest.mark.parametrize('num_clients', NUM_CLIENTS)
def test_map_sum(
    simharness_benchmark, simharness_stack, baselines, map_sum, plain_tf_map_sum, num_clients
):
    """federated_sum(federated_map(x + 1)) on the stack; one call = one round."""
    bench = simharness_benchmark
    bench.group = f'map_sum {num_clients} clients'
    xs = _values(num_clients)
    check_then_time(bench, map_sum, (xs,), _check(num_clients))
    t = median_seconds(bench)
    if t is not None:
        plain = baselines.get(
            _plain_key(num_clients), lambda: time_median(lambda: plain_tf_map_sum(xs))
        )
        bench.extra_info.update(
            num_clients=num_clients,
            ms_per_client=1e3 * t / num_clients,
            plain_tf_seconds=plain,
            ratio_to_single_process_tf=t / plain,
        )
