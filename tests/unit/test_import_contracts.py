"""The layering rules hold (docs/guide/layout.md): import-linter's contracts in pyproject.toml.

`python -m pytest -q` runs them here, so CI checks them without a step of its
own; ``lint-imports`` (from the repository root) prints the same report.
import-linter reads the source (grimp), it imports nothing.
"""

from __future__ import annotations

import pathlib

import pytest
from importlinter import api  # noqa: F401  (configures import-linter's adapters on import)
from importlinter.application import use_cases

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _lint(config: pathlib.Path, capfd: pytest.CaptureFixture) -> tuple[bool, str]:
    kept = use_cases.lint_imports(config_filename=str(config), cache_dir=None, no_logo=True)
    out, err = capfd.readouterr()
    return kept, out + err


def test_the_layering_contracts_are_kept(capfd):
    kept, report = _lint(ROOT / 'pyproject.toml', capfd)
    assert kept, f'an import breaks a layering contract (docs/guide/layout.md):\n{report}'
    assert 'Contracts: 14 kept, 0 broken.' in report, report  # none was skipped or dropped
    # Exceptions are written as contracts (the TF allow-list is a `protected` contract), so
    # nothing is kept by ignoring an import.
    assert 'ignored import' not in report, report


def test_a_broken_contract_fails_the_check(tmp_path, capfd):
    # The same checker on a contract the code breaks today (core/types imports
    # core/struct): the check fails and names the import, so the test above can fail.
    config = tmp_path / 'pyproject.toml'
    config.write_text(
        '[tool.importlinter]\n'
        'root_packages = ["simharness"]\n\n'
        '[[tool.importlinter.contracts]]\n'
        'name = "types imports no struct"\n'
        'type = "forbidden"\n'
        'source_modules = ["simharness.core.types"]\n'
        'forbidden_modules = ["simharness.core.struct"]\n'
    )
    kept, report = _lint(config, capfd)
    assert not kept
    assert 'BROKEN' in report and 'simharness.core.types -> simharness.core.struct' in report, (
        report
    )
