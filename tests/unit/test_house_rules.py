"""House rules that a reader of the tree should not have to police by hand.

- No module under `simharness/` passes 800 lines unless `pyproject.toml` lists it,
  with a reason, under ``[tool.simharness.long-modules]`` (and a listed module
  that is short again must leave the list).
- In the runtime, the hosts, the worker-seam executors, the stacks and the pytest
  plugin, a function-level import of one of our own modules states its reason
  (a ``reason:`` comment on the import or on the line above): at the top of the
  module otherwise.
- No code under `simharness/` reads or assigns another object's private attribute
  (``x._name`` where ``x`` is not ``self``, ``cls`` or ``super()``): objects talk
  through public methods (composition, not reaching in). Exceptions: a module's
  private names, the namedtuple API (``_replace``, ``_asdict``...), the third-party
  internals listed with their reason in `THIRD_PARTY_PRIVATE`, and the files still
  to be fixed, listed in `PENDING` (a new violation anywhere else fails).
"""

from __future__ import annotations

import ast
import os
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
REASONED_IMPORTS = [
    'runtime',
    'hosts',
    'executors/worker_delegating.py',
    'executors/wire_values.py',
    'executors/remote.py',
    'executors/thread_delegating.py',
    'executors/base.py',
    'stacks.py',
    'pytest_plugin.py',
    'testing',
    'serve.py',
    'framework.py',
]


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
            f'[tool.simharness.long-modules] {name!r}: give a reason (a sentence), got {reason!r}'
        )
    long = {_name(p): len(p.read_text().splitlines()) for p in _modules()}
    long = {k: v for k, v in long.items() if v > MAX_LINES}
    unlisted = {k: v for k, v in long.items() if k not in listed}
    assert not unlisted, (
        f'modules over {MAX_LINES} lines: {unlisted}; split them by job, or list them with a '
        'reason under [tool.simharness.long-modules] in pyproject.toml'
    )
    stale = sorted(k for k in listed if k not in long)
    assert not stale, (
        f'{stale} are listed under [tool.simharness.long-modules] but are not '
        f'over {MAX_LINES} lines (any more): remove them from the list'
    )


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
    assert not bad, (
        'function-level imports of simharness modules without a stated reason '
        '(a "reason:" comment; else import at the top):\n' + '\n'.join(bad)
    )


@pytest.mark.parametrize(
    'source, expected',
    [
        ('def f():\n    from simharness import stacks\n', 1),
        ('def f():\n    # reason: optional dependency\n    from simharness import stacks\n', 0),
        ('def f():\n    import numpy\n', 0),
    ],
)
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
            assert not (
                src.startswith('simharness.runtime') and dst.startswith('simharness.executors')
            ), (c.get('id'), line)


#: --strict's per-module flags (mypy's docs: ``mypy --help``, "--strict"), all of which
#: `pyproject.toml` sets for the modules typed strictly.
STRICT_FLAGS = {
    'disallow_any_generics': True,
    'disallow_subclassing_any': True,
    'disallow_untyped_calls': True,
    'disallow_untyped_defs': True,
    'disallow_incomplete_defs': True,
    'check_untyped_defs': True,
    'disallow_untyped_decorators': True,
    'warn_unused_ignores': True,
    'warn_return_any': True,
    'implicit_reexport': False,
    'strict_equality': True,
    'extra_checks': True,
}


def _strict_modules():
    """The modules `pyproject.toml` types strictly: the worker seam, most of the runtime (not
    yet: the protocol's records, the local pool's process, request queue, shared memory and
    transport, the Ray handle, gRPC's client) and the streaming strategy's."""
    with open(ROOT / 'pyproject.toml', 'rb') as f:
        mypy = tomllib.load(f)['tool']['mypy']
    assert mypy.get('warn_redundant_casts') and mypy.get('warn_unused_configs'), mypy
    strict = [o for o in mypy.get('overrides', []) if o.get('disallow_untyped_defs')]
    assert len(strict) == 1, strict
    assert {k: strict[0].get(k) for k in STRICT_FLAGS} == STRICT_FLAGS
    return strict[0]['module']


def test_the_strict_modules_are_the_seam_and_exist():
    modules = _strict_modules()
    assert 'simharness.runtime.seam' in modules and 'simharness.runtime.service' in modules
    for m in modules:
        assert (ROOT / (m.replace('.', '/') + '.py')).is_file(), m


@pytest.mark.slow  # ~35 s without a mypy cache; ~1 s after CI's own `mypy simharness`
def test_the_strict_modules_pass_mypy_strict():
    """The same run as CI's (`.ci/run`: ``mypy simharness``, whose cache it reuses), none of
    its errors in a module typed strictly (the others' are in .ci/mypy-baseline.txt)."""
    api = pytest.importorskip('mypy.api', reason='mypy is not installed')
    paths = {m.replace('.', '/') + '.py' for m in _strict_modules()}
    cwd = os.getcwd()
    os.chdir(ROOT)  # pyproject.toml's settings, and the cache of CI's run (.mypy_cache)
    try:
        out, err, status = api.run(['simharness'])
    finally:
        os.chdir(cwd)
    assert status in (0, 1), out + err  # 1: errors reported (the baseline's); 2: a failure
    errors = [line for line in out.splitlines() if line.split(':', 1)[0] in paths]
    assert not errors, '\n'.join(errors)


# ------------------------------------------------------------ no reaching into private state

#: The namedtuple API: public, though its names start with an underscore.
NAMEDTUPLE_API = frozenset({'_replace', '_asdict', '_fields', '_make', '_field_defaults'})

#: Private attributes of third-party objects read on purpose, by file, with the reason.
THIRD_PARTY_PRIVATE = {
    # tf.data offers no public view of a dataset's graph: recognizing
    # ``from_tensor_slices(...).batch(...)`` (to send its tensors, not a graph) walks the
    # dataset ops (`_input_dataset`, `_batch_size`, `_drop_remainder`, `_tensors`,
    # `_structure`, a repeat's `_count`); a dataset's serialized graph (`_as_serialized_graph`) and its variant
    # (`_variant_tensor`) are what tf.data's own distribution code uses.
    'simharness/core/tf_sequences.py': frozenset(
        {
            '_input_dataset',
            '_batch_size',
            '_drop_remainder',
            '_tensors',
            '_structure',
            '_as_serialized_graph',
            '_variant_tensor',
            '_count',
        }
    ),
    # pytest-benchmark's fixture has no public way to claim it for one run (`_mode`, which
    # its own `__call__`/`pedantic` set and check), to size the timer (`_get_precision`)
    # or to make the stats it saves (`_make_stats`): `round` drives the fixture as they do.
    'simharness/testing/benchmark.py': frozenset({'_mode', '_get_precision', '_make_stats'}),
    # multiprocess (for Python 3.11) has no public way to say where its temporary directory
    # (the forkserver's socket) goes: `util.get_temp_dir` makes it in TMPDIR, however long,
    # and caches it in the process's `_config`; the driver makes it where a socket's path
    # fits and puts it there (CPython 3.12's multiprocessing picks such a directory itself).
    'simharness/runtime/local/lifeline.py': frozenset({'_config'}),
}

#: Files that still read or assign other objects' private attributes: none (there were 80
#: reaches in 21 files when the rule came, 2026-11-29). A file listed here is exempt until
#: it is clean, and must then leave the list (the test below insists); keep it empty.
PENDING: frozenset = frozenset()


def _module_names(tree: ast.Module, path: pathlib.Path) -> set:
    """Names the file binds to modules: ``import x[.y] [as z]``, and ``from p import m``
    where ``p.m`` is one of our modules, or (another library's) a lowercase name."""
    names: set = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update((a.asname or a.name).split('.')[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the file's package
                base = path.parent
                for _ in range(node.level - 1):
                    base = base.parent
                parts = [*base.relative_to(PACKAGE.parent).parts, *(node.module or '').split('.')]
                module = '.'.join(p for p in parts if p)
            else:
                module = node.module or ''
            for a in node.names:
                if module == 'simharness' or module.startswith('simharness.'):
                    where = PACKAGE.parent.joinpath(*module.split('.'), a.name)
                    is_module = where.with_suffix('.py').exists() or where.is_dir()
                else:
                    is_module = a.name.islower()
                if is_module:
                    names.add(a.asname or a.name)
    return names


def _is_owner(value: ast.expr) -> bool:
    """``self``, ``cls`` or ``super()``: the object reaches its own state."""
    if isinstance(value, ast.Name):
        return value.id in ('self', 'cls')
    return (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Name)
        and value.func.id == 'super'
    )


def _private_reaches(path: pathlib.Path):
    """Each read or assignment of another object's private attribute in `path`."""
    tree = ast.parse(path.read_text())
    modules = _module_names(tree, path)
    allowed = THIRD_PARTY_PRIVATE.get(_name(path), frozenset())
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        attr = node.attr
        if not attr.startswith('_') or attr.startswith('__') or attr in NAMEDTUPLE_API:
            continue
        if attr in allowed or _is_owner(node.value):
            continue
        if isinstance(node.value, ast.Name) and node.value.id in modules:
            continue  # a module's private name
        yield f'{_name(path)}:{node.lineno}: {ast.unparse(node)}'


def test_no_code_reaches_into_another_objects_private_attributes():
    found: dict = {}
    for p in _modules():
        hits = list(_private_reaches(p))
        if hits:
            found[_name(p)] = hits
    print(
        f'{sum(map(len, found.values()))} private reaches in {len(found)} files; '
        f'pending: {sorted(found.keys() & PENDING)}'
    )
    new = [h for name, hits in sorted(found.items()) if name not in PENDING for h in hits]
    assert not new, (
        "code reads or assigns another object's private attribute (give the "
        'owner a public method, or hold the object and ask it):\n' + '\n'.join(new)
    )
    clean = sorted(PENDING - found.keys())
    assert not clean, f'{clean} no longer reach into private attributes: remove them from PENDING'
    missing = sorted(n for n in PENDING | THIRD_PARTY_PRIVATE.keys() if not (ROOT / n).exists())
    assert not missing, f'{missing} are listed but do not exist (moved? update the lists)'


@pytest.mark.parametrize(
    'source, expected',
    [
        ('class A:\n    def f(self, other):\n        return other._x\n', 1),
        ('class A:\n    def f(self, other):\n        other._x = 1\n', 1),
        ('class A:\n    def f(self):\n        return self._x.y._z\n', 1),
        ('class A:\n    def f(self):\n        return self._x, super()._y(), self.__z\n', 0),
        ('class A:\n    @classmethod\n    def f(cls):\n        return cls._x\n', 0),
        (
            'import os\nfrom simharness.runtime.local import transport as L\n'
            'x = os._exit, L._private\n',
            0,
        ),
        ('from simharness.runtime.local.transport import FrameReader\nx = FrameReader._y\n', 1),
        ('def f(t):\n    return t._replace(a=1), t._asdict(), t._fields\n', 0),
        ('def f(ds):\n    return ds._input_dataset\n', 1),
    ],
)
def test_the_private_rule_sees_what_it_should(tmp_path, source, expected):
    p = tmp_path / 'm.py'
    p.write_text(source)
    global ROOT
    old, ROOT = ROOT, tmp_path
    try:
        assert len(list(_private_reaches(p))) == expected
    finally:
        ROOT = old
