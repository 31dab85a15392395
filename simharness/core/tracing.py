"""Tracing of `federated_computation` bodies into building blocks.

While a federated computation's Python function runs, its parameters are
`Value`s wrapping building blocks. Each call made during tracing (an
intrinsic, a tf_computation, a nested federated computation) is bound to a
fresh local name of the enclosing `Block`, so that it is evaluated once, in
program order, however often the Python code uses its result.

The stack of active tracing scopes lives in a `ContextVar` (per thread and
per asyncio task), the one piece of module-level state this package keeps.
"""

from __future__ import annotations

import collections
import contextvars
import itertools
from typing import Any, List, Optional, Tuple

import attrs

from simharness.core import building_blocks as bb
from simharness.core import types as T
from simharness.errors import ContextError, SimharnessAttributeError, SimharnessTypeError


class Traceable:
    """What a traced body may call or embed besides traced values: a computation.

    `simharness.core.computation.Computation` subclasses it; tracing needs
    only its building block, so it does not import the computation module
    (which imports tracing).
    """

    def to_building_block(self, param_hint: Optional[T.Type] = None) -> bb.ComputationBuildingBlock:
        """The building block to embed, for a parameter of type `param_hint` if given."""
        raise NotImplementedError  # abstract; Computation's subclasses override


class _Scope:
    def __init__(self, prefix: str):
        self.locals: List[Tuple[str, bb.ComputationBuildingBlock]] = []
        self._names = (f'{prefix}{i}' for i in itertools.count())

    def fresh_name(self) -> str:
        """A name not used before in this scope."""
        return next(self._names)

    def bind(self, comp: bb.ComputationBuildingBlock) -> bb.Reference:
        name = self.fresh_name()
        self.locals.append((name, comp))
        return bb.Reference(name, comp.type_signature)


_SCOPES: contextvars.ContextVar[Tuple[_Scope, ...]] = contextvars.ContextVar(
    'simharness_tracing_scopes', default=()
)
_COUNTER = itertools.count()


def is_tracing() -> bool:
    return bool(_SCOPES.get())


def current_scope() -> _Scope:
    scopes = _SCOPES.get()
    if not scopes:
        raise ContextError('intrinsics can only be used inside a federated_computation')
    return scopes[-1]


class tracing_scope:
    """Context manager that opens a new scope for one traced function body."""

    def __enter__(self) -> _Scope:
        scope = _Scope(f'_t{next(_COUNTER)}_')
        self._token = _SCOPES.set(_SCOPES.get() + (scope,))
        return scope

    def __exit__(self, *exc):
        _SCOPES.reset(self._token)
        return False


class Value:
    """A traced value inside a federated computation (TFF's `tff.Value`)."""

    __slots__ = ('_comp',)
    _comp: bb.ComputationBuildingBlock  # declared so that __getattr__ does not type it

    def __init__(self, comp: bb.ComputationBuildingBlock):
        object.__setattr__(self, '_comp', comp)

    @property
    def comp(self) -> bb.ComputationBuildingBlock:
        return self._comp

    @property
    def type_signature(self) -> T.Type:
        return self._comp.type_signature

    def _struct_type(self) -> T.StructType:
        t = self.type_signature
        if isinstance(t, T.FederatedType):
            t = t.member
        if not isinstance(t, T.StructType):
            raise SimharnessTypeError(
                f'value of type {self.type_signature} is not a struct', actual=self.type_signature
            )
        return t

    def __getattr__(self, name: str) -> 'Value':
        # An AttributeError (so that `hasattr` works), as TFF's `Value`, for a
        # missing element and for a value that is not a struct at all.
        if name.startswith('__'):
            raise AttributeError(name)
        t = self.type_signature
        st = t.member if isinstance(t, T.FederatedType) else t
        if not isinstance(st, T.StructType):
            raise SimharnessAttributeError(
                f'a value of non-struct type {t} has no attribute {name!r}'
            )
        if name not in st.names:
            raise SimharnessAttributeError(
                f'value of type {t} has no element {name!r}; its names are '
                f'{[n for n in st.names if n is not None]}'
            )
        return Value(bb.Selection(self._comp, name=name))

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):  # by name: as attribute access (TFF's rule)
            return self.__getattr__(key)
        st = self._struct_type()
        if isinstance(key, slice):
            return [self[i] for i in range(len(st))[key]]
        return Value(bb.Selection(self._comp, index=int(key)))

    def __len__(self) -> int:
        return len(self._struct_type())

    def __iter__(self):
        for i in range(len(self._struct_type())):
            yield self[i]

    def __dir__(self):
        try:
            return [n for n in self._struct_type().names if n]
        except SimharnessTypeError:
            return []

    def __call__(self, *args, **kwargs) -> 'Value':
        t = self.type_signature
        if not isinstance(t, T.FunctionType):
            raise SimharnessTypeError(f'value of type {t} is not callable', actual=t)
        arg = pack_args(t.parameter, args, kwargs)
        return Value(current_scope().bind(bb.Call(self._comp, arg)))

    def __bool__(self):
        raise SimharnessTypeError(
            'a traced value has no truth value in a federated_computation; '
            'use tf_computations for data-dependent control flow'
        )

    def __repr__(self) -> str:
        return f'Value({self._comp.compact()}: {self.type_signature})'


def to_building_block(
    value: Any, type_hint: Optional[T.Type] = None
) -> bb.ComputationBuildingBlock:
    """Converts a Python value met during tracing into a building block."""
    if isinstance(value, Value):
        return value.comp
    if isinstance(value, bb.ComputationBuildingBlock):
        return value
    if isinstance(value, Traceable):
        return value.to_building_block(type_hint)
    if isinstance(value, T.PlacementLiteral):
        return bb.Placement(value)
    if T.is_namedtuple(value):
        return bb.Struct(
            [(f, to_building_block(getattr(value, f))) for f in value._fields],
            container=type(value),
        )
    if attrs.has(type(value)):
        return bb.Struct(
            [
                (a.name, to_building_block(getattr(value, a.name)))
                for a in attrs.fields(type(value))
            ],
            container=type(value),
        )
    if isinstance(value, collections.abc.Mapping):
        return bb.Struct(
            [(str(k), to_building_block(v)) for k, v in value.items()], container=type(value)
        )
    if isinstance(value, (list, tuple)):
        hints = (
            list(type_hint)
            if isinstance(type_hint, T.StructType) and len(type_hint) == len(value)
            else [None] * len(value)
        )
        return bb.Struct(
            [(None, to_building_block(v, h)) for v, h in zip(value, hints)], container=type(value)
        )
    # A Python or numpy constant: embed it as a no-parameter TF computation.
    from simharness.core import tf_serialization

    t = type_hint if isinstance(type_hint, T.TensorType) else None
    comp = tf_serialization.constant_computation(value, t)
    return current_scope().bind(bb.Call(comp))


def pack_args(
    param_type: Optional[T.Type], args: tuple, kwargs: dict
) -> Optional[bb.ComputationBuildingBlock]:
    """Packs call arguments into one building block for `param_type`."""
    if param_type is None:
        if args or kwargs:
            raise SimharnessTypeError(
                f'this computation takes no argument, but got {len(args) + len(kwargs)}'
            )
        return None
    if len(args) == 1 and not kwargs:
        return to_building_block(args[0], param_type)
    if not isinstance(param_type, T.StructType):
        raise SimharnessTypeError(
            f'expected one argument of type {param_type}, got {len(args) + len(kwargs)} arguments'
        )
    elems = []
    names = param_type.names
    for i, a in enumerate(args):
        elems.append(
            (
                names[i] if i < len(names) else None,
                to_building_block(a, param_type[i] if i < len(param_type) else None),
            )
        )
    for k, v in kwargs.items():
        elems.append((k, to_building_block(v)))
    if len(elems) != len(param_type):
        raise SimharnessTypeError(
            f'expected {len(param_type)} arguments for parameter type '
            f'{param_type}, got {len(elems)}'
        )
    if kwargs:
        order = {n: i for i, n in enumerate(names)}
        try:
            elems.sort(key=lambda e: order[e[0]] if e[0] is not None else -1)
        except KeyError as e:
            raise SimharnessTypeError(
                f'unexpected keyword argument {e.args[0]!r} for parameter type {param_type}'
            ) from None
    return bb.Struct(elems)
