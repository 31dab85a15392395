"""Fixtures of the benchmarks.

The stacks come from simharness' own pytest plugin (`simharness.pytest_plugin`,
loaded through its ``pytest11`` entry point): each case is parametrized over
`helpers.STACKS` with ``simharness_stack`` (built-in stacks of the session's
one stack registry, whose warm worker pools, one per layout, the rest of the
suite shares) and times with ``simharness_benchmark``, which
records the stack's configuration in ``extra_info['simharness_stack']``.
"""

from __future__ import annotations

import pytest

from .helpers import Baselines


def pytest_configure(config):
    config.addinivalue_line(
        'markers',
        'timing_only: a case too slow for the --benchmark-disable (CI) mode, skipped there',
    )


def pytest_collection_modifyitems(config, items):
    # The plugin must be active (it is, unless run with -p no:simharness).
    if not config.pluginmanager.hasplugin('simharness'):
        raise pytest.UsageError(
            'the benchmarks need the simharness pytest plugin '
            '(pip install -e . registers it; do not pass -p no:simharness)'
        )
    if config.getoption('benchmark_disable', default=False):
        skip = pytest.mark.skip(
            reason='only with timing on (--benchmark-disable runs a smaller suite)'
        )
        for item in items:
            if item.get_closest_marker('timing_only'):
                item.add_marker(skip)


@pytest.fixture(scope='session')
def timing_disabled(pytestconfig) -> bool:
    """True with ``--benchmark-disable`` (CI mode: each body runs once; big sizes shrink or skip)."""
    return bool(pytestconfig.getoption('benchmark_disable', default=False))


@pytest.fixture(scope='session')
def baselines() -> Baselines:
    """Baseline medians of the session (see `helpers.Baselines`)."""
    return Baselines()
