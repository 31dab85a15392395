"""A sweep on Ray (`run_sweep(..., ray_address=...)`, `simharness sweep --ray ADDRESS`),
what needs no cluster: an address that does not answer is one line within the connect
timeout with nothing started or written, points on the Ray stack are refused, a point's
files travel as plain bytes. (The sweep on a cluster: tests/ray/test_ray_sweep.py.)"""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path

import psutil
import pytest

from simharness.errors import ConfigError
from simharness.experiments.runner import ray_sweep, run_sweep

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / 'integration'))
from experiment_helpers import make_config  # noqa: E402

SWEEP = """
name = "far"
[data]
dataset = "synthetic"
num_clients = 6
samples_per_client = 10
dim = 5
num_classes = 3
[model]
name = "mlp"
hidden_sizes = [8]
[training]
rounds = 2
clients_per_round = 4
[sweep.grid]
"training.seed" = [0, 1]
"""


def _refused_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]  # closed on return: nothing listens there


def test_cli_an_address_that_refuses_is_one_line_at_once(tmp_path, capsys):
    from simharness import cli

    cfg = tmp_path / 'far.toml'
    cfg.write_text(SWEEP)
    address = f'127.0.0.1:{_refused_port()}'
    children = psutil.Process().children(recursive=True)
    t = time.monotonic()
    rc = cli.main(['sweep', str(cfg), '--results', str(tmp_path / 'r'), '--ray', address])
    err = capsys.readouterr().err
    assert rc == cli.EXIT_USAGE and time.monotonic() - t < 5
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith(f'error: --ray {address}: no Ray cluster answers there'), err
    assert not (tmp_path / 'r').exists()
    assert psutil.Process().children(recursive=True) == children


def test_an_address_that_never_answers_fails_within_the_connect_timeout(tmp_path):
    """A port that takes the connection and says nothing (no Ray behind it): ConfigError
    after `ray_connect_timeout`, before Ray is joined or anything is written."""
    config = make_config(sweep={'grid': {'training.seed': [0, 1]}})
    with socket.socket() as silent:
        silent.bind(('127.0.0.1', 0))
        silent.listen(4)
        address = f'127.0.0.1:{silent.getsockname()[1]}'
        t = time.monotonic()
        with pytest.raises(ConfigError, match=r'no gRPC handshake within 1 s'):
            run_sweep(config, tmp_path, progress=False, ray_address=address, ray_connect_timeout=1)
        assert 0.9 < time.monotonic() - t < 5
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize('address', ['nohost', 'head:port', 'ray://head', 'head:70000'])
def test_a_malformed_address_says_what_it_takes(address):
    with pytest.raises(ConfigError, match=r"expected 'auto', 'host:port'"):
        ray_sweep.check_address(address)


def test_points_on_the_ray_stack_are_refused_and_others_reserve_their_workers():
    with pytest.raises(ConfigError, match='stack.kind = "process"'):
        ray_sweep.task_cpus(make_config(stack={'kind': 'ray', 'num_workers': 2}))
    assert ray_sweep.task_cpus(make_config(stack={'kind': 'process', 'num_workers': 3})) == 3
    assert ray_sweep.task_cpus(make_config(stack={'kind': 'process'})) == 1
    assert ray_sweep.task_cpus(make_config()) == 1  # thread


def test_a_points_files_travel_as_bytes_and_stay_in_its_run_directory(tmp_path):
    src = tmp_path / 'a'
    (src / 'checkpoints').mkdir(parents=True)
    (src / 'summary.json').write_text('{"status": "complete"}')
    (src / 'checkpoints' / 'ckpt-000002.npz').write_bytes(b'\0\1')
    (src / 'run.lock').write_text('')
    files = ray_sweep._read_files(src)  # pylint: disable=protected-access
    assert files == {
        'checkpoints/ckpt-000002.npz': b'\0\1',
        'summary.json': b'{"status": "complete"}',
    }
    ray_sweep._write_files(tmp_path / 'b', files)  # pylint: disable=protected-access
    assert ray_sweep._read_files(tmp_path / 'b') == files  # pylint: disable=protected-access
    for bad in ('../x', '/etc/x'):
        with pytest.raises(ValueError, match='outside its run directory'):
            ray_sweep._write_files(tmp_path / 'c', {bad: b''})  # pylint: disable=protected-access


def test_a_task_gets_and_answers_msgpack_bytes_not_pickled_objects(tmp_path):
    """What Ray carries for a point is bytes: its spec packed (plain values of the config,
    file bytes), and the answer the same way; anything else is refused, naming it."""
    from simharness.experiments.config import config_from_dict

    cfg = make_config()
    spec = {'config': cfg.to_dict(), 'run_id': 'r', 'resume': False, 'files': {'x': b'\0'}}
    payload = ray_sweep._pack(spec)  # pylint: disable=protected-access
    assert isinstance(payload, bytes)
    back = ray_sweep._unpack(payload, tuple(spec), 'a sweep point')  # pylint: disable=protected-access
    assert back['files'] == {'x': b'\0'} and back['run_id'] == 'r'
    assert config_from_dict(back['config']) == cfg
    with pytest.raises(ValueError, match='a sweep point: expected msgpack bytes, got dict'):
        ray_sweep._run_point(spec)  # pylint: disable=protected-access
    with pytest.raises(ValueError, match='expected a map of'):
        ray_sweep._unpack(ray_sweep._pack({'x': 1}), tuple(spec), 'a sweep point')  # pylint: disable=protected-access


def test_points_on_one_node_claim_disjoint_cores(tmp_path):
    """A point pins its thread (and so its workers) to cores no other point of the node
    holds; with too few free it is not pinned; its affinity is restored after."""
    import fcntl
    import os

    cores = sorted(os.sched_getaffinity(0))
    other = os.open(tmp_path / f'{cores[0]}.lock', os.O_CREAT | os.O_RDWR)
    fcntl.flock(other, fcntl.LOCK_EX)  # another point (process) holds the first core
    try:
        with ray_sweep.claimed_cores(1, tmp_path) as a:
            assert a == cores[1:2] and (not a or sorted(os.sched_getaffinity(0)) == a)
        assert sorted(os.sched_getaffinity(0)) == cores
        with ray_sweep.claimed_cores(len(cores), tmp_path) as b:
            assert b == [] and sorted(os.sched_getaffinity(0)) == cores
    finally:
        os.close(other)
    with ray_sweep.claimed_cores(len(cores), tmp_path) as c:  # all free again
        assert c == cores


def test_scratch_directories_of_dead_tasks_are_reaped(tmp_path):
    """A task killed (its node's process gone) leaves its scratch directory; the next task
    on the node removes it, and leaves those of live tasks and the core locks."""
    import os
    import subprocess

    child = subprocess.Popen([sys.executable, '-c', ''])
    child.wait()  # a pid that is gone
    names = [
        f'simharness-sweep-127.0.0.3-{child.pid}-abc123',
        f'simharness-sweep-127.0.0.3-{os.getpid()}-def456',
        'simharness-sweep-cores',
    ]
    for name in names:
        (tmp_path / name / 'x').mkdir(parents=True)
    assert ray_sweep.reap_scratch(tmp_path) == names[:1]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names[1:])


def test_joining_ray_keeps_the_clis_stop_handlers():
    """ray.init installs its own SIGTERM handler (sys.exit); the sweep puts back the one it
    had, so that the CLI's stop (cancel every point, exit 143) still runs."""
    import signal

    def mine(signum, frame):  # pragma: no cover - never called
        pass

    old = signal.signal(signal.SIGTERM, mine)
    try:
        with ray_sweep._signal_handlers_kept():  # pylint: disable=protected-access
            signal.signal(signal.SIGTERM, lambda s, f: None)  # what ray.init does
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, old)
