"""The documentation cannot rot: every tutorial script runs, every relative link resolves.

(a) Each `docs/tutorials/*.py` runs as a user runs it (`python <script>`, in a
    temporary directory where it writes); none is skipped. Each takes seconds.
(b) Every relative link and image in `docs/**/*.md` and `README.md` points to
    a file that exists, and a `#fragment` to a heading of that page (anchors
    as MkDocs' toc extension makes them).
`mkdocs build --strict` (.ci/run) checks the site itself.
"""

import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = ROOT / 'docs'
TUTORIALS = sorted((DOCS / 'tutorials').glob('*.py'))
#: Tutorials another test runs and checks more closely (run once, there):
#: sweep_report.py in test_tutorial_output.py (exit status, and every path it prints).
RUN_ELSEWHERE = {'sweep_report.py'}
PAGES = sorted(DOCS.rglob('*.md')) + [ROOT / 'README.md']

_LINK = re.compile(r'!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^()\s]+)(?:\s+"[^"]*")?\)')
_FENCE = re.compile(r'^(```|~~~).*?^\1', re.M | re.S)
_CODE = re.compile(r'`[^`\n]*`')


def test_there_are_tutorials():
    assert len(TUTORIALS) >= 4, TUTORIALS
    assert RUN_ELSEWHERE <= {t.name for t in TUTORIALS}, RUN_ELSEWHERE


@pytest.mark.slow
@pytest.mark.parametrize(
    'script', [t for t in TUTORIALS if t.name not in RUN_ELSEWHERE], ids=lambda p: p.name
)
def test_tutorial_runs(script, tmp_path):
    # As a user runs it: not as a pytest-xdist worker (a tutorial that runs pytest itself
    # would take PYTEST_XDIST_WORKER for its own and pytest-benchmark would time nothing).
    env = {k: v for k, v in os.environ.items() if not k.startswith('PYTEST_')}
    env['CI'] = '1'
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, (
        f'{script.name} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}'
    )


def _anchors(page: pathlib.Path) -> set:
    text = _FENCE.sub('', page.read_text())
    out = set()
    for line in text.splitlines():
        m = re.match(r'#{1,6}\s+(.*?)\s*#*\s*$', line)
        if m:
            # MkDocs' toc slugify: lower case, drop what is not a word char, space or hyphen.
            title = re.sub(r'<[^>]+>', '', m.group(1)).replace('`', '')
            slug = re.sub(r'[^\w\s-]', '', title).strip().lower()
            out.add(re.sub(r'[-\s]+', '-', slug))
        for a in re.findall(r'\{:?\s*#([\w-]+)', line) + re.findall(
            r'<a (?:id|name)="([^"]+)"', line
        ):
            out.add(a)
    return out


def _links(page: pathlib.Path):
    text = _CODE.sub('', _FENCE.sub('', page.read_text()))
    for m in _LINK.finditer(text):
        target = m.group(1)
        if re.match(r'^[a-z][a-z0-9+.-]*:', target) or target.startswith('//'):
            continue  # http:, https:, mailto:
        yield target


def _show(path: pathlib.Path) -> str:
    return str(path.relative_to(ROOT)) if ROOT in path.parents else str(path)


def _broken(page: pathlib.Path):
    bad = []
    for target in _links(page):
        path, _, fragment = target.partition('#')
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(f'{target} (no file {_show(dest)})')
        elif fragment and dest.suffix == '.md' and fragment not in _anchors(dest):
            bad.append(f'{target} (no heading #{fragment} in {_show(dest)})')
    return bad


@pytest.mark.parametrize('page', PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    assert not _broken(page), f'{page.relative_to(ROOT)}: broken links: {_broken(page)}'


def test_link_checker_finds_a_broken_link(tmp_path):
    page = tmp_path / 'p.md'
    (tmp_path / 'q.md').write_text('# A `title`, here\n')
    page.write_text(
        '[ok](q.md#a-title-here) [no](missing.md) [frag](q.md#nope) '
        '[web](https://example.org/x.md) `[code](x.md)`\n'
    )
    assert [b.split(' ')[0] for b in _broken(page)] == ['missing.md', 'q.md#nope']
