"""The Ray wing, pure parts: arguments, and where each actor runs (`plan_ray_placements`).

Ray reserves logical CPUs but pins nothing. Every actor reports its node and
the cores it may run on; `plan_ray_placements` turns the placement group
table into node-local core sets, one per actor, and each actor pins itself
(affinity, TF thread counts) before its first TF op. Nothing here imports Ray
(`import_ray` does, when a `RayWorkers` starts).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import math
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence

from simharness import errors as E
from simharness.core.determinism import INTRA_OP_THREADS
from simharness.runtime.pinning import WorkerPlacement
from simharness.validation import check_bool, check_int, check_number


#: Placement strategies of Ray placement groups.
PLACEMENT_STRATEGIES = ('PACK', 'SPREAD', 'STRICT_PACK', 'STRICT_SPREAD')
#: Defaults of `ray_executor_factory`.
DEFAULT_READY_TIMEOUT = 120.0
DEFAULT_MAX_RESTARTS = 3

_INSTALL_HINT = 'install it with: pip install "simharness[ray]"'


def import_ray() -> Any:
    """The `ray` module; a clear error naming the extra when it is missing."""
    try:
        import ray
    except ImportError as e:
        raise E.MissingDependencyError(
            f'the Ray backend needs Ray, which is not installed ({e}); {_INSTALL_HINT}'
        ) from None
    if not hasattr(ray, 'init'):  # a directory named ray on sys.path, not Ray
        raise E.MissingDependencyError(
            f'the Ray backend needs Ray; "import ray" found {list(getattr(ray, "__path__", []))}, '
            f'which is not Ray; {_INSTALL_HINT}'
        )
    return ray


# ---------------------------------------------------------------- arguments (pure)

#: Where a local Ray (``address=None``) listens unless ``ray_init_args`` says otherwise.
LOCAL_RAY_NODE_IP = '127.0.0.1'


def ray_init_arguments(
    address: Optional[str], ray_init_args: Mapping[str, Any], log_to_driver: bool
) -> Dict[str, Any]:
    """The keyword arguments of ``ray.init``.

    A local Ray (``address=None``) is a single-machine simulation: its node is
    on loopback (``_node_ip_address='127.0.0.1'``), so Ray's servers do not
    listen on the machine's network address; give ``ray_init_args=
    {'_node_ip_address': ...}`` (or start a cluster and pass its address) to
    be reachable from other machines. Joining a cluster leaves it to Ray.
    """
    args: Dict[str, Any] = {
        'address': address,
        'include_dashboard': False,
        'logging_level': logging.WARNING,
        'configure_logging': True,
        'log_to_driver': log_to_driver,
    }
    if address is None:
        args['_node_ip_address'] = LOCAL_RAY_NODE_IP
    args.update(ray_init_args)
    return args


#: The logger and the start of the notice Ray logs when ``ray.init`` starts a new local
#: cluster with token authentication turned on by default (``RAY_AUTH_MODE`` unset).
RAY_TOKEN_NOTICE = (
    'ray._private.authentication.authentication_token_setup',
    'Token authentication is enabled for this Ray cluster',
)


class _DropTokenNotice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(RAY_TOKEN_NOTICE[1])


@contextlib.contextmanager
def quiet_ray_start() -> Iterator[None]:
    """Keeps Ray's token-authentication notice out of the user's terminal while
    simharness starts Ray itself.

    The notice says that Ray turned on its safe default for a cluster it creates;
    authentication stays on (``RAY_AUTH_MODE`` still decides, as Ray documents).
    Every other line Ray logs at WARNING or above still reaches stderr.
    """
    logger = logging.getLogger(RAY_TOKEN_NOTICE[0])
    drop = _DropTokenNotice()
    logger.addFilter(drop)
    try:
        yield
    finally:
        logger.removeFilter(drop)


def check_ray_arguments(
    num_workers: Optional[int],
    num_cpus_per_worker: float,
    num_gpus_per_worker: float,
    clients_per_worker: Optional[int],
    placement_strategy: str,
    ready_timeout: float,
    max_restarts: int,
    call_timeout: Optional[float],
    cpu_affinity: bool,
    address: Optional[str],
) -> str:
    """Checks the arguments of `ray_executor_factory`; returns the placement strategy.

    Raises:
      SimharnessTypeError: an argument of the wrong type (a bool where a
        number is expected, a float where an int is).
      SimharnessValueError: a value out of range, naming it and the range.
    """
    check_int('num_workers', num_workers, 1, allow_none=True)
    check_number('num_cpus_per_worker', num_cpus_per_worker, greater_than=0)
    check_number('num_gpus_per_worker', num_gpus_per_worker, minimum=0)
    if num_gpus_per_worker > 1:
        raise E.SimharnessValueError(
            f'num_gpus_per_worker={num_gpus_per_worker!r}: a worker runs its clients on one GPU; '
            'expected a number in [0, 1] (a fraction shares a GPU between workers: 0.5 puts two '
            'workers on each GPU)'
        )
    check_int('clients_per_worker', clients_per_worker, 1, allow_none=True)
    if not isinstance(placement_strategy, str):
        raise E.SimharnessTypeError(
            f'placement_strategy must be a str, got {placement_strategy!r} of type '
            f'{type(placement_strategy).__name__}',
            expected=str,
            actual=type(placement_strategy),
        )
    strategy = placement_strategy.upper()
    if strategy not in PLACEMENT_STRATEGIES:
        raise E.SimharnessValueError(
            f'placement_strategy={placement_strategy!r} is not a Ray placement strategy; '
            f'expected one of {list(PLACEMENT_STRATEGIES)}'
        )
    check_number('ready_timeout', ready_timeout, greater_than=0)
    check_int('max_restarts', max_restarts, -1)
    if call_timeout is not None:
        check_number('call_timeout', call_timeout, greater_than=0)
    check_bool('cpu_affinity', cpu_affinity)
    if address is not None and (not isinstance(address, str) or not address):
        raise E.SimharnessTypeError(
            f"address must be None (start a local Ray), 'auto', 'ray://host:port' or "
            f"'host:port', got {address!r} of type {type(address).__name__}",
            expected='Optional[str]',
            actual=type(address),
        )
    return strategy


# ---------------------------------------------------------------- pinning plan (pure)


def plan_ray_placements(
    bundle_nodes: Sequence[str],
    node_cpus: Mapping[str, Sequence[int]],
    num_cpus_per_worker: float,
    num_gpus_per_worker: float = 0,
    gpu_ids: Optional[Sequence[Optional[int]]] = None,
    cpu_affinity: bool = True,
) -> List[WorkerPlacement]:
    """Where each actor runs on its node: its cores, TF threads and GPU.

    Bundles are taken in order; the actors on one node get contiguous,
    disjoint runs of that node's cores (``node_cpus[node]``, the cores the
    node's Ray processes may use), ``ceil(num_cpus_per_worker)`` each, in
    bundle order. Fractional CPUs share cores: actor positions advance by
    `num_cpus_per_worker` and an actor gets the cores its interval
    ``[p, p + c)`` touches. When a node's bundles ask for more CPUs than it
    has cores (Ray's logical CPUs are only a count), positions wrap around.
    Without `cpu_affinity` every actor may use all of its node's cores.

    TF runs one op thread (`INTRA_OP_THREADS`) and one inter-op thread, as
    in the process stack: results do not depend on the layout. With GPUs,
    Ray sets each actor's ``CUDA_VISIBLE_DEVICES``; the placement names the
    GPU Ray assigned (the actor uses it as GPU 0) and turns on memory growth
    when GPUs are shared (`num_gpus_per_worker` < 1). Without GPUs,
    ``CUDA_VISIBLE_DEVICES`` is '' so an actor never initialises CUDA.

    Args:
      bundle_nodes: the node id of each bundle (the placement group table's
        ``bundles_to_node_id``, in bundle order); bundle k hosts worker k.
      node_cpus: the usable core ids of every node named in `bundle_nodes`.
      num_cpus_per_worker: Ray CPUs of each bundle (> 0).
      num_gpus_per_worker: Ray GPUs of each bundle (0 .. 1).
      gpu_ids: the GPU id Ray gave each actor (``ray.get_gpu_ids()[0]``),
        or None per actor / for all when there are no GPUs.
      cpu_affinity: pin each actor to its own cores.

    Returns:
      One `WorkerPlacement` per bundle, in bundle order (``worker_id`` = k).

    Raises:
      SimharnessValueError: a node without cores, a bundle on a node that
        `node_cpus` does not describe, or GPUs asked for and not given.
    """
    check_number('num_cpus_per_worker', num_cpus_per_worker, greater_than=0)
    check_number('num_gpus_per_worker', num_gpus_per_worker, minimum=0)
    check_bool('cpu_affinity', cpu_affinity)
    if gpu_ids is not None and len(gpu_ids) != len(bundle_nodes):
        raise E.SimharnessValueError(
            f'gpu_ids has {len(gpu_ids)} entries for {len(bundle_nodes)} bundles'
        )
    width = max(1, math.ceil(num_cpus_per_worker))
    position: Dict[str, float] = collections.defaultdict(float)
    out: List[WorkerPlacement] = []
    for k, node in enumerate(bundle_nodes):
        if node not in node_cpus:
            raise E.SimharnessValueError(
                f'bundle {k} is on node {node!r}, whose cores are unknown (known nodes: '
                f'{sorted(node_cpus)})'
            )
        cores = tuple(node_cpus[node])
        if not cores:
            raise E.SimharnessValueError(f'node {node!r} has no usable cores')
        if cpu_affinity:
            p = position[node]
            first = int(math.floor(p + 1e-9))
            last = max(first + width, int(math.ceil(p + num_cpus_per_worker - 1e-9)))
            mine = sorted({cores[i % len(cores)] for i in range(first, last)})
            position[node] = p + num_cpus_per_worker
        else:
            mine = sorted(cores)
        gpu = None if gpu_ids is None else gpu_ids[k]
        if num_gpus_per_worker > 0:
            if gpu is None:
                raise E.SimharnessValueError(
                    f'worker {k} asked for {num_gpus_per_worker} GPU but Ray gave it none'
                )
            env = {'TF_FORCE_GPU_ALLOW_GROWTH': 'true'} if num_gpus_per_worker < 1 else {}
        else:
            gpu, env = None, {'CUDA_VISIBLE_DEVICES': ''}
        out.append(
            WorkerPlacement(
                worker_id=k,
                cpus=tuple(mine),
                gpu=gpu,
                intra_op_threads=INTRA_OP_THREADS,
                inter_op_threads=1,
                env=env,
            )
        )
    return out


def placement_to_dict(p: WorkerPlacement) -> Dict[str, Any]:
    """A placement as plain data (what the driver sends an actor)."""
    return {
        'worker_id': p.worker_id,
        'cpus': list(p.cpus),
        'gpu': p.gpu,
        'intra_op_threads': p.intra_op_threads,
        'inter_op_threads': p.inter_op_threads,
        'env': dict(p.env),
    }


def placement_from_dict(d: Mapping[str, Any]) -> WorkerPlacement:
    return WorkerPlacement(
        worker_id=d['worker_id'],
        cpus=tuple(d['cpus']),
        gpu=d['gpu'],
        intra_op_threads=d['intra_op_threads'],
        inter_op_threads=d['inter_op_threads'],
        env=dict(d['env']),
    )
