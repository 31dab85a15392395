"""A sweep's points as Ray tasks on the session's loopback cluster (`run_sweep(...,
ray_address=...)`, `simharness sweep --ray ADDRESS`): the bits of a local sweep, a node
killed mid-point costs that point a run elsewhere, a second sweep skips every point, and
nothing of the killed node is left."""

from __future__ import annotations

import threading
import time

import psutil
import pytest

from integration.experiment_helpers import TINY, make_config, math_only, read_json, read_metrics
from simharness.experiments.runner import run_sweep
from stacks import have_ray  # tests/stacks.py

pytestmark = [
    pytest.mark.ray,
    pytest.mark.skipif(
        not have_ray(), reason='Ray is not installed (pip install "simharness[ray]")'
    ),
]


@pytest.mark.slow
def test_a_sweep_on_ray_gives_the_local_bits_and_outlives_a_killed_node(ray_stack, tmp_path):
    """4 points (1 CPU each) on the two session nodes (one free CPU each) and a third node
    added here, killed (SIGKILL to it and its workers) once a point has started there:
    Ray runs that point again on a node alive, every point completes with the metrics of a
    sequential local sweep and its files in this results root; a second sweep skips them."""
    cluster = ray_stack.cluster
    config = make_config(
        TINY,
        name='raysw',
        training={'rounds': 4, 'eval_every': 2, 'checkpoint_every': 2},
        sweep={'grid': {'training.seed': [0, 1, 2, 3]}},
    )
    local = run_sweep(config, tmp_path / 'local', progress=False)
    scratch = tmp_path / 'node3'  # where the added node's tasks keep their run directories
    scratch.mkdir()
    k = cluster.add_node(env={'TMPDIR': str(scratch)})
    killed, victims = [], []

    def kill_once_a_point_runs_there() -> None:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not killed:
            for run_dir in scratch.glob(f'simharness-sweep-{cluster.ips[k]}-*/raysw/*'):
                victims.extend(cluster.kill_node(k))
                killed.append(run_dir.name)
                return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_once_a_point_runs_there, daemon=True)
    killer.start()
    lines = []
    try:
        on_ray = run_sweep(
            config,
            tmp_path / 'ray',
            progress=False,
            log=lines.append,
            ray_address=cluster.address,
        )
    finally:
        killed.append(None)  # stops the killer if it has not struck
        killer.join(10)
    assert killed[0] is not None, f'no point ran on the added node: {lines}'
    # Killed mid-point: its run directory there was left as the node died, unfinished.
    (left,) = scratch.glob(f'simharness-sweep-{cluster.ips[k]}-*/raysw/{killed[0]}')
    summary = left / 'summary.json'
    assert not summary.exists() or read_json(summary)['status'] == 'running'
    assert [r.status for r in on_ray] == ['complete'] * 4, lines
    for a, b in zip(on_ray, local):
        assert a.run_id == b.run_id
        assert math_only(read_metrics(a.run_dir)) == math_only(read_metrics(b.run_dir))
        assert (a.run_dir / 'config.toml').read_text() == (b.run_dir / 'config.toml').read_text()
        assert sorted(p.name for p in (a.run_dir / 'checkpoints').iterdir()) == sorted(
            p.name for p in (b.run_dir / 'checkpoints').iterdir()
        )
    again = run_sweep(config, tmp_path / 'ray', progress=False, ray_address=cluster.address)
    assert [r.skipped for r in again] == [True] * 4
    deadline = time.monotonic() + 10
    while _alive(victims) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _alive(victims)  # the killed node's processes (its raylet, its workers)


def _alive(pids):
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.Error:
            pass
    return out
