"""`compile_to_mergeable_comp_form`: a computation with one logical aggregation, split at it.

TFF's compiler (``tff.backends.native.compile_to_mergeable_comp_form``) on
simharness's building blocks, in three steps:

1. **Inline** (TFF's call-dominant form): every call of a lambda is inlined into one
   top-level block of named calls, ``lambda p: let v_1 = c_1, ..., v_k = c_k in r``;
   a lambda passed to an intrinsic stays a lambda (its free names renamed).
2. **Split**: the aggregation calls (`federated_sum`, `_mean`, weighted mean,
   `_min`, `_max`, `_aggregate`, the secure sums) are found; none may depend on
   another (ValueError, as TFF). ``before`` is every call their arguments need.
3. **Build the form**:

   - ``up_to_merge(p)``: ``before``, then each aggregation's *accumulator* at the
     server, zipped: a sum's sum, a mean's ``(sum, count)``, a weighted mean's
     ``(sum of w*x, sum of w)``, an extremum's extremum, a secure sum's secure sum,
     `federated_aggregate` with its own `zero` / `accumulate` / `merge` and an
     identity report.
   - ``merge(a, b)``: each accumulator's merge (`+`; `minimum` / `maximum`;
     `+` mod the modulus; the aggregate's own `merge`).
   - ``after_merge(p, merged)``: the calls the result needs, with each aggregation
     replaced by its report of ``merged`` (a mean's division, the aggregate's
     `report`, ...). Calls only the aggregations needed are left out.

A computation with no aggregation gets an `up_to_merge` of an empty server value and
an `after_merge` that is the whole computation.
"""

from __future__ import annotations

import itertools
import numbers
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import tensorflow as tf

from simharness.core import building_blocks as bb
from simharness.core import intrinsics as I
from simharness.core import tracing
from simharness.core import types as T
from simharness.core.computation import ConcreteComputation, federated_computation, tf_computation
from simharness.core.structure import flatten, from_container, pack_as
from simharness.errors import SimharnessTypeError, SimharnessValueError
from simharness.mergeable import AGGREGATION_URIS, MergeableCompForm

__all__ = ['compile_to_mergeable_comp_form']


# ------------------------------------------------------------------ 1. inline


class _Closure:
    """A lambda not yet called, with the names it sees."""

    def __init__(self, lam: bb.Lambda, env: Dict[str, Any]):
        self.lam = lam
        self.env = env


class _Inliner:
    def __init__(self) -> None:
        self.locals: List[Tuple[str, bb.Call]] = []
        self._names = (f'_mc{i}' for i in itertools.count())

    def fresh(self) -> str:
        return next(self._names)

    def expr(self, comp: bb.ComputationBuildingBlock, env: Dict[str, Any]) -> Any:
        if isinstance(comp, bb.Reference):
            return env.get(comp.name, comp)
        if isinstance(comp, bb.Lambda):
            return _Closure(comp, env)
        if isinstance(comp, bb.Selection):
            src = self.value(comp.source, env)
            if isinstance(src, bb.Struct):
                return src.elements[comp.index][1]
            return bb.Selection(src, index=comp.index)
        if isinstance(comp, bb.Struct):
            return bb.Struct(
                [(n, self.value(e, env)) for n, e in comp.elements],
                container=comp.type_signature.container,
            )
        if isinstance(comp, bb.Block):
            inner = dict(env)
            for name, v in comp.locals:
                x = self.expr(v, inner)
                if isinstance(x, bb.Call):
                    fresh = self.fresh()
                    self.locals.append((fresh, x))
                    x = bb.Reference(fresh, x.type_signature)
                inner[name] = x
            return self.expr(comp.result, inner)
        if isinstance(comp, bb.Call):
            fn = self.expr(comp.fn, env)
            arg = None if comp.arg is None else self.value(comp.arg, env)
            if isinstance(fn, _Closure):
                inner = dict(fn.env)
                if fn.lam.parameter_name is not None:
                    if isinstance(arg, bb.Call):
                        fresh = self.fresh()
                        self.locals.append((fresh, arg))
                        arg = bb.Reference(fresh, arg.type_signature)
                    inner[fn.lam.parameter_name] = arg
                return self.expr(fn.lam.result, inner)
            call = bb.Call(self.materialize(fn), arg)
            fresh = self.fresh()
            self.locals.append((fresh, call))
            return bb.Reference(fresh, call.type_signature)
        return comp  # Intrinsic, CompiledComputation, Data, Placement

    def value(self, comp: bb.ComputationBuildingBlock, env: Dict[str, Any]) -> Any:
        """`comp` inlined, as a building block (a lambda kept as one, a call bound to a name)."""
        x = self.materialize(self.expr(comp, env))
        if isinstance(x, bb.Call):
            fresh = self.fresh()
            self.locals.append((fresh, x))
            return bb.Reference(fresh, x.type_signature)
        return x

    def materialize(self, x: Any) -> bb.ComputationBuildingBlock:
        if isinstance(x, _Closure):
            return _substitute(x.lam, {k: self.materialize(v) for k, v in x.env.items()})
        return x


def _substitute(
    comp: bb.ComputationBuildingBlock, env: Dict[str, bb.ComputationBuildingBlock]
) -> bb.ComputationBuildingBlock:
    """`comp` with its free references replaced as `env` says (bound names shadow)."""
    if not env:
        return comp
    if isinstance(comp, bb.Reference):
        return env.get(comp.name, comp)
    if isinstance(comp, bb.Lambda):
        inner = {k: v for k, v in env.items() if k != comp.parameter_name}
        return bb.Lambda(comp.parameter_name, comp.parameter_type, _substitute(comp.result, inner))
    if isinstance(comp, bb.Block):
        inner = dict(env)
        locals_ = []
        for name, v in comp.locals:
            locals_.append((name, _substitute(v, inner)))
            inner.pop(name, None)
        return bb.Block(locals_, _substitute(comp.result, inner))
    if isinstance(comp, bb.Selection):
        return bb.Selection(_substitute(comp.source, env), index=comp.index)
    if isinstance(comp, bb.Struct):
        return bb.Struct(
            [(n, _substitute(e, env)) for n, e in comp.elements],
            container=comp.type_signature.container,
        )
    if isinstance(comp, bb.Call):
        return bb.Call(
            _substitute(comp.fn, env), None if comp.arg is None else _substitute(comp.arg, env)
        )
    return comp


def _as_lambda(comp: bb.ComputationBuildingBlock) -> bb.Lambda:
    if isinstance(comp, bb.Lambda):
        return comp
    ft = comp.type_signature
    assert isinstance(ft, T.FunctionType)
    if ft.parameter is None:
        return bb.Lambda(None, None, bb.Call(comp))
    return bb.Lambda('_mc_arg', ft.parameter, bb.Call(comp, bb.Reference('_mc_arg', ft.parameter)))


# -------------------------------------------------------------------- 2. split


def _needed(
    roots: List[bb.ComputationBuildingBlock],
    defs: Dict[str, bb.Call],
    stop: frozenset = frozenset(),
) -> set:
    """Names of the locals `roots` need, transitively (not looking through `stop`)."""
    seen: set = set()
    todo = [n for r in roots for n in bb.free_references(r) if n in defs]
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        if n not in stop:
            todo.extend(m for m in bb.free_references(defs[n]) if m in defs and m not in seen)
    return seen


# ------------------------------------------------------------ 3. accumulators


def _leaves(value: Any, t: T.Type) -> List[Any]:
    """The leaves of `value` (a tensor or a struct of type `t`, as a TF computation's
    argument arrives: a `Struct` or the Python container of `t`)."""
    return flatten(from_container(value, t)) if isinstance(t, T.StructType) else [value]


def _binary(t: T.Type, op: Any) -> ConcreteComputation:
    """A TF computation of ``(x, y)`` of type `t` applying `op` leaf by leaf."""

    def body(a, b):
        return pack_as(t, [op(x, y) for x, y in zip(_leaves(a, t), _leaves(b, t))])

    return tf_computation(t, t)(body)


class _Agg:
    """One aggregation of the computation: what `up_to_merge` computes for it, how two of
    its accumulators merge, and how `after_merge` reports the merged one."""

    def __init__(self, name: str, call: bb.Call):
        self.name = name
        self.call = call
        fn = call.fn
        assert isinstance(fn, bb.Intrinsic)
        self.uri = fn.uri
        self.static = fn.static
        self.result_type = call.type_signature
        arg = call.arg
        assert arg is not None
        if self.uri == 'federated_weighted_mean':
            self.data = [_element(arg, 0), _element(arg, 1)]
        elif self.uri == 'federated_aggregate':
            self.data = [_element(arg, 0), _element(arg, 1)]
            self.fns = [_element(arg, k) for k in (2, 3, 4)]
        elif self.uri == 'federated_collect':
            raise SimharnessValueError(
                'federated_collect cannot be split into subrounds: '
                'its result holds every client value'
            )
        else:
            self.data = [arg]

    def accumulate(self, data: List[tracing.Value]) -> tracing.Value:
        """The accumulator of one subround at the server (inside `up_to_merge`'s trace)."""
        uri, v = self.uri, data[0]
        member = v.type_signature.member
        if uri == 'federated_sum':
            return I.federated_sum(v)
        if uri == 'federated_mean':
            ones = tf_computation(member)(lambda x: tf.constant(1, tf.int64))
            return I.federated_zip([I.federated_sum(v), I.federated_sum(I.federated_map(ones, v))])
        if uri == 'federated_weighted_mean':
            wt = data[1].type_signature.member

            def weigh(x, w):
                return pack_as(
                    member, [leaf * tf.cast(w, leaf.dtype) for leaf in _leaves(x, member)]
                )

            scaled = I.federated_map(tf_computation(member, wt)(weigh), [v, data[1]])
            return I.federated_zip([I.federated_sum(scaled), I.federated_sum(data[1])])
        if uri in ('federated_min', 'federated_max'):
            return (I.federated_min if uri == 'federated_min' else I.federated_max)(v)
        if uri == 'federated_secure_sum':
            return I.federated_secure_sum(v, self.static['max_input'])
        if uri == 'federated_secure_sum_bitwidth':
            return I.federated_secure_sum_bitwidth(v, self.static['bitwidth'])
        if uri == 'federated_secure_modular_sum':
            return I.federated_secure_modular_sum(v, self.static['modulus'])
        if uri == 'federated_aggregate':
            acc, mrg, _ = self.fns
            at = acc.type_signature.result
            identity = tf_computation(at)(lambda x: x)
            return I.federated_aggregate(
                v, data[1], ConcreteComputation(acc), ConcreteComputation(mrg), identity
            )
        raise SimharnessValueError(f'cannot split the aggregation {uri} into subrounds')

    def merge(self, acc_type: T.Type) -> ConcreteComputation:
        """The computation merging two accumulators of type `acc_type`."""
        uri = self.uri
        if uri in ('federated_min', 'federated_max'):
            return _binary(acc_type, tf.minimum if uri == 'federated_min' else tf.maximum)
        if uri == 'federated_secure_modular_sum':
            moduli = self.static['modulus']
            leaves = T.flatten_type(acc_type)
            # One int for every leaf, or a structure of ints matching the value's (a tuple,
            # a dict, ...: as `federated_secure_modular_sum` takes it).
            mods = (
                [moduli] * len(leaves)
                if isinstance(moduli, (numbers.Number, np.generic, np.ndarray))
                or not isinstance(acc_type, T.StructType)
                else flatten(from_container(moduli, acc_type))
            )

            def body(a, b):
                fa, fb = _leaves(a, acc_type), _leaves(b, acc_type)
                return pack_as(
                    acc_type,
                    [tf.math.floormod(x + y, tf.cast(m, x.dtype)) for x, y, m in zip(fa, fb, mods)],
                )

            return tf_computation(acc_type, acc_type)(body)
        if uri == 'federated_aggregate':
            return ConcreteComputation(self.fns[1])
        return _binary(acc_type, tf.add)

    def report(self, acc_type: T.Type) -> Optional[ConcreteComputation]:
        """The computation of the aggregation's result from its merged accumulator (None:
        the accumulator is the result)."""
        uri = self.uri
        if uri in ('federated_mean', 'federated_weighted_mean'):
            value_t = acc_type[0]

            def divide(total, count):
                return pack_as(
                    value_t,
                    [tf.math.divide(x, tf.cast(count, x.dtype)) for x in _leaves(total, value_t)],
                )

            return tf_computation(value_t, acc_type[1])(divide)
        if uri == 'federated_aggregate':
            return ConcreteComputation(self.fns[2])
        return None


def _reporter(i: int, report: ConcreteComputation) -> Any:
    """The body of `after_merge`'s report of accumulator `i` of the merged value."""

    def body(merged: Any) -> Any:
        return I.federated_map(report, merged[i])

    return body


def _element(arg: bb.ComputationBuildingBlock, k: int) -> bb.ComputationBuildingBlock:
    return arg.elements[k][1] if isinstance(arg, bb.Struct) else bb.Selection(arg, index=k)


# ------------------------------------------------------------------- compile


def compile_to_mergeable_comp_form(comp: Any) -> MergeableCompForm:
    """`comp` (one logical aggregation: parallel ones allowed, none depending on another)
    as a `MergeableCompForm` that gives the same result run in subrounds.

    Raises:
      SimharnessTypeError: `comp` is not a computation.
      SimharnessValueError: an aggregation depends on another one, or one that cannot be
        split (`federated_collect`).
    """
    ft = getattr(comp, 'type_signature', None)
    if not isinstance(ft, T.FunctionType) or not callable(getattr(comp, 'to_building_block', None)):
        raise SimharnessTypeError(
            f'expected a computation, got {comp!r}', expected='Computation', actual=type(comp)
        )
    lam = _as_lambda(comp.to_building_block())
    inl = _Inliner()
    result = inl.value(lam.result, {})
    defs = dict(inl.locals)
    order = [n for n, _ in inl.locals]
    aggs = [
        _Agg(n, c)
        for n, c in inl.locals
        if isinstance(c.fn, bb.Intrinsic) and c.fn.uri in AGGREGATION_URIS
    ]
    agg_names = frozenset(a.name for a in aggs)
    before = _needed([d for a in aggs for d in a.data], defs)
    if before & agg_names:
        raise SimharnessValueError(
            'Detected one aggregate dependent on another: an aggregation takes the result of '
            f'{", ".join(sorted(a.uri for a in aggs if a.name in before))}; a mergeable '
            'computation has one logical aggregation'
        )
    param_name, param_type = lam.parameter_name, lam.parameter_type

    def block_of(
        names: set,
        out: bb.ComputationBuildingBlock,
        replaced: Dict[str, bb.ComputationBuildingBlock],
    ) -> bb.ComputationBuildingBlock:
        locals_ = [(n, replaced.get(n, defs[n])) for n in order if n in names]
        return bb.Block(locals_, out) if locals_ else out

    # before_agg: p -> <the aggregations' data arguments>
    data_struct = bb.Struct([(None, d) for a in aggs for d in a.data])
    before_body = block_of(before, data_struct, {})
    before_agg = ConcreteComputation(
        bb.Lambda(param_name, param_type, before_body)
        if param_type is not None
        else bb.Lambda(None, None, before_body)
    )

    def up_body(*p: Any) -> Any:
        if not aggs:
            return I.federated_value(np.int32(0), T.SERVER)
        data = before_agg(*p) if p else before_agg()
        k, accs = 0, []
        for a in aggs:
            accs.append(a.accumulate([data[k + j] for j in range(len(a.data))]))
            k += len(a.data)
        return I.federated_zip(accs)

    up_to_merge = (
        federated_computation(param_type)(lambda p: up_body(p))
        if param_type is not None
        else federated_computation()(lambda: up_body())
    )
    merged_member = up_to_merge.type_signature.result.member

    if not aggs:
        merge = federated_computation(merged_member, merged_member)(lambda a, b: a)
    else:
        merges = [a.merge(merged_member[i]) for i, a in enumerate(aggs)]
        merge = federated_computation(merged_member, merged_member)(
            lambda x, y: [m(x[i], y[i]) for i, m in enumerate(merges)]
        )

    # after_merge: (p, merged@SERVER) -> result, each aggregation its report of merged
    merged_type = T.FederatedType(merged_member, T.SERVER)
    replaced: Dict[str, bb.ComputationBuildingBlock] = {}
    q = '_mc_merged'
    merged_ref: bb.ComputationBuildingBlock = bb.Reference(q, merged_type)
    if param_type is not None:
        q_type: T.Type = T.StructType([(None, param_type), (None, merged_type)])
        merged_ref = bb.Selection(bb.Reference(q, q_type), index=1)
    else:
        q_type = merged_type
    for i, a in enumerate(aggs):
        report = a.report(merged_member[i])
        if report is None:
            replaced[a.name] = bb.Selection(merged_ref, index=i)
            continue
        rep = federated_computation(T.FederatedType(merged_member, T.SERVER))(_reporter(i, report))
        replaced[a.name] = bb.Call(rep.to_building_block(), merged_ref)
    needed = _needed([result], defs, stop=agg_names)
    body = block_of(needed, result, replaced)
    if param_type is not None:
        body = bb.Block([(param_name, bb.Selection(bb.Reference(q, q_type), index=0))], body)
    after_merge = ConcreteComputation(bb.Lambda(q, q_type, body))
    return MergeableCompForm(up_to_merge=up_to_merge, merge=merge, after_merge=after_merge)
