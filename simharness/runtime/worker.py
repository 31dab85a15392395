"""The worker process: hosts an `EagerTFExecutor` for a block of clients.

```
forkserver (imported TF, ran no op)
   └─ fork → worker_main(conn, worker_id, placement, options)
        1. ignore SIGINT (the driver owns shutdown), pin itself: CPU affinity,
           TF thread counts, visible GPU -- before its first TF op
        2. create its output arena; send ('ready', pid, arena name)
        3. loop: Request → resolve Refs/SlotRefs → EagerTFExecutor.<op> →
           store result values by id / pack result arrays → Response
        4. on EOF (driver gone) or ('close'): close arena (unlink), exit
```

The only module of `runtime/` that imports the executors.
"""

from __future__ import annotations

import asyncio
import os
import pickle
import signal
import sys
import time
import traceback
from typing import Any, Dict, List, Optional

import numpy as np

from simharness.runtime.protocol import (DatasetBlob, Ref, RefRange, Request, Response,
                                         is_numeric_array, map_leaves, pack_arrays)

#: Arrays smaller than this travel inside the pickled control message.
INLINE_BYTES = 1024


def _round64(n: int) -> int:
    return (n + 63) // 64 * 64


def write_tree(arena: Any, tree: Any) -> tuple:
    """Packs the big numeric arrays of `tree` into `arena` (reset first)."""
    need = [0]

    def size(x):
        if is_numeric_array(x) and x.nbytes >= INLINE_BYTES:
            need[0] += _round64(x.nbytes)
        return x
    map_leaves(tree, size)
    arena.reset()
    if need[0]:
        arena.ensure_capacity(need[0])

    def write(x):
        if x.nbytes < INLINE_BYTES:
            return x
        return arena.write_array(np.ascontiguousarray(x))
    return pack_arrays(tree, write)


def read_tree(attachment: Any, tree: Any, copy: bool = True) -> Any:
    """Replaces SlotRefs by arrays read from `attachment` (copies by default)."""
    from simharness.runtime.shm import SlotRef

    def leaf(x):
        if isinstance(x, SlotRef):
            v = attachment.read(x)
            return np.array(v) if copy else v
        return x
    return map_leaves(tree, leaf)


def _drive(coro):
    """Runs a coroutine that never really suspends (EagerTF's methods) to completion."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    # It suspended after all: finish it on a private loop.
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()


class WorkerState:
    """The values and executor of one worker process."""

    def __init__(self, executor: Any):
        self.executor = executor
        self.values: Dict[int, Any] = {}
        self.sources: Dict[int, Any] = {}
        self.driver_arena = ''

    def load_sourced(self, token: int, source: Any, client_ids: List[str], transform: Any) -> List[Any]:
        """Loads this worker's clients from a data source (kept by token for later calls)."""
        if source is not None:
            self.sources[token] = source
        try:
            src = self.sources[token]
        except KeyError:
            raise KeyError(f'data source {token} was never sent to this worker') from None
        out = []
        for cid in client_ids:
            arrays = src.client_arrays(cid)
            out.append(transform(arrays) if transform is not None else arrays)
        return out

    def resolve(self, tree: Any, attachment: Any) -> Any:
        from simharness.runtime.shm import SlotRef

        def leaf(x):
            if isinstance(x, Ref):
                try:
                    return self.values[x.id]
                except KeyError:
                    raise KeyError(f'value id {x.id} is not held by this worker') from None
            if isinstance(x, RefRange):
                try:
                    return [self.values[i] for i in range(x.start, x.start + x.count)]
                except KeyError as e:
                    raise KeyError(f'value id {e.args[0]} is not held by this worker') from None
            if isinstance(x, SlotRef):
                # A read-only view into the driver's arena, valid for this request
                # only: the executor copies what it keeps (into tensors) and
                # computes new arrays from the rest before the request ends.
                return attachment.read(x)
            if isinstance(x, DatasetBlob):
                return dataset_from_blob(x)
            return x
        return map_leaves(tree, leaf)

    def handle(self, req: Request, attachment: Any, arena: Any) -> Response:
        for first, count in req.free:
            for i in range(first, first + count):
                self.values.pop(i, None)
        if req.arena and req.arena != self.driver_arena:
            if self.driver_arena:  # the driver re-created its arena bigger: unmap the old one
                attachment.release(self.driver_arena)
            attachment.attach(req.arena)
            self.driver_arena = req.arena
        args = self.resolve(req.args, attachment)
        if req.op == 'load_sourced':
            result = _drive(self.executor.create_values(self.load_sourced(*args[:4]), args[4]))
        else:
            method = getattr(self.executor, req.op)
            result = _drive(method(*args))
        from simharness.executors.eager_tf import EagerValue
        if isinstance(result, EagerValue):
            result = [result]
        if isinstance(result, list) and (not result or isinstance(result[0], EagerValue)):
            for k, v in enumerate(result):
                self.values[req.out_base + k] = v
            types = [v.type_signature for v in result]
            if types and all(t is types[0] or t == types[0] for t in types):
                types = types[0]
            return Response(True, 'values', count=len(result), types=types, arena=arena.name)
        packed, nbytes = write_tree(arena, _to_numpy(result))
        return Response(True, 'data', result=packed, arena=arena.name, nbytes=nbytes)


def _to_numpy(tree: Any) -> Any:
    def leaf(x):
        if hasattr(x, 'numpy') and not isinstance(x, np.ndarray):
            from simharness.executors.eager_tf import fast_numpy
            return fast_numpy(x)
        if hasattr(x, 'element_spec') and hasattr(x, '_as_serialized_graph'):
            return dataset_to_blob(x)
        return x
    return map_leaves(tree, leaf)


def dataset_to_blob(ds: Any) -> DatasetBlob:
    """Serializes a `tf.data.Dataset` into a `DatasetBlob`."""
    import tensorflow as tf
    from simharness.core import types as T
    graph = ds._as_serialized_graph(
        external_state_policy=tf.data.experimental.ExternalStatePolicy.FAIL).numpy()
    return DatasetBlob(graph, T._from_tf_structure(ds.element_spec))


def dataset_from_blob(blob: DatasetBlob) -> Any:
    import tensorflow as tf
    from simharness.core.tf_serialization import element_spec_for
    variant = tf.raw_ops.DatasetFromGraph(graph_def=blob.graph)
    return tf.data.experimental.from_variant(variant, element_spec_for(blob.element_type))


def worker_main(conn: Any, worker_id: int, placement: Any, options: Dict[str, Any]) -> None:
    """Entry point of a worker process (started from the forkserver)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # terminate() from the driver: leave through the `finally` that unlinks the arena.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    arena = None
    attachment = None
    try:
        try:
            from simharness.runtime.pinning import apply_placement
            apply_placement(placement)
            fail = options.get('fail_on_start')
            if fail:
                raise RuntimeError(fail)
            from simharness.executors.eager_tf import EagerTFExecutor
            from simharness.runtime.shm import ShmArena, ShmAttachment
            device = '/GPU:0' if placement.gpu is not None else None
            executor = EagerTFExecutor(device=device,
                                       max_batch_size=options.get('clients_per_worker'))
            arena = ShmArena(options.get('arena_bytes', 1 << 20))
            attachment = ShmAttachment()
        except BaseException as e:  # report, then exit
            conn.send(('start_error', f'{type(e).__name__}: {e}', traceback.format_exc()))
            return
        conn.send(('ready', os.getpid(), arena.name))
        state = WorkerState(executor)
        while True:
            try:
                raw = conn.recv_bytes()
            except (EOFError, OSError):
                return  # the driver is gone
            msg = pickle.loads(raw)
            if msg == 'close':
                return
            if isinstance(msg, tuple) and msg and msg[0] == 'crash_for_test':
                os.kill(os.getpid(), signal.SIGKILL)
            try:
                t0 = time.perf_counter()
                resp = state.handle(msg, attachment, arena)
                if options.get('profile'):
                    print(f'[worker {worker_id}] {msg.op} {1e3 * (time.perf_counter() - t0):.1f} ms '
                          f'cpu_threads={len(os.sched_getaffinity(0))}', file=sys.stderr, flush=True)
            except BaseException as e:
                resp = Response(False, error=_picklable(e), traceback=traceback.format_exc(),
                                arena=arena.name)
            try:
                conn.send_bytes(pickle.dumps(resp, protocol=pickle.HIGHEST_PROTOCOL))
            except (EOFError, OSError, BrokenPipeError):
                return
    finally:
        if attachment is not None:
            attachment.close()
        if arena is not None:
            arena.close()
        try:
            conn.close()
        except OSError:
            pass


def _picklable(e: BaseException) -> BaseException:
    import pickle
    try:
        pickle.loads(pickle.dumps(e))
        return e
    except Exception:
        return RuntimeError(f'{type(e).__name__}: {e}')
