"""TFF's own unit tests, renamed (``import simharness as tff``), for today's TFF API.

Every test that takes the `tff_stack` fixture runs once per name of its
stacks, inside ``simharness.execution_context`` of that stack: the thread
stack (``local``) and two pinned worker processes (``process-2``, the
session's warm pool, shared with the rest of the suite). TFF's learning tests
(``learning/``, ~1,700 cases whose cost is mostly building Keras processes)
run on ``process-2`` alone by default, the stack that serializes every
computation and value (CI time); ``SIMHARNESS_TFF_STACKS=local,process-2``
runs every directory on the stacks it names (the conformance suite,
tests/conformance, checks that every stack gives the same bits).
Tests that run no computation need not take it.

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

#: The stacks TFF's tests run on (SIMHARNESS_TFF_STACKS, comma-separated, names others for
#: every directory: any stack of the registry, ``local``, ``thread``, ``process-2``, ...).
TFF_STACKS = ('local', 'process-2')
#: Directories whose tests run on `LEARNING_STACKS` unless SIMHARNESS_TFF_STACKS is set.
LEARNING_STACKS = ('process-2',)
_LEARNING = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'learning') + os.sep


def stacks_for(path: str) -> tuple:
    """The stacks the TFF test module at `path` runs on."""
    named = os.environ.get('SIMHARNESS_TFF_STACKS')
    if named:
        return tuple(n.strip() for n in named.split(',') if n.strip())
    return LEARNING_STACKS if str(path).startswith(_LEARNING) else TFF_STACKS


def pytest_generate_tests(metafunc):
    if 'tff_stack' in metafunc.fixturenames:
        parametrize_stacks(metafunc, 'tff_stack', stacks_for(metafunc.definition.path))


@pytest.fixture
def tff_stack(request, stack_registry) -> Iterator[SimharnessStack]:
    """Runs the test inside ``simharness.execution_context`` of each of its stacks (`stacks_for`)."""
    with stack_registry.open(request.param) as handle:
        yield handle
