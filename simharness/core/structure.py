"""`Struct` (defined in `core.struct`, re-exported here) and its conversions.

A `Struct` is an ordered list of (name or None, value) pairs. Executors keep
struct values as `Struct`s; the execution context converts results back
into the Python container recorded on the `StructType` (namedtuple, dict,
attrs class, list, tuple).
"""

from __future__ import annotations

import collections
import inspect
from typing import Any, Callable, List, Optional, Tuple, cast

import attrs
import numpy as np

from simharness.core import types as T
from simharness.core.struct import Struct  # also re-exported: the usual import path
from simharness.core.struct import struct_like
from simharness.errors import SimharnessTypeError


def map_structure(fn: Callable[..., Any], *structs: Any) -> Any:
    """Applies `fn` to corresponding leaves of `Struct`s of equal layout."""
    first = structs[0]
    if isinstance(first, Struct):
        return struct_like(
            first, [map_structure(fn, *[s[i] for s in structs]) for i in range(len(first))]
        )
    return fn(*structs)


def map_nest(fn: Callable[[Any], Any], value: Any, structs: bool = False) -> Any:
    """`fn` applied to the leaves of Python containers, the containers rebuilt.

    Dicts (any mapping type built from pairs), namedtuples, lists and
    tuples nest, and with `structs` `Struct`s too; anything else is a leaf.
    """
    if structs and isinstance(value, Struct):
        return Struct((n, map_nest(fn, v, structs)) for n, v in value.items())
    if isinstance(value, dict):
        return type(value)((k, map_nest(fn, v, structs)) for k, v in value.items())
    if T.is_namedtuple(value):
        return type(value)(*[map_nest(fn, v, structs) for v in value])
    if isinstance(value, (list, tuple)):
        return type(value)(map_nest(fn, v, structs) for v in value)
    return fn(value)


def flatten(value: Any) -> list:
    """Leaves of a nested `Struct`, depth first."""
    if isinstance(value, Struct):
        out = []
        for v in value:
            out.extend(flatten(v))
        return out
    return [value]


def pack_as(type_spec: T.Type, leaves: list) -> Any:
    """Rebuilds a nested `Struct` shaped like `type_spec` from its leaves."""
    return _pack_from(type_spec, iter(leaves))


def _pack_from(t: T.Type, it: Any) -> Any:
    # A module-level function, not a closure that refers to itself: such a cycle
    # would keep `leaves` (a call's tensors) alive until the garbage collector runs.
    if isinstance(t, T.StructType):
        return Struct((n, _pack_from(e, it)) for n, e in t.items())
    return next(it)


def from_container(value: Any, type_spec: Optional[T.Type] = None) -> Any:
    """Converts Python containers into `Struct`s, following `type_spec` if given.

    Leaves are left untouched. Unnamed Python sequences match named struct
    types positionally; dicts are matched by name.
    """
    if type_spec is not None and not isinstance(type_spec, T.StructType):
        return value
    if isinstance(value, Struct):
        if type_spec is None:
            return Struct((n, from_container(v)) for n, v in value.items())
        _check_len(value, type_spec)
        return Struct((tn, from_container(v, t)) for (tn, t), v in zip(type_spec.items(), value))
    if T.is_namedtuple(value) or attrs.has(type(value)):
        names = (
            value._fields if T.is_namedtuple(value) else [a.name for a in attrs.fields(type(value))]
        )
        vals = [getattr(value, n) for n in names]
        items = list(zip(names, vals))
    elif isinstance(value, collections.abc.Mapping):
        items = [(str(k), v) for k, v in value.items()]
    elif isinstance(value, (list, tuple)):
        items = [(None, v) for v in value]
    elif type_spec is not None:
        raise SimharnessTypeError(
            f'value {value!r} ({type(value).__name__}) is not a struct; expected a value of '
            f'type {type_spec} (a list, tuple, dict, namedtuple or attrs instance)',
            expected=type_spec,
            actual=type(value).__name__,
        )
    else:
        return value
    if type_spec is None:
        return Struct((n, from_container(v)) for n, v in items)
    if len(items) != len(type_spec):
        raise SimharnessTypeError(
            f'value with {len(items)} elements does not match struct type {type_spec} with '
            f'{len(type_spec)} elements',
            expected=type_spec,
        )
    if all(n is not None for n, _ in items) and any(n is not None for n in type_spec.names):
        # match by name
        by_name = dict(items)
        out = []
        for tn, t in type_spec.items():
            if tn is None or tn not in by_name:
                raise SimharnessTypeError(
                    f'value with names {[n for n, _ in items]} does not match struct type '
                    f'{type_spec}',
                    expected=type_spec,
                )
            out.append((tn, from_container(by_name[tn], t)))
        return Struct(out)
    return Struct((tn, from_container(v, t)) for (tn, t), (_, v) in zip(type_spec.items(), items))


def _check_len(value: Struct, type_spec: T.StructType) -> None:
    if len(value) != len(type_spec):
        raise SimharnessTypeError(
            f'struct with {len(value)} elements does not match type {type_spec}', expected=type_spec
        )


def to_container(value: Any, type_spec: T.Type) -> Any:
    """Converts a `Struct` into the Python container recorded on `type_spec`."""
    if not isinstance(type_spec, T.StructType):
        return value
    if not isinstance(value, Struct):
        return value
    elems = [to_container(v, t) for v, t in zip(value, type_spec)]
    names = type_spec.names
    container: Any = type_spec.container  # a user class: its constructor is not typed
    if container is not None:
        if T.is_namedtuple_class(container):
            return container(*elems)
        if attrs.has(container):
            # an attrs container's element names are its field names, all str
            return container(**dict(zip(cast(Tuple[str, ...], names), elems)))
        if issubclass(container, collections.abc.Mapping):
            try:
                return container(zip(names, elems))
            except TypeError:
                return dict(zip(names, elems))
        if issubclass(container, (list, tuple)):
            return container(elems)
    if all(n is not None for n in names) and names:
        return collections.OrderedDict(zip(names, elems))
    if all(n is None for n in names):
        return list(elems) if names else []
    return Struct(zip(names, elems))


#: TF dtypes that dlpack must never see: a string tensor through `np.from_dlpack`
#: aborts the process (a failed `DataTypeCanUseMemcpy` check in TF).
_NOT_MEMCPY_DTYPES = frozenset({'string', 'resource', 'variant'})


def tensor_to_numpy(t: Any, copy: bool = False) -> Any:
    """A numpy array of an eager tensor, without TF's slow conversion when possible.

    A CPU tensor with a memcpy-able dtype is read through dlpack: a read-only
    view (no copy), or an owned copy when `copy`. Anything else goes through
    `.numpy()`. A numpy array is returned as it is (a copy with `copy`).
    """
    if isinstance(t, np.ndarray):
        return np.array(t) if copy else t
    dtype_name = getattr(getattr(t, 'dtype', None), 'name', '')
    if (
        hasattr(t, '__dlpack__')
        and dtype_name not in _NOT_MEMCPY_DTYPES
        and 'CPU' in str(getattr(t, 'device', '')).upper()
    ):
        try:
            view = np.from_dlpack(t)
        except (TypeError, ValueError, RuntimeError, BufferError):
            view = None
        if view is not None:
            if copy:
                return np.array(view)
            view.flags.writeable = False
            return view
    return t.numpy()


#: The attribute of a tensor that shares a numpy array's memory (made without a copy
#: from an array given away to it: a reduction's fresh result) naming that array.
_ADOPTED = '_simharness_adopted'


def mark_adopted(t: Any, arr: np.ndarray) -> None:
    """Records that tensor `t` was made from `arr`, given away to it, without a copy."""
    try:
        setattr(t, _ADOPTED, arr)
    except AttributeError:  # a tensor type without instance attributes: nothing to hand out
        pass


def claim_adopted(t: Any) -> Optional[np.ndarray]:
    """The array tensor `t` was made from without a copy (`mark_adopted`), at most once.

    The first caller owns the array from then on: the context hands a
    reduction's result to the user this way instead of copying it. Later
    callers (the same tensor twice in one result) get None and copy.
    """
    d = getattr(t, '__dict__', None)
    return None if d is None else d.pop(_ADOPTED, None)


def broadcast_static(spec: Any, member: T.Type) -> List[int]:
    """Per-leaf ints from an int or a structure matching `member`."""
    leaves = T.flatten_type(member)
    if isinstance(spec, (int, np.integer)):
        return [int(spec)] * len(leaves)
    s = from_container(spec, member) if isinstance(member, T.StructType) else spec
    out = []

    def walk(x, t):
        if isinstance(t, T.StructType):
            for xe, te in zip(x, t):
                walk(xe, te)
        else:
            out.append(int(x))

    walk(s, member)
    return out


def call_unpacked(fn: Callable, param_type: T.StructType, values: List[Any]) -> Any:
    """`fn` called with the elements of a struct argument: by name when the struct's names
    are `fn`'s parameter names in another order (federated_language binds them by name),
    else in order."""
    names = [n for n, _ in param_type.items()]
    try:
        params = [
            p.name
            for p in inspect.signature(fn).parameters.values()
            if p.kind == p.POSITIONAL_OR_KEYWORD
        ]
    except (TypeError, ValueError):  # no signature to bind names to
        return fn(*values)
    if None not in names and names != params and sorted(names) == sorted(params):
        return fn(**dict(zip(cast(List[str], names), values)))
    return fn(*values)
