"""`simharness.framework`: executors, factories and contexts, named as in `tff.framework`."""

import asyncio
import contextlib
import functools
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, Optional, Sequence, Union

from simharness.core.building_blocks import (
    Block,
    Call,
    CompiledComputation,
    ComputationBuildingBlock,
    Data,
    Intrinsic,
    Lambda,
    Placement,
    Reference,
    Selection,
)
from simharness.core.building_blocks import Struct as StructBlock
from simharness.core.building_blocks import IntrinsicDef, uri_to_intrinsic_def

# `federated_language.framework`'s names for the same classes and helpers (a TFF 0.88 program
# writes `federated_language.framework.Computation`, `...framework.Struct` for the building
# block, `...framework.is_structure_of_floats(type)`).
from simharness.core.building_blocks import Struct
from simharness.core.computation import Computation, ConcreteComputation, PolymorphicComputation
from simharness.core.types import PlacementLiteral, infer_type
from simharness.aggregators.factory import (
    is_structure_of_floats,
    is_structure_of_integers,
    is_structure_of_tensors,
)
from simharness.context import (
    ContextStack,
    RuntimeErrorContext,
    get_context_stack,
    set_default_context,
    set_no_default_context,
)
from simharness.context import CardinalityInferenceFn
from simharness.core.context_stack import AsyncContext, SyncContext
from simharness.mergeable import (
    MergeableCompExecutionContext,
    MergeableCompForm,
    type_to_py_container,
)
from simharness.context import AsyncExecutionContext as _AsyncExecutionContext
from simharness.context import ExecutionContext as _ExecutionContext
from simharness.core import types as _T
from simharness.core.reduction import CHUNK as AGGREGATION_CHUNK
from simharness.errors import ContextError, RetryableError, SimharnessTypeError
from simharness.validation import check_bool, check_int
from simharness.executors.base import BatchExecutor, Executor, ExecutorFactory, ExecutorValue
from simharness.executors.leaf.eager_tf import EagerTFExecutor
from simharness.executors.federating import FederatingExecutor, FederatingStrategy
from simharness.executors.reference_resolving import LambdaExecutor, ReferenceResolvingExecutor
from simharness.executors.strategy.resolving_strategy import FederatedResolvingStrategy
from simharness.executors.thread_delegating import ThreadDelegatingExecutor
from simharness.executors.worker_delegating import WorkerDelegatingExecutor
from simharness.local_cpp import shared_local_process_factory
from simharness.stacks import (
    DEFAULT_MAX_CACHED_STACKS,
    CachingExecutorFactory,
    WorkerGroupExecutorFactory,
    local_executor_factory,
    process_executor_factory,
    thread_debugging_executor_factory,
)
from simharness.executors.remote import RemoteExecutor
from simharness.hosts.grpc_service import ExecutorServer, ExecutorService, start_executor_service
from simharness.runtime.grpc.client import RemoteServices
from simharness.stacks import remote_executor_factory
from simharness.stacks import ray_executor_factory  # Ray itself: on first use

if TYPE_CHECKING:
    from simharness.runtime.local.pool import WorkerPool


class ExecutionContext(_ExecutionContext):
    """`simharness.ExecutionContext` with TFF's argument names.

    ``ExecutionContext(executor_fn=factory, compiler_fn=None)`` as in `tff.framework`
    (`compiler_fn`: as `SyncExecutionContext`'s).

    Raises:
      SimharnessTypeError: no factory, one that is not an `ExecutorFactory`, or a
        `compiler_fn` that is not callable.
    """

    def __init__(
        self,
        executor_fn: Optional[ExecutorFactory] = None,
        compiler_fn: Optional[Callable[..., Any]] = None,
        *,
        retries: int = 0,
        factory: Optional[ExecutorFactory] = None,
    ):
        super().__init__(
            _chosen_factory(executor_fn, factory), retries=retries, compiler_fn=compiler_fn
        )


class SyncExecutionContext(ExecutionContext):
    """TFF's `SyncExecutionContext(executor_fn, compiler_fn=None, *, transform_args=None,
    transform_result=None, cardinality_inference_fn=...)`: `ExecutionContext` with TFF's
    keyword arguments (`cardinality_inference_fn` None: inferred from the argument's
    client-placed lists, as TFF's `infer_cardinalities`; `compiler_fn`: a function of a
    computation returning the computation to run in its place, applied once per
    computation, such as `simharness.backends.native.transform_to_native_form`).

    Raises:
      SimharnessTypeError: no factory, or a transform or compiler that is not callable.
    """

    def __init__(
        self,
        executor_fn: Optional[ExecutorFactory] = None,
        compiler_fn: Optional[Callable[..., Any]] = None,
        *,
        transform_args: Optional[Callable[[Any], Any]] = None,
        transform_result: Optional[Callable[[Any], Any]] = None,
        cardinality_inference_fn: Optional[CardinalityInferenceFn] = None,
        retries: int = 0,
        factory: Optional[ExecutorFactory] = None,
    ):
        _ExecutionContext.__init__(
            self,
            _chosen_factory(executor_fn, factory),
            retries,
            transform_args=transform_args,
            transform_result=transform_result,
            cardinality_inference_fn=cardinality_inference_fn,
            compiler_fn=compiler_fn,
        )


class AsyncExecutionContext(_AsyncExecutionContext):
    """TFF's `AsyncExecutionContext`: a computation called in it returns an awaitable.

    Arguments as in `SyncExecutionContext`.
    """

    def __init__(
        self,
        executor_fn: Optional[ExecutorFactory] = None,
        compiler_fn: Optional[Callable[..., Any]] = None,
        *,
        transform_args: Optional[Callable[[Any], Any]] = None,
        transform_result: Optional[Callable[[Any], Any]] = None,
        cardinality_inference_fn: Optional[CardinalityInferenceFn] = None,
        retries: int = 0,
        factory: Optional[ExecutorFactory] = None,
    ):
        super().__init__(
            _chosen_factory(executor_fn, factory),
            retries,
            transform_args=transform_args,
            transform_result=transform_result,
            cardinality_inference_fn=cardinality_inference_fn,
            compiler_fn=compiler_fn,
        )


def with_context(
    context_fn: Callable[[], Union[SyncContext, AsyncContext]],
    environment_fn: Optional[
        Callable[[], Sequence[contextlib.AbstractContextManager[None]]]
    ] = None,
):
    """`federated_language.framework.with_context`: a decorator that runs a (test) function
    with the context ``context_fn()`` installed.

    The context is made anew on each call of the decorated function and installed for
    that call alone (a coroutine function: for its whole await). As in TFF it is not
    closed afterwards: a context that holds resources (worker processes) is closed when
    it is collected; close it yourself where that matters. `environment_fn` (TFF's), when
    given, makes context managers entered inside the installed context for the call.

    Raises:
      SimharnessTypeError: `context_fn` is not callable.
    """
    if not callable(context_fn):
        raise SimharnessTypeError(
            f'with_context needs a callable that makes a context, got {context_fn!r} of type '
            f'{type(context_fn).__name__}',
            expected='callable',
            actual=type(context_fn),
        )

    @contextlib.contextmanager
    def _installed() -> Iterator[None]:
        with get_context_stack().install(context_fn()):
            if environment_fn is None:
                yield
                return
            with contextlib.ExitStack() as stack:
                for manager in environment_fn():
                    stack.enter_context(manager)
                yield

    def decorator(fn):
        if asyncio.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args, **kwargs):
                with _installed():
                    return await fn(*args, **kwargs)

            return async_wrapper

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with _installed():
                return fn(*args, **kwargs)

        return wrapper

    return decorator


def _chosen_factory(executor_fn: Any, factory: Any) -> ExecutorFactory:
    if executor_fn is not None and factory is not None:
        raise SimharnessTypeError('give executor_fn or factory, not both')
    chosen = executor_fn if executor_fn is not None else factory
    if chosen is None:
        raise SimharnessTypeError('an execution context needs an executor factory (executor_fn=)')
    return chosen


def local_cpp_executor_factory(
    default_num_clients: int = 0,
    max_concurrent_computation_calls: int = -1,
    stream_structs: bool = False,
) -> 'WorkerGroupExecutorFactory[WorkerPool]':
    """TFF's local C++ executor factory, as `simharness.backends.native` maps it: a process
    stack with `default_num_clients`, on one worker pool (a worker per usable core) that
    every open factory made here shares, as TFF's local executors all run in the one
    process that makes them.

    `max_concurrent_computation_calls` is a context's limit in simharness (see
    `backends.native`); here it is checked and otherwise unused, as is
    `stream_structs`.

    Raises:
      SimharnessTypeError: an argument of the wrong type.
      SimharnessValueError: `default_num_clients` < 0.
    """
    check_int('max_concurrent_computation_calls', max_concurrent_computation_calls)
    check_bool('stream_structs', stream_structs)
    n = check_int('default_num_clients', default_num_clients, 0)
    return shared_local_process_factory(n)


class ResourceManagingExecutorFactory(CachingExecutorFactory):
    """TFF's factory around a function that builds a stack for cardinalities.

    Args:
      executor_stack_fn: called as ``executor_stack_fn({CLIENTS: n})``; returns
        an `Executor` for n clients.
      ensure_closed: executors the stacks share, closed by
        `clean_up_executors` (TFF's argument).
      max_cached_stacks: stacks kept alive (older cardinalities are closed).

    Raises:
      SimharnessTypeError: `executor_stack_fn` is not callable, or returns
        something other than an `Executor`.
    """

    def __init__(
        self,
        executor_stack_fn: Callable[[Dict[Any, int]], Executor],
        ensure_closed: Optional[Sequence[Executor]] = None,
        max_cached_stacks: int = DEFAULT_MAX_CACHED_STACKS,
    ):
        if not callable(executor_stack_fn):
            raise SimharnessTypeError(
                f'executor_stack_fn must be a callable of cardinalities, got '
                f'{executor_stack_fn!r} of type {type(executor_stack_fn).__name__}',
                expected='callable',
                actual=type(executor_stack_fn),
            )
        closers = list(ensure_closed or ())
        for ex in closers:  # duck-typed, as TFF: anything with a close()
            if not callable(getattr(ex, 'close', None)):
                raise SimharnessTypeError(
                    f'ensure_closed holds {ex!r}, which has no close()',
                    expected=Executor,
                    actual=type(ex),
                )
        self._executor_stack_fn = executor_stack_fn
        self._ensure_closed = closers
        super().__init__(self._build_from_fn, None, max_cached_stacks)

    def _build_from_fn(self, cardinalities: Dict[Any, int]) -> Executor:
        ex = self._executor_stack_fn(cardinalities)
        if not isinstance(ex, Executor):
            raise SimharnessTypeError(
                f'executor_stack_fn returned {ex!r} of type {type(ex).__name__}, not an Executor',
                expected=Executor,
                actual=type(ex),
            )
        return ex

    def create_executor(self, cardinalities: Dict[Any, int]) -> Executor:
        """The stack for `cardinalities` (all placements, as TFF keys its cache), made by
        ``executor_stack_fn`` on the first request; CLIENTS defaults to
        `default_num_clients` (else 1)."""
        if not isinstance(cardinalities, dict):
            raise SimharnessTypeError(
                f'cardinalities must be a dict, got {cardinalities!r}',
                expected=dict,
                actual=type(cardinalities),
            )
        full = dict(cardinalities)
        if full.get(_T.CLIENTS) is None:
            default = self.default_num_clients
            full[_T.CLIENTS] = 1 if default is None else default
        key = tuple(sorted((getattr(k, 'uri', str(k)), v) for k, v in full.items()))
        with self._lock:
            ex = self._stacks.get(key)
            if ex is not None:
                self._stacks.move_to_end(key)
                return ex
            ex = self._build_from_fn(full)
            self._stacks[key] = ex
            evicted = []
            while len(self._stacks) > self._max:
                evicted.append(self._stacks.popitem(last=False)[1])
        for old in evicted:
            old.close()
        return ex

    def clean_up_executors(self) -> None:
        try:
            super().clean_up_executors()
        finally:
            for ex in self._ensure_closed:
                ex.close()


def _intrinsic(uri: str) -> IntrinsicDef:
    found = uri_to_intrinsic_def(uri)
    assert found is not None, uri  # registered by core.building_blocks at import
    return found


# TFF 0.87's `tff.framework` intrinsic definitions (compilers and executor-level code compare
# an `Intrinsic`'s ``uri`` with these ``.uri``).
FEDERATED_AGGREGATE = _intrinsic('federated_aggregate')
FEDERATED_APPLY = _intrinsic('federated_apply')
FEDERATED_BROADCAST = _intrinsic('federated_broadcast')
FEDERATED_EVAL_AT_CLIENTS = _intrinsic('federated_eval_at_clients')
FEDERATED_EVAL_AT_SERVER = _intrinsic('federated_eval_at_server')
FEDERATED_MAP = _intrinsic('federated_map')
FEDERATED_MAP_ALL_EQUAL = _intrinsic('federated_map_all_equal')
FEDERATED_SUM = _intrinsic('federated_sum')
FEDERATED_VALUE_AT_CLIENTS = _intrinsic('federated_value_at_clients')
FEDERATED_VALUE_AT_SERVER = _intrinsic('federated_value_at_server')
FEDERATED_ZIP_AT_CLIENTS = _intrinsic('federated_zip_at_clients')
FEDERATED_ZIP_AT_SERVER = _intrinsic('federated_zip_at_server')


__all__ = [
    'FEDERATED_AGGREGATE',
    'FEDERATED_APPLY',
    'FEDERATED_BROADCAST',
    'FEDERATED_EVAL_AT_CLIENTS',
    'FEDERATED_EVAL_AT_SERVER',
    'FEDERATED_MAP',
    'FEDERATED_MAP_ALL_EQUAL',
    'FEDERATED_SUM',
    'FEDERATED_VALUE_AT_CLIENTS',
    'FEDERATED_VALUE_AT_SERVER',
    'FEDERATED_ZIP_AT_CLIENTS',
    'FEDERATED_ZIP_AT_SERVER',
    'IntrinsicDef',
    'RetryableError',
    'Computation',
    'ConcreteComputation',
    'PolymorphicComputation',
    'PlacementLiteral',
    'Struct',
    'infer_type',
    'is_structure_of_floats',
    'is_structure_of_integers',
    'is_structure_of_tensors',
    'AsyncContext',
    'AsyncExecutionContext',
    'ContextError',
    'SyncContext',
    'SyncExecutionContext',
    'local_cpp_executor_factory',
    'with_context',
    'RuntimeErrorContext',
    'set_no_default_context',
    'MergeableCompExecutionContext',
    'MergeableCompForm',
    'type_to_py_container',
    'AGGREGATION_CHUNK',
    'BatchExecutor',
    'Block',
    'CachingExecutorFactory',
    'Call',
    'CompiledComputation',
    'ComputationBuildingBlock',
    'ContextStack',
    'Data',
    'EagerTFExecutor',
    'ExecutionContext',
    'Executor',
    'ExecutorFactory',
    'ExecutorValue',
    'FederatedResolvingStrategy',
    'FederatingExecutor',
    'FederatingStrategy',
    'Intrinsic',
    'Lambda',
    'Placement',
    'Reference',
    'LambdaExecutor',
    'ReferenceResolvingExecutor',
    'ResourceManagingExecutorFactory',
    'Selection',
    'StructBlock',
    'ThreadDelegatingExecutor',
    'WorkerDelegatingExecutor',
    'get_context_stack',
    'local_executor_factory',
    'process_executor_factory',
    'set_default_context',
    'thread_debugging_executor_factory',
    'RemoteExecutor',
    'ExecutorService',
    'ExecutorServer',
    'start_executor_service',
    'RemoteServices',
    'remote_executor_factory',
    'ray_executor_factory',
]
