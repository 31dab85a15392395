"""The worker protocol: requests, responses and value references.

```
driver (ProcessDelegatingExecutor)                  worker k (worker.py)
  Request(op, args, out_base, free) --pipe------->  resolve Refs -> EagerValues
     arrays in args: SlotRefs into the driver's       arrays: copied out of the
     arena for worker k (driver writes, worker        driver's arena (it is reused
     reads)                                           by the next request)
                                                    run EagerTFExecutor.<op>(*args)
  Response(ok, result, types, ...) <--pipe-------   results: values stored under
     arrays in result: SlotRefs into worker k's       ids out_base..; arrays written
     arena (worker writes, driver copies out)         into the worker's own arena
```

This module is transport-independent and imports no TensorFlow: another
transport (gRPC, Ray) carries the same `Request`/`Response` objects and
only replaces the pipe and the arenas with its own byte channel.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, List, Optional, Tuple

import numpy as np

from simharness.core.reduction import Partial
from simharness.core.structure import Struct


@dataclasses.dataclass(frozen=True)
class Ref:
    """A reference to a value stored in a worker, by id."""

    id: int


@dataclasses.dataclass(frozen=True)
class RefRange:
    """References to the values with ids ``start .. start + count - 1``, as a list."""

    start: int
    count: int


@dataclasses.dataclass(frozen=True)
class DatasetBlob:
    """A `tf.data.Dataset` shipped as its serialized graph (no Python code)."""

    graph: bytes
    element_type: Any  # simharness Type of the elements


@dataclasses.dataclass
class Request:
    """One operation for one worker, covering all of its clients.

    Attributes:
      op: the name of the `EagerTFExecutor` batch method to run ('create_map', ...).
      args: positional arguments, with `Ref`s for worker values and
        `SlotRef`s for arrays.
      out_base: the first id under which the worker stores result values.
      free: (first id, count) ranges of values the driver no longer needs.
      arena: the name of the driver's current arena for this worker (it may
        be re-created bigger).
    """

    op: str
    args: tuple
    out_base: int = 0
    free: Tuple[Tuple[int, int], ...] = ()
    arena: str = ''


@dataclasses.dataclass
class Response:
    """The result of a `Request`.

    Attributes:
      ok: False when the operation raised; `error` then holds the exception
        (pickled with its message) and `traceback` the worker's traceback.
      kind: 'values' (`count` values stored from `out_base`, with `types`
        one type for all or one per value), 'data' (`result` is a tree
        with SlotRefs into the worker's arena) or 'none'.
      arena: the worker's current arena name (it may grow).
      nbytes: bytes written into shared memory by the worker for this response.
    """

    ok: bool
    kind: str = 'none'
    result: Any = None
    count: int = 0
    types: Any = None
    error: Optional[BaseException] = None
    traceback: str = ''
    arena: str = ''
    nbytes: int = 0


def map_leaves(obj: Any, fn: Callable[[Any], Any]) -> Any:
    """Rebuilds `obj` with every non-container leaf replaced by `fn(leaf)`.

    Containers: Struct, Partial, list, tuple (not namedtuples' fields order
    lost: namedtuples are rebuilt), dict.
    """
    if isinstance(obj, Struct):
        return Struct((n, map_leaves(v, fn)) for n, v in obj.items())
    if isinstance(obj, Partial):
        return Partial(obj.start, obj.stop, [map_leaves(v, fn) for v in obj.head],
                       {k: map_leaves(v, fn) for k, v in obj.nodes.items()}, obj.open_chunk,
                       None if obj.open_chunk is None else map_leaves(obj.open_acc, fn))
    if isinstance(obj, tuple) and hasattr(type(obj), '_fields'):
        return type(obj)(*[map_leaves(v, fn) for v in obj])
    if isinstance(obj, (list, tuple)):
        return type(obj)(map_leaves(v, fn) for v in obj)
    if isinstance(obj, dict):
        return type(obj)((k, map_leaves(v, fn)) for k, v in obj.items())
    return fn(obj)


def is_numeric_array(x: Any) -> bool:
    return isinstance(x, np.ndarray) and x.dtype != object and x.dtype.kind in 'biufc'


def pack_arrays(obj: Any, write: Callable[[np.ndarray], Any]) -> Tuple[Any, int]:
    """Replaces numeric numpy arrays (and scalars) by `write(array)` results.

    Returns the new tree and the number of bytes written.
    """
    total = [0]

    def leaf(x):
        if isinstance(x, np.generic) and x.dtype.kind in 'biufc':
            return x  # scalars pickle small
        if is_numeric_array(x):
            total[0] += x.nbytes
            return write(x)
        return x
    return map_leaves(obj, leaf), total[0]
