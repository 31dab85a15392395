"""Plans and helpers of `FederatedResolvingStrategy` (see `resolving_strategy`).

`ClientGroups` describes the clients' groups (frozen: executors, sizes, starts);
`Lazy` describes client values not computed yet (`LazyMap`, `LazySelect`,
`LazyZip`, clients by reference: `LazySourced`, or the driver's values not sent yet:
`LazyLocal`, `LazyShared`), `Leaf` wraps computed ones
inside a plan, `StreamBatch` gathers the reductions of one invocation that
stream together; `targets_from_mapping` and
`hosting_child` read TFF's ``{SERVER: ex, CLIENTS: [...]}`` strategy targets;
`secure_params` gives a secure sum's per-leaf bounds and moduli.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from simharness.core import types as T
from simharness.core.reduction import Partial, ReductionKind
from simharness.core.structure import broadcast_static, pack_as
from simharness.errors import SimharnessTypeError, SimharnessValueError
from simharness.executors.base import BatchExecutor, ExecutorValue

ClientsPayload = List[List[ExecutorValue]]


@dataclasses.dataclass(frozen=True)
class ClientGroups:
    """The clients in contiguous groups: group g, ``[starts[g], starts[g] + sizes[g])``, is
    hosted by `executors[g]`; `num_clients` in all."""

    executors: Tuple[BatchExecutor, ...]
    sizes: Tuple[int, ...]
    starts: Tuple[int, ...]
    num_clients: int

    @classmethod
    def of(cls, client_groups: Sequence[Tuple[BatchExecutor, int]]) -> 'ClientGroups':
        """The groups of ``[(executor, number of clients), ...]``, in client order."""
        sizes = tuple(int(n) for _, n in client_groups)
        return cls(
            tuple(ex for ex, _ in client_groups),
            sizes,
            tuple(sum(sizes[:i]) for i in range(len(sizes))),
            sum(sizes),
        )


class Lazy:
    """Client values described, not computed: a map, a selection, a zip, or clients by reference.

    One subclass per kind (`LazyMap`, `LazySelect`, `LazyZip`, `LazySourced`). `srcs`
    are its sources (another `Lazy` or a `Leaf`); `payload` caches the materialized
    values; `streamed` says a stream batch consumed it.
    """

    __slots__ = ('srcs', 'payload', 'streamed', '_lock')

    def __init__(self, srcs: Sequence[Any] = ()):
        self.srcs = list(srcs)
        self.payload: Optional[ClientsPayload] = None
        self.streamed = False
        self._lock: Optional[asyncio.Lock] = None

    def lock(self) -> asyncio.Lock:
        """The lock under which the plan is computed once (made when first asked for)."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        return self._lock


class LazyMap(Lazy):
    """`fn` (an unplaced tf_computation value) of each client's value of `src`."""

    __slots__ = ('fn',)

    def __init__(self, src: Any, fn: Any):
        super().__init__([src])
        self.fn = fn


class LazySelect(Lazy):
    """Element `index` of each client's struct value of `src`."""

    __slots__ = ('index',)

    def __init__(self, src: Any, index: int):
        super().__init__([src])
        self.index = index


class LazyZip(Lazy):
    """Per client, a struct with element `names` of the values of `srcs`."""

    __slots__ = ('names',)

    def __init__(self, srcs: Sequence[Any], names: Sequence[Optional[str]]):
        super().__init__(srcs)
        self.names = list(names)


class LazySourced(Lazy):
    """Clients by reference (`sourced`, a `SourcedClients`) of `member` type."""

    __slots__ = ('sourced', 'member')

    def __init__(self, sourced: Any, member: Any):
        super().__init__()
        self.sourced = sourced
        self.member = member


class LazyLocal(Lazy):
    """Clients' values from the driver's Python, not sent yet: per group, its clients'
    values stacked leaf by leaf (`stacked[g]`, arrays ``[size_g, ...]``, None for an empty
    group) of `member` type. A stream batch sends each group's rows inside its plan
    (`PlanStacked`); anything else sends them first (`create_values_stacked`)."""

    __slots__ = ('stacked', 'member')

    def __init__(self, stacked: List[Optional[List[Any]]], member: Any):
        super().__init__()
        self.stacked = stacked
        self.member = member


class LazyShared(Lazy):
    """A value equal on every client, from the driver (`py`, of `member` type: a broadcast
    model, say), not sent yet. A stream batch sends it inside each group's plan
    (`PlanShared`); anything else sends it first (`create_value` per group). `forms` keeps
    what the groups' executors prepare once for it (`share_value`)."""

    __slots__ = ('py', 'member', 'forms')

    def __init__(self, py: Any, member: Any):
        super().__init__()
        self.py = py
        self.member = member
        self.forms: Dict[Any, Any] = {}


class Leaf:
    """Materialized client values inside a plan (`all_equal`: one value per group, repeated)."""

    __slots__ = ('payload', 'all_equal')

    def __init__(self, payload: ClientsPayload, all_equal: bool):
        self.payload = payload
        self.all_equal = all_equal


class StreamBatch:
    """The reductions of one invocation that stream together (one pass over the clients)."""

    def __init__(self) -> None:
        self.requests: List[Tuple[ReductionKind, List[Any], Any]] = []
        self.done: 'asyncio.Future[List[List[Partial]]]' = (
            asyncio.get_running_loop().create_future()
        )
        self.task: 'Optional[asyncio.Future[None]]' = None  # the runner (a strong reference to it)


def targets_from_mapping(targets: Any) -> Tuple[Any, List[Tuple[Any, int]]]:
    """(server, client groups) from TFF's ``{SERVER: ex, CLIENTS: [ex, ...]}``."""
    server, clients = None, None
    for key, ex in targets.items():
        literal = T.placement_from_uri(key.lower()) if isinstance(key, str) else key
        if literal is T.SERVER:
            server = ex
        elif literal is T.CLIENTS:
            clients = ex
        else:
            raise SimharnessValueError(
                f'unknown placement {key!r} in the target executors; '
                'expected simharness.SERVER and simharness.CLIENTS'
            )
    if server is None:
        raise SimharnessValueError(
            'the target executors have no SERVER executor: {SERVER: ex, CLIENTS: [ex, ...]}'
        )
    if clients is None:
        return server, []
    if not isinstance(clients, (list, tuple)):
        return server, [(clients, 1)]
    groups: List[Tuple[Any, int]] = []
    for c in clients:
        if isinstance(c, tuple) and len(c) == 2 and isinstance(c[1], int):
            groups.append((c[0], c[1]))
        else:
            groups.append((c, 1))
    return server, groups


def mapping_names_clients(targets: Iterable[object]) -> bool:
    """Whether TFF's ``{SERVER: ex, CLIENTS: [...]}`` has a `CLIENTS` entry (an empty list
    counts: zero clients)."""
    return any(
        (T.placement_from_uri(key.lower()) if isinstance(key, str) else key) is T.CLIENTS
        for key in targets
    )


def hosting_child(ex: Any, what: str) -> BatchExecutor:
    """`ex`, or the target of the (reference-resolving) wrappers around it, as a BatchExecutor."""
    seen = ex
    for _ in range(8):
        if isinstance(seen, BatchExecutor):
            return seen
        seen = getattr(seen, 'target', None)
        if seen is None:
            break
    raise SimharnessTypeError(
        f'{what} is a {type(ex).__name__}; expected an executor that hosts values '
        '(EagerTFExecutor, ThreadDelegatingExecutor, WorkerDelegatingExecutor), possibly '
        'wrapped in a ReferenceResolvingExecutor',
        actual=type(ex).__name__,
    )


def secure_params(
    kind: ReductionKind, static: Dict[str, Any], member: T.Type, num_clients: int
) -> Dict[str, Any]:
    """Per-leaf bounds (exclusive), moduli and dtypes of a secure sum.

    ``kind`` is SECURE_SUM_BITWIDTH (`static['bitwidth']`, or
    `static['max_input']` for `federated_secure_sum`: the bitwidth
    ``max_input.bit_length()`` with the tighter bound ``max_input + 1``)
    or SECURE_MODULAR_SUM (`static['modulus']`).
    """
    leaves = T.flatten_type(member)
    key = (
        'modulus'
        if ReductionKind.of(kind) is ReductionKind.SECURE_MODULAR_SUM
        else 'max_input'
        if 'max_input' in static
        else 'bitwidth'
    )
    flat = broadcast_static(static[key], member)
    extra = max(0, math.ceil(math.log2(max(num_clients, 1))))
    bounds, moduli = [], []
    for b in flat:
        if key == 'max_input':
            bounds.append(b + 1)
            moduli.append(2 ** min(b.bit_length() + extra, 63))
        elif key == 'bitwidth':
            bounds.append(2**b)
            moduli.append(2 ** min(b + extra, 63))
        else:
            bounds.append(b)
            moduli.append(b)
    return {
        'bounds': pack_as(member, bounds),
        'moduli': pack_as(member, moduli),
        'dtypes': pack_as(member, [l.dtype for l in leaves]),
        'bound_from': key,
    }  # what the range error names: max_input or bitwidth
