"""Running benchmark sessions: at a git revision, repeated, or interleaved A/B.

* `checkout(rev, dest)`: the files of a commit (``git archive``; the work
  tree and the index are not touched), and its commit_info. A session run in
  that folder imports simharness from it (``PYTHONPATH``), so an old commit is
  measured with its own code and its own benchmarks, and the plugin saves the
  commit's sha, time and ``dirty: false``.
* `run_session`: one pytest session with ``--benchmark-only`` writing one JSON file.
* `run_interleaved`: two sessions at once (A and B) whose timed rounds take
  turns through two FIFOs (see `simharness.pytest_plugin._Turns`): both meet
  the same machine load, so their rounds can be compared one by one.

Processes started here are waited for; on a timeout or Ctrl-C they are killed
(their whole process group: pytest's worker pools go with them).
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from simharness.errors import SimharnessValueError

__all__ = ['Session', 'checkout', 'commit_info', 'run_interleaved', 'run_session']

INTERLEAVE_ENV = 'SIMHARNESS_BENCH_INTERLEAVE'
COMMIT_INFO_ENV = 'SIMHARNESS_BENCH_COMMIT_INFO'
#: Seconds the coordinator waits for a finished session to exit.
EXIT_WAIT = 120.0


def git(args: Sequence[str], cwd: str, binary: bool = False) -> Any:
    try:
        out = subprocess.run(['git', *args], cwd=cwd, capture_output=True, check=True)
    except FileNotFoundError:
        raise SimharnessValueError('git is not installed (needed to run a revision)') from None
    except subprocess.CalledProcessError as e:
        raise SimharnessValueError(
            f'git {" ".join(args)} failed in {cwd}: {e.stderr.decode(errors="replace").strip()}'
        ) from None
    return out.stdout if binary else out.stdout.decode().strip()


def commit_info(rev: str, repo: str = '.') -> Dict[str, Any]:
    """pytest-benchmark's commit_info for `rev` of the repository at `repo` (never dirty)."""
    sha, ctime, atime = git(['show', '-s', '--format=%H%n%cI%n%aI', rev, '--'], repo).split('\n')
    return {
        'id': sha,
        'time': ctime,
        'author_time': atime,
        'dirty': False,
        'project': os.path.basename(os.path.abspath(git(['rev-parse', '--show-toplevel'], repo))),
        'branch': '(revision)',
    }


def checkout(rev: str, dest: str, repo: str = '.') -> Dict[str, Any]:
    """Writes the files of `rev` into `dest` (created) with ``git archive``; returns its commit_info.

    Raises:
      SimharnessValueError: `rev` is not a commit of `repo`.
    """
    info = commit_info(rev, repo)
    data = git(['archive', '--format=tar', info['id']], repo, binary=True)
    os.makedirs(dest, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        if sys.version_info >= (3, 12):
            tar.extractall(dest, filter='data')
        else:
            tar.extractall(dest)  # git archive of our own repository
    return info


@dataclasses.dataclass
class Session:
    """One side: where pytest runs and with what.

    Attributes:
      cwd: the folder to run in (a checkout, or the work tree).
      pytest_args: the arguments after ``pytest`` (test paths, ``-k``, ...).
      env: extra environment variables (e.g. a feature flag of the candidate).
      code_path: put first on ``PYTHONPATH`` (the checkout whose simharness to import).
      commit: commit_info to save instead of asking git in `cwd`.
    """

    cwd: str
    pytest_args: Sequence[str] = ()
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    code_path: Optional[str] = None
    commit: Optional[Dict[str, Any]] = None

    def command(self, json_out: str, extra: Sequence[str] = ()) -> List[str]:
        return [
            sys.executable,
            '-m',
            'pytest',
            '-q',
            '-p',
            'no:cacheprovider',
            '--benchmark-only',
            f'--benchmark-json={json_out}',
            *extra,
            *self.pytest_args,
        ]

    def environ(self, more: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
        env = dict(os.environ)
        env.pop(INTERLEAVE_ENV, None)
        env.pop(COMMIT_INFO_ENV, None)
        if self.code_path:
            env['PYTHONPATH'] = os.pathsep.join(
                [self.code_path] + ([env['PYTHONPATH']] if env.get('PYTHONPATH') else [])
            )
        if self.commit:
            env[COMMIT_INFO_ENV] = json.dumps(self.commit)
        env.update(self.env)
        env.update(more or {})
        return env


def _start(
    session: Session,
    json_out: str,
    log_path: str,
    extra: Sequence[str] = (),
    env: Optional[Mapping[str, str]] = None,
) -> Tuple[subprocess.Popen, Any]:
    log = open(log_path, 'wb')  # pylint: disable=consider-using-with
    try:
        proc = subprocess.Popen(
            session.command(json_out, extra),
            cwd=session.cwd,
            env=session.environ(env),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except BaseException:
        log.close()
        raise
    return proc, log


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            proc.kill()
        proc.wait()


def _tail(path: str, n: int = 3000) -> str:
    try:
        with open(path, 'rb') as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - n))
            return f.read().decode(errors='replace')
    except OSError:
        return ''


def _check(proc: subprocess.Popen, json_out: str, log_path: str, what: str) -> str:
    if proc.returncode != 0 or not os.path.isfile(json_out):
        raise SimharnessValueError(
            f'{what}: pytest exited with {proc.returncode} (log {log_path}):\n{_tail(log_path)}'
        )
    return json_out


def run_session(
    session: Session, json_out: str, extra: Sequence[str] = (), timeout: Optional[float] = None
) -> str:
    """Runs one pytest benchmark session; returns `json_out`.

    Raises:
      SimharnessValueError: pytest failed (with the tail of its output) or timed out.
    """
    log_path = json_out + '.log'
    proc, log = _start(session, json_out, log_path, extra)
    try:
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise SimharnessValueError(
                f'benchmark session in {session.cwd} ran past {timeout} s (log {log_path})'
            ) from None
    finally:
        _kill(proc)
        log.close()
    return _check(proc, json_out, log_path, f'benchmark session in {session.cwd}')


def run_interleaved(
    sessions: Sequence[Session],
    out_dir: str,
    extra: Sequence[str] = (),
    timeout: Optional[float] = None,
    labels: Optional[Sequence[str]] = None,
) -> List[str]:
    """Runs several sessions at once, their timed rounds taking turns in rotation.

    This process is the coordinator (see `simharness.pytest_plugin._Turns`):
    sessions start side by side and say ``S`` (on a shared FIFO) at their
    first round; once all have, one token goes round: a session works only
    while it holds it, hands it back (``R``) before each further round and
    says ``X`` when it is done, and the token goes to the next session still
    running (after a finished one has exited). So from the first round on
    exactly one session works at any time.

    Args:
      sessions: two or more (typically A, the baseline, and B, the candidate).
      labels: their sides (default 'A', 'B', 'C', ...), saved in each JSON.

    Returns:
      The JSON files (in `out_dir`), in the order of `sessions`, each with
      ``simharness.interleave`` = {session, side, turns, broken}.

    Raises:
      SimharnessValueError: fewer than two sessions, a session failed, or
        they ran past `timeout` (all are stopped).
    """
    if len(sessions) < 2:
        raise SimharnessValueError(f'interleaving needs two sessions or more, got {len(sessions)}')
    labels = list(labels or [chr(ord('A') + i) for i in range(len(sessions))])
    if len(labels) != len(sessions) or len(set(labels)) != len(labels):
        raise SimharnessValueError(f'labels must name each session once, got {labels}')
    os.makedirs(out_dir, exist_ok=True)
    session_id = uuid.uuid4().hex[:12]
    fifo_dir = tempfile.mkdtemp(prefix='simharness-ab-')
    procs: List[Tuple[subprocess.Popen, Any]] = []
    fds: List[int] = []
    outs = [os.path.join(out_dir, f'{session_id}-{label}.json') for label in labels]
    try:
        paths = [os.path.join(fifo_dir, f'turn-{i}') for i in range(len(sessions))]
        done_path = os.path.join(fifo_dir, 'done')
        for path in [*paths, done_path]:
            os.mkfifo(path, 0o600)
        fds = [os.open(path, os.O_RDWR) for path in paths]
        done = os.open(done_path, os.O_RDWR)
        fds.append(done)
        for i, sess in enumerate(sessions):
            spec = json.dumps(
                {
                    'mine': paths[i],
                    'done': done_path,
                    'side': labels[i],
                    'session': session_id,
                    'index': i,
                }
            )
            procs.append(_start(sess, outs[i], outs[i] + '.log', extra, {INTERLEAVE_ENV: spec}))
        deadline = None if timeout is None else time.monotonic() + timeout
        ready: set = set()
        holder: Optional[int] = None  # None: not started (waiting for every session's S)
        pending = b''
        while True:
            live = [p.poll() is None for p, _ in procs]
            if not any(live):
                break
            if deadline is not None and time.monotonic() > deadline:
                raise SimharnessValueError(
                    f'interleaved benchmark sessions ran past {timeout} s (logs: '
                    + ', '.join(o + '.log' for o in outs)
                    + ')'
                )
            if select.select([done], [], [], 0.2)[0]:
                pending += os.read(done, 64)
            passed = False
            while len(pending) >= 2:
                kind, who = pending[:1], pending[1]
                pending = pending[2:]
                if kind == b'S':
                    ready.add(who)
                elif kind == b'Q':
                    ready.discard(who)
                elif kind in (b'R', b'X') and who == holder:
                    if kind == b'X':  # nothing else runs until the finished session has exited
                        try:
                            procs[who][0].wait(timeout=EXIT_WAIT)
                        except subprocess.TimeoutExpired:
                            pass
                        live[who] = False
                        ready.discard(who)
                    passed = True
            if holder is None:
                waiting = [i for i in range(len(procs)) if live[i] and i not in ready]
                if ready and not waiting:  # every running session is ready: start
                    holder = min(ready)
                    os.write(fds[holder], b'G')
            elif passed or not live[holder]:
                # the next running session in rotation gets the token
                for step in range(1, len(procs) + 1):
                    nxt = (holder + step) % len(procs)
                    if live[nxt] and nxt in ready:
                        holder = nxt
                        os.write(fds[holder], b'G')
                        break
    finally:
        for proc, log in procs:
            _kill(proc)
            log.close()
        for fd in fds:
            os.close(fd)
        shutil.rmtree(fifo_dir, ignore_errors=True)
    return [
        _check(proc, out, out + '.log', f'session {label}')
        for (proc, _), out, label in zip(procs, outs, labels)
    ]
