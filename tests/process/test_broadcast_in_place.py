"""Broadcasts read in place (issue 15): one write into shared memory, no copy in the workers.

A big value sent to every worker is written once into a slot of the pool's
broadcast arena; a worker makes its tensor of those bytes without a copy,
and the slot stays as it is until every such tensor is freed (the worker
reports it with a later answer). New values take other slots; when all are
held, the bytes travel with the request as before. Nothing ever waits.
"""

from __future__ import annotations

import asyncio
import gc

import numpy as np
import pytest

import simharness as sh
from simharness.core import types as T
from simharness.core.buffers import SharedReads
from simharness.executors.worker_delegating import WorkerDelegatingExecutor
from simharness.stacks import create_worker_pool, process_executor_factory
from computations import broadcast_aggregate  # tests/computations.py

N = (1 << 20) // 4  # 1 MB float32 values (broadcast, not inline)
SPEC = T.TensorType(np.float32, (N,))


@pytest.fixture
def pool():
    p = create_worker_pool(num_workers=2, clients_per_worker=4)
    yield p
    p.close()


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
                small = await ex.create_value(np.zeros(3, np.float32),
                                              T.TensorType(np.float32, (3,)))
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


def test_a_worker_crash_ends_its_reads():
    with create_worker_pool(num_workers=1, clients_per_worker=4) as p:
        ex = WorkerDelegatingExecutor(p.handles[0])

        async def go():
            v = await ex.create_value(np.ones(N, np.float32), SPEC)
            assert p.broadcast.readers == 1
            p.handles[0]._proc.kill()
            for _ in range(200):
                if not p.handles[0].alive:
                    break
                await asyncio.sleep(0.02)
            await asyncio.to_thread(p.handles[0].ensure_started)
            return v
        try:
            asyncio.run(go())
        finally:
            ex.close()
        assert p.broadcast.readers == 0


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
