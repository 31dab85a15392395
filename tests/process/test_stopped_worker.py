"""A stopped worker (SIGSTOP) is seen from its process state within `stopped_timeout`;
a worker busy in one long TF call (state R) longer than that is never taken for stopped.

Both use tests/fault_injection.py's file barriers: every worker is inside its
client computation when the fault (or the wait) happens.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest

import simharness as sh
from simharness.errors import WorkerTimeoutError
from simharness.stacks import process_executor_factory

from fault_injection import blocking_computation, when_started  # tests/fault_injection.py


@pytest.mark.timeout(120)
def test_a_stopped_worker_fails_fast_and_a_busy_one_is_left_alone(tmp_path):
    busy, stopped, after = tmp_path / 'busy', tmp_path / 'stopped', tmp_path / 'after'
    for d in (busy, stopped, after):
        d.mkdir()
    data = [np.float32(1)]
    # liveness_timeout (no CPU used) is far away: only the process state can explain a fast error.
    with process_executor_factory(
        num_workers=1, clients_per_worker=1, liveness_timeout=20, stopped_timeout=0.5, start=True
    ) as factory:
        pool = factory.group
        assert pool.stopped_timeout == 0.5
        with sh.execution_context(factory):
            # Busy: the worker spins inside one TF call (state R) for 3x stopped_timeout.
            holder = threading.Thread(
                target=when_started, args=(busy, data, lambda: time.sleep(1.5))
            )
            holder.start()
            assert blocking_computation(busy)(data) == 1.0
            holder.join()
            # Stopped: SIGSTOP the worker inside the computation.
            pid = pool.handles[0].pid
            stopper = threading.Thread(
                target=when_started, args=(stopped, data, lambda: os.kill(pid, signal.SIGSTOP))
            )
            t0 = time.monotonic()
            stopper.start()
            with pytest.raises(WorkerTimeoutError) as e:
                blocking_computation(stopped)(data)
            waited = time.monotonic() - t0
            stopper.join()
            err = e.value
            assert err.worker_id == 0 and err.pid == pid and err.reason == 'stopped', err
            assert 'stopped' in str(err) and 'stopped_timeout=0.5' in str(err)
            assert waited < 10, waited
            # Killed (a stopped process cannot clean up) and replaced on next use.
            (after / 'release').write_text('go')
            assert blocking_computation(after)(data) == 1.0
