"""`SourcedClients`: client values that each holder loads itself, by client id.

A `{T}@CLIENTS` argument is normally a list of values that the driver
ingests (and, on the process stack, ships to the workers every call). A
`SourcedClients` is a lazy sequence instead: the data source (a
`ClientData`, e.g. `FileClientData` over one `.npz` per client), the client
ids and a declarative `transform` (`Pad`). On the thread stack its items are
loaded where they are ingested; on the process stack each worker receives a
*description* of the source once (file paths and array specs: plain data,
never a pickled object) and loads only its own clients, so the driver never
streams client data through itself.

```
driver: SourcedClients(files, ids[0:1000], Pad(64))
   ├─ worker 0: LOAD_SOURCED(token, source spec (first time), ids[0:500], pad spec)
   └─ worker 1: LOAD_SOURCED(token, source spec (first time), ids[500:1000], pad spec)
```

Sources that cannot be described as plain data (in-memory arrays,
preprocessed with a Python function) and Python-function transforms are
loaded by the driver and shipped as values: nothing from the user's Python
crosses a process boundary.
"""

from __future__ import annotations

import collections
import collections.abc
import dataclasses
import itertools
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from simharness.data.files import FileClientData
from simharness.errors import ConfigError, SimharnessTypeError, SimharnessValueError

_TOKENS = itertools.count(1)


class SourcedClients(collections.abc.Sequence):
    """Client values loaded from `source` by client id, on demand.

    Args:
      source: anything with `client_arrays(client_id) -> dict of arrays`
        (every `ClientData`). A `FileClientData` over a directory of files
        is loaded by the workers themselves; others by the driver.
      client_ids: the clients, in order (one value per client).
      transform: None (keep the arrays dict), a `Pad`, or any function
        `arrays dict -> client value` (then the driver loads the clients
        itself on process stacks: a Python function never crosses).
    """

    def __init__(
        self,
        source: Any,
        client_ids: Sequence[str],
        transform: Optional[Callable[[Any], Any]] = None,
        *,
        _token: Optional[int] = None,
    ):
        if not hasattr(source, 'client_arrays'):
            raise SimharnessTypeError(
                f'source {type(source).__name__} has no client_arrays(client_id); '
                'expected a simharness.data.ClientData'
            )
        self.source = source
        self.client_ids = list(client_ids)
        self.transform = transform
        self.token = _token if _token is not None else next(_TOKENS)

    def __len__(self) -> int:
        return len(self.client_ids)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return SourcedClients(
                self.source, self.client_ids[index], self.transform, _token=self.token
            )
        return self.load_one(self.client_ids[index])

    def load_one(self, client_id: str) -> Any:
        arrays = self.source.client_arrays(client_id)
        return self.transform(arrays) if self.transform is not None else arrays

    def load(self) -> List[Any]:
        """Every client's value, in order."""
        return [self.load_one(c) for c in self.client_ids]

    def __repr__(self) -> str:
        return f'SourcedClients({type(self.source).__name__}, {len(self)} clients)'


def pad_client(
    a: Mapping[str, np.ndarray], max_examples: int, x_key: str = 'x', y_key: str = 'y'
) -> Dict[str, Any]:
    """One client's ``{'x', 'y', 'n'}`` padded with zeros to `max_examples` rows."""
    return Pad(max_examples, x_key, y_key)(a)


@dataclasses.dataclass(frozen=True)
class Pad:
    """A declarative transform: ``{'x', 'y', 'n'}`` padded to `max_examples` rows.

    Plain data, so that a worker can apply it to the clients it loads.
    ``x`` and ``y`` are cast to `x_dtype` / `y_dtype` and reshaped to
    ``[n] + x_shape`` / ``[n] + y_shape`` (`x_shape` None: as loaded).
    """

    max_examples: int
    x_key: str = 'x'
    y_key: str = 'y'
    x_dtype: str = 'float32'
    y_dtype: str = 'int32'
    x_shape: Optional[Tuple[int, ...]] = None
    y_shape: Tuple[int, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, 'x_dtype', np.dtype(self.x_dtype).str)
        object.__setattr__(self, 'y_dtype', np.dtype(self.y_dtype).str)
        if self.x_shape is not None:
            object.__setattr__(self, 'x_shape', tuple(int(d) for d in self.x_shape))
        object.__setattr__(self, 'y_shape', tuple(int(d) for d in self.y_shape))

    def __call__(self, arrays: Mapping[str, np.ndarray]) -> Dict[str, Any]:
        x = np.asarray(arrays[self.x_key]).astype(self.x_dtype, copy=False)
        y = np.asarray(arrays[self.y_key]).astype(self.y_dtype, copy=False)
        n = x.shape[0]
        if n > self.max_examples:
            raise ConfigError(
                f'a client has {n} examples, more than max_examples={self.max_examples}',
                key='max_examples',
                value=n,
            )
        if self.x_shape is not None:
            x = x.reshape((n,) + self.x_shape)
        y = y.reshape((n,) + self.y_shape)
        xp = np.zeros((self.max_examples,) + x.shape[1:], self.x_dtype)
        yp = np.zeros((self.max_examples,) + self.y_shape, self.y_dtype)
        xp[:n], yp[:n] = x, y
        return collections.OrderedDict(x=xp, y=yp, n=np.int32(n))

    def to_spec(self) -> Dict[str, Any]:
        return {
            'kind': 'pad',
            'max_examples': self.max_examples,
            'x_key': self.x_key,
            'y_key': self.y_key,
            'x_dtype': self.x_dtype,
            'y_dtype': self.y_dtype,
            'x_shape': None if self.x_shape is None else list(self.x_shape),
            'y_shape': list(self.y_shape),
        }


def transform_spec(transform: Any) -> Optional[Dict[str, Any]]:
    """The plain-data description of `transform` ({'kind': 'none'} for None), or None."""
    if transform is None:
        return {'kind': 'none'}
    if isinstance(transform, Pad):
        return transform.to_spec()
    return None


def transform_from_spec(spec: Mapping[str, Any]) -> Callable[[Any], Any]:
    kind = spec.get('kind')
    if kind == 'none':
        return lambda arrays: arrays
    if kind == 'pad':
        x_shape = spec.get('x_shape')
        return Pad(
            int(spec['max_examples']),
            str(spec['x_key']),
            str(spec['y_key']),
            str(spec.get('x_dtype', '<f4')),
            str(spec.get('y_dtype', '<i4')),
            None if x_shape is None else tuple(x_shape),
            tuple(spec.get('y_shape', ())),
        )
    raise SimharnessValueError(f'unknown client transform {kind!r}')


def source_spec(source: Any) -> Optional[Dict[str, Any]]:
    """A plain-data description of a file-backed source, or None (the driver loads it)."""
    paths = source.paths if type(source) is FileClientData else None
    if paths is None:
        return None
    return {
        'kind': 'npz_files',
        'ids': list(source.client_ids),
        'paths': {cid: str(p) for cid, p in paths.items()},
        'spec': {
            k: [np.dtype(dt).str, list(shape)] for k, (dt, shape) in source.array_spec.items()
        },
        'sizes': source.sizes,
    }


def source_from_spec(spec: Mapping[str, Any]) -> Any:
    """The `ClientData` a `source_spec` describes."""
    if spec.get('kind') != 'npz_files':
        raise SimharnessValueError(f'unknown client data source kind {spec.get("kind")!r}')
    return FileClientData(
        spec['ids'],
        {k: (np.dtype(dt), tuple(shape)) for k, (dt, shape) in spec['spec'].items()},
        paths={cid: Path(p) for cid, p in spec['paths'].items()},
        sizes=spec['sizes'],
    )
