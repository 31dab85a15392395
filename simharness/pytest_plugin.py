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
                        .round(fn, *args): warm-up 1, then N timed rounds
  simharness_pools      session-scoped warm worker pools, one per worker count,
                        closed at the end of the session
```

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
DEFAULT_ROUNDS = 5
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
        config.update(factory='local_executor_factory', max_fanout=32)
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
    """

    def __init__(self, benchmark: Any, stack: SimharnessStack, rounds: int):
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

    def round(self, fn: Any, *args: Any, rounds: Optional[int] = None, warmup_rounds: int = 1,
              **kwargs: Any) -> Any:
        """Times ``fn(*args, **kwargs)``: `warmup_rounds` untimed calls, then `rounds` timed ones.

        Args:
          fn: one round (e.g. ``fedavg.next``).
          rounds: timed calls (default: ``--simharness-rounds``, 5).
          warmup_rounds: untimed calls first (tracing, shipping the
            computation to the workers, growing shared memory).

        Returns:
          The last call's result.
        """
        rounds = self.rounds if rounds is None else rounds
        extra = self._benchmark.extra_info
        extra['simharness_rounds'] = rounds
        extra['simharness_warmup_rounds'] = warmup_rounds
        before = self.stack.stats()
        result = self._benchmark.pedantic(fn, args=args, kwargs=kwargs, rounds=rounds,
                                          warmup_rounds=warmup_rounds, iterations=1)
        after = self.stack.stats()
        if before is not None and after is not None and not self.disabled:
            calls = rounds + warmup_rounds
            extra['simharness_per_round'] = {
                key: (after[key] - before[key]) / calls
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
                    help=f'timed rounds of simharness_benchmark.round (default {DEFAULT_ROUNDS})')
    group.addoption('--simharness-clients-per-worker', dest='simharness_clients_per_worker',
                    type=int, default=None,
                    help='clients a worker runs through one TF call on process stacks '
                         f'(default {DEFAULT_CLIENTS_PER_WORKER})')
    parser.addini('simharness_stacks', 'default of --simharness-stacks', default=DEFAULT_STACKS)


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
    rounds = request.config.getoption('simharness_rounds') or DEFAULT_ROUNDS
    return SimharnessBenchmark(benchmark, simharness_stack, rounds)
