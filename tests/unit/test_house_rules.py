"""House rules that a reader of the tree should not have to police by hand.

- No module under `simharness/` passes 800 lines unless `pyproject.toml` lists it,
  with a reason, under ``[tool.simharness.long-modules]`` (and a listed module
  that is short again must leave the list).
- In the runtime, the hosts, the worker-seam executors, the stacks and the pytest
  plugin, a function-level import of one of our own modules states its reason
  (a ``reason:`` comment on the import or on the line above): at the top of the
  module otherwise.
"""

from __future__ import annotations

import ast
import pathlib
import sys

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / 'simharness'
MAX_LINES = 800

#: Where function-level imports of simharness modules must state their reason.
REASONED_IMPORTS = ['runtime', 'hosts', 'executors/worker_delegating.py', 'executors/remote.py',
                    'executors/thread_delegating.py', 'executors/base.py', 'stacks.py',
                    'pytest_plugin.py', 'testing', 'serve.py', 'framework.py']


def _long_modules_listed():
    with open(ROOT / 'pyproject.toml', 'rb') as f:
        return tomllib.load(f).get('tool', {}).get('simharness', {}).get('long-modules', {})


def _modules():
    return sorted(p for p in PACKAGE.rglob('*.py') if '_pb2' not in p.name)


def _name(path: pathlib.Path) -> str:
    return str(path.relative_to(ROOT))


def test_no_module_passes_800_lines_without_a_listed_reason():
    listed = _long_modules_listed()
    for name, reason in listed.items():
        assert isinstance(reason, str) and len(reason.split()) >= 3, (
            f'[tool.simharness.long-modules] {name!r}: give a reason (a sentence), got {reason!r}')
    long = {_name(p): len(p.read_text().splitlines()) for p in _modules()}
    long = {k: v for k, v in long.items() if v > MAX_LINES}
    unlisted = {k: v for k, v in long.items() if k not in listed}
    assert not unlisted, (
        f'modules over {MAX_LINES} lines: {unlisted}; split them by job, or list them with a '
        'reason under [tool.simharness.long-modules] in pyproject.toml')
    stale = sorted(k for k in listed if k not in long)
    assert not stale, (f'{stale} are listed under [tool.simharness.long-modules] but are not '
                       f'over {MAX_LINES} lines (any more): remove them from the list')


def _files_with_reasoned_imports():
    for entry in REASONED_IMPORTS:
        p = PACKAGE / entry
        if p.is_dir():
            yield from sorted(x for x in p.rglob('*.py') if '_pb2' not in x.name)
        elif p.exists():
            yield p


def _has_reason(lines, first: int, end: int) -> bool:
    """Whether the import at lines[first:end], or the run of comments and imports right
    above it, says its reason."""
    if any('reason:' in line for line in lines[first:end]):
        return True
    k = first - 1
    while k >= 0 and lines[k].strip().startswith(('#', 'from ', 'import ')):
        if 'reason:' in lines[k]:
            return True
        k -= 1
    return False


def _function_level_own_imports(path: pathlib.Path):
    tree = ast.parse(path.read_text())
    lines = path.read_text().splitlines()
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or '']
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            if not any(n == 'simharness' or n.startswith('simharness.') for n in names):
                continue
            if not _has_reason(lines, node.lineno - 1, node.end_lineno):
                yield f'{_name(path)}:{node.lineno}: {lines[node.lineno - 1].strip()}'


def test_function_level_imports_of_our_modules_state_their_reason():
    bad = [b for p in _files_with_reasoned_imports() for b in _function_level_own_imports(p)]
    assert not bad, ('function-level imports of simharness modules without a stated reason '
                     '(a "reason:" comment; else import at the top):\n' + '\n'.join(bad))


@pytest.mark.parametrize('source, expected', [
    ('def f():\n    from simharness import stacks\n', 1),
    ('def f():\n    # reason: optional dependency\n    from simharness import stacks\n', 0),
    ('def f():\n    import numpy\n', 0),
])
def test_the_import_rule_sees_what_it_should(tmp_path, source, expected):
    p = tmp_path / 'm.py'
    p.write_text(source)
    global ROOT
    old, ROOT = ROOT, tmp_path
    try:
        assert len(list(_function_level_own_imports(p))) == expected
    finally:
        ROOT = old


def test_runtime_and_executors_need_no_ignored_import():
    """The worker seam keeps runtime/ and executors/ apart (the hosts build the leaf):
    no contract forgives an import between them."""
    with open(ROOT / 'pyproject.toml', 'rb') as f:
        contracts = tomllib.load(f)['tool']['importlinter']['contracts']
    by_id = {c.get('id'): c for c in contracts}
    assert 'runtime-never-imports-executors' in by_id
    for c in contracts:
        for line in c.get('ignore_imports', []):
            src, _, dst = (x.strip() for x in line.partition('->'))
            assert not (src.startswith('simharness.runtime') and
                        dst.startswith('simharness.executors')), (c.get('id'), line)


#: The worker seam's modules are typed strictly (mypy --strict).
STRICT_MODULES = ['simharness/runtime/seam.py', 'simharness/runtime/loopback.py',
                  'simharness/runtime/stream_plan.py', 'simharness/runtime/service.py',
                  'simharness/executors/stream_eval.py', 'simharness/executors/resolving_streams.py',
                  'simharness/atomic.py']


@pytest.mark.slow  # ~20 s without a mypy cache
def test_the_seam_modules_pass_mypy_strict():
    api = pytest.importorskip('mypy.api', reason='mypy is not installed')
    out, err, status = api.run(['--strict', '--follow-imports=silent', '--no-error-summary',
                                *[str(ROOT / m) for m in STRICT_MODULES]])
    assert status == 0, out + err
