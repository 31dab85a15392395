"""The built site speaks to users: no tracker reference ("issue 25", "issues 24 and 25",
"(issue 28, items 1, 2, 4, 5)") anywhere in what a reader sees.

The site is built once (`mkdocs build`, the project's mkdocs.yml, strict as configured)
into a temporary folder; every page's visible text is checked: headings, navigation,
prose, tables and code blocks alike, and the `<title>`. Scripts, styles and attribute
values (links, ids) are not text a reader sees and are left out. A failure names the
built page, the source it comes from and the text around each reference.
"""

import html
import html.parser
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

# "issue 25", "Issue #25", "issues 24 and 25", "issue 26's note".
TRACKER = re.compile(r'\bissues?\s*#?\s*\d+', re.I)

# Pages whose source another change owns; each is expected to pass once its source
# is rewritten (the test then reports XPASS: remove the entry).
PENDING: dict = {}


class _VisibleText(html.parser.HTMLParser):
    """The text of an HTML page a reader sees: no <script>, <style> or <template>."""

    _HIDDEN = {'script', 'style', 'template', 'noscript'}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self._skip = 0
        self.parts = []

    def handle_starttag(self, tag, attrs):
        if tag in self._HIDDEN:
            self._skip += 1

    def handle_endtag(self, tag):
        if tag in self._HIDDEN and self._skip:
            self._skip -= 1

    def handle_data(self, data):
        if not self._skip:
            self.parts.append(data)


def visible_text(page_html: str) -> str:
    parser = _VisibleText()
    parser.feed(page_html)
    parser.close()
    # Syntax highlighting splits a code line into spans: join without separators,
    # then fold whitespace so that a reference split over lines is still one match.
    return re.sub(r'\s+', ' ', html.unescape(''.join(parser.parts)))


def tracker_references(page_html: str) -> list:
    text = visible_text(page_html)
    return [text[max(0, m.start() - 60) : m.end() + 40].strip() for m in TRACKER.finditer(text)]


def _source(page: str) -> str:
    """The markdown a built page comes from (best effort, for the message)."""
    stem = page[: -len('/index.html')] if page.endswith('/index.html') else page[: -len('.html')]
    for candidate in (
        f'docs/{stem}.md',
        f'docs/{stem}/index.md',
        'docs/index.md' if page == 'index.html' else '',
    ):
        if candidate and (ROOT / candidate).exists():
            return candidate
    return '(generated)'


@pytest.fixture(scope='module')
def site(tmp_path_factory):
    pytest.importorskip('mkdocs')
    out = tmp_path_factory.mktemp('site')
    done = subprocess.run(
        [sys.executable, '-m', 'mkdocs', 'build', '--quiet', '--site-dir', str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, 'NO_MKDOCS_2_WARNING': '1'},
    )
    assert done.returncode == 0, (
        f'mkdocs build failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}'
    )
    return out


def _pages(site):
    return sorted(str(p.relative_to(site)) for p in site.rglob('*.html'))


@pytest.mark.slow
def test_no_tracker_reference_in_the_built_site(site):
    pages = _pages(site)
    assert 'index.html' in pages and len(pages) > 10, pages
    bad = []
    for page in pages:
        if page in PENDING:
            continue
        for snippet in tracker_references((site / page).read_text(errors='replace')):
            bad.append(f'{page} (from {_source(page)}): ...{snippet}...')
    assert not bad, 'tracker references in the built site:\n' + '\n'.join(bad)


@pytest.mark.slow
@pytest.mark.parametrize('page', sorted(PENDING))
def test_pending_page(site, page):
    if not (site / page).exists():
        pytest.skip(f'{page} is no longer built')
    refs = tracker_references((site / page).read_text(errors='replace'))
    if refs:
        pytest.xfail(f'{PENDING[page]}: {refs[:3]}')


def test_checker_reads_visible_text_only():
    page = (
        '<html><head><title>Runner (issue 25) - simharness</title>'
        '<script>var x = "issue 1";</script><style>/* issue 2 */</style></head><body>'
        '<nav><a href="/issue-3/" title="x">Stacks</a></nav>'
        '<h1 id="issue-4">Module map (issue 28, items 1, 2)</h1>'
        "<p>see Issue&nbsp;#26's note; <code><span>issues</span> <span>24</span></code></p>"
        '</body></html>'
    )
    found = tracker_references(page)
    assert len(found) == 4, found
    assert 'Runner (issue 25)' in found[0]
    assert 'Module map (issue 28' in found[1]
    assert '#26' in found[2] and 'issues 24' in found[3]
    assert not tracker_references('<p>an issue with 0 clients; issues, 3 of them</p>')
