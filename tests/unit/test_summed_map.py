"""A sum of a compiled map, summed inside the map's call (`stream_eval.summed_map`).

The partial must be the one the map then the numpy fold give, bit for bit, for a
block starting anywhere (raw head values, whole chunks, an open chunk, the last
chunk); where it cannot be (a NaN or a tiny value among the results, where XLA
flushes subnormal sums to zero and numpy does not) it must decline, and the
caller's map and fold give the bits.
"""

from __future__ import annotations

import asyncio
import collections

import numpy as np
import pytest
import tensorflow as tf

import simharness as sh
from simharness.core.reduction import CHUNK, Reducer, add_trees
from simharness.core.structure import flatten
from simharness.executors.leaf.eager_tf import EagerTFExecutor
from simharness.executors.leaf.stream_eval import summed_map

ARG = collections.OrderedDict(
    w=sh.TensorType(tf.float32, [32, 32]),
    x=sh.TensorType(tf.float32, [4, 32]),
    k=sh.TensorType(tf.int32),
)


def _update(w, x, k):
    # float32 from a matmul (XLA would fuse a multiply and an add: the sums are separate
    # steps), float64, float32 that scales with x, and int32 that wraps when summed
    h = tf.matmul(x, w)
    return collections.OrderedDict(
        delta=h * 3.0 - w[:4] * tf.cast(k, tf.float32),
        stats=tf.cast(tf.reduce_sum(h, axis=0)[:3], tf.float64) / 7.0,
        rows=tf.reduce_sum(h, axis=1),
        count=k * 1_000_000,
    )


compiled = sh.tf_computation(ARG, jit_compile=True)(_update)
graph_runtime = sh.tf_computation(ARG, jit_compile=False)(_update)


def _run(coro):
    return asyncio.run(coro)


def _clients(n, seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((32, 32)).astype(np.float32)
    return [
        collections.OrderedDict(
            w=w,
            x=(rng.standard_normal((4, 32)) * scale).astype(np.float32),
            k=np.int32(rng.integers(-3000, 3000)),
        )
        for _ in range(n)
    ]


def _same(a, b) -> bool:
    if isinstance(a, (list, tuple)) or hasattr(a, 'names'):
        la, lb = flatten(a), flatten(b)
        return len(la) == len(lb) and all(_same(x, y) for x, y in zip(la, lb))
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _assert_same_partial(got, want):
    assert (got.start, got.stop, got.open_chunk) == (want.start, want.stop, want.open_chunk)
    assert len(got.head) == len(want.head)
    assert all(_same(g, w) for g, w in zip(got.head, want.head))
    assert sorted(got.nodes) == sorted(want.nodes)
    assert all(_same(got.nodes[k], want.nodes[k]) for k in want.nodes)
    assert (got.open_acc is None) == (want.open_acc is None)
    if want.open_acc is not None:
        assert _same(got.open_acc, want.open_acc)


async def _partials(ex, comp, values, start, total, kind='sum'):
    fn = await ex.create_value(comp, comp.type_signature)
    args = await ex.create_values(values, comp.type_signature.parameter)
    got = summed_map(ex, kind, fn, args, start, total)
    mapped = await ex.create_map(fn, args)
    want = await ex.create_partial_reduction(kind, mapped, start, total, {})
    return got, want


@pytest.mark.parametrize(
    'start,n,total',
    [
        (0, 40, 40),  # whole chunks, then the last (short) chunk
        (0, 20, 100),  # a chunk, then an open one
        (5, 30, 100),  # raw head values, a chunk, an open chunk
        (3, 9, 100),  # all head values
        (48, 52, 100),  # the longer block of 100 clients on 2 workers
    ],
)
def test_the_partial_is_the_map_then_the_numpy_fold_bit_for_bit(start, n, total):
    values = _clients(n, seed=start)
    with EagerTFExecutor(sums_in_calls=True) as ex:
        got, want = _run(_partials(ex, compiled, values, start, total))
    assert got is not None
    _assert_same_partial(got, want)
    assert len(got.head) == (0 if start % CHUNK == 0 else min(n, CHUNK - start % CHUNK))


def test_partials_of_blocks_combine_to_the_one_block_result_and_a_mean_too():
    values = _clients(70, seed=1)
    reducer = Reducer(lambda v: v, add_trees, add_trees, 70)
    with EagerTFExecutor(sums_in_calls=True) as ex:
        whole, _ = _run(_partials(ex, compiled, values, 0, 70))
        parts = [
            _run(_partials(ex, compiled, values[a:b], a, 70))[0]
            for a, b in [(0, 11), (11, 37), (37, 70)]
        ]
        mean, want_mean = _run(_partials(ex, compiled, values[:30], 0, 70, kind='mean'))
    assert _same(reducer.combine(parts), reducer.combine([whole]))
    _assert_same_partial(mean, want_mean)


@pytest.mark.parametrize('poison', ['nan', 'tiny'])
def test_a_nan_or_a_tiny_result_is_left_to_the_numpy_fold(poison):
    # x scaled to ~1e-33: results below 2**-100 in magnitude (their sums could be
    # subnormal, which XLA flushes to zero and numpy keeps); or one NaN
    values = _clients(20, seed=3, scale=1e-33 if poison == 'tiny' else 1.0)
    if poison == 'nan':
        values[7]['x'][1, 2] = np.nan
    with EagerTFExecutor(sums_in_calls=True) as ex:
        got, want = _run(_partials(ex, compiled, values, 0, 20))
    assert got is None
    assert want.nodes or want.open_acc is not None  # the caller's path still reduces them


def test_it_applies_only_to_compiled_maps_within_the_batch_bound():
    values = _clients(20)
    with EagerTFExecutor(sums_in_calls=True) as ex:
        got, _ = _run(_partials(ex, graph_runtime, values, 0, 20))
        assert got is None  # the graph runtime: the map's own call and the fold
    with EagerTFExecutor(max_batch_size=8, sums_in_calls=True) as ex:
        got, _ = _run(_partials(ex, compiled, values, 0, 20))
        assert got is None  # more clients than a call may take
    with EagerTFExecutor(sums_in_calls=True) as ex:
        fn = _run(ex.create_value(compiled, compiled.type_signature))
        args = _run(ex.create_values(values, compiled.type_signature.parameter))
        assert summed_map(ex, 'max', fn, args, 0, 20) is None  # sums and means only
    with EagerTFExecutor() as ex:  # off unless asked for (workers' executors ask)
        got, want = _run(_partials(ex, compiled, values, 0, 20))
        assert got is None and want is not None
    from simharness.hosts.leaf import worker_service

    service = worker_service()
    try:
        assert service.executor.sums_in_calls
    finally:
        service.close()


def test_the_heap_is_trimmed_once_after_a_compiled_block_s_first_call(monkeypatch):
    # XLA's compiler frees what it allocated but glibc keeps the pages: after a compiled
    # block's first call the process hands them back (`embedded_function.trim_heap`).
    from simharness.executors.leaf import embedded_function

    calls = []
    monkeypatch.setattr(embedded_function, 'trim_heap', lambda: calls.append(1))
    values = _clients(6, seed=9)
    with EagerTFExecutor(sums_in_calls=True) as ex:
        for _ in range(3):
            got, _ = _run(_partials(ex, compiled, values, 0, 6))
            assert got is not None
    assert len(calls) == 2  # the summed call and the batched map, once each
    monkeypatch.undo()
    embedded_function.trim_heap()  # the real one runs (a no-op without glibc)
