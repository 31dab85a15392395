"""TFF's own unit tests, renamed (``import simharness as tff``), for today's TFF API.

Every test that takes the `tff_stack` fixture runs once per name of
`TFF_STACKS`, inside ``simharness.execution_context`` of that stack. By
default that is two pinned worker processes (the session's warm pool, shared
with the rest of the suite): the stack that serializes every computation and
value, so the one that finds the most. ``SIMHARNESS_TFF_STACKS=local,process-2``
runs them on the thread stack too (the conformance suite, tests/conformance,
checks that every stack gives the same bits; CI time keeps TFF's ~2,500 cases to
one stack). Tests that run no computation need not take it.

Layout: one directory per TFF package (``aggregators/``, ``core/``,
``simulation/``, ``learning/``, ...), one test module per TFF test module,
named as TFF's (``mean_test.py`` -> ``test_mean.py``), each opening with a
line that names TFF's file and lists any case left out and why.
"""

from __future__ import annotations

import os
from typing import Iterator

import pytest

from simharness.pytest_plugin import SimharnessStack, parametrize_stacks

#: The stacks TFF's tests run on: two worker processes, unless SIMHARNESS_TFF_STACKS names others
#: (comma-separated, any stack of the registry: ``local``, ``thread``, ``process-2``, ...).
TFF_STACKS = tuple(n.strip() for n in os.environ.get('SIMHARNESS_TFF_STACKS', 'process-2').split(',')
                   if n.strip())


def pytest_generate_tests(metafunc):
    if 'tff_stack' in metafunc.fixturenames:
        parametrize_stacks(metafunc, 'tff_stack', TFF_STACKS)


@pytest.fixture
def tff_stack(request, stack_registry) -> Iterator[SimharnessStack]:
    """Runs the test inside ``simharness.execution_context`` of every stack of `TFF_STACKS`."""
    with stack_registry.open(request.param) as handle:
        yield handle
