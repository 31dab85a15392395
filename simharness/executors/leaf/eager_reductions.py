"""The leaf executor's reductions: partial reductions of a block, their combination, streams.

`LeafReductions` is the object an `EagerTFExecutor` (`eager_tf`) owns to reduce
client values, in the canonical order of `simharness.core.reduction`:

```
  create_partial_reduction   a block's values -> a Partial (numpy kinds: whole slices of
                             REDUCTION_SLICE clients stacked and folded; aggregate: TF folds)
  create_reduction_result    the blocks' Partials -> the value (mean / weighted mean divided,
                             secure sums cast back, extrema from TFF's identities)
  create_streamed_reductions a plan's client values computed slice by slice and folded
                             (`stream_eval.stream_reductions`)
```

It reaches its executor only through `ReductionHost` (the executor's `fn_of`, `call`,
`device_scope` and `max_batch`); the executor checks it is open before each call.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Protocol, Sequence, Tuple, cast

import numpy as np

from simharness.core import types as T
from simharness.core.buffers import POOL
from simharness.core.reduction import (
    ADDING_KINDS,
    CHUNK,
    EXTREMUM_FOLDS,
    SECURE_KINDS,
    Partial,
    Reducer,
    ReductionKind,
    add_arrays,
    add_many_trees,
    add_trees,
    add_trees_mod,
    concatenate_rows,
    extremum_identity,
    fold_rows_into,
)
from simharness.core.structure import Struct, flatten, map_structure
from simharness.errors import SimharnessValueError
from simharness.executors.leaf.client_blocks import EagerValue, rows_to_values, runs
from simharness.executors.leaf.embedded_function import EmbeddedFunction, pack_result
from simharness.executors.leaf.stream_eval import node_merge, stream_reductions
from simharness.executors.leaf.tf_values import (
    as_tensors,
    fast_tensor,
    ingest,
    ingest_owned,
    numpy_tree,
    revive_datasets,
)
from simharness.runtime.stream_plan import PlanNode, PlanReduction

#: Clients a worker reduces at a time (a multiple of the reduction chunk): bounds the
#: memory of a partial reduction over a big block.
REDUCTION_SLICE = 16 * CHUNK  # 256 clients

#: The sums fed run by run when their clients are big (`_row_runs`).
_PLAIN_SUMS = frozenset({ReductionKind.SUM, ReductionKind.MEAN})


def _secure_bound_text(params: Dict[str, Any], bound: int) -> str:
    """What set a secure sum's bound, for its range error: max_input or bitwidth."""
    if params.get('bound_from') == 'max_input':
        return f' (max_input {int(bound) - 1})'
    if params.get('bound_from') == 'bitwidth':
        return f' (bitwidth {int(bound).bit_length() - 1})'
    return ''


def aggregate_holds_sequences(acc_fn: EmbeddedFunction) -> bool:
    """Whether an aggregate's accumulator or client values (`accumulate`'s parameter
    ``<accumulator, value>``) hold anything but tensors: sequences (datasets) are folded
    value by value, not as rows of stacked tensors."""
    return not T.contains_only_tensors(cast(T.Type, acc_fn.type_signature.parameter))


def _plain(v: Any) -> Any:
    """An accumulator or head value of a partial as a plain value (numpy, datasets kept)."""
    return numpy_tree(v.internal) if isinstance(v, EagerValue) else v


class ReductionHost(Protocol):
    """What `LeafReductions` uses of the leaf executor that owns it."""

    #: The most clients one TF call runs (None: no bound).
    max_batch: Optional[int]

    def fn_of(self, fn: Any) -> EmbeddedFunction:
        """The embedded function of a function value."""

    def call(self, f: EmbeddedFunction, arg: Optional[EagerValue]) -> EagerValue:
        """`f` on `arg` (one call)."""

    def device_scope(self) -> Any:
        """A context manager placing ops on the executor's device."""


class LeafReductions:
    """The reductions of a leaf executor (see the module docstring).

    Args:
      leaf: the executor that owns it (`ReductionHost`).
    """

    def __init__(self, leaf: ReductionHost):
        self._leaf = leaf

    # ------------------------------------------------------------ reductions
    def _combine_reducer(self, kind: ReductionKind, total: int, params: Dict[str, Any]) -> Reducer:
        """The reducer that joins partials (values: numpy for numpy kinds, EagerValues else)."""
        if kind in ADDING_KINDS:
            return Reducer(lambda v: v, add_trees, add_trees, total, accumulate_many=add_many_trees)
        if kind in EXTREMUM_FOLDS:
            return Reducer(lambda v: v, EXTREMUM_FOLDS[kind], EXTREMUM_FOLDS[kind], total)
        if kind in SECURE_KINDS:
            moduli = params['moduli']

            def addmod(a, b):
                return add_trees_mod(a, b, moduli)

            return Reducer(lambda v: v, addmod, addmod, total)
        if kind is ReductionKind.AGGREGATE:
            acc_fn = self._leaf.fn_of(params['accumulate'])
            merge_fn = self._leaf.fn_of(params['merge'])
            at = acc_fn.type_signature.result

            vt = cast(T.StructType, acc_fn.type_signature.parameter)[1]  # <accumulator, value>
            vleaves = T.flatten_type(vt)
            tensors_only = not aggregate_holds_sequences(acc_fn)

            def value(v):  # raw head values arrive as numpy: embed them on first use
                return v if isinstance(v, EagerValue) else EagerValue(ingest(v, vt), vt)

            def pair(x, y):
                y = value(y)
                return EagerValue(
                    Struct([(None, x.internal), (None, y.internal)]),
                    T.StructType([x.type_signature, y.type_signature]),
                )

            def accumulate_many(acc, vs):
                # The raw head values of a block, folded in ONE TF call (the same
                # while-loop fold the workers use, so the same bits as one call each).
                if (
                    not tensors_only
                    or any(l.dtype == np.dtype(object) for l in vleaves)
                    or any(isinstance(v, EagerValue) for v in vs)
                ):
                    for v in vs:
                        acc = self._leaf.call(acc_fn, pair(acc, v))
                    return acc
                flat = [flatten(v) for v in vs]
                rows = [
                    fast_tensor(np.ascontiguousarray(np.stack([f[j] for f in flat]), dtype=l.dtype))
                    for j, l in enumerate(vleaves)
                ]
                out = acc_fn.fold_rows(as_tensors(flatten(acc.internal)), rows, None)
                return EagerValue(pack_result(list(out), at), at)

            return Reducer(
                lambda v: self._leaf.call(acc_fn, pair(params['zero'], v)),
                lambda acc, v: self._leaf.call(acc_fn, pair(acc, v)),
                lambda x, y: self._leaf.call(merge_fn, pair(x, y)),
                total,
                accumulate_many=accumulate_many,
            )
        raise SimharnessValueError(f'unknown reduction kind {kind!r}')

    def _numpy_rows(
        self, kind: ReductionKind, values: Sequence[Any], start: int, params: Dict[str, Any]
    ) -> Tuple[T.Type, List[np.ndarray], Optional[Tuple[np.ndarray, int]]]:
        """The reduction's leaf arrays [n, ...] for numpy kinds (validated), and for a
        weighted mean ``(weights [n], k)``: its first k leaves are to be weighted as they
        are folded (`fold_rows_into`), the last leaf is the weights themselves."""
        if kind is ReductionKind.WEIGHTED_MEAN:
            vals = [v for v, _ in values]
            ws = [w for _, w in values]
            vt, vleaves = self._stacked_numpy(vals)
            _, wleaves = self._stacked_numpy(ws)
            w = wleaves[0]
            return (T.StructType([vt, T.TensorType(w.dtype)]), vleaves + [w], (w, len(vleaves)))
        t, leaves = self._stacked_numpy(values)
        if kind in SECURE_KINDS:
            bounds = flatten(params['bounds'])
            out = []
            for x, m in zip(leaves, bounds):
                if kind is ReductionKind.SECURE_SUM_BITWIDTH:
                    bad = (x < 0) | (x > m - 1)
                    if np.any(bad):
                        pos = tuple(int(p) for p in np.argwhere(bad)[0])
                        raise SimharnessValueError(
                            f'client {start + pos[0]}: element {pos[1:]} = {x[pos]} is outside '
                            f'[0, {m - 1}]{_secure_bound_text(params, m)}'
                        )
                    out.append(x.astype(np.uint64))
                else:
                    out.append(np.mod(x.astype(np.int64), np.int64(m)).astype(np.uint64))
            return t, out, None
        return t, leaves, None

    def _stacked_numpy(self, values: Sequence[Any]) -> Tuple[T.Type, List[np.ndarray]]:
        values = list(values)
        t = values[0].type_signature
        parts: List[List[np.ndarray]] = []
        for begin, end, block, lo in runs(values):
            if block is not None:
                hi = lo + end - begin
                parts.append(
                    [
                        x[lo:hi] if k == 'stacked' else np.broadcast_to(x, (hi - lo,) + x.shape)
                        for k, x in block.numpy_leaves()
                    ]
                )
            else:
                parts.append(
                    [np.asarray(x)[None] for x in flatten(numpy_tree(values[begin].internal))]
                )
        if len(parts) == 1:
            return t, parts[0]
        return t, [concatenate_rows([p[j] for p in parts]) for j in range(len(parts[0]))]

    def row_fns(self, kind: ReductionKind, params: Dict[str, Any]):
        """(start_rows, fold_rows, merge) on leaf lists with a leading row dimension."""
        kind = ReductionKind.of(kind)
        if kind is ReductionKind.AGGREGATE:
            # Only single rows come this way (see `_aggregate_rows`): fold them in order.
            acc_fn = self._leaf.fn_of(params['accumulate'])
            merge_fn = self._leaf.fn_of(params['merge'])
            zero = flatten(params['zero'].internal)

            def fold(acc, x):
                out = acc_fn.fold_rows(as_tensors(acc), as_tensors(x), None)
                return [o.numpy()[None] for o in out]

            def merge(a, b):
                ins = [x[0] for x in a] + [x[0] for x in b]
                return [o.numpy()[None] for o in merge_fn.call_flat(as_tensors(ins))]

            return (lambda x: fold(zero, x), lambda acc, x: fold([a[0] for a in acc], x), merge)
        if kind in SECURE_KINDS:
            mods = [np.uint64(m) for m in flatten(params['moduli'])]

            def fold_mod(acc, x):
                return [(a + b) % m for a, b, m in zip(acc, x, mods)]

            return (lambda x: list(x), fold_mod, fold_mod)
        if kind in EXTREMUM_FOLDS:
            op = np.minimum if kind is ReductionKind.MIN else np.maximum

            def fold_extremum(acc, x):
                return [op(a, b) for a, b in zip(acc, x)]

            return (lambda x: list(x), fold_extremum, fold_extremum)
        if kind not in ADDING_KINDS:
            raise SimharnessValueError(f'unknown reduction kind {kind!r}')

        def fold_add(acc, x):
            return [add_arrays(a, b) for a, b in zip(acc, x)]

        return (lambda x: list(x), fold_add, fold_add)

    async def create_partial_reduction(
        self,
        kind: ReductionKind,
        values: Sequence[object],
        start: int,
        total: int,
        params: Dict[str, object],
    ) -> Partial:
        kind = ReductionKind.of(kind)
        values = list(values)
        start_rows, fold_rows, merge = self.row_fns(kind, params)
        builder = Reducer(start_rows, fold_rows, merge, total).begin(start)
        if kind is ReductionKind.AGGREGATE and aggregate_holds_sequences(
            self._leaf.fn_of(params['accumulate'])
        ):
            # Datasets as values or accumulators: folded value by value with the
            # executor's calls (the same canonical tree), then made plain values.
            return self._combine_reducer(kind, total, params).partial(values, start).map(_plain)
        if kind is ReductionKind.AGGREGATE:
            t, leaves = self._stacked_numpy(values)
            at = self._leaf.fn_of(params['accumulate']).type_signature.result
            with self._leaf.device_scope(), np.errstate(over='ignore'):
                self._aggregate_rows(builder, leaves, start, params)
            return rows_to_values(builder.finish(), t, at)
        # Numpy kinds: in slices of REDUCTION_SLICE clients on absolute multiples of it
        # (whole chunks), so that a big block is never stacked (and weighted) at once.
        # The builder sees the same rows in the same order: the same bits.
        row_type: Any = None
        pos, i, end = start, 0, start + len(values)
        with self._leaf.device_scope(), np.errstate(over='ignore'):
            while i < len(values):
                stop = min(end, (pos // REDUCTION_SLICE + 1) * REDUCTION_SLICE)
                for lo, hi in self._row_runs(kind, values, i, i + stop - pos):
                    row_type, leaves, scale = self._numpy_rows(
                        kind, values[lo:hi], pos + lo - i, params
                    )
                    fold_rows_into(
                        builder,
                        leaves,
                        pos + lo - i,
                        start_rows,
                        fold_rows,
                        count=hi - lo,
                        scale=scale,
                        adds=kind in ADDING_KINDS,
                    )
                i, pos = i + stop - pos, stop
        return rows_to_values(builder.finish(), row_type, row_type)

    def scaled_sum(
        self,
        values: Sequence[object],
        factors: Sequence[int],
        weight: int,
        result_type: T.Type,
        start: int,
        total: int,
        mode: Callable[[], Any],
    ) -> Partial:
        """The partial of a sum of ``leaf[factors[j]] * leaf[weight]`` (leaf by leaf of each
        client's value in `values`), the products made inside `mode()` as the rows are
        folded: the partial of a map of TFF's ``value * weight`` then its sum, without
        the products in memory (`stream_eval.scaled_sum`)."""
        values = list(values)
        _, leaves = self._stacked_numpy(values)
        factor_leaves = [leaves[j] for j in factors]
        w = leaves[weight]
        start_rows, fold_rows, merge = self.row_fns(ReductionKind.SUM, {})
        builder = Reducer(start_rows, fold_rows, merge, total).begin(start)
        with self._leaf.device_scope(), np.errstate(over='ignore'):
            fold_rows_into(
                builder,
                factor_leaves,
                start,
                start_rows,
                fold_rows,
                count=len(values),
                scale=(w, len(factor_leaves)),
                adds=True,
                scale_mode=mode,
            )
        return rows_to_values(builder.finish(), result_type, result_type)

    @staticmethod
    def _row_runs(
        kind: ReductionKind, values: Sequence[Any], lo: int, hi: int
    ) -> List[Tuple[int, int]]:
        """How `values[lo:hi]` is fed to a sum: at once (stacked into one array), or -- for
        big clients (>= 1 MB each) of several runs -- run by run, which feeds the same rows
        in the same order (the same bits) without copying them into one array first."""
        t = getattr(values[lo], 'type_signature', None)
        if kind not in _PLAIN_SUMS or hi - lo < 2 or t is None:
            return [(lo, hi)]
        row_bytes = sum(
            np.dtype(l.dtype).itemsize * int(np.prod(l.shape or ()))
            for l in T.flatten_type(t)
            if isinstance(l, T.TensorType) and l.is_fully_defined
        )
        if row_bytes < POOL.min_bytes:
            return [(lo, hi)]
        return [(lo + b, lo + e) for b, e, _, _ in runs(values[lo:hi])]

    def _aggregate_rows(
        self, builder: Any, leaves: List[np.ndarray], start: int, params: Dict[str, Any]
    ) -> None:
        """Feeds an aggregate's rows with a few TF calls: whole chunks at once, then the tail."""
        acc_fn = self._leaf.fn_of(params['accumulate'])
        zero = as_tensors(flatten(params['zero'].internal))
        L = builder.chunk
        n = leaves[0].shape[0] if leaves else 0
        end = start + n
        h = start if start % L == 0 else min(end, (start // L + 1) * L)
        builder.feed([x[i - start : i - start + 1] for x in leaves] for i in range(start, h))
        pos = h
        nfull = (end - h) // L
        if nfull and acc_fn.exact_elementwise and acc_fn.batchable() and not acc_fn.xla.compiled:
            rows = as_tensors([x[h - start : h - start + nfull * L] for x in leaves])
            acc = [o.numpy() for o in acc_fn.fold_rows(zero, rows, L)]
            builder.feed_chunk_accumulators([[a[c : c + 1] for a in acc] for c in range(nfull)])
            pos = h + nfull * L
        while pos < end:  # one chunk (or its beginning) per TF call
            stop = min(end, (pos // L + 1) * L)
            rows = as_tensors([x[pos - start : stop - start] for x in leaves])
            acc = [o.numpy()[None] for o in acc_fn.fold_rows(zero, rows, None)]
            builder.feed_folded(acc, stop - pos)
            pos = stop

    def partial_joiner(
        self, kind: ReductionKind, total: int
    ) -> Optional[Callable[[Partial, Partial], Partial]]:
        """`Reducer.join` with the additions `create_reduction_result` makes, for the kinds
        numpy folds (`ADDING_KINDS`); None for the others."""
        kind = ReductionKind.of(kind)
        if kind not in ADDING_KINDS:
            return None
        reducer = self._combine_reducer(kind, total, {})

        def join(left: Partial, right: Partial) -> Partial:
            with np.errstate(over='ignore'):  # integer sums wrap, as in the combine
                return reducer.join(left, right)

        return join

    async def create_reduction_result(
        self,
        kind: ReductionKind,
        partials: Sequence[Partial],
        total: int,
        params: Dict[str, Any],
        result_type: T.Type,
    ) -> EagerValue:
        kind = ReductionKind.of(kind)
        reducer = self._combine_reducer(kind, total, params)
        if kind is ReductionKind.AGGREGATE:
            acc_fn = self._leaf.fn_of(params['accumulate'])
            at = acc_fn.type_signature.result
            if aggregate_holds_sequences(acc_fn):  # datasets came back from workers as blobs
                partials = [p.map(revive_datasets) for p in partials]
            partials = [
                Partial(
                    p.start,
                    p.stop,
                    list(p.head),  # numpy: see accumulate_many
                    {k: EagerValue(ingest(v, at), at) for k, v in p.nodes.items()},
                    p.open_chunk,
                    None if p.open_chunk is None else EagerValue(ingest(p.open_acc, at), at),
                )
                for p in partials
            ]
        with self._leaf.device_scope(), np.errstate(over='ignore'):
            result = reducer.combine(partials)
        if kind is ReductionKind.AGGREGATE:
            return result
        if kind is ReductionKind.MEAN:
            result = map_structure(
                lambda x: (x / np.asarray(total, dtype=x.dtype)).astype(x.dtype), result
            )
        elif kind is ReductionKind.WEIGHTED_MEAN:
            num, den = result[0], result[1]
            result = map_structure(
                lambda x: (x / np.asarray(den).astype(x.dtype)).astype(x.dtype), num
            )
        elif kind in SECURE_KINDS:
            dtypes = params['dtypes']
            result = map_structure(lambda x, d: x.astype(d), result, dtypes)
        elif kind in EXTREMUM_FOLDS:
            # TFF folds from the dtype's largest (min) or smallest (max) finite value.
            result = EXTREMUM_FOLDS[kind](
                map_structure(lambda x: extremum_identity(kind, x.dtype), result), result
            )
        with self._leaf.device_scope():  # a fresh result of ours: no copy into the tensor
            return EagerValue(ingest_owned(result, result_type), result_type)

    # ------------------------------------------------------------ streaming
    def stream_slice(self, slice_size: Optional[int] = None) -> int:
        """Clients per streamed slice: `slice_size`, else the batch bound (or 256), in whole chunks."""
        n = slice_size or self._leaf.max_batch or REDUCTION_SLICE
        return max(CHUNK, n // CHUNK * CHUNK)

    async def create_streamed_reductions(
        self,
        nodes: Sequence[PlanNode],
        reductions: Sequence[PlanReduction],
        start: int,
        count: int,
        total: int,
        slice_size: Optional[int] = None,
    ) -> List[Partial]:
        """Computes client values slice by slice and folds each slice into the reductions.

        The values of the clients ``[start, start + count)`` are the plan `nodes`
        (`runtime.stream_plan`), evaluated per slice of at most `stream_slice()`
        clients; each `PlanReduction` folds its nodes' slice into its partial.
        The partials are those `create_partial_reduction` gives for the whole
        block, bit for bit (see `stream_eval.stream_reductions`).
        """
        leaf = cast(Any, self._leaf)  # the executor: its block operations run the plan
        return await stream_reductions(
            leaf,
            nodes,
            reductions,
            start,
            count,
            total,
            self.stream_slice(slice_size),
            lambda kind, params: node_merge(leaf, kind, params),
        )
