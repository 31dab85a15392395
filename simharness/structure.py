"""`simharness.structure`: TFF's `tff.structure` helpers over `Struct`.

`Struct` is the one implementation in `simharness.core.structure` (values
of struct types are `Struct`s everywhere in simharness); this module adds
the module-level functions a TFF program calls on them, with TFF's
semantics and exception classes. The readers (`name_list`, `name_list_with_nones`,
`to_elements`, `iter_elements`, `name_to_index_map`, `has_field`) take a `StructType` too,
as TFF's do (its `StructType` is a `Struct` of types):

```
Struct([('a', 1), (None, 2)])          name_list(s) == ['a']
to_elements(s) == [('a', 1), (None, 2)] to_odict(s) -> ValueError (unnamed element)
from_container({'b': 1, 'a': 2})       -> Struct([('a', 2), ('b', 1)])  (a dict's keys sorted,
                                          an OrderedDict's kept, as in TFF)
map_structure(f, s1, s2), flatten(s), pack_sequence_as(s, leaves), update_struct(s, a=3)
```
"""

from __future__ import annotations

import collections
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import attrs

from simharness.core.structure import Struct
from simharness.core.types import StructType
from simharness.errors import SimharnessTypeError, SimharnessValueError

__all__ = [
    'Struct',
    'flatten',
    'from_container',
    'has_field',
    'is_same_structure',
    'iter_elements',
    'map_structure',
    'name_list',
    'name_list_with_nones',
    'name_to_index_map',
    'pack_sequence_as',
    'to_container_recursive',
    'to_elements',
    'to_odict',
    'to_odict_or_tuple',
    'update_struct',
]


def _check_struct(value: Any, what: str = 'struct', types_too: bool = False) -> None:
    if not isinstance(value, Struct) and not (types_too and isinstance(value, StructType)):
        raise SimharnessTypeError(
            f'{what} must be a simharness.structure.Struct, got {value!r} '
            f'of type {type(value).__name__}',
            expected=Struct,
            actual=type(value),
        )


def _is_namedtuple(value: Any) -> bool:
    return isinstance(value, tuple) and hasattr(type(value), '_fields')


def name_list(struct: Struct) -> List[str]:
    """The names of the named elements of `struct`, in order (unnamed ones skipped)."""
    _check_struct(struct, types_too=True)
    return [n for n in struct.names if n is not None]


def name_list_with_nones(struct: Struct) -> List[Optional[str]]:
    """The names of all elements of `struct` (None for an unnamed one)."""
    _check_struct(struct, types_too=True)
    return list(struct.names)


def to_elements(struct: Struct) -> List[Tuple[Optional[str], Any]]:
    """The `(name, value)` pairs of `struct`, as `Struct(...)` takes them."""
    _check_struct(struct, types_too=True)
    return struct.items()


def iter_elements(struct: Struct) -> Iterator[Tuple[Optional[str], Any]]:
    """An iterator over the `(name, value)` pairs of `struct`."""
    return iter(to_elements(struct))


def name_to_index_map(struct: Struct) -> Dict[str, int]:
    """Maps each name of `struct` to its element's index."""
    _check_struct(struct, types_too=True)
    return {n: i for i, n in enumerate(struct.names) if n is not None}


def has_field(struct: Struct, field: str) -> bool:
    """Whether `struct` has an element named `field`."""
    _check_struct(struct, types_too=True)
    return field in struct.names


def to_container_recursive(
    value: Struct, container_fn: Callable[[List[Tuple[Optional[str], Any]]], Any]
) -> Any:
    """Rebuilds `value` and every nested `Struct` with `container_fn(elements)`."""
    _check_struct(value, 'value')
    if not callable(container_fn):
        raise SimharnessTypeError(
            f'container_fn must be callable, got {container_fn!r}', actual=type(container_fn)
        )
    return container_fn(
        [
            (n, to_container_recursive(v, container_fn) if isinstance(v, Struct) else v)
            for n, v in value.items()
        ]
    )


def to_odict(struct: Struct, recursive: bool = False) -> 'collections.OrderedDict[str, Any]':
    """`struct` as an `OrderedDict` (nested `Struct`s too when `recursive`).

    Raises:
      SimharnessValueError: an element (of a converted `Struct`) is unnamed.
    """
    _check_struct(struct)

    def odict(elements):
        unnamed = [i for i, (n, _) in enumerate(elements) if n is None]
        if unnamed:
            raise SimharnessValueError(
                f'cannot convert a Struct with unnamed elements (at {unnamed}) to an '
                f'OrderedDict: {struct!r}'
            )
        return collections.OrderedDict(elements)

    return to_container_recursive(struct, odict) if recursive else odict(struct.items())


def to_odict_or_tuple(struct: Struct, recursive: bool = True) -> Any:
    """An `OrderedDict` when every element is named, a `tuple` when none is.

    Raises:
      SimharnessValueError: a (converted) `Struct` mixes named and unnamed elements.
    """
    _check_struct(struct)

    def convert(elements):
        named = [n is not None for n, _ in elements]
        if all(named):
            return collections.OrderedDict(elements)
        if not any(named):
            return tuple(v for _, v in elements)
        raise SimharnessValueError(
            f'cannot convert a Struct with both named and unnamed '
            f'elements to an OrderedDict or a tuple: {struct!r}'
        )

    return to_container_recursive(struct, convert) if recursive else convert(struct.items())


def from_container(value: Any, recursive: bool = False) -> Struct:
    """A `Struct` of a Python container (TFF's rules).

    Lists and tuples give unnamed elements; namedtuples, attrs instances and
    OrderedDicts named ones in their order; a plain dict named ones sorted by
    key (as TFF). Elements are converted too when `recursive`.

    Raises:
      SimharnessTypeError: `value` is not a container.
    """

    def convert(v: Any, must: bool) -> Any:
        if isinstance(v, Struct):
            return Struct((n, convert(e, False)) for n, e in v.items()) if recursive else v
        if attrs.has(type(v)):
            items = [(a.name, getattr(v, a.name)) for a in attrs.fields(type(v))]
        elif _is_namedtuple(v):
            items = list(zip(v._fields, v))
        elif isinstance(v, collections.OrderedDict):
            items = list(v.items())
        elif isinstance(v, dict):
            try:
                items = sorted(v.items(), key=lambda kv: kv[0])
            except TypeError as e:
                raise SimharnessTypeError(
                    f'the keys of {v!r} cannot be sorted: {e}', actual=v
                ) from e
        elif isinstance(v, (list, tuple)):
            items = [(None, e) for e in v]
        elif must:
            raise SimharnessTypeError(
                f'cannot convert {v!r} of type {type(v).__name__} to a Struct; expected a list, '
                'tuple, dict, OrderedDict, namedtuple, attrs instance or Struct',
                actual=type(v),
            )
        else:
            return v
        return Struct((n, convert(e, False) if recursive else e) for n, e in items)

    return convert(value, True)


def _nest_flatten(value: Any) -> list:
    """Leaves of a non-`Struct` value as `tf.nest.flatten` gives them (dict keys sorted)."""
    if isinstance(value, (dict, collections.abc.Mapping)):
        return [leaf for k in sorted(value) for leaf in _nest_flatten(value[k])]
    if attrs.has(type(value)):
        return [
            leaf
            for a in attrs.fields(type(value))
            for leaf in _nest_flatten(getattr(value, a.name))
        ]
    if isinstance(value, (list, tuple)):
        return [leaf for e in value for leaf in _nest_flatten(e)]
    return [value]


def flatten(struct: Any) -> list:
    """The leaves of a (nested) `Struct`, depth first; other values as `tf.nest.flatten`."""
    if not isinstance(struct, Struct):
        return _nest_flatten(struct)
    return [leaf for v in struct for leaf in flatten(v)]


def pack_sequence_as(structure: Any, flat_sequence: List[Any]) -> Any:
    """A `Struct` shaped like `structure` whose leaves are `flat_sequence`, in order.

    Raises:
      SimharnessTypeError: `flat_sequence` is not a list, or a leaf of
        `structure` is a Python container (only `Struct`s nest).
      SimharnessValueError: `flat_sequence` has fewer leaves than `structure`.
    """
    if not isinstance(flat_sequence, list):
        raise SimharnessTypeError(
            f'flat_sequence must be a list, got {type(flat_sequence).__name__}',
            actual=type(flat_sequence),
        )
    position = 0

    def pack(s: Any) -> Any:
        nonlocal position
        if isinstance(s, Struct):
            return Struct((n, pack(v)) for n, v in s.items())
        if isinstance(s, (list, dict)) or _is_namedtuple(s) or attrs.has(type(s)):
            raise SimharnessTypeError(
                f'cannot pack into {s!r} of type {type(s).__name__}: only Structs nest here',
                actual=type(s),
            )
        if position >= len(flat_sequence):
            raise SimharnessValueError(
                f'flat_sequence has {len(flat_sequence)} elements, fewer '
                f'than the leaves of {structure!r}'
            )
        position += 1
        return flat_sequence[position - 1]

    return pack(structure)


def _same_leaf_structure(a: Any, b: Any) -> bool:
    if isinstance(a, (list, tuple, dict)) or isinstance(b, (list, tuple, dict)):
        if type(a) is not type(b) or len(a) != len(b):
            return False
        if isinstance(a, dict):
            return sorted(a) == sorted(b) and all(_same_leaf_structure(a[k], b[k]) for k in a)
        return all(_same_leaf_structure(x, y) for x, y in zip(a, b))
    return True


def is_same_structure(a: Struct, b: Struct) -> bool:
    """Whether `a` and `b` nest alike (same lengths and names at every level)."""
    _check_struct(a, 'a')
    _check_struct(b, 'b')
    if a.names != b.names:
        return False
    for x, y in zip(a, b):
        if isinstance(x, Struct) and isinstance(y, Struct):
            if not is_same_structure(x, y):
                return False
        elif isinstance(x, Struct) or isinstance(y, Struct):
            return False
        elif not _same_leaf_structure(x, y):
            return False
    return True


def map_structure(fn: Callable[..., Any], *structures: Any) -> Any:
    """`fn` applied to corresponding leaves of `Struct`s of the same structure.

    Raises:
      SimharnessTypeError: `fn` is not callable, the first structure is not a
        `Struct` (and not all arguments are tensors), or the structures differ.
      SimharnessValueError: no structure is given.
    """
    if not callable(fn):
        raise SimharnessTypeError(f'fn must be callable, got {fn!r}', actual=type(fn))
    if not structures:
        raise SimharnessValueError('map_structure needs at least one structure')
    if all(
        hasattr(s, 'dtype') and hasattr(s, 'shape') and not isinstance(s, Struct)
        for s in structures
    ):
        return fn(*structures)  # tensors: as tf.nest.map_structure
    _check_struct(structures[0], 'the first structure')
    for i, other in enumerate(structures[1:], start=1):
        if not isinstance(other, Struct) or not is_same_structure(structures[0], other):
            raise SimharnessTypeError(
                f'structure {i} ({other!r}) does not have the structure of structure 0 '
                f'({structures[0]!r})',
                expected=structures[0],
                actual=other,
            )
    leaves = [flatten(s) for s in structures]
    return pack_sequence_as(structures[0], [fn(*xs) for xs in zip(*leaves)])


def update_struct(structure: Any, **kwargs: Any) -> Any:
    """A copy of `structure` with the named fields replaced (top level only).

    Works on `Struct`s, dicts, namedtuples and attrs instances, as in TFF.

    Raises:
      SimharnessTypeError: `structure` has no named fields.
      KeyError: a keyword names no field of `structure`.
    """
    if isinstance(structure, Struct):
        missing = [k for k in kwargs if k not in structure.names]
        if missing:
            raise KeyError(f'structure has no fields named {missing}')
        return Struct((n, kwargs[n] if n in kwargs else v) for n, v in structure.items())
    if _is_namedtuple(structure):
        fields = structure._fields
    elif attrs.has(type(structure)):
        fields = tuple(a.name for a in attrs.fields(type(structure)))
    elif isinstance(structure, collections.abc.Mapping):
        fields = tuple(structure)
    else:
        raise SimharnessTypeError(
            'structure must have named fields (a dict, attrs instance, namedtuple or Struct), '
            f'got {type(structure).__name__}',
            actual=type(structure),
        )
    missing = [k for k in kwargs if k not in fields]
    if missing:
        raise KeyError(f'structure has no fields named {missing}')
    if isinstance(structure, collections.abc.Mapping):
        out = type(structure)(structure) if isinstance(structure, dict) else dict(structure)
        out.update(kwargs)
        return out
    if _is_namedtuple(structure):
        return structure._replace(**kwargs)
    return attrs.evolve(structure, **kwargs)
