"""TFF's own unit tests, renamed (``import simharness as tff``), for today's TFF API.

Every test that takes the `tff_stack` fixture runs inside
``simharness.execution_context`` of a stack: by default each test function on
one of two, the thread stack (``local``) or two pinned worker processes
(``process-2``, the session's warm pool, shared with the rest of the suite),
chosen by a stable hash of its module and name (`stacks_for`), so that every
directory runs on both stacks and each case once (CI time: a case's cost is
mostly building and tracing its computations, the same on either stack).
``SIMHARNESS_TFF_STACKS=local,process-2`` runs every case on each stack it
names (the conformance suite, tests/conformance, checks that every stack gives
the same bits).
Tests that run no computation need not take it.

Layout: one directory per TFF package (``aggregators/``, ``core/``,
``simulation/``, ``learning/``, ...), one test module per TFF test module,
named as TFF's (``mean_test.py`` -> ``test_mean.py``), each opening with a
line that names TFF's file and lists any case left out and why.
"""

from __future__ import annotations

import os
import zlib
from typing import Iterator

import pytest

from simharness.pytest_plugin import SimharnessStack, parametrize_stacks

#: The stacks TFF's tests run on: each test function on one of them by default (`stacks_for`);
#: SIMHARNESS_TFF_STACKS (comma-separated: any stack of the registry, ``local``, ``thread``,
#: ``process-2``, ...) runs every case on each stack it names.
TFF_STACKS = ('local', 'process-2')


def stacks_for(path: str, name: str) -> tuple:
    """The stacks the TFF test function `name` of the module at `path` runs on."""
    named = os.environ.get('SIMHARNESS_TFF_STACKS')
    if named:
        return tuple(n.strip() for n in named.split(',') if n.strip())
    here = os.path.dirname(os.path.abspath(__file__))
    key = f'{os.path.relpath(str(path), here)}::{name}'.replace(os.sep, '/')
    return (TFF_STACKS[zlib.crc32(key.encode()) % len(TFF_STACKS)],)


def pytest_generate_tests(metafunc):
    if 'tff_stack' in metafunc.fixturenames:
        parametrize_stacks(
            metafunc, 'tff_stack', stacks_for(metafunc.definition.path, metafunc.function.__name__)
        )


@pytest.fixture
def tff_stack(request, stack_registry) -> Iterator[SimharnessStack]:
    """Runs the test inside ``simharness.execution_context`` of each of its stacks (`stacks_for`)."""
    with stack_registry.open(request.param) as handle:
        yield handle
