"""Flattening program values (nested dicts, sequences, attrs classes, `Struct`s) and packing back.

Dict keys are visited in sorted order (as ``tf.nest`` and TFF's program
utilities); names of a flattened value are the key path joined by ``/``.
"""

from __future__ import annotations

import collections
from typing import Any, Iterator

import attrs

from simharness.core.structure import Struct
from simharness.errors import SimharnessValueError

__all__ = ['flatten', 'flatten_with_name', 'pack_as']


def _is_namedtuple(x: Any) -> bool:
    return isinstance(x, tuple) and hasattr(x, '_fields')


def _children(value: Any, attrs_as_leaves: bool = False) -> Iterator[tuple[str, Any]] | None:
    if isinstance(value, Struct):
        return iter([(n if n is not None else str(i), v) for i, (n, v) in enumerate(value.items())])
    if isinstance(value, collections.abc.Mapping):
        return iter([(str(k), value[k]) for k in sorted(value)])
    if attrs.has(type(value)) and not attrs_as_leaves:
        return iter([(a.name, getattr(value, a.name)) for a in attrs.fields(type(value))])
    if _is_namedtuple(value):
        return iter(list(zip(value._fields, value)))
    if isinstance(value, (list, tuple)):
        return iter([(str(i), v) for i, v in enumerate(value)])
    return None


def flatten_with_name(
    value: Any, prefix: str = '', attrs_as_leaves: bool = False
) -> list[tuple[str, Any]]:
    """``[(path, leaf)]`` of `value`, depth first (path ``'a/b/0'``; a bare leaf has path '').

    With `attrs_as_leaves`, attrs instances are leaves (as TFF's release
    managers see them); else their fields are visited.
    """
    children = _children(value, attrs_as_leaves)
    if children is None:
        return [(prefix, value)]
    out: list[tuple[str, Any]] = []
    for name, child in children:
        out.extend(
            flatten_with_name(child, f'{prefix}/{name}' if prefix else name, attrs_as_leaves)
        )
    return out


def flatten(value: Any) -> list[Any]:
    """The leaves of `value`, in `flatten_with_name` order."""
    return [leaf for _, leaf in flatten_with_name(value)]


def pack_as(structure: Any, leaves: list[Any]) -> Any:
    """`structure` with its leaves replaced by `leaves` (containers rebuilt with their types).

    Raises:
        SimharnessValueError: the number of leaves differs from `structure`'s.
    """
    it = iter(leaves)
    count = [0]

    def pack(s: Any) -> Any:
        if isinstance(s, Struct):
            return Struct((n, pack(v)) for n, v in s.items())
        if isinstance(s, collections.abc.Mapping):
            packed = {k: pack(s[k]) for k in sorted(s)}
            return type(s)((k, packed[k]) for k in s)  # type: ignore[call-arg]
        if attrs.has(type(s)):
            return attrs.evolve(
                s, **{a.name: pack(getattr(s, a.name)) for a in attrs.fields(type(s)) if a.init}
            )
        if _is_namedtuple(s):
            return type(s)(*[pack(v) for v in s])
        if isinstance(s, (list, tuple)):
            return type(s)(pack(v) for v in s)
        count[0] += 1
        try:
            return next(it)
        except StopIteration:
            raise SimharnessValueError(
                f'{len(leaves)} leaves saved, but the structure has more'
            ) from None

    out = pack(structure)
    if count[0] != len(leaves):
        raise SimharnessValueError(f'{len(leaves)} leaves saved, but the structure has {count[0]}')
    return out
