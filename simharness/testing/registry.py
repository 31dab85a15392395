"""The pytest plugin's stacks: names, the registry of a session, its warm pools.

`simharness.pytest_plugin` (hooks and fixtures) re-exports these names; see its
docstring for the options and the ``pytest_simharness_register_stacks`` hook.
Nothing heavy is imported at import time (the plugin loads in every pytest
session): simharness' stacks and TensorFlow are imported when a stack is used.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import pytest

from simharness.runtime.seam import DEFAULT_CLIENTS_PER_WORKER  # noqa: F401

DEFAULT_STACKS = 'thread'
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
            raise ValueError(
                f'unknown simharness stack {name!r}: expected thread, thread-debug, '
                'process or process-N (N >= 1 workers)'
            )
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

    def __init__(
        self,
        clients_per_worker: Optional[int] = DEFAULT_CLIENTS_PER_WORKER,
        cpu_affinity: bool = True,
    ):
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
            # reason: the plugin loads in every pytest session; imported when used
            from simharness.stacks import create_worker_pool

            pool = create_worker_pool(
                num_workers=num_workers, clients_per_worker=cpw, cpu_affinity=self.cpu_affinity
            )
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


def make_factory(
    spec: StackSpec, pools: Optional[WorkerPools] = None, num_clients: Optional[int] = None
) -> Any:
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
    # reason: the plugin loads in every pytest session; imported when used
    import simharness

    config: Dict[str, Any] = {
        'name': name,
        'kind': kind,
        'simharness_version': simharness.__version__,
    }
    try:
        # reason: the plugin loads in every pytest session; imported when used
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
                for v in pool
            ):
                raise ValueError(
                    'StackEntry.pool must be (num_workers, clients_per_worker), '
                    f'each an int >= 1 or None, got {self.pool!r}'
                )
            object.__setattr__(self, 'pool', pool)
        if not isinstance(self.kind, str) or not self.kind:
            raise TypeError(f'StackEntry.kind must be a non-empty str, got {self.kind!r}')
        object.__setattr__(self, 'marks', tuple(self.marks))
        threads = tuple(self.resident_threads)
        if not all(isinstance(t, str) and t for t in threads):
            raise TypeError(
                f'StackEntry.resident_threads must be non-empty strs, got {self.resident_threads!r}'
            )
        object.__setattr__(self, 'resident_threads', threads)


def _build_thread(_resource: Any, num_clients: Optional[int]) -> Any:
    # reason: the plugin loads in every pytest session; imported when used
    from simharness.stacks import local_executor_factory

    return local_executor_factory(num_clients=num_clients)


def _describe_thread(_factory: Any) -> Dict[str, Any]:
    # reason: the plugin loads in every pytest session; imported when used
    from simharness.stacks import default_max_fanout

    return {'factory': 'local_executor_factory', 'max_fanout': default_max_fanout()}


def _build_thread_debug(_resource: Any, num_clients: Optional[int]) -> Any:
    # reason: the plugin loads in every pytest session; imported when used
    from simharness.stacks import thread_debugging_executor_factory

    return thread_debugging_executor_factory(num_clients=num_clients)


def _describe_thread_debug(_factory: Any) -> Dict[str, Any]:
    return {'factory': 'thread_debugging_executor_factory', 'clients_per_thread': 1}


def _build_process(pool: Any, num_clients: Optional[int]) -> Any:
    # reason: the plugin loads in every pytest session; imported when used
    from simharness.stacks import process_executor_factory

    return process_executor_factory(num_clients=num_clients, pool=pool)


def _describe_process(factory: Any) -> Dict[str, Any]:
    pool = factory.group  # a `WorkerPool`
    return {
        'factory': 'process_executor_factory',
        'num_workers': pool.num_workers,
        'clients_per_worker': pool.options.clients_per_worker,
        'workers': [
            {
                'worker_id': p.worker_id,
                'cpus': list(p.cpus),
                'gpu': p.gpu,
                'intra_op_threads': p.intra_op_threads,
                'inter_op_threads': p.inter_op_threads,
            }
            for p in pool.placements
        ],
    }


def _describe_any(factory: Any) -> Dict[str, Any]:
    return {'factory': f'{type(factory).__module__}.{type(factory).__qualname__}'}


def process_stack(
    num_workers: Optional[int] = None,
    clients_per_worker: Optional[int] = None,
    *,
    marks: Tuple[Any, ...] = (),
) -> StackEntry:
    """An entry of `process_executor_factory` stacks on the session's warm pool of this layout.

    Args:
      num_workers: worker processes (None: one per usable CPU).
      clients_per_worker: the most clients a worker runs through one TF call
        (None: ``--simharness-clients-per-worker``, default 256).
      marks: pytest marks of the tests that run on it.
    """
    return StackEntry(
        _build_process,
        pool=(num_workers, clients_per_worker),
        kind='process',
        describe=_describe_process,
        marks=marks,
        resident_threads=(REACTOR_THREAD,),
    )


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

    def __init__(
        self,
        clients_per_worker: Optional[int] = DEFAULT_CLIENTS_PER_WORKER,
        cpu_affinity: bool = True,
    ):
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
        if (
            not isinstance(name, str)
            or not name
            or name != name.strip()
            or any(c.isspace() or c == ',' for c in name)
        ):
            raise ValueError(
                f'a stack name must be a non-empty str without commas or whitespace, got {name!r}'
            )
        if not isinstance(entry, StackEntry):
            raise TypeError(
                f'register({name!r}, ...) needs a StackEntry, got {entry!r} of type '
                f'{type(entry).__name__}'
            )
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
                    + (
                        f' or a registered stack ({", ".join(self._entries)})'
                        if self._entries
                        else ''
                    )
                ) from None
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

    def release(self, name: str) -> bool:
        """Closes stack `name`'s session resource now, if it was started (a later use starts
        it again): for a suite that knows no test of this session needs it any more.

        Returns:
          True when a resource was closed.
        """
        resource = self._resources.pop(name, None)
        self._used.pop(name, None)
        if resource is None:
            return False
        _close_all([resource])
        return True

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
        # reason: the plugin loads in every pytest session; imported when used
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
        _close_all([self._resources.pop(n) for n in reversed(list(self._resources))] + [self.pools])

    def __enter__(self) -> 'StackRegistry':
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


_REGISTRY = pytest.StashKey[StackRegistry]()


def stack_registry(config: Any) -> StackRegistry:
    """The `StackRegistry` of the pytest session of `config` (made on first call)."""
    registry = config.stash.get(_REGISTRY, None)
    if registry is None:
        cpw = config.getoption('simharness_clients_per_worker', None) or DEFAULT_CLIENTS_PER_WORKER
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

    def __init__(
        self, name: str, factory: Any, context: Any, config: Dict[str, Any], registry: StackRegistry
    ):
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
        # reason: the plugin loads in every pytest session; imported when used
        import simharness as sh

        factory = self.make_factory(num_clients)
        try:
            with sh.execution_context(factory) as ctx:
                yield ctx
        finally:
            factory.close()

    def stats(self) -> Optional[Dict[str, Any]]:
        """The worker group's counters (`WorkerGroupExecutorFactory.stats`); None on thread
        stacks."""
        stats = getattr(self.factory, 'stats', None)
        return stats() if stats is not None else None

    def __repr__(self) -> str:
        return f'SimharnessStack({self.name})'
