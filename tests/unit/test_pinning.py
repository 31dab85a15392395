"""Unit tests of simharness.runtime.pinning and .resources (no processes, no TF)."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import types

import pytest

from simharness.core.determinism import INTRA_OP_THREADS
from simharness.errors import (
    DeviceNotFoundError,
    SimharnessTypeError,
    SimharnessValueError,
    WorkerStartError,
)
from simharness.runtime import pinning, resources
from simharness.runtime.pinning import (
    WorkerPlacement,
    apply_placement,
    configure_tensorflow,
    parse_devices,
    plan_workers,
    usable_cpus,
)


def _cpu_sets(plan):
    return [p.cpus for p in plan]


# -- usable_cpus ----------------------------------------------------------------


def test_usable_cpus_is_sorted_and_nonempty():
    cpus = usable_cpus()
    assert cpus and cpus == sorted(cpus)
    if hasattr(os, 'sched_getaffinity'):
        assert set(cpus) == os.sched_getaffinity(0)


def test_usable_cpus_falls_back_to_cpu_count(monkeypatch):
    monkeypatch.delattr(os, 'sched_getaffinity', raising=False)
    monkeypatch.setattr(os, 'cpu_count', lambda: 3)
    assert usable_cpus() == [0, 1, 2]


# -- plan_workers: CPUs ------------------------------------------------------------


def test_two_cpus_two_workers():
    plan = plan_workers(2, [0, 1])
    assert _cpu_sets(plan) == [(0,), (1,)]
    assert [p.worker_id for p in plan] == [0, 1]
    assert all(p.intra_op_threads == 1 and p.inter_op_threads == 1 for p in plan)
    assert all(p.gpu is None and p.env == {'CUDA_VISIBLE_DEVICES': ''} for p in plan)


def test_two_cpus_three_workers_share_round_robin():
    plan = plan_workers(3, [0, 1])
    assert _cpu_sets(plan) == [(0,), (1,), (0,)]
    assert [p.intra_op_threads for p in plan] == [1, 1, 1]


def test_eight_cpus_three_workers_contiguous_disjoint_balanced():
    plan = plan_workers(3, list(range(8)))
    assert _cpu_sets(plan) == [(0, 1, 2), (3, 4, 5), (6, 7)]
    # One TF thread per op whatever the CPU set (simharness.core.determinism).
    assert [p.intra_op_threads for p in plan] == [INTRA_OP_THREADS] * 3 == [1, 1, 1]
    assert [p.inter_op_threads for p in plan] == [1, 1, 1]


def test_cpu_order_is_kept_and_ids_need_not_start_at_zero():
    plan = plan_workers(2, [4, 5, 10, 11, 12])
    assert _cpu_sets(plan) == [(4, 5, 10), (11, 12)]


def test_default_num_workers_is_one_per_cpu():
    plan = plan_workers(None, [2, 3, 5])
    assert _cpu_sets(plan) == [(2,), (3,), (5,)]


def test_no_cpu_affinity_shares_all_cpus():
    plan = plan_workers(3, list(range(8)), cpu_affinity=False)
    assert _cpu_sets(plan) == [tuple(range(8))] * 3
    assert [p.intra_op_threads for p in plan] == [INTRA_OP_THREADS] * 3
    plan = plan_workers(4, [0, 1], cpu_affinity=False)
    assert [p.intra_op_threads for p in plan] == [1] * 4


def test_plan_is_pure():
    cpus = [0, 1, 2, 3]
    assert plan_workers(2, cpus) == plan_workers(2, cpus)
    assert cpus == [0, 1, 2, 3]


# -- plan_workers: GPUs -------------------------------------------------------------


def test_two_gpus_two_workers_per_gpu():
    plan = plan_workers(None, list(range(8)), gpus=[0, 1], workers_per_gpu=2)
    assert len(plan) == 4
    assert [p.gpu for p in plan] == [0, 0, 1, 1]
    assert [p.env['CUDA_VISIBLE_DEVICES'] for p in plan] == ['0', '0', '1', '1']
    assert all(p.env['TF_FORCE_GPU_ALLOW_GROWTH'] == 'true' for p in plan)
    assert _cpu_sets(plan) == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert [p.intra_op_threads for p in plan] == [INTRA_OP_THREADS] * 4


def test_gpu_ids_are_physical_ids():
    plan = plan_workers(None, [0, 1], gpus=[3, 1])
    assert [(p.gpu, p.env['CUDA_VISIBLE_DEVICES']) for p in plan] == [(3, '3'), (1, '1')]


def test_fewer_workers_than_gpu_slots():
    plan = plan_workers(3, [0, 1, 2], gpus=[0, 1], workers_per_gpu=2)
    assert [p.gpu for p in plan] == [0, 0, 1]


def test_empty_gpu_list_means_cpu_only():
    assert plan_workers(None, [0, 1], gpus=[]) == plan_workers(None, [0, 1])


# -- plan_workers: validation -------------------------------------------------------


@pytest.mark.parametrize(
    'kwargs, error, match',
    [
        (
            dict(num_workers=0, cpus=[0]),
            SimharnessValueError,
            'num_workers must be an int >= 1, got 0',
        ),
        (
            dict(num_workers=-2, cpus=[0]),
            SimharnessValueError,
            'num_workers must be an int >= 1, got -2',
        ),
        (
            dict(num_workers=1, cpus=[0], workers_per_gpu=0),
            SimharnessValueError,
            'workers_per_gpu must be an int >= 1, got 0',
        ),
        (dict(num_workers=1, cpus=[]), SimharnessValueError, 'cpus must name at least one'),
        (dict(num_workers=None, cpus=[]), SimharnessValueError, 'cpus must name at least one'),
        (
            dict(num_workers=1, cpus=[0], gpus=[0, 0]),
            SimharnessValueError,
            r'gpus must not repeat an id, got 0 twice',
        ),
        (dict(num_workers=1, cpus=[0, 0]), SimharnessValueError, 'cpus must not repeat'),
        (
            dict(num_workers=1, cpus=[0, -1]),
            SimharnessValueError,
            r'cpus\[1\] must be an int >= 0, got -1',
        ),
        (
            dict(num_workers=1, cpus=[0], gpus=[-1]),
            SimharnessValueError,
            r'gpus\[0\] must be an int >= 0, got -1',
        ),
        (
            dict(num_workers=5, cpus=[0], gpus=[0, 1], workers_per_gpu=2),
            SimharnessValueError,
            'num_workers=5 .* expected num_workers <= 4',
        ),
        (dict(num_workers='2', cpus=[0]), SimharnessTypeError, 'num_workers must be an int'),
        (dict(num_workers=1.0, cpus=[0]), SimharnessTypeError, 'num_workers must be an int'),
        (dict(num_workers=True, cpus=[0]), SimharnessTypeError, 'num_workers must be an int'),
        (dict(num_workers=1, cpus='01'), SimharnessTypeError, 'cpus must be a sequence'),
        (dict(num_workers=1, cpus=[0], cpu_affinity='yes'), SimharnessTypeError, 'cpu_affinity'),
    ],
)
def test_plan_workers_validation(kwargs, error, match):
    with pytest.raises(error, match=match):
        plan_workers(**kwargs)


def test_validation_errors_are_builtin_subclasses():
    with pytest.raises(ValueError):
        plan_workers(0, [0])
    with pytest.raises(TypeError):
        plan_workers('x', [0])


# -- WorkerPlacement ------------------------------------------------------------------


def test_placement_is_frozen_hashable_picklable_and_copies_env():
    env = {'CUDA_VISIBLE_DEVICES': ''}
    p = WorkerPlacement(0, [1, 2], None, 2, 1, env)
    env['X'] = 'y'
    assert p.cpus == (1, 2) and p.env == {'CUDA_VISIBLE_DEVICES': ''}
    with pytest.raises(AttributeError):
        p.gpu = 1
    assert hash(p) == hash(WorkerPlacement(0, (1, 2), None, 2, 1, {}))
    assert pickle.loads(pickle.dumps(p)) == p


@pytest.mark.parametrize(
    'args, error',
    [
        ((-1, (0,), None, 1, 1), SimharnessValueError),
        ((0, (), None, 1, 1), SimharnessValueError),
        ((0, (0,), -1, 1, 1), SimharnessValueError),
        ((0, (0,), None, 0, 1), SimharnessValueError),
        ((0, (0,), None, 1, 0), SimharnessValueError),
        ((0, (0,), None, 1, 1, {'A': 1}), SimharnessTypeError),
    ],
)
def test_placement_validation(args, error):
    with pytest.raises(error):
        WorkerPlacement(*args)


# -- parse_devices -----------------------------------------------------------------------


@pytest.mark.parametrize(
    'devices, expected',
    [
        (None, None),
        (0, [0]),
        (3, [3]),
        ('cuda:0', [0]),
        ('gpu:1', [1]),
        ('/gpu:1', [1]),
        ('GPU:0', [0]),
        ('CUDA:2', [2]),
        ('/device:GPU:1', [1]),
        ('/job:localhost/replica:0/task:0/device:GPU:3', [3]),
        ('2', [2]),
        ('cuda:0,cuda:1', [0, 1]),
        ('0, 1', [0, 1]),
        ('cpu', []),
        ('/cpu:0', []),
        ([], []),
        ([0, 'gpu:2', '/gpu:1'], [0, 2, 1]),
        (('cuda:1', 0), [1, 0]),
    ],
)
def test_parse_devices(devices, expected):
    assert parse_devices(devices) == expected


@pytest.mark.parametrize(
    'devices, error, match',
    [
        (-1, SimharnessValueError, 'must be >= 0, got -1'),
        ('cuda', SimharnessValueError, 'needs an index'),
        ('tpu:0', SimharnessValueError, "cannot parse device 'tpu:0'"),
        ('cuda:-1', SimharnessValueError, 'cannot parse'),
        ('', SimharnessValueError, 'cannot parse'),
        ('gpu:0,gpu:0', SimharnessValueError, 'GPU 0 is listed twice'),
        ([0, 'cuda:0'], SimharnessValueError, 'GPU 0 is listed twice'),
        (1.0, SimharnessTypeError, 'got 1.0 of type float'),
        (True, SimharnessTypeError, 'of type bool'),
        ({'gpu': 0}, SimharnessTypeError, 'of type dict'),
        ([[0]], SimharnessTypeError, r'got \[0\] of type list in devices=\[\[0\]\]'),
    ],
)
def test_parse_devices_errors(devices, error, match):
    with pytest.raises(error, match=match):
        parse_devices(devices)


# -- determinism.pin_tensorflow_threads (fake TF, no real one) ------------------------


class _FakeThreadingTF(types.ModuleType):
    """A TF whose intra-op thread count is `configured`; `initialized`: it refuses changes."""

    def __init__(self, configured=0, initialized=False):
        super().__init__('tensorflow')
        self.configured, self.sets = configured, []

        def set_intra(n):
            if initialized and n != self.configured:
                raise RuntimeError('Intra op parallelism cannot be modified after initialization.')
            self.sets.append(n)
            self.configured = n

        self.config = types.SimpleNamespace(
            threading=types.SimpleNamespace(
                get_intra_op_parallelism_threads=lambda: self.configured,
                set_intra_op_parallelism_threads=set_intra,
            )
        )


@pytest.fixture
def determinism(monkeypatch):
    """`simharness.core.determinism` with its process state fresh (TF not started before
    import simharness; nothing said yet) and no TF_NUM_INTRAOP_THREADS."""
    from simharness.core import determinism as module

    monkeypatch.setattr(module, '_STARTED_WITH', None)
    monkeypatch.setattr(module, '_WARNED', False)
    monkeypatch.delenv(module.THREADS_ENV, raising=False)
    return module


def _said(caplog):
    return [r.getMessage() for r in caplog.records if r.name.startswith('simharness')]


def test_pin_tensorflow_threads_before_the_first_op(determinism, monkeypatch, caplog):
    fake = _FakeThreadingTF(configured=0)
    monkeypatch.setitem(sys.modules, 'tensorflow', fake)
    monkeypatch.setattr(os, 'sched_getaffinity', lambda pid: {0, 1, 2, 3}, raising=False)
    assert determinism.pin_tensorflow_threads() is True
    assert fake.sets == [INTRA_OP_THREADS] == [1]
    assert determinism.pin_tensorflow_threads() is True  # idempotent: no second set
    assert fake.sets == [1] and not _said(caplog)


def test_pin_tensorflow_threads_default_on_one_cpu_is_pinned(determinism, monkeypatch):
    fake = _FakeThreadingTF(configured=0, initialized=True)
    monkeypatch.setitem(sys.modules, 'tensorflow', fake)
    monkeypatch.setattr(os, 'sched_getaffinity', lambda pid: {3}, raising=False)
    assert determinism.pin_tensorflow_threads() is True and fake.sets == []


def test_pin_tensorflow_threads_too_late_says_one_line_once(determinism, monkeypatch, caplog):
    fake = _FakeThreadingTF(configured=4, initialized=True)
    monkeypatch.setitem(sys.modules, 'tensorflow', fake)
    with caplog.at_level('WARNING', logger='simharness'):
        for _ in range(3):  # three call sites of a program: one line
            assert determinism.pin_tensorflow_threads() is False
    assert fake.configured == 4
    said = _said(caplog)
    assert len(said) == 1 and '\n' not in said[0] and len(said[0]) < 300, said
    assert said[0].startswith('simharness: TensorFlow runs ops on 4 threads')
    assert 'tf.config.threading' in said[0] and 'worker processes in the last bits' in said[0]


def test_tf_started_after_import_simharness_is_pinned_through_its_environment(
    determinism, monkeypatch, caplog
):
    """TF's default count (0) at a started TF is the variable's, set at import simharness."""
    monkeypatch.delitem(sys.modules, 'tensorflow', raising=False)
    determinism.configure_threads()
    assert os.environ[determinism.THREADS_ENV] == str(INTRA_OP_THREADS)
    fake = _FakeThreadingTF(configured=0, initialized=True)
    monkeypatch.setitem(sys.modules, 'tensorflow', fake)
    monkeypatch.setattr(os, 'sched_getaffinity', lambda pid: {0, 1, 2, 3}, raising=False)
    assert determinism.pin_tensorflow_threads() is True and fake.sets == []
    assert not _said(caplog)
    monkeypatch.setenv(determinism.THREADS_ENV, '3')  # the user's own count is kept
    monkeypatch.delitem(sys.modules, 'tensorflow')
    determinism.configure_threads()
    assert os.environ[determinism.THREADS_ENV] == '3'
    monkeypatch.setitem(sys.modules, 'tensorflow', fake)
    with caplog.at_level('WARNING', logger='simharness'):
        assert determinism.pin_tensorflow_threads() is False
    assert [
        m
        for m in _said(caplog)
        if 'on 3 threads' in m and 'set TF_NUM_INTRAOP_THREADS=1 or unset it' in m
    ]


def test_tf_started_before_import_simharness_is_seen_and_said(determinism, monkeypatch, caplog):
    """A TF whose first op ran before import simharness: the variable set at the import is
    not its count (it read none: one thread per core); the line says to import simharness
    first."""
    fake = _FakeThreadingTF(configured=0, initialized=True)
    monkeypatch.setitem(sys.modules, 'tensorflow', fake)
    monkeypatch.setattr(os, 'sched_getaffinity', lambda pid: {0, 1}, raising=False)
    determinism.configure_threads()  # import simharness
    assert os.environ[determinism.THREADS_ENV] == '1' and fake.sets == []
    with caplog.at_level('WARNING', logger='simharness'):
        assert determinism.pin_tensorflow_threads() is False
    said = _said(caplog)
    assert len(said) == 1 and 'on 2 threads' in said[0], said
    assert 'import simharness before any TensorFlow op' in said[0]


def test_tf_loaded_not_started_before_import_simharness_is_pinned(determinism, monkeypatch, caplog):
    """``import tensorflow`` (no op yet), then import simharness: pinned, nothing said."""
    fake = _FakeThreadingTF(configured=0)
    monkeypatch.setitem(sys.modules, 'tensorflow', fake)
    monkeypatch.setattr(os, 'sched_getaffinity', lambda pid: {0, 1, 2, 3}, raising=False)
    determinism.configure_threads()
    assert determinism._STARTED_WITH is None  # pylint: disable=protected-access
    assert determinism.pin_tensorflow_threads() is True
    assert fake.configured == INTRA_OP_THREADS and not _said(caplog)


# -- apply_placement / configure_tensorflow (fake TF, no real one) ---------------------


class _FakeTF(types.ModuleType):
    """Records the configuration calls a worker makes."""

    def __init__(self, gpus=(), initialized=False):
        super().__init__('tensorflow')
        self.calls = []

        def record(name):
            def fn(*args):
                if initialized:
                    raise RuntimeError('cannot be modified after initialization')
                self.calls.append((name,) + args)

            return fn

        self.config = types.SimpleNamespace(
            threading=types.SimpleNamespace(
                set_intra_op_parallelism_threads=record('intra'),
                set_inter_op_parallelism_threads=record('inter'),
            ),
            experimental=types.SimpleNamespace(set_memory_growth=record('growth')),
            list_physical_devices=lambda kind: list(gpus) if kind == 'GPU' else [],
        )


def test_configure_tensorflow_cpu(monkeypatch):
    fake = _FakeTF(gpus=['GPU:0'])
    monkeypatch.setitem(sys.modules, 'tensorflow', fake)
    configure_tensorflow(plan_workers(2, [0, 1, 2, 3])[1])
    assert fake.calls == [('intra', INTRA_OP_THREADS), ('inter', 1)]


def test_configure_tensorflow_gpu_sets_memory_growth(monkeypatch):
    fake = _FakeTF(gpus=['GPU:0'])
    monkeypatch.setitem(sys.modules, 'tensorflow', fake)
    configure_tensorflow(plan_workers(None, [0, 1], gpus=[1], workers_per_gpu=2)[0])
    assert fake.calls == [('intra', 1), ('inter', 1), ('growth', 'GPU:0', True)]


def test_configure_tensorflow_too_late(monkeypatch):
    monkeypatch.setitem(sys.modules, 'tensorflow', _FakeTF(initialized=True))
    with pytest.raises(WorkerStartError, match='before the first TF op') as info:
        configure_tensorflow(plan_workers(1, [0])[0])
    assert info.value.worker_id == 0


@pytest.fixture
def restore_affinity():
    if not hasattr(os, 'sched_getaffinity'):
        pytest.skip('no sched_setaffinity')
    before = os.sched_getaffinity(0)
    policy = os.sched_getscheduler(0) if hasattr(os, 'sched_getscheduler') else None
    yield sorted(before)
    os.sched_setaffinity(0, before)
    if policy is not None:
        os.sched_setscheduler(0, policy, os.sched_param(0))


def test_apply_placement_pins_and_sets_env(monkeypatch, restore_affinity):
    cpus = restore_affinity
    monkeypatch.setenv('CUDA_VISIBLE_DEVICES', '7')  # restored after the test
    monkeypatch.setenv('TF_FORCE_GPU_ALLOW_GROWTH', 'false')
    fake = _FakeTF()
    monkeypatch.setitem(sys.modules, 'tensorflow', fake)
    placement = WorkerPlacement(
        0, (cpus[-1],), 0, 1, 1, {'CUDA_VISIBLE_DEVICES': '0', 'TF_FORCE_GPU_ALLOW_GROWTH': 'true'}
    )
    apply_placement(placement)
    assert os.sched_getaffinity(0) == {cpus[-1]}
    if hasattr(os, 'SCHED_BATCH'):  # Linux: a woken worker does not preempt the driver
        assert os.sched_getscheduler(0) == os.SCHED_BATCH
    assert os.environ['CUDA_VISIBLE_DEVICES'] == '0'
    assert os.environ['TF_FORCE_GPU_ALLOW_GROWTH'] == 'true'
    assert ('intra', 1) in fake.calls


def test_apply_placement_without_tf(monkeypatch, restore_affinity):
    monkeypatch.setenv('CUDA_VISIBLE_DEVICES', '7')
    monkeypatch.setitem(sys.modules, 'tensorflow', None)  # any import would fail
    apply_placement(plan_workers(1, restore_affinity)[0], configure_tf=False)
    assert os.environ['CUDA_VISIBLE_DEVICES'] == ''


def test_apply_placement_bad_cpu(restore_affinity):
    bad = WorkerPlacement(0, (max(restore_affinity) + 4096,), None, 1, 1)
    with pytest.raises(SimharnessValueError, match='cannot pin'):
        apply_placement(bad, configure_tf=False)


# -- resources.detect_gpus -----------------------------------------------------------


@pytest.mark.parametrize(
    'value, expected',
    [
        ('', []),
        ('-1', []),
        ('0', [0]),
        ('0,1', [0, 1]),
        (' 2 , 0 ', [2, 0]),
        ('1,-1,2', [1]),
        ('GPU-8b0c1d2e', []),
        ('0,0,1', [0, 1]),
        ('NoDevFiles', []),
    ],
)
def test_parse_cuda_visible_devices(value, expected):
    assert resources.parse_cuda_visible_devices(value) == expected


def test_parse_nvidia_smi_list():
    text = (
        'GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-aaaa)\n'
        '  MIG 1g.5gb     Device  0: (UUID: MIG-bbbb)\n'
        'GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-cccc)\n'
    )
    assert resources.parse_nvidia_smi_list(text) == [0, 1]
    assert resources.parse_nvidia_smi_list('No devices were found\n') == []


def _no_subprocess(*args, **kwargs):
    raise AssertionError('nvidia-smi must not run')


def test_detect_gpus_prefers_cuda_visible_devices(monkeypatch):
    monkeypatch.setattr(resources.subprocess, 'run', _no_subprocess)
    monkeypatch.setenv('CUDA_VISIBLE_DEVICES', '1,3')
    assert resources.detect_gpus() == [1, 3]
    monkeypatch.setenv('CUDA_VISIBLE_DEVICES', '')
    assert resources.detect_gpus() == []


def test_detect_gpus_without_nvidia_smi(monkeypatch, tmp_path):
    monkeypatch.delenv('CUDA_VISIBLE_DEVICES', raising=False)
    monkeypatch.setattr(resources.shutil, 'which', lambda name: None)
    monkeypatch.setattr(resources, 'PROC_NVIDIA_GPUS', str(tmp_path / 'absent'))
    monkeypatch.setattr(resources.subprocess, 'run', _no_subprocess)
    assert resources.detect_gpus() == []


@pytest.mark.parametrize(
    'outcome, expected',
    [
        (
            subprocess.CompletedProcess([], 0, 'GPU 0: X (UUID: a)\nGPU 1: X (UUID: b)\n', ''),
            [0, 1],
        ),
        (subprocess.CompletedProcess([], 9, '', 'NVIDIA-SMI has failed'), []),
        (subprocess.TimeoutExpired('nvidia-smi', 5), []),
        (PermissionError('denied'), []),
    ],
)
def test_detect_gpus_with_nvidia_smi(monkeypatch, outcome, expected):
    seen = {}

    def fake_run(cmd, **kwargs):
        seen.update(cmd=cmd, **kwargs)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    monkeypatch.delenv('CUDA_VISIBLE_DEVICES', raising=False)
    monkeypatch.setattr(resources.shutil, 'which', lambda name: '/usr/bin/nvidia-smi')
    monkeypatch.setattr(resources.subprocess, 'run', fake_run)
    assert resources.detect_gpus() == expected
    assert seen['cmd'] == ['/usr/bin/nvidia-smi', '-L'] and seen['timeout'] == 5.0


def test_detect_gpus_imports_no_tensorflow(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, 'tensorflow', None)  # importing it would fail
    monkeypatch.setattr(resources.shutil, 'which', lambda name: None)
    monkeypatch.setattr(resources, 'PROC_NVIDIA_GPUS', str(tmp_path / 'absent'))
    monkeypatch.delenv('CUDA_VISIBLE_DEVICES', raising=False)
    assert resources.detect_gpus() == []
    assert pinning.parse_devices('cpu') == []


# -- resources.discover_gpus: what was checked -------------------------------------------


def test_discover_gpus_says_what_it_checked(monkeypatch, tmp_path):
    monkeypatch.setattr(resources.subprocess, 'run', _no_subprocess)
    monkeypatch.setenv('CUDA_VISIBLE_DEVICES', '2,3')
    assert resources.discover_gpus() == resources.GpuInventory((2, 3), "CUDA_VISIBLE_DEVICES='2,3'")
    monkeypatch.delenv('CUDA_VISIBLE_DEVICES')
    monkeypatch.setattr(resources.shutil, 'which', lambda name: None)
    monkeypatch.setattr(resources, 'PROC_NVIDIA_GPUS', str(tmp_path / 'absent'))
    inv = resources.discover_gpus()
    assert inv.ids == () and inv.checked == (
        f'CUDA_VISIBLE_DEVICES (unset), nvidia-smi (not on PATH), {tmp_path / "absent"} (absent)'
    )


def test_discover_gpus_counts_proc_entries_without_nvidia_smi(monkeypatch, tmp_path):
    for bus in ('0000:3b:00.0', '0000:af:00.0'):
        (tmp_path / bus).mkdir()
    monkeypatch.delenv('CUDA_VISIBLE_DEVICES', raising=False)
    monkeypatch.setattr(resources.shutil, 'which', lambda name: None)
    monkeypatch.setattr(resources.subprocess, 'run', _no_subprocess)
    monkeypatch.setattr(resources, 'PROC_NVIDIA_GPUS', str(tmp_path))
    assert resources.discover_gpus().ids == (0, 1)
    assert resources.detect_gpus() == [0, 1]


def test_discover_gpus_reports_a_failing_nvidia_smi(monkeypatch):
    monkeypatch.delenv('CUDA_VISIBLE_DEVICES', raising=False)
    monkeypatch.setattr(resources.shutil, 'which', lambda name: '/usr/bin/nvidia-smi')
    monkeypatch.setattr(
        resources.subprocess,
        'run',
        lambda cmd, **kw: subprocess.CompletedProcess(
            cmd, 9, '', 'NVIDIA-SMI has failed because it could not talk to the driver\n'
        ),
    )
    inv = resources.discover_gpus()
    assert inv.ids == () and 'nvidia-smi -L (exit 9: NVIDIA-SMI has failed' in inv.checked


# -- check_gpus_exist / check_tf_device (fake discovery) ---------------------------------

NO_GPU = resources.GpuInventory((), 'CUDA_VISIBLE_DEVICES (unset), nvidia-smi (not on PATH)')
TWO_GPUS = resources.GpuInventory((0, 1), 'CUDA_VISIBLE_DEVICES (unset), nvidia-smi -L')


@pytest.mark.parametrize(
    'devices, inventory',
    [
        ('cpu', NO_GPU),
        (None, NO_GPU),
        ([], NO_GPU),
        ('cuda:1', TWO_GPUS),
        ([1, 'gpu:0'], TWO_GPUS),
    ],
)
def test_check_gpus_exist_passes(devices, inventory):
    pinning.check_gpus_exist(devices, parse_devices(devices) or (), inventory)


@pytest.mark.parametrize(
    'devices, inventory, missing, fragments',
    [
        (
            'cuda:7',
            NO_GPU,
            (7,),
            [
                "devices='cuda:7': this machine has no GPU 7 (found: none; checked "
                'CUDA_VISIBLE_DEVICES (unset), nvidia-smi (not on PATH))'
            ],
        ),
        (
            [0, 2, 3],
            TWO_GPUS,
            (2, 3),
            ['devices=[0, 2, 3]', 'no GPU 2, 3 (found: 0, 1;', 'nvidia-smi -L'],
        ),
        (0, NO_GPU, (0,), ['devices=0', 'no GPU 0']),
    ],
)
def test_check_gpus_exist_names_the_device_and_what_was_found(
    devices, inventory, missing, fragments
):
    with pytest.raises(DeviceNotFoundError) as e:
        pinning.check_gpus_exist(devices, parse_devices(devices), inventory)
    assert isinstance(e.value, SimharnessValueError)
    for fragment in fragments:
        assert fragment in str(e.value)
    assert (e.value.requested, e.value.missing, e.value.found) == (devices, missing, inventory.ids)
    assert pickle.loads(pickle.dumps(e.value)).missing == missing


def test_check_gpus_exist_discovers_when_not_told(monkeypatch):
    monkeypatch.setattr(resources, 'discover_gpus', lambda: NO_GPU)
    with pytest.raises(DeviceNotFoundError, match='stack.devices=.cuda:7.: this machine has no'):
        pinning.check_gpus_exist('cuda:7', [7], name='stack.devices')


def test_check_tf_device(monkeypatch):
    monkeypatch.setattr(resources, 'discover_gpus', lambda: pytest.fail('must not discover'))
    assert pinning.check_tf_device('device', None) is None
    assert pinning.check_tf_device('device', '/CPU:0') == '/CPU:0'
    # A form parse_devices does not know is left to TensorFlow.
    assert pinning.check_tf_device('device', '/job:a/device:CPU:0') == '/job:a/device:CPU:0'
    assert pinning.check_tf_device('device', '/GPU:1', TWO_GPUS) == '/GPU:1'
    with pytest.raises(
        DeviceNotFoundError,
        match=r"device='/GPU:2': this process has no GPU 2 "
        r'\(it sees 2 GPUs; checked',
    ):
        pinning.check_tf_device('device', '/GPU:2', TWO_GPUS)
    with pytest.raises(DeviceNotFoundError, match='sees 0 GPUs'):
        pinning.check_tf_device('device', 'gpu:0', NO_GPU)
    with pytest.raises(
        SimharnessTypeError,
        match='device must be None or a TensorFlow device name .*got 0 of type int',
    ):
        pinning.check_tf_device('device', 0)
