"""The stream plan: what a client group's holder computes slice by slice and folds.

A plan is a list of nodes (each refers to earlier ones by index) and a list of
`PlanReduction`s over them. Every node kind is a frozen dataclass; each hop
translates the kinds it owns, once, and passes the others on:

```
FederatedResolvingStrategy (driver)   Lazy maps / selects / zips of a group ->
                                      PlanValues  PlanSame  PlanStacked  PlanShared  PlanClients
                                      PlanMap  PlanSelect  PlanZip
WorkerDelegatingExecutor (driver)     PlanClients -> PlanSourced (the worker loads the clients)
                                                  or PlanValues (the driver loads and ships them)
codec (the wire)                      the wire kinds are registered messages: plain data, values
                                      as Refs (`map_values` walks them); PlanClients and PlanLoad
                                      hold Python objects and never cross (CodecError)
WorkerService (worker)                PlanSourced -> PlanLoad (a loader over the session's source)
EagerTFExecutor (executors/leaf/stream_eval.py)   evaluates each kind by type, one slice at a time
```

This module imports no executor and no TensorFlow: the runtime and the
executors both use it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, ClassVar, Dict, List, Optional, Sequence, Tuple, Type

from simharness.core.reduction import ReductionKind
from simharness.runtime import codec

__all__ = [
    'PlanNode',
    'PlanValues',
    'PlanSame',
    'PlanStacked',
    'PlanShared',
    'PlanClients',
    'PlanSourced',
    'PlanLoad',
    'PlanMap',
    'PlanSelect',
    'PlanZip',
    'PlanReduction',
    'WIRE_KINDS',
    'is_plan_part',
]


class _PlanPart:
    """A plan node or reduction: `map_values` rebuilds it with its value fields mapped."""

    #: The fields that hold values (executor values, Refs, data): what `map_values` maps.
    VALUE_FIELDS: ClassVar[Tuple[str, ...]] = ()

    def map_values(self, fn: Callable[[Any], Any]) -> Any:
        """This part with `fn` applied to each of its `VALUE_FIELDS` (the rest kept)."""
        if not self.VALUE_FIELDS:
            return self
        mapped = {f: fn(getattr(self, f)) for f in self.VALUE_FIELDS}
        if hasattr(type(self), '__post_init__'):  # a kind that checks its fields
            return dataclasses.replace(self, **mapped)  # type: ignore[type-var]
        # `dataclasses.replace` without its per-call walk of the fields (0.5 against
        # ~5 us a node): a copy of the fields, the value fields mapped.
        out = object.__new__(type(self))
        out.__dict__.update(self.__dict__)
        out.__dict__.update(mapped)
        return out


class PlanNode(_PlanPart):
    """One node of a stream plan (the values of every client of the block)."""

    #: Indices of the earlier nodes this one reads.
    def sources(self) -> Tuple[int, ...]:
        return ()


@dataclasses.dataclass(frozen=True)
class PlanValues(PlanNode):
    """One value per client of the block (computed already)."""

    VALUE_FIELDS: ClassVar[Tuple[str, ...]] = ('values',)
    values: Sequence[Any]


@dataclasses.dataclass(frozen=True)
class PlanSame(PlanNode):
    """One value, the same for every client (an all-equal value)."""

    VALUE_FIELDS: ClassVar[Tuple[str, ...]] = ('value',)
    value: Any


@dataclasses.dataclass(frozen=True)
class PlanStacked(PlanNode):
    """The block's clients' values given leaf by leaf: arrays ``[count, ...]`` of `type`'s
    leaves (plain data: a driver's Python values, stacked and checked by
    `core.batching.stack_python_values`). They travel with the plan, so a round whose
    clients' values come from the driver needs no request of their own."""

    leaves: Sequence[Any]
    type: Any


@dataclasses.dataclass(frozen=True)
class PlanShared(PlanNode):
    """One value of the driver's, the same for every client (plain data of `type`: a
    broadcast model, say). It travels with the plan, so a round's broadcast needs no
    request of its own; the holder makes one value of it for the block."""

    value: Any
    type: Any


@dataclasses.dataclass(frozen=True)
class PlanClients(PlanNode):
    """Clients by reference (a `SourcedClients` of the block's clients) of member `type`.

    Driver-side only: a worker-delegating executor sends it as `PlanSourced`
    (or as `PlanValues`, loaded by the driver); an in-process executor loads
    each slice itself.
    """

    clients: Any
    type: Any


@dataclasses.dataclass(frozen=True)
class PlanSourced(PlanNode):
    """Clients by reference on the wire: the worker loads them from the session's source.

    `source` (the source's plain description) travels with the first request of a
    session that names `token`, None after; `transform` is the transform's description.
    """

    VALUE_FIELDS: ClassVar[Tuple[str, ...]] = ('source', 'client_ids', 'transform')
    token: int
    source: Any
    client_ids: Sequence[str]
    transform: Any
    type: Any


@dataclasses.dataclass(frozen=True)
class PlanLoad(PlanNode):
    """Worker-side only: ``loader(lo, hi)`` gives the Python values of clients ``lo .. hi-1``."""

    loader: Callable[[int, int], List[Any]]
    type: Any


@dataclasses.dataclass(frozen=True)
class PlanMap(PlanNode):
    """``fn`` (a computation embedded in the holder) of node `src`'s values."""

    VALUE_FIELDS: ClassVar[Tuple[str, ...]] = ('fn',)
    fn: Any
    src: int

    def sources(self) -> Tuple[int, ...]:
        return (self.src,)


@dataclasses.dataclass(frozen=True)
class PlanSelect(PlanNode):
    """Element `index` of node `src`'s struct values."""

    index: int
    src: int

    def sources(self) -> Tuple[int, ...]:
        return (self.src,)


@dataclasses.dataclass(frozen=True)
class PlanZip(PlanNode):
    """Structs with element `names`, the elements from nodes `srcs` (client by client)."""

    names: Tuple[Optional[str], ...]
    srcs: Tuple[int, ...]

    def sources(self) -> Tuple[int, ...]:
        return tuple(self.srcs)


@dataclasses.dataclass(frozen=True)
class PlanReduction(_PlanPart):
    """A reduction (`kind`, as `create_partial_reduction`) of node `srcs[0]`'s values; a
    weighted mean reduces the pairs of nodes ``srcs == (values, weights)``.

    A decoded reduction's kind (its string on the wire) becomes its `ReductionKind`;
    an unknown one stays a string, refused (naming it) by the service that runs it.
    """

    VALUE_FIELDS: ClassVar[Tuple[str, ...]] = ('params',)
    kind: ReductionKind
    srcs: Tuple[int, ...]
    params: Dict[str, Any]

    def __post_init__(self) -> None:
        if type(self.kind) is not ReductionKind:  # decoded: its string
            try:
                object.__setattr__(self, 'kind', ReductionKind(self.kind))
            except ValueError:
                pass  # not a kind: refused where it is run (`ReductionKind.of`)


#: The kinds that cross the worker seam (registered with the codec).
WIRE_KINDS: Tuple[Type[Any], ...] = (
    PlanValues,
    PlanSame,
    PlanStacked,
    PlanShared,
    PlanSourced,
    PlanMap,
    PlanSelect,
    PlanZip,
    PlanReduction,
)
for _kind in WIRE_KINDS:
    codec.register_message(_kind)


def is_plan_part(x: Any) -> bool:
    """Whether `x` is a plan node or a reduction (containers walk into it: `map_values`)."""
    return isinstance(x, _PlanPart)
