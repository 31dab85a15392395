"""Packing nested trees of numpy arrays into a shared-memory arena (test helpers).

The transports move a message's buffers themselves (`runtime/local/transport.py`);
these helpers, once part of `simharness.runtime.local.shm`, are used only by the
arena tests, which pack and unpack trees to check slots, alignment and views.
"""

from __future__ import annotations

import copy as _copy
from typing import Any, Callable, Iterator, Tuple

import numpy as np

from simharness.runtime.local.shm import ALIGNMENT, ShmArena, SlotRef, _SHM_KINDS, _round_up


def _is_shm_array(x: Any) -> bool:
    return isinstance(x, np.ndarray) and x.dtype.kind in _SHM_KINDS


def _iter_leaves(tree: Any, pred: Callable[[Any], bool]) -> Iterator[Any]:
    if pred(tree):
        yield tree
    elif isinstance(tree, (list, tuple)):
        for v in tree:
            yield from _iter_leaves(v, pred)
    elif isinstance(tree, dict):
        for v in tree.values():
            yield from _iter_leaves(v, pred)


def _map_tree(tree: Any, pred: Callable[[Any], bool], fn: Callable[[Any], Any]) -> Any:
    """Rebuilds lists, tuples (namedtuples too) and dicts; maps leaves matching `pred`."""
    if pred(tree):
        return fn(tree)
    if isinstance(tree, list):
        values = [_map_tree(v, pred, fn) for v in tree]
        if type(tree) is list:
            return values
        out = _copy.copy(tree)
        out[:] = values
        return out
    if isinstance(tree, tuple):
        values = [_map_tree(v, pred, fn) for v in tree]
        if type(tree) is tuple:
            return tuple(values)
        if hasattr(type(tree), '_fields'):  # namedtuple
            return type(tree)(*values)
        return type(tree)(values)
    if isinstance(tree, dict):
        if type(tree) is dict:
            return {k: _map_tree(v, pred, fn) for k, v in tree.items()}
        mapping = _copy.copy(tree)  # keeps OrderedDict / defaultdict and the like
        for k, v in tree.items():
            mapping[k] = _map_tree(v, pred, fn)
        return mapping
    return tree


def pack_tree(arena: ShmArena, tree: Any) -> Tuple[Any, int]:
    """Moves every numeric numpy array of `tree` into `arena`.

    `tree` is nested lists, tuples (namedtuples too) and dicts. Numeric numpy
    arrays (bool, int, float, complex, datetime; 0-d and empty included)
    become `SlotRef`s; anything else -- Python scalars, str, bytes, numpy
    scalars, object or string arrays -- is left as it is, to travel in the
    message. Slots are appended after those already in use (call
    `arena.reset()` first to reuse the space); the arena grows first if
    needed, so every `SlotRef` of one call names the same segment.

    Args:
        arena: where to write.
        tree: the structure to pack.

    Returns:
        ``(packed, nbytes)``: the tree with `SlotRef`s in place of arrays, and
        the number of array bytes written (without alignment padding).

    Raises:
        SimharnessValueError: if the arena is closed.
    """
    arrays = list(_iter_leaves(tree, _is_shm_array))
    padded = sum(_round_up(a.nbytes, ALIGNMENT) for a in arrays)
    arena.ensure_capacity(arena.used + padded)
    packed = _map_tree(tree, _is_shm_array, arena.write_array)
    return packed, sum(a.nbytes for a in arrays)


def unpack_tree(source: Any, packed: Any, *, copy: bool = False) -> Any:
    """Replaces the `SlotRef`s of `packed` by arrays.

    Args:
        source: a `ShmAttachment` (reader side) or the `ShmArena` that wrote
            the slots; anything with a ``read(SlotRef) -> np.ndarray``.
        packed: a tree returned by `pack_tree`.
        copy: False (default) gives zero-copy views, valid until the creator
            reuses the slots (read-only from a `ShmAttachment`); True gives
            owned, writable copies.

    Returns:
        The tree, with the same containers as `packed`.

    Raises:
        SimharnessValueError: if a segment does not exist (any more).
    """

    def read(ref: SlotRef) -> np.ndarray:
        arr = source.read(ref)
        return np.array(arr, copy=True) if copy else arr

    return _map_tree(packed, lambda x: isinstance(x, SlotRef), read)
