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
  simharness_registry   the session's StackRegistry: every stack by name, each
                        with its session resource (warm worker pools, services),
                        closed at the end of the session
  simharness_pools      the registry's warm worker pools, one per layout
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
usable CPU) and ``process-N`` (N pinned worker processes), and those a
``conftest.py`` registers (`StackRegistry`, `StackEntry`, `process_stack`)::

    # conftest.py
    import pytest
    from simharness.pytest_plugin import StackEntry, process_stack

    @pytest.hookimpl(optionalhook=True)
    def pytest_simharness_register_stacks(registry):
        registry.register('process-2-small', process_stack(2, clients_per_worker=8))
        registry.register('my-services', StackEntry(
            build=lambda services, n: my_factory(services, num_clients=n),
            start=start_my_services,   # once per session, closed at its end
            kind='remote', marks=(pytest.mark.slow,)))

``--simharness-stacks=thread,process-2-small`` then runs on both.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import math
import os
import re
import select
import statistics
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import psutil
import pytest

__all__ = ['SimharnessBenchmark', 'SimharnessStack', 'StackEntry', 'StackRegistry', 'StackSpec',
           'WorkerPools', 'is_builtin_stack', 'parametrize_stacks', 'parse_stacks',
           'process_stack', 'stack_config', 'stack_registry']

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


def is_builtin_stack(name: str) -> bool:
    """Whether `name` is a built-in stack name (``thread``, ``thread-debug``, ``process[-N]``)."""
    try:
        StackSpec.parse(name)
    except ValueError:
        return False
    return True


# ------------------------------------------------------------------ pools

#: Name of the thread each `WorkerPool` runs its I/O on (alive while the pool is).
REACTOR_THREAD = 'simharness-pool-reactor'


def _close_all(resources: List[Any]) -> None:
    """Closes every one of `resources` in order (also after one fails), then raises the first error."""
    errors = []
    for r in resources:
        try:
            r.close()
        except Exception as e:  # close the others, then report  # pylint: disable=broad-except
            errors.append(e)
    if errors:
        raise errors[0]


class WorkerPools:
    """Warm worker pools shared by a session, one per layout (workers, clients per worker).

    Pools start on first use (the first one also starts the TF-preloading
    forkserver) and stay warm until `close()`. A `StackRegistry` keeps one
    (`StackRegistry.pools`): every process stack of a layout runs on its pool.

    Args:
      clients_per_worker: the default of `get` (as in `process_executor_factory`).
      cpu_affinity: pin each worker to its own CPUs.
    """

    def __init__(self, clients_per_worker: Optional[int] = DEFAULT_CLIENTS_PER_WORKER,
                 cpu_affinity: bool = True):
        self.clients_per_worker = clients_per_worker
        self.cpu_affinity = cpu_affinity
        self._pools: Dict[Tuple[Optional[int], Optional[int]], Any] = {}
        #: Seconds each pool took to start, by ``(num_workers, clients_per_worker)``.
        self.start_seconds: Dict[Tuple[Optional[int], Optional[int]], float] = {}
        self._closed = False

    def get(self, num_workers: Optional[int], clients_per_worker: Optional[int] = None) -> Any:
        """The started `WorkerPool` of this layout.

        Args:
          num_workers: worker processes (None: one per usable CPU).
          clients_per_worker: the most clients a worker runs through one TF
            call (None: this object's `clients_per_worker`).
        """
        if self._closed:
            raise RuntimeError('the simharness worker pools are closed')
        cpw = self.clients_per_worker if clients_per_worker is None else clients_per_worker
        key = (num_workers, cpw)
        pool = self._pools.get(key)
        if pool is None:
            from simharness.stacks import create_worker_pool
            pool = create_worker_pool(num_workers=num_workers, clients_per_worker=cpw,
                                      cpu_affinity=self.cpu_affinity)
            try:
                seconds = pool.start()
            except BaseException:
                pool.close()
                raise
            self._pools[key] = pool
            self.start_seconds[key] = seconds
        return pool

    @property
    def started(self) -> List[Any]:
        """The pools started so far, oldest first."""
        return list(self._pools.values())

    def close(self) -> None:
        """Stops every pool, newest first. Idempotent."""
        self._closed = True
        _close_all([self._pools.pop(k) for k in reversed(list(self._pools))])

    def __enter__(self) -> 'WorkerPools':
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def make_factory(spec: StackSpec, pools: Optional[WorkerPools] = None,
                 num_clients: Optional[int] = None) -> Any:
    """A new `ExecutorFactory` of built-in stack `spec` (process stacks share the warm pool of `pools`).

    Closing the factory closes its stacks, never a shared pool.
    """
    entry = _builtin_entry(spec)
    if entry.pool is None:
        return entry.build(None, num_clients)
    if pools is None:
        raise ValueError(f'stack {spec.name!r} needs WorkerPools')
    return entry.build(pools.get(*entry.pool), num_clients)


def _common_config(name: str, kind: str) -> Dict[str, Any]:
    import simharness
    config: Dict[str, Any] = {'name': name, 'kind': kind,
                              'simharness_version': simharness.__version__}
    try:
        import tensorflow as tf
        config['tensorflow_version'] = tf.__version__
    except ImportError:  # pragma: no cover - simharness depends on TF
        pass
    if hasattr(os, 'sched_getaffinity'):
        config['usable_cpus'] = sorted(os.sched_getaffinity(0))
    return config


def stack_config(spec: StackSpec, factory: Any) -> Dict[str, Any]:
    """The built-in stack's configuration as JSON-friendly data (saved in benchmark JSON)."""
    entry = _builtin_entry(spec)
    assert entry.describe is not None
    return dict(_common_config(spec.name, spec.kind), **entry.describe(factory))


# ------------------------------------------------------------------ the stack registry

@dataclasses.dataclass(frozen=True)
class StackEntry:
    """How to build one named stack; register it with `StackRegistry.register`.

    Attributes:
      build: ``(resource, num_clients) -> ExecutorFactory``: a new factory on
        the stack's session resource (None if it has none), fixed to
        `num_clients` clients (None: the factory infers them from the
        arguments). Closing the factory must leave the resource running.
      start: ``() -> resource``: makes the stack's session resource (anything
        with ``close()``: executor services, a cluster) on first use; the
        registry closes it at the end of the session. None: no resource of its own.
      pool: ``(num_workers, clients_per_worker)``: the resource is the
        session's warm `WorkerPool` of that layout (`StackRegistry.pools`,
        shared by every stack of the layout; None workers: one per usable
        CPU; None clients per worker: ``--simharness-clients-per-worker``).
        Not with `start`. `process_stack` makes such entries.
      kind: ``simharness_stack['kind']`` in the benchmark JSON.
      describe: ``factory -> dict``: what the benchmark JSON's
        ``simharness_stack`` records of the factory (default: its class).
      marks: pytest marks of the tests that run on the stack (e.g.
        ``pytest.mark.slow``).
      resident_threads: name prefixes of threads the resource keeps alive
        for the whole session (for thread-leak checks).
    """

    build: Callable[[Any, Optional[int]], Any]
    start: Optional[Callable[[], Any]] = None
    pool: Optional[Tuple[Optional[int], Optional[int]]] = None
    kind: str = 'custom'
    describe: Optional[Callable[[Any], Dict[str, Any]]] = None
    marks: Tuple[Any, ...] = ()
    resident_threads: Tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not callable(self.build):
            raise TypeError(f'StackEntry.build must be callable, got {self.build!r}')
        for name in ('start', 'describe'):
            value = getattr(self, name)
            if value is not None and not callable(value):
                raise TypeError(f'StackEntry.{name} must be callable or None, got {value!r}')
        if self.pool is not None:
            if self.start is not None:
                raise ValueError('a StackEntry has a start or a pool, not both')
            pool = tuple(self.pool)
            if len(pool) != 2 or not all(
                    v is None or (isinstance(v, int) and not isinstance(v, bool) and v >= 1)
                    for v in pool):
                raise ValueError('StackEntry.pool must be (num_workers, clients_per_worker), '
                                 f'each an int >= 1 or None, got {self.pool!r}')
            object.__setattr__(self, 'pool', pool)
        if not isinstance(self.kind, str) or not self.kind:
            raise TypeError(f'StackEntry.kind must be a non-empty str, got {self.kind!r}')
        object.__setattr__(self, 'marks', tuple(self.marks))
        threads = tuple(self.resident_threads)
        if not all(isinstance(t, str) and t for t in threads):
            raise TypeError('StackEntry.resident_threads must be non-empty strs, '
                            f'got {self.resident_threads!r}')
        object.__setattr__(self, 'resident_threads', threads)


def _build_thread(_resource: Any, num_clients: Optional[int]) -> Any:
    from simharness.stacks import local_executor_factory
    return local_executor_factory(num_clients=num_clients)


def _describe_thread(_factory: Any) -> Dict[str, Any]:
    from simharness.stacks import default_max_fanout
    return {'factory': 'local_executor_factory', 'max_fanout': default_max_fanout()}


def _build_thread_debug(_resource: Any, num_clients: Optional[int]) -> Any:
    from simharness.stacks import thread_debugging_executor_factory
    return thread_debugging_executor_factory(num_clients=num_clients)


def _describe_thread_debug(_factory: Any) -> Dict[str, Any]:
    return {'factory': 'thread_debugging_executor_factory', 'clients_per_thread': 1}


def _build_process(pool: Any, num_clients: Optional[int]) -> Any:
    from simharness.stacks import process_executor_factory
    return process_executor_factory(num_clients=num_clients, pool=pool)


def _describe_process(factory: Any) -> Dict[str, Any]:
    pool = factory.pool
    return {'factory': 'process_executor_factory', 'num_workers': pool.num_workers,
            'clients_per_worker': pool.worker_options.get('clients_per_worker'),
            'workers': [{'worker_id': p.worker_id, 'cpus': list(p.cpus), 'gpu': p.gpu,
                         'intra_op_threads': p.intra_op_threads,
                         'inter_op_threads': p.inter_op_threads} for p in pool.placements]}


def _describe_any(factory: Any) -> Dict[str, Any]:
    return {'factory': f'{type(factory).__module__}.{type(factory).__qualname__}'}


def process_stack(num_workers: Optional[int] = None, clients_per_worker: Optional[int] = None,
                  *, marks: Tuple[Any, ...] = ()) -> StackEntry:
    """An entry of `process_executor_factory` stacks on the session's warm pool of this layout.

    Args:
      num_workers: worker processes (None: one per usable CPU).
      clients_per_worker: the most clients a worker runs through one TF call
        (None: ``--simharness-clients-per-worker``, default 256).
      marks: pytest marks of the tests that run on it.
    """
    return StackEntry(_build_process, pool=(num_workers, clients_per_worker), kind='process',
                      describe=_describe_process, marks=marks, resident_threads=(REACTOR_THREAD,))


def _builtin_entry(spec: StackSpec) -> StackEntry:
    if spec.kind == 'thread':
        return StackEntry(_build_thread, kind='thread', describe=_describe_thread)
    if spec.kind == 'thread-debug':
        return StackEntry(_build_thread_debug, kind='thread-debug', describe=_describe_thread_debug)
    return process_stack(spec.num_workers)


class StackRegistry:
    """The stacks of a pytest session by name, and their session resources.

    Built-in names (``thread``, ``thread-debug``, ``process``, ``process-N``)
    are always known; `register` adds others. A stack's session resource (its
    warm worker pool, executor services, ...) starts when a factory of it is
    first made and stays up until `close()`; its factories share it.

    The plugin keeps one per session (`stack_registry(config)`, the
    ``simharness_registry`` fixture) and closes it when the session ends.
    A ``conftest.py`` adds stacks with the hook::

        from simharness.pytest_plugin import StackEntry, process_stack

        def pytest_simharness_register_stacks(registry):
            registry.register('process-4-small', process_stack(4, clients_per_worker=8))
            registry.register('my-remote', StackEntry(build=..., start=..., kind='remote'))

    Args:
      clients_per_worker: the default batch of the warm pools (`WorkerPools`).
      cpu_affinity: pin pool workers to their own CPUs.
    """

    def __init__(self, clients_per_worker: Optional[int] = DEFAULT_CLIENTS_PER_WORKER,
                 cpu_affinity: bool = True):
        #: The session's warm worker pools (the resource of every process stack).
        self.pools = WorkerPools(clients_per_worker, cpu_affinity)
        self._entries: Dict[str, StackEntry] = {}
        self._builtin: Dict[str, StackEntry] = {}
        self._resources: Dict[str, Any] = {}
        self._used: Dict[str, None] = {}
        self._closed = False

    # -- names and entries

    def register(self, name: str, entry: StackEntry) -> None:
        """Adds stack `name`.

        Raises:
          ValueError: a built-in or already registered name, or one that
            cannot be given on the command line (empty, a comma, whitespace).
          TypeError: `entry` is not a `StackEntry`.
        """
        if not isinstance(name, str) or not name or name != name.strip() or \
                any(c.isspace() or c == ',' for c in name):
            raise ValueError(f'a stack name must be a non-empty str without commas or '
                             f'whitespace, got {name!r}')
        if not isinstance(entry, StackEntry):
            raise TypeError(f'register({name!r}, ...) needs a StackEntry, got {entry!r} of type '
                            f'{type(entry).__name__}')
        if is_builtin_stack(name):
            raise ValueError(f'{name!r} is a built-in simharness stack: register another name')
        if name in self._entries:
            raise ValueError(f'simharness stack {name!r} is already registered')
        self._entries[name] = entry

    def add_marks(self, name: str, *marks: Any) -> None:
        """Gives the tests that run on stack `name` (built-in or registered) more pytest marks."""
        entry = self.entry(name)
        entry = dataclasses.replace(entry, marks=entry.marks + tuple(marks))
        if name in self._entries:
            self._entries[name] = entry
        else:
            self._builtin[name] = entry

    @property
    def names(self) -> List[str]:
        """The registered names (built-in ones are not listed)."""
        return list(self._entries)

    def spec(self, name: str) -> Optional[StackSpec]:
        """The `StackSpec` of a built-in name; None for a registered one."""
        return None if name in self._entries else StackSpec.parse(name)

    def entry(self, name: str) -> StackEntry:
        """The entry of stack `name`.

        Raises:
          ValueError: an unknown name.
        """
        if name in self._entries:
            return self._entries[name]
        if name not in self._builtin:
            try:
                spec = StackSpec.parse(name)
            except ValueError:
                raise ValueError(
                    f'unknown simharness stack {name!r}: expected thread, thread-debug, process, '
                    'process-N (N >= 1 workers)'
                    + (f' or a registered stack ({", ".join(self._entries)})'
                       if self._entries else '')) from None
            self._builtin[name] = _builtin_entry(spec)
        return self._builtin[name]

    def parse(self, text: str) -> List[str]:
        """Stack names from a comma-separated list, checked (duplicates dropped, order kept)."""
        names: List[str] = []
        for part in str(text).split(','):
            name = part.strip()
            if name:
                self.entry(name)
                if name not in names:
                    names.append(name)
        if not names:
            raise ValueError(f'no simharness stack named in {text!r}')
        return names

    def params(self, names: Any) -> List[Any]:
        """``pytest.param(name, marks=..., id=name)`` for each name (for ``metafunc.parametrize``)."""
        return [pytest.param(n, marks=self.entry(n).marks, id=n) for n in names]

    # -- resources and factories

    def resource(self, name: str) -> Any:
        """The session resource of stack `name`, started on first use (None if it has none)."""
        if self._closed:
            raise RuntimeError('the simharness stack registry is closed')
        entry = self.entry(name)
        if entry.pool is not None:
            resource = self.pools.get(*entry.pool)
        elif entry.start is None:
            resource = None
        else:
            if name not in self._resources:
                self._resources[name] = entry.start()
            resource = self._resources[name]
        self._used[name] = None
        return resource

    def make_factory(self, name: str, num_clients: Optional[int] = None) -> Any:
        """A new `ExecutorFactory` of stack `name` (on the stack's session resource); close it."""
        entry = self.entry(name)
        return entry.build(self.resource(name), num_clients)

    def config(self, name: str, factory: Any) -> Dict[str, Any]:
        """Stack `name`'s configuration with `factory`, JSON-friendly (the benchmark JSON's)."""
        entry = self.entry(name)
        describe = entry.describe or _describe_any
        return dict(_common_config(name, entry.kind), **describe(factory))

    @contextlib.contextmanager
    def open(self, name: str, num_clients: Optional[int] = None) -> Iterator['SimharnessStack']:
        """A new factory of stack `name` installed with ``sh.execution_context``; closed after.

        Yields:
          The `SimharnessStack` (what the ``simharness_stack`` fixture gives).
        """
        import simharness as sh
        factory = self.make_factory(name, num_clients)
        try:
            config = self.config(name, factory)
            with sh.execution_context(factory) as ctx:
                yield SimharnessStack(name, factory, ctx, config, self)
        finally:
            factory.close()

    def resident_thread_prefixes(self) -> Tuple[str, ...]:
        """Name prefixes of the threads kept alive by the resources started so far."""
        out: Tuple[str, ...] = (REACTOR_THREAD,) if self.pools.started else ()
        for name in self._used:
            out += tuple(t for t in self.entry(name).resident_threads if t not in out)
        return out

    def close(self) -> None:
        """Closes every started resource (newest first), then the pools. Idempotent."""
        if self._closed:
            return
        self._closed = True
        _close_all([self._resources.pop(n) for n in reversed(list(self._resources))]
                   + [self.pools])

    def __enter__(self) -> 'StackRegistry':
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


_REGISTRY = pytest.StashKey[StackRegistry]()


def stack_registry(config: Any) -> StackRegistry:
    """The `StackRegistry` of the pytest session of `config` (made on first call)."""
    registry = config.stash.get(_REGISTRY, None)
    if registry is None:
        cpw = (config.getoption('simharness_clients_per_worker', None)
               or DEFAULT_CLIENTS_PER_WORKER)
        registry = config.stash[_REGISTRY] = StackRegistry(clients_per_worker=cpw)
    return registry


def parametrize_stacks(metafunc: Any, argname: str, names: Any) -> bool:
    """Parametrizes fixture `argname` (indirectly) with stacks `names`, their marks and ids.

    A test that parametrizes `argname` itself is left alone.

    Returns:
      Whether it parametrized.
    """
    for mark in metafunc.definition.iter_markers('parametrize'):
        argnames = mark.args[0] if mark.args else mark.kwargs.get('argnames', ())
        if isinstance(argnames, str):
            argnames = [n.strip() for n in argnames.split(',')]
        if argname in argnames:
            return False
    registry = stack_registry(metafunc.config)
    metafunc.parametrize(argname, registry.params(names), indirect=True)
    return True


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
    """What the `simharness_stack` fixture gives a test (`StackRegistry.open` makes it).

    Attributes:
      name: the stack's name (``'thread'``, ``'process-2'``, a registered name, ...).
      spec: its `StackSpec` (None for a registered stack).
      factory: the `ExecutorFactory` the test runs on (already installed with
        ``sh.execution_context``).
      context: the installed `ExecutionContext`.
      config: the stack's configuration (JSON-friendly dict).
      registry: the session's `StackRegistry`.
    """

    def __init__(self, name: str, factory: Any, context: Any, config: Dict[str, Any],
                 registry: StackRegistry):
        self.name = name
        self.spec = registry.spec(name)
        self.factory = factory
        self.context = context
        self.config = config
        self.registry = registry

    def make_factory(self, num_clients: Optional[int] = None) -> Any:
        """A new factory of this stack (sharing its session resource); close it when done."""
        return self.registry.make_factory(self.name, num_clients)

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
        return [c.pid for c in psutil.Process().children(recursive=True)]
    except psutil.Error:  # a child left meanwhile
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


class _HookSpecs:
    """The plugin's own hook."""

    @pytest.hookspec(historic=True)
    def pytest_simharness_register_stacks(self, registry: StackRegistry, config: Any) -> None:
        """Register named stacks: ``registry.register(name, StackEntry(...))``.

        Called once per session, at configure time (for a ``conftest.py``
        found later in collection, when it is loaded). Names to be given to
        ``--simharness-stacks`` must be registered by a plugin or by a
        ``conftest.py`` loaded at start-up (the root directory's, or one on
        the way to the paths given on the command line). Implement it with
        ``@pytest.hookimpl(optionalhook=True)`` if the plugin may be off
        (``-p no:simharness``).
        """


def pytest_addhooks(pluginmanager: Any) -> None:
    pluginmanager.add_hookspecs(_HookSpecs)


def _stack_names(config: Any) -> List[str]:
    text = config.getoption('simharness_stacks') or config.getini('simharness_stacks')
    return stack_registry(config).parse(str(text or DEFAULT_STACKS))


@pytest.hookimpl(trylast=True)  # after pytest's own (marks made by the register hook need them)
def pytest_configure(config: Any) -> None:
    rounds = config.getoption('simharness_rounds')
    if rounds is not None and rounds < 1:
        raise pytest.UsageError(f'--simharness-rounds must be >= 1, got {rounds}')
    cpw = config.getoption('simharness_clients_per_worker')
    if cpw is not None and cpw < 1:
        raise pytest.UsageError(f'--simharness-clients-per-worker must be >= 1, got {cpw}')
    registry = stack_registry(config)
    config.hook.pytest_simharness_register_stacks.call_historic(
        kwargs={'registry': registry, 'config': config})
    try:
        _stack_names(config)
    except ValueError as e:
        raise pytest.UsageError(f'--simharness-stacks: {e}') from None
    spec = os.environ.get(INTERLEAVE_ENV)
    if spec and _TURNS.info is None:
        _TURNS.open(spec)


def pytest_unconfigure(config: Any) -> None:
    _TURNS.close()
    registry = config.stash.get(_REGISTRY, None)
    if registry is not None:  # the simharness_registry fixture closed it, unless never used
        registry.close()


def pytest_generate_tests(metafunc: Any) -> None:
    if 'simharness_stack' in metafunc.fixturenames:
        parametrize_stacks(metafunc, 'simharness_stack', _stack_names(metafunc.config))


# ------------------------------------------------------------------ fixtures

@pytest.fixture(scope='session')
def simharness_registry(pytestconfig: Any) -> Iterator[StackRegistry]:
    """The session's `StackRegistry`: stacks by name; their resources close at the session's end."""
    registry = stack_registry(pytestconfig)
    try:
        yield registry
    finally:
        registry.close()


@pytest.fixture(scope='session')
def simharness_pools(simharness_registry: StackRegistry) -> WorkerPools:
    """The session's warm worker pools, one per layout (the registry's); closed at the end."""
    return simharness_registry.pools


@pytest.fixture
def simharness_stack(request: Any, simharness_registry: StackRegistry) -> Iterator[SimharnessStack]:
    """Runs the test inside ``sh.execution_context`` of each stack of ``--simharness-stacks``."""
    name = getattr(request, 'param', None)
    if name is None:  # requested without parametrization: the first configured stack
        name = _stack_names(request.config)[0]
    with simharness_registry.open(name) as stack:
        yield stack


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
