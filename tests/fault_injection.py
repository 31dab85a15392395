"""Fault injection that lands mid-computation without timers (process and remote tests).

`blocking_computation(dir)` is a federated sum whose client computation writes
``dir/started-<x>`` and then waits (TF ops only) for ``dir/release``;
`when_started` waits for the started files, injects a fault and writes
``release``; `kill_mid_computation` is that with a worker of a pool killed.
"""

from __future__ import annotations

import os
import pathlib
import signal
import time
from typing import Any, Callable, Sequence

import psutil
import tensorflow as tf

import simharness as sh

F32 = tf.float32


@sh.tf_computation(tf.float32, tf.int32)
def slow_square(x, n):
    """x * x after about n loop steps of TF work: a client long enough to kill something mid-round."""

    def body(i, acc):
        return i + 1, acc * 1.0000001

    _, acc = tf.while_loop(lambda i, a: i < n, body, [tf.constant(0), x])
    return acc * 0.0 + x * x


def blocking_computation(directory: pathlib.Path) -> Any:
    """A federated sum whose client computation waits for ``release`` in `directory`.

    Each client writes ``started-<x>`` when its computation is running, then spins
    (TF ops only: the graph travels serialized) until the test creates ``release``.
    A worker killed between the two is killed mid-computation, every time.
    Clients' values must be distinct integers (they name the files).
    """
    started = str(directory / 'started-')
    release = str(directory / 'release')

    @sh.tf_computation(F32)
    def wait_for_release(x):
        with tf.control_dependencies(
            [
                tf.io.write_file(
                    tf.strings.join([started, tf.strings.as_string(x, precision=0)]), 'running'
                )
            ]
        ):
            # The pattern depends on the loop counter (an empty suffix), so that no graph
            # optimization treats the file check as loop-invariant.
            (i,) = tf.while_loop(
                lambda i: tf.equal(
                    tf.size(
                        tf.io.matching_files(
                            tf.strings.join(
                                [release, tf.strings.substr(tf.strings.as_string(i), 0, 0)]
                            )
                        )
                    ),
                    0,
                ),
                lambda i: i + 1,
                [tf.constant(0)],
            )
        return x + tf.cast(i, F32) * 0.0

    @sh.federated_computation(sh.type_at_clients(F32))
    def total(xs):
        return sh.federated_sum(sh.federated_map(wait_for_release, xs))

    return total


def when_started(directory: pathlib.Path, data: Sequence[Any], then: Callable[[], None]) -> None:
    """Waits until every client's computation runs (its ``started-<x>`` file exists), calls
    `then` (the fault), then writes ``release`` (also if a step fails).

    With one client per worker, every worker is inside the computation when all
    ``started-<x>`` files exist: the fault lands mid-computation, every time.
    """
    deadline = time.monotonic() + 120
    want = {f'started-{int(x)}' for x in data}
    try:
        while not want <= {p.name for p in directory.iterdir()}:
            assert time.monotonic() < deadline, 'the computations did not start'
            time.sleep(0.01)
        then()
    finally:
        (directory / 'release').write_text('go')


def kill_pid(pid: int, sig: int = signal.SIGKILL, wait_for_death: bool = True) -> None:
    """Sends `sig` to `pid` and waits for its death (gone, or a zombie until reaped)."""
    deadline = time.monotonic() + 120
    os.kill(pid, sig)
    while wait_for_death:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.NoSuchProcess:
            break
        assert time.monotonic() < deadline, f'process {pid} did not die'
        time.sleep(0.01)


def kill_mid_computation(
    pool: Any,
    worker_id: int,
    directory: pathlib.Path,
    data: Sequence[Any],
    sig: int = signal.SIGKILL,
    wait_for_death: bool = True,
) -> None:
    """Waits until every client's computation runs, sends `sig` to `worker_id`, waits
    for its death, then releases the other workers' computations (also if a step fails).

    `wait_for_death=False` is for a signal the worker handles in Python (SIGTERM):
    its handler runs when the blocking op returns, before the worker answers.
    """
    when_started(
        directory, data, lambda: kill_pid(pool.handles[worker_id].pid, sig, wait_for_death)
    )


# ------------------------------------------------------------------ workers that cannot start
# Worker entry points for `WorkerPool.worker_target`: they run `worker_main` itself, with
# the worker's placement step (the first thing it does) made to fail in the given way.


def worker_failing_on_start(conn: Any, worker_id: int, placement: Any, options: Any) -> None:
    """A worker whose placement raises ``RuntimeError('no such device')`` before READY."""
    from simharness.hosts import local_worker as worker
    from simharness.runtime import pinning

    def no_such_device(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError('no such device')

    pinning.apply_placement = no_such_device
    worker.worker_main(conn, worker_id, placement, options)


def worker_killed_on_start(conn: Any, worker_id: int, placement: Any, options: Any) -> None:
    """A worker that is killed with SIGKILL while it places itself, before READY."""
    from simharness.hosts import local_worker as worker
    from simharness.runtime import pinning

    def killed(*args: Any, **kwargs: Any) -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    pinning.apply_placement = killed
    worker.worker_main(conn, worker_id, placement, options)
