"""The Ray actor: a `WorkerService` in a long-lived actor (a host, see `simharness.hosts`).

`RayWorkers` (`simharness.runtime.ray.workers`, the driver side) makes it a
Ray actor class (``ray.remote(RayWorker)``) and calls `start(placement)` once
and `call(incarnation, header, buffers)` per request; the actor builds its
leaf executor, so it lives above `runtime/`.
"""

from __future__ import annotations

import os
import secrets
import socket
import sys
import time
import traceback
from typing import Any, Dict, List, Optional

import psutil

from simharness.runtime import protocol as P
from simharness.runtime.local import lifeline
from simharness.runtime.pinning import apply_placement
from simharness.runtime.ray.placement import placement_from_dict
from simharness.tfquiet import import_tensorflow, quiet_stderr


class RayWorker:
    """The actor: one `WorkerService` (EagerTF executor) in a Ray worker process.

    Made a Ray actor class by `RayWorkers` (``ray.remote(RayWorker)``); its
    constructor does no TF work, so a restarted actor is cheap until the
    driver starts it again with its placement.

    Args:
      slot: the worker slot (for error messages).
      options: ``clients_per_worker`` (most clients per TF call) and
        ``profile`` (log each request's op and time to stderr).
    """

    def __init__(self, slot: int, options: Dict[str, Any]):
        os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
        self.slot = slot
        self.options = dict(options)
        self.incarnation = secrets.token_hex(8)
        self.service: Any = None
        self.placement: Optional[Dict[str, Any]] = None

    def describe(self) -> Dict[str, Any]:
        """Where this actor runs: node id and address, pid, usable cores, GPUs Ray gave it."""
        import ray  # reason: optional dependency (simharness[ray]), present in an actor

        ctx = ray.get_runtime_context()
        try:
            cpus = sorted(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            cpus = list(range(os.cpu_count() or 1))
        gpus = [int(g) if str(g).isdigit() else g for g in ray.get_gpu_ids()]
        return {
            'node_id': ctx.get_node_id(),
            'node_ip': ray.util.get_node_ip_address(),
            'hostname': socket.gethostname(),
            'pid': os.getpid(),
            'cpus': cpus,
            'gpu_ids': gpus,
            'incarnation': self.incarnation,
            'started': self.service is not None,
            'placement': self.placement,
        }

    def start(self, placement: Dict[str, Any]) -> Dict[str, Any]:
        """Pins this process, builds the executor and service (once); returns `describe()`."""
        if self.service is None:
            # Temporary files (autograph's) in a directory of this actor's own, and those of
            # actors and drivers killed before on this machine removed (`ray.kill` runs no
            # exit handler).
            lifeline.reap_orphaned_temp_dirs()
            lifeline.use_own_temp_dir()
            pl = placement_from_dict(placement)
            with quiet_stderr():
                apply_placement(pl)
            import_tensorflow(keras=False)  # an actor runs graphs: Keras only on first use
            with quiet_stderr():
                __import__('tensorflow').config.list_physical_devices()
            # Imported once placed (reason: the leaf's modules use TF, and an actor pins
            # its threads and devices before TF initializes).
            from simharness.hosts.leaf import worker_service

            device = '/GPU:0' if pl.gpu is not None else None
            self.service = worker_service(self.slot, device, self.options.get('clients_per_worker'))
            self.placement = dict(placement)
        return self.describe()

    def call(self, incarnation: str, header: bytes, buffers: List[Any]) -> Any:
        """One protocol request: codec bytes in, codec bytes out.

        Returns ``(header, buffers)`` of the `Response`, or None when this
        actor is not the started incarnation the driver addressed (Ray
        restarted it: the driver's values here are gone).
        """
        if self.service is None or incarnation != self.incarnation:
            return None
        t0 = time.perf_counter()
        try:
            req: Any = P.decode_message(header, buffers)
        except Exception as e:
            resp = P.Response(False, error=P.error_to_record(e, traceback.format_exc()))
        else:
            resp = self.service.handle(req)
        try:
            out = P.encode_message(resp)
        except Exception as e:
            out = P.encode_message(
                P.Response(False, error=P.error_to_record(e, traceback.format_exc()), seq=resp.seq)
            )
        if self.options.get('profile'):
            op = getattr(req, 'op', None)
            print(
                f'[ray worker {self.slot}] {getattr(op, "name", op)} '
                f'{1e3 * (time.perf_counter() - t0):.1f} ms',
                file=sys.stderr,
                flush=True,
            )
        return out

    def usage(self) -> Dict[str, Any]:
        """RSS bytes, CPU seconds and requests served by this actor's process."""
        p = psutil.Process()
        with p.oneshot():
            mem, cpu = p.memory_info(), p.cpu_times()
        return {
            'pid': os.getpid(),
            'rss_bytes': mem.rss,
            'cpu_seconds': cpu.user + cpu.system,
            'requests': 0 if self.service is None else self.service.requests,
        }


__all__ = ['RayWorker']
