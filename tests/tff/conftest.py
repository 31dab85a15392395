"""TFF's own unit tests, renamed (``import simharness as tff``), for today's TFF API.

Every test that takes the `tff_stack` fixture runs once per name of
`TFF_STACKS`, inside ``simharness.execution_context`` of that stack: the
thread stack and two pinned worker processes (the session's warm pool, shared
with the rest of the suite). Tests that run no computation need not take it.

Layout: one directory per TFF package (``aggregators/``, ``core/``,
``simulation/``, ``learning/``, ...), one test module per TFF test module,
named as TFF's (``mean_test.py`` -> ``test_mean.py``), each opening with a
line that names TFF's file and lists any case left out and why.
"""

from __future__ import annotations

from typing import Iterator

import pytest

from simharness.pytest_plugin import SimharnessStack, parametrize_stacks

#: The stacks TFF's tests run on: the thread stack (two client threads) and two worker processes.
TFF_STACKS = ('local', 'process-2')


def pytest_generate_tests(metafunc):
    if 'tff_stack' in metafunc.fixturenames:
        parametrize_stacks(metafunc, 'tff_stack', TFF_STACKS)


@pytest.fixture
def tff_stack(request, stack_registry) -> Iterator[SimharnessStack]:
    """Runs the test inside ``simharness.execution_context`` of every stack of `TFF_STACKS`."""
    with stack_registry.open(request.param) as handle:
        yield handle
