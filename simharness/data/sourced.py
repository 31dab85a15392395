"""`SourcedClients`: client values that each holder loads itself, by client id.

A `{T}@CLIENTS` argument is normally a list of values that the driver
ingests (and, on the process stack, ships to the workers every call). A
`SourcedClients` is a lazy sequence instead: the data source (a
`ClientData`, e.g. `FileClientData` over one `.npz` per client), the client
ids and a picklable `transform` (padding, say). On the thread stack its
items are loaded where they are ingested; on the process stack each worker
receives the source once and loads only its own clients, so the driver
never streams client data through itself.

```
driver: SourcedClients(source, ids[0:1000], transform)
   ├─ worker 0: ("load", source token, ids[0:500])    source shipped once per worker
   └─ worker 1: ("load", source token, ids[500:1000])
```
"""

from __future__ import annotations

import collections.abc
import itertools
from typing import Any, Callable, List, Optional, Sequence

from simharness.errors import SimharnessTypeError

_TOKENS = itertools.count(1)


class SourcedClients(collections.abc.Sequence):
    """Client values loaded from `source` by client id, on demand.

    Args:
      source: anything with `client_arrays(client_id) -> dict of arrays`
        (every `ClientData`); it must pickle (it travels to the workers).
      client_ids: the clients, in order (one value per client).
      transform: a picklable function `arrays dict -> client value` (a
        module-level function or a `functools.partial` of one); None keeps
        the arrays dict.
    """

    def __init__(self, source: Any, client_ids: Sequence[str],
                 transform: Optional[Callable[[Any], Any]] = None, *, _token: Optional[int] = None):
        if not hasattr(source, 'client_arrays'):
            raise SimharnessTypeError(f'source {type(source).__name__} has no client_arrays(client_id); '
                                      'expected a simharness.data.ClientData')
        self.source = source
        self.client_ids = list(client_ids)
        self.transform = transform
        self.token = _token if _token is not None else next(_TOKENS)

    def __len__(self) -> int:
        return len(self.client_ids)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return SourcedClients(self.source, self.client_ids[index], self.transform,
                                  _token=self.token)
        return self.load_one(self.client_ids[index])

    def load_one(self, client_id: str) -> Any:
        arrays = self.source.client_arrays(client_id)
        return self.transform(arrays) if self.transform is not None else arrays

    def load(self) -> List[Any]:
        """Every client's value, in order."""
        return [self.load_one(c) for c in self.client_ids]

    def __repr__(self) -> str:
        return f'SourcedClients({type(self.source).__name__}, {len(self)} clients)'
