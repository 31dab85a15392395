"""A sweep's points side by side (`run_sweep(..., jobs=N)`), each job on its own cores.

::

    usable cores (sched_getaffinity) --plan_slots--> N disjoint core sets, each of
        `point_cores(cfg)` cores (a point's workers; its driver shares them)
    one thread per job in the sweep's process, one child process per job:
        python -m simharness.experiments.runner.parallel '[cores]'   (`_serve_points`)
            sched_setaffinity(its cores) before TensorFlow starts its threads; then per
            point sent on its stdin (one JSON line: config, results root, run id):
            run_experiment(...) as a sequential sweep does (the pool pins its workers
            within those cores: `pinning.usable_cpus`) -> one answer line
            {"code": 0 complete | 1 failed | 3 another run holds it | 130 interrupted}
    a point's RunResult: its summary.json, read back
    a job process dying in a point (kill -9, the OOM killer): the sweep writes the point's
        summary ('failed', naming the signal; 'interrupted' while the sweep stops) and
        starts a new process for the next point
    the sweep's process gone (kill -9): each job stops its point as on SIGTERM and exits

TensorFlow and the worker pool's forkserver start once per job, not per point. Every
point gives the bits a sequential sweep gives (the same resolved config; the determinism
guarantee does not depend on cores). A job's output (logs, warnings) goes to
``<results>/<name>/.sweep-job-<k>.out``, removed when every point completed. Ctrl-C or a
stop signal of the sweep stops every running point (SIGTERM: each writes its
'interrupted' summary), then the sweep raises.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import types
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from simharness.errors import OversubscribedWarning, RunInProgressError
from simharness.experiments.config import ExperimentConfig
from simharness.experiments import atomic
from simharness.experiments.runner.lock import run_lock
from simharness.runtime.exits import describe_exit
from simharness.experiments.runner.rundir import (
    _now,
    _read_rows,
    METRICS_FILE,
    PathLike,
    RunResult,
    SUMMARY_FILE,
    read_json,
)

_log = logging.getLogger('simharness.experiments.runner')

#: Exit codes of a point's child process.
EXIT_COMPLETE, EXIT_FAILED, EXIT_IN_PROGRESS, EXIT_INTERRUPTED = 0, 1, 3, 130
#: Seconds the sweep waits for its stopped points to write their summaries and exit.
STOP_GRACE_S = 60.0
#: Seconds between a job's checks that the sweep's process is still there.
PARENT_POLL_S = 0.5


def callers_level() -> int:
    """The `warnings.warn` stack level of the first frame outside simharness (the user's
    line that started the sweep), counted from the caller of this."""
    package = str(Path(__file__).resolve().parents[2])
    frame: Optional[types.FrameType] = sys._getframe(2)
    level = 2
    while frame is not None and frame.f_code.co_filename.startswith(package + os.sep):
        frame, level = frame.f_back, level + 1
    return level


def usable_cores() -> List[int]:
    """The cores this process may run on (all of them where affinity is unknown)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


def point_cores(config: ExperimentConfig, usable: int) -> int:
    """Cores one point runs on: its process or Ray stack's workers (`num_workers`; unset:
    every usable core), or one for a thread stack."""
    s = config.stack
    if s.kind == 'thread':
        return 1
    n = getattr(s, 'num_workers', None)
    return n if isinstance(n, int) and n > 0 else usable


def default_jobs(config: ExperimentConfig, points: Sequence[ExperimentConfig]) -> int:
    """The jobs that fit this machine: usable cores // the largest point's cores (>= 1)."""
    cores = len(usable_cores())
    per = max([point_cores(p, cores) for p in points] or [point_cores(config, cores)])
    return max(1, cores // max(1, per))


def warn_if_oversubscribed(jobs: int, per_point: int, cores: int) -> None:
    """An `OversubscribedWarning` (pointing at the user's line) when `jobs` points of
    `per_point` cores each need more than the `cores` usable ones, as a pool of more
    workers than cores warns."""
    if jobs * per_point > cores:
        warnings.warn(
            OversubscribedWarning(
                f'sweep: {jobs} jobs x {per_point} core(s) per point is more than the {cores} '
                f'usable CPU core(s) of this process: the points share them (slower, the same '
                f'results); jobs={max(1, cores // per_point)} is the most that run in parallel'
            ),
            stacklevel=callers_level(),
        )


def plan_slots(jobs: int, per_point: int, cores: Sequence[int]) -> Tuple[List[List[int]], bool]:
    """`jobs` core sets of `per_point` cores each, disjoint while they fit in `cores`
    (then wrapped around: the second value is True, the slots share cores)."""
    cores = list(cores)
    per_point = max(1, min(per_point, len(cores)))
    over = jobs * per_point > len(cores)
    slots = [
        [cores[(k * per_point + j) % len(cores)] for j in range(per_point)] for k in range(jobs)
    ]
    return slots, over


class _Slot:
    """One job: a long-lived child process on its cores (`_serve_points`), running the
    points it is sent one after another; its output goes to `out`."""

    def __init__(self, index: int, cores: List[int], out: Path):
        self.index, self.cores, self.out = index, cores, out
        self.proc: Optional[subprocess.Popen] = None  # type: ignore[type-arg]

    def run(self, spec: Dict[str, Any]) -> Dict[str, Any]:
        """Runs one point; its answer (``{"code", "error"}``; with ``"died": True`` when
        the process died in it: a new one runs the next point)."""
        if self.proc is None or self.proc.poll() is not None:
            with open(self.out, 'ab') as sink:
                # This process' import path (a notebook's sys.path additions: a Keras
                # builder's module) is the job's too.
                path = os.pathsep.join(
                    [p for p in sys.path if p] + [os.environ.get('PYTHONPATH', '')]
                ).rstrip(os.pathsep)
                self.proc = subprocess.Popen(
                    [
                        sys.executable,
                        '-m',
                        'simharness.experiments.runner.parallel',
                        json.dumps(self.cores),
                        str(os.getpid()),
                    ],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=sink,
                    env=dict(os.environ, PYTHONPATH=path),
                )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write((json.dumps(spec) + '\n').encode())
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        except (BrokenPipeError, OSError):
            line = b''
        if not line:  # it died in the point: the point cannot say so itself
            pid, status = self.proc.pid, self.proc.wait()
            return {
                'code': EXIT_FAILED,
                'error': f"the point's job process (pid {pid}) ended without answering: "
                + describe_exit(status),
                'died': True,
            }
        answer: Dict[str, Any] = json.loads(line)
        return answer

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.close()  # end of points: it exits
                self.proc.wait(STOP_GRACE_S)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()

    def stop(self) -> None:
        """SIGTERM: the running point stops as on Ctrl-C (its summary says 'interrupted')."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.proc.send_signal(signal.SIGTERM)
            except OSError:
                pass


def run_points(
    points: Sequence[Tuple[int, str, ExperimentConfig]],
    total: int,
    results_root: PathLike,
    jobs: int,
    resume: bool,
    log: Optional[Callable[[str], None]],
) -> Dict[str, RunResult]:
    """Runs `points` ((sweep position, run id, config)) `jobs` at a time, each job a child
    process on its own cores running points one after another (TensorFlow and the worker
    pool's forkserver start once per job, as in a sequential sweep); returns the points'
    RunResults by run id.

    Raises:
        KeyboardInterrupt: the sweep was stopped (every running point was stopped first).
        RunInProgressError: another run held a point (the points already running finish;
            no further point starts).
    """
    if not points:
        return {}
    cores = usable_cores()
    per = max(point_cores(cfg, len(cores)) for _, _, cfg in points)
    jobs = min(jobs, len(points))
    plan, _ = plan_slots(jobs, per, cores)
    warn_if_oversubscribed(jobs, per, len(cores))
    root = Path(results_root)
    name = points[0][2].name
    (root / name).mkdir(parents=True, exist_ok=True)
    slots = [_Slot(k, plan[k], root / name / f'.sweep-job-{k}.out') for k in range(jobs)]
    queue = list(points)
    results: Dict[str, RunResult] = {}
    held: List[str] = []
    stopping: List[bool] = []  # the sweep is being stopped: a dying point was interrupted
    lock = threading.Lock()

    def job(slot: _Slot) -> None:
        while True:
            with lock:
                if held or not queue:
                    return
                i, run_id, cfg = queue.pop(0)
            if log:
                log(f'[{i}/{total}] run {run_id} (cores {_cores_text(slot.cores)})')
            run_dir = root / cfg.name / run_id
            answer = slot.run(
                {
                    'config': cfg.to_dict(),
                    'results_root': str(root),
                    'run_id': run_id,
                    'resume': resume,
                }
            )
            code = int(answer.get('code', EXIT_FAILED))
            if answer.get('died'):
                # Its summary still says 'running': say what became of it.
                close_abandoned(
                    run_dir, 'interrupted' if stopping else 'failed', str(answer['error'])
                )
            if code == EXIT_IN_PROGRESS:
                with lock:
                    held.append(run_id)
                return
            message = answer.get('error')
            result = result_of(
                run_id, run_dir, code, str(message) if message else _last_line(slot.out)
            )
            with lock:
                results[run_id] = result
            if log:
                log(
                    f'[{i}/{total}] {run_id}: {result.status}'
                    + (f' ({result.error})' if result.error else '')
                )
            if code == EXIT_INTERRUPTED:
                return

    threads = [
        threading.Thread(target=job, args=(s,), name=f'sweep-job-{s.index}', daemon=True)
        for s in slots
    ]
    try:
        for t in threads:
            t.start()
        for t in threads:
            while t.is_alive():
                t.join(0.2)  # short waits: Ctrl-C reaches this thread
    except BaseException:
        with lock:
            queue.clear()
            stopping.append(True)
        for s in slots:
            s.stop()
        for t in threads:
            t.join(STOP_GRACE_S)
        for s in slots:
            s.close()  # a point still running now is killed: its thread says so
        for t in threads:
            t.join(STOP_GRACE_S)
        raise
    for s in slots:
        s.close()
    if all(r.status == 'complete' for r in results.values()):
        for s in slots:
            s.out.unlink(missing_ok=True)
    if held:
        raise RunInProgressError(
            f'another run holds the sweep point {held[0]} under {root}; '
            'the points before it have run'
        )
    return results


def close_abandoned(run_dir: Path, status: str, error: str) -> None:
    """The summary of a point whose process died in it (it still says 'running'): `status`
    ('failed', or 'interrupted' while the sweep stops) with `error` and the rounds its
    metrics hold, written atomically, under the run directory's lock (the dead process'
    lock went with it; a run of the directory started meanwhile is left alone)."""
    try:
        with run_lock(run_dir):
            summary = read_json(run_dir / SUMMARY_FILE)
            if not isinstance(summary, dict) or summary.get('status') != 'running':
                return
            summary.update(
                status=status,
                error=error,
                rounds_completed=len(_read_rows(run_dir / METRICS_FILE)),
                finished_at=_now(),
            )
            atomic.write_json(run_dir / SUMMARY_FILE, summary)
    except (RunInProgressError, OSError) as e:
        _log.warning('%s: its summary was left as it was (%s)', run_dir, e)


def _cores_text(cores: Sequence[int]) -> str:
    return ','.join(str(c) for c in cores)


def result_of(run_id: str, run_dir: Path, code: int, message: str) -> RunResult:
    """A point's RunResult from its summary.json and its exit `code` (`message`: the error
    when the summary has none)."""
    summary = read_json(run_dir / SUMMARY_FILE) or {}
    status = summary.get('status') or ('complete' if code == EXIT_COMPLETE else 'failed')
    if code == EXIT_INTERRUPTED and status == 'running':
        status = 'interrupted'
    error = None
    if status != 'complete':
        error = summary.get('error') or message or f'exit code {code}'
        if status == 'failed' and summary.get('status') != 'failed':
            summary = {'status': 'failed', 'error': error}
    return RunResult(run_id, run_dir, status, summary, error=error)


def _last_line(path: Path) -> str:
    try:
        lines = [ln.strip() for ln in path.read_text(errors='replace').splitlines()]
    except OSError:
        return ''
    lines = [ln for ln in lines if ln]
    return lines[-1][:500] if lines else ''


# ------------------------------------------------------------------ the child


def _watch_parent(parent: int) -> None:
    """Stops this job as the sweep's SIGTERM would once `parent` (the sweep's process) is
    gone, e.g. killed by SIGKILL: a point left running would run on, orphaned, to its last
    round. (A thread polls: the kernel's parent-death signal fires when the sweep's
    *thread* that started this process ends, which a job's thread does when it runs out
    of points.)"""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name='simharness-sweep-parent', daemon=True).start()


def _serve_points(cores: List[int], parent: int) -> int:
    """A job's process: its cores, then one point per line of stdin (`run_experiment`), one
    answer line per point (``{"code": ..., "error": ...}``) on the original stdout; what
    the points print goes to stderr (the job's output file). A point runs until it ends,
    the sweep stops it (SIGTERM) or the sweep's process `parent` is gone."""
    os.sched_setaffinity(0, cores)  # before TensorFlow starts its threads
    answers = os.fdopen(os.dup(1), 'w')
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    stopping: List[int] = []

    def stop(signum: int, frame: object) -> None:  # pylint: disable=unused-argument
        if stopping:  # the first signal stops the point; its clean-up runs to the end
            return  # (Ctrl-C reaches the job, then the sweep's SIGTERM)
        stopping.append(signum)
        raise KeyboardInterrupt(signal.Signals(signum).name)

    for name in ('SIGINT', 'SIGTERM', 'SIGHUP'):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), stop)
    _watch_parent(parent)
    try:
        for line in sys.stdin:
            if not line.strip():
                continue
            code, error = _run_point(json.loads(line))
            try:
                answers.write(json.dumps({'code': code, 'error': error}) + '\n')
                answers.flush()
            except OSError:  # the sweep is gone: no one to answer
                return EXIT_INTERRUPTED
            if code == EXIT_INTERRUPTED:
                return code
    except KeyboardInterrupt:  # stopped between points
        return EXIT_INTERRUPTED
    return EXIT_COMPLETE


def _run_point(spec: Dict[str, Any]) -> Tuple[int, Optional[str]]:
    """One point of a job (`run_experiment`): its exit code and error."""
    from simharness.experiments.config import config_from_dict
    from simharness.experiments.runner import run_experiment

    try:
        result = run_experiment(
            config_from_dict(spec['config']),
            spec['results_root'],
            progress=False,
            run_id=spec['run_id'],
            resume=spec['resume'],
        )
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED, None
    except RunInProgressError as e:
        return EXIT_IN_PROGRESS, f'{type(e).__name__}: {e}'
    except Exception as e:  # pylint: disable=broad-exception-caught  # the point failed
        return EXIT_FAILED, f'{type(e).__name__}: {e}'
    if result.status != 'complete':
        return EXIT_FAILED, result.summary.get('error')
    return EXIT_COMPLETE, None


if __name__ == '__main__':
    sys.exit(_serve_points(json.loads(sys.argv[1]), int(sys.argv[2])))
