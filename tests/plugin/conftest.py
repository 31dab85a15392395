"""The plugin's tests run pytest sessions of their own (pytester, subprocesses).

Under pytest-xdist (the suite's `-n 2`) this session's worker sets
``PYTEST_XDIST_WORKER``; pytest-benchmark turns itself off in any session that
sees it, so the inner sessions would time and save nothing. They are sessions
of their own, not xdist workers: the variable is removed for each test.

TensorFlow is imported here, before any test: pytester's in-process runs
restore ``sys.modules`` to what it held when the ``pytester`` fixture was set
up, so a module first imported inside a test that uses it is dropped again
afterwards, and TensorFlow imported a second time in one process aborts it
(SIGABRT: ``test_tracking.py`` run on its own died at its 12th test).
"""

import pytest

import simharness.framework  # noqa: F401  (TensorFlow, before any pytester snapshot)


@pytest.fixture(autouse=True)
def _inner_sessions_are_not_xdist_workers(monkeypatch):
    monkeypatch.delenv('PYTEST_XDIST_WORKER', raising=False)
    monkeypatch.delenv('PYTEST_XDIST_WORKER_COUNT', raising=False)
