"""Shared memory read in place (issue 15): no copy of a big value on its way in or out.

Out: a partial reduction's big arrays come back as read-only views of the
worker's response arena, held by a loan (`Partial.loans`) until the driver
has combined them. Meanwhile the worker answers other requests in other
arenas, so a driver waiting for one worker while holding another's partial
never deadlocks, and nothing it holds is overwritten.

In: a big value sent to every worker is written once into a slot of the
pool's broadcast arena; a worker makes its tensor of those bytes without a
copy, and the slot stays as it is until every such tensor is freed (the
worker reports it with a later answer). New values take other slots; when
all are held, the bytes travel with the request as before. Nothing waits.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import os
import signal
import time

import numpy as np
import pytest

import simharness as sh
from simharness.core import types as T
from simharness.core.buffers import SharedReads
from simharness.errors import WorkerCrashedError
from simharness.executors.worker_delegating import WorkerDelegatingExecutor
from simharness.stacks import create_worker_pool, process_executor_factory
from computations import broadcast_aggregate  # tests/computations.py

N = (2 << 20) // 4  # 2 MB float32 values: big enough for the arenas (not inline)
SPEC = T.TensorType(np.float32, (N,))


@pytest.fixture(params=[1])
def pool(request):
    """A private pool of `request.param` workers (these tests kill workers and count arenas)."""
    p = create_worker_pool(num_workers=request.param, clients_per_worker=4)
    yield p
    p.close()


two_workers = pytest.mark.parametrize('pool', [2], indirect=True)


def _worker_segments(pid: int) -> set:
    """The shared-memory segments worker `pid` created (its name prefix)."""
    return {n for n in os.listdir('/dev/shm') if n.startswith(f'simharness_{pid}_')}


async def _partial(ex: WorkerDelegatingExecutor, value: np.ndarray, start: int = 0, total: int = 2):
    vals = await ex.create_values([value, value], SPEC)
    return await ex.create_partial_reduction('sum', vals, start, total, {})


def _node(p) -> np.ndarray:
    (value,) = p.nodes.values()
    return value


def test_partials_are_views_held_until_released_and_answers_go_elsewhere(pool):
    ex = WorkerDelegatingExecutor(pool.handles[0])
    a = np.arange(N, dtype=np.float32)
    b = np.full(N, 3.0, dtype=np.float32)

    async def go():
        pa = await _partial(ex, a)
        held = _node(pa)
        assert pa.loans and not held.flags.writeable and not held.flags.owndata
        # While `pa` is held, the worker answers in another arena: `pa` keeps its bytes.
        partials = [await _partial(ex, b) for _ in range(3)]
        assert np.array_equal(held, a + a)
        for p in partials:
            assert np.array_equal(_node(p), b + b)
        segments_held = _worker_segments(pool.handles[0].pid)
        pa.release()
        pa.release()  # idempotent
        for p in partials:
            p.release()
        # Released: the next answers reuse the freed arenas; the extra ones are closed.
        for _ in range(3):
            p = await _partial(ex, a)
            assert np.array_equal(_node(p), a + a)
            p.release()
        return segments_held

    try:
        segments_held = asyncio.run(go())
    finally:
        ex.close()
    pid = pool.handles[0].pid
    assert len(segments_held) >= 2  # more than one arena while answers were held
    deadline = time.monotonic() + 5
    while len(_worker_segments(pid)) > 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(_worker_segments(pid)) <= 2  # `ResponseArenas(keep=2)`


def test_a_dropped_partial_gives_its_arena_back(pool):
    ex = WorkerDelegatingExecutor(pool.handles[0])
    a = np.ones(N, dtype=np.float32)

    async def go():
        for _ in range(6):
            p = await _partial(ex, a)
            assert np.array_equal(_node(p), a + a)
            del p  # never released by hand: freeing the partial frees its loan

    try:
        asyncio.run(go())
    finally:
        ex.close()
    assert len(_worker_segments(pool.handles[0].pid)) <= 2


def test_a_partial_held_across_a_worker_crash_stays_readable(pool):
    ex = WorkerDelegatingExecutor(pool.handles[0])
    a = np.arange(N, dtype=np.float32)

    async def go():
        vals = await ex.create_values([a, a], SPEC)
        p = await ex.create_partial_reduction('sum', vals, 0, 2, {})
        old = pool.handles[0].pid
        os.kill(old, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while pool.handles[0].alive and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert np.array_equal(_node(p), a + a)  # the mapping outlives the worker
        p.release()  # the worker is gone: nothing to acknowledge
        with pytest.raises(WorkerCrashedError):
            await ex.create_partial_reduction('sum', vals, 0, 2, {})
        p = await _partial(ex, a)  # a new worker, whose arenas are lent as before
        assert pool.handles[0].pid != old and np.array_equal(_node(p), a + a)
        p.release()

    try:
        asyncio.run(go())
    finally:
        ex.close()


def test_threads_sharing_a_pool_get_exact_sums():
    """Threads whose reductions interleave on the same workers: every result exact.

    A thread holds worker 0's partial while it waits for worker 1, whose
    answer to another thread may be queued first: this deadlocks if a worker
    waits for its previous answer to be released before it writes the next.
    """
    comp = broadcast_aggregate(N)
    rng = np.random.default_rng(1)
    models = [rng.standard_normal(N).astype(np.float32) for _ in range(6)]
    with create_worker_pool(num_workers=2, clients_per_worker=1) as pool:

        def run(k):
            with process_executor_factory(num_clients=2, pool=pool) as factory:
                with sh.execution_context(factory):
                    return [np.array_equal(comp(models[k]), models[k]) for _ in range(5)]

        with concurrent.futures.ThreadPoolExecutor(6) as tp:
            results = list(tp.map(run, range(6), timeout=120))
    assert results == [[True] * 5] * 6


# ---------------------------------------------------------------- broadcasts


@two_workers
def test_values_held_in_place_keep_their_bytes_while_later_broadcasts_come(pool):
    bc = pool.broadcast
    executors = [WorkerDelegatingExecutor(h) for h in pool.handles]
    models = [np.full(N, k, dtype=np.float32) for k in range(7)]

    async def go():
        held = []
        for m in models:  # each broadcast to both workers, all kept: slots run out
            held.append([await ex.create_value(m, SPEC) for ex in executors])
        readers = bc.readers  # the workers' tensors hold the slots they were made of
        got = [[np.asarray(await v.compute()) for v in values] for values in held]
        del held  # (no assert above: pytest's rewritten asserts would keep a value alive)
        gc.collect()
        # The workers free the ids with the next requests, and report the slots unpinned.
        for _ in range(2):
            for ex in executors:
                small = await ex.create_value(
                    np.zeros(3, np.float32), T.TensorType(np.float32, (3,))
                )
                await small.compute()  # its answer (and the report) has come
        return readers, got

    try:
        readers, got = asyncio.run(go())
    finally:
        for ex in executors:
            ex.close()
    assert readers == 8  # 4 slots x 2 workers; the 3 later models went with their requests
    for m, values in zip(models, got):
        assert all(np.array_equal(v, m) for v in values)
    assert bc.readers == 0
    assert len(bc._slots) <= 4


@two_workers
def test_rounds_give_exact_results_with_a_broadcast_per_round(pool):
    comp = broadcast_aggregate(N)
    rng = np.random.default_rng(5)
    with process_executor_factory(num_clients=2, pool=pool) as factory:
        with sh.execution_context(factory):
            for _ in range(6):
                w = rng.standard_normal(N).astype(np.float32)
                assert np.array_equal(comp(w), w)
                w[:] = 0  # the caller's array changes: the next broadcast is written again
    assert pool.broadcast.readers <= 2  # at most the last round's, until the next request


def test_a_worker_crash_ends_its_reads(pool):
    ex = WorkerDelegatingExecutor(pool.handles[0])

    async def go():
        v = await ex.create_value(np.ones(N, np.float32), SPEC)
        assert pool.broadcast.readers == 1  # the worker's tensor holds the slot
        os.kill(pool.handles[0].pid, signal.SIGKILL)
        deadline = time.monotonic() + 60  # a bound, not a speed (CI's loaded machine)
        while pool.handles[0].alive and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert not pool.handles[0].alive, 'the killed worker was not seen dead within 60 s'
        await asyncio.to_thread(pool.handles[0].ensure_started)
        return v

    try:
        asyncio.run(go())
    finally:
        ex.close()
    deadline = time.monotonic() + 30
    while pool.broadcast.readers and time.monotonic() < deadline:
        time.sleep(0.02)
    assert pool.broadcast.readers == 0


def test_shared_reads_pin_while_a_view_lives():
    reads = SharedReads()
    backing = np.zeros(1024, np.uint8)
    reads.offer(7, [backing])
    inside = backing[64:128].view(np.float32)
    outside = np.zeros(16, np.float32)
    assert reads.pin(outside) is None
    view = reads.pin(inside)
    assert view is not None and np.shares_memory(view, backing)
    assert reads.close_offer(7) is True  # the view lives on: still pinned
    assert reads.take_unpinned() == []
    del view
    assert reads.take_unpinned() == [7] and reads.pinned() == 0
    reads.offer(8, [backing])
    tmp = reads.pin(inside)
    del tmp  # freed while the request ran: nothing to report
    assert reads.close_offer(8) is False and reads.take_unpinned() == []
