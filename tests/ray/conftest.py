"""Fixtures of the Ray tests: the session's loopback cluster of two nodes ('ray-2' resource).

The tests that need Ray are marked ``ray`` and skipped when Ray is not
installed; the unit tests of the pure parts (`test_ray_plan.py`) run without
it. (No ``__init__.py`` here: a package named ``ray`` would hide Ray itself.)
"""

from __future__ import annotations

import os
import sys

import pytest

_TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)


@pytest.fixture(scope='module')
def ray_stack(stack_registry):
    """The session's `RayStackResource`: 2 loopback nodes, one shared actor on each."""
    return stack_registry.resource('ray-2')
