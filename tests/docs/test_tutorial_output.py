"""What tutorial 3 (docs/tutorials/sweep_report.py) prints is what a user can open.

Run as a user runs it (`python docs/tutorials/sweep_report.py`, no argument, in an
empty folder): every path it prints exists after it ends, inside the folder it names
(`sweep-tutorial/`), and each is printed once: the sweep's lines name the report, the
plots and the tables; `simharness report`'s repeat of them is not shown.
"""

import collections
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / 'docs' / 'tutorials' / 'sweep_report.py'

# "results: DIR", "report:  FILE", "plots:   A, B", "tables:  A, B"
_PATH_LINE = re.compile(r'^(results|report|plots|tables):\s+(.*)$')


def printed_paths(stdout: str) -> list:
    paths = []
    for line in stdout.splitlines():
        m = _PATH_LINE.match(line.strip())
        if m:
            paths += [p.strip() for p in m.group(2).split(',') if p.strip()]
    return paths


def test_printed_paths_reads_the_cli_lines():
    out = (
        '[1/4] run a\nresults: r/x\nreport:  r/x/report.md\n'
        'plots:   r/x/accuracy.png, r/x/loss.png\ntables:  r/x/runs.csv, r/x/rounds.csv\n'
        '# Report: x\n| run | report: no |\n'
    )
    assert printed_paths(out) == [
        'r/x',
        'r/x/report.md',
        'r/x/accuracy.png',
        'r/x/loss.png',
        'r/x/runs.csv',
        'r/x/rounds.csv',
    ]


@pytest.mark.slow
def test_sweep_tutorial_prints_each_path_once_and_it_exists(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith('PYTEST_')}
    env['CI'] = '1'
    done = subprocess.run(
        [sys.executable, str(SCRIPT)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, (
        f'exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}'
    )
    paths = printed_paths(done.stdout)
    kinds = {pathlib.Path(p).suffix for p in paths}
    assert {'.md', '.png', '.csv'} <= kinds, done.stdout[-3000:]
    twice = [p for p, n in collections.Counter(paths).items() if n > 1]
    assert not twice, f'printed more than once: {twice}\n{done.stdout[-3000:]}'
    missing = [p for p in paths if not (tmp_path / p).exists()]
    assert not missing, f'printed but absent after the script ended: {missing}'
    outside = [
        p for p in paths if not (tmp_path / p).resolve().is_relative_to(tmp_path / 'sweep-tutorial')
    ]
    assert not outside, f'outside ./sweep-tutorial: {outside}'
