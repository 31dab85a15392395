"""Shared fixtures: the stack registry, the `stack` fixture and the thread-leak check.

The stacks are simharness' pytest plugin's (`simharness.pytest_plugin`): one
`StackRegistry` per session, to which `stacks.register` adds the suite's own
(tests/stacks.py). No TensorFlow (and no executor) is imported at import
time: unit tests of pure modules stay light. Fixtures import what they need
when they run.
"""

from __future__ import annotations

import gc
import os
import sys
import threading
import time
from typing import Iterator

import pytest

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:  # the prepend import mode adds it already; importlib mode does not
    sys.path.insert(0, _HERE)
import slow_tier  # noqa: E402  (tests/slow_tier.py)
import stacks as suite_stacks  # noqa: E402  (tests/stacks.py)
from simharness.pytest_plugin import (  # noqa: E402
    SimharnessStack,
    StackRegistry,
    parametrize_stacks,
)
from simharness.testing.registry import stack_registry  # noqa: E402

THREAD_PREFIX = 'simharness-'


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    # The benchmarks (tests/benchmarks) are in `testpaths`: a run that does not name them
    # (``python -m pytest -q -n 3 --dist loadgroup``, what CI runs) runs each
    # body once, untimed, at its small sizes (--benchmark-disable), so that they cannot
    # rot; naming them (``python -m pytest tests/benchmarks``) times them. Before
    # pytest-benchmark reads it.
    named = any(
        'benchmarks' in str(a) for a in config.invocation_params.args if not str(a).startswith('-')
    )
    if not named and hasattr(config.option, 'benchmark_disable'):
        config.option.benchmark_disable = True
    # TFF's data files never come from the network here: a missing file's download (TFF's
    # loaders, the CLI's [data]) goes to a loopback port where nothing listens and fails at
    # once, in this process and every one it starts, unless a test serves its own bucket.
    from simharness.data import tff_files

    os.environ[tff_files.URL_VARIABLE] = 'http://127.0.0.1:9/'
    if not config.pluginmanager.hasplugin('simharness'):
        raise pytest.UsageError(
            'the tests need the simharness pytest plugin (pip install -e . '
            'registers it; do not pass -p no:simharness)'
        )


@pytest.hookimpl(optionalhook=True)
def pytest_simharness_register_stacks(registry: StackRegistry) -> None:
    suite_stacks.register(registry)


#: Tests that share a session resource too heavy to start twice run on one pytest-xdist
#: worker (``-n 3 --dist loadgroup``): a Ray cluster of two nodes, two gRPC services (and the
#: benchmark modules whose module fixtures start their own).
_XDIST_GROUPS = (
    ('ray', ('tests/ray/', 'tests/benchmarks/test_ray.py', '[ray-2', '-ray-2')),
    ('remote', ('tests/remote/', 'tests/benchmarks/test_remote.py', '[remote-2', '-remote-2')),
)


#: The stacks whose session resources serve one group alone.
_GROUP_STACKS = {'ray': ('ray-2',), 'remote': ('remote-2',)}


def _group_of(item) -> str:
    mark = item.get_closest_marker('xdist_group')
    return mark.args[0] if mark and mark.args else ''


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    # The slow tier (tests/slow_tier.py): the quick tier (``-m "not slow"``) leaves these out.
    slow = slow_tier.listed()
    for item in items:
        if slow_tier.base_id(item.nodeid) in slow:
            item.add_marker(pytest.mark.slow)
        for group, keys in _XDIST_GROUPS:
            if any(k in item.nodeid for k in keys):
                item.add_marker(pytest.mark.xdist_group(group))
                break


_WATCH = slow_tier.Watch()


def pytest_runtest_logreport(report):
    _WATCH.add(report.nodeid, report.duration, 'slow' in report.keywords)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    over = _WATCH.over()
    if over and not hasattr(config, 'workerinput'):
        terminalreporter.write_sep(
            '-',
            f'{len(over)} test(s) outside the slow tier took '
            f'>= {slow_tier.WATCH_S:g} s (tests/slow_tier.py)',
        )
        for k in over[:20]:
            terminalreporter.write_line(f'{_WATCH.seconds[k]:6.1f}s {k}')


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    # Under ``--dist loadgroup`` a group's tests reach one worker together and run one after
    # the other: once its last one is done, its stacks' resources close instead of idling
    # to the end of the session (an idle two-node Ray cluster alone burns ~8 CPU-s a minute
    # in its daemons, measured). Without xdist the groups' tests are spread over the run.
    group = _group_of(item)
    if (
        group in _GROUP_STACKS
        and hasattr(item.config, 'workerinput')
        and getattr(item.config.option, 'dist', '') == 'loadgroup'
        and (nextitem is None or _group_of(nextitem) != group)
    ):
        registry = stack_registry(item.config)
        for name in _GROUP_STACKS[group]:
            registry.release(name)


#: The test processes' garbage collector: fewer, cheaper collections. A pytest-xdist worker
#: runs ~2,300 tests in one heap of TF, Keras and traced graphs; with Python's defaults
#: (700, 10, 10) its full collections and the fixtures' explicit ``gc.collect()`` scanned
#: that heap again and again (tests/tff/learning/algorithms alone: 9.4 s of GC in 122 s;
#: with these settings 3.1 s in 112 s, measured with gc.callbacks).
GC_THRESHOLDS = (20000, 10, 10)


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session):
    # What exists once the tests are collected (modules, TF, the test functions) lives
    # until the end: out of every later collection's scan (gc.freeze).
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def pytest_generate_tests(metafunc):
    if 'stack' in metafunc.fixturenames:
        parametrize_stacks(metafunc, 'stack', suite_stacks.CONFORMANCE)


@pytest.fixture(scope='session')
def stack_registry(simharness_registry) -> StackRegistry:
    """The session's `StackRegistry` (the plugin's): resources start lazily, close at the end."""
    return simharness_registry


@pytest.fixture
def make_factory(stack_registry):
    """``make_factory(name, num_clients=None)``: a new factory of a registered stack."""
    return stack_registry.make_factory


@pytest.fixture
def stack(request, stack_registry) -> Iterator[SimharnessStack]:
    """Runs the test inside ``simharness.execution_context`` of every stack of `CONFORMANCE`."""
    with stack_registry.open(request.param) as handle:
        yield handle


@pytest.fixture
def no_leaked_segments():
    """Fails a test that leaves a segment of this process in /dev/shm.

    A segment still there after the test is looked at again after a garbage
    collection (its last owner may be garbage in a cycle); the collection
    runs only then: late in a pytest-xdist worker, over the heap of thousands
    of tests, each ``gc.collect()`` costs a few tenths of a second.
    """
    from simharness.runtime.local.shm import list_leaked_segments

    prefix = f'simharness_{os.getpid()}_'
    before = set(list_leaked_segments(prefix))
    yield
    leaked = set(list_leaked_segments(prefix)) - before
    if leaked:
        gc.collect()
        leaked = set(list_leaked_segments(prefix)) - before
    for name in leaked:  # clean up so that one failure does not cascade
        os.unlink(os.path.join('/dev/shm', name))
    assert not leaked, f'leaked shared-memory segments: {sorted(leaked)}'


def _simharness_threads(exempt: tuple = ()) -> list:
    return [
        t
        for t in threading.enumerate()
        if t.is_alive() and t.name.startswith(THREAD_PREFIX) and not t.name.startswith(exempt)
    ]


@pytest.fixture(scope='module', autouse=True)
def no_leaked_simharness_threads(stack_registry):
    """After each module: no simharness thread left alive.

    Non-daemon `simharness-*` threads are never allowed. Daemon ones started
    during the module (executor and context threads) must be gone too: the
    execution context closes its stacks on exit. The process-wide default
    context (used by calls outside any `execution_context`) is closed first,
    and threads of session resources of the registry are exempt.
    """
    before = {t.ident for t in threading.enumerate()}
    yield
    ctx_module = sys.modules.get('simharness.context')
    if ctx_module is not None:
        ctx_module.set_default_executor(None)
    # Pools of the session (the registry's) keep their reactor thread; so may a pool that
    # a test closed a moment ago. A pool leaked by a test is caught by the process tests'
    # own checks (worker processes and segments).
    exempt = stack_registry.resident_thread_prefixes() + ('simharness-pool-reactor',)
    deadline = time.monotonic() + 10
    while True:
        non_daemon = [t for t in _simharness_threads(exempt) if not t.daemon]
        new = [t for t in _simharness_threads(exempt) if t.ident not in before]
        if not (non_daemon or new) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert not non_daemon, f'non-daemon simharness threads left alive: {non_daemon}'
    assert not new, f'simharness threads left alive by this module: {sorted(t.name for t in new)}'


@pytest.fixture(autouse=True)
def tf_global_seed_restored() -> Iterator[None]:
    """After each test: TF's global seed unset again, as in a fresh process.

    A test that sets it (``tf.random.set_seed``, ``keras.utils.set_random_seed``, an
    in-process experiment with a seed) would otherwise change, for the tests that run after
    it in the same xdist worker, what seeded ops give (e.g. the order of a
    ``shuffle(8, seed=1)``): a test comparing bits across stacks then compares two orders.
    Only a seed that is set is unset: setting it clears TF's kernel and function caches,
    so that every test after it instantiates each function it calls afresh.
    """
    yield
    tf = sys.modules.get('tensorflow')
    if tf is not None:
        from tensorflow.python.eager import context  # pylint: disable=import-outside-toplevel

        if context.global_seed() is not None:
            tf.random.set_seed(None)
