"""core.buffers (reused aligned buffers), the reductions and tensors made on them, and values
freed without the garbage collector (issue 15: big models at memory speed)."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from simharness.core.buffers import ALIGNMENT, BufferPool, aligned_empty, pooled_copy
from simharness.core.reduction import add_arrays, add_trees, concatenate_rows

MB = 1 << 20


@pytest.fixture
def tf():
    """TensorFlow, its threads pinned as every simharness process pins them (before any op)."""
    tf = pytest.importorskip('tensorflow')
    from simharness.core import determinism

    determinism.pin_tensorflow_threads()
    return tf


def test_aligned_empty_is_aligned_and_c_contiguous():
    for n in (1, 3, 1000, 12345):
        a = aligned_empty((n, 3), np.float32)
        assert a.ctypes.data % ALIGNMENT == 0 and a.flags.c_contiguous and a.shape == (n, 3)


def test_pool_reuses_a_buffer_once_nothing_refers_to_it():
    pool = BufferPool(max_bytes=64 * MB)
    a = pool.empty((MB,), np.float32)
    address = a.ctypes.data
    assert address % ALIGNMENT == 0
    b = pool.empty((MB,), np.float32)
    assert b.ctypes.data != address  # `a` is alive: never handed out twice
    del a
    c = pool.empty((MB,), np.float32)
    assert c.ctypes.data == address
    assert pool.stats()['reused'] == 1 and pool.stats()['allocated'] == 2
    del b, c


def test_pool_keeps_a_buffer_while_a_view_or_a_reshape_lives():
    pool = BufferPool(max_bytes=64 * MB)
    a = pool.empty((MB,), np.float32)
    address = a.ctypes.data
    view = a[10:20].reshape(2, 5)
    del a
    b = pool.empty((MB,), np.float32)
    assert b.ctypes.data != address
    del view
    assert pool.empty((MB,), np.float32).ctypes.data == address


def test_pool_keeps_a_buffer_while_a_tensor_adopted_it(tf):
    pool = BufferPool(max_bytes=64 * MB)
    a = pool.empty((MB,), np.float32)
    a[:] = 3.0
    address = a.ctypes.data
    t = tf.experimental.dlpack.from_dlpack(a.__dlpack__())
    del a
    b = pool.empty((MB,), np.float32)
    b[:] = -1.0  # must not touch the tensor's bytes
    assert b.ctypes.data != address
    assert float(tf.reduce_min(t)) == 3.0 and float(tf.reduce_max(t)) == 3.0
    del t
    assert pool.empty((MB,), np.float32).ctypes.data == address


def test_pool_bounds_its_bytes_and_small_requests_are_not_pooled():
    pool = BufferPool(max_bytes=3 * MB, min_bytes=MB)
    held = [pool.empty((MB // 4,), np.float32) for _ in range(4)]  # 1 MiB each (+64 B)
    assert pool.pooled_bytes <= 3 * MB
    assert pool.stats()['buffers'] == 2
    del held
    small = pool.empty((10,), np.float64)
    assert small.ctypes.data % ALIGNMENT == 0 and pool.stats()['allocated'] == 4
    # Free buffers make room for another size.
    x = pool.empty((MB // 2,), np.float32)  # 2 MiB
    assert pool.pooled_bytes <= 3 * MB
    del x


def test_pooled_copy_is_private_writable_and_equal():
    for a in (
        np.arange(3 * MB // 8, dtype=np.float64),
        np.arange(10, dtype=np.int32),
        np.array(['a', 'bc']),
        np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2],
    ):
        ro = a.copy()
        ro.flags.writeable = False
        c = pooled_copy(ro)
        assert c.flags.writeable and c.flags.c_contiguous
        np.testing.assert_array_equal(c, a)
        assert not np.shares_memory(c, ro)


def test_pooled_reductions_give_numpys_bits():
    rng = np.random.default_rng(0)
    x = rng.standard_normal(MB).astype(np.float32)
    y = rng.standard_normal(MB).astype(np.float32)
    out = add_arrays(x, y)
    assert out.ctypes.data % ALIGNMENT == 0
    assert np.array_equal(out.view(np.uint32), np.add(x, y).view(np.uint32))
    i = np.array([np.iinfo(np.int32).max], np.int32)
    assert add_trees([i], [i])[0][0] == np.int32(-2)  # wraps, as numpy does
    assert add_arrays(np.float32(1), np.float32(2)) == 3
    parts = [rng.standard_normal((2, MB // 4)).astype(np.float32) for _ in range(3)]
    cat = concatenate_rows(parts)
    assert np.array_equal(cat, np.concatenate(parts)) and cat.ctypes.data % ALIGNMENT == 0
    assert np.array_equal(
        concatenate_rows([np.ones((1, 2)), np.zeros((2, 2))]), [[1, 1], [0, 0], [0, 0]]
    )


def test_adopt_tensor_shares_aligned_writable_arrays_only(tf):
    from simharness.executors.leaf.tf_values import adopt_tensor, fast_numpy

    a = aligned_empty((MB,), np.float32)
    a[:] = 2.0
    t = adopt_tensor(a)
    assert np.shares_memory(fast_numpy(t), a)
    ro = a.copy()
    ro.flags.writeable = False
    assert not np.shares_memory(fast_numpy(adopt_tensor(ro)), ro)
    unaligned = (
        np.empty(MB * 4 + 4, np.uint8)[4:].view(np.float32)
        if np.empty(1, np.uint8).ctypes.data % 64
        else aligned_empty((MB + 1,), np.float32)[1:]
    )
    unaligned[:] = 1.0
    assert unaligned.ctypes.data % 64 != 0
    assert float(tf.reduce_sum(adopt_tensor(unaligned))) == float(unaligned.size)
    s = adopt_tensor(np.array([b'x', b'yz'], dtype=object))
    assert s.dtype == tf.string


@pytest.mark.parametrize(
    'value',
    [
        np.float32(2.5),
        np.arange(6, dtype=np.int64).reshape(2, 3),
        np.linspace(-1, 1, 70 * 64, dtype=np.float32).reshape(70, 64),
        np.array([True, False, True]),
        np.array([1.5, -0.25], dtype=np.float16),
        np.arange(5, dtype=np.uint8),
        np.zeros((0, 64), np.float32),
        np.arange(12, dtype=np.float64).reshape(3, 4)[:, ::2],  # not contiguous
        np.arange(4, dtype='>i4'),  # not of native byte order: TF's conversion
        np.array([1 + 2j], dtype=np.complex64),  # not carried by dlpack: TF's conversion
    ],
)
@pytest.mark.parametrize('convert', ['fast_tensor', 'adopt_tensor'])
def test_small_arrays_become_private_tensors_of_the_same_bytes(tf, value, convert):
    """A small array's tensor (a copy adopted through dlpack, or TF's conversion): its
    dtype, shape and bytes, none of its memory."""
    from simharness.executors.leaf import tf_values

    arr = np.asarray(value)
    t = getattr(tf_values, convert)(arr)
    assert t.dtype == tf.as_dtype(arr.dtype.newbyteorder('=')) and tuple(t.shape) == arr.shape
    got = t.numpy()
    assert (
        got.astype(got.dtype.newbyteorder('=')).tobytes()
        == np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder('=')).tobytes()
    )
    assert not np.shares_memory(got, arr)
    if arr.flags.writeable and arr.size:
        before = got.tobytes()
        arr.reshape(-1)[:1] = arr.reshape(-1)[-1:] if arr.size > 1 else 0
        assert t.numpy().tobytes() == before  # a private copy


def test_thread_stack_frees_a_rounds_values_without_the_garbage_collector(tf):
    """No reference cycle keeps a call's tensors: big models reuse memory from the first call."""
    import simharness as sh
    from simharness import stacks
    from computations import broadcast_aggregate  # tests/computations.py

    comp = broadcast_aggregate(MB // 4)

    w = np.arange(MB // 4, dtype=np.float32)
    factory = stacks.local_executor_factory(num_clients=2)
    was_enabled = gc.isenabled()
    try:
        with sh.execution_context(factory):
            assert np.array_equal(comp(w), w)  # warm: tracing, caches
            gc.collect()
            gc.disable()
            gc.set_debug(gc.DEBUG_SAVEALL)
            for _ in range(2):
                assert np.array_equal(comp(w), w)
            gc.collect()
            leaked = [o for o in gc.garbage if isinstance(o, tf.Tensor)]
            gc.set_debug(0)
            gc.garbage.clear()
            assert leaked == []
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if was_enabled:
            gc.enable()
        factory.close()


def test_thread_groups_share_the_broadcast_tensor(tf):
    import asyncio
    from simharness.executors.leaf.eager_tf import EagerTFExecutor
    from simharness.executors.thread_delegating import ThreadDelegatingExecutor

    a = ThreadDelegatingExecutor(EagerTFExecutor(), 'test-a')
    b = ThreadDelegatingExecutor(EagerTFExecutor(), 'test-b')
    other = ThreadDelegatingExecutor(EagerTFExecutor(device='/CPU:0'), 'test-c')
    try:

        async def go():
            v = await a.create_value(np.ones(MB // 4, np.float32), None)
            assert b.can_share(v) and not other.can_share(v)
            w = await b.create_value(v, v.type_signature)
            assert w.internal is v.internal  # the same tensor, no copy
            assert not b.can_share(np.ones(3))

        asyncio.run(go())
    finally:
        for ex in (a, b, other):
            ex.close()


def test_pool_forgets_sizes_that_stop_coming():
    pool = BufferPool(max_bytes=1 << 30, max_sizes=3)
    for k in range(10):  # ten sizes, one after the other (say, shorter last slices)
        pool.empty((MB + 64 * k,), np.uint8)
    assert pool.stats()['buffers'] == 3
    assert pool.pooled_bytes == sum(MB + 64 * k + ALIGNMENT for k in (7, 8, 9))
    held = [pool.empty((MB + 64 * k,), np.uint8) for k in range(5)]  # in use: never dropped
    pool.empty((2 * MB,), np.uint8)
    assert pool.stats()['buffers'] >= 5 and all(h.sum() >= 0 for h in held)
    del held
    pool.empty((3 * MB,), np.uint8)
    assert pool.stats()['buffers'] <= 3 + 1


@pytest.mark.parametrize('start', [0, 5, 16])
def test_big_client_sums_fed_run_by_run_give_the_stacked_bits(tf, monkeypatch, start):
    """Big clients of several runs are summed run by run (no stacking copy): same partial."""
    import asyncio
    from simharness.core import buffers
    from simharness.executors.leaf.eager_tf import EagerTFExecutor

    ex = EagerTFExecutor()
    t = np.float32
    rng = np.random.default_rng(start)
    rows = [
        (rng.standard_normal(MB // 4) * 10.0 ** rng.integers(-3, 4)).astype(t) for _ in range(21)
    ]

    async def partial():
        loose = [await ex.create_value(r, None) for r in rows[:7]]
        block = await ex.create_values(rows[7:19], loose[0].type_signature)  # one stacked run
        tail = [await ex.create_value(r, None) for r in rows[19:]]
        return await ex.create_partial_reduction('sum', loose + block + tail, start, 64, {})

    by_runs = asyncio.run(partial())
    monkeypatch.setattr(buffers.POOL, 'min_bytes', 1 << 40)  # rows "small": stacked at once
    stacked = asyncio.run(partial())
    assert by_runs.head == [] or len(by_runs.head) == len(stacked.head)
    for a, b in zip(by_runs.head, stacked.head):
        assert np.array_equal(np.asarray(a).view(np.uint32), np.asarray(b).view(np.uint32))
    assert sorted(by_runs.nodes) == sorted(stacked.nodes)
    for k in by_runs.nodes:
        assert np.array_equal(
            np.asarray(by_runs.nodes[k]).view(np.uint32),
            np.asarray(stacked.nodes[k]).view(np.uint32),
        ), k
    assert by_runs.open_chunk == stacked.open_chunk
    if by_runs.open_chunk is not None:
        assert np.array_equal(
            np.asarray(by_runs.open_acc).view(np.uint32),
            np.asarray(stacked.open_acc).view(np.uint32),
        )


def test_split_elementwise_gives_one_calls_bits_and_falls_back(monkeypatch):
    from simharness.core import buffers

    monkeypatch.setattr(buffers, '_cpus', lambda: 4)  # split even on a 1-CPU runner
    rng = np.random.default_rng(3)
    x = rng.standard_normal(20 * MB // 4 + 13).astype(np.float32)
    y = rng.standard_normal(x.size).astype(np.float32)
    out = np.empty_like(x)
    buffers.split_elementwise(np.add, out, x, y)
    assert np.array_equal(out, np.add(x, y))
    dst = np.empty_like(x)
    buffers.fast_copyto(dst, x)
    assert np.array_equal(dst, x)
    # Strided inputs and small arrays: one plain call, the same result.
    strided = np.empty(2 * x.size, np.float32)[::2]
    buffers.fast_copyto(strided, x)
    assert np.array_equal(strided, x)
    with pytest.raises(ValueError):  # errors of a split call reach the caller
        buffers.split_elementwise(np.add, out, x, y[:-1])


def test_split_elementwise_reraises_an_error_of_a_helper_thread(monkeypatch):
    from simharness.core import buffers

    monkeypatch.setattr(buffers, '_cpus', lambda: 2)
    calls = []

    def fail_second(a, out):
        calls.append(a.size)
        if len(calls) == 2:
            raise RuntimeError('helper failed')
        np.copyto(out, a)

    x = np.ones(20 * MB // 4, np.float32)
    with pytest.raises(RuntimeError, match='helper failed'):
        buffers.split_elementwise(fail_second, np.empty_like(x), x)
    assert len(calls) == 2
