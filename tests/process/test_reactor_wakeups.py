"""Every submit reaches its worker at once: none waits for the reactor's select timeout.

With no more workers than cores, the submitting thread writes the request itself
(`WorkerHandle._send_directly`) and the reactor only reads the answers. Otherwise
(and when the reactor holds the worker's I/O) the reactor writes it, woken by one
byte per batch of submits (a flag says a byte is on its way). Cleared at the
wrong moment, the flag stayed set with an empty pipe and every later submit
waited for the select timeout (0.25 s): the whole suite ran 2x slower. The
reactor counts the passes that found work only after a timeout
(`late_pickups`); a submit that lands just as a select times out can count
one, a lost wake-up counts nearly every call.
"""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.process

CALLS = 300


@pytest.mark.parametrize('direct', [True, False], ids=['sent-directly', 'sent-by-the-reactor'])
def test_sequential_calls_never_wait_for_the_reactor_timeout(direct):
    import simharness as sh
    from computations import map_sum_add_one  # tests/computations.py

    map_sum = map_sum_add_one()

    data = list(np.ones(4, np.float32))
    with sh.framework.process_executor_factory(num_workers=2, start=True) as factory:
        pool = factory.group
        pool.sends_directly = direct
        reactor = pool._reactor
        wakeups = []
        wake = reactor.wake
        reactor.wake = lambda handle=None: (wakeups.append(handle), wake(handle))[-1]
        with sh.execution_context(factory):
            requests = sum(h.stats.requests for h in pool.handles)
            for _ in range(CALLS):
                assert map_sum(data) == 8.0
            requests = sum(h.stats.requests for h in pool.handles) - requests
            late = reactor.late_pickups
    assert late <= 3, f'{late} of {CALLS} calls waited for the reactor timeout'
    if direct:  # the reactor is woken only when it held the worker's I/O (2 % here)
        assert len(wakeups) <= requests // 4, (len(wakeups), requests)
    else:
        assert len(wakeups) >= requests, (len(wakeups), requests)


def test_a_pool_sends_directly_only_while_each_worker_can_have_a_core():
    from simharness.hosts.local_worker import create_worker_pool
    from simharness.runtime.pinning import usable_cpus

    cpus = len(usable_cpus())
    for workers, direct in ((1, True), (cpus, True), (cpus + 1, False)):
        pool = create_worker_pool(num_workers=workers)
        try:
            assert pool.sends_directly is direct, (workers, cpus)
        finally:
            pool.close()
