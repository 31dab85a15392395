"""A sweep's points as Ray tasks (`run_sweep(..., ray_address=...)`, ``simharness sweep
--ray ADDRESS``): each point on one node of a cluster, its files back in this results root.

::

    driver (this process)                                     Ray cluster
      check_address: TCP, then a gRPC handshake, within connect_timeout (else ConfigError)
      ray.init(address)                      (or the Ray this process has joined already)
      per unfinished point: the run.lock of its run directory here, held to the end
        spec {config (a dict), run id, resume, files of its unfinished run (resume)},
        msgpack bytes
        _run_point.options(num_cpus=its workers,  ──────▶  one task on one node:
                           max_retries=3)                    files -> a scratch run directory
                                                             run_experiment(cfg, scratch): its
                                                               stack's workers on this node
                                                             answer {code, error, node, files}
      files -> <results>/<name>/<run id>/  ◀──────────────  (msgpack bytes: str, int, bytes)
        (summary.json last), RunResult from it

Why tasks and not Ray Tune: a point is one `run_experiment`, already resumable from its
own checkpoints, with its own run directory, lock and per-round metrics.jsonl; a task
carries msgpack bytes of plain values there and of file bytes back, no code and no
object of ours (what Ray serializes is bytes: decoding them runs no code). Tune would ship a
trainable (code), keep its own copies of results and checkpoints
(its resume is not the run directory's), and its early stopping (ASHA) ends points at
rounds a sequential sweep runs: not the same bits. (It also needs pydantic and more, not
installed with ``simharness[ray]``.)

A point's task reserves its workers' CPUs (``stack.num_workers``; 1 for a thread stack
or an unset ``num_workers``), so Ray puts the point on one node with that many free CPUs,
where its process stack forks its workers: a point's workers are together on one node,
on cores of that node no other point of a sweep holds (`claimed_cores`).
A point on the Ray stack is refused (its actors would need CPUs of their own beside the
task's). A node lost mid-point: Ray runs the task again elsewhere (`MAX_RETRIES`; from
the point's start, or from the checkpoint this driver holds for it). Ctrl-C: each running
task is cancelled (a KeyboardInterrupt in it: its stack closes), ended after
`STOP_GRACE_S` (``force``); nothing of it is written here, a later sweep runs it again.
A task's scratch directory is named by its node and process; a task removes those of
dead processes of its node (a task killed, or ended by force) before it starts. Every point gives the bits of a sequential sweep (the same resolved
config; the determinism guarantee does not depend on the machine).

Every node needs simharness installed, and the modules a config names (a Keras builder),
as for the Ray stack.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import logging
import os
import re
import shutil
import signal
import socket
import tempfile
import threading
import time
import types
from pathlib import Path
from typing import (
    Callable,
    Dict,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    TypedDict,
    cast,
)

import msgpack

from simharness.errors import ConfigError, MissingDependencyError
from simharness.experiments import atomic
from simharness.experiments.config import ExperimentConfig
from simharness.experiments.runner.lock import LOCK_FILE, run_lock
from simharness.experiments.runner.parallel import (
    EXIT_COMPLETE,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    result_of,
)
from simharness.experiments.runner.rundir import (
    _clean_run_dir,
    _resumable,
    PathLike,
    RunResult,
    SUMMARY_FILE,
)

_log = logging.getLogger('simharness.experiments.runner')

#: Seconds a Ray address has to answer (as Ray's own client connect takes at most).
CONNECT_TIMEOUT_S = 30.0
#: Times Ray runs a point's task again when its node or worker process dies.
MAX_RETRIES = 3
#: The folder (in a node's temporary directory) of the files by which points hold cores.
CORE_LOCKS = 'simharness-sweep-cores'
#: Seconds cancelled points have to close their stacks before they are ended.
STOP_GRACE_S = 3.0

Files = Dict[str, bytes]


class PointSpec(TypedDict):
    """What a task gets: plain data only."""

    config: Dict[str, object]
    run_id: str
    resume: bool
    files: Files


class PointAnswer(TypedDict):
    """What a task answers: plain data only."""

    code: int
    error: Optional[str]
    node: str
    files: Files


def _pack(message: Mapping[str, object]) -> bytes:
    """A task's argument or answer as msgpack bytes of plain values (maps, lists, str, int,
    bool, None, bytes): what Ray carries of ours is bytes, and decoding them builds plain
    values only, never an object whose class the peer chose."""
    return msgpack.packb(message, use_bin_type=True)


def _unpack(data: object, keys: Tuple[str, ...], what: str) -> Dict[str, object]:
    """`_pack`'s message back; a ValueError naming `what` when it is not one."""
    if not isinstance(data, bytes):
        raise ValueError(f'{what}: expected msgpack bytes, got {type(data).__name__}')
    out = msgpack.unpackb(data, raw=False, strict_map_key=True)
    if not isinstance(out, dict) or sorted(out) != sorted(keys):
        raise ValueError(f'{what}: expected a map of {sorted(keys)}, got {type(out).__name__}')
    return out


# ---------------------------------------------------------------- the address


def _host_port(address: str) -> Tuple[str, int]:
    rest = address[len('ray://') :] if address.startswith('ray://') else address
    host, sep, port = rest.rpartition(':')
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(
            f"--ray {address!r}: expected 'auto', 'host:port' (a cluster's GCS, "
            "e.g. head:6379) or 'ray://host:port' (its Ray client server, e.g. head:10001)",
            key='ray_address',
            value=address,
        )
    return host.strip('[]'), int(port)


def check_address(address: str, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """Checks that something speaking gRPC (Ray's GCS or client server) answers at
    `address` within `timeout` seconds; ``'auto'`` is left to ``ray.init``. Imports no Ray.

    Raises:
        ConfigError: a malformed address, or one that does not answer (one line).
    """
    if address == 'auto':
        return
    host, port = _host_port(address)
    deadline = time.monotonic() + timeout

    def silent(why: str) -> ConfigError:
        return ConfigError(
            f'--ray {address}: no Ray cluster answers there ({why}); start one '
            '(ray start --head) or give the address its head prints',
            key='ray_address',
            value=address,
        )

    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as e:
        raise silent(e.strerror or str(e) or type(e).__name__) from None
    try:
        import grpc  # pylint: disable=import-outside-toplevel  # Ray's own dependency
    except ImportError:
        return
    channel = grpc.insecure_channel(f'{host}:{port}')
    try:
        grpc.channel_ready_future(channel).result(timeout=max(0.1, deadline - time.monotonic()))
    except grpc.FutureTimeoutError:
        raise silent(f'no gRPC handshake within {timeout:g} s') from None
    finally:
        channel.close()


def _connect(address: str, timeout: float) -> Tuple[types.ModuleType, bool]:
    """Ray, joined to `address` (or as this process joined it already); True when this
    call joined it (and leaves it at the end)."""
    # pylint: disable=import-outside-toplevel
    from simharness.runtime.ray.placement import import_ray, quiet_ray_start, ray_init_arguments

    check_address(address, timeout)
    try:
        ray = import_ray()
    except MissingDependencyError as e:
        raise ConfigError(str(e), key='ray_address', value=address) from None
    if ray.is_initialized():
        _log.info('sweep: Ray is already initialised in this process; its cluster runs the points')
        return ray, False
    args = ray_init_arguments(address, {}, False)
    if address != 'auto' and not address.startswith('ray://'):
        try:  # a node of this machine on loopback: this driver joins it as a node there
            if ipaddress.ip_address(_host_port(address)[0]).is_loopback:
                args['_node_ip_address'] = _host_port(address)[0]
        except ValueError:
            pass
    try:
        with quiet_ray_start(), _signal_handlers_kept():
            ray.init(**args)
    except ConnectionError as e:
        raise ConfigError(
            f'--ray {address}: {str(e).splitlines()[0] if str(e) else type(e).__name__}',
            key='ray_address',
            value=address,
        ) from None
    return ray, True


@contextlib.contextmanager
def _signal_handlers_kept() -> Iterator[None]:
    """The Python handlers of the stop signals as they were before the block: joining Ray
    installs its own for SIGTERM (a stack dump, then abort), which would kill the sweep
    before it could cancel its points (the CLI turns SIGTERM into a clean stop)."""
    names = ('SIGINT', 'SIGTERM', 'SIGHUP')
    signums = [getattr(signal, n) for n in names if hasattr(signal, n)]
    saved = {s: signal.getsignal(s) for s in signums}
    try:
        yield
    finally:
        if threading.current_thread() is threading.main_thread():
            for signum, handler in saved.items():
                if handler is not None and signal.getsignal(signum) is not handler:
                    signal.signal(signum, handler)


# ---------------------------------------------------------------- a point's task


def _run_point(payload: bytes) -> bytes:
    """One point in a Ray task (its `PointSpec` packed): a scratch results root on this
    node, `run_experiment`, the run directory's files back (its `PointAnswer` packed); the
    scratch directory is removed."""
    spec = cast(PointSpec, _unpack(payload, tuple(PointSpec.__annotations__), 'a sweep point'))
    return _pack(_point_answer(spec))


def _point_answer(spec: PointSpec) -> PointAnswer:
    # pylint: disable=import-outside-toplevel
    import ray

    from simharness.experiments.config import config_from_dict
    from simharness.experiments.runner import run_experiment

    node = ray.util.get_node_ip_address()
    reap_scratch(Path(tempfile.gettempdir()))
    scratch = Path(tempfile.mkdtemp(prefix=f'simharness-sweep-{node}-{os.getpid()}-'))
    try:
        cfg = config_from_dict(spec['config'])
        run_dir = scratch / cfg.name / spec['run_id']
        _write_files(run_dir, spec['files'])
        code, error = EXIT_COMPLETE, None
        try:
            with claimed_cores(task_cpus(cfg)):
                result = run_experiment(
                    cfg, scratch, progress=False, run_id=spec['run_id'], resume=spec['resume']
                )
            if result.status != 'complete':
                code, error = EXIT_FAILED, str(result.summary.get('error') or result.status)
        except KeyboardInterrupt:  # ray.cancel: the summary says 'interrupted'
            code = EXIT_INTERRUPTED
        except Exception as e:  # pylint: disable=broad-exception-caught  # the point failed
            code, error = EXIT_FAILED, f'{type(e).__name__}: {e}'
        return {'code': code, 'error': error, 'node': node, 'files': _read_files(run_dir)}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


@contextlib.contextmanager
def claimed_cores(n: int, folder: Optional[Path] = None) -> Iterator[List[int]]:
    """`n` cores of this node that no other sweep point holds, for the block: this thread
    (and what it starts: the stack's worker processes) runs on them; yields them.

    Ray counts CPUs but pins nothing, so two points on one node would pin their workers
    to the same first cores. Each core is a file in `folder` (the node's temporary
    directory) that a point holds with ``flock`` (the kernel drops it when the task's
    process dies). Fewer than `n` free: nothing is pinned (yields []), the points share.
    """
    try:
        mine = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        yield []
        return
    folder = folder or Path(tempfile.gettempdir()) / CORE_LOCKS
    held: List[Tuple[int, int]] = []
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for core in mine:
            if len(held) == n:
                break
            fd = os.open(folder / f'{core}.lock', os.O_CREAT | os.O_RDWR, 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            held.append((core, fd))
    except OSError:
        pass
    if len(held) < n:  # too few free: share, and leave the free ones to others
        for _, fd in held:
            os.close(fd)
        held = []
    pinned = [core for core, _ in held]
    try:
        if pinned:
            os.sched_setaffinity(0, pinned)
        yield pinned
    finally:
        if pinned:
            os.sched_setaffinity(0, mine)  # the Ray worker runs the next task as before
        for _, fd in held:
            os.close(fd)


_SCRATCH = re.compile(r'^simharness-sweep-.+-(\d+)-[^-]+$')


def reap_scratch(folder: Path) -> List[str]:
    """Removes the scratch directories in `folder` of tasks whose process is gone (killed,
    or cancelled by force); returns their names."""
    gone = []
    for path in folder.glob('simharness-sweep-*'):
        m = _SCRATCH.match(path.name)
        if not m or not path.is_dir():
            continue
        try:
            os.kill(int(m.group(1)), 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
            gone.append(path.name)
        except OSError:
            pass  # another user's process: alive
    return gone


def _read_files(run_dir: Path) -> Files:
    """The run directory's files (relative paths), without its lock and temporary files."""
    out: Files = {}
    if not run_dir.is_dir():
        return out
    for path in sorted(run_dir.rglob('*')):
        if path.is_file() and path.name != LOCK_FILE and not atomic.is_temp_file(path):
            out[path.relative_to(run_dir).as_posix()] = path.read_bytes()
    return out


def _write_files(run_dir: Path, files: Files) -> None:
    """`files` into `run_dir` (atomically each; summary.json last, so that a write cut
    short never claims a complete run)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    for rel in sorted(files, key=lambda r: r == SUMMARY_FILE):
        parts = Path(rel).parts
        if not parts or Path(rel).is_absolute() or '..' in parts:
            raise ValueError(f'a point answered a file outside its run directory: {rel!r}')
        path = run_dir.joinpath(*parts)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic.write_bytes(path, files[rel])


# ---------------------------------------------------------------- the driver


def task_cpus(config: ExperimentConfig) -> int:
    """CPUs a point's task reserves on its node: its workers (1 for a thread stack or an
    unset ``num_workers``).

    Raises:
        ConfigError: a point on the Ray stack.
    """
    s = config.stack
    if s.kind == 'ray':
        raise ConfigError(
            'a sweep on Ray runs each point in one Ray task on one node, its workers as '
            'processes there: give the points stack.kind = "process" (or "thread"), '
            'not "ray"',
            key='stack.kind',
            value=s.kind,
        )
    n = getattr(s, 'num_workers', None)
    return n if s.kind != 'thread' and isinstance(n, int) and n > 0 else 1


def run_points(
    points: Sequence[Tuple[int, str, ExperimentConfig]],
    total: int,
    results_root: PathLike,
    address: str,
    resume: bool,
    log: Optional[Callable[[str], None]],
    connect_timeout: float = CONNECT_TIMEOUT_S,
) -> Dict[str, RunResult]:
    """Runs `points` ((sweep position, run id, config)) as Ray tasks on the cluster at
    `address`, as many at once as its free CPUs take; returns their RunResults by run id.

    Raises:
        ConfigError: the address does not answer within `connect_timeout` (nothing
            started), or a point is on the Ray stack.
        RunInProgressError: another run holds a point's run directory (nothing ran).
        KeyboardInterrupt: the sweep was stopped (every running task was cancelled).
    """
    if not points:
        return {}
    cpus = {run_id: task_cpus(cfg) for _, run_id, cfg in points}
    root = Path(results_root)
    ray, owned = _connect(address, connect_timeout)
    try:
        with contextlib.ExitStack() as held:
            for _, run_id, cfg in points:  # each point's directory is this sweep's to the end
                run_dir = root / cfg.name / run_id
                run_dir.mkdir(parents=True, exist_ok=True)
                held.enter_context(run_lock(run_dir))
            return _run_tasks(ray, points, total, root, cpus, resume, log)
    finally:
        if owned:
            ray.shutdown()


def _run_tasks(
    ray: types.ModuleType,
    points: Sequence[Tuple[int, str, ExperimentConfig]],
    total: int,
    root: Path,
    cpus: Dict[str, int],
    resume: bool,
    log: Optional[Callable[[str], None]],
) -> Dict[str, RunResult]:
    biggest = max(
        [float(n['Resources'].get('CPU', 0)) for n in ray.nodes() if n.get('Alive')] or [0.0]
    )
    task = ray.remote(_run_point)
    results: Dict[str, RunResult] = {}
    pending: Dict[object, Tuple[int, str, ExperimentConfig]] = {}
    for i, run_id, cfg in points:
        run_dir = root / cfg.name / run_id
        if cpus[run_id] > biggest:
            results[run_id] = _unanswered(
                run_id,
                run_dir,
                f'needs {cpus[run_id]} CPUs on one node (stack.num_workers); the largest '
                f'node of the cluster has {biggest:g}',
            )
            continue
        spec: PointSpec = {
            'config': cfg.to_dict(),
            'run_id': run_id,
            'resume': resume,
            'files': _read_files(run_dir) if resume and _resumable(run_dir, cfg) else {},
        }
        ref = task.options(
            num_cpus=cpus[run_id], max_retries=MAX_RETRIES, retry_exceptions=False
        ).remote(_pack(spec))
        pending[ref] = (i, run_id, cfg)
        if log:
            log(f'[{i}/{total}] run {run_id} (a Ray task, {cpus[run_id]} CPU on one node)')
    try:
        while pending:
            # Polled, sleeping in Python: a signal there raises the CLI's own exception
            # (Ray turns one that lands inside its blocking wait into a KeyboardInterrupt).
            ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=0)
            if not ready:
                time.sleep(0.2)
            for ref in ready:
                i, run_id, cfg = pending.pop(ref)
                result = _collect(ray, ref, root / cfg.name / run_id, run_id)
                results[run_id] = result
                if log:
                    log(
                        f'[{i}/{total}] {run_id}: {result.status}'
                        + (f' ({result.error})' if result.error else '')
                    )
    except BaseException:
        _log.warning('sweep: stopping; cancelling %d running point(s) on Ray', len(pending))
        _cancel(ray, pending)
        raise
    return results


def _collect(ray: types.ModuleType, ref: object, run_dir: Path, run_id: str) -> RunResult:
    """A finished task's RunResult, its files written to `run_dir`."""
    try:
        answer = cast(
            PointAnswer,
            _unpack(ray.get(ref), tuple(PointAnswer.__annotations__), f'the answer of {run_id}'),
        )
    except ray.exceptions.RayError as e:  # lost MAX_RETRIES times
        first = (str(e).strip().splitlines() or [''])[0][:300]
        return _unanswered(run_id, run_dir, f'{type(e).__name__}: {first}')
    if answer['files']:
        _clean_run_dir(run_dir)
        _write_files(run_dir, answer['files'])
    _log.info('%s ran on the Ray node %s', run_id, answer['node'])
    return result_of(run_id, run_dir, answer['code'], answer['error'] or '')


def _unanswered(run_id: str, run_dir: Path, error: str) -> RunResult:
    """A point whose task gave no answer: failed, its run directory here untouched."""
    return RunResult(run_id, run_dir, 'failed', {'status': 'failed', 'error': error}, error=error)


def _cancel(
    ray: types.ModuleType, pending: Dict[object, Tuple[int, str, ExperimentConfig]]
) -> None:
    """Cancels the running tasks (a KeyboardInterrupt in each: its stack closes, its scratch
    directory goes), gives them `STOP_GRACE_S` to do so, then ends what is left (``force``).
    Their answers are lost (Ray answers a cancelled task with TaskCancelledError)."""
    if not pending:
        return
    for ref in pending:
        with contextlib.suppress(Exception):
            ray.cancel(ref)
    time.sleep(STOP_GRACE_S)
    for ref in pending:
        with contextlib.suppress(Exception):
            ray.cancel(ref, force=True)
