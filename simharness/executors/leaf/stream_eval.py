"""Evaluates a stream plan (`runtime.stream_plan`) slice by slice on a leaf executor.

`stream_reductions` is `EagerTFExecutor.create_streamed_reductions`: the values
of the clients ``[start, start + count)`` are computed one slice at a time
(slices end on absolute multiples of the slice size, so every slice but the
first starts a chunk), each node by its type (`_EVALUATORS`, memoized per
slice), and every slice is folded into each reduction's partial before the next
slice is computed: at most one slice of client values is alive. The partials
are those `create_partial_reduction` gives for the whole block, bit for bit
(`Reducer.join` with `node_merge`, which merges two tree nodes as
`create_reduction_result` does). On a leaf executor with `sums_in_calls` (a worker's),
a sum of a compiled map that nothing else reads is made inside the map's compiled call
(`summed_map`): the same partial, without the slice's results in memory.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, cast

import numpy as np

from simharness.core import types as T
from simharness.core.reduction import (
    CHUNK,
    EXTREMUM_FOLDS,
    Partial,
    Reducer,
    ReductionKind,
    add_trees,
    add_trees_mod,
)
from simharness.core.struct import Struct
from simharness.core.structure import flatten
from simharness.errors import SimharnessValueError
from simharness.executors.base import BatchExecutor
from simharness.executors.leaf.client_blocks import EagerValue, rows_to_values, runs
from simharness.executors.leaf.embedded_function import pack_result
from simharness.executors.leaf.numpy_elementwise import denormals_flushed
from simharness.executors.leaf.tf_values import as_tensors, ingest, numpy_tree, revive_datasets
from simharness.runtime.stream_plan import (
    PlanClients,
    PlanLoad,
    PlanMap,
    PlanNode,
    PlanReduction,
    PlanSame,
    PlanSelect,
    PlanShared,
    PlanStacked,
    PlanValues,
    PlanZip,
)


class _Slice:
    """The clients ``lo .. hi-1`` of the block: node values computed for them (memoized)."""

    __slots__ = ('ex', 'nodes', 'lo', 'hi', 'memo', 'kept')

    def __init__(
        self, ex: BatchExecutor, nodes: Sequence[PlanNode], lo: int, hi: int, kept: Dict[int, Any]
    ):
        self.ex, self.nodes, self.lo, self.hi = ex, nodes, lo, hi
        self.memo: Dict[int, List[Any]] = {}
        self.kept = kept  # by node id: values made once for every slice (`_shared`)

    async def values(self, i: int) -> List[Any]:
        got = self.memo.get(i)
        if got is not None:
            return got
        node = self.nodes[i]
        evaluate = _EVALUATORS.get(type(node))
        if evaluate is None:
            raise SimharnessValueError(
                f'unknown streaming plan node {type(node).__name__} '
                f'(node {i}); expected one of '
                f'{sorted(k.__name__ for k in _EVALUATORS)}'
            )
        out: List[Any] = await evaluate(self, node)
        self.memo[i] = out
        return out


async def _values(s: _Slice, node: PlanValues) -> List[Any]:
    return list(node.values[s.lo : s.hi])


async def _same(s: _Slice, node: PlanSame) -> List[Any]:
    return [node.value] * (s.hi - s.lo)


async def _shared(s: _Slice, node: PlanShared) -> List[Any]:
    v = s.kept.get(id(node))
    if v is None:  # one value of the block, made when its first slice needs it
        v = s.kept[id(node)] = await s.ex.create_value(node.value, node.type)
    return [v] * (s.hi - s.lo)


async def _stacked(s: _Slice, node: PlanStacked) -> List[Any]:  # this slice's rows
    return list(await s.ex.create_values_stacked([x[s.lo : s.hi] for x in node.leaves], node.type))


async def _load(s: _Slice, node: PlanLoad) -> List[Any]:
    return list(await s.ex.create_values(node.loader(s.lo, s.hi), node.type))


async def _clients(s: _Slice, node: PlanClients) -> List[Any]:  # load this slice only
    return list(await s.ex.create_values(node.clients[s.lo : s.hi], node.type))


async def _map(s: _Slice, node: PlanMap) -> List[Any]:
    try:
        return list(await s.ex.create_map(node.fn, await s.values(node.src)))
    except Exception as e:  # an error of one client's call: its position in the block
        pos = getattr(e, 'map_position', None)
        if isinstance(pos, int):
            setattr(e, 'map_position', pos + s.lo)
        raise


async def _select(s: _Slice, node: PlanSelect) -> List[Any]:
    return list(await s.ex.create_selections(await s.values(node.src), int(node.index)))


async def _zip(s: _Slice, node: PlanZip) -> List[Any]:
    cols = [await s.values(j) for j in node.srcs]
    return list(await s.ex.create_structs([list(r) for r in zip(*cols)], list(node.names)))


#: How a slice's values of each node kind are computed: (slice, node) -> client values.
_EVALUATORS: Dict[type, Any] = {
    PlanValues: _values,
    PlanSame: _same,
    PlanShared: _shared,
    PlanStacked: _stacked,
    PlanLoad: _load,
    PlanClients: _clients,
    PlanMap: _map,
    PlanSelect: _select,
    PlanZip: _zip,
}


async def stream_reductions(
    ex: BatchExecutor,
    nodes: Sequence[PlanNode],
    reductions: Sequence[PlanReduction],
    start: int,
    count: int,
    total: int,
    step: int,
    merge_for: Callable[[ReductionKind, Dict[str, Any]], Any],
) -> List[Partial]:
    """The partials of `reductions` over the plan `nodes`, in slices of `step` clients.

    `merge_for(kind, params)` merges two tree nodes of a partial (`node_merge`).
    """
    for r in reductions:
        if not isinstance(r, PlanReduction):
            raise SimharnessValueError(
                f'a stream plan reduction is a PlanReduction, got {type(r).__name__}'
            )
    parts: List[Optional[Partial]] = [None] * len(reductions)
    joiners = [
        Reducer(lambda v: v, merge_for(r.kind, r.params), merge_for(r.kind, r.params), total)
        for r in reductions
    ]
    uses = [0] * len(nodes)  # readers of each node (nodes and reductions)
    for nd in nodes:
        for j in nd.sources():
            uses[j] += 1
    for r in reductions:
        for j in r.srcs:
            uses[j] += 1
    kept: Dict[int, Any] = {}
    lo = 0
    while lo < count:
        hi = min(count, (start + lo) // step * step + step - start)
        piece = _Slice(ex, nodes, lo, hi, kept)
        for k, r in enumerate(reductions):
            p = None
            node = nodes[r.srcs[0]]
            if (
                len(r.srcs) == 1
                and isinstance(node, PlanMap)
                and uses[r.srcs[0]] == 1
                and r.srcs[0] not in piece.memo
            ):
                # A sum of a map nothing else reads: summed in the map's own call if it can be
                try:
                    p = summed_map(
                        ex, r.kind, node.fn, await piece.values(node.src), start + lo, total
                    )
                except Exception as e:  # pylint: disable=broad-exception-caught
                    if not type(e).__module__.startswith('tensorflow.'):
                        raise
                    p = None  # TF's error: the map below raises it again, naming the client
                if p is None:
                    p = scaled_sum(
                        ex, r.kind, node.fn, await piece.values(node.src), start + lo, total
                    )
            if p is not None:
                prev = parts[k]
                parts[k] = p if prev is None else joiners[k].join(prev, p)
                continue
            cols = [await piece.values(i) for i in r.srcs]
            vs = cols[0] if len(cols) == 1 else list(zip(*cols))  # weighted mean: pairs
            p = await ex.create_partial_reduction(r.kind, vs, start + lo, total, r.params)
            prev = parts[k]
            parts[k] = p if prev is None else joiners[k].join(prev, p)
        del piece  # the slice's values go before the next slice is computed
        lo = hi
    return [cast(Partial, p) for p in parts]


def scaled_sum(
    ex: Any, kind: ReductionKind, fn: Any, args: Sequence[Any], start: int, total: int
) -> Optional[Partial]:
    """The partial of a sum of `fn`'s results on `args` when `fn` multiplies its
    parameters by one per-client scalar (TFF's weighted mean: ``value * tf.cast(weight,
    value.dtype)``), its products made as the rows are folded, with TF's flushed
    denormals (`numpy_elementwise`): the bits of `create_map` then
    `create_partial_reduction`, without a pass that writes every client's products and
    one that reads them back (tests/unit/test_numpy_elementwise.py). Only where
    `ex.sums_in_calls` (worker processes; the thread stack's executors share their cores,
    and measured slower so). None when this does not apply."""
    if ReductionKind.of(kind) is not ReductionKind.SUM or len(args) < 2:
        return None
    if not getattr(ex, 'sums_in_calls', False) or not hasattr(ex, 'reductions'):
        return None  # a worker's (one client thread on its pinned core), as `summed_map`
    f = ex.fn_of(fn)
    scaling = getattr(f, 'scaling', None)
    pt = f.type_signature.parameter
    if scaling is None or pt is None or f.xla.compiled:
        return None
    factors, weight = scaling
    leaves = T.flatten_type(pt)
    results = T.flatten_type(f.type_signature.result)
    w = leaves[weight]
    if not (
        isinstance(w, T.TensorType)
        and w.shape == ()
        and all(
            isinstance(leaves[j], T.TensorType)
            and isinstance(rt, T.TensorType)
            and leaves[j].is_fully_defined
            and leaves[j].dtype == rt.dtype
            and leaves[j].shape == rt.shape
            for j, rt in zip(factors, results)
        )
        and all(a.type_signature == args[0].type_signature for a in args)
        and pt.is_assignable_from(args[0].type_signature)
    ):
        return None
    partial: Partial = ex.reductions.scaled_sum(
        args, factors, weight, f.type_signature.result, start, total, denormals_flushed
    )
    return partial


#: Result dtypes whose sums `summed_map` makes in the compiled call.
_SUMMED_DTYPES = frozenset(np.dtype(d) for d in ('float32', 'float64', 'int32', 'int64'))


def summed_map(
    ex: Any, kind: ReductionKind, fn: Any, args: Sequence[Any], start: int, total: int
) -> Optional[Partial]:
    """The partial of a sum (or mean) of `fn`'s results on `args` (the clients from
    `start`) on the leaf executor `ex`, the clients' results folded inside the compiled
    call that makes them.

    The same partial as `create_map` then `create_partial_reduction`, bit for bit (tests
    in tests/unit/test_summed_map.py), without the block's results in memory: each
    client's result is added to its chunk's sum while it is in cache (a worker's fold of
    52 clients of the reference MLP read 17 MB of results after the block). None when
    this does not apply (`fn` not XLA-compiled or over sequences, results not all float
    or int tensors, clients not stackable, more than the batch bound) or when a result
    holds a NaN or a tiny value, where XLA's sums could differ from numpy's: the caller
    then runs the map and the fold. Only where `ex.sums_in_calls` (worker processes: one
    client thread on its pinned core).
    """
    if not getattr(ex, 'sums_in_calls', False):
        return None
    kind = ReductionKind.of(kind)
    f = ex.fn_of(fn)
    args = list(args)
    pt = f.type_signature.parameter
    rt = f.type_signature.result
    leaf_types = T.flatten_type(rt)
    if (
        kind not in (ReductionKind.SUM, ReductionKind.MEAN)
        or len(args) < 2
        or pt is None
        or not leaf_types
        or (ex.max_batch is not None and len(args) > ex.max_batch)
        or not all(
            isinstance(t, T.TensorType) and np.dtype(t.dtype) in _SUMMED_DTYPES for t in leaf_types
        )
    ):
        return None
    if not f.xla.compiled or not f.batchable() or f.sequence_params:
        return None  # the graph runtime, or sequences (their lowered loops run as before)
    rs = runs(args)
    if len(rs) == 1 and rs[0][2] is not None and pt.is_assignable_from(rs[0][2].type):
        leaves: Optional[List[Tuple[str, Any]]] = rs[0][2].sub_leaves(
            rs[0][3], rs[0][3] + len(args)
        )
    else:
        leaves = ex.block_leaves(args, pt)
    if leaves is None or not any(k == 'stacked' for k, _ in leaves):
        return None
    # Segments of the canonical order (`core.reduction`): a client of a chunk begun
    # before `start` is a segment of its own (a raw head value), then each chunk's
    # clients in this block are one segment, summed in client order.
    first: List[bool] = []
    seg: List[int] = []
    counts: List[int] = []
    end = start + len(args)
    pos = start
    head_end = start if start % CHUNK == 0 else min(end, (start // CHUNK + 1) * CHUNK)
    while pos < end:
        stop = pos + 1 if pos < head_end else min(end, (pos // CHUNK + 1) * CHUNK)
        first.extend([True] + [False] * (stop - pos - 1))
        seg.extend([len(counts)] * (stop - pos))
        counts.append(stop - pos)
        pos = stop
    mask = tuple(k == 'shared' for k, _ in leaves)
    with ex.device_scope():
        outs = f.call_summed(
            mask,
            [x for k, x in leaves if k == 'shared'],
            [x for k, x in leaves if k == 'stacked'],
            first,
            seg,
            len(counts),
        )
    if float(outs[-1]):  # a NaN or a tiny value: folded by numpy (see `call_summed`)
        return None
    sums = [o.numpy() for o in outs[:-1]]
    start_rows, fold_rows, merge = ex.reductions.row_fns(kind, {})
    builder = Reducer(start_rows, fold_rows, merge, total).begin(start)
    for k, count in enumerate(counts):
        row = [x[k : k + 1] for x in sums]
        if start + k < head_end:
            builder.feed([row])
        else:
            builder.feed_folded(row, count)
    return rows_to_values(builder.finish(), rt, rt)


def _secure_merge(ex: Any, params: Dict[str, Any]) -> Any:
    moduli = params['moduli']
    return lambda a, b: add_trees_mod(a, b, moduli)


def _aggregate_merge(ex: Any, params: Dict[str, Any]) -> Any:
    merge_fn = ex.fn_of(params['merge'])
    at = merge_fn.type_signature.result
    if not T.contains_only_tensors(at):
        # Datasets as accumulators (`aggregate_holds_sequences`): one call of merge.
        pair_t = T.StructType([at, at])

        def merge_values(a: Any, b: Any) -> Any:
            with ex.device_scope():
                arg = EagerValue(
                    Struct(
                        [
                            (None, ingest(revive_datasets(a), at)),
                            (None, ingest(revive_datasets(b), at)),
                        ]
                    ),
                    pair_t,
                )
                return numpy_tree(ex.call(merge_fn, arg).internal)

        return merge_values

    def merge(a: Any, b: Any) -> Any:
        with ex.device_scope():
            out = merge_fn.call_flat(as_tensors(flatten(a) + flatten(b)))
        return numpy_tree(pack_result(list(out), at))

    return merge


#: How two tree nodes of a partial of each reduction kind merge (numpy values).
_MERGES: Dict[ReductionKind, Callable[[Any, Dict[str, Any]], Any]] = {
    ReductionKind.SUM: lambda ex, params: add_trees,
    ReductionKind.MEAN: lambda ex, params: add_trees,
    ReductionKind.WEIGHTED_MEAN: lambda ex, params: add_trees,
    **{kind: (lambda fold: lambda ex, params: fold)(fold) for kind, fold in EXTREMUM_FOLDS.items()},
    ReductionKind.SECURE_SUM_BITWIDTH: _secure_merge,
    ReductionKind.SECURE_MODULAR_SUM: _secure_merge,
    ReductionKind.AGGREGATE: _aggregate_merge,
}


def node_merge(ex: Any, kind: ReductionKind, params: Dict[str, Any]) -> Any:
    """Merges two tree nodes of a partial of `kind` on the leaf executor `ex` (an
    `EagerTFExecutor`: aggregates run its merge computation), as
    `create_reduction_result` does."""
    return _MERGES[ReductionKind.of(kind)](ex, params)
