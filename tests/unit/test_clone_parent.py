"""`import simharness` from the parent folder of a clone named simharness (git's default).

From there, the current directory (first on ``sys.path``) holds a folder named
simharness without an ``__init__.py``: the clone's root, a namespace package
candidate. An editable install through setuptools' import finder lost to it
(the finder runs after Python's path scan): ``AttributeError: module 'simharness'
has no attribute 'tf_computation'``. pyproject.toml names the project root as the
package root, so the install is a path entry, and on the path the real package
wins over a namespace folder. These tests check the installed environment they
run in (an install made before that change still has the finder: reinstall with
``pip install -e .``).
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import simharness

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _import_from(cwd: pathlib.Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != 'PYTHONPATH'}
    return subprocess.run(
        [sys.executable, '-c', 'import simharness as tff; tff.tf_computation; print(tff.__file__)'],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_import_from_a_clone_parent_finds_the_package(tmp_path):
    (tmp_path / 'simharness').symlink_to(ROOT, target_is_directory=True)  # the clone
    done = _import_from(tmp_path)
    assert done.returncode == 0, done.stderr
    found = pathlib.Path(done.stdout.strip())
    assert found.name == '__init__.py' and found.parent.name == 'simharness'
    assert found.resolve() == pathlib.Path(simharness.__file__).resolve()


def test_a_foreign_folder_named_simharness_does_not_shadow_it(tmp_path):
    """Any folder named simharness in the working directory (a copy, an unpacked
    archive with only the repository's files at its top)."""
    clone = tmp_path / 'simharness'
    clone.mkdir()
    (clone / 'pyproject.toml').write_text('[project]\nname = "simharness"\n', encoding='utf-8')
    done = _import_from(tmp_path)
    assert done.returncode == 0, done.stderr
    assert (
        pathlib.Path(done.stdout.strip()).resolve() == pathlib.Path(simharness.__file__).resolve()
    )


def test_pyproject_names_the_project_root_as_the_package_root():
    """Setuptools writes a path entry (not its import finder) for an editable install only
    when the package root is named (``package-dir = {"" = ...}``) and simple."""
    if sys.version_info >= (3, 11):
        import tomllib  # pylint: disable=import-outside-toplevel
    else:  # pragma: no cover
        import tomli as tomllib  # pylint: disable=import-outside-toplevel
    with open(ROOT / 'pyproject.toml', 'rb') as f:
        setuptools = tomllib.load(f)['tool']['setuptools']
    assert setuptools['package-dir'] == {'': '.'}
