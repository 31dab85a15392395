"""Worker entry points for `WorkerPool.worker_target` that must reach TensorFlow: this
module imports neither TensorFlow nor simharness when it loads (a worker unpickles its
target by importing the module, before it is placed; tests/fault_injection.py runs TF at
import)."""

from __future__ import annotations

import time
from typing import Any


def worker_hanging_on_stream_reduce(conn: Any, worker_id: int, placement: Any, config: Any) -> Any:
    """A worker whose service never answers a STREAM_REDUCE request (a deadlock: it
    sleeps, using no CPU); every other request as usual."""
    from simharness.hosts import local_worker as worker
    from simharness.runtime import pinning

    place = pinning.apply_placement

    def place_then_patch(*args: Any, **kwargs: Any) -> None:
        place(*args, **kwargs)
        from simharness.hosts import leaf  # TF work: only once the worker is placed
        from simharness.runtime import protocol as P

        real = leaf.worker_service

        def hanging_service(*a: Any, **k: Any) -> Any:
            service = real(*a, **k)
            handle = service.handle

            def handle_or_hang(req: Any) -> Any:
                if getattr(req, 'op', None) == P.Op.STREAM_REDUCE:
                    while True:
                        time.sleep(3600)
                return handle(req)

            service.handle = handle_or_hang
            return service

        leaf.worker_service = hanging_service  # worker_main imports it after placing

    pinning.apply_placement = place_then_patch
    return worker.worker_main(conn, worker_id, placement, config)
