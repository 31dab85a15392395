"""The executor interfaces: `Executor`, `ExecutorValue`, `BatchExecutor`, `ExecutorFactory`.

`Executor` is TFF's interface (`create_value`, `create_call`,
`create_struct`, `create_selection`, `close`). `BatchExecutor` is our
addition for the executors that host clients (leaf and delegating ones):
each method covers a whole block of clients in one operation, which is what
lets a worker process take one control message per operation instead of
one per client, and run a block of clients through one TF call.
"""

from __future__ import annotations

import abc
import asyncio
import contextvars
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from simharness.core import types as T
from simharness.core.reduction import Partial, ReductionKind
from simharness.core.structure import Struct, pack_as
from simharness.errors import SimharnessTypeError, SimharnessValueError
from simharness.runtime.stream_plan import PlanNode, PlanReduction


#: The invocation (one `ExecutionContext.invoke`) the current task works for: a
#: token the context sets, so that an executor shared by calls running at once
#: (several threads on one context) can tell their requests apart.
CURRENT_INVOCATION: contextvars.ContextVar[Optional[object]] = contextvars.ContextVar(
    'simharness_invocation', default=None
)


class ExecutorValue(abc.ABC):
    """A value embedded in an executor."""

    @property
    @abc.abstractmethod
    def type_signature(self) -> T.Type:
        """The type of this value."""

    @abc.abstractmethod
    async def compute(self) -> Any:
        """Materializes the value in the calling process (tensors, Structs, lists)."""


class Executor(abc.ABC):
    """Abstract executor, as in TFF's `tff.framework.Executor`."""

    @abc.abstractmethod
    async def create_value(self, value: Any, type_spec: Any = None) -> ExecutorValue:
        """Embeds `value` (a Python value or a building block) of `type_spec`."""

    @abc.abstractmethod
    async def create_call(
        self, comp: ExecutorValue, arg: Optional[ExecutorValue] = None
    ) -> ExecutorValue:
        """Calls the functional value `comp` on `arg`."""

    @abc.abstractmethod
    async def create_struct(self, elements: Any) -> ExecutorValue:
        """A struct of embedded values (a list of values or (name, value) pairs)."""

    @abc.abstractmethod
    async def create_selection(
        self, source: ExecutorValue, index: Optional[int] = None, name: Optional[str] = None
    ) -> ExecutorValue:
        """Element `index` (or the element named `name`, as in TFF) of the struct value `source`."""

    @abc.abstractmethod
    def close(self) -> None:
        """Releases the executor's resources. Idempotent."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def selection_index(source: ExecutorValue, index: Optional[int], name: Optional[str]) -> int:
    """The index a `create_selection(source, index=..., name=...)` call selects (TFF's API).

    Raises:
      SimharnessValueError: neither or both of `index` and `name` given, or no element
        named `name` in the struct (or federated struct) type of `source` (as TFF).
      SimharnessTypeError: `source` is not a struct.
    """
    if (index is None) == (name is None):
        raise SimharnessValueError(
            f'create_selection takes exactly one of index and name, got '
            f'index={index!r}, name={name!r}'
        )
    if name is None:
        return index  # type: ignore[return-value]  # not None: checked above
    t = source.type_signature
    if isinstance(t, T.FederatedType):
        t = t.member
    if not isinstance(t, T.StructType):
        raise SimharnessTypeError(f'cannot select {name!r} from a value of type {t}', actual=t)
    if name not in t.names:
        raise SimharnessValueError(
            f'a value of type {t} has no element named {name!r}; its '
            f'names are {[n for n in t.names if n is not None]}'
        )
    return t.names.index(name)


def normalize_struct_elements(elements: Any) -> List[Tuple[Optional[str], Any]]:
    """Accepts a list of values, a list of (name, value) pairs or a Struct."""
    if isinstance(elements, Struct):
        return elements.items()
    if isinstance(elements, dict):
        return list(elements.items())
    out = []
    for e in elements:
        if isinstance(e, tuple) and len(e) == 2 and (e[0] is None or isinstance(e[0], str)):
            out.append(e)
        else:
            out.append((None, e))
    return out


class BatchExecutor(Executor):
    """An executor that hosts clients and works on blocks of them at once.

    All list arguments and results are in client order. Reductions return a
    `Partial` of the canonical reduction tree (see `simharness.core.reduction`)
    whose values are numpy arrays (or Structs of them), so that partials can
    travel between processes.

    Optional abilities are methods with defaults here (callers ask, never probe
    with `hasattr`): `worker_id` (None: the executor runs in this process),
    `can_share` (False: values are copied between executors), `share_value`
    (the value itself: nothing prepared once for several executors), `partial_joiner`
    (None: partials join only in `create_reduction_result`), `can_stream`
    (True when a subclass implements `create_streamed_reductions`).
    """

    @property
    def worker_id(self) -> Optional[Union[int, str]]:
        """The worker that holds this executor's values; None when they live in this process."""
        return None

    def can_share(self, other: Any) -> bool:
        """Whether `other` can be used here as it is, without a copy.

        `other` is a value of another executor of this kind (delegating
        executors) or another executor (leaf executors: their values are
        interchangeable). The default: never (values are copied).
        """
        return False

    def share_value(self, value: Any, type_spec: Any, shared: Dict[Any, Any]) -> Any:
        """`value` as `create_value` takes it, prepared once for every executor of a kind.

        For a value given to several executors (a broadcast): `shared` holds
        what was prepared for this value so far (one dict per value, dropped
        after), and an executor kind that can reuse work across executors (a
        conversion, an encoding) keeps its form there. The default: `value`.
        """
        return value

    def partial_joiner(
        self, kind: ReductionKind, total: int
    ) -> Optional[Callable[[Partial, Partial], Partial]]:
        """How two adjacent partials of a `kind` reduction over `total` clients join into
        one, as `create_reduction_result` would join them (same additions, same bits), so
        that a caller may join them as they arrive; None (the default): only
        `create_reduction_result` joins them."""
        return None

    @property
    def can_stream(self) -> bool:
        """Whether this executor computes map -> reduce plans (`create_streamed_reductions`)."""
        return type(self).create_streamed_reductions is not BatchExecutor.create_streamed_reductions

    async def create_streamed_reductions(
        self,
        nodes: Sequence[PlanNode],
        reductions: Sequence[PlanReduction],
        start: int,
        count: int,
        total: int,
        slice_size: Optional[int] = None,
    ) -> List[Partial]:
        """Computes the plan `nodes` slice by slice, folding every slice into `reductions`.

        The plan's node kinds and `PlanReduction` are `simharness.runtime.stream_plan`'s.
        Only executors whose `can_stream` is True implement it (see
        `EagerTFExecutor.create_streamed_reductions`).

        Raises:
          NotImplementedError: this executor does not stream.
        """
        raise NotImplementedError(
            f'{type(self).__name__} does not stream map -> reduce plans (can_stream is False)'
        )

    async def create_values(self, values: Sequence[Any], type_spec: Any) -> Sequence[ExecutorValue]:
        """Embeds many values of one type."""
        return list(await asyncio.gather(*[self.create_value(v, type_spec) for v in values]))

    async def create_values_stacked(
        self, leaves: Sequence[Any], type_spec: Any
    ) -> Sequence[ExecutorValue]:
        """Embeds n values of one type given leaf by leaf: arrays ``[n, ...]`` of the type's
        leaves in `flatten` order (checked already: `core.batching.stack_python_values`)."""
        t = T.to_type(type_spec)
        n = len(leaves[0]) if leaves else 0
        return await self.create_values([pack_as(t, [x[i] for x in leaves]) for i in range(n)], t)

    async def compute_many(self, values: Sequence[ExecutorValue]) -> List[Any]:
        """Materializes many values."""
        return list(await asyncio.gather(*[v.compute() for v in values]))

    @abc.abstractmethod
    async def create_map(
        self,
        fn: ExecutorValue,
        args: Optional[Sequence[ExecutorValue]],
        count: Optional[int] = None,
    ) -> Sequence[ExecutorValue]:
        """`fn(arg)` for every arg (or `count` calls of a no-parameter `fn`)."""

    @abc.abstractmethod
    async def create_structs(
        self, rows: Sequence[Sequence[ExecutorValue]], names: Sequence[Optional[str]]
    ) -> Sequence[ExecutorValue]:
        """One struct per row (client), with element `names`."""

    @abc.abstractmethod
    async def create_selections(
        self, sources: Sequence[ExecutorValue], index: int
    ) -> Sequence[ExecutorValue]:
        """Element `index` of every struct in `sources`."""

    @abc.abstractmethod
    async def create_partial_reduction(
        self,
        kind: ReductionKind,
        values: Sequence[object],
        start: int,
        total: int,
        params: Dict[str, object],
    ) -> Partial:
        """Reduces the clients ``[start, start + len(values))`` of a reduction over `total`.

        Args:
          kind: what the reduction computes (`ReductionKind`: SUM, MEAN, WEIGHTED_MEAN,
            MIN, MAX, AGGREGATE, SECURE_SUM_BITWIDTH or SECURE_MODULAR_SUM).
          values: the clients' values (pairs (value, weight) for WEIGHTED_MEAN).
          start: the index of the first client.
          total: the number of clients of the whole reduction.
          params: 'zero', 'accumulate', 'merge' values of this executor for
            AGGREGATE; 'bitwidth' or 'modulus' for the secure sums.
        """

    @abc.abstractmethod
    async def create_reduction_result(
        self,
        kind: ReductionKind,
        partials: Sequence[Partial],
        total: int,
        params: Dict[str, Any],
        result_type: T.Type,
    ) -> ExecutorValue:
        """Combines the partials of all blocks into the reduced value."""

    @abc.abstractmethod
    async def create_sequence_op(
        self, op: str, values: Sequence[ExecutorValue], params: Dict[str, Any]
    ) -> Sequence[ExecutorValue]:
        """'sequence_map' (params fn), 'sequence_reduce' (zero, op) or 'sequence_sum'."""

    @abc.abstractmethod
    async def create_select(
        self,
        keys: Sequence[ExecutorValue],
        server_value: ExecutorValue,
        select_fn: ExecutorValue,
        element_type: T.Type,
    ) -> Sequence[ExecutorValue]:
        """For each client's keys, a sequence of `select_fn(server_value, key)`."""


class ExecutorFactory(abc.ABC):
    """Creates executor stacks for given cardinalities (TFF's ExecutorFactory)."""

    @abc.abstractmethod
    def create_executor(self, cardinalities: Dict[T.PlacementLiteral, int]) -> Executor:
        """An executor for `cardinalities` (e.g. ``{CLIENTS: 10}``), possibly cached."""

    @abc.abstractmethod
    def clean_up_executors(self) -> None:
        """Closes every executor this factory has created."""

    @property
    def default_num_clients(self) -> Optional[int]:
        """The number of clients used when the arguments do not tell."""
        return None

    def close(self) -> None:
        self.clean_up_executors()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
