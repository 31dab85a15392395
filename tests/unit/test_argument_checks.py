# mypy: disable-error-code="arg-type"
"""Every public entry point that takes numbers or flags names a bad one (issue 10, item 8 and 10).

Each row is (entry point, argument, bad value, error class, fragments of the
message). A bad argument fails before any worker pool exists: these tests
start no process (`no_pool` makes building a `WorkerPool` fail the test).
"""

from __future__ import annotations

import multiprocessing
import textwrap

import numpy as np
import pytest

import simharness as sh
from simharness import stacks, validation
from simharness.core import types as T
from simharness.errors import (
    ConfigError,
    DeviceNotFoundError,
    SimharnessTypeError,
    SimharnessValueError,
)
from simharness.experiments.checkpoints import EarlyStopping
from simharness.learning.fedavg import FedAvgConfig
from simharness.runtime import resources

NO_GPU = resources.GpuInventory((), 'CUDA_VISIBLE_DEVICES (unset), nvidia-smi (not on PATH)')
TWO_GPUS = resources.GpuInventory((0, 1), 'CUDA_VISIBLE_DEVICES (unset), nvidia-smi -L')


def _fake_pool_module(monkeypatch, pool_class):
    """Makes `create_worker_pool` (simharness.runtime.local.pool) build `pool_class` in place of WorkerPool."""
    from simharness.runtime.local import pool as pool_module

    monkeypatch.setattr(pool_module, 'WorkerPool', pool_class)


@pytest.fixture(autouse=True)
def no_pool(monkeypatch):
    """Building a pool (let alone starting a worker) fails the test; discovery finds no GPU."""

    def refuse(*args, **kwargs):
        pytest.fail('a worker pool was created although an argument was bad')

    _fake_pool_module(monkeypatch, refuse)
    monkeypatch.setattr(resources, 'discover_gpus', lambda: NO_GPU)
    children = multiprocessing.active_children()
    yield
    assert multiprocessing.active_children() == children


def _secure_sum(bitwidth, member=T.TensorType(np.int32)):
    def trace():
        @sh.federated_computation(T.FederatedType(member, T.CLIENTS))
        def comp(xs):
            return sh.federated_secure_sum_bitwidth(xs, bitwidth)

        return comp

    return trace


def _modular_sum(modulus):
    def trace():
        @sh.federated_computation(T.FederatedType(T.TensorType(np.int32), T.CLIENTS))
        def comp(xs):
            return sh.federated_secure_modular_sum(xs, modulus)

        return comp

    return trace


PAIR = T.StructType([('a', T.TensorType(np.int32)), ('b', T.TensorType(np.int32, [2]))])

_FACTORIES = {
    'process_executor_factory': stacks.process_executor_factory,
    'create_worker_pool': stacks.create_worker_pool,
}

# (entry point, keyword arguments, error class, fragments the message must contain)
TYPE = SimharnessTypeError
VALUE = SimharnessValueError
CASES = [
    # -- secure sums (checked while tracing)
    (
        'bitwidth float',
        _secure_sum(2.5),
        TYPE,
        [
            'federated_secure_sum_bitwidth: bitwidth must be an int in [1, 62], got 2.5 of type float'
        ],
    ),
    ('bitwidth bool', _secure_sum(True), TYPE, ['bitwidth', 'got True of type bool']),
    ('bitwidth str', _secure_sum('8'), TYPE, ['bitwidth', "got '8' of type str"]),
    ('bitwidth numpy float', _secure_sum(np.float32(4)), TYPE, ['bitwidth', 'of type float32']),
    ('bitwidth 0', _secure_sum(0), VALUE, ['bitwidth must be in [1, 62], got 0 of type int']),
    ('bitwidth 63', _secure_sum(63), VALUE, ['bitwidth must be in [1, 62], got 63']),
    ('bitwidth list for a tensor', _secure_sum([8]), TYPE, ['bitwidth', 'got [8] of type list']),
    (
        'bitwidth nested float',
        _secure_sum({'a': 2, 'b': 2.5}, PAIR),
        TYPE,
        ["bitwidth['b'] must be an int in [1, 62], got 2.5 of type float"],
    ),
    (
        'bitwidth nested 0',
        _secure_sum([3, 0], PAIR),
        VALUE,
        ["bitwidth['b'] must be in [1, 62], got 0"],
    ),
    (
        'bitwidth wrong structure',
        _secure_sum([3], PAIR),
        TYPE,
        [
            'bitwidth must be an int in [1, 62] or a structure of such ints matching <a=int32,'
            'b=int32[2]>, got [3] of type list'
        ],
    ),
    (
        'modulus float',
        _modular_sum(8.0),
        TYPE,
        [
            'federated_secure_modular_sum: modulus must be an int in [1, 2**62], got 8.0 of type float'
        ],
    ),
    ('modulus 0', _modular_sum(0), VALUE, ['modulus must be in [1, 2**62], got 0 of type int']),
    ('modulus too big', _modular_sum(2**62 + 1), VALUE, ['modulus must be in [1, 2**62]']),
    # -- thread factories
    (
        'local num_clients float',
        lambda: stacks.local_executor_factory(num_clients=1.5),
        TYPE,
        ['num_clients must be an int >= 0 or None, got 1.5 of type float'],
    ),
    (
        'local num_clients -1',
        lambda: stacks.local_executor_factory(num_clients=-1),
        VALUE,
        ['num_clients must be an int >= 0 or None, got -1 of type int'],
    ),
    (
        'local clients_per_thread bool',
        lambda: stacks.local_executor_factory(clients_per_thread=True),
        TYPE,
        ['clients_per_thread must be an int >= 1, got True of type bool'],
    ),
    (
        'local max_fanout 0',
        lambda: stacks.local_executor_factory(max_fanout=0),
        VALUE,
        ['max_fanout must be an int >= 2 or None, got 0'],
    ),
    (
        'local max_cached_stacks 0',
        lambda: stacks.local_executor_factory(max_cached_stacks=0),
        VALUE,
        ['max_cached_stacks must be an int >= 1, got 0'],
    ),
    (
        'local device int',
        lambda: stacks.local_executor_factory(device=0),
        TYPE,
        ['device must be None or a TensorFlow device name', 'got 0 of type int'],
    ),
    (
        'local device missing GPU',
        lambda: stacks.local_executor_factory(device='/GPU:3'),
        DeviceNotFoundError,
        ["device='/GPU:3': this process has no GPU 3 (it sees 0 GPUs"],
    ),
    (
        'debugging clients_per_thread 0',
        lambda: stacks.thread_debugging_executor_factory(clients_per_thread=0),
        VALUE,
        ['clients_per_thread must be an int >= 1, got 0'],
    ),
    (
        'debugging num_clients str',
        lambda: stacks.thread_debugging_executor_factory(num_clients='4'),
        TYPE,
        ["num_clients must be an int >= 1 or None, got '4' of type str"],
    ),
    # -- contexts
    (
        'ExecutionContext retries bool',
        lambda: sh.ExecutionContext(stacks.local_executor_factory(), retries=True),
        TYPE,
        ['retries must be an int >= 0, got True of type bool'],
    ),
    (
        'ExecutionContext retries float',
        lambda: sh.ExecutionContext(stacks.local_executor_factory(), retries=1.0),
        TYPE,
        ['retries must be an int >= 0, got 1.0 of type float'],
    ),
    (
        'ExecutionContext retries -1',
        lambda: sh.ExecutionContext(stacks.local_executor_factory(), retries=-1),
        VALUE,
        ['retries must be an int >= 0, got -1 of type int'],
    ),
    (
        'ExecutionContext factory',
        lambda: sh.ExecutionContext('local'),
        TYPE,
        ["factory must be an ExecutorFactory, got str 'local'"],
    ),
    (
        'execution_context retries bool',
        lambda: sh.execution_context(stacks.local_executor_factory(), retries=False).__enter__(),
        TYPE,
        ['retries must be an int >= 0, got False of type bool'],
    ),
    (
        'execution_context close int',
        lambda: sh.execution_context(stacks.local_executor_factory(), close=1).__enter__(),
        TYPE,
        ['close must be a bool (True or False), got 1 of type int'],
    ),
    (
        'set_default_executor retries -2',
        lambda: sh.set_default_executor(stacks.local_executor_factory(), retries=-2),
        VALUE,
        ['retries must be an int >= 0, got -2'],
    ),
    (
        'set_default_executor retries str',
        lambda: sh.set_default_executor(None, retries='1'),
        TYPE,
        ["retries must be an int >= 0, got '1' of type str"],
    ),
    (
        'set_default_executor factory',
        lambda: sh.set_default_executor(3),
        TYPE,
        ['factory must be an ExecutorFactory, got int 3'],
    ),
    # -- "an int >= 1" everywhere through validation.check_int (issue 17)
    (
        'FedAvgConfig local_epochs 0',
        lambda: FedAvgConfig(local_epochs=0),
        VALUE,
        ['local_epochs must be an int >= 1, got 0 of type int'],
    ),
    (
        'FedAvgConfig batch_size bool',
        lambda: FedAvgConfig(batch_size=True),
        TYPE,
        ['batch_size must be an int >= 1, got True of type bool'],
    ),
    (
        'EarlyStopping patience 0',
        lambda: EarlyStopping(patience=0),
        VALUE,
        ['patience must be an int >= 1, got 0 of type int'],
    ),
    (
        'EarlyStopping patience float',
        lambda: EarlyStopping(patience=2.0),
        TYPE,
        ['patience must be an int >= 1, got 2.0 of type float'],
    ),
]

# Pool arguments: both process_executor_factory and create_worker_pool check them.
POOL_CASES = [
    ('num_workers', 0, VALUE, ['num_workers must be an int >= 1 or None, got 0 of type int']),
    ('num_workers', 2.0, TYPE, ['num_workers must be an int >= 1 or None, got 2.0 of type float']),
    ('num_workers', True, TYPE, ['num_workers', 'got True of type bool']),
    ('clients_per_worker', 0, VALUE, ['clients_per_worker must be an int >= 1 or None, got 0']),
    ('clients_per_worker', '8', TYPE, ['clients_per_worker', "got '8' of type str"]),
    ('workers_per_gpu', 0, VALUE, ['workers_per_gpu must be an int >= 1, got 0']),
    ('workers_per_gpu', None, TYPE, ['workers_per_gpu must be an int >= 1, got None']),
    ('arena_bytes', 0, VALUE, ['arena_bytes must be an int >= 1, got 0 of type int']),
    ('arena_bytes', 1.5e6, TYPE, ['arena_bytes must be an int >= 1, got 1500000.0 of type float']),
    ('arena_bytes', True, TYPE, ['arena_bytes', 'got True of type bool']),
    ('start_timeout', -1, VALUE, ['start_timeout must be a number > 0, got -1 of type int']),
    ('start_timeout', 0, VALUE, ['start_timeout must be a number > 0, got 0']),
    ('start_timeout', float('nan'), VALUE, ['start_timeout must be a number > 0, got nan']),
    ('start_timeout', '10', TYPE, ["start_timeout must be a number > 0, got '10' of type str"]),
    ('start_timeout', True, TYPE, ['start_timeout', 'got True of type bool']),
    ('cpu_affinity', 1, TYPE, ['cpu_affinity must be a bool (True or False), got 1 of type int']),
    ('cpu_affinity', 'false', TYPE, ['cpu_affinity must be a bool', "got 'false' of type str"]),
    ('worker_options', ['profile'], TYPE, ['worker_options must be a dict or None']),
    (
        'worker_options',
        {'profil': True},
        VALUE,
        ["worker_options has unknown key(s) ['profil']; the known ones are ['profile']"],
    ),
    ('stopped_timeout', 0, VALUE, ['stopped_timeout must be a number > 0, got 0']),
    ('devices', 'tpu:0', VALUE, ["cannot parse device 'tpu:0'"]),
    ('devices', 1.0, TYPE, ['devices must be None, an int', 'got 1.0 of type float']),
    (
        'devices',
        'cuda:7',
        DeviceNotFoundError,
        [
            "devices='cuda:7': this machine has no GPU 7 (found: none; checked CUDA_VISIBLE_DEVICES "
            '(unset), nvidia-smi (not on PATH))'
        ],
    ),
    ('devices', [0, 1], DeviceNotFoundError, ['devices=[0, 1]', 'no GPU 0, 1 (found: none']),
]

# Arguments of process_executor_factory alone.
FACTORY_CASES = [
    ('num_clients', -1, VALUE, ['num_clients must be an int >= 0 or None, got -1']),
    ('num_clients', 2.5, TYPE, ['num_clients', 'got 2.5 of type float']),
    ('max_cached_stacks', 0, VALUE, ['max_cached_stacks must be an int >= 1, got 0']),
    ('max_cached_stacks', True, TYPE, ['max_cached_stacks', 'got True of type bool']),
    ('start', 'yes', TYPE, ["start must be a bool (True or False), got 'yes' of type str"]),
    ('start', 1, TYPE, ['start must be a bool', 'got 1 of type int']),
]


def _check(call, error, fragments):
    with pytest.raises(error) as e:
        call()
    for fragment in fragments:
        assert fragment in str(e.value), (fragment, str(e.value))
    # Wrong types are TypeErrors and bad values ValueErrors, never both.
    assert isinstance(e.value, TypeError) != isinstance(e.value, ValueError)
    return e.value


@pytest.mark.parametrize('name, call, error, fragments', CASES, ids=[c[0] for c in CASES])
def test_entry_points(name, call, error, fragments):
    _check(call, error, fragments)


@pytest.mark.parametrize('entry', sorted(_FACTORIES))
@pytest.mark.parametrize(
    'arg, value, error, fragments', POOL_CASES, ids=[f'{c[0]}={c[1]!r}' for c in POOL_CASES]
)
def test_pool_arguments(entry, arg, value, error, fragments):
    _check(lambda: _FACTORIES[entry](**{arg: value}), error, fragments)


@pytest.mark.parametrize(
    'arg, value, error, fragments', FACTORY_CASES, ids=[f'{c[0]}={c[1]!r}' for c in FACTORY_CASES]
)
def test_process_factory_arguments(arg, value, error, fragments):
    _check(lambda: stacks.process_executor_factory(**{arg: value}), error, fragments)


def test_existing_gpus_are_accepted(monkeypatch):
    made = {}

    class FakePool:
        def __init__(self, placements, options, **kwargs):
            made.update(placements=placements, options=options, **kwargs)

    monkeypatch.setattr(resources, 'discover_gpus', lambda: TWO_GPUS)
    _fake_pool_module(monkeypatch, FakePool)
    stacks.create_worker_pool(devices='cuda:1', workers_per_gpu=2, start_timeout=0.5)
    assert [p.gpu for p in made['placements']] == [1, 1]
    assert made['options'].start_timeout == 0.5
    with pytest.raises(DeviceNotFoundError, match=r'no GPU 2 \(found: 0, 1; checked '):
        stacks.create_worker_pool(devices=['cuda:0', 'cuda:2'])


def test_cpu_only_devices_need_no_gpu(monkeypatch):
    made = {}
    monkeypatch.setattr(resources, 'discover_gpus', lambda: pytest.fail('must not discover'))
    _fake_pool_module(
        monkeypatch, lambda placements, *args, **kwargs: made.setdefault('p', placements)
    )
    for devices in (None, 'cpu', []):
        made.clear()
        stacks.create_worker_pool(num_workers=1, devices=devices)
        assert made['p'][0].gpu is None


@pytest.mark.parametrize('value', [8, np.int64(8), [2, 8], {'a': 2, 'b': 8}])
def test_good_bitwidths_are_accepted(value):
    member = T.TensorType(np.int32) if np.ndim(value) == 0 and not isinstance(value, dict) else PAIR
    comp = _secure_sum(value, member)()
    assert str(comp.type_signature.result) == f'{member}@SERVER'


def test_good_arguments_pass():
    assert sh.ExecutionContext(stacks.local_executor_factory(), retries=np.int64(2)).retries == 2
    stacks.local_executor_factory(num_clients=0, device='/CPU:0').clean_up_executors()


# -- validation helpers --------------------------------------------------------------------


@pytest.mark.parametrize(
    'call, error, message',
    [
        (lambda: validation.check_int('n', 1.0), TYPE, 'n must be an int, got 1.0 of type float'),
        (lambda: validation.check_int('n', None, 1), TYPE, 'n must be an int >= 1, got None'),
        (lambda: validation.check_int('n', 9, 1, 8), VALUE, 'n must be an int in [1, 8], got 9 of'),
        (lambda: validation.check_int('n', -1, maximum=5, allow_none=True), None, None),
        (lambda: validation.check_int('n', 6, maximum=5), VALUE, 'n must be an int <= 5, got 6'),
        (
            lambda: validation.check_number('t', np.float32(0), greater_than=0),
            VALUE,
            't must be a number > 0, got ',
        ),
        (
            lambda: validation.check_number('t', np.float32(0), greater_than=0),
            VALUE,
            'of type float32',
        ),
        (
            lambda: validation.check_number('t', 2, 0, 1),
            VALUE,
            't must be a number in [0, 1], got 2',
        ),
        (
            lambda: validation.check_number('t', [1]),
            TYPE,
            't must be a number, got [1] of type list',
        ),
        (lambda: validation.check_bool('f', np.bool_(True)), TYPE, 'f must be a bool'),
    ],
)
def test_validation_helpers(call, error, message):
    if error is None:
        assert call() == -1
        return
    with pytest.raises(error) as e:
        call()
    assert message in str(e.value)


def test_validation_helpers_return_plain_values():
    assert validation.check_int('n', None, 1, allow_none=True) is None
    assert type(validation.check_int('n', np.int32(3), 1)) is int
    assert validation.check_number('t', float('inf'), greater_than=0) == float('inf')
    assert validation.check_number('t', None, allow_none=True) is None
    assert validation.check_bool('f', False) is False


# -- stack.devices in an experiment config --------------------------------------------------


def test_config_stack_devices_missing_gpu(monkeypatch):
    from simharness.experiments.config import StackConfig, check_stack_devices

    stack = StackConfig(kind='process', devices='cuda:7')  # a config is not machine-bound
    with pytest.raises(ConfigError) as e:
        check_stack_devices(stack)
    assert e.value.key == 'stack.devices'
    assert "stack.devices='cuda:7': this machine has no GPU 7 (found: none" in str(e.value)
    check_stack_devices(StackConfig(kind='process', devices=(0, 'cuda:1')), TWO_GPUS)
    check_stack_devices(StackConfig(kind='process', devices='cpu'))
    check_stack_devices(StackConfig(kind='thread'))


def test_config_stack_devices_syntax():
    from simharness.experiments.config import StackConfig

    with pytest.raises(ConfigError, match="stack.devices: cannot parse device 'tpu:0'") as e:
        StackConfig(kind='process', devices='tpu:0')
    assert e.value.key == 'stack.devices'
    with pytest.raises(ConfigError, match='stack.devices: GPU 1 is listed twice'):
        StackConfig(kind='process', devices=(1, 'cuda:1'))


def test_cli_run_with_a_missing_gpu_exits_2(tmp_path, capsys):
    from simharness.cli import main

    cfg = tmp_path / 'gpu.toml'
    cfg.write_text(
        textwrap.dedent("""\
        name = "gpu"
        [data]
        dataset = "synthetic"
        num_clients = 4
        samples_per_client = 4
        dim = 3
        num_classes = 2
        [model]
        name = "logreg"
        [training]
        rounds = 1
        clients_per_round = 2
        [stack]
        kind = "process"
        devices = "cuda:7"
        """)
    )
    code = main(['run', str(cfg), '--results', str(tmp_path / 'r'), '--no-progress'])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "stack.devices='cuda:7': this machine has no GPU 7 (found: none" in err
    assert 'Traceback' not in err
