"""Building blocks: the typed tree a federated computation is traced into.

Kinds, as in TFF: `Reference`, `Selection`, `Struct`, `Call`, `Lambda`,
`Block`, `Intrinsic`, `CompiledComputation` (a serialized TF graph), `Data`
and `Placement`. Every block has a `type_signature`; constructors check
types and raise `SimharnessTypeError` naming both types on a mismatch.
"""

from __future__ import annotations

import hashlib
import itertools
from typing import Any, List, Optional, Sequence, Tuple

from simharness.core import types as T
from simharness.errors import SimharnessTypeError, SimharnessValueError


class ComputationBuildingBlock:
    """Base class of all building blocks."""

    type_signature: T.Type

    def children(self) -> List['ComputationBuildingBlock']:
        return []

    def __repr__(self) -> str:
        return f'{type(self).__name__}({self.compact()})'

    def compact(self) -> str:
        raise NotImplementedError  # abstract; every subclass overrides


class Reference(ComputationBuildingBlock):
    """A reference to a name bound by an enclosing `Lambda` or `Block`."""

    def __init__(self, name: str, type_spec: Any):
        self.name = name
        self.type_signature = T.to_type(type_spec)

    def compact(self) -> str:
        return self.name


def selection_type(source_type: T.Type, index: int) -> T.Type:
    if isinstance(source_type, T.StructType):
        return source_type[index]
    if isinstance(source_type, T.FederatedType) and isinstance(source_type.member, T.StructType):
        return T.FederatedType(
            source_type.member[index], source_type.placement, source_type.all_equal
        )
    raise SimharnessTypeError(
        f'cannot select an element from a value of type {source_type}; '
        'expected a struct (or a federated struct)',
        actual=source_type,
    )


def _struct_type_of(t: T.Type) -> T.StructType:
    if isinstance(t, T.StructType):
        return t
    if isinstance(t, T.FederatedType) and isinstance(t.member, T.StructType):
        return t.member
    raise SimharnessTypeError(
        f'cannot select from a value of type {t}; expected a struct', actual=t
    )


class Selection(ComputationBuildingBlock):
    """Element `index` (or the one named `name`) of a struct-typed `source`.

    Selecting from a federated struct gives the federated element (the
    federating layer selects inside every member).
    """

    def __init__(
        self,
        source: ComputationBuildingBlock,
        index: Optional[int] = None,
        name: Optional[str] = None,
    ):
        st = _struct_type_of(source.type_signature)
        if name is not None:
            index = st.index_of(name)
        if index is None:
            raise SimharnessValueError('a selection needs an index or a name')
        if not -len(st) <= index < len(st):
            raise SimharnessTypeError(f'index {index} is out of range for {source.type_signature}')
        self.source = source
        self.index = index % len(st)
        self.type_signature = selection_type(source.type_signature, self.index)

    def children(self):
        return [self.source]

    def compact(self) -> str:
        return f'{self.source.compact()}[{self.index}]'


class Struct(ComputationBuildingBlock):
    """A struct of (optionally named) building blocks."""

    def __init__(
        self,
        elements: Sequence[Tuple[Optional[str], ComputationBuildingBlock]],
        container: Optional[type] = None,
    ):
        self.elements = list(elements)
        self.type_signature = T.StructType(
            [(n, e.type_signature) for n, e in self.elements], container=container
        )

    def children(self):
        return [e for _, e in self.elements]

    def compact(self) -> str:
        return (
            '<'
            + ','.join(e.compact() if n is None else f'{n}={e.compact()}' for n, e in self.elements)
            + '>'
        )


class Call(ComputationBuildingBlock):
    """`fn(arg)`; `arg` is None for functions with no parameter."""

    def __init__(
        self, fn: ComputationBuildingBlock, arg: Optional[ComputationBuildingBlock] = None
    ):
        ft = fn.type_signature
        if not isinstance(ft, T.FunctionType):
            raise SimharnessTypeError(
                f'cannot call a value of type {ft}; expected a function', actual=ft
            )
        if ft.parameter is None:
            if arg is not None:
                raise SimharnessTypeError(
                    f'function of type {ft} takes no argument, got one of type {arg.type_signature}'
                )
        else:
            if arg is None:
                raise SimharnessTypeError(
                    f'function of type {ft} needs an argument of type {ft.parameter}'
                )
            ft.parameter.check_assignable_from(arg.type_signature, 'argument')
        self.fn = fn
        self.arg = arg
        self.type_signature = ft.result

    def children(self):
        return [self.fn] + ([self.arg] if self.arg is not None else [])

    def compact(self) -> str:
        return f'{self.fn.compact()}({"" if self.arg is None else self.arg.compact()})'


class Lambda(ComputationBuildingBlock):
    """`(param_name -> result)`; `param_name` None for no parameter."""

    def __init__(
        self, param_name: Optional[str], param_type: Any, result: ComputationBuildingBlock
    ):
        self.parameter_name = param_name
        self.parameter_type = None if param_type is None else T.to_type(param_type)
        self.result = result
        self.type_signature = T.FunctionType(self.parameter_type, result.type_signature)

    def children(self):
        return [self.result]

    def compact(self) -> str:
        return f'({self.parameter_name or ""} -> {self.result.compact()})'


class Block(ComputationBuildingBlock):
    """`let name_1 = v_1, ..., name_k = v_k in result`, evaluated in order."""

    def __init__(
        self,
        locals_: Sequence[Tuple[str, ComputationBuildingBlock]],
        result: ComputationBuildingBlock,
    ):
        self.locals = list(locals_)
        self.result = result
        self.type_signature = result.type_signature

    def children(self):
        return [v for _, v in self.locals] + [self.result]

    def compact(self) -> str:
        defs = ','.join(f'{n}={v.compact()}' for n, v in self.locals)
        return f'(let {defs} in {self.result.compact()})'


class Intrinsic(ComputationBuildingBlock):
    """A federated operator such as `federated_map`, with a concrete type."""

    def __init__(self, uri: str, type_spec: T.FunctionType, **static: Any):
        self.uri = uri
        self.type_signature = type_spec
        self.static = dict(static)  # compile-time arguments (bitwidth, modulus, ...)

    def compact(self) -> str:
        return self.uri


class TFGraph:
    """A serialized TF graph with its parameter and result bindings.

    Attributes:
      graph_def: the serialized `GraphDef` bytes.
      input_names: tensor names fed with the flattened parameter leaves.
      output_names: tensor names of the flattened result leaves.
      fingerprint: a content hash, used as the key of executors' caches.
    """

    __slots__ = ('graph_def', 'input_names', 'output_names', 'fingerprint')

    def __init__(self, graph_def: bytes, input_names: Sequence[str], output_names: Sequence[str]):
        self.graph_def = graph_def
        self.input_names = tuple(input_names)
        self.output_names = tuple(output_names)
        h = hashlib.sha256(graph_def)
        h.update(repr((self.input_names, self.output_names)).encode())
        self.fingerprint = h.hexdigest()

    def __reduce__(self):
        return (TFGraph, (self.graph_def, self.input_names, self.output_names))


class CompiledComputation(ComputationBuildingBlock):
    """A TF computation, kept as a serialized graph (no Python code)."""

    type_signature: T.FunctionType

    def __init__(self, graph: TFGraph, type_spec: T.FunctionType, name: str = ''):
        self.graph = graph
        self.type_signature = type_spec
        self.name = name

    @property
    def fingerprint(self) -> str:
        # Cached: the function caches look it up on every call, and the string of a large
        # type signature costs more than the call's own bookkeeping (kept with the graph and
        # type it was made from, so that an object given a new one computes it anew).
        cached = self.__dict__.get('_fingerprint')
        if cached is not None and cached[0] is self.graph and cached[1] is self.type_signature:
            return cached[2]
        value = self.graph.fingerprint + '|' + str(self.type_signature)
        self.__dict__['_fingerprint'] = (self.graph, self.type_signature, value)
        return value

    def compact(self) -> str:
        return f'comp#{self.graph.fingerprint[:8]}'

    @property
    def may_be_random(self) -> bool:
        """Whether the graph may hold a stateful random op (fresh values on every run).

        A conservative scan of the graph's bytes for the names of TF's stateful
        random ops (a node merely named so counts too): True means each client
        must run the computation itself, even on a value that is equal on all
        clients; False means every run on the same input gives the same value.
        """
        return any(op in self.graph.graph_def for op in STATEFUL_RANDOM_OP_NAMES)

    def __reduce__(self):
        return (CompiledComputation, (self.graph, self.type_signature, self.name))


#: Names of TF's stateful random ops, as bytes (substrings of the op names they cover).
STATEFUL_RANDOM_OP_NAMES = (
    b'RandomStandardNormal',
    b'RandomUniform',
    b'TruncatedNormal',
    b'RandomGamma',
    b'RandomPoisson',
    b'RandomShuffle',
    b'Multinomial',
    b'RandomBinomial',
    b'RandomCrop',
    b'StatefulStandardNormal',
    b'StatefulUniform',
    b'StatefulTruncatedNormal',
    b'NonDeterministicInts',
    b'RngReadAndSkip',
    b'RngSkip',
    b'RandomIndexShuffle',
)


class Data(ComputationBuildingBlock):
    """A reference to data held by the runtime (resolved by the executor)."""

    def __init__(self, uri: str, type_spec: Any):
        self.uri = uri
        self.type_signature = T.to_type(type_spec)

    def compact(self) -> str:
        return f'data:{self.uri}'


class Placement(ComputationBuildingBlock):
    """A placement literal (`CLIENTS` or `SERVER`)."""

    def __init__(self, literal: T.PlacementLiteral):
        self.literal = literal
        self.type_signature = T.PlacementType()

    def compact(self) -> str:
        return self.literal.uri


def unique_names(prefix: str = '_v'):
    """An iterator of fresh names."""
    return (f'{prefix}{i}' for i in itertools.count())


def free_references(comp: ComputationBuildingBlock) -> set:
    """Names referenced in `comp` but not bound inside it."""
    if isinstance(comp, Reference):
        return {comp.name}
    if isinstance(comp, Lambda):
        inner = free_references(comp.result)
        inner.discard(comp.parameter_name)
        return inner
    if isinstance(comp, Block):
        free: set = set()
        bound: set = set()
        for name, value in comp.locals:
            free |= free_references(value) - bound
            bound.add(name)
        return free | (free_references(comp.result) - bound)
    out: set = set()
    for c in comp.children():
        out |= free_references(c)
    return out


class IntrinsicDef:
    """An intrinsic by URI, as TFF 0.19's ``intrinsic_defs.IntrinsicDef``: what an executor's
    ``create_value(intrinsic_def, type_spec)`` embeds with the concrete `type_spec` given.

    Constructing one registers its URI (TFF's: a test defines an intrinsic that the
    executors then recognize and refuse to run with `NotImplementedError`).

    Args:
      name: TFF's constant name (``'FEDERATED_SUM'``).
      uri: the intrinsic's URI (``'federated_sum'``).
      type_signature: its (possibly abstract) type; informational.
    """

    def __init__(self, name: str, uri: str, type_signature: Any = None):
        for what, s in (('name', name), ('uri', uri)):
            if not isinstance(s, str) or not s:
                raise SimharnessTypeError(
                    f'IntrinsicDef {what} must be a non-empty str, got {s!r}',
                    expected=str,
                    actual=type(s),
                )
        self.name = name
        self.uri = uri
        self.type_signature = type_signature
        _INTRINSIC_DEFS[uri] = self

    def __repr__(self) -> str:
        return f"IntrinsicDef('{self.name}', '{self.uri}')"


_INTRINSIC_DEFS: dict = {}

for _uri in (
    'federated_aggregate',
    'federated_apply',
    'federated_broadcast',
    'federated_collect',
    'federated_eval_at_clients',
    'federated_eval_at_server',
    'federated_map',
    'federated_map_all_equal',
    'federated_max',
    'federated_mean',
    'federated_min',
    'federated_secure_modular_sum',
    'federated_secure_select',
    'federated_secure_sum',
    'federated_secure_sum_bitwidth',
    'federated_select',
    'federated_sum',
    'federated_value_at_clients',
    'federated_value_at_server',
    'federated_weighted_mean',
    'federated_zip_at_clients',
    'federated_zip_at_server',
    'generic_divide',
    'generic_multiply',
    'generic_plus',
    'generic_zero',
    'sequence_map',
    'sequence_reduce',
    'sequence_sum',
):
    IntrinsicDef(_uri.upper(), _uri)
IntrinsicDef('GENERIC_ZERO', 'generic_zero', T.AbstractType('T'))  # a value, not a function


def uri_to_intrinsic_def(uri: str) -> Optional[IntrinsicDef]:
    """The registered intrinsic of `uri` (TFF's known intrinsics and any defined since), or
    None."""
    return _INTRINSIC_DEFS.get(uri)
