"""The plugin's tests run pytest sessions of their own (pytester, subprocesses).

Under pytest-xdist (the suite's `-n 2`) this session's worker sets
``PYTEST_XDIST_WORKER``; pytest-benchmark turns itself off in any session that
sees it, so the inner sessions would time and save nothing. They are sessions
of their own, not xdist workers: the variable is removed for each test.
"""

import pytest


@pytest.fixture(autouse=True)
def _inner_sessions_are_not_xdist_workers(monkeypatch):
    monkeypatch.delenv('PYTEST_XDIST_WORKER', raising=False)
    monkeypatch.delenv('PYTEST_XDIST_WORKER_COUNT', raising=False)
