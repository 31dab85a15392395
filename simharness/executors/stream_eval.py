"""Evaluates a stream plan (`runtime.stream_plan`) slice by slice on a leaf executor.

`stream_reductions` is `EagerTFExecutor.create_streamed_reductions`: the values
of the clients ``[start, start + count)`` are computed one slice at a time
(slices end on absolute multiples of the slice size, so every slice but the
first starts a chunk), each node by its type (`_EVALUATORS`, memoized per
slice), and every slice is folded into each reduction's partial before the next
slice is computed: at most one slice of client values is alive. The partials
are those `create_partial_reduction` gives for the whole block, bit for bit
(`Reducer.join` with `node_merge`, which merges two tree nodes as
`create_reduction_result` does).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, cast

from simharness.core.reduction import (EXTREMUM_FOLDS, Partial, Reducer, add_trees,
                                       add_trees_mod)
from simharness.core.structure import flatten
from simharness.errors import SimharnessValueError
from simharness.executors.base import BatchExecutor
from simharness.executors.embedded_function import pack_result
from simharness.executors.tf_values import as_tensors, numpy_tree
from simharness.runtime.stream_plan import (PlanClients, PlanLoad, PlanMap, PlanNode,
                                            PlanReduction, PlanSame, PlanSelect, PlanValues,
                                            PlanZip)

class _Slice:
    """The clients ``lo .. hi-1`` of the block: node values computed for them (memoized)."""

    __slots__ = ('ex', 'nodes', 'lo', 'hi', 'memo')

    def __init__(self, ex: BatchExecutor, nodes: Sequence[PlanNode], lo: int, hi: int):
        self.ex, self.nodes, self.lo, self.hi = ex, nodes, lo, hi
        self.memo: Dict[int, List[Any]] = {}

    async def values(self, i: int) -> List[Any]:
        got = self.memo.get(i)
        if got is not None:
            return got
        node = self.nodes[i]
        evaluate = _EVALUATORS.get(type(node))
        if evaluate is None:
            raise SimharnessValueError(f'unknown streaming plan node {type(node).__name__} '
                                       f'(node {i}); expected one of '
                                       f'{sorted(k.__name__ for k in _EVALUATORS)}')
        out: List[Any] = await evaluate(self, node)
        self.memo[i] = out
        return out


async def _values(s: _Slice, node: PlanValues) -> List[Any]:
    return list(node.values[s.lo:s.hi])


async def _same(s: _Slice, node: PlanSame) -> List[Any]:
    return [node.value] * (s.hi - s.lo)


async def _load(s: _Slice, node: PlanLoad) -> List[Any]:
    return list(await s.ex.create_values(node.loader(s.lo, s.hi), node.type))


async def _clients(s: _Slice, node: PlanClients) -> List[Any]:  # load this slice only
    return list(await s.ex.create_values(node.clients[s.lo:s.hi], node.type))


async def _map(s: _Slice, node: PlanMap) -> List[Any]:
    return list(await s.ex.create_map(node.fn, await s.values(node.src)))


async def _select(s: _Slice, node: PlanSelect) -> List[Any]:
    return list(await s.ex.create_selections(await s.values(node.src), int(node.index)))


async def _zip(s: _Slice, node: PlanZip) -> List[Any]:
    cols = [await s.values(j) for j in node.srcs]
    return list(await s.ex.create_structs([list(r) for r in zip(*cols)], list(node.names)))


#: How a slice's values of each node kind are computed: (slice, node) -> client values.
_EVALUATORS: Dict[type, Any] = {
    PlanValues: _values, PlanSame: _same, PlanLoad: _load, PlanClients: _clients,
    PlanMap: _map, PlanSelect: _select, PlanZip: _zip,
}


async def stream_reductions(ex: BatchExecutor, nodes: Sequence[PlanNode],
                            reductions: Sequence[PlanReduction], start: int, count: int,
                            total: int, step: int,
                            merge_for: Callable[[str, Dict[str, Any]], Any]) -> List[Partial]:
    """The partials of `reductions` over the plan `nodes`, in slices of `step` clients.

    `merge_for(kind, params)` merges two tree nodes of a partial (`node_merge`).
    """
    for r in reductions:
        if not isinstance(r, PlanReduction):
            raise SimharnessValueError(f'a stream plan reduction is a PlanReduction, got '
                                       f'{type(r).__name__}')
    parts: List[Optional[Partial]] = [None] * len(reductions)
    joiners = [Reducer(lambda v: v, merge_for(r.kind, r.params), merge_for(r.kind, r.params),
                       total) for r in reductions]
    uses = [0] * len(nodes)  # readers of each node (nodes and reductions)
    for nd in nodes:
        for j in nd.sources():
            uses[j] += 1
    for r in reductions:
        for j in r.srcs:
            uses[j] += 1
    lo = 0
    while lo < count:
        hi = min(count, (start + lo) // step * step + step - start)
        piece = _Slice(ex, nodes, lo, hi)
        for k, r in enumerate(reductions):
            p = None
            node = nodes[r.srcs[0]]
            if (len(r.srcs) == 1 and isinstance(node, PlanMap) and uses[r.srcs[0]] == 1
                    and r.srcs[0] not in piece.memo and hasattr(ex, 'summed_map')):
                # A sum of a map nothing else reads: summed in the map's own call if it can be
                p = ex.summed_map(r.kind, node.fn, await piece.values(node.src), start + lo, total)
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


def _secure_merge(ex: Any, params: Dict[str, Any]) -> Any:
    moduli = params['moduli']
    return lambda a, b: add_trees_mod(a, b, moduli)


def _aggregate_merge(ex: Any, params: Dict[str, Any]) -> Any:
    merge_fn = ex._fn_of(params['merge'])
    at = merge_fn.type_signature.result

    def merge(a: Any, b: Any) -> Any:
        with ex._device_scope():
            out = merge_fn.call_flat(as_tensors(flatten(a) + flatten(b)))
        return numpy_tree(pack_result(list(out), at))
    return merge


#: How two tree nodes of a partial of each reduction kind merge (numpy values).
_MERGES: Dict[str, Callable[[Any, Dict[str, Any]], Any]] = {
    'sum': lambda ex, params: add_trees,
    'mean': lambda ex, params: add_trees,
    'weighted_mean': lambda ex, params: add_trees,
    **{kind: (lambda fold: lambda ex, params: fold)(fold) for kind, fold in EXTREMUM_FOLDS.items()},
    'secure_sum_bitwidth': _secure_merge,
    'secure_modular_sum': _secure_merge,
    'aggregate': _aggregate_merge,
}


def node_merge(ex: Any, kind: str, params: Dict[str, Any]) -> Any:
    """Merges two tree nodes of a partial of `kind` on the leaf executor `ex` (an
    `EagerTFExecutor`: aggregates run its merge computation), as
    `create_reduction_result` does."""
    make = _MERGES.get(kind)
    if make is None:
        raise SimharnessValueError(f'unknown reduction kind {kind!r}')
    return make(ex, params)
