"""Every time or speed a user page states is a dated measurement that links its benchmark.

A user page (the README, and docs/ but the benchmark pages and the changelog) that says
"0.057 s a round", "about 4 s", "a few seconds", "5.3x faster" or heads a table column
"seconds" must say, in the same paragraph or list item, when it was measured (a date, 2026-11-23) and where the measurement is recorded (a link to
docs/benchmarks.md or docs/benchmarks-history.md): a record of a run on a named machine and
day is not a promise about the reader's machine, and a number with neither cannot be checked
or remeasured. A table counts with the paragraph just before it (where its source is named).

What is not such a claim is listed in ALLOWED, each with its reason: settings (default
timeouts, a test's time limit), times that a test checks itself, version numbers that look
like speeds, a program's output shown as printed. A new stated time fails here until it is
backed by a benchmark section or listed with a reason.
"""

import pathlib
import re

import pytest

DOCS = pathlib.Path(__file__).resolve().parents[2] / 'docs'

#: Pages that hold measurements (each section dated, with its command and machine) or the
#: project's history: the claims of the other pages point here.
RECORDS = {'benchmarks.md', 'benchmarks-history.md', 'changelog.md'}

_NUM = r'(?<![\w.])~?\d[\d,]*(?:\.\d+)?(?:\s?(?:-|–|to)\s?\d[\d,]*(?:\.\d+)?)?'
CLAIM = re.compile(
    _NUM + r'\s?(?:s|ms|us|µs|sec|seconds?|min|minutes?|h|hours?)\b'  # 0.057 s, 16-21 s
    r'|' + _NUM + r'x(?![\w])'  # 5.3x, (11x)
    r'|' + _NUM + r'\s?%\s(?:faster|slower)'  # 6 % faster
    r'|\b(?:a few|several|some|tens of)\s+(?:milli)?(?:seconds|minutes)\b'  # several seconds
    r'|^\|.*\|\s*(?:s|ms|seconds|milliseconds)\s*\|\s*$',  # | seconds |
    re.I | re.M,
)
LINK = re.compile(r'\]\((?:\.\./)*(?:docs/)?benchmarks(?:-history)?\.md(?:#[^)]*)?\)')
DATE = re.compile(r'\b20\d\d-\d\d-\d\d\b')

#: (page, text of the line that holds the claim, reason): claims that are not measurements.
ALLOWED = [
    (
        'guide/remote.md',
        '`--session-timeout`, default 60 s',
        'a default timeout: a setting, not a measurement',
    ),
    (
        'guide/remote.md',
        '`liveness_timeout` (default 20 s',
        'a default timeout: a setting, not a measurement',
    ),
    (
        'tutorials/index.md',
        'fails a tutorial that runs past 240 s',
        "a test's time limit: a setting of tests/docs/test_site.py",
    ),
    (
        'getting-started.md',
        'those that took 1.5 s or more in a full run',
        "the slow tier's thresholds (tests/slow_tier.py): settings",
    ),
    (
        'getting-started.md',
        'machine or 4 s in a quick one',
        "the slow tier's thresholds (tests/slow_tier.py): settings",
    ),
    (
        'getting-started.md',
        'outside the slow tier that took 4 s or more',
        "the slow tier's thresholds (tests/slow_tier.py): settings",
    ),
    (
        'guide/experiments.md',
        'final test accuracy 0.9694; 16-21 s',
        "the quickstart's stated time: tests/docs/test_stated_times.py runs it and fails past "
        'its stated margin',
    ),
    (
        'guide/experiments.md',
        'wall in two runs on 2026-11-29 (median round 0.032-0.035 s',
        'the same quickstart run (tests/docs/test_stated_times.py)',
    ),
    (
        'guide/experiments.md',
        's), 55 s with other jobs loading the machine',
        'the same quickstart run (tests/docs/test_stated_times.py)',
    ),
    ('tff/core.md', '(TFF 0.2x-0.44)', 'TFF versions 0.2x to 0.44, not a speed'),
    (
        'guide/research-workflow.md',
        'keras_fedadam_dp/default: ',
        "a run's output shown as the CLI prints it (dated in the paragraph before it): the "
        'times are part of the printed lines',
    ),
]


def _user_pages():
    return sorted(p for p in DOCS.rglob('*.md') if p.relative_to(DOCS).as_posix() not in RECORDS)


def test_the_readme_too():
    """The README's top states measured numbers too: the same rule."""
    readme = DOCS.parent / 'README.md'
    bad = unbacked_claims(readme, DOCS.parent)
    assert not bad, '\n'.join(bad)


_ITEM = re.compile(r'\s*(?:[-*+]|\d+\.)\s')


def _blocks(text: str):
    """(first line number, lines) of each paragraph, list item, table or code block; a
    table or code block joined to the paragraph or item just before it."""
    blocks, cur, start, fence = [], [], 0, False
    for i, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith('```'):
            fence = not fence
        if not line.strip() and not fence:
            if cur:
                blocks.append((start, cur))
            cur = []
            continue
        if cur and not fence and _ITEM.match(line):  # a list item is a unit of its own
            blocks.append((start, cur))
            cur = []
        if not cur:
            start = i
        cur.append(line)
    if cur:
        blocks.append((start, cur))
    joined = []
    for start, lines in blocks:
        first = lines[0].lstrip()
        if joined and (first.startswith('|') or first.startswith('```')):
            prev_start, prev = joined[-1]
            joined[-1] = (prev_start, prev + lines)
        else:
            joined.append((start, lines))
    return joined


def _allowed(page: str, line: str) -> bool:
    return any(page == p and text in line for p, text, _ in ALLOWED)


def unbacked_claims(page: pathlib.Path, docs: pathlib.Path = DOCS):
    """'page:line: claim in line' for each stated time or speed without a date and a link."""
    rel = page.relative_to(docs).as_posix()
    out = []
    for start, lines in _blocks(page.read_text(encoding='utf-8')):
        block = '\n'.join(lines)
        backed = bool(LINK.search(block) and DATE.search(block))
        for m in CLAIM.finditer(block):  # over the block: a phrase may wrap
            k = block.count('\n', 0, m.start())
            line = lines[k]
            if not backed and not _allowed(rel, line):
                claim = ' '.join(m.group(0).split())
                out.append(f'{rel}:{start + k}: {claim!r} in {line.strip()[:120]!r}')
    return out


@pytest.mark.parametrize('page', _user_pages(), ids=lambda p: p.relative_to(DOCS).as_posix())
def test_every_stated_time_is_dated_and_linked(page):
    bad = unbacked_claims(page)
    assert not bad, (
        'a stated time or speed needs, in its paragraph, the date it was measured '
        'and a link to its section of docs/benchmarks.md or '
        'docs/benchmarks-history.md (or an entry in ALLOWED with a reason):\n' + '\n'.join(bad)
    )


def test_every_allowed_exception_is_still_used():
    """An exception whose text left its page is removed from ALLOWED (no stale allowances)."""
    for page, text, reason in ALLOWED:
        assert reason and text in (DOCS / page).read_text(encoding='utf-8'), (page, text)


def test_the_checker_finds_an_unbacked_claim(tmp_path):
    docs = tmp_path / 'docs'
    docs.mkdir()
    page = docs / 'page.md'
    page.write_text(
        'A round takes 0.05 s.\n\nThe pool starts in a few seconds.\n\n'
        'Measured on 2026-11-23: 0.057 s a round '
        '([benchmarks](benchmarks.md#the-whole-suite-2026-11-23)).\n\n'
        'Linked but undated: 1.3x ([benchmarks](benchmarks.md)).\n\n'
        'Two clients, 28x28x1 images, 100 clients/s, 16 workers.\n\n'
        '- an item measured on 2026-11-23, 3 s ([b](../benchmarks-history.md#x))\n'
        '- its neighbour, 5 ms\n\n'
        'A table measured on 2026-11-29 ([b](benchmarks.md#y)):\n\n'
        '| a | b |\n|---|---|\n| 1 s | 2.5x |\n\n'
        'Undated:\n\n| case | ms |\n|---|---|\n| a | 3 |\n',
        encoding='utf-8',
    )
    bad = unbacked_claims(page, docs)
    assert [b.split(': ', 1)[1].split(' in ')[0] for b in bad] == [
        "'0.05 s'",
        "'a few seconds'",
        "'1.3x'",
        "'5 ms'",
        "'| case | ms |'",
    ], bad
