"""A pytest plugin: run your computations on each simharness stack, and benchmark a round.

Installed with simharness (entry point ``pytest11``), so it is active in
every pytest run of a project that has simharness installed; disable it with
``-p no:simharness``. It imports nothing heavy at import time: simharness'
stacks (and TensorFlow) are imported by the fixtures, when a test asks for
them.

```
--simharness-stacks=thread,process-2     which stacks (default: thread)
  simharness_stack      a test that takes it runs once per stack, inside
                        sh.execution_context(stack.factory)
  simharness_benchmark  pytest-benchmark's `benchmark`, with the stack's
                        configuration in extra_info['simharness_stack'] and
                        .round(fn, *args): the first round timed apart, then
                        timed rounds by pytest-benchmark's options (or
                        --simharness-rounds); every round, a calibration
                        workload, peak RSS and a result fingerprint go to
                        extra_info['simharness'] (see simharness.bench)
  (any benchmark)       a test using pytest-benchmark's `benchmark` gets the
                        peak RSS of the driver and its child processes over
                        its call in extra_info['peak_rss']
  simharness_pools      session-scoped warm worker pools, one per worker count,
                        closed at the end of the session
```

Under ``simharness bench ab`` (environment variable
``SIMHARNESS_BENCH_INTERLEAVE``) the timed rounds of several sessions take
turns (`_Turns`); ``SIMHARNESS_BENCH_COMMIT_INFO`` replaces
pytest-benchmark's commit_info (a revision run from a checkout). The saved
JSON gets ``machine_info['simharness']`` (machine fingerprint, CPUs, memory,
load) and ``simharness`` (the interleaved session, the load at the end).

Example (``test_my_fedavg.py``)::

    def test_round(simharness_benchmark, my_algorithm, my_data):
        state = my_algorithm.initialize()
        state, metrics = simharness_benchmark.round(my_algorithm.next, state, my_data)
        assert metrics['loss'] < 3.0

``pytest --simharness-stacks=thread,process-1,process-2 --benchmark-save=mine``
then runs it on three stacks and saves the timings, each with the stack it
ran on.

Stack names: ``thread`` (`local_executor_factory`: client threads in this
process), ``thread-debug`` (`thread_debugging_executor_factory`: one thread
per client), ``process`` (`process_executor_factory` with one worker per
usable CPU) and ``process-N`` (N pinned worker processes).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
from typing import Any, Dict, Iterator, List, Optional

import pytest

__all__ = ['SimharnessStack', 'StackSpec', 'WorkerPools', 'parse_stacks']

DEFAULT_STACKS = 'thread'
DEFAULT_CLIENTS_PER_WORKER = 256
_NAME = re.compile(r'^(thread|thread-debug|process)(?:-([1-9][0-9]*))?$')


# ------------------------------------------------------------------ stack names

@dataclasses.dataclass(frozen=True)
class StackSpec:
    """A stack named on the command line.

    Attributes:
      name: as given, e.g. ``'process-2'``.
      kind: ``'thread'``, ``'thread-debug'`` or ``'process'``.
      num_workers: worker processes (process stacks; None: one per usable CPU).
    """

    name: str
    kind: str
    num_workers: Optional[int] = None

    @classmethod
    def parse(cls, name: str) -> 'StackSpec':
        """Parses ``thread``, ``thread-debug``, ``process`` or ``process-N``.

        Raises:
          ValueError: any other name.
        """
        m = _NAME.match(name.strip())
        if not m or (m.group(2) and m.group(1) != 'process'):
            raise ValueError(f'unknown simharness stack {name!r}: expected thread, thread-debug, '
                             'process or process-N (N >= 1 workers)')
        kind, n = m.group(1), m.group(2)
        return cls(name.strip(), kind, int(n) if n else None)


def parse_stacks(text: str) -> List[StackSpec]:
    """Parses a comma-separated list of stack names (duplicates dropped, order kept)."""
    specs: List[StackSpec] = []
    for part in text.split(','):
        if part.strip():
            spec = StackSpec.parse(part)
            if spec.name not in [s.name for s in specs]:
                specs.append(spec)
    if not specs:
        raise ValueError(f'no simharness stack named in {text!r}')
    return specs


# ------------------------------------------------------------------ pools

class WorkerPools:
    """Warm worker pools shared by a session, one per worker count.

    Pools start on first use (the first one also starts the TF-preloading
    forkserver) and stay warm until `close()`.

    Args:
      clients_per_worker: as in `process_executor_factory`.
      cpu_affinity: pin each worker to its own CPUs.
    """

    def __init__(self, clients_per_worker: Optional[int] = DEFAULT_CLIENTS_PER_WORKER,
                 cpu_affinity: bool = True):
        self.clients_per_worker = clients_per_worker
        self.cpu_affinity = cpu_affinity
        self._pools: Dict[Optional[int], Any] = {}
        #: Seconds each pool took to start, by worker count.
        self.start_seconds: Dict[Optional[int], float] = {}
        self._closed = False

    def get(self, num_workers: Optional[int]) -> Any:
        """The started `WorkerPool` with `num_workers` workers (None: one per usable CPU)."""
        if self._closed:
            raise RuntimeError('the simharness worker pools are closed')
        pool = self._pools.get(num_workers)
        if pool is None:
            from simharness.stacks import create_worker_pool
            pool = create_worker_pool(num_workers=num_workers,
                                      clients_per_worker=self.clients_per_worker,
                                      cpu_affinity=self.cpu_affinity)
            self._pools[num_workers] = pool
            self.start_seconds[num_workers] = pool.start()
        return pool

    def close(self) -> None:
        """Stops every pool. Idempotent."""
        self._closed = True
        errors = []
        while self._pools:
            _, pool = self._pools.popitem()
            try:
                pool.close()
            except Exception as e:  # close the others, then report
                errors.append(e)
        if errors:
            raise errors[0]

    def __enter__(self) -> 'WorkerPools':
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def make_factory(spec: StackSpec, pools: Optional[WorkerPools] = None,
                 num_clients: Optional[int] = None) -> Any:
    """A new `ExecutorFactory` of stack `spec` (process stacks share the warm pool of `pools`).

    Closing the factory closes its stacks, never a shared pool.
    """
    from simharness import stacks
    if spec.kind == 'thread':
        return stacks.local_executor_factory(num_clients=num_clients)
    if spec.kind == 'thread-debug':
        return stacks.thread_debugging_executor_factory(num_clients=num_clients)
    if pools is None:
        raise ValueError(f'stack {spec.name!r} needs WorkerPools')
    return stacks.process_executor_factory(num_clients=num_clients,
                                           pool=pools.get(spec.num_workers))


def stack_config(spec: StackSpec, factory: Any) -> Dict[str, Any]:
    """The stack's configuration as JSON-friendly data (saved in benchmark JSON)."""
    import simharness
    config: Dict[str, Any] = {'name': spec.name, 'kind': spec.kind,
                              'simharness_version': simharness.__version__}
    try:
        import tensorflow as tf
        config['tensorflow_version'] = tf.__version__
    except ImportError:  # pragma: no cover - simharness depends on TF
        pass
    if hasattr(os, 'sched_getaffinity'):
        config['usable_cpus'] = sorted(os.sched_getaffinity(0))
    if spec.kind == 'thread':
        from simharness.stacks import default_max_fanout
        config.update(factory='local_executor_factory', max_fanout=default_max_fanout())
    elif spec.kind == 'thread-debug':
        config.update(factory='thread_debugging_executor_factory', clients_per_thread=1)
    else:
        pool = factory.pool
        config.update(
            factory='process_executor_factory', num_workers=pool.num_workers,
            clients_per_worker=pool.worker_options.get('clients_per_worker'),
            workers=[{'worker_id': p.worker_id, 'cpus': list(p.cpus), 'gpu': p.gpu,
                      'intra_op_threads': p.intra_op_threads,
                      'inter_op_threads': p.inter_op_threads} for p in pool.placements])
    return config


# ------------------------------------------------------------------ interleaved A/B sessions

#: Set by ``simharness bench ab`` for its two pytest sessions (JSON: the two
#: FIFOs, this session's side, the pair's id): their timed rounds take turns.
INTERLEAVE_ENV = 'SIMHARNESS_BENCH_INTERLEAVE'
#: JSON commit_info for runs of a checked-out revision outside a git work tree.
COMMIT_INFO_ENV = 'SIMHARNESS_BENCH_COMMIT_INFO'
#: Seconds to wait for a turn before running on alone (the coordinator is gone).
TURN_TIMEOUT = 900.0


class _Turns:
    """Turn taking between benchmark sessions (``simharness bench ab``): one round per turn.

    Sessions start (import, collect, set up) side by side. At its first timed
    or warm-up round a session says it is ready (``S``) and waits; once every
    session is ready the coordinator (the ``simharness bench ab`` process)
    hands one token round in rotation. From then on a session works only while
    it holds the token: it hands it back (``R``) before each further round and
    waits for its next turn, and says ``X`` at its end, when the coordinator
    waits for the process to exit before passing the token on. So from the
    first round on exactly one session works at any time, and the rounds of
    the baseline and of the candidate alternate under the same machine load.
    With no token for `TURN_TIMEOUT` seconds (the coordinator is gone) a
    session runs on alone and its saved run says so. Without the environment
    variable this is a no-op.
    """

    def __init__(self) -> None:
        self.info: Optional[Dict[str, Any]] = None
        self._mine = self._done = -1
        self._index = 0
        self._alone = True
        self._started = False
        self._used = False
        self.turns = 0
        self.broken: Optional[str] = None

    def open(self, spec: str) -> None:
        import json
        try:
            info = json.loads(spec)
            mine, done = str(info['mine']), str(info['done'])
            side, session, index = str(info['side']), str(info['session']), int(info['index'])
            if not 0 <= index < 256:
                raise ValueError(f'index {index} is not in [0, 256)')
        except (ValueError, KeyError, TypeError) as e:
            raise pytest.UsageError(f'{INTERLEAVE_ENV}={spec!r} is not valid: expected JSON with '
                                    f'mine, done, side, session and index ({e})') from None
        # O_RDWR: opening a FIFO this way never blocks, and a write never fails
        # for want of a reader.
        self._mine = os.open(mine, os.O_RDWR)
        self._done = os.open(done, os.O_RDWR)
        self._index = index
        self.info = {'side': side, 'session': session}
        self._alone = self._started = self._used = False
        self.turns = 0
        self.broken = None

    def _say(self, kind: bytes) -> None:
        os.write(self._done, kind + bytes([self._index]))

    def _wait(self) -> None:
        import select
        ready, _, _ = select.select([self._mine], [], [], TURN_TIMEOUT)
        if not ready:
            self.broken = f'no turn from the coordinator for {TURN_TIMEOUT:.0f} s'
            self._alone = True
            return
        os.read(self._mine, 1)

    def __enter__(self) -> '_Turns':
        if self._alone:
            return self
        if not self._started:  # ready: wait for every session, then for this one's turn
            self._started = True
            self._say(b'S')
            self._wait()
        elif self._used:  # one round per turn: hand over, wait for the next
            self._say(b'R')
            self._wait()
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self._alone:
            self._used = True
            self.turns += 1

    def close(self) -> None:
        if self._done >= 0 and not self._alone:
            # X: done, holding the token (the coordinator waits for this process to exit);
            # Q: done without a round
            self._say(b'X' if self._started else b'Q')
        for fd in (self._mine, self._done):
            if fd >= 0:
                os.close(fd)
        self._mine = self._done = -1
        self._alone = True
        self.info = None


_TURNS = _Turns()


# ------------------------------------------------------------------ what tests get

class SimharnessStack:
    """What the `simharness_stack` fixture gives a test.

    Attributes:
      name: the stack's name (``'thread'``, ``'process-2'``, ...).
      spec: its `StackSpec`.
      factory: the `ExecutorFactory` the test runs on (already installed with
        ``sh.execution_context``).
      context: the installed `ExecutionContext`.
      config: the stack's configuration (JSON-friendly dict).
    """

    def __init__(self, spec: StackSpec, factory: Any, context: Any, config: Dict[str, Any],
                 pools: WorkerPools):
        self.spec = spec
        self.name = spec.name
        self.factory = factory
        self.context = context
        self.config = config
        self._pools = pools

    def make_factory(self, num_clients: Optional[int] = None) -> Any:
        """A new factory of this stack (sharing its warm pool); close it when done."""
        return make_factory(self.spec, self._pools, num_clients)

    @contextlib.contextmanager
    def clients(self, num_clients: int) -> Iterator[Any]:
        """Runs the ``with`` body on this stack with a fixed number of clients.

        For computations whose arguments do not tell the number of clients
        (a broadcast of a server value, say).
        """
        import simharness as sh
        factory = self.make_factory(num_clients)
        try:
            with sh.execution_context(factory) as ctx:
                yield ctx
        finally:
            factory.close()

    def stats(self) -> Optional[Dict[str, Any]]:
        """The process pool's counters (see `ProcessExecutorFactory.stats`); None on thread stacks."""
        stats = getattr(self.factory, 'stats', None)
        return stats() if stats is not None else None

    def __repr__(self) -> str:
        return f'SimharnessStack({self.name})'


class SimharnessBenchmark:
    """pytest-benchmark's `benchmark` fixture, knowing the stack it times.

    Anything not defined here (``pedantic``, ``extra_info``, ``stats``,
    ``group``, calling it) is the wrapped fixture's.

    Attributes:
      stack: the `SimharnessStack` timed.
      rounds: ``--simharness-rounds`` (None: pytest-benchmark's own rule).
    """

    def __init__(self, benchmark: Any, stack: SimharnessStack, rounds: Optional[int]):
        self._benchmark = benchmark
        self.stack = stack
        self.rounds = rounds
        benchmark.extra_info['simharness_stack'] = stack.config

    def __call__(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return self._benchmark(fn, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._benchmark, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ('_benchmark', 'stack', 'rounds'):
            object.__setattr__(self, name, value)
        else:  # e.g. `group`: the wrapped fixture's
            setattr(self._benchmark, name, value)

    @property
    def disabled(self) -> bool:
        """True with ``--benchmark-disable`` (the body runs once, untimed)."""
        return bool(getattr(self._benchmark, 'disabled', False))

    def _option(self, name: str) -> Any:
        try:
            return getattr(self._benchmark, name)
        except AttributeError:
            raise RuntimeError(
                f'simharness_benchmark.round needs pytest-benchmark >= 4 (its fixture has no '
                f'{name}); got {type(self._benchmark).__module__}') from None

    def _worker_pids(self) -> List[int]:
        stats = self.stack.stats()
        if not stats:
            return []
        return [w['pid'] for w in stats.get('workers', ()) if w.get('alive') and w.get('pid')]

    def round(self, fn: Any, *args: Any, rounds: Optional[int] = None,
              warmup_rounds: Optional[int] = None, iterations: Optional[int] = None,
              clients: Optional[int] = None, fingerprint: Any = True, **kwargs: Any) -> Any:
        """Times ``fn(*args, **kwargs)``, one simulation round per call, in this (the driver) process.

        The first call (tracing, shipping the computation to the workers,
        growing shared memory) is timed apart, as ``first_round_seconds``;
        then come the timed, steady-state rounds. Each timed round is
        preceded by the calibration workload (`simharness.bench.probe`),
        so that the saved run carries the machine's speed and noise at the
        time. Peak RSS of the driver and the workers over the timed rounds
        and a SHA-256 of the last result are saved too (all in
        ``extra_info['simharness']``).

        pytest-benchmark's options are honoured: ``--benchmark-disable``
        (one untimed call), ``--benchmark-min-rounds`` and
        ``--benchmark-max-time`` (at least min-rounds timed rounds, and more
        until max-time seconds of them: pytest-benchmark's rule, applied as
        the rounds run), ``--benchmark-warmup`` / ``--benchmark-warmup-iterations``
        (more untimed rounds after the first, up to warmup-iterations calls
        or max-time seconds), ``--benchmark-min-time`` and
        ``--benchmark-calibration-precision`` (calls per round, for rounds
        shorter than that), ``--benchmark-precision`` / ``--benchmark-confidence``
        (stop once the mean is that precise), ``--benchmark-timer`` and
        ``--benchmark-disable-gc``.

        Args:
          fn: one round (e.g. ``fedavg.next``).
          rounds: timed rounds, overriding the options (default:
            ``--simharness-rounds`` when given, else pytest-benchmark's rule).
            Under ``simharness bench ab``, ``--simharness-rounds`` overrides
            this too, so that the sessions taking turns run equal rounds.
          warmup_rounds: untimed calls before the timed ones (default: 1, the
            first round, plus ``--benchmark-warmup``'s); 0: none, and no
            ``first_round_seconds``.
          iterations: calls per timed round (default: 1, or more when a
            call is shorter than ``--benchmark-min-time``).
          clients: clients per round; saves ``clients_per_second``.
          fingerprint: True: hash the last result; a function: hash
            ``fingerprint(result)`` (e.g. ``lambda r: r[0]`` for the state
            of ``(state, metrics)``); False: none.

        Returns:
          The last call's result.
        """
        from simharness.bench import probe
        if rounds is None or (_TURNS.info is not None and self.rounds is not None):
            # under `simharness bench ab`, --simharness-rounds wins: every session runs the
            # same rounds, so that their turns stay in step
            rounds = self.rounds
        for name, value, low in (('rounds', rounds, 1), ('warmup_rounds', warmup_rounds, 0),
                                 ('iterations', iterations, 1), ('clients', clients, 1)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                                      or value < low):
                raise (TypeError if not isinstance(value, int) or isinstance(value, bool)
                       else ValueError)(
                    f'simharness_benchmark.round: {name} must be an int >= {low} or None, '
                    f'got {value!r} of type {type(value).__name__}')
        if not (fingerprint in (True, False) or callable(fingerprint)):
            raise TypeError(f'simharness_benchmark.round: fingerprint must be True, False or a '
                            f'function, got {fingerprint!r} of type {type(fingerprint).__name__}')
        bench = self._benchmark
        extra = bench.extra_info
        if self.disabled:
            return bench.pedantic(fn, args=args, kwargs=kwargs, rounds=1, iterations=1)
        if getattr(bench, '_mode', None):
            bench.has_error = True
            raise RuntimeError(f'the benchmark fixture was already used in {bench._mode} mode '
                               '(one benchmark per test)')
        bench._mode = 'simharness_benchmark.round(...)'
        try:
            return self._round(probe, fn, args, kwargs, rounds, warmup_rounds, iterations,
                               clients, fingerprint, extra)
        except BaseException:
            bench.has_error = True
            raise

    def _round(self, probe: Any, fn: Any, args: Any, kwargs: Any, rounds: Optional[int],
               warmup_rounds: Optional[int], iterations: Optional[int], clients: Optional[int],
               fingerprint: Any, extra: Dict[str, Any]) -> Any:
        import gc
        import math
        import time
        bench = self._benchmark
        timer = self._option('_timer')
        disable_gc = bool(self._option('_disable_gc'))
        min_rounds = int(self._option('_min_rounds'))
        max_time = float(self._option('_max_time'))
        warmup_calls = int(self._option('_warmup') or 0)
        precision = getattr(bench, '_precision', None)
        confidence = getattr(bench, '_confidence', None)

        def call() -> Any:
            return fn(*args, **kwargs)

        def timed(n: int, gate: bool = False) -> Any:
            if gate:
                with _TURNS:
                    return timed(n)
            enabled = gc.isenabled()
            if disable_gc:
                gc.disable()
            try:
                t0 = timer()
                for _ in range(n - 1):
                    call()
                out = call()
                return timer() - t0, out
            finally:
                if enabled:
                    gc.enable()

        # warm-up: the first round (timed apart), then pytest-benchmark's warm-up, if on
        first = last = None
        result: Any = None
        wall0 = time.perf_counter()
        if warmup_rounds is None:
            warmup_rounds = 1
            if warmup_calls:
                first, result = timed(1, gate=True)
                last = first
                while (time.perf_counter() - wall0 < max_time + first
                       and warmup_rounds < 1 + warmup_calls):
                    last, result = timed(1, gate=True)
                    warmup_rounds += 1
        if first is None:
            for i in range(warmup_rounds):
                last, result = timed(1, gate=True)
                if i == 0:
                    first = last
        if iterations is None:
            iterations = 1
            if last is not None:
                floor = max(float(self._option('_min_time')),
                            bench._get_precision(timer) * self._option('_calibration_precision'))
                if last < floor:
                    iterations = max(1, math.ceil(floor / max(last, 1e-9)))
        before = self.stack.stats()
        stats = bench._make_stats(iterations)
        times: List[float] = []
        starts: List[float] = []
        calibration: List[float] = []
        z = None
        if precision and confidence:
            import statistics
            z = statistics.NormalDist().inv_cdf(0.5 + confidence / 2)
        turns = _TURNS
        with probe.PeakRss(self._worker_pids) as peak:
            spent = 0.0
            while True:
                with turns:
                    starts.append(time.time())
                    calibration.append(probe.time_calibration(timer))
                    duration, result = timed(iterations)
                stats.update(duration)
                times.append(duration / iterations)
                spent += duration
                n = len(times)
                if rounds is not None:
                    if n >= rounds:
                        break
                    continue
                if n >= min_rounds:
                    if z is not None and n >= 2:
                        mean = sum(times) / n
                        sd = (sum((t - mean) ** 2 for t in times) / (n - 1)) ** 0.5
                        if mean > 0 and z * sd / n ** 0.5 / mean <= precision:
                            break
                    if spent >= max_time:
                        break
        after = self.stack.stats()
        info: Dict[str, Any] = {
            'version': 1, 'times': times, 'starts': starts, 'first_round_seconds': first,
            'warmup_rounds': warmup_rounds, 'rounds': len(times), 'iterations': iterations,
            'calibration': {'workload': probe.CALIBRATION_WORKLOAD, 'times': calibration},
            'memory': peak.as_dict(), 'clients': clients}
        median = sorted(times)[len(times) // 2] if len(times) % 2 else \
            sum(sorted(times)[len(times) // 2 - 1:len(times) // 2 + 1]) / 2
        if clients is not None and median > 0:
            info['clients_per_second'] = clients / median
            extra.setdefault('clients_per_second', clients / median)
        if fingerprint is not False:
            try:
                info['fingerprint'] = probe.fingerprint(
                    fingerprint(result) if callable(fingerprint) else result)
            except TypeError as e:
                info['fingerprint'] = None
                info['fingerprint_error'] = str(e)
        extra['simharness'] = info
        extra['simharness_rounds'] = len(times)
        extra['simharness_warmup_rounds'] = warmup_rounds
        if first is not None:
            extra['simharness_first_round_seconds'] = first
        if before is not None and after is not None:
            extra['simharness_per_round'] = {
                key: (after[key] - before[key]) / (len(times) * iterations)
                for key in ('requests', 'bytes_to_workers', 'bytes_from_workers')
                if key in before and key in after}
        return result


# ------------------------------------------------------------------ hooks

def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup('simharness', 'simharness stacks and benchmarks')
    group.addoption('--simharness-stacks', dest='simharness_stacks', default=None,
                    help='comma-separated stacks that tests taking the simharness_stack '
                         'fixture run on: thread, thread-debug, process, process-N '
                         f'(default: ini simharness_stacks, else {DEFAULT_STACKS})')
    group.addoption('--simharness-rounds', dest='simharness_rounds', type=int, default=None,
                    help='timed rounds of simharness_benchmark.round, overriding '
                         'pytest-benchmark\'s --benchmark-min-rounds / --benchmark-max-time rule '
                         '(default: that rule)')
    group.addoption('--simharness-clients-per-worker', dest='simharness_clients_per_worker',
                    type=int, default=None,
                    help='clients a worker runs through one TF call on process stacks '
                         f'(default {DEFAULT_CLIENTS_PER_WORKER})')
    parser.addini('simharness_stacks', 'default of --simharness-stacks', default=DEFAULT_STACKS)


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_machine_info(config: Any, machine_info: Dict[str, Any]) -> None:
    """Adds ``machine_info['simharness']``: the machine fingerprint, usable CPUs, memory, load."""
    from simharness.bench.results import fingerprint_of
    own: Dict[str, Any] = {}
    try:
        import psutil
        own['memory_total_bytes'] = int(psutil.virtual_memory().total)
    except Exception:  # pylint: disable=broad-except
        pass
    if hasattr(os, 'sched_getaffinity'):
        own['usable_cpus'] = len(os.sched_getaffinity(0))
    if hasattr(os, 'getloadavg'):
        own['load_average'] = list(os.getloadavg())
    own['fingerprint'] = fingerprint_of(machine_info, own.get('memory_total_bytes'))
    machine_info['simharness'] = own


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_benchmark_generate_commit_info(config: Any) -> Optional[Dict[str, Any]]:
    """The commit of a revision run outside its git work tree (``simharness bench``)."""
    import json
    spec = os.environ.get(COMMIT_INFO_ENV)
    return json.loads(spec) if spec else None


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_json(config: Any, benchmarks: Any, output_json: Dict[str, Any]) -> None:
    """Adds ``simharness``: the interleaved session this run belongs to, if any."""
    own: Dict[str, Any] = {}
    if _TURNS.info is not None:
        own['interleave'] = dict(_TURNS.info, turns=_TURNS.turns, broken=_TURNS.broken)
    if hasattr(os, 'getloadavg'):
        own['load_average_end'] = list(os.getloadavg())
    output_json['simharness'] = own


def _descendant_pids() -> List[int]:
    """The pids of this process' children, recursively (worker processes, their forkserver)."""
    try:
        import psutil
        return [c.pid for c in psutil.Process().children(recursive=True)]
    except Exception:  # psutil missing, or a child left meanwhile  # pylint: disable=broad-except
        return []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: Any) -> Iterator[None]:
    """Records the peak RSS of every benchmark that `simharness_benchmark.round` does not time.

    For a test that uses pytest-benchmark's ``benchmark`` fixture, the peak
    RSS of the driver (this process) and of its child processes (worker
    processes, the forkserver) over the test's call goes to
    ``extra_info['peak_rss']`` (`simharness.bench.probe.PeakRss.as_dict`), so
    that every saved benchmark carries its memory next to its time.
    ``simharness_benchmark.round`` records its own, over the timed rounds.
    """
    names = getattr(item, 'fixturenames', ())
    if 'benchmark' not in names or 'simharness_benchmark' in names:
        yield
        return
    from simharness.bench import probe
    with probe.PeakRss(_descendant_pids, include_new=True) as peak:
        outcome = yield
    bench = getattr(item, 'funcargs', {}).get('benchmark')
    if outcome.excinfo is None and bench is not None and not getattr(bench, 'disabled', False):
        bench.extra_info['peak_rss'] = peak.as_dict()


def _stacks(config: Any) -> List[StackSpec]:
    text = config.getoption('simharness_stacks') or config.getini('simharness_stacks')
    return parse_stacks(str(text or DEFAULT_STACKS))


def pytest_configure(config: Any) -> None:
    try:
        _stacks(config)
    except ValueError as e:
        raise pytest.UsageError(f'--simharness-stacks: {e}') from None
    rounds = config.getoption('simharness_rounds')
    if rounds is not None and rounds < 1:
        raise pytest.UsageError(f'--simharness-rounds must be >= 1, got {rounds}')
    cpw = config.getoption('simharness_clients_per_worker')
    if cpw is not None and cpw < 1:
        raise pytest.UsageError(f'--simharness-clients-per-worker must be >= 1, got {cpw}')
    spec = os.environ.get(INTERLEAVE_ENV)
    if spec and _TURNS.info is None:
        _TURNS.open(spec)


def pytest_unconfigure(config: Any) -> None:
    _TURNS.close()


def _parametrized_by_user(metafunc: Any, name: str) -> bool:
    for mark in metafunc.definition.iter_markers('parametrize'):
        names = mark.args[0] if mark.args else mark.kwargs.get('argnames', ())
        if isinstance(names, str):
            names = [n.strip() for n in names.split(',')]
        if name in names:
            return True
    return False


def pytest_generate_tests(metafunc: Any) -> None:
    if ('simharness_stack' in metafunc.fixturenames
            and not _parametrized_by_user(metafunc, 'simharness_stack')):
        names = [s.name for s in _stacks(metafunc.config)]
        metafunc.parametrize('simharness_stack', names, indirect=True, ids=names)


# ------------------------------------------------------------------ fixtures

@pytest.fixture(scope='session')
def simharness_pools(pytestconfig: Any) -> Iterator[WorkerPools]:
    """Warm worker pools for the session, one per worker count; closed at the end."""
    cpw = pytestconfig.getoption('simharness_clients_per_worker') or DEFAULT_CLIENTS_PER_WORKER
    with WorkerPools(clients_per_worker=cpw) as pools:
        yield pools


@pytest.fixture
def simharness_stack(request: Any, simharness_pools: WorkerPools) -> Iterator[SimharnessStack]:
    """Runs the test inside ``sh.execution_context`` of each stack of ``--simharness-stacks``."""
    import simharness as sh
    name = getattr(request, 'param', None)
    if name is None:  # requested without parametrization: the first configured stack
        name = _stacks(request.config)[0].name
    spec = StackSpec.parse(name)
    factory = make_factory(spec, simharness_pools)
    try:
        config = stack_config(spec, factory)
        with sh.execution_context(factory) as ctx:
            yield SimharnessStack(spec, factory, ctx, config, simharness_pools)
    finally:
        factory.close()


@pytest.fixture
def simharness_benchmark(request: Any, benchmark: Any,
                         simharness_stack: SimharnessStack) -> SimharnessBenchmark:
    """pytest-benchmark's `benchmark` with the stack's config recorded and ``.round(fn, *args)``.

    Needs pytest-benchmark (``pip install pytest-benchmark``). It takes
    `benchmark` directly, so ``--benchmark-only`` and ``--benchmark-skip``
    select the tests that use it.
    """
    return SimharnessBenchmark(benchmark, simharness_stack,
                               request.config.getoption('simharness_rounds'))
