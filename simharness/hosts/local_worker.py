"""The worker process of the local pool: a `WorkerService` behind the local transport.

A host (`simharness.hosts`): it builds the leaf executor, so it lives above
`runtime/` (which starts it by reference: `WorkerPool(worker_target=...)`).

```
forkserver (imported TF, ran no op)
   └─ fork → worker_main(conn, worker_id, placement, options)
        1. ignore SIGINT (the driver owns shutdown); SIGTERM: leave cleanly, then
           die by SIGTERM (so the driver reports the signal); pin itself: CPU
           affinity, TF thread counts, visible GPU -- before its first TF op
        2. create its output arena; send [READY, pid, arena name]
        3. loop: [REQUEST] → decode → WorkerService.handle → encode → big
           buffers into a free arena of its own (one the driver ACKed; a new
           one if none is) → [RESPONSE]; [ACK, names] frees arenas
        4. on EOF (driver gone), [CLOSE] or SIGTERM: close arenas (unlink), exit
```
"""

from __future__ import annotations

import os
import signal
import sys
import time
import traceback
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any, List, Optional

from simharness.core.buffers import SharedReads
from simharness.runtime.local import transport as L
from simharness.runtime.local.lifeline import DRIVER_GONE
from simharness.runtime import pinning
from simharness.runtime import protocol as P
from simharness.runtime.seam import DEFAULT_CLIENTS_PER_WORKER
from simharness.runtime.local.options import (
    DEFAULT_ARENA_BYTES,
    DEFAULT_LIVENESS_TIMEOUT,
    DEFAULT_START_TIMEOUT,
    DEFAULT_STOPPED_TIMEOUT,
    PoolOptions,
    WorkerConfig,
)
from simharness.runtime.local.pool import WorkerPool
from simharness.runtime.local.pool import build_pool
from simharness.runtime.local.shm import ShmAttachment, SlotRef
from simharness.tfquiet import quiet_stderr

if TYPE_CHECKING:  # reason: the service's modules are imported once the worker is placed
    from simharness.runtime.service import WorkerService


class _Terminated(BaseException):
    """SIGTERM arrived: leave the loop (not an operation error: never sent as a response)."""


#: Set by the SIGTERM handler. The exception it raises can be replaced on
#: its way out (TF's graph-building context managers turn an exception
#: crossing them into "Nesting violated" AssertionErrors), so the loop checks
#: this flag before it answers: an operation cut short by SIGTERM is never
#: answered as an operation error.
_SIGTERM_SEEN: List[bool] = []


def _on_sigterm(signum: int, frame: Any) -> None:
    _SIGTERM_SEEN.append(True)
    raise _Terminated()


def worker_main(conn: Any, worker_id: int, placement: Any, config: WorkerConfig) -> Optional[str]:
    """Entry point of a worker process (started from the forkserver).

    Returns `lifeline.DRIVER_GONE` when the driver's pipe ended without its goodbye (the
    driver died), None otherwise."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _on_sigterm)
    arena = None
    attachment = None
    service = None
    terminated = False
    try:
        try:
            with quiet_stderr():  # TF's device probing (cuInit) is noise, other lines show
                # Looked up on the module: fault-injection tests replace it.
                pinning.apply_placement(placement)
                __import__('tensorflow').config.list_physical_devices()
            # Imported once placed (reason: the leaf's modules use TF, and a worker
            # pins its threads and devices before TF initializes).
            from simharness.hosts.leaf import worker_service

            device = '/GPU:0' if placement.gpu is not None else None
            # The driver's broadcasts this process reads in place: offered per request
            # by `_serve`, read by the leaf executor's values.
            reads = SharedReads()
            service = worker_service(worker_id, device, config.clients_per_worker, reads)
            arena = L.ResponseArenas(config.arena_bytes)
            attachment = ShmAttachment()
        except _Terminated:
            terminated = True
            return None
        except Exception as e:  # report, then exit
            conn.send_bytes(
                L.pack_frame(L.F_START_ERROR, f'{type(e).__name__}: {e}', traceback.format_exc())
            )
            return None
        conn.send_bytes(L.pack_frame(L.F_READY, os.getpid(), arena.names[0]))
        return _serve(conn, service, arena, attachment, reads, worker_id, config.profile)
    except _Terminated:
        terminated = True
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # cleanup is not interrupted
        if attachment is not None:
            attachment.close()
        if arena is not None:
            arena.close()
        try:
            conn.close()
        except OSError:
            pass
        if terminated:
            # Die by the signal, so that the driver reports "terminated by SIGTERM".
            sys.stderr.flush()
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
    return None  # terminated (the process is dying by its signal)


def _serve(
    conn: Connection,
    service: WorkerService,
    arenas: L.ResponseArenas,
    attachment: ShmAttachment,
    reads: SharedReads,
    worker_id: int,
    profile: bool,
) -> Optional[str]:
    while True:
        try:
            frame = L.unpack_frame(conn.recv_bytes())
        except (EOFError, OSError):
            return DRIVER_GONE
        if frame[0] == L.F_CLOSE:
            return None
        if frame[0] == L.F_ACK:
            arenas.ack(frame[1:])
            continue
        if frame[0] != L.F_REQUEST:
            continue
        t0 = time.perf_counter()
        _release_stale(attachment, frame[2])
        token = frame[3]
        if token is not None:
            # The driver's broadcast (the first frame[4] buffers): tensors made of it hold
            # it in place (no copy) while they live; the driver keeps it until we report
            # the token unpinned. The request's other buffers are read as usual.
            reads.offer(
                token,
                [
                    attachment.read(SlotRef(loc[0], loc[1], '|u1', (loc[2],)), writable=True)
                    for loc in frame[2][: frame[4]]
                    if isinstance(loc, list)
                ],
            )
        try:
            req: Any = P.decode_message(frame[1], L.read_buffers(attachment, frame[2], copy=False))
        except Exception as e:
            req = None
            resp = P.Response(False, error=P.error_to_record(e, traceback.format_exc()))
        if req is not None:
            resp = service.handle(req)
        if _SIGTERM_SEEN:
            raise _Terminated()
        try:
            header, buffers = P.encode_message(resp)
        except Exception as e:
            resp = P.Response(
                False, error=P.error_to_record(e, traceback.format_exc()), seq=resp.seq
            )
            header, buffers = P.encode_message(resp)
        locs = arenas.write(buffers)
        op = getattr(req, 'op', None)
        # Drop what this request held (its views, tensors it answered with): what stays
        # pinned now is what the session's values keep.
        del req, resp, buffers
        pinned = token is not None and reads.close_offer(token)
        try:
            conn.send_bytes(
                L.pack_frame(
                    L.F_RESPONSE,
                    header,
                    locs,
                    arenas.take_retired(),
                    pinned,
                    reads.take_unpinned(),
                )
            )
        except (EOFError, OSError, BrokenPipeError):
            return DRIVER_GONE
        if profile:
            print(
                f'[worker {worker_id}] {getattr(op, "name", op)} '
                f'{1e3 * (time.perf_counter() - t0):.1f} ms',
                file=sys.stderr,
                flush=True,
            )


def _release_stale(attachment: Any, locs: List[Any]) -> None:
    """Unmaps segments the driver replaced (arenas grow under new names)."""
    if len(attachment.names) <= 4:
        return
    used = {loc[0] for loc in locs if isinstance(loc, list)}
    for name in attachment.names:
        if name not in used:
            attachment.release(name)


def create_worker_pool(
    num_workers: Optional[int] = None,
    clients_per_worker: Optional[int] = DEFAULT_CLIENTS_PER_WORKER,
    cpu_affinity: bool = True,
    devices: object = None,
    workers_per_gpu: int = 1,
    arena_bytes: int = DEFAULT_ARENA_BYTES,
    start_timeout: float = DEFAULT_START_TIMEOUT,
    worker_options: Optional[dict] = None,
    request_timeout: Optional[float] = None,
    liveness_timeout: float = DEFAULT_LIVENESS_TIMEOUT,
    stopped_timeout: float = DEFAULT_STOPPED_TIMEOUT,
) -> WorkerPool:
    """A `WorkerPool` of pinned workers running `worker_main` (not started; see `WorkerPool.start`).

    Args are the fields of `PoolOptions` (those of
    `simharness.stacks.process_executor_factory`), checked before anything starts.
    """
    return pool_for(
        PoolOptions(
            num_workers=num_workers,
            clients_per_worker=clients_per_worker,
            cpu_affinity=cpu_affinity,
            devices=devices,
            workers_per_gpu=workers_per_gpu,
            arena_bytes=arena_bytes,
            start_timeout=start_timeout,
            worker_options=worker_options,
            request_timeout=request_timeout,
            liveness_timeout=liveness_timeout,
            stopped_timeout=stopped_timeout,
        )
    )


def pool_for(options: PoolOptions) -> WorkerPool:
    """A `WorkerPool` of pinned workers running `worker_main` for `options` (not started)."""
    return build_pool(options, worker_target=worker_main)
