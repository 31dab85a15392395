"""Port of TFF's ``tensorflow_federated/python/tests/test_contexts_test.py``. No case left out.

TFF's ``test_installs_contexts_test_case`` builds a ``parameterized.TestCase`` whose tests
`with_contexts` decorates and runs it with unittest, ``with_context`` mocked; here the
decorated tests are a test file that pytester runs in this process (its async test through
a hook of the file's own conftest that runs coroutine tests with ``asyncio.run``, as
unittest's ``IsolatedAsyncioTestCase`` does). Beyond TFF's cases: the other forms of the
named contexts TFF accepts, and `with_contexts` unmocked (each case runs with its own
context installed, closed after the case), on sync and async tests and on tests of this
module.
"""

from __future__ import annotations

import asyncio
from unittest import mock

import pytest

import simharness as federated_language
from tests.tff.integration import contexts
from tests.tff.integration.contexts import with_contexts

pytest_plugins = ['pytester']


class _TestContext(federated_language.framework.SyncContext):
    """A context that runs nothing; `close` is counted."""

    def __init__(self):
        self.closed = 0

    def invoke(self, comp, arg):
        raise NotImplementedError

    def close(self):
        self.closed += 1


def _context_fn():
    return _TestContext()


#: TFF's named contexts: three names, one function.
NAMED_CONTEXTS = [('1', _context_fn), ('2', _context_fn), ('3', _context_fn)]

_DECORATED_TESTS = """
from {module} import NAMED_CONTEXTS, with_contexts


@with_contexts(*NAMED_CONTEXTS)
async def test_async():
    pass


@with_contexts(*NAMED_CONTEXTS)
def test_sync():
    pass


def test_undecorated():
    pass
"""

_RUN_COROUTINES = """
import asyncio
import inspect

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    if inspect.iscoroutinefunction(pyfuncitem.obj):
        args = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
        asyncio.run(pyfuncitem.obj(**args))
        return True
    return None
"""


def _parametrization(fn):
    """The ``context_fn`` parametrization `with_contexts` put on `fn`: (ids, functions)."""
    [mark] = [m for m in getattr(fn, 'pytestmark', []) if m.name == 'parametrize']
    argname, fns = mark.args
    assert argname == 'context_fn'
    return list(mark.kwargs['ids']), list(fns)


def test_installs_contexts_test_case(pytester, monkeypatch):
    monkeypatch.delenv('PYTEST_XDIST_WORKER', raising=False)
    monkeypatch.delenv('PYTEST_XDIST_WORKER_COUNT', raising=False)

    # A sync test stays sync, an async one async; each gets one case per named context.
    def sync_test():
        pass

    async def async_test():
        pass

    sync_decorated = with_contexts(*NAMED_CONTEXTS)(sync_test)
    async_decorated = with_contexts(*NAMED_CONTEXTS)(async_test)
    assert not asyncio.iscoroutinefunction(sync_decorated)
    assert asyncio.iscoroutinefunction(async_decorated)
    for decorated in (sync_decorated, async_decorated):
        assert _parametrization(decorated) == (
            [name for name, _ in NAMED_CONTEXTS],
            [fn for _, fn in NAMED_CONTEXTS],
        )

    pytester.makeconftest(_RUN_COROUTINES)
    pytester.makepyfile(test_foo=_DECORATED_TESTS.format(module=__name__))
    async_values = [lambda _: mock.AsyncMock()] * 3
    sync_values = [lambda _: mock.MagicMock()] * 3
    with mock.patch.object(
        federated_language.framework, 'with_context', side_effect=async_values + sync_values
    ) as mock_with_context:
        recorder = pytester.inline_run('-p', 'no:cacheprovider')
        # The expected cases, all passed.
        ran = [
            r.nodeid.split('::')[-1]
            for r in recorder.getreports('pytest_runtest_logreport')
            if r.when == 'call'
        ]
        names = [name for name, _ in NAMED_CONTEXTS]
        assert ran == (
            [f'test_async[{n}]' for n in names]
            + [f'test_sync[{n}]' for n in names]
            + ['test_undecorated']
        )
        recorder.assertoutcome(passed=len(NAMED_CONTEXTS) * 2 + 1)
        # `with_context` got each context function, in order.
        assert mock_with_context.mock_calls == [mock.call(fn) for _, fn in NAMED_CONTEXTS] * 2


def test_raises_value_error():
    with pytest.raises(ValueError):
        with_contexts()


# ------------------------------------------------------------------ beyond TFF's cases


def test_accepts_tuples_dicts_or_one_iterable():
    def first():
        return _TestContext()

    def second():
        return _TestContext()

    def case():
        pass

    expected = (['a', 'b'], [first, second])
    assert _parametrization(with_contexts(('a', first), ('b', second))(case)) == expected
    assert (
        _parametrization(
            with_contexts(
                {'testcase_name': 'a', 'context_fn': first},
                {'testcase_name': 'b', 'context_fn': second},
            )(case)
        )
        == expected
    )
    assert _parametrization(with_contexts([('a', first), ('b', second)])(case)) == expected


def test_installs_and_closes_a_context_per_case():
    made = []

    def make():
        made.append(_TestContext())
        return made[-1]

    seen = []

    def current():
        return federated_language.framework.get_context_stack().current

    @with_contexts(('x', make), ('y', make))
    def sync_case(value):
        seen.append((current(), value))
        assert not made[-1].closed

    @with_contexts(('x', make), ('y', make))
    async def async_case(value):
        await asyncio.sleep(0)
        seen.append((current(), value))
        assert not made[-1].closed

    outside = current()
    for _, fn in (('x', make), ('y', make)):
        sync_case(1, context_fn=fn)
        asyncio.run(async_case(2, context_fn=fn))
    assert len(made) == 4 and len({id(c) for c in made}) == 4
    assert seen == [(made[0], 1), (made[1], 2), (made[2], 1), (made[3], 2)]
    assert [c.closed for c in made] == [1, 1, 1, 1]
    assert current() is outside


def test_closes_the_context_of_a_failing_case():
    made = []

    def make():
        made.append(_TestContext())
        return made[-1]

    @with_contexts(('x', make))
    def failing():
        raise RuntimeError('the case fails')

    with pytest.raises(RuntimeError, match='the case fails'):
        failing(context_fn=make)
    assert made[0].closed == 1


def test_get_all_contexts_names_tffs_three():
    assert [name for name, _ in contexts.get_all_contexts()] == [
        'native_mergeable',
        'native_sync_local',
        'test_sync',
    ]
    assert all(callable(fn) for _, fn in contexts.get_all_contexts())


@with_contexts(*NAMED_CONTEXTS)
def test_decorated_case_runs_in_its_context():
    ctx = federated_language.framework.get_context_stack().current
    assert isinstance(ctx, _TestContext) and not ctx.closed
