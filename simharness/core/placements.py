"""Placements, as in TFF: `CLIENTS` and `SERVER` (`PlacementLiteral`) and their uris.

A placement pickles as its uri (`placement_from_uri` rebuilds it), so the two
literals stay the only ones in every process. `simharness.core.types` (the
`FederatedType` of a member at a placement) imports them from here and exports
them with the types.
"""

from __future__ import annotations

from simharness.errors import SimharnessValueError

__all__ = ['PlacementLiteral', 'CLIENTS', 'SERVER', 'placement_from_uri']


class PlacementLiteral:
    """A placement: `CLIENTS` or `SERVER`.

    Prints as TFF's: ``str(CLIENTS) == 'CLIENTS'``,
    ``repr(CLIENTS) == "PlacementLiteral('clients')"``; `uri` is ``'clients'``.
    """

    __slots__ = ('name', 'uri', 'default_all_equal')

    def __init__(self, name: str, uri: str, default_all_equal: bool):
        self.name = name
        self.uri = uri
        self.default_all_equal = default_all_equal

    def __repr__(self) -> str:
        return f"PlacementLiteral('{self.uri}')"

    def __str__(self) -> str:
        return self.name

    def __reduce__(self):
        return (placement_from_uri, (self.uri,))


CLIENTS = PlacementLiteral('CLIENTS', 'clients', False)
SERVER = PlacementLiteral('SERVER', 'server', True)


def placement_from_uri(uri: str) -> PlacementLiteral:
    """The placement of `uri` ('clients' or 'server').

    Raises:
      SimharnessValueError: an unknown uri.
    """
    for p in (CLIENTS, SERVER):
        if p.uri == uri:
            return p
    raise SimharnessValueError(f'unknown placement {uri!r}; expected "clients" or "server"')
