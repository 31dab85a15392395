"""A pytest plugin: run your computations on each simharness stack, and benchmark a round.

Installed with simharness (entry point ``pytest11``), so it is active in
every pytest run of a project that has simharness installed; disable it with
``-p no:simharness``. It imports nothing heavy at import time: simharness'
stacks (and TensorFlow) are imported by the fixtures, when a test asks for
them. This module holds the hooks and fixtures; the stack registry is
`simharness.testing.registry`, the benchmark fixture's object and the
interleaving of sessions `simharness.testing.benchmark`.

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

import json
import os
from typing import Any, Dict, Generator, Iterator, List, Optional

import psutil
import pytest

# The stack registry and the benchmarks live in simharness.testing (by job); their names
# are re-exported here, where conftest files, tests and `simharness bench` import them.
from simharness.testing.benchmark import (
    _TURNS,
    COMMIT_INFO_ENV,
    INTERLEAVE_ENV,  # noqa: F401
    TURN_TIMEOUT,  # noqa: F401
    SimharnessBenchmark,
    _Turns,  # noqa: F401
)
from simharness.testing.registry import (
    _REGISTRY,
    DEFAULT_CLIENTS_PER_WORKER,  # noqa: F401
    DEFAULT_STACKS,
    REACTOR_THREAD,  # noqa: F401
    SimharnessStack,
    StackEntry,
    StackRegistry,
    StackSpec,
    WorkerPools,
    is_builtin_stack,
    make_factory,  # noqa: F401
    parametrize_stacks,
    parse_stacks,
    process_stack,
    stack_config,
    stack_registry,
)

__all__ = [
    'SimharnessBenchmark',
    'SimharnessStack',
    'StackEntry',
    'StackRegistry',
    'StackSpec',
    'WorkerPools',
    'is_builtin_stack',
    'parametrize_stacks',
    'parse_stacks',
    'process_stack',
    'stack_config',
    'stack_registry',
]


# ------------------------------------------------------------------ hooks


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup('simharness', 'simharness stacks and benchmarks')
    group.addoption(
        '--simharness-stacks',
        dest='simharness_stacks',
        default=None,
        help='comma-separated stacks that tests taking the simharness_stack '
        'fixture run on: thread, thread-debug, process, process-N '
        f'(default: ini simharness_stacks, else {DEFAULT_STACKS})',
    )
    group.addoption(
        '--simharness-rounds',
        dest='simharness_rounds',
        type=int,
        default=None,
        help='timed rounds of simharness_benchmark.round, overriding '
        "pytest-benchmark's --benchmark-min-rounds / --benchmark-max-time rule "
        '(default: that rule)',
    )
    group.addoption(
        '--simharness-clients-per-worker',
        dest='simharness_clients_per_worker',
        type=int,
        default=None,
        help='clients a worker runs through one TF call on process stacks '
        f'(default {DEFAULT_CLIENTS_PER_WORKER})',
    )
    parser.addini('simharness_stacks', 'default of --simharness-stacks', default=DEFAULT_STACKS)


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_machine_info(config: Any, machine_info: Dict[str, Any]) -> None:
    """Adds ``machine_info['simharness']``: the machine fingerprint, usable CPUs, memory, load."""
    # reason: the plugin loads in every pytest session; imported when used
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
def pytest_runtest_call(item: Any) -> Generator[None, Any, None]:
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
    # reason: the plugin loads in every pytest session; imported when used
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
        kwargs={'registry': registry, 'config': config}
    )
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
def simharness_benchmark(
    request: Any, benchmark: Any, simharness_stack: SimharnessStack
) -> SimharnessBenchmark:
    """pytest-benchmark's `benchmark` with the stack's config recorded and ``.round(fn, *args)``.

    Needs pytest-benchmark (``pip install pytest-benchmark``). It takes
    `benchmark` directly, so ``--benchmark-only`` and ``--benchmark-skip``
    select the tests that use it.
    """
    return SimharnessBenchmark(
        benchmark, simharness_stack, request.config.getoption('simharness_rounds')
    )
