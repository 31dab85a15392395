"""The pytest plugin: stacks from --simharness-stacks, simharness_benchmark, the saved JSON.

Each test runs a user's test file with pytester, in this process
(``runpytest_inprocess``): the plugin comes in through its ``pytest11``
entry point, as it does for users.
"""

from __future__ import annotations

import glob
import json
import subprocess
import sys
from importlib import metadata

import pytest

pytest_plugins = ['pytester']


@pytest.fixture(autouse=True)
def _tensorflow_stays_imported():
    """Imports TF (and the stacks) before pytester's in-process runs.

    runpytest_inprocess removes the modules a run imported when it ends;
    TensorFlow cannot be imported a second time in one process (its native
    registrations abort), so it must be imported outside the runs.
    """
    import tensorflow  # noqa: F401
    import simharness.framework  # noqa: F401


USER_TESTS = """
import pytest
import tensorflow as tf
import simharness as sh


@sh.tf_computation(tf.float32)
def double(x):
    return x * 2.0


@sh.federated_computation(sh.type_at_clients(tf.float32))
def total(xs):
    return sh.federated_sum(sh.federated_map(double, xs))


@sh.federated_computation(sh.type_at_server(tf.float32))
def broadcast_sum(x):
    return sh.federated_sum(sh.federated_map(double, sh.federated_broadcast(x)))


def test_runs_inside_the_stack(simharness_stack):
    assert sh.get_context().factory is simharness_stack.factory
    assert simharness_stack.config['name'] == simharness_stack.name
    assert float(total([1.0, 2.0, 3.0])) == 12.0


def test_fixed_number_of_clients(simharness_stack):
    with simharness_stack.clients(3):
        assert float(broadcast_sum(1.5)) == 9.0


def test_round(simharness_benchmark):
    calls = []

    def one_round(xs):
        calls.append(1)
        return total(xs)

    assert float(simharness_benchmark.round(one_round, [1.0, 2.0], rounds=3)) == 6.0
    assert len(calls) == (1 if simharness_benchmark.disabled else 1 + 3)
    assert simharness_benchmark.extra_info['simharness_stack']['name'] == \\
        simharness_benchmark.stack.name


@pytest.mark.parametrize('simharness_stack', ['thread-debug'], indirect=True)
def test_user_parametrization_wins(simharness_stack):
    assert simharness_stack.name == 'thread-debug'
    assert float(total([1.0])) == 2.0
"""


def _benchmarks(path) -> dict:
    with open(path) as f:
        data = json.load(f)
    return {b['fullname'].split('::')[-1]: b for b in data['benchmarks']}


def test_default_stack_is_thread(pytester):
    pytester.makepyfile(test_user=USER_TESTS)
    result = pytester.runpytest_inprocess('-v', '-p', 'no:cacheprovider', '--benchmark-disable')
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(
        [
            '*test_runs_inside_the_stack[[]thread[]] PASSED*',
            '*test_round[[]thread[]] PASSED*',
            '*test_user_parametrization_wins[[]thread-debug[]] PASSED*',
        ]
    )


@pytest.mark.process
def test_stacks_and_saved_json(pytester):
    pytester.makepyfile(test_user=USER_TESTS)
    store = pytester.path / 'store'
    result = pytester.runpytest_inprocess(
        '-v',
        '-p',
        'no:cacheprovider',
        '--simharness-stacks=thread,process-1',
        '--simharness-rounds=2',
        '--benchmark-json=out.json',
        '--benchmark-save=mine',
        f'--benchmark-storage=file://{store}',
    )
    result.assert_outcomes(passed=7)
    result.stdout.fnmatch_lines(
        [
            '*test_runs_inside_the_stack[[]process-1[]] PASSED*',
            '*test_fixed_number_of_clients[[]process-1[]] PASSED*',
        ]
    )

    benches = _benchmarks(pytester.path / 'out.json')
    assert set(benches) == {'test_round[thread]', 'test_round[process-1]'}
    thread = benches['test_round[thread]']['extra_info']
    assert thread['simharness_stack']['name'] == 'thread'
    assert thread['simharness_stack']['factory'] == 'local_executor_factory'
    assert thread['simharness_rounds'] == 3 and thread['simharness_warmup_rounds'] == 1
    assert benches['test_round[thread]']['stats']['rounds'] == 3
    process = benches['test_round[process-1]']['extra_info']
    config = process['simharness_stack']
    assert config['kind'] == 'process' and config['num_workers'] == 1
    assert config['factory'] == 'process_executor_factory'
    assert len(config['workers']) == 1 and config['workers'][0]['cpus']
    assert process['simharness_per_round']['requests'] > 0

    saved = glob.glob(str(store / '*' / '0001_mine.json'))
    assert len(saved) == 1, saved
    assert (
        _benchmarks(saved[0])['test_round[process-1]']['extra_info']['simharness_stack'] == config
    )


PLAIN_BENCHMARK_TESTS = """
import subprocess, sys
import pytest

@pytest.fixture
def child():
    code = ('import sys; b = bytearray(64 << 20); b[::4096] = b"x" * (64 << 8); '
            'print("ready", flush=True); sys.stdin.read()')
    p = subprocess.Popen([sys.executable, '-c', code], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE)
    p.stdout.readline()
    yield p
    p.communicate(b'')

def test_plain(benchmark, child):
    benchmark.pedantic(lambda: bytearray(32 << 20), rounds=1)
"""


def test_plain_benchmarks_record_peak_rss(pytester):
    # A test using pytest-benchmark's own fixture gets the peak RSS of the driver
    # and of its child processes over its call (here a child holding 64 MB).
    # In a process of its own: in this one, other tests' warm pools are children too.
    pytester.makepyfile(test_plain=PLAIN_BENCHMARK_TESTS)
    result = pytester.runpytest_subprocess('-p', 'no:cacheprovider', '--benchmark-json=out.json')
    result.assert_outcomes(passed=1)
    peak = _benchmarks(pytester.path / 'out.json')['test_plain']['extra_info']['peak_rss']
    assert peak['driver_peak_rss_bytes'] >= 32 << 20
    assert len(peak['workers_peak_rss_bytes']) == 1
    assert peak['workers_peak_rss_bytes'][0] >= 64 << 20
    assert peak['method'] in ('VmHWM', 'rss-after')
    assert peak['total_peak_rss_bytes'] == peak['driver_peak_rss_bytes'] + sum(
        peak['workers_peak_rss_bytes']
    )


def test_unknown_stack_is_a_usage_error(pytester):
    pytester.makepyfile(test_user=USER_TESTS)
    result = pytester.runpytest_inprocess('-p', 'no:cacheprovider', '--simharness-stacks=gpu-9')
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(['*unknown simharness stack*gpu-9*'])


def test_help_and_ini_option(pytester):
    result = pytester.runpytest_inprocess('--help')
    result.stdout.fnmatch_lines(['*--simharness-stacks=*', '*--simharness-rounds=*'])
    pytester.makeini('[pytest]\nsimharness_stacks = thread-debug\n')
    pytester.makepyfile(
        test_one="""
def test_one(simharness_stack):
    assert simharness_stack.name == 'thread-debug'
"""
    )
    result = pytester.runpytest_inprocess('-v', '-p', 'no:cacheprovider')
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(['*test_one[[]thread-debug[]] PASSED*'])


def test_registered_as_pytest11_entry_point():
    eps = {ep.name: ep.value for ep in metadata.entry_points(group='pytest11')}
    assert eps.get('simharness') == 'simharness.pytest_plugin'


def test_plugin_import_is_light():
    # pytest loads the plugin in every run of every project with simharness installed.
    # (The runtime's plain-data modules, the codec and the stream plan, may load: they
    # are pure Python; the worker pools, shared memory and transports may not.)
    code = (
        'import sys, simharness.pytest_plugin; '
        'print(sorted(m for m in ("tensorflow", "multiprocess", "simharness.stacks", '
        '"simharness.runtime.local", "simharness.runtime.local.shm", "simharness.runtime.grpc", '
        '"simharness.runtime.ray", "simharness.learning", "grpc") if m in sys.modules))'
    )
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == '[]', out.stdout + out.stderr


def test_parse_stacks():
    from simharness.pytest_plugin import StackSpec, parse_stacks

    assert parse_stacks(' thread, process-2,thread ') == [
        StackSpec('thread', 'thread'),
        StackSpec('process-2', 'process', 2),
    ]
    assert parse_stacks('process') == [StackSpec('process', 'process', None)]
    for bad in ('process-0', 'thread-2', 'gpu', ',', 'process-x'):
        with pytest.raises(ValueError):
            parse_stacks(bad)


# ------------------------------------------------------------------ the registration API

REGISTERING_CONFTEST = '''
import json, os
import pytest
from simharness.pytest_plugin import StackEntry, process_stack

LOG = os.path.join(os.path.dirname(__file__), 'resource.log')


class Resource:
    """A session resource that logs its start and close."""

    def __init__(self):
        with open(LOG, 'a') as f:
            f.write('start\\n')
        self.factories = 0

    def close(self):
        with open(LOG, 'a') as f:
            f.write(f'close after {self.factories} factories\\n')


def build(resource, num_clients):
    from simharness.stacks import thread_debugging_executor_factory
    resource.factories += 1
    return thread_debugging_executor_factory(num_clients=num_clients, clients_per_thread=2)


@pytest.hookimpl(optionalhook=True)
def pytest_simharness_register_stacks(registry, config):
    config.addinivalue_line('markers', 'slowish: a registered stack')
    registry.register('logged-2', StackEntry(
        build, start=Resource, kind='thread-debug', marks=(pytest.mark.slowish,),
        describe=lambda factory: {'factory': 'thread_debugging_executor_factory',
                                  'clients_per_thread': 2}))
    registry.register('pool-1x2', process_stack(1, clients_per_worker=2))
'''

REGISTERED_TESTS = """
import tensorflow as tf
import simharness as sh


@sh.tf_computation(tf.float32)
def double(x):
    return x * 2.0


@sh.federated_computation(sh.type_at_clients(tf.float32))
def total(xs):
    return sh.federated_sum(sh.federated_map(double, xs))


def test_sum(simharness_stack):
    assert sh.get_context().factory is simharness_stack.factory
    assert float(total([1.0, 2.0, 3.0])) == 12.0
    registered = simharness_stack.name in simharness_stack.registry.names
    assert (simharness_stack.spec is None) == registered


def test_clients(simharness_stack):
    with simharness_stack.clients(2):
        assert simharness_stack.config['name'] == simharness_stack.name


def test_round(simharness_benchmark):
    assert float(simharness_benchmark.round(total, [1.0, 2.0], rounds=2)) == 6.0
"""


def test_a_conftest_registers_stacks_with_resources_and_marks(pytester):
    pytester.makeconftest(REGISTERING_CONFTEST)
    pytester.makepyfile(test_reg=REGISTERED_TESTS)
    result = pytester.runpytest_inprocess(
        '-v',
        '-p',
        'no:cacheprovider',
        '--simharness-stacks=thread,logged-2',
        '--simharness-rounds=1',
        '--benchmark-json=out.json',
    )
    result.assert_outcomes(passed=6)
    result.stdout.fnmatch_lines(
        ['*test_sum[[]thread[]] PASSED*', '*test_sum[[]logged-2[]] PASSED*']
    )
    # One resource for the session (3 tests, 4 factories: clients() makes one more), closed
    # at its end.
    log = (pytester.path / 'resource.log').read_text().splitlines()
    assert log == ['start', 'close after 4 factories'], log
    config = _benchmarks(pytester.path / 'out.json')['test_round[logged-2]']['extra_info'][
        'simharness_stack'
    ]
    assert config['name'] == 'logged-2' and config['kind'] == 'thread-debug'
    assert config['factory'] == 'thread_debugging_executor_factory'
    assert config['clients_per_thread'] == 2 and 'simharness_version' in config
    thread = _benchmarks(pytester.path / 'out.json')['test_round[thread]']['extra_info']
    assert thread['simharness_stack']['factory'] == 'local_executor_factory'

    # The entry's marks select its tests; an unused resource never starts.
    (pytester.path / 'resource.log').unlink()
    result = pytester.runpytest_inprocess(
        '-v',
        '-p',
        'no:cacheprovider',
        '-m',
        'not slowish',
        '--simharness-stacks=thread,logged-2',
        '--benchmark-disable',
    )
    result.assert_outcomes(passed=3, deselected=3)
    assert not (pytester.path / 'resource.log').exists()


def test_unknown_stack_names_the_registered_ones(pytester):
    pytester.makeconftest(REGISTERING_CONFTEST)
    pytester.makepyfile(test_reg=REGISTERED_TESTS)
    result = pytester.runpytest_inprocess('-p', 'no:cacheprovider', '--simharness-stacks=logged-3')
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unknown simharness stack 'logged-3'*logged-2, pool-1x2*"])


def test_a_conftest_below_registers_for_its_tests(pytester):
    # A conftest loaded during collection registers too (the hook is historic); its
    # tests can parametrize simharness_stack with the name.
    sub = pytester.mkpydir('sub')
    (sub / 'conftest.py').write_text(REGISTERING_CONFTEST)
    (sub / 'test_sub.py').write_text("""
import pytest

@pytest.mark.parametrize('simharness_stack', ['logged-2'], indirect=True)
def test_on_logged(simharness_stack):
    assert simharness_stack.name == 'logged-2' and simharness_stack.spec is None
    assert simharness_stack.config['clients_per_thread'] == 2
""")
    result = pytester.runpytest_inprocess('-v', '-p', 'no:cacheprovider')
    result.assert_outcomes(passed=1)
    assert (sub / 'resource.log').read_text().splitlines() == ['start', 'close after 1 factories']


@pytest.mark.process
def test_process_stacks_share_one_warm_pool_per_layout(pytester):
    pytester.makeconftest(REGISTERING_CONFTEST)
    pytester.makepyfile(
        test_pools="""
def test_one(simharness_stack, simharness_pools):
    pool = simharness_stack.factory.group
    assert pool in simharness_pools.started
    cpw = {'process-1': 256, 'pool-1x2': 2}[simharness_stack.name]
    assert simharness_stack.config['clients_per_worker'] == cpw
    assert simharness_stack.config['kind'] == 'process' and simharness_stack.config['num_workers'] == 1


def test_two(simharness_stack, simharness_pools):
    # The same warm pool as test_one's, and another for the other layout.
    assert simharness_stack.factory.group in simharness_pools.started
    assert len(simharness_pools.started) == 2
    assert sorted(simharness_pools.start_seconds) == [(1, 2), (1, 256)]
"""
    )
    result = pytester.runpytest_inprocess(
        '-v',
        '-p',
        'no:cacheprovider',
        '-p',
        'no:randomly',
        '--simharness-stacks=process-1,pool-1x2',
    )
    result.assert_outcomes(passed=4)


def test_registry_rules():
    from simharness.pytest_plugin import StackEntry, StackRegistry, process_stack

    def build(resource, num_clients):
        return ('factory', resource, num_clients)

    class Resource:
        closed = 0

        def close(self):
            Resource.closed += 1

    with StackRegistry() as registry:
        entry = StackEntry(build, start=Resource, resident_threads=('my-thread',))
        registry.register('mine', entry)
        for bad in ('thread', 'process-3', 'thread-debug'):
            with pytest.raises(ValueError, match='built-in'):
                registry.register(bad, entry)
        with pytest.raises(ValueError, match='already registered'):
            registry.register('mine', entry)
        for bad in ('', 'a,b', 'a b', ' a'):
            with pytest.raises(ValueError, match='without commas or whitespace'):
                registry.register(bad, entry)
        with pytest.raises(TypeError, match='needs a StackEntry'):
            registry.register('other', build)
        with pytest.raises(ValueError, match="unknown simharness stack 'gpu'.*mine"):
            registry.entry('gpu')
        assert registry.names == ['mine']
        assert registry.parse(' mine,thread,mine ') == ['mine', 'thread']
        assert registry.spec('mine') is None and registry.spec('process-2').num_workers == 2
        assert registry.resident_thread_prefixes() == ()
        # The resource starts once, on first use; factories share it.
        first, second = registry.make_factory('mine'), registry.make_factory('mine', 3)
        assert first[1] is second[1] and isinstance(first[1], Resource)
        assert second[2] == 3 and Resource.closed == 0
        assert registry.resident_thread_prefixes() == ('my-thread',)
        registry.add_marks('mine', pytest.mark.slow)
        registry.add_marks('process-2', pytest.mark.slow)
        assert [m.name for m in registry.entry('mine').marks] == ['slow']
        assert [m.name for m in registry.entry('process-2').marks] == ['slow']
        assert registry.entry('process-2').pool == (2, None)
        assert [p.id for p in registry.params(['mine', 'thread'])] == ['mine', 'thread']
    assert Resource.closed == 1
    with pytest.raises(RuntimeError, match='closed'):
        registry.resource('mine')
    registry.close()  # idempotent
    assert Resource.closed == 1

    with pytest.raises(ValueError, match='start or a pool'):
        StackEntry(build, start=Resource, pool=(1, None))
    with pytest.raises(ValueError, match='num_workers, clients_per_worker'):
        StackEntry(build, pool=(0, 3))
    with pytest.raises(TypeError, match='build must be callable'):
        StackEntry('build')
    entry = process_stack(2, clients_per_worker=3)
    assert entry.pool == (2, 3) and entry.kind == 'process'
    assert entry.resident_threads == ('simharness-pool-reactor',)
