"""The front page (docs/index.md) proves what it says.

(a) Every number of its "Measured speed" section, and of the README's, is one that
    docs/benchmarks.md states (none is typed from memory; each names its section there).
(b) Its TFF program (docs/snippets/tff_program.py, included into the page) runs as a
    user runs it and prints one loss per round.
(c) The plot is drawn from docs/benchmarks.md's table by docs/assets/plot_round_times.py.
"""

import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = ROOT / 'docs'

_NUMBER = re.compile(r'(?<![\w.])(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:x\b)?')


def section(text: str, heading: str) -> str:
    start = text.index(f'\n## {heading}\n')
    end = text.find('\n## ', start + 1)
    return text[start : end if end > 0 else None]


def numbers(text: str) -> list:
    text = re.sub(r'\]\([^)]*\)', ']', text)  # link targets: anchors hold dates
    return [n for n in _NUMBER.findall(text) if n not in {'2', '10', '50'}]


@pytest.mark.parametrize('page', ['docs/index.md', 'README.md'])
def test_front_page_numbers_are_in_the_benchmark_results(page):
    found = numbers(section((ROOT / page).read_text(), 'Measured speed'))
    results = (DOCS / 'benchmarks.md').read_text()
    assert len(found) >= 12, found
    invented = [n for n in found if n not in results]
    assert not invented, f'numbers in {page} that docs/benchmarks.md does not state: {invented}'


def test_number_reader_finds_table_cells():
    assert numbers(
        '| 10, fresh | 1,296 | 51.6 (5.3x faster) | [s](b.md#x-2026-11-29) 4.64-4.95'
    ) == ['1,296', '51.6', '5.3x', '4.64', '4.95']


def test_plot_reads_the_table_it_draws():
    sys.path.insert(0, str(DOCS / 'assets'))
    try:
        import plot_round_times
    finally:
        sys.path.remove(str(DOCS / 'assets'))
    rows = plot_round_times.read_table((DOCS / 'benchmarks.md').read_text())
    assert len(rows) == 4, rows
    assert (DOCS / 'assets' / 'round-times.svg').exists()
    page = (DOCS / 'index.md').read_text()
    for cohort, _, values in rows:
        for ms in values.values():
            assert f'{ms:,.1f}'.removesuffix('.0') in page, (cohort, ms)


@pytest.mark.slow
def test_front_page_tff_program_runs(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith('PYTEST_')}
    done = subprocess.run(
        [sys.executable, str(DOCS / 'snippets' / 'tff_program.py')],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, (
        f'exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}'
    )
    lines = done.stdout.split('\n')
    losses = [line.split() for line in lines if line.strip()]
    assert [int(r) for r, _ in losses] == list(range(5)), done.stdout
    assert float(losses[-1][1]) < float(losses[0][1]), done.stdout
