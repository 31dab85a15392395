"""environment.json: the software and machine a run used (`collect_environment`), and the
Ray cluster of a run on ``stack.kind = 'ray'`` (`_record_cluster`)."""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, Mapping, Optional

import psutil

from simharness.experiments import atomic
from simharness.experiments.runner.rundir import ENVIRONMENT_FILE


def _cpu_model() -> Optional[str]:
    try:
        with open('/proc/cpuinfo', encoding='utf-8', errors='replace') as f:
            for line in f:
                if line.lower().startswith(('model name', 'hardware', 'cpu model')):
                    return line.split(':', 1)[1].strip() or None
    except OSError:
        pass
    return platform.processor() or None


def _git_info(where: Path) -> Optional[Dict[str, Any]]:
    git = shutil.which('git')
    if git is None:
        return None
    try:
        commit = subprocess.run(
            [git, '-C', str(where), 'rev-parse', 'HEAD'],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        if commit.returncode != 0:
            return None
        status = subprocess.run(
            [git, '-C', str(where), 'status', '--porcelain', '--untracked-files=no'],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    dirty = bool(status.stdout.strip()) if status.returncode == 0 else None
    return {'commit': commit.stdout.strip(), 'dirty': dirty}


def _version(pkg: str) -> Optional[str]:
    try:
        return importlib.metadata.version(pkg)
    except importlib.metadata.PackageNotFoundError:
        return None


def collect_environment() -> Dict[str, Any]:
    """Facts about the software and machine a run used (for environment.json).

    Returns:
        ``packages`` (simharness, tensorflow, numpy versions or None),
        ``python``, ``platform``, ``cpu_model``, ``cpu_count_logical``,
        ``cpu_count_physical``, ``cpu_count_usable`` (the affinity mask),
        ``gpus`` (ids from `simharness.runtime.resources.detect_gpus`) and
        ``git`` (``{'commit', 'dirty'}`` of the simharness source tree, or
        None when git or the repository is not there).
    """
    from simharness.runtime.resources import detect_gpus  # pylint: disable=import-outside-toplevel

    try:
        usable: Optional[int] = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count()
    source = Path(__file__).resolve().parents[3]
    return {
        'packages': {p: _version(p) for p in ('simharness', 'tensorflow', 'numpy')},
        'python': {
            'version': platform.python_version(),
            'implementation': platform.python_implementation(),
            'executable': sys.executable,
        },
        'platform': {
            'system': platform.system(),
            'release': platform.release(),
            'machine': platform.machine(),
            'platform': platform.platform(),
        },
        'cpu_model': _cpu_model(),
        'cpu_count_logical': os.cpu_count(),
        'cpu_count_physical': psutil.cpu_count(logical=False),
        'cpu_count_usable': usable,
        'gpus': detect_gpus(),
        'git': _git_info(source),
    }


def _record_cluster(run_dir: Path, cluster: Mapping[str, Any]) -> None:
    """Adds the Ray cluster (nodes, resources, where each actor runs) to environment.json."""
    path = run_dir / ENVIRONMENT_FILE
    try:
        env = json.loads(path.read_text(encoding='utf-8'))
    except (OSError, ValueError):
        env = {}
    env['ray'] = dict(cluster)
    atomic.write_json(path, env)
