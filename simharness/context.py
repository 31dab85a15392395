"""Execution contexts: synchronous invocation of computations on an executor stack.

`ExecutionContext.invoke` infers the number of clients from the argument,
asks its factory for a stack, runs the call on the context's own event loop
(in a thread the context owns, so that it works the same inside Jupyter's
running loop), and converts the result into numpy values in the Python
containers of the result type.

The current context is looked up in core's context stack
(`simharness.core.context_stack`: set by `execution_context(...)` or
`get_context_stack().install(ctx)`), falling back to the process-wide
default set by `set_default_executor` or `set_default_context` (a local
thread stack until then, whose maker this module installs on import).
"""

from __future__ import annotations

import asyncio
import collections.abc
import concurrent.futures
import contextlib
import functools
import threading
import weakref
from typing import Any, Callable, Iterator, Optional, cast

import numpy as np

from simharness.core import context_stack
from simharness.core.context_stack import AsyncContext, SyncContext
from simharness.core.wakeups import await_future
from simharness.core import types as T
from simharness.core.buffers import pooled_copy
from simharness.core.structure import (
    Struct,
    claim_adopted,
    from_container,
    map_nest,
    tensor_to_numpy,
    to_container,
)
from simharness.errors import (
    CardinalityError,
    ContextError,
    ExecutorClosedError,
    RetryableError,
    SimharnessTypeError,
)
from simharness.executors.base import CURRENT_INVOCATION, ExecutorFactory
from simharness.validation import check_bool, check_int


def _check_factory(factory: Any) -> None:
    if not isinstance(factory, ExecutorFactory):
        raise SimharnessTypeError(
            f'factory must be an ExecutorFactory, got {type(factory).__name__} {factory!r}; '
            f'make one with local_executor_factory() or process_executor_factory()',
            expected=ExecutorFactory,
            actual=type(factory),
        )


class _ExecutionContextBase:
    """What the synchronous and asynchronous execution contexts share: a factory's
    stacks, the context's own event loop thread, transforms, limits, `close`.
    Arguments as in `ExecutionContext`.
    """

    def __init__(
        self,
        factory: ExecutorFactory,
        retries: int = 0,
        *,
        max_concurrent_calls: Optional[int] = None,
        transform_args: Optional[Callable[[Any], Any]] = None,
        transform_result: Optional[Callable[[Any], Any]] = None,
        owns_factory: bool = False,
        jit_compile: Optional[bool] = None,
        cardinality_inference_fn: Optional[CardinalityInferenceFn] = None,
        compiler_fn: Optional[Callable[[Any], Any]] = None,
    ):
        _check_factory(factory)
        check_bool('owns_factory', owns_factory)
        if jit_compile is not None:
            check_bool('jit_compile', jit_compile)
        #: XLA forced for every computation run here (None: the rule decides).
        self.jit_compile = jit_compile
        self._owns_factory = owns_factory
        retries = check_int('retries', retries, 0)
        max_concurrent_calls = check_int(
            'max_concurrent_calls', max_concurrent_calls, 1, allow_none=True
        )
        for what, fn in (
            ('transform_args', transform_args),
            ('transform_result', transform_result),
            ('cardinality_inference_fn', cardinality_inference_fn),
            ('compiler_fn', compiler_fn),
        ):
            if fn is not None and not callable(fn):
                raise SimharnessTypeError(
                    f'{what} must be callable or None, got {fn!r} of type {type(fn).__name__}',
                    expected='callable',
                    actual=type(fn),
                )
        self.factory = factory
        self.retries = retries
        #: At most this many computations run at once (None: no limit); more calls wait.
        self.max_concurrent_calls = max_concurrent_calls
        self._transform_args = transform_args
        self._transform_result = transform_result
        self._cardinality_inference_fn = cardinality_inference_fn
        # As TFF: each computation compiled once (cached by the computation).
        self._compiler = None if compiler_fn is None else functools.lru_cache()(compiler_fn)
        self._calls = (
            None
            if max_concurrent_calls is None
            else threading.BoundedSemaphore(max_concurrent_calls)
        )
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._thread: Optional[threading.Thread] = None
        self._finalizer: Optional[weakref.finalize] = None
        self._lock = threading.Lock()
        self._closed = False

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._closed:
                raise ExecutorClosedError('this execution context is closed')
            if self._loop is None:
                self._loop = context_stack.new_event_loop()
                self._thread = threading.Thread(
                    target=self._loop.run_forever, name='simharness-context', daemon=True
                )
                self._thread.start()
                # A context dropped unclosed (TFF's `with_context` never closes the ones it
                # makes) stops its loop thread when collected, and closes a factory of its
                # own (its worker processes stop).
                self._finalizer = weakref.finalize(
                    self,
                    _release_dropped_context,
                    self._loop,
                    self._thread,
                    self.factory if self._owns_factory else None,
                )
            return self._loop

    def _compiled(self, comp: Any) -> Any:
        """`comp` through the context's `compiler_fn` (itself without one).

        Raises:
          SimharnessTypeError: the compiler returned something other than a
            computation of the same parameter type.
        """
        if self._compiler is None:
            return comp
        out = self._compiler(comp)
        ft = getattr(out, 'type_signature', None)
        if not isinstance(ft, T.FunctionType) or not callable(
            getattr(out, 'to_building_block', None)
        ):
            raise SimharnessTypeError(
                f'compiler_fn returned {out!r} of type {type(out).__name__}; expected a '
                'computation (a simharness Computation)',
                expected='Computation',
                actual=type(out),
            )
        param, expected = comp.type_signature.parameter, ft.parameter
        if (param is None) != (expected is None) or (
            param is not None and expected is not None and not expected.is_assignable_from(param)
        ):
            raise SimharnessTypeError(
                f'compiler_fn changed the parameter type from {param} to {ft.parameter}',
                expected=param,
                actual=ft.parameter,
            )
        return out

    def _prepared(self, comp: Any, arg: Any) -> tuple:
        """What both `invoke`s run: ``(computation, argument, cardinalities)`` after the
        context's `transform_args` and `compiler_fn`."""
        if self._transform_args is not None:
            arg = self._transform_args(arg)
        run = self._compiled(comp)
        return run, arg, self._cardinalities(run, arg)

    def _cardinalities(self, comp: Any, arg: Any) -> dict:
        ft: T.FunctionType = comp.type_signature
        if self._cardinality_inference_fn is not None:
            return _checked_cardinalities(
                {} if arg is None else self._cardinality_inference_fn(arg, ft.parameter)
            )
        cardinalities = {}
        if ft.parameter is not None:
            n = infer_cardinality(arg, ft.parameter)
            if n is not None:
                cardinalities[T.CLIENTS] = n
        return cardinalities

    def _submit(self, comp: Any, arg: Any, cardinalities: dict) -> 'concurrent.futures.Future':
        """Starts `comp` on `arg` on the context's loop; the future of its executor value."""
        ft: T.FunctionType = comp.type_signature
        loop = self._ensure_loop()  # first: a closed context builds no stack
        executor = self.factory.create_executor(cardinalities)
        comp_bb = comp.to_building_block()
        if self.jit_compile is not None:
            from simharness.core.xla import force_tree

            comp_bb = force_tree(comp_bb, self.jit_compile)
        return asyncio.run_coroutine_threadsafe(_run(executor, comp_bb, ft, arg), loop)

    def _result(self, comp: Any, value: Any) -> Any:
        out = to_python(value, comp.type_signature.result)
        return out if self._transform_result is None else self._transform_result(out)

    def close(self) -> None:
        """Closes the factory's stacks and stops the context's loop thread."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            loop, thread = self._loop, self._thread
            if self._finalizer is not None:
                self._finalizer.detach()
        try:
            if loop is not None and not loop.is_closed():
                # Tasks of a computation stopped by Ctrl-C or a signal (and the
                # shielded evaluations it started) are cancelled and run to
                # their end: none is left pending to be destroyed with the loop.
                try:
                    asyncio.run_coroutine_threadsafe(_cancel_pending(), loop).result(
                        timeout=_CANCEL_WAIT + 5
                    )
                except Exception:  # a loop that cannot run it: nothing more to do here
                    pass
            closer = getattr(self.factory, 'close', None) if self._owns_factory else None
            if callable(closer):
                closer()  # the stacks, then what the factory owns (a worker pool)
            else:
                self.factory.clean_up_executors()
        finally:
            # Closed already: the interpreter's exit ran the finalizer of a context that a
            # program entered and never left (its `execution_context` closes it after that).
            if loop is not None and not loop.is_closed():
                loop.call_soon_threadsafe(loop.stop)
                assert thread is not None  # started together with the loop
                thread.join(timeout=30)
                loop.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


class ExecutionContext(_ExecutionContextBase, SyncContext):
    """Runs computations synchronously on stacks made by `factory`.

    Args:
      factory: the `ExecutorFactory` that builds stacks per cardinality.
      retries: how many times a computation is run again after a retryable
        failure (such as `WorkerCrashedError`). Computations are pure, so a
        retry gives the same answer.
      max_concurrent_calls: at most this many computations run at once (from
        several threads or tasks); more calls wait. None: no limit.
      transform_args: applied to every argument before it is embedded (TFF's
        ``transform_args``, e.g. ``simharness.tensorflow.transform_args``).
      transform_result: applied to every result (TFF's ``transform_result``).
      owns_factory: `close()` closes the factory itself (a process factory's
        workers stop), not only its stacks: for a factory made for this
        context alone.
      jit_compile: XLA for the TF computations run here: None (default) lets
        the rule of `simharness.core.xla` decide per computation; True or
        False forces it for every computation not forced by its own
        ``tf_computation(..., jit_compile=...)``. The choice travels inside
        each computation, so every worker of every stack makes the same.
      cardinality_inference_fn: TFF's argument: called as ``fn(arg,
        parameter_type)`` (not called without an argument), it returns the
        cardinalities (``{CLIENTS: n}``, or ``{}``) the stack is made for.
        None (default): inferred from the argument's client-placed lists
        (`infer_cardinality`). An argument that disagrees with the
        cardinalities it returns is refused when it is embedded
        (`CardinalityError`).
      compiler_fn: TFF's argument: a function of a computation that returns
        the computation to run in its place (same parameter type), called
        once per computation (cached). The result keeps the containers of the
        original's result type.

    Raises:
      SimharnessTypeError: a wrong type (`factory` not an `ExecutorFactory`,
        a transform not callable).
      SimharnessValueError: `retries` < 0 or `max_concurrent_calls` < 1.
    """

    def invoke(self, comp: Any, arg: Any = None) -> Any:
        """Runs `comp` (a `Computation`) on `arg` and returns Python/numpy results."""
        run, arg, cardinalities = self._prepared(comp, arg)
        attempt = 0
        with self._calls if self._calls is not None else contextlib.nullcontext():
            while True:
                try:
                    fut = self._submit(run, arg, cardinalities)
                    try:
                        value = fut.result()
                    except KeyboardInterrupt:
                        fut.cancel()  # Ctrl-C: stop the computation; the caller closes the stack
                        raise
                    return self._result(comp, value)
                except RetryableError:
                    if attempt >= self.retries:
                        raise
                    attempt += 1


class AsyncExecutionContext(_ExecutionContextBase, AsyncContext):
    """An `ExecutionContext` whose `invoke` is a coroutine (TFF's `AsyncExecutionContext`).

    A computation called while this context is current returns an awaitable:
    ``result = await comp(arg)``. The computation runs on the context's own
    loop thread, so the caller's event loop keeps turning meanwhile; calls
    awaited together run concurrently (up to `max_concurrent_calls`).
    Arguments as in `ExecutionContext`.
    """

    def __init__(
        self,
        factory: ExecutorFactory,
        retries: int = 0,
        *,
        max_concurrent_calls: Optional[int] = None,
        transform_args: Optional[Callable[[Any], Any]] = None,
        transform_result: Optional[Callable[[Any], Any]] = None,
        owns_factory: bool = False,
        jit_compile: Optional[bool] = None,
        cardinality_inference_fn: Optional[CardinalityInferenceFn] = None,
        compiler_fn: Optional[Callable[[Any], Any]] = None,
    ):
        super().__init__(
            factory,
            retries,
            max_concurrent_calls=max_concurrent_calls,
            transform_args=transform_args,
            transform_result=transform_result,
            owns_factory=owns_factory,
            jit_compile=jit_compile,
            cardinality_inference_fn=cardinality_inference_fn,
            compiler_fn=compiler_fn,
        )
        # event loop -> its semaphore (an asyncio semaphore belongs to one loop)
        self._async_calls: 'weakref.WeakKeyDictionary' = weakref.WeakKeyDictionary()

    def _semaphore(self) -> Optional[asyncio.Semaphore]:
        if self.max_concurrent_calls is None:
            return None
        loop = asyncio.get_running_loop()
        with self._lock:
            sem = self._async_calls.get(loop)
            if sem is None:
                sem = self._async_calls[loop] = asyncio.Semaphore(self.max_concurrent_calls)
            return sem

    async def invoke(self, comp: Any, arg: Any = None) -> Any:  # type: ignore[override]
        """Runs `comp` on `arg`; awaits its Python/numpy result."""
        if asyncio.iscoroutine(arg):  # as TFF: an awaitable argument (another call's result)
            arg = await arg
        run, arg, cardinalities = self._prepared(comp, arg)
        sem = self._semaphore()
        async with sem if sem is not None else contextlib.nullcontext():
            attempt = 0
            while True:
                try:
                    fut = self._submit(run, arg, cardinalities)
                    try:
                        value = await await_future(fut)
                    except asyncio.CancelledError:
                        fut.cancel()
                        raise
                    return self._result(comp, value)
                except RetryableError:
                    if attempt >= self.retries:
                        raise
                    attempt += 1


def _release_dropped_context(
    loop: asyncio.AbstractEventLoop, thread: threading.Thread, factory: Optional[ExecutorFactory]
) -> None:
    """Stops the loop thread of a context collected without `close()`, and closes the
    factory it owned."""
    closer = getattr(factory, 'close', None)
    if callable(closer):
        closer()
    if not loop.is_closed():
        loop.call_soon_threadsafe(loop.stop)
    if thread is not threading.current_thread():
        thread.join(timeout=10)
    if not loop.is_running() and not loop.is_closed():
        loop.close()


#: Seconds `close()` waits for cancelled tasks to finish.
_CANCEL_WAIT = 5.0


async def _cancel_pending() -> None:
    me = asyncio.current_task()
    tasks = [t for t in asyncio.all_tasks() if t is not me and not t.done()]
    for t in tasks:
        t.cancel()
    if tasks:
        await asyncio.wait(tasks, timeout=_CANCEL_WAIT)


#: TFF's ``CardinalityInferenceFnType``: ``fn(arg, parameter_type) -> {placement: n}``.
CardinalityInferenceFn = Callable[[Any, Optional[T.Type]], Any]


def _checked_cardinalities(found: Any) -> dict:
    """A `cardinality_inference_fn`'s answer as a dict of placements to counts >= 0.

    Raises:
      SimharnessTypeError: not a mapping of placements to ints.
      SimharnessValueError: a negative count.
    """
    if not isinstance(found, collections.abc.Mapping):
        raise SimharnessTypeError(
            f'cardinality_inference_fn returned {found!r} of type {type(found).__name__}; '
            'expected a mapping of placements to numbers of clients, such as {CLIENTS: 3}',
            expected='Mapping[PlacementLiteral, int]',
            actual=type(found),
        )
    out = {}
    for k, v in found.items():
        if not isinstance(k, T.PlacementLiteral):
            raise SimharnessTypeError(
                f'cardinality_inference_fn returned the key {k!r} of type {type(k).__name__}; '
                'expected a placement (CLIENTS or SERVER)',
                expected=T.PlacementLiteral,
                actual=type(k),
            )
        out[k] = check_int(f'cardinality_inference_fn()[{k}]', v, 0)
    return out


async def _run(executor, comp_bb, ft: T.FunctionType, arg: Any) -> Any:
    CURRENT_INVOCATION.set(object())  # this task's own context: one token per call
    fn = await executor.create_value(comp_bb, ft)
    a = None if ft.parameter is None else await executor.create_value(arg, ft.parameter)
    result = await executor.create_call(fn, a)
    return await result.compute()


def infer_cardinality(value: Any, t: T.Type, where: str = 'the argument') -> Optional[int]:
    """The number of clients implied by `value` of type `t` (None if it does not tell).

    Raises:
      SimharnessTypeError: a `{T}@CLIENTS` value is not a list.
      CardinalityError: two parts of the argument disagree on the number.
    """
    if isinstance(t, T.FederatedType):
        if t.placement is T.CLIENTS and not t.all_equal:
            if not isinstance(value, collections.abc.Sequence) or isinstance(value, (str, bytes)):
                raise SimharnessTypeError(
                    f'{where} has type {t}, which needs a list with one value per client; got '
                    f'{type(value).__name__}',
                    expected=t,
                    actual=type(value).__name__,
                )
            return len(value)
        return None
    if isinstance(t, T.StructType) and any(T.contains(e, (T.FederatedType,)) for e in t):
        s = from_container(value, t)
        found: Optional[int] = None
        found_at = ''
        for i, ((name, et), v) in enumerate(zip(t.items(), s)):
            label = f'{where}[{name or i}]'
            n = infer_cardinality(v, et, label)
            if n is None:
                continue
            if found is not None and n != found:
                raise CardinalityError(
                    f'Conflicting cardinalities for CLIENTS: {label} holds a list of {n} values, '
                    f'but {found_at} holds {found}: every client-placed value must have one '
                    f'entry per client',
                    expected=found,
                    actual=n,
                )
            found, found_at = n, label
        return found
    return None


def to_python(value: Any, t: T.Type) -> Any:
    """Converts an executor result into numpy values in the result type's containers."""
    if isinstance(t, T.FederatedType):
        if t.placement is T.CLIENTS and not t.all_equal:
            return [to_python(v, t.member) for v in value]
        return to_python(value, t.member)
    if isinstance(t, T.StructType):
        if not isinstance(value, Struct):
            value = from_container(value, t)
        return to_container(Struct((n, to_python(v, e)) for (n, e), v in zip(t.items(), value)), t)
    if isinstance(t, T.SequenceType):
        if hasattr(value, 'as_numpy_iterator'):
            # Elements in the containers of the element type (a dataset that came
            # back from a worker has lost a namedtuple's class, say).
            elements = [
                to_python(map_nest(_scalar, e), t.element) for e in value.as_numpy_iterator()
            ]
        else:
            elements = [to_python(v, t.element) for v in value]
        # A `tf.data.Dataset`, as TFF's contexts return a sequence (checked with TFF 0.87).
        from simharness.executors.leaf.tf_values import dataset_from_value  # TF: on first use

        return dataset_from_value(elements, t)
    if hasattr(value, 'numpy'):
        adopted = claim_adopted(value)
        if adopted is not None:
            # A reduction's result, a fresh array the tensor shares: the caller gets it, no copy.
            value = adopted
        else:
            value = tensor_to_numpy(value)  # a read-only view of the tensor, or `.numpy()`'s own
            if isinstance(value, np.ndarray) and not value.flags.writeable:
                # The caller owns the result: a copy, into a reused buffer when big (core.buffers).
                value = pooled_copy(value)
    if isinstance(value, np.ndarray) and value.ndim == 0:
        return value[()]
    return value


def _scalar(e: Any) -> Any:
    return e[()] if isinstance(e, np.ndarray) and e.ndim == 0 else e


# ---------------------------------------------------------------- current context
# The current and default contexts live in core's context stack
# (`simharness.core.context_stack`); this layer makes the contexts and installs them.


def _make_local_context() -> ExecutionContext:
    # Imported on first use: the stacks import TensorFlow (a plain `import simharness` does not).
    from simharness.stacks import local_executor_factory

    return ExecutionContext(local_executor_factory())


context_stack.set_default_maker(_make_local_context)


def get_context() -> ExecutionContext:
    """The context computations run in: the innermost `execution_context`, else the default."""
    return cast(ExecutionContext, context_stack.get_context())


def set_default_executor(factory: Optional[ExecutorFactory] = None, retries: int = 0) -> None:
    """Sets the process-wide default stack (None: back to a local thread stack).

    The previous default context is closed.

    Raises:
      SimharnessTypeError: `factory` is not an `ExecutorFactory` or None, or
        `retries` is not an int.
      SimharnessValueError: `retries` < 0.
    """
    if factory is not None:
        _check_factory(factory)
    retries = check_int('retries', retries, 0)
    new = None if factory is None else ExecutionContext(factory, retries=retries)
    context_stack.replace_default(new, owned=True)


def _check_context(ctx: Any) -> None:
    # A `SyncContext` / `AsyncContext` of the user's (TFF's base classes), a
    # `simharness.program.FederatedContext`: anything with an `invoke` method is one,
    # as core's context stack needs (a `close`, if it has one, is called when an
    # owned default is replaced).
    if not isinstance(ctx, (SyncContext, AsyncContext)) and (
        isinstance(ctx, type) or not callable(getattr(ctx, 'invoke', None))
    ):
        raise SimharnessTypeError(
            f'ctx must be an execution context (a SyncContext or AsyncContext, or an object '
            f'with an invoke(comp, arg) method), got {type(ctx).__name__} {ctx!r}; make one '
            f'with ExecutionContext(factory)',
            expected=ExecutionContext,
            actual=type(ctx),
        )


def set_default_context(ctx: Optional[ExecutionContext] = None) -> None:
    """Makes `ctx` the process-wide default context (TFF's `set_default_context`).

    None: back to a local thread stack (made on first use). A previous
    default that simharness made is closed; one you passed here is left
    open (close it yourself).

    Raises:
      SimharnessTypeError: `ctx` is not an `ExecutionContext` or None.
    """
    if ctx is not None:
        _check_context(ctx)
    context_stack.replace_default(ctx, owned=False)


class RuntimeErrorContext(SyncContext):
    """A context that refuses to run computations (TFF's `RuntimeErrorContext`): the
    default after `set_no_default_context()`, so that a computation called outside
    any installed context fails instead of running on a default stack."""

    def invoke(self, comp: Any, arg: Any) -> Any:
        """Raises `ContextError` (a `RuntimeError`)."""
        del arg
        name = getattr(comp, '__name__', None) or type(comp).__name__
        raise ContextError(
            f'No default context installed: {name} was called outside any installed context '
            'after set_no_default_context(); install one (get_context_stack().install(ctx), '
            'execution_context(...)) or set a default (set_default_context(ctx))'
        )


def set_no_default_context() -> None:
    """Makes calling a computation outside an installed context an error (TFF's
    `set_no_default_context`): the default becomes a `RuntimeErrorContext`. A previous
    default that simharness made is closed. `set_default_context(None)` goes back to a
    local thread stack."""
    context_stack.replace_default(RuntimeErrorContext(), owned=False)


class ContextStack:
    """TFF's context stack, over simharness's current and default contexts.

    `current` is the context computations run in; `install(ctx)` makes
    `ctx` current inside a `with` block (in this thread or task) and leaves
    it open on exit; `set_default_context(ctx)` replaces the bottom of the
    stack. It holds no state of its own.
    """

    @property
    def current(self) -> ExecutionContext:
        """The innermost installed context, else the default one."""
        return get_context()

    @contextlib.contextmanager
    def install(self, ctx: ExecutionContext) -> Iterator[ExecutionContext]:
        """Makes `ctx` current inside the `with` block.

        Raises:
          SimharnessTypeError: `ctx` is not an `ExecutionContext`.
        """
        _check_context(ctx)
        with context_stack.install(ctx):
            yield ctx

    def set_default_context(self, ctx: Optional[ExecutionContext] = None) -> None:
        """As the module-level `set_default_context`."""
        set_default_context(ctx)


def get_context_stack() -> ContextStack:
    """TFF's `get_context_stack()`: `.current`, `.install(ctx)`, `.set_default_context(ctx)`."""
    return ContextStack()


@contextlib.contextmanager
def execution_context(
    factory: ExecutorFactory,
    retries: int = 0,
    close: bool = True,
    jit_compile: Optional[bool] = None,
) -> Iterator[ExecutionContext]:
    """Runs computations inside the `with` block on stacks of `factory`.

    Args:
      factory: an `ExecutorFactory` (e.g. `process_executor_factory(...)`).
      retries: as in `ExecutionContext`.
      close: close the context (and the factory's stacks) on exit.
      jit_compile: as in `ExecutionContext` (XLA forced on or off; None: the rule).

    Raises:
      SimharnessTypeError: a wrong type (`close` must be a bool).
      SimharnessValueError: `retries` < 0.
    """
    check_bool('close', close)
    ctx = ExecutionContext(factory, retries=retries, jit_compile=jit_compile)
    try:
        with context_stack.install(ctx):
            yield ctx
    finally:
        if close:
            ctx.close()
