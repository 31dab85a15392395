"""The canonical reduction order: results independent of how clients are spread.

Every aggregation over clients (sum, mean, weighted mean, min, max, secure
sums and `federated_aggregate`) follows one fixed tree over the client indices
``0 .. N-1``, so that its result is bit-identical whatever the number of
threads or workers and however many clients each takes per batch:

```
  clients   0 1 2 ... 15 | 16 ... 31 | 32 ... | ... N-1        (CHUNK = 16)
  chunk c:  acc_c = accumulate(...accumulate(start(v_16c), v_16c+1)..., v_16c+15)
  tree:     a fixed binary tree over chunk indices; node(l, i) covers chunks
            [i*2^l, (i+1)*2^l) and equals merge(node(l-1, 2i), node(l-1, 2i+1)),
            or just its left child when the right one is past the last chunk.
  result:   node(K, 0) with 2^K >= number of chunks.
```

A holder of a contiguous block of clients (a worker, a thread) reduces its
block to a `Partial` without talking to anyone: the raw values of a chunk
begun in an earlier block (`head`, at most CHUNK-1 values), the tree nodes
it can close, and the accumulator of a chunk it began but could not finish
(`open_acc`). `combine` joins the partials of all blocks, in block order,
into exactly the value the tree defines. Only `Partial`s travel: their size
depends on the number of blocks and log(N), not on N.

The module is pure Python: callers pass the `start`, `accumulate` and
`merge` functions (numpy adds for sums, TF computations for
`federated_aggregate`).
"""

from __future__ import annotations

import collections.abc
import contextlib
import dataclasses
import enum
from typing import (
    Any,
    Callable,
    ContextManager,
    Dict,
    Iterable,
    List,
    Optional,
    Sequence,
    Tuple,
    Union,
    cast,
)

import numpy as np

from simharness.core.buffers import POOL, split_elementwise
from simharness.core.struct import Struct, struct_like
from simharness.core.structure import flatten, map_nest, map_structure
from simharness.errors import SimharnessValueError

#: Number of consecutive clients folded sequentially before tree merging.
CHUNK = 16

Node = Tuple[int, int]  # (level, index)


class ReductionKind(str, enum.Enum):
    """What a reduction over clients computes: `create_partial_reduction`'s `kind`.

    A `str` subclass: a kind crosses the worker seam as its plain value (the
    codec encodes a `str` subclass as its string), so a peer reads the same
    bytes as before the enum. `of` makes one from a decoded string.
    """

    SUM = 'sum'
    MEAN = 'mean'
    WEIGHTED_MEAN = 'weighted_mean'
    MIN = 'min'
    MAX = 'max'
    SECURE_SUM_BITWIDTH = 'secure_sum_bitwidth'
    SECURE_MODULAR_SUM = 'secure_modular_sum'
    AGGREGATE = 'aggregate'

    def __str__(self) -> str:
        return str.__str__(self)

    def __format__(self, spec: str) -> str:
        return str.__format__(self, spec)

    @classmethod
    def of(cls, value: object) -> ReductionKind:
        """`value` as a kind (a kind, or its string, e.g. off the wire).

        Raises:
          SimharnessValueError: `value` names no kind (the message names it and
            the kinds expected).
        """
        if isinstance(value, cls):
            return value
        try:
            return cls(value)
        except ValueError:
            expected = ', '.join(repr(k.value) for k in cls)
            raise SimharnessValueError(
                f'unknown reduction kind {value!r}: expected one of {expected}'
            ) from None


#: The kinds whose numpy folds add (`add_trees`): the sums and the means.
ADDING_KINDS = frozenset({ReductionKind.SUM, ReductionKind.MEAN, ReductionKind.WEIGHTED_MEAN})
#: The secure sums (their `params` carry a 'bitwidth' or a 'modulus').
SECURE_KINDS = frozenset({ReductionKind.SECURE_SUM_BITWIDTH, ReductionKind.SECURE_MODULAR_SUM})


class HeadRows(collections.abc.Sequence):
    """The raw head values of a `Partial` as one stacked array per leaf (a decoded message).

    A worker's head values travel as rows (`runtime.codec`, ext `_ROWS`); they
    stay rows here: value k is built (a tree of row views) only when asked
    for, and `add_many_trees` folds the rows leaf by leaf without building
    any (the same additions in the same order: the same bits). With many
    small blocks (16 workers of 6 clients) most clients arrive this way.

    Attributes:
      template: the values' structure (`Struct`s, lists, tuples) with each
        leaf replaced by its index in `stacked` (``-1 - index`` for a numpy
        scalar leaf).
      stacked: the leaves, each with the values along its first axis.
    """

    __slots__ = ('template', 'stacked')

    def __init__(self, template: Any, stacked: List[np.ndarray]):
        if not stacked or any(
            not isinstance(a, np.ndarray) or not a.ndim or len(a) != len(stacked[0])
            for a in stacked
        ):
            raise SimharnessValueError('head rows need one or more stacked arrays of equal length')
        bad: List[Any] = []
        map_nest(
            lambda i: (
                None if type(i) is int and -len(stacked) <= i < len(stacked) else bad.append(i)
            ),
            template,
            structs=True,
        )
        if bad:
            raise SimharnessValueError(
                f'head rows: leaf {bad[0]!r} of the template is not the '
                f'index of one of the {len(stacked)} stacked arrays'
            )
        self.template = template
        self.stacked = stacked

    def __len__(self) -> int:
        return len(self.stacked[0])

    def __getitem__(self, k: Any) -> Any:
        if isinstance(k, slice):
            return [self[i] for i in range(*k.indices(len(self)))]
        n = len(self)
        if not -n <= k < n:
            raise IndexError(f'head value {k} of {n}')
        k %= n
        return map_nest(lambda i: self._row(i, k), self.template, structs=True)

    def _row(self, i: int, k: int) -> Any:
        return self.stacked[i][k, ...] if i >= 0 else self.stacked[-1 - i][k]

    def leaf_rows(self) -> Optional[List[List[Any]]]:
        """For values that are `Struct`s all the way down (what `flatten` walks): per leaf
        in `flatten` order, the values' leaves (row views, as `self[k]` holds them); else
        None."""
        order = flatten(self.template)
        if not all(type(i) is int for i in order):
            return None  # lists or tuples inside: `flatten` would not walk them alike
        return [[self._row(i, k) for k in range(len(self))] for i in order]

    def __repr__(self) -> str:
        return f'HeadRows({len(self)} values, {len(self.stacked)} leaves)'


@dataclasses.dataclass
class Partial:
    """The reduction of the clients ``[start, stop)`` of a block.

    Attributes:
      start: first client index of the block.
      stop: one past the last client index.
      head: raw values of the leading clients that belong to a chunk begun
        before `start` (the holder of that chunk's beginning folds them in):
        a list, or `HeadRows` as decoded from a message.
      nodes: closed tree nodes, keyed by (level, index).
      open_chunk: index of the chunk begun in this block but not finished.
      open_acc: accumulator of that chunk.
      loans: when its arrays are views of memory lent by a worker (read in
        place, not copied), the loans that hold that memory; `release` hands
        it back. Not part of the value: not compared, not sent.
    """

    start: int
    stop: int
    head: Union[List[Any], HeadRows] = dataclasses.field(default_factory=list)
    nodes: Dict[Node, Any] = dataclasses.field(default_factory=dict)
    open_chunk: Optional[int] = None
    open_acc: Any = None
    loans: Tuple[Any, ...] = dataclasses.field(default=(), compare=False, repr=False)

    def map(self, fn: Callable[[Any], Any]) -> 'Partial':
        """A copy with `fn` applied to every value held (head values, tree nodes, open accumulator)."""
        return Partial(
            self.start,
            self.stop,
            [fn(v) for v in self.head],
            {k: fn(v) for k, v in self.nodes.items()},
            self.open_chunk,
            None if self.open_chunk is None else fn(self.open_acc),
            self.loans,
        )

    def release(self) -> None:
        """Hands back the lent memory its arrays view (see `loans`): call it once nothing
        made from them refers to it any more. Idempotent; nothing to do for a partial of
        its own arrays."""
        for loan in self.loans:
            loan.release()


class Reducer:
    """Folds values into the canonical tree.

    Args:
      start: makes a chunk accumulator from the chunk's first value
        (`accumulate(zero, v)` for aggregates, a copy for sums).
      accumulate: `(acc, value) -> acc`, folds a value into a chunk.
      merge: `(left, right) -> merged`, joins two tree nodes.
      total: the number of clients N in the whole reduction.
      chunk: the chunk size (tests only; the default is the canonical one).
      accumulate_many: optional `(acc, [v1, v2, ...]) -> acc`, the same as
        folding the values one by one with `accumulate` (in one call: `combine`
        uses it for the raw head values of a block).
    """

    def __init__(
        self,
        start: Callable[[Any], Any],
        accumulate: Callable[[Any, Any], Any],
        merge: Callable[[Any, Any], Any],
        total: int,
        chunk: int = CHUNK,
        accumulate_many: Optional[Callable[[Any, List[Any]], Any]] = None,
    ):
        if total < 0:
            raise SimharnessValueError(f'total must be >= 0, got {total}')
        self._start = start
        self._accumulate_many = accumulate_many
        self._accumulate = accumulate
        self._merge = merge
        self.total = total
        self.chunk = chunk

    # ------------------------------------------------------------ blocks
    def begin(self, start: int) -> '_Builder':
        """Starts the partial of a block beginning at client `start`."""
        return _Builder(self, start)

    def partial(self, values: Iterable[Any], start: int) -> Partial:
        """The partial of the block holding `values` for clients from `start`."""
        b = self.begin(start)
        b.feed(values)
        return b.finish()

    # ------------------------------------------------------------ folds
    def start_chunk(self, value: Any) -> Any:
        """The accumulator of a chunk whose first value is `value` (the `start` function)."""
        return self._start(value)

    def fold(self, acc: Any, value: Any) -> Any:
        """`acc` with `value` folded in (the `accumulate` function)."""
        return self._accumulate(acc, value)

    # ------------------------------------------------------------ tree
    def chunk_end(self, c: int) -> int:
        """One past the last client index of chunk `c`."""
        return min((c + 1) * self.chunk, self.total)

    def insert_node(self, nodes: Dict[Node, Any], level: int, index: int, value: Any) -> None:
        """Puts the closed tree node (`level`, `index`) into `nodes`, merging it with its
        sibling there (and the merged node with its own sibling, and so on up)."""
        while True:
            sib = (level, index ^ 1)
            if sib not in nodes:
                nodes[(level, index)] = value
                return
            other = nodes.pop(sib)
            value = self._merge(other, value) if index & 1 else self._merge(value, other)
            level, index = level + 1, index >> 1

    def _num_chunks(self) -> int:
        return -(-self.total // self.chunk)

    def join(self, left: Partial, right: Partial) -> Partial:
        """The partial of two adjacent blocks, ``left`` then ``right``, as one block.

        Exactly the partial that `partial` would give for the union block:
        `right`'s head values are folded into `left`'s open chunk (or kept as
        head when `left` is all head), then `right`'s tree nodes are inserted,
        merging with `left`'s where the tree says so. This is what lets a
        holder reduce its block slice by slice (streaming) and still give
        every bit of the one-piece partial.

        Raises:
          SimharnessValueError: the blocks are not adjacent.
        """
        if left.stop != right.start:
            raise SimharnessValueError(
                f'cannot join the partial of [{left.start}, {left.stop}) '
                f'with one starting at {right.start}'
            )
        head = list(left.head)
        nodes = dict(left.nodes)
        open_chunk, open_acc = left.open_chunk, left.open_acc
        pos = right.start
        if right.head:
            c = pos // self.chunk
            if open_chunk is None:
                # `left` holds no beginning of this chunk: it is all head so far.
                if left.nodes or (left.start // self.chunk) != c:
                    raise SimharnessValueError(
                        f'client {pos} continues chunk {c}, which the left block did not begin'
                    )
                head.extend(right.head)
            else:
                if open_chunk != c:
                    raise SimharnessValueError(
                        f'client {pos} continues chunk {c}, but the left '
                        f'block left chunk {open_chunk} open'
                    )
                if self._accumulate_many is not None and len(right.head) > 1:
                    open_acc = self._accumulate_many(open_acc, _values(right.head))
                else:
                    for v in right.head:
                        open_acc = self._accumulate(open_acc, v)
            pos += len(right.head)
            if pos == self.chunk_end(c) and open_chunk is not None:
                self.insert_node(nodes, 0, c, open_acc)
                open_chunk, open_acc = None, None
        if open_chunk is not None and (right.nodes or right.open_chunk is not None):
            raise SimharnessValueError(
                f'chunk {open_chunk} was left unfinished before client {pos}'
            )
        for level, index in sorted(right.nodes):
            self.insert_node(nodes, level, index, right.nodes[(level, index)])
        if right.open_chunk is not None:
            open_chunk, open_acc = right.open_chunk, right.open_acc
        return Partial(
            left.start, right.stop, head, nodes, open_chunk, open_acc, left.loans + right.loans
        )

    # ------------------------------------------------------------ combine
    def combine(self, partials: Sequence[Partial]) -> Any:
        """Joins the partials of blocks covering ``[0, total)`` into the result.

        Raises:
          SimharnessValueError: if the blocks do not tile ``[0, total)``.
        """
        if self.total == 0:
            raise SimharnessValueError('cannot reduce zero clients')
        parts = sorted(partials, key=lambda p: p.start)
        nodes: Dict[Node, Any] = {}
        open_chunk: Optional[int] = None
        open_acc: Any = None
        pos = 0
        for p in parts:
            if p.start != pos:
                raise SimharnessValueError(
                    f'partials do not tile the clients: expected a block starting at {pos}, '
                    f'got one starting at {p.start}'
                )
            idx = p.start
            if p.head:
                c = idx // self.chunk
                if open_chunk != c:
                    raise SimharnessValueError(
                        f'client {idx} continues chunk {c}, which no earlier block began'
                    )
                if idx + len(p.head) > self.chunk_end(c):
                    raise SimharnessValueError(
                        f'the head of the block at {idx} runs past the end of chunk {c}'
                    )
                if self._accumulate_many is not None and len(p.head) > 1:
                    open_acc = self._accumulate_many(open_acc, _values(p.head))
                else:
                    for v in p.head:
                        open_acc = self._accumulate(open_acc, v)
                idx += len(p.head)
                if idx == self.chunk_end(c):
                    self.insert_node(nodes, 0, c, open_acc)
                    open_chunk, open_acc = None, None
            for level, index in sorted(p.nodes):
                self.insert_node(nodes, level, index, p.nodes[(level, index)])
            if p.open_chunk is not None:
                if open_chunk is not None:
                    raise SimharnessValueError(f'chunk {open_chunk} was left unfinished')
                open_chunk, open_acc = p.open_chunk, p.open_acc
            pos = p.stop
        if pos != self.total:
            raise SimharnessValueError(
                f'partials cover clients [0, {pos}), expected [0, {self.total})'
            )
        if open_chunk is not None:
            raise SimharnessValueError(f'chunk {open_chunk} was left unfinished')
        n = self._num_chunks()
        top = max(0, (n - 1).bit_length())
        return self._node_value(nodes, top, 0, n)

    def _node_value(self, nodes: Dict[Node, Any], level: int, index: int, n: int) -> Any:
        if (level, index) in nodes:
            return nodes[(level, index)]
        if level == 0:
            raise SimharnessValueError(f'chunk {index} is missing from the partials')
        left = self._node_value(nodes, level - 1, 2 * index, n)
        if (2 * index + 1) << (level - 1) >= n:
            return left
        right = self._node_value(nodes, level - 1, 2 * index + 1, n)
        return self._merge(left, right)


def _values(head: Any) -> Any:
    """A head for `accumulate_many`: `HeadRows` as they are (folded row by row), else a list."""
    return head if isinstance(head, HeadRows) else list(head)


class _Builder:
    """Incrementally builds the `Partial` of one block (fed in client order)."""

    def __init__(self, reducer: Reducer, start: int):
        self._r = reducer
        self._p = Partial(start, start)
        self._pos = start
        self._in_head = start % reducer.chunk != 0

    def feed(self, values: Iterable[Any]) -> None:
        r = self._r
        p = self._p
        for v in values:
            idx = self._pos
            if idx >= r.total:
                raise SimharnessValueError(f'client index {idx} is past the total {r.total}')
            c = idx // r.chunk
            if self._in_head:
                p.head.append(v)
            elif p.open_chunk is None:
                p.open_chunk, p.open_acc = c, r.start_chunk(v)
            else:
                p.open_acc = r.fold(p.open_acc, v)
            idx += 1
            self._pos = idx
            if idx == r.chunk_end(c):
                if self._in_head:
                    self._in_head = False
                else:
                    r.insert_node(p.nodes, 0, c, p.open_acc)
                    p.open_chunk, p.open_acc = None, None
        p.stop = self._pos

    @property
    def chunk(self) -> int:
        """The reducer's chunk size: clients whose accumulator is folded before the tree."""
        return self._r.chunk

    @property
    def position(self) -> int:
        """The next client index to feed."""
        return self._pos

    def feed_chunk_accumulators(self, accs: Sequence[Any]) -> None:
        """Adds already-folded accumulators of whole consecutive chunks.

        The caller folded each chunk exactly as `feed` would (a vectorized
        fold over many chunks at once, say); the builder must be at a chunk
        boundary with no chunk open.
        """
        r = self._r
        p = self._p
        if self._in_head or p.open_chunk is not None or self._pos % r.chunk:
            raise SimharnessValueError('chunk accumulators must start at a chunk boundary')
        for acc in accs:
            c = self._pos // r.chunk
            if (c + 1) * r.chunk > r.total:
                raise SimharnessValueError(f'chunk {c} is not a whole chunk of {r.total} clients')
            r.insert_node(p.nodes, 0, c, acc)
            self._pos += r.chunk
        p.stop = self._pos

    def feed_folded(self, acc: Any, count: int) -> None:
        """Adds the accumulator of the next `count` clients, folded by the caller.

        The builder must be at a chunk boundary with no chunk open, and the
        clients must lie in one chunk: `acc` is `start` of the first one then
        `accumulate` of the others, as `feed` would compute.
        """
        r = self._r
        p = self._p
        c = self._pos // r.chunk
        if self._in_head or p.open_chunk is not None or self._pos % r.chunk:
            raise SimharnessValueError('folded accumulators must start at a chunk boundary')
        if count < 1 or self._pos + count > r.chunk_end(c):
            raise SimharnessValueError(f'{count} clients from {self._pos} do not fit in chunk {c}')
        self._pos += count
        if self._pos == r.chunk_end(c):
            r.insert_node(p.nodes, 0, c, acc)
        else:
            p.open_chunk, p.open_acc = c, acc
        p.stop = self._pos

    def finish(self) -> Partial:
        return self._p


# ------------------------------------------------------------ numpy folds
# The folds of the numpy kinds (sums, means, secure sums), shared by every holder.


def add_arrays(x: Any, y: Any) -> Any:
    """``np.add(x, y)``; big arrays of one shape and dtype sum into a reused aligned buffer.

    The same bits as ``np.add``. The result is the caller's alone (a fresh or
    a free pooled buffer), 64-byte aligned when pooled, so that it can become
    a tensor without a copy.
    """
    if (
        isinstance(x, np.ndarray)
        and isinstance(y, np.ndarray)
        and x.shape == y.shape
        and x.dtype == y.dtype
        and x.nbytes >= POOL.min_bytes
    ):
        out = POOL.empty(x.shape, x.dtype)
        split_elementwise(np.add, out, x, y)
        return out
    return np.add(x, y)


def concatenate_rows(parts: List[np.ndarray]) -> np.ndarray:
    """``np.concatenate(parts)`` (along rows), into a reused buffer when big."""
    first = parts[0]
    if all(
        isinstance(p, np.ndarray) and p.dtype == first.dtype and p.shape[1:] == first.shape[1:]
        for p in parts
    ):
        rows = sum(p.shape[0] for p in parts)
        if rows * (first.nbytes // max(1, first.shape[0])) >= POOL.min_bytes:
            return np.concatenate(parts, out=POOL.empty((rows,) + first.shape[1:], first.dtype))
    return np.concatenate(parts)


def add_trees(a: Any, b: Any) -> Any:
    """Elementwise ``a + b`` of two numpy trees (integer overflow wraps, silently)."""
    with np.errstate(over='ignore'):
        return map_structure(add_arrays, a, b)


def add_many_trees(acc: Any, values: Sequence[Any]) -> Any:
    """``add_trees(...add_trees(add_trees(acc, v1), v2)..., vk)``, the same bits, in one walk.

    The raw head values of a block folded into an open chunk at once
    (`Reducer.accumulate_many`): with many small blocks (16 workers of 6
    clients) most clients arrive as head values, and a tree walk per value
    cost the driver more than the additions. Each leaf is added left to right
    as `add_trees` would, into the buffer of its first sum (the caller's own).
    """
    if not values:
        return acc
    acc_leaves = flatten(acc)
    columns = values.leaf_rows() if isinstance(values, HeadRows) else None
    if columns is None or len(columns) != len(acc_leaves):
        rows = [flatten(v) for v in values]
        columns = [[r[j] for r in rows] for j in range(len(acc_leaves))]
    out = []
    with np.errstate(over='ignore'):
        for a, column in zip(acc_leaves, columns):
            s = add_arrays(a, column[0])
            for x in column[1:]:
                if (
                    isinstance(s, np.ndarray)
                    and s.ndim
                    and isinstance(x, np.ndarray)
                    and x.shape == s.shape
                    and x.dtype == s.dtype
                    and s.flags.c_contiguous
                    and x.flags.c_contiguous
                    and s.flags.writeable
                ):
                    split_elementwise(np.add, s, s, x)  # elementwise: in place, the same bits
                else:
                    s = add_arrays(s, x)
            out.append(s)
    return _rebuild(acc, iter(out))


def _rebuild(template: Any, leaves: Any) -> Any:
    if isinstance(template, Struct):
        return struct_like(template, [_rebuild(v, leaves) for v in template])
    return next(leaves)


def min_trees(a: Any, b: Any) -> Any:
    """Elementwise ``np.minimum(a, b)`` of two numpy trees (`federated_min`'s fold)."""
    return map_structure(np.minimum, a, b)


def max_trees(a: Any, b: Any) -> Any:
    """Elementwise ``np.maximum(a, b)`` of two numpy trees (`federated_max`'s fold)."""
    return map_structure(np.maximum, a, b)


#: The fold of each order-statistic reduction kind.
EXTREMUM_FOLDS = {ReductionKind.MIN: min_trees, ReductionKind.MAX: max_trees}


def extremum_identity(kind: ReductionKind, dtype: Any) -> Any:
    """The start value TFF gives `federated_min` / `federated_max` for `dtype`.

    TFF lowers them to `federated_aggregate` with this zero: the largest
    finite value of the dtype for a min, the smallest for a max (not
    infinities); it is also the result over zero clients.
    """
    dt = np.dtype(dtype)
    info = np.iinfo(dt) if np.issubdtype(dt, np.integer) else np.finfo(dt)
    is_min = ReductionKind.of(kind) is ReductionKind.MIN
    return np.asarray(info.max if is_min else info.min, dtype=dt)


def add_trees_mod(a: Any, b: Any, moduli: Any) -> Any:
    """Elementwise ``(a + b) mod m`` of two uint64 trees, `moduli` a tree of ints like them."""
    return map_structure(lambda x, y, m: (x + y) % np.uint64(m), a, b, moduli)


def _times(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Rows of `x` [n, ...] times the weights `w` [n] (cast to `x`'s dtype)."""
    return x * w.astype(x.dtype).reshape((-1,) + (1,) * (x.ndim - 1))


def _sum_chunks(
    seg: List[np.ndarray],
    wseg: Optional[np.ndarray],
    nscaled: int,
    mode: Callable[[], ContextManager[None]] = contextlib.nullcontext,
) -> List[np.ndarray]:
    """Per leaf [c, L, ...] of c whole chunks: ``((x0 + x1) + x2) + ... + x_{L-1}`` for
    each chunk (rows of the first `nscaled` leaves times `wseg` [c, L] first, each product
    made inside `mode()`), summed into a buffer of its own in place; the leaves
    themselves are only read."""
    out: List[np.ndarray] = []
    nscaled = 0 if wseg is None else min(nscaled, len(seg))
    for x in seg[nscaled:]:
        first, second = x[:, 0], x[:, 1]
        if first.dtype.kind in 'biufc':  # numbers: a pooled (reused) buffer
            acc = POOL.empty(first.shape, first.dtype)
            np.add(first, second, out=acc)
        else:
            acc = np.add(first, second)
        for k in range(2, x.shape[1]):
            np.add(acc, x[:, k], out=acc)
        out.append(acc)
    if not nscaled:
        return out
    scaled = seg[:nscaled]
    # Column by column, the products of every scaled leaf made in one `mode()`, then added
    with mode():
        ws = [cast(np.ndarray, wseg).astype(x.dtype) for x in scaled]
        accs = [_times(x[:, 0], w[:, 0]) for x, w in zip(scaled, ws)]
    tmps = [
        POOL.empty(a.shape, a.dtype) if a.dtype.kind in 'biufc' else np.empty_like(a) for a in accs
    ]
    shapes = [(x.shape[0],) + (1,) * (x.ndim - 2) for x in scaled]
    for k in range(1, scaled[0].shape[1]):
        with mode():
            for x, w, shape, tmp in zip(scaled, ws, shapes, tmps):
                np.multiply(x[:, k], w[:, k].reshape(shape), out=tmp)
        for acc, tmp in zip(accs, tmps):
            np.add(acc, tmp, out=acc)
    return accs + out


def fold_rows_into(
    builder: Any,
    leaves: List[Any],
    start: int,
    start_rows,
    fold_rows,
    count: Optional[int] = None,
    scale: Optional[Tuple[np.ndarray, int]] = None,
    adds: bool = False,
    scale_mode: Callable[[], ContextManager[None]] = contextlib.nullcontext,
) -> None:
    """Feeds clients given leaf by leaf (arrays [n, ...]) into a reduction builder.

    The builder's reducer must use `start_rows(x)` (chunk accumulators from
    rows) and `fold_rows(acc, x)` (rows folded into accumulators), both on
    leaf lists with a leading row dimension and elementwise across rows.
    Whole chunks are folded for many chunks at once (one call per position
    within the chunk); the other rows go one by one. Every row sees exactly
    the operations, in the order, of `Reducer.partial`: the bits are the same.
    `count` is the number of clients, needed when there are no leaves (an
    empty structure: each client still counts). `scale` ``(w [n], k)``: the
    first k leaves are multiplied row by row by `w` (in the leaf's dtype) as
    their rows are folded -- a weighted mean's products, made a few rows at a
    time while they are in cache instead of all at once (the same products, so the
    same bits; the weighted fold of 52 clients of the reference MLP 1.5 -> 1.0 ms in
    one process). `adds`: `fold_rows` is ``np.add`` leaf by leaf (the numpy sums):
    whole chunks are then summed into accumulators of their own, in place
    (`_sum_chunks`: the same additions in the same order, no fresh array per step).
    `scale_mode()`: a context the products (and the weights' cast) are made in, the
    additions outside it (a map's products with TF's flushed denormals:
    `numpy_elementwise.denormals_flushed`).
    """
    n = leaves[0].shape[0] if leaves else (count or 0)
    L = builder.chunk
    end = start + n

    def scaled(xs: List[Any], w: Any) -> List[Any]:
        k = scale[1]  # type: ignore[index]
        with scale_mode():
            return [_times(x, w) if j < k else x for j, x in enumerate(xs)]

    def rows(lo, hi):
        out = [x[lo - start : hi - start] for x in leaves]
        return out if scale is None else scaled(out, scale[0][lo - start : hi - start])

    h = start if start % L == 0 else min(end, (start // L + 1) * L)
    builder.feed(rows(i, i + 1) for i in range(start, h))
    nfull = (end - h) // L
    if nfull:
        seg = [
            x[h - start : h - start + nfull * L].reshape((nfull, L) + tuple(x.shape[1:]))
            for x in leaves
        ]
        wseg = (
            None
            if scale is None
            else scale[0][h - start : h - start + nfull * L].reshape((nfull, L))
        )

        def column(k):
            xs = [x[:, k] for x in seg]
            return xs if wseg is None else scaled(xs, wseg[:, k])

        if adds and L > 1:
            acc = _sum_chunks(seg, wseg, 0 if scale is None else scale[1], scale_mode)
        else:
            acc = start_rows(column(0))
            for k in range(1, L):
                acc = fold_rows(acc, column(k))
        acc = [np.asarray(a) for a in acc]
        builder.feed_chunk_accumulators([[a[c : c + 1] for a in acc] for c in range(nfull)])
    builder.feed(rows(i, i + 1) for i in range(h + nfull * L, end))
