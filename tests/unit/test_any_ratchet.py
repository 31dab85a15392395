"""A ratchet on `Any`: no package under `simharness/` may use it more than it does now.

`Any` switches the type checker off for whatever it annotates; issue 52 replaces it
with the types that values really have (computation classes, `T.Type` subclasses
narrowed with `simharness.core.narrowing`, `tracing.Value`, `tf.Tensor`, precise
`Callable` s, containers and Protocols). This test keeps every package from growing it back.

What is counted: the lines of each package's ``*.py`` files that hold the word ``Any``
(as ``grep -rw Any simharness/<package> --include=*.py | wc -l`` counts them: in code,
annotations, comments and docstrings alike, ``from typing import Any`` included).
A top-level package is a directory right under `simharness/`; the modules directly in
`simharness/` count together as ``(top-level modules)``.

`LIMITS` only moves down: a package over its number fails (type what you added); a
package more than `SLACK` under its number fails too, asking for the number to be
lowered to the new count, so the gain is kept.
"""

from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / 'simharness'
TOP_LEVEL = '(top-level modules)'

#: How far under its limit a package may fall before the limit must be lowered.
SLACK = 10

#: The most lines with the word `Any` that each package may hold.
LIMITS = {
    TOP_LEVEL: 139,
    'aggregators': 288,
    'analytics': 16,
    'backends': 52,
    'bench': 33,
    'core': 280,
    'data': 99,
    'executors': 287,
    'experiments': 176,
    'hosts': 35,
    'learning': 32,
    'program': 87,
    'runtime': 243,
    'simulation': 195,
    'templates': 11,
    'testing': 59,
}

_WORD = re.compile(r'(?<![A-Za-z0-9_])Any(?![A-Za-z0-9_])')


def _package_of(path: pathlib.Path) -> str:
    rel = path.relative_to(PACKAGE)
    return rel.parts[0] if len(rel.parts) > 1 else TOP_LEVEL


def any_counts() -> dict:
    """Lines holding the word `Any`, per top-level package (packages with none left out)."""
    counts: dict = {}
    for path in sorted(PACKAGE.rglob('*.py')):
        if '__pycache__' in path.parts:
            continue
        n = sum(1 for line in path.read_text(encoding='utf-8').splitlines() if _WORD.search(line))
        if n:
            pkg = _package_of(path)
            counts[pkg] = counts.get(pkg, 0) + n
    return counts


def test_the_word_is_counted_as_grep_w_counts_it():
    lines = [
        'from typing import Any',
        'x: Any = 1',
        'AnyStr',
        'MyAny',
        'Any_',
        'dict[str, Any]',
        '# Any comment',
        'anything',
    ]
    assert [bool(_WORD.search(line)) for line in lines] == [
        True,
        True,
        False,
        False,
        False,
        True,
        True,
        False,
    ]


def test_no_package_uses_any_more_than_its_limit():
    counts = any_counts()
    over = {pkg: (n, LIMITS.get(pkg, 0)) for pkg, n in counts.items() if n > LIMITS.get(pkg, 0)}
    assert not over, (
        'these packages hold more lines with `Any` than tests/unit/test_any_ratchet.py '
        f'allows ((count, limit) each): {over}. Give the values you added their real types '
        "(a computation class, a T.Type subclass narrowed with simharness.core.narrowing's "
        'as_function/as_federated/as_struct/member_of, tracing.Value, tf.Tensor, a precise '
        'Callable, container or Protocol) instead of `Any`; a new package starts at 0.'
    )


def test_a_package_well_under_its_limit_lowers_it():
    counts = any_counts()
    slack = {
        pkg: (counts.get(pkg, 0), limit)
        for pkg, limit in LIMITS.items()
        if limit - counts.get(pkg, 0) > SLACK
    }
    assert not slack, (
        f'these packages are more than {SLACK} lines with `Any` under their limit in '
        f'tests/unit/test_any_ratchet.py ((count, limit) each): {slack}. Well done: lower '
        'each LIMITS entry to its count, so that the ratchet keeps the gain.'
    )
