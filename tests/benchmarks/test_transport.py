"""Transport: broadcast a server model to 2 clients and aggregate it back, for 1, 16, 128 MB.

One call: ``federated_sum(federated_map(x * 0.5, federated_broadcast(w)))``
with 2 clients, which is exactly ``w`` (checked bit for bit).

Baseline: ``np.copyto`` of the model's bytes, the limit for moving them.
In extra_info:

* ``bytes_moved``: bytes written to and read from the workers' shared memory
  per call (``factory.stats()``); on the thread stack nothing crosses a
  process boundary and it is the nominal 2 x model (in and out).
* ``fraction_of_memcpy_bandwidth``: (bytes_moved / median) / (model bytes /
  memcpy median): 1.0 would be memcpy speed.
* ``ratio_to_memcpy``: median / memcpy median of one model.

With ``--benchmark-disable`` the 128 MB size is skipped.
"""

from __future__ import annotations

import numpy as np
import pytest

from computations import broadcast_aggregate  # noqa: E402  (tests/computations.py)

from .helpers import MB, STACKS, check_then_time, median_seconds, time_median

SIZES_MB = [1, 16, pytest.param(128, marks=pytest.mark.timing_only)]
NUM_CLIENTS = 2

on_stacks = pytest.mark.parametrize('simharness_stack', STACKS, indirect=True)


def _model(mb: int) -> np.ndarray:
    return np.random.default_rng(mb).standard_normal(mb * MB // 4).astype(np.float32)


def _memcpy_key(mb: int) -> str:
    return f'memcpy[{mb}MB]'


def _memcpy_seconds(w: np.ndarray) -> float:
    dst = np.empty_like(w)
    return time_median(lambda: np.copyto(dst, w), repeat=9)


@pytest.mark.parametrize('mb', SIZES_MB)
def test_memcpy(benchmark, baselines, mb):
    """Baseline: np.copyto of the model's bytes into a preallocated array."""
    benchmark.group = f'broadcast+aggregate {mb} MB'
    w = _model(mb)
    dst = np.empty_like(w)

    def check(_):
        assert np.array_equal(dst, w)

    check_then_time(benchmark, np.copyto, (dst, w), check, target_seconds=0.5, max_rounds=200)
    t = median_seconds(benchmark)
    baselines.put(_memcpy_key(mb), t)
    if t is not None:
        benchmark.extra_info['gb_per_second'] = w.nbytes / t / 1e9


@on_stacks
@pytest.mark.parametrize('mb', SIZES_MB)
def test_broadcast_aggregate(simharness_benchmark, simharness_stack, baselines, mb):
    """Broadcast + aggregate of an `mb` MB model with 2 clients."""
    bench = simharness_benchmark
    bench.group = f'broadcast+aggregate {mb} MB'
    w = _model(mb)
    comp = broadcast_aggregate(w.size)

    def check(result):
        assert np.array_equal(np.asarray(result), w)

    with simharness_stack.clients(NUM_CLIENTS):
        before = simharness_stack.stats()
        # At least 8 rounds: the first round or two after the checked call still fault in
        # the buffers a round keeps alive (the previous result), as a user's loop does.
        check_then_time(bench, comp, (w,), check, target_seconds=2.0, min_rounds=8)
        after = simharness_stack.stats()
    t = median_seconds(bench)
    if t is None:
        return
    calls = bench.stats.stats.rounds + 1  # the timed rounds and the checked call
    if before is not None:
        moved = (
            (after['bytes_to_workers'] - before['bytes_to_workers'])
            + (after['bytes_from_workers'] - before['bytes_from_workers'])
        ) / calls
    else:
        moved = 2 * w.nbytes
    memcpy = baselines.get(_memcpy_key(mb), lambda: _memcpy_seconds(w))
    bench.extra_info.update(
        model_bytes=w.nbytes,
        num_clients=NUM_CLIENTS,
        bytes_moved=moved,
        memcpy_seconds=memcpy,
        ratio_to_memcpy=t / memcpy,
        fraction_of_memcpy_bandwidth=(moved / t) / (w.nbytes / memcpy),
        gb_per_second=moved / t / 1e9,
    )
