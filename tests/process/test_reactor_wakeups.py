"""Every submit wakes the pool's reactor at once: none waits for its select timeout.

The reactor writes one wake-up byte per batch of submits (a flag says a byte
is on its way). Cleared at the wrong moment, the flag stayed set with an empty
pipe and every later submit waited for the select timeout (0.25 s): the whole
suite ran 2x slower. The reactor counts the passes that found work only after
a timeout (`late_pickups`); a submit that lands just as a select times out can
count one, a lost wake-up counts nearly every call.
"""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.process

CALLS = 300


def test_sequential_calls_never_wait_for_the_reactor_timeout():
    import simharness as sh
    from computations import map_sum_add_one  # tests/computations.py
    map_sum = map_sum_add_one()

    data = list(np.ones(4, np.float32))
    with sh.framework.process_executor_factory(num_workers=2, start=True) as factory:
        with sh.execution_context(factory):
            for _ in range(CALLS):
                assert map_sum(data) == 8.0
            reactor = factory.pool._reactor
            late = reactor.late_pickups
    assert late <= 3, f'{late} of {CALLS} calls waited for the reactor timeout'
