"""TFF's local C++ factories and contexts share one worker pool per process."""

from __future__ import annotations

import time

import numpy as np
import psutil
import pytest

import simharness as sh
from simharness.backends import native
from simharness.framework import get_context_stack, local_cpp_executor_factory

pytestmark = [pytest.mark.process, pytest.mark.slow]


@sh.tf_computation(np.float32)
def _add_one(x):
    return x + 1.0


@sh.federated_computation(sh.type_at_clients(np.float32))
def _sum_plus_one(xs):
    return sh.federated_sum(sh.federated_map(_add_one, xs))


def _workers(factory) -> set:
    return {w['pid'] for w in factory.stats()['workers'] if w['alive']}


def _running(pids: set) -> set:
    """The pids of `pids` that name a process still running (not a zombie)."""
    out = set()
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.add(pid)
        except psutil.NoSuchProcess:
            pass
    return out


def test_open_factories_share_one_pool_and_the_last_close_stops_it():
    first = local_cpp_executor_factory()
    second = local_cpp_executor_factory(default_num_clients=3)
    context = native.create_sync_local_cpp_execution_context()
    assert first.group is second.group
    with sh.execution_context(first):
        assert _sum_plus_one([1.0, 2.0]) == 5.0
    started = _workers(first)
    assert len(started) >= 1, 'the shared pool runs'
    with sh.execution_context(second):
        assert _sum_plus_one([1.0, 2.0, 3.0]) == 9.0
    with get_context_stack().install(context):
        assert _sum_plus_one([0.0]) == 1.0
    assert _workers(second) == started, 'the other factory and the context start no worker'

    first.close()
    first.close()  # a second close hands nothing back twice
    with sh.execution_context(second):
        assert _sum_plus_one([4.0]) == 5.0, 'the pool outlives a factory closed before the others'
    second.close()
    assert not second.group.closed, 'the context still holds the pool'
    context.close()
    assert second.group.closed
    assert not _running(started), 'the last close stops the workers'

    again = local_cpp_executor_factory()
    try:
        assert again.group is not first.group, 'a factory made after the last close starts afresh'
        with sh.execution_context(again):
            assert _sum_plus_one([1.0]) == 2.0
    finally:
        again.close()
    assert again.group.closed


def _wait_for(predicate, seconds: float = 120.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def test_a_context_starts_its_workers_before_its_first_call():
    """TFF programs set their context, then build and trace: the workers start meanwhile."""
    context = native.create_sync_local_cpp_execution_context()
    factory = local_cpp_executor_factory()
    try:
        pool = factory.group
        assert _wait_for(lambda: pool.started), 'no call made, yet the workers should start'
        started = _workers(factory)
        assert len(started) == pool.num_workers
        with get_context_stack().install(context):
            assert _sum_plus_one([1.0, 2.0]) == 5.0
        assert _workers(factory) == started, 'the first call uses the workers started ahead'
    finally:
        factory.close()
        context.close()
    assert pool.closed and not _running(started)


def test_a_context_closed_while_its_workers_start_leaves_no_process():
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    context = native.create_sync_local_cpp_execution_context()
    context.close()  # waits for the start under way, then stops what it started

    def new_children() -> set:
        return _running({p.pid for p in psutil.Process().children(recursive=True)} - before)

    # the forkserver (one per driver, shared by every pool) may stay; no worker does
    assert _wait_for(lambda: len(new_children()) <= 1, 30.0), new_children()
