"""A normal run prints no TensorFlow C++ start-up noise, in the driver or the workers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from simharness.tfquiet import NOISE, quiet_stderr

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / 'integration'))
from experiment_helpers import TINY  # noqa: E402


def test_quiet_stderr_drops_noise_and_keeps_the_rest(capfd):
    with quiet_stderr():
        os.write(2, b'I0000 00:00:1 12 port.cc:153] oneDNN custom operations are on.\n')
        os.write(
            2, b'E0000 00:00:1 12 cuda_platform.cc:52] failed call to cuInit: UNKNOWN ERROR (303)\n'
        )
        os.write(2, b'a real error\n')
    assert capfd.readouterr().err == 'a real error\n'


@pytest.mark.process
def test_a_cli_run_on_worker_processes_prints_no_tensorflow_noise(tmp_path):
    from simharness.experiments.config import dumps_toml

    cfg = tmp_path / 'exp.toml'
    cfg.write_text(
        dumps_toml({**TINY, 'stack': {'kind': 'process', 'num_workers': 2, 'cpu_affinity': False}}),
        encoding='utf-8',
    )
    env = {k: v for k, v in os.environ.items() if k != 'TF_CPP_MIN_LOG_LEVEL'}
    done = subprocess.run(
        [
            sys.executable,
            '-m',
            'simharness.cli',
            'run',
            str(cfg),
            '--results',
            str(tmp_path / 'r'),
            '--no-progress',
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert not [line for line in done.stderr.splitlines() if NOISE.search(line)], done.stderr
    assert 'I0000' not in done.stderr and 'E0000' not in done.stderr
    assert done.stderr == ''  # --no-progress: not even the per-round lines
