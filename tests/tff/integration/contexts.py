"""Port of TFF's ``tensorflow_federated/python/tests/test_contexts.py``: the contexts TFF's
integration tests run on, `with_contexts`, and the pytest fixtures that replace it here.
Nothing left out.

`get_all_contexts()` names TFF's three contexts (``native_mergeable``, ``native_sync_local``,
``test_sync``) and the functions that make them. TFF's `with_contexts` makes a new context
per case and never closes it; the native contexts start worker processes, so here:

* `backend_context` (a module-scoped fixture, one parameter per context) makes each kind
  once per test module (pytest orders a module's cases by parameter, so each context starts
  once) and closes it, with the async contexts of the mergeable one, when the module is
  done with it, checking that no worker process and no shared-memory segment is left;
  `installed_context` installs it for one case. The cases of a module share its contexts.
* `with_contexts` keeps TFF's interface (named ``(name, context_fn)`` pairs, a decorator that
  installs ``context_fn()`` through ``federated_language.framework.with_context`` for each
  case, sync or async) as a pytest parametrization (``context_fn``, ids = the names), and
  also closes the context it made once the case is done.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import os
import time
import weakref
from typing import Any, Callable, Iterator, List, Sequence, Tuple

import psutil
import pytest

import simharness as federated_language
import simharness as tff

#: The async contexts under each mergeable context `_create_mergeable_comp_execution_context`
#: made: `close_context` closes them with it (the mergeable context leaves them open).
_ASYNC_CONTEXTS: 'weakref.WeakKeyDictionary[Any, List[Any]]' = weakref.WeakKeyDictionary()


def _create_mergeable_comp_execution_context():
    async_contexts = [tff.backends.native.create_async_local_cpp_execution_context()]
    ctx = tff.backends.native.create_mergeable_comp_execution_context(async_contexts)
    _ASYNC_CONTEXTS[ctx] = async_contexts
    return ctx


def get_all_contexts() -> List[Tuple[str, Callable[[], Any]]]:
    """``(name, context_fn)`` for each context TFF's integration tests run on."""
    return [
        ('native_mergeable', _create_mergeable_comp_execution_context),
        ('native_sync_local', tff.backends.native.create_sync_local_cpp_execution_context),
        ('test_sync', tff.backends.test.create_sync_test_cpp_execution_context),
    ]


CONTEXT_NAMES = tuple(name for name, _ in get_all_contexts())


def close_context(ctx: Any) -> None:
    """Closes `ctx` (what has no ``close`` is left as is) and, for a mergeable context made
    here, the async contexts it runs on."""
    closer = getattr(ctx, 'close', None)
    if callable(closer):
        closer()
    for inner in _ASYNC_CONTEXTS.pop(ctx, ()):
        inner.close()


# ------------------------------------------------------------------ fixtures


def _workers() -> set:
    """This process's descendants but multiprocessing's forkserver and resource tracker (its
    children; the workers the forkserver forks carry its command line too)."""
    me = psutil.Process()
    singletons = set()
    for p in me.children():
        try:
            cmd = ' '.join(p.cmdline())
        except psutil.NoSuchProcess:
            continue
        if 'forkserver' in cmd or 'resource_tracker' in cmd:
            singletons.add(p.pid)
    out = set()
    for p in me.children(recursive=True):
        try:
            if p.pid not in singletons and p.status() != psutil.STATUS_ZOMBIE:
                out.add(p.pid)
        except psutil.NoSuchProcess:
            pass
    return out


def _segments() -> set:
    """This process's shared-memory segments."""
    try:
        return {n for n in os.listdir('/dev/shm') if n.startswith(f'simharness_{os.getpid()}_')}
    except FileNotFoundError:
        return set()


def _assert_nothing_left(workers_before: set, segments_before: set) -> None:
    deadline = time.monotonic() + 5
    while True:
        workers = _workers() - workers_before
        segments = _segments() - segments_before
        if not (workers or segments) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert not workers, f'worker processes left running after close: {sorted(workers)}'
    assert not segments, f'shared-memory segments left after close: {sorted(segments)}'


@pytest.fixture(scope='module', params=CONTEXT_NAMES)
def backend_context(request) -> Iterator[Any]:
    """One context of the kind ``request.param`` names, for the whole module; closed (and
    checked to leave no worker process or segment behind) when the module is done with it."""
    workers_before, segments_before = _workers(), _segments()
    ctx = dict(get_all_contexts())[request.param]()
    try:
        yield ctx
    finally:
        close_context(ctx)
    _assert_nothing_left(workers_before, segments_before)


@pytest.fixture
def installed_context(backend_context) -> Iterator[Any]:
    """`backend_context`, installed for the case."""
    with federated_language.framework.get_context_stack().install(backend_context):
        yield backend_context


# ------------------------------------------------------------------ with_contexts


def _named(named_contexts: Sequence[Any]) -> Tuple[List[str], List[Any]]:
    """Names and context functions of ``(name, fn)`` tuples or ``{'testcase_name': name,
    ...: fn}`` dicts, given one by one or as a single iterable."""
    if len(named_contexts) == 1 and not isinstance(named_contexts[0], (tuple, dict)):
        named_contexts = tuple(named_contexts[0])
    names, fns = [], []
    for entry in named_contexts:
        if isinstance(entry, dict):
            rest = [v for k, v in entry.items() if k != 'testcase_name']
            if 'testcase_name' not in entry or len(rest) != 1:
                raise ValueError(
                    f'expected {{"testcase_name": name, <arg>: context_fn}}, got {entry!r}'
                )
            names.append(entry['testcase_name'])
            fns.append(rest[0])
        else:
            name, fn = entry
            names.append(name)
            fns.append(fn)
    return names, fns


def _with_context_fn_parameter(fn: Callable[..., Any]) -> inspect.Signature:
    """`fn`'s signature plus a keyword-only ``context_fn`` (the parameter pytest fills)."""
    sig = inspect.signature(fn)
    params = list(sig.parameters.values())
    extra = inspect.Parameter('context_fn', inspect.Parameter.KEYWORD_ONLY)
    at = next(
        (i for i, p in enumerate(params) if p.kind is inspect.Parameter.VAR_KEYWORD), len(params)
    )
    return sig.replace(parameters=params[:at] + [extra] + params[at:])


def with_contexts(*named_contexts):
    """A decorator that runs a test once per named context, with that context installed.

    Args:
      *named_contexts: ``(name, context_fn)`` tuples (or ``{'testcase_name': name,
        'context_fn': context_fn}`` dicts), or a single iterable of them.

    Each case (pytest id: the name) calls ``federated_language.framework.with_context(
    context_fn)`` on the test, sync or async (the decorated test is a coroutine function
    when the test is), and closes the context it made once the test is done. As in TFF,
    the decorated test returns nothing (pytest fails a test that returns an awaitable, and
    warns of one that returns anything else).

    Raises:
      ValueError: no named context.
    """
    if not named_contexts:
        raise ValueError('Expected at least one named parameter, found none.')
    names, fns = _named(named_contexts)

    def decorator(fn):
        made: List[Any] = []

        def note_context() -> None:
            made.append(federated_language.framework.get_context_stack().current)

        def close_made() -> None:
            while made:
                close_context(made.pop())

        if asyncio.iscoroutinefunction(fn):

            async def in_context(*args, **kwargs):
                note_context()
                return await fn(*args, **kwargs)

            @functools.wraps(fn)
            async def wrapper(*args, context_fn, **kwargs):
                try:
                    await federated_language.framework.with_context(context_fn)(in_context)(
                        *args, **kwargs
                    )
                finally:
                    close_made()
        else:

            def in_context(*args, **kwargs):
                note_context()
                return fn(*args, **kwargs)

            @functools.wraps(fn)
            def wrapper(*args, context_fn, **kwargs):
                try:
                    federated_language.framework.with_context(context_fn)(in_context)(
                        *args, **kwargs
                    )
                finally:
                    close_made()

        wrapper.__signature__ = _with_context_fn_parameter(fn)
        return pytest.mark.parametrize('context_fn', fns, ids=names)(wrapper)

    return decorator
