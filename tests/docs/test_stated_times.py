"""The times and results configs/quickstart.toml states hold on this machine.

Its comment says, measured on the shared 2-core development machine: final test
accuracy 96.9 %, 16-21 s from the command to its last line (55 s with other jobs
loading the machine). This runs the command as the README gives it and fails when the
accuracy differs, or when the run takes more than MAX_WALL_S: the stated 21 s with the
margin a shared machine needs (the loaded run took 55 s). A slower run than that is a
regression or a claim to remeasure, in the config's comment and here.
"""

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
CONFIG = ROOT / 'configs' / 'quickstart.toml'
STATED_WALL_S = 21.0
MAX_WALL_S = 90.0


def test_the_config_states_what_this_test_checks():
    comment = CONFIG.read_text()
    assert 'final test accuracy 96.9 %' in comment
    assert f'16-{STATED_WALL_S:g} s from the command' in comment, 'the stated time changed'
    assert re.search(rf'above {MAX_WALL_S:g} s', comment), 'the stated margin changed'
    assert 'tests/docs/test_stated_times.py' in comment


@pytest.mark.slow
def test_quickstart_holds_its_stated_accuracy_and_time(tmp_path):
    cli = shutil.which('simharness') or str(pathlib.Path(sys.executable).with_name('simharness'))
    env = {k: v for k, v in os.environ.items() if not k.startswith('PYTEST_')}
    start = time.monotonic()
    done = subprocess.run(
        [cli, 'run', str(CONFIG), '--results', str(tmp_path), '--no-progress'],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    wall = time.monotonic() - start
    assert done.returncode == 0, (
        f'exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}'
    )
    summary = json.loads((tmp_path / 'quickstart' / 'default' / 'summary.json').read_text())
    assert summary['rounds_completed'] == 100
    assert round(summary['final_accuracy'] * 100, 1) == 96.9, summary['final_accuracy']
    assert wall <= MAX_WALL_S, (
        f'configs/quickstart.toml says 16-21 s (55 s on a loaded machine); this run took '
        f'{wall:.1f} s (first round {summary["first_round_seconds"]:.2f} s, median round '
        f'{summary["median_round_seconds"]:.3f} s, rounds {summary["total_seconds"]:.1f} s)'
    )
