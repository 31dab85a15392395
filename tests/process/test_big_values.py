"""Big models on the process stacks (issue 15): reused buffers, exact results, nothing left to the GC."""

from __future__ import annotations

import gc
import types

import numpy as np
import pytest

import simharness as sh
from simharness.core.buffers import POOL
from simharness.stacks import process_executor_factory
from computations import broadcast_aggregate  # tests/computations.py

N = (8 << 20) // 4  # an 8 MB float32 model: above the buffer pool's minimum


@pytest.mark.parametrize('workers', [2, 1])
def test_results_held_by_the_caller_are_never_overwritten(warm_pool, warm_pool_1, workers):
    """On 2 workers the result is the driver's sum of the partials; on 1 worker, a copy of the
    one partial it read in place in the worker's arena. Either is the caller's own."""
    pool = warm_pool if workers == 2 else warm_pool_1
    comp = broadcast_aggregate(N)
    rng = np.random.default_rng(0)
    models = [rng.standard_normal(N).astype(np.float32) for _ in range(4)]
    with process_executor_factory(num_clients=2, pool=pool) as factory:
        with sh.execution_context(factory):
            results = [comp(w) for w in models]  # all held while later calls reuse buffers
            again = comp(models[0])
    for w, r in zip(models, results):
        assert np.array_equal(r, w)  # 2 clients x (w * 0.5): exactly w
    assert np.array_equal(again, models[0])
    assert all(r.flags.writeable for r in results)
    results[0][:] = 0  # the caller owns its result: writing it changes no other
    assert np.array_equal(results[1], models[1]) and np.array_equal(again, models[0])


def _ours(obj) -> bool:
    """Whether `obj` is a value or a function of simharness, numpy or TensorFlow.

    Other garbage can appear while the rounds run (a background thread of an
    earlier test, a finalizer); a reference cycle made by a round holds these.
    """
    module = (
        getattr(obj, '__module__', None)
        if isinstance(obj, types.FunctionType)
        else type(obj).__module__
    )
    return isinstance(module, str) and module.split('.')[0] in ('simharness', 'numpy', 'tensorflow')


def _describe(obj) -> str:
    return f'{type(obj).__module__}.{type(obj).__qualname__}'


def test_steady_rounds_reuse_buffers_and_leave_no_garbage(warm_pool):
    comp = broadcast_aggregate(N)
    w = np.arange(N, dtype=np.float32)
    with process_executor_factory(num_clients=2, pool=warm_pool) as factory:
        with sh.execution_context(factory):
            for _ in range(3):  # warm: tracing, arenas, the pool's buffers
                assert np.array_equal(comp(w), w)
            before = POOL.stats()
            was_enabled = gc.isenabled()
            gc.collect()
            gc.disable()
            gc.set_debug(gc.DEBUG_SAVEALL)
            try:
                for _ in range(3):
                    assert np.array_equal(comp(w), w)
                gc.collect()
                garbage = [_describe(o) for o in gc.garbage if _ours(o)]
            finally:
                gc.set_debug(0)
                gc.garbage.clear()
                if was_enabled:
                    gc.enable()
            after = POOL.stats()
    assert garbage == []
    # The driver's big buffers (the model's tensor; the sum of the workers' partials, which
    # it reads in place in their arenas and hands to the caller as the result) come from
    # the pool, not fresh memory.
    assert after['allocated'] == before['allocated']
    assert after['reused'] - before['reused'] >= 3 * 2


def test_one_result_twice_in_a_struct_gives_two_arrays(warm_pool):
    """The caller gets a reduction's own buffer without a copy, once: a second place of the
    same value in the result is a copy, so writing one leaves the other."""
    twice = broadcast_aggregate(N, twice=True)
    w = np.arange(N, dtype=np.float32)
    with process_executor_factory(num_clients=2, pool=warm_pool) as factory:
        with sh.execution_context(factory):
            a, b = twice(w)
    assert a.flags.writeable and b.flags.writeable
    assert not np.shares_memory(a, b)
    a[:] = -1
    assert np.array_equal(b, w)
