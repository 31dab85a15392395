"""The context stack: where a computation called outside tracing runs.

Core knows only that a context has ``invoke(comp, arg)``; the execution
layer (`simharness.context`) makes contexts and installs them here, as TFF's
execution layer installs into ``tff.framework.get_context_stack()``::

    core/computation: Computation.__call__ ──get_context()──▶ current context.invoke(...)
    simharness.context: execution_context(f)  ──install(ctx)──▶ current (this thread/task)
                        set_default_executor ──replace_default──▶ default (process-wide)
                        (import)             ──set_default_maker──▶ how the first default is made

The current context is a `ContextVar` (so threads and asyncio tasks see their
own); the default is process-wide, made on first use by the installed maker
(a local thread stack) and closed when replaced if simharness made it.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import contextvars
import threading
from typing import Any, Callable, Iterator, Optional, Union

from simharness.errors import ExecutorClosedError

__all__ = [
    'AsyncContext',
    'SyncContext',
    'get_context',
    'install',
    'new_event_loop',
    'replace_default',
    'set_default_maker',
]


class SyncContext(abc.ABC):
    """A context that runs a computation on an argument synchronously
    (`federated_language.framework.SyncContext`).

    Subclass it and define `invoke(comp, arg)`; a `close()` is optional (the
    default context is closed with it when replaced, if simharness made it).
    simharness's `ExecutionContext` is one.
    """

    @abc.abstractmethod
    def invoke(self, comp: Any, arg: Any) -> Any:
        """Runs `comp` on `arg` (None: no argument) and returns its result."""
        raise NotImplementedError


class AsyncContext(abc.ABC):
    """A context whose `invoke` is a coroutine (`federated_language.framework.AsyncContext`):
    a computation called while it is current returns an awaitable.
    simharness's `AsyncExecutionContext` is one.
    """

    @abc.abstractmethod
    async def invoke(self, comp: Any, arg: Any) -> Any:
        """Runs `comp` on `arg` (None: no argument); awaits its result."""
        raise NotImplementedError


Context = Union[SyncContext, AsyncContext]


class _Default:
    """The process-wide default context and how to make one (one instance, below).

    `owned`: simharness made the context (first use, `set_default_executor`),
    so it is closed when replaced; a context the user passed in is left open.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.context: Optional[Context] = None
        self.owned = True
        self.maker: Optional[Callable[[], Context]] = None


_DEFAULT = _Default()
_CURRENT: contextvars.ContextVar[Optional[Context]] = contextvars.ContextVar(
    'simharness_execution_context', default=None
)


def set_default_maker(maker: Callable[[], Context]) -> None:
    """Installs how the default context is made on first use (the execution layer calls it)."""
    with _DEFAULT.lock:
        _DEFAULT.maker = maker


def get_context() -> Context:
    """The innermost installed context, else the default one (made on first use).

    Raises:
      ExecutorClosedError: no context is installed and no default maker was
        installed (the execution layer, `simharness.context`, was not imported).
    """
    ctx = _CURRENT.get()
    if ctx is not None:
        return ctx
    with _DEFAULT.lock:
        if _DEFAULT.context is None:
            if _DEFAULT.maker is None:
                raise ExecutorClosedError(
                    'no execution context is installed; import simharness (its execution '
                    'layer installs the default local context) or use execution_context(...)'
                )
            _DEFAULT.context = _DEFAULT.maker()
            _DEFAULT.owned = True
        return _DEFAULT.context


def replace_default(new: Optional[Context], owned: bool) -> None:
    """Makes `new` the default (None: made again on next use); closes an owned previous one."""
    with _DEFAULT.lock:
        old, old_owned = _DEFAULT.context, _DEFAULT.owned
        _DEFAULT.context, _DEFAULT.owned = new, owned
    closer = getattr(old, 'close', None)
    if old is not None and old is not new and old_owned and callable(closer):
        closer()


@contextlib.contextmanager
def install(ctx: Context) -> Iterator[Context]:
    """Makes `ctx` current inside the `with` block (this thread or task); leaves it open."""
    current = _CURRENT  # held here: at interpreter exit the module's globals may be gone
    token = current.set(ctx)
    try:
        yield ctx
    finally:
        try:
            current.reset(token)
        except ValueError:
            # Finished in another context than its own (a `with` never left, its generator
            # closed by the garbage collector, e.g. at exit): `ctx` was current only there.
            pass


def new_event_loop() -> asyncio.AbstractEventLoop:
    """`asyncio.new_event_loop()` made in an empty `contextvars.Context`.

    A loop keeps the context it was made in for the life of its own callbacks (its
    self-pipe reader): one made while a context is installed here (a stack's loop made
    on a computation's first call, say) would keep that execution context alive, and
    so its loop threads and workers, after the caller dropped it.
    """
    return contextvars.Context().run(asyncio.new_event_loop)
