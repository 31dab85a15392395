"""A Python program that imports simharness prints nothing but its own output.

Each program runs as a subprocess, as a user runs it (a fresh interpreter, no
``TF_CPP_MIN_LOG_LEVEL``), and its stdout and stderr are compared whole: TensorFlow's
C++ start-up lines (``simharness.tfquiet.NOISE``: oneDNN, CUDA probing, ``cuInit ...
(303)``) must not reach the terminal from the driver, the worker pool's forkserver or
its workers, Ray's daemons or its actors, and no warning of ours either.
``SIMHARNESS_LOG_LEVEL=INFO`` shows TensorFlow's lines again (the in-process checks of
`quiet_stderr` are in tests/experiments/test_quiet.py).

A program that imports TensorFlow *before* simharness has seen TensorFlow's import
lines already: its shared libraries write them while they load, before any code of
ours can run and whatever ``TF_CPP_MIN_LOG_LEVEL`` says. What simharness still keeps
out there (the device probe's cuInit line; its own thread warning beyond one line) is
checked too.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from typing import Optional

import pytest

from simharness.runtime.local.lifeline import SHORT_TEMP_DIRS, SOCKET_PATH_MAX
from simharness.tfquiet import NOISE

#: The variables a user's shell would not set (the suite's own settings must not hide noise).
_UNSET = (
    'TF_CPP_MIN_LOG_LEVEL',
    'SIMHARNESS_LOG_LEVEL',
    'TF_NUM_INTRAOP_THREADS',
    'PYTHONWARNINGS',
)

#: A TFF program with its import renamed: a dataset per client, a sequence reduce per
#: client, a federated mean, called twice.
TFF_STYLE = """
import simharness as tff
import tensorflow as tf

@tff.tf_computation(tff.SequenceType(tf.float32))
def total(ds):
    return ds.reduce(0.0, lambda a, b: a + b)

@tff.federated_computation(tff.type_at_clients(tff.SequenceType(tf.float32)))
def mean_total(data):
    return tff.federated_mean(tff.federated_map(total, data))

clients = [tf.data.Dataset.range(n).map(lambda i: tf.cast(i, tf.float32)) for n in (2, 3, 4)]
print('mean total', mean_total(clients))
print('again', mean_total(clients))
"""

#: A program that enters a context and never leaves it: closed by the interpreter's exit
#: (the context's finalizer), then by the generator's end, without a traceback.
NEVER_LEAVES = """
import numpy as np
import simharness as tff
from simharness.stacks import local_executor_factory

@tff.tf_computation(np.float32)
def add_half(x):
    return x + 0.5

entered = tff.execution_context(local_executor_factory())
entered.__enter__()
print('plus half', add_half(1.0))
"""

#: The same kind of program on the process stack: 2 worker processes (forkserver).
PROCESS_STACK = """
import numpy as np
import simharness as tff
from simharness.stacks import process_executor_factory

@tff.tf_computation(np.float32)
def add_half(x):
    return x + 0.5

@tff.federated_computation(tff.type_at_clients(np.float32))
def mean_plus_half(xs):
    return tff.federated_mean(tff.federated_map(add_half, xs))

if __name__ == '__main__':
    factory = process_executor_factory(num_workers=2, cpu_affinity=False)
    with tff.execution_context(factory):
        print('mean', mean_plus_half([1.0, 2.0, 3.0, 4.0]))
        print('workers', len(factory.stats()['workers']))
        from simharness.runtime.local.lifeline import driver_temp_dir
        print('sockets in', driver_temp_dir())
"""

#: The same program on the Ray stack: the factory starts a local Ray (2 CPUs, 2 actors) and
#: shuts it down on close. ``USER_RAY`` instead: the program starts Ray itself.
RAY_STACK = """
import numpy as np
import simharness as tff
from simharness.stacks import ray_executor_factory

@tff.tf_computation(np.float32)
def add_half(x):
    return x + 0.5

@tff.federated_computation(tff.type_at_clients(np.float32))
def mean_plus_half(xs):
    return tff.federated_mean(tff.federated_map(add_half, xs))

if __name__ == '__main__':
    USER_RAY
    factory = ray_executor_factory(num_workers=2, cpu_affinity=False, RAY_INIT_ARGS)
    with factory, tff.execution_context(factory):
        print('mean', mean_plus_half([1.0, 2.0, 3.0, 4.0]))
        print('workers', len(factory.stats()['workers']))
"""

#: ``import tensorflow`` and one op before ``import simharness`` (TF started with its own
#: thread count), then computations from three call sites.
TENSORFLOW_FIRST = """
import tensorflow as tf
x = tf.constant([1.0, 2.0]) * 2.0
import simharness as tff

@tff.tf_computation(tf.float32)
def add_one(x):
    return x + 1.0

@tff.federated_computation(tff.type_at_clients(tf.float32))
def mean_plus_one(xs):
    return tff.federated_mean(tff.federated_map(add_one, xs))

print('a', mean_plus_one([1.0, 2.0]))
print('b', add_one(1.0))
print('c', mean_plus_one([3.0]))
"""


#: TFF's tutorials' order: TensorFlow imported first, no op before ``import simharness``.
TENSORFLOW_IMPORTED_FIRST = """
import tensorflow as tf
import simharness as tff

@tff.tf_computation(tf.float32)
def add_one(x):
    return x + 1.0

print('b', add_one(1.0))
"""


def _run(tmp_path, code: str, **env_extra: Optional[str]) -> subprocess.CompletedProcess:
    script = tmp_path / 'program.py'
    script.write_text(textwrap.dedent(code), encoding='utf-8')
    env = {k: v for k, v in os.environ.items() if k not in _UNSET}
    for key, value in env_extra.items():  # None: the variable is unset, as in a user's shell
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


@pytest.mark.slow
def test_a_tff_style_program_prints_only_its_output(tmp_path):
    done = _run(tmp_path, TFF_STYLE)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ['mean total 3.3333333', 'again 3.3333333'], done.stdout
    assert done.stderr == ''


@pytest.mark.slow
def test_a_program_that_never_leaves_its_context_exits_quietly(tmp_path):
    done = _run(tmp_path, NEVER_LEAVES)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ['plus half 1.5'], done.stdout
    assert done.stderr == ''


@pytest.mark.slow
@pytest.mark.process
def test_a_process_stack_program_prints_only_its_output(tmp_path):
    """The driver, the forkserver and both workers: nothing on stderr, and nothing left in
    the temporary directory (the workers' `tf.vectorized_map` has autograph write files
    there, which a process ending by `os._exit` would never remove).

    TMPDIR is deep (as pytest's, or a batch system's): the forkserver's socket would pass
    the length a Unix socket's path may have there, so its directory is made in /tmp (or
    another short one) instead, and removed at exit."""
    temp = tmp_path / ('deep-' + 'd' * (SOCKET_PATH_MAX - len(str(tmp_path))))
    temp.mkdir()
    done = _run(tmp_path, PROCESS_STACK, TMPDIR=str(temp))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:2] == ['mean 3.0', 'workers 2'], done.stdout
    assert done.stderr == ''
    sockets = lines[2].removeprefix('sockets in ')
    assert os.path.dirname(sockets) in SHORT_TEMP_DIRS, sockets
    assert not os.path.exists(sockets)
    assert sorted(p.name for p in temp.iterdir()) == []


@pytest.mark.slow
def test_a_ray_stack_program_prints_only_its_output(tmp_path):
    """The factory starts Ray: the driver, Ray's daemons and both actors print nothing (Ray's
    notice that it turned token authentication on is dropped, `quiet_ray_start`; the actors'
    output stays in Ray's session logs)."""
    pytest.importorskip('ray')
    code = RAY_STACK.replace('USER_RAY', 'pass').replace(
        'RAY_INIT_ARGS', "ray_init_args={'num_cpus': 2}"
    )
    done = _run(tmp_path, code, RAY_AUTH_MODE=None)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ['mean 3.0', 'workers 2'], done.stdout
    assert done.stderr == ''


@pytest.mark.slow
def test_a_program_that_starts_ray_itself_hears_only_ray(tmp_path):
    """``ray.init`` by the program: Ray's own lines are the program's to set (here
    ``logging_level='ERROR'``), and the actors, whose output then reaches the driver
    (``log_to_driver`` is Ray's default), print nothing."""
    pytest.importorskip('ray')
    code = RAY_STACK.replace(
        'USER_RAY',
        "import ray; ray.init(num_cpus=2, include_dashboard=False, logging_level='ERROR')",
    ).replace('RAY_INIT_ARGS', 'start=True')
    done = _run(tmp_path, code, RAY_AUTH_MODE=None)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ['mean 3.0', 'workers 2'], done.stdout
    assert done.stderr == ''


@pytest.mark.slow
def test_a_program_that_imports_tensorflow_first(tmp_path):
    """Only TensorFlow's own import lines (none on some builds), no cuInit line (the device
    probe is quiet), and the thread-count line at most once, on one line."""
    done = _run(tmp_path, TENSORFLOW_FIRST)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ['a 2.5', 'b 2.0', 'c 4.0'], done.stdout
    ours = [ln for ln in done.stderr.splitlines() if ln.startswith('simharness: ')]
    rest = [ln for ln in done.stderr.splitlines() if not ln.startswith('simharness: ')]
    assert all(NOISE.search(ln) for ln in rest), done.stderr
    # The op before import simharness started TF (its first op: the probe ran then, as in
    # any TF program); nothing after the import adds a line of TF's.
    assert sum('failed call to cuInit' in ln for ln in rest) <= 1, done.stderr
    threads = len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else 1
    if threads > 1:
        assert len(ours) == 1, done.stderr
        assert f'runs ops on {threads} threads' in ours[0]
        assert 'import simharness before any TensorFlow op' in ours[0]
    else:
        assert not ours, done.stderr


@pytest.mark.slow
def test_a_program_that_imports_tensorflow_first_but_runs_no_op_before_simharness(tmp_path):
    """TensorFlow's own import lines only (none on some builds): no cuInit line (``import
    simharness`` reads TF's thread settings, which starts its devices: quietly) and no
    thread-count warning (TF's context had not started)."""
    done = _run(tmp_path, TENSORFLOW_IMPORTED_FIRST)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ['b 2.0'], done.stdout
    lines = done.stderr.splitlines()
    assert all(NOISE.search(ln) for ln in lines), done.stderr
    assert not any('cuInit' in ln or ln.startswith('simharness: ') for ln in lines), done.stderr


@pytest.mark.slow
def test_simharness_log_level_info_shows_tensorflow_lines_again(tmp_path):
    """The opt-in: what TensorFlow writes reaches stderr unfiltered (its start-up lines where
    this build writes them; the program's output unchanged)."""
    loud = _run(tmp_path, TFF_STYLE, SIMHARNESS_LOG_LEVEL='INFO')
    assert loud.returncode == 0, loud.stderr
    assert loud.stdout.splitlines() == ['mean total 3.3333333', 'again 3.3333333']
    if not loud.stderr:
        pytest.skip('this TensorFlow build writes no start-up lines')
    assert [ln for ln in loud.stderr.splitlines() if NOISE.search(ln)], loud.stderr
