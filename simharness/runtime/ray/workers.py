"""The Ray transport, driver side: `RayWorkers` and a handle per actor (the worker seam).

The handle of one slot is `handle.RayWorkerHandle`, the broadcast arena
`broadcast.RayBroadcast`; this module owns the actors, their placement group, Ray
itself when it started it, and the watchdog.

The actor itself is a host: `simharness.hosts.ray_actor.RayWorker`.

```
driver                                                      Ray cluster (any number of nodes)
  RayWorkers (owned by a ray_executor_factory, or shared)
    ray.init (address=None: a local Ray; 'auto' / 'ray://..' / 'host:port': join)
    one placement group: a bundle {CPU: c, GPU: g} per worker slot (waits <= ready_timeout)
    RayWorkerHandle k ─ actor k ═════════════════════════▶  RayWorker k (bundle k, its node)
      ensure_started: describe → plan_ray_placements          describe(): node, pid, cores, GPUs
                      → start(placement)                      start(): pin cores, TF threads,
                                                                 EagerTF + WorkerService
      submit(header, buffers | broadcast ref) ─ call.remote ─▶ call(): decode → handle → encode
      Future[Answer]   ◀─ ObjectRef.future() ◀═══════════════  (header, buffers)
    RayBroadcast: ray.put(buffers) once per broadcast value,
                  passed as a top-level ObjectRef (read zero-copy, fetched once per node)
    watchdog thread (call_timeout): a call running too long → kill the actor,
                  WorkerTimeoutError (retryable)
```

What crosses to an actor is the codec's output only: the msgpack header
(bytes) and the raw buffers (numpy arrays of plain dtypes); Ray serializes
those, and no user object or TF object is ever handed to Ray. The actor
decodes with the codec (a closed set of kinds), exactly as a worker process
or an executor service does.

Faults: actors run with ``max_task_retries=0`` (Ray never re-runs a call
silently) and ``max_restarts`` (Ray restarts a dead actor in its bundle). A
call to a dead or restarted actor fails with `WorkerLostError` (retryable):
the handle is marked lost, and its next use starts the actor again (a new
*generation*: the values of the old one are reported lost, never reused), or
makes a new actor in the same bundle when Ray gave up on the old one, so
``execution_context(factory, retries=N)`` re-runs the computation.

Pinning: Ray reserves logical CPUs but pins nothing. Every actor reports its
node and the cores it may run on; `plan_ray_placements` (pure) turns the
placement group table into node-local core sets, one per actor, and each
actor pins itself (affinity, TF thread counts) before its first TF op.

Ownership: `RayWorkers` owns its actors, its placement group, its watchdog
thread, and Ray itself when it called ``ray.init`` (then `close()` shuts Ray
down). `close()` is idempotent. Ray is imported only when a `RayWorkers`
starts: this module imports without Ray.
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
import threading
import time
import weakref
from typing import Any, Dict, List, Mapping, Optional, Sequence

from simharness import errors as E
from simharness.runtime.pinning import WorkerPlacement
from simharness.runtime.ray.broadcast import RayBroadcast
from simharness.runtime.ray.handle import RayWorkerHandle
from simharness.runtime.seam import DEFAULT_CLIENTS_PER_WORKER
from simharness.runtime.ray.placement import (
    DEFAULT_MAX_RESTARTS,
    DEFAULT_READY_TIMEOUT,
    check_ray_arguments,
    import_ray,
    placement_to_dict,
    plan_ray_placements,
    quiet_ray_start,
    ray_init_arguments,
)

log = logging.getLogger(__name__)


class RayWorkers:
    """Worker slots as Ray actors, in one placement group (the factory's shared resource).

    Args:
      num_workers: actors (None: the cluster's CPUs / `num_cpus_per_worker`,
        or its GPUs / `num_gpus_per_worker` when GPUs are asked for).
      address: None starts a local Ray (``ray.init()``); ``'auto'``,
        ``'ray://host:10001'`` or ``'host:6379'`` joins a running cluster.
        Ignored when Ray is already initialised in this process.
      num_cpus_per_worker / num_gpus_per_worker: each actor's bundle.
      clients_per_worker: the most clients an actor runs through one TF call.
      placement_strategy: of the placement group ('PACK', 'SPREAD',
        'STRICT_PACK', 'STRICT_SPREAD').
      ready_timeout: seconds to wait for the placement group (an
        unsatisfiable one waits forever otherwise) and for the actors to start.
      max_restarts: Ray restarts of a dead actor (-1: no limit).
      call_timeout: seconds one call may run (None: no limit); past it the
        actor is killed and the call fails with `WorkerTimeoutError`.
      cpu_affinity: pin each actor to node-local cores (`plan_ray_placements`).
      ray_init_args: more keyword arguments of ``ray.init`` (``num_cpus``, ...).
      worker_options: passed to the actors (``{'profile': True}``: each actor logs
        every request's operation and time to stderr).
      actor: the actor class, a host (`simharness.hosts.ray_actor.RayWorker`: the runtime
        imports no host); it is constructed as ``actor(slot, options)``.
    """

    def __init__(
        self,
        num_workers: Optional[int] = None,
        *,
        address: Optional[str] = None,
        num_cpus_per_worker: float = 1,
        num_gpus_per_worker: float = 0,
        clients_per_worker: Optional[int] = DEFAULT_CLIENTS_PER_WORKER,
        placement_strategy: str = 'PACK',
        ready_timeout: float = DEFAULT_READY_TIMEOUT,
        max_restarts: int = DEFAULT_MAX_RESTARTS,
        call_timeout: Optional[float] = None,
        cpu_affinity: bool = True,
        ray_init_args: Optional[Dict[str, Any]] = None,
        worker_options: Optional[Dict[str, Any]] = None,
        actor: type,
    ):
        self.placement_strategy = check_ray_arguments(
            num_workers,
            num_cpus_per_worker,
            num_gpus_per_worker,
            clients_per_worker,
            placement_strategy,
            ready_timeout,
            max_restarts,
            call_timeout,
            cpu_affinity,
            address,
        )
        for name, d in (('ray_init_args', ray_init_args), ('worker_options', worker_options)):
            if d is not None and not isinstance(d, dict):
                raise E.SimharnessTypeError(
                    f'{name} must be a dict or None, got {d!r} of type {type(d).__name__}',
                    expected='Optional[dict]',
                    actual=type(d),
                )
        self.requested_workers = num_workers
        self.address = address
        self.num_cpus_per_worker = num_cpus_per_worker
        self.num_gpus_per_worker = num_gpus_per_worker
        self.clients_per_worker = clients_per_worker
        self.ready_timeout = float(ready_timeout)
        self.max_restarts = max_restarts
        self.call_timeout = call_timeout
        self.cpu_affinity = cpu_affinity
        self.ray_init_args = dict(ray_init_args or {})
        self.worker_options = dict(worker_options or {})
        self.ray: Any = None
        self.broadcast: Any = None
        self.handles: List[RayWorkerHandle] = []
        self.closed = False
        self._started = False
        self._owns_ray = False
        self._pg: Any = None
        # The actor class (a host: it builds the leaf executor); by name when not given,
        # so that the runtime imports no executor (`simharness.stacks` gives the class).
        self._actor = actor
        self._actor_class: Any = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._watchdog: Optional[threading.Thread] = None
        self._finalizer = weakref.finalize(self, _close_resources, self._stop, [], None, False)

    # ------------------------------------------------------------ properties
    @property
    def started(self) -> bool:
        return self._started

    @property
    def num_workers(self) -> int:
        return len(self.handles)

    def new_session_id(self) -> int:
        """A session id unique across drivers (random: several drivers may share actors)."""
        return secrets.randbits(62) + 1

    # ------------------------------------------------------------ start
    def start(self) -> None:
        """Joins or starts Ray, reserves the placement group, starts every actor. Idempotent."""
        with self._lock:
            if self.closed:
                raise E.ExecutorClosedError('the Ray workers are closed')
            if self._started:
                return
            try:
                self._start()
            except BaseException:
                self._release()
                raise
            self._started = True

    def _start(self) -> None:
        ray = import_ray()
        self.ray = ray
        if not ray.is_initialized():
            # Quiet by default: Ray's own daemons' log lines stay in its session
            # logs, unless the actors are asked to profile (their lines go to stderr).
            # A local Ray listens on loopback only (ray_init_arguments); the notice that
            # Ray turned token authentication on is not shown (quiet_ray_start).
            with quiet_ray_start():
                ray.init(
                    **ray_init_arguments(
                        self.address, self.ray_init_args, bool(self.worker_options.get('profile'))
                    )
                )
            self._owns_ray = True
        elif self.address is not None:
            log.info(
                'Ray is already initialised in this process: address=%r is not used', self.address
            )
        self.broadcast = RayBroadcast(ray)
        n = self.requested_workers
        if n is None:
            n = self._default_workers(ray.cluster_resources())
        from ray.util.placement_group import placement_group

        bundle: Dict[str, float] = {'CPU': float(self.num_cpus_per_worker)}
        if self.num_gpus_per_worker:
            bundle['GPU'] = float(self.num_gpus_per_worker)
        self._pg = placement_group(
            [dict(bundle) for _ in range(n)], strategy=self.placement_strategy
        )
        self._finalizer.detach()
        self._finalizer = weakref.finalize(
            self, _close_resources, self._stop, self.handles, self._pg, self._owns_ray
        )
        try:
            ray.get(self._pg.ready(), timeout=self.ready_timeout)
        except ray.exceptions.GetTimeoutError:
            raise E.WorkerStartError(
                f'the Ray cluster could not place {n} workers of {bundle} '
                f'(placement_strategy={self.placement_strategy!r}) within {self.ready_timeout:g} s '
                f'(ready_timeout); the cluster has {_resources_text(ray.cluster_resources())} '
                f'in all, {_resources_text(ray.available_resources())} free: ask for fewer '
                'workers or resources, or add nodes'
            ) from None
        self._actor_class = ray.remote(self._actor)
        self.handles.extend(RayWorkerHandle(self, k) for k in range(n))
        for h in self.handles:
            h.actor = self._new_actor(h.slot)
        self._start_all()
        if self.call_timeout is not None:
            self._watchdog = threading.Thread(
                target=self._watch, name='simharness-ray-watchdog', daemon=True
            )
            self._watchdog.start()

    def _default_workers(self, resources: Mapping[str, float]) -> int:
        if self.num_gpus_per_worker:
            n = int(resources.get('GPU', 0) // self.num_gpus_per_worker)
            what = f'{resources.get("GPU", 0):g} GPUs'
        else:
            n = int(resources.get('CPU', 0) // self.num_cpus_per_worker)
            what = f'{resources.get("CPU", 0):g} CPUs'
        if n < 1:
            raise E.WorkerStartError(
                f'the Ray cluster has {what}: not enough for one worker of '
                f'{self.num_cpus_per_worker} CPU / {self.num_gpus_per_worker} GPU; give num_workers '
                'or smaller per-worker resources'
            )
        return n

    def _new_actor(self, slot: int) -> Any:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        opts = {'clients_per_worker': self.clients_per_worker}
        opts.update(self.worker_options)
        return self._actor_class.options(
            num_cpus=self.num_cpus_per_worker,
            num_gpus=self.num_gpus_per_worker,
            max_restarts=self.max_restarts,
            max_task_retries=0,
            max_concurrency=1,
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                self._pg,
                placement_group_bundle_index=slot,
                placement_group_capture_child_tasks=False,
            ),
        ).remote(slot, opts)

    def _plan(self, infos: Sequence[Dict[str, Any]]) -> List[WorkerPlacement]:
        from ray.util.placement_group import placement_group_table

        table = placement_group_table(self._pg)
        b2n = table.get('bundles_to_node_id') or {}
        bundle_nodes = [b2n.get(k, b2n.get(str(k), infos[k]['node_id'])) for k in range(len(infos))]
        node_cpus: Dict[str, List[int]] = {}
        for info, node in zip(infos, bundle_nodes):
            node_cpus.setdefault(node, info['cpus'])
        gpu_ids = [info['gpu_ids'][0] if info['gpu_ids'] else None for info in infos]
        return plan_ray_placements(
            bundle_nodes,
            node_cpus,
            self.num_cpus_per_worker,
            self.num_gpus_per_worker,
            gpu_ids,
            self.cpu_affinity,
        )

    def _replan(self, h: RayWorkerHandle, where: Dict[str, Any]) -> WorkerPlacement:
        """Slot `h`'s placement on the node it now runs on: the cores after those of the
        slots already there (which keep their placements)."""
        order = [o for o in self.handles if o is not h] + [h]  # the moved slot last
        bundle_nodes = [where['node_id'] if o is h else (o.node_id or '') for o in order]
        node_cpus = {(o.node_id or ''): list(o.node_cpus) for o in order if o is not h}
        node_cpus[where['node_id']] = list(where['cpus'])
        gpu_ids = [
            (where['gpu_ids'] or [None])[0]
            if o is h
            else (None if o.placement is None else o.placement.gpu)
            for o in order
        ]
        h.node_cpus = list(where['cpus'])
        p = plan_ray_placements(
            bundle_nodes,
            node_cpus,
            self.num_cpus_per_worker,
            self.num_gpus_per_worker,
            gpu_ids,
            self.cpu_affinity,
        )[-1]
        return dataclasses.replace(p, worker_id=h.slot)

    def _start_all(self) -> None:
        deadline = time.monotonic() + self.ready_timeout
        infos = self._get(
            [h.actor.describe.remote() for h in self.handles], deadline, 'report where they run'
        )
        plans = self._plan(infos)
        for h, p, info in zip(self.handles, plans, infos):
            h.placement = p
            h.node_cpus = list(info['cpus'])
        started = self._get(
            [h.actor.start.remote(placement_to_dict(p)) for h, p in zip(self.handles, plans)],
            deadline,
            'start (import TensorFlow)',
        )
        for h, info in zip(self.handles, started):
            h.record_start(info)

    def _get(self, refs: List[Any], deadline: float, what: str) -> List[Any]:
        ray = self.ray
        try:
            return list(ray.get(refs, timeout=max(0.1, deadline - time.monotonic())))
        except ray.exceptions.GetTimeoutError:
            raise E.WorkerStartError(
                f'the Ray workers did not {what} within {self.ready_timeout:g} s (ready_timeout)'
            ) from None
        except ray.exceptions.RayTaskError as e:
            raise E.WorkerStartError(
                f'a Ray worker failed to {what}: {e}', remote_traceback=str(e)
            ) from None
        except ray.exceptions.RayActorError as e:
            raise E.WorkerStartError(f'a Ray worker died before it could {what}: {e}') from None

    def restart_slot(self, h: RayWorkerHandle, timeout: Optional[float] = None) -> None:
        """Starts slot `h` again (after a loss): the same actor once Ray restarted it, else a new one."""
        if not self._started:
            self.start()
            if h.alive:
                return
        ray = self.ray
        timeout = self.ready_timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        if h.placement is None:  # never planned: the first start failed
            raise E.WorkerStartError(f'Ray worker {h.slot} was never started', worker_id=h.slot)
        last: Optional[BaseException] = None
        for attempt in range(2):
            try:
                where = ray.get(
                    h.actor.describe.remote(), timeout=max(0.1, deadline - time.monotonic())
                )
                if where['node_id'] != h.node_id:
                    # Ray moved the bundle to another node (its node died): plan again.
                    h.placement = self._replan(h, where)
                info = ray.get(
                    h.actor.start.remote(placement_to_dict(h.placement)),
                    timeout=max(0.1, deadline - time.monotonic()),
                )
                h.record_start(info)
                return
            except ray.exceptions.GetTimeoutError:
                raise E.WorkerStartError(
                    f'Ray worker {h.slot} did not start again within {timeout:g} s',
                    worker_id=h.slot,
                ) from None
            except ray.exceptions.RayTaskError as e:
                raise E.WorkerStartError(
                    f'Ray worker {h.slot} failed to start again: {e}', worker_id=h.slot
                ) from None
            except ray.exceptions.RayActorError as e:
                # Ray gave up on the actor (restarts used up, killed for good): a new one
                # in the same bundle, on the same node, so the plan still holds.
                last = e
                if attempt == 0:
                    log.warning(
                        'Ray worker %d is dead (%s); starting a new actor in its bundle',
                        h.slot,
                        type(e).__name__,
                    )
                    h.actor = self._new_actor(h.slot)
        raise E.WorkerStartError(
            f'Ray worker {h.slot} could not be started again: {last}', worker_id=h.slot
        )

    # ------------------------------------------------------------ watchdog
    def _watch(self) -> None:
        timeout = float(self.call_timeout or 0)
        tick = min(1.0, max(0.05, timeout / 4))
        while not self._stop.wait(tick):
            now = time.monotonic()
            for h in list(self.handles):
                try:
                    h.kill_if_overdue(timeout, now)
                except Exception:  # pragma: no cover - never stop watching
                    log.exception('the Ray watchdog failed')

    # ------------------------------------------------------------ info
    def info(self, timeout: float = 30.0) -> List[Dict[str, Any]]:
        """Each actor's node, pid, cores, RSS, CPU seconds and requests served."""
        if not self._started or self.closed:
            return []
        ray = self.ray
        refs = [h.actor.usage.remote() if h.alive else None for h in self.handles]
        out = []
        for h, ref in zip(self.handles, refs):
            row: Dict[str, Any] = {
                'worker_id': h.slot,
                'alive': h.alive,
                'node_ip': h.node_ip,
                'node_id': h.node_id,
                'pid': h.pid,
                'cpus': None if h.placement is None else list(h.placement.cpus),
                'requests': h.requests,
                'bytes_to_worker': h.bytes_to_worker,
                'bytes_from_worker': h.bytes_from_worker,
            }
            if ref is not None:
                try:
                    row.update(ray.get(ref, timeout=timeout))
                except Exception:  # lost meanwhile
                    row['alive'] = False
            out.append(row)
        return out

    def stats(self) -> Dict[str, Any]:
        """Requests and bytes moved, broadcast puts, and each actor's node, pid, RSS and CPU
        time (``'workers'``: `info()`)."""
        return {
            'requests': sum(h.requests for h in self.handles),
            'bytes_to_workers': sum(h.bytes_to_worker for h in self.handles)
            + (self.broadcast.bytes_written if self.broadcast is not None else 0),
            'bytes_from_workers': sum(h.bytes_from_worker for h in self.handles),
            'broadcast_puts': self.broadcast.puts if self.broadcast is not None else 0,
            'workers': self.info(),
        }

    def cluster(self) -> Dict[str, Any]:
        """The cluster's nodes and resources (for the environment record)."""
        ray = self.ray if self.ray is not None else import_ray()
        if not ray.is_initialized():
            return {}
        nodes = [
            {
                'node_id': n.get('NodeID'),
                'address': n.get('NodeManagerAddress'),
                'hostname': n.get('NodeManagerHostname'),
                'alive': bool(n.get('Alive')),
                'resources': _plain_resources(n.get('Resources') or {}),
            }
            for n in ray.nodes()
        ]
        return {
            'ray_version': getattr(ray, '__version__', None),
            'nodes': nodes,
            'resources': _plain_resources(ray.cluster_resources()),
            'workers': [
                {
                    'worker_id': h.slot,
                    'node_ip': h.node_ip,
                    'node_id': h.node_id,
                    'cpus': None if h.placement is None else list(h.placement.cpus),
                    'gpu': None if h.placement is None else h.placement.gpu,
                }
                for h in self.handles
            ],
            'placement_strategy': self.placement_strategy,
            'num_cpus_per_worker': self.num_cpus_per_worker,
            'num_gpus_per_worker': self.num_gpus_per_worker,
        }

    # ------------------------------------------------------------ close
    def _release(self) -> None:
        _close_resources(self._stop, self.handles, self._pg, self._owns_ray)
        self._finalizer.detach()
        self._pg = None
        self._owns_ray = False

    def close(self) -> None:
        """Kills the actors, removes the placement group, shuts Ray down if it started it.

        Idempotent.
        """
        with self._lock:
            if self.closed:
                return
            self.closed = True
        watchdog = self._watchdog
        self._stop.set()
        if watchdog is not None and watchdog is not threading.current_thread():
            watchdog.join(5)
        self._release()

    def __enter__(self) -> 'RayWorkers':
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _close_resources(
    stop: threading.Event, handles: List[RayWorkerHandle], pg: Any, owns_ray: bool
) -> None:
    stop.set()
    ray = None
    for h in handles:
        ray = h.workers.ray if ray is None else ray
        h.close()
        if h.actor is not None and ray is not None:
            try:
                ray.kill(h.actor, no_restart=True)
            except Exception:  # already gone
                pass
            h.actor = None
    if ray is None and (pg is not None or owns_ray):
        import ray  # noqa: F811 - it was imported by whoever started the workers
    if pg is not None and ray is not None:
        try:
            from ray.util.placement_group import remove_placement_group

            remove_placement_group(pg)
        except Exception:  # Ray is shut down already
            pass
    if owns_ray and ray is not None:
        try:
            ray.shutdown()
        except Exception:  # pragma: no cover
            log.exception('ray.shutdown failed')


def _plain_resources(res: Mapping[str, float]) -> Dict[str, float]:
    """Resources without Ray's bookkeeping entries (``node:<ip>``, placement group shares)."""
    return {k: float(v) for k, v in res.items() if not k.startswith('node:') and '_group_' not in k}


def _resources_text(res: Mapping[str, float]) -> str:
    keys = [k for k in ('CPU', 'GPU') if k in res] or sorted(
        k for k in res if not k.startswith('node:')
    )[:3]
    return ', '.join(f'{res[k]:g} {k}' for k in keys) or 'no resources'
