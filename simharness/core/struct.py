"""`Struct`: the runtime container of struct values (TFF's `Struct`).

Its own module, below `types` and `structure`: `types.infer_type` knows a
`Struct` value, and `structure`'s conversions follow `StructType`s.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator, List, NamedTuple, Optional, Tuple, cast

from simharness.errors import SimharnessAttributeError, SimharnessTypeError, SimharnessValueError

__all__ = ['Struct', 'struct_like']


class _Checked(NamedTuple):
    """The names of an existing `Struct` (so unique already) and new values for them: what
    `struct_like` hands `Struct`, which then builds and checks no pairs."""

    names: Tuple[Optional[str], ...]
    values: Tuple[Any, ...]


class Struct:
    """An ordered struct of optionally named values (TFF's `Struct`)."""

    __slots__ = ('_names', '_values')
    _names: Tuple[Optional[str], ...]
    _values: Tuple[Any, ...]

    def __init__(self, items: Iterable[Tuple[Optional[str], Any]]):
        if type(items) is _Checked:  # from `struct_like`: nothing to build or check
            self._names, self._values = cast(_Checked, items)
            return
        items = list(items)
        names = tuple([n for n, _ in items])
        self._names = names
        self._values = tuple([v for _, v in items])
        if len(names) > 1:
            named = [n for n in names if n is not None]
            if len(set(named)) != len(named):  # TFF: ValueError, names must be unique
                dups = sorted({n for n in named if named.count(n) > 1})
                raise SimharnessValueError(
                    f'Struct element names must be unique, got {list(names)} (repeated: {dups})'
                )

    @classmethod
    def unnamed(cls, *values: Any) -> 'Struct':
        return cls((None, v) for v in values)

    @classmethod
    def named(cls, **values: Any) -> 'Struct':
        return cls(values.items())

    def __len__(self) -> int:
        return len(self._values)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._values)

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):  # by name, as TFF's: an AttributeError when missing
            return self.__getattr__(key)
        return self._values[key]

    def __getattr__(self, name: str) -> Any:
        if name.startswith('_'):
            raise AttributeError(name)
        try:
            return self._values[self._names.index(name)]
        except ValueError:
            raise SimharnessAttributeError(
                f'Struct has no element named {name!r}; its names are {list(self._names)}'
            ) from None

    def index_of(self, name: str) -> int:
        try:
            return self._names.index(name)
        except ValueError:
            raise SimharnessTypeError(f'struct has no element named {name!r}') from None

    @property
    def names(self) -> Tuple[Optional[str], ...]:
        return self._names

    def items(self) -> List[Tuple[Optional[str], Any]]:
        return list(zip(self._names, self._values))

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, Struct) and self.items() == other.items()

    def __hash__(self) -> int:
        return hash(tuple(self.items()))

    def __repr__(self) -> str:
        parts = [repr(v) if n is None else f'{n}={v!r}' for n, v in self.items()]
        return 'Struct(' + ', '.join(parts) + ')'

    def __dir__(self) -> List[str]:  # TFF's: the element names
        return [n for n, _ in self.items() if n is not None]

    def __str__(self) -> str:  # TFF's: <a=1,2>
        return '<' + ','.join(str(v) if n is None else f'{n}={v}' for n, v in self.items()) + '>'

    def __reduce__(self):
        return (Struct, (self.items(),))


def struct_like(template: Struct, values: Iterable[Any]) -> Struct:
    """A `Struct` of `values` under the names of `template` (one value per name, in order),
    without building and checking the (name, value) pairs again: how `map_structure`, the
    reductions and the codec rebuild a struct of the same layout, fast."""
    # (a `_Checked` is no (name, value) pair: `__init__` knows it, its signature does not)
    return Struct(cast(Any, _Checked(template.names, tuple(values))))
