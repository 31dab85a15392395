"""The driver's values as the codec carries them to a worker (`WorkerDelegatingExecutor`).

What it does: turns a program's Python values (containers, tensors, datasets) into the
plain data the codec encodes (`wire_value`), prepares a value meant for several workers
once (`SharedValue`: plain, encoded, and whether it goes through the broadcast arena),
and rebuilds the datasets a worker answers with (`revive`). It holds no state: the
session's ids, requests and caches are `worker_delegating`'s.
"""

from __future__ import annotations

import dataclasses
from typing import Any, List, Optional, Sequence

import numpy as np

from simharness.core import types as T
from simharness.core.structure import Struct, from_container, tensor_to_numpy
from simharness.errors import SimharnessError, at_client
from simharness.runtime.codec import DatasetRecipe, Packed
from simharness.runtime.codec import DatasetBlob
from simharness.runtime.protocol import map_leaves

#: Values at least this big go through the pool's broadcast arena (written once).
BROADCAST_MIN_BYTES = 1 << 16


def array_bytes(tree: Any) -> int:
    total = [0]

    def leaf(x):
        if isinstance(x, np.ndarray):
            total[0] += x.nbytes
        return x

    map_leaves(tree, leaf)
    return total[0]


def wire_values(values: Sequence[Any], t: T.Type) -> List[Any]:
    """`wire_value` of each value; an error about one names its client (its position)."""
    out = []
    for i, v in enumerate(values):
        try:
            out.append(wire_value(v, t))
        except SimharnessError as e:
            raise at_client(e, i)
    return out


def read_functions_once(values: List[Any]) -> List[Any]:
    """`values` with each pipeline's read function on its first `DatasetRecipe` only: the
    worker imports it from there for the others of the message."""
    seen: set = set()
    out = []
    for v in values:
        if isinstance(v, DatasetRecipe):
            if v.key in seen:
                v = dataclasses.replace(v, read=None)
            seen.add(v.key)
        out.append(v)
    return out


def is_dataset(x: Any) -> bool:
    return hasattr(x, 'element_spec') and hasattr(x, '_as_serialized_graph')


def revive(x: Any) -> Any:
    """Datasets come back from workers as serialized graphs: rebuild them."""
    if isinstance(x, DatasetBlob):
        # reason: datasets.py imports TensorFlow; only a dataset value needs it
        from simharness.runtime.datasets import dataset_from_blob

        return dataset_from_blob(x)
    return x


def wire_value(value: Any, t: Optional[T.Type]) -> Any:
    """`value` (of type `t`) as plain data the codec carries: Structs, numpy, lists, blobs.

    Python containers (namedtuples, attrs classes, OrderedDicts) become
    `Struct`s, tensors numpy arrays, datasets their arrays (`TensorBatches`,
    when they are slices of in-memory tensors) or serialized graphs; a user's
    object that is none of these is refused by the codec.
    """
    if is_dataset(value):
        # reason: datasets.py imports TensorFlow; only a dataset value needs it
        from simharness.runtime.datasets import dataset_to_wire

        return dataset_to_wire(value, t)
    if hasattr(value, 'numpy') and not isinstance(value, np.ndarray):
        return tensor_to_numpy(value)
    if isinstance(t, T.StructType):
        s = from_container(value, t)
        return Struct((n, wire_value(v, et)) for (n, et), v in zip(t.items(), s))
    if isinstance(t, T.SequenceType) and isinstance(value, (list, tuple)):
        return [wire_value(v, t.element) for v in value]
    if t is None:
        if isinstance(value, Struct):
            return Struct((n, wire_value(v, None)) for n, v in value.items())
        if isinstance(value, (list, tuple)) and not hasattr(type(value), '_fields'):
            return type(value)(wire_value(v, None) for v in value)
        if isinstance(value, dict) or T.is_namedtuple(value):
            return wire_value(value, T.infer_type(value))
    return value


class SharedValue:
    """A Python value prepared once for `create_value` on several workers: its plain form,
    encoded (`codec.Packed`), and whether it goes through the broadcast arena."""

    __slots__ = ('value', 'type', 'packed', 'big')

    def __init__(self, value: Any, type_spec: Any):
        self.value = value
        self.type = None if type_spec is None else T.to_type(type_spec)
        plain = wire_value(value, self.type)
        self.big = array_bytes(plain) >= BROADCAST_MIN_BYTES
        self.packed = Packed(plain)
