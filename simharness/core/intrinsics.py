"""Federated intrinsics with TFF's names and signatures.

Each function checks its arguments' types while tracing (a clear
`SimharnessTypeError` naming the types) and adds a call of an `Intrinsic`
building block to the traced body. The federating layer gives them meaning.
"""

from __future__ import annotations

import numbers
import types
from typing import Any, Dict, Optional, Tuple, cast

import numpy as np

from simharness.core import building_blocks as bb
from simharness.core import tracing
from simharness.core import types as T
from simharness.core.computation import Computation, PolymorphicComputation
from simharness.core.structure import Struct, from_container
from simharness.errors import ContextError, SimharnessTypeError, SimharnessValueError


def _bb(value: Any, hint: Optional[T.Type] = None) -> bb.ComputationBuildingBlock:
    if not tracing.is_tracing():  # first, as TFF: before any check of the arguments
        raise ContextError('intrinsics can only be used inside a federated_computation')
    return tracing.to_building_block(value, hint)


def _call(
    uri: str,
    param: Optional[T.Type],
    result: T.Type,
    arg: Optional[bb.ComputationBuildingBlock],
    **static: Any,
) -> tracing.Value:
    intrinsic = bb.Intrinsic(uri, T.FunctionType(param, result), **static)
    return tracing.Value(tracing.current_scope().bind(bb.Call(intrinsic, arg)))


def _fn(fn: Any, param: Optional[T.Type], what: str) -> bb.ComputationBuildingBlock:
    """The building block of a function argument, instantiating polymorphic ones."""
    if isinstance(fn, PolymorphicComputation):
        if param is None:
            raise SimharnessTypeError(f'{what}: a polymorphic computation needs a parameter type')
        return fn.to_building_block(param)
    if isinstance(fn, (Computation, tracing.Value, bb.ComputationBuildingBlock)):
        comp = _bb(fn)
    elif callable(fn):
        raise SimharnessTypeError(
            f'{what}: got a plain Python function {fn!r}; decorate it with '
            '@simharness.tf_computation'
        )
    else:
        raise SimharnessTypeError(f'{what}: expected a computation, got {type(fn).__name__}')
    ft = comp.type_signature
    if not isinstance(ft, T.FunctionType):
        raise SimharnessTypeError(
            f'{what}: expected a function, got a value of type {ft}', actual=ft
        )
    if param is not None:
        if ft.parameter is None:
            raise SimharnessTypeError(
                f'{what}: function {ft} takes no parameter but will be called with {param}'
            )
        if not ft.parameter.is_assignable_from(param):
            raise SimharnessTypeError(
                f'{what}: function parameter type {ft.parameter} is not assignable from {param}',
                expected=ft.parameter,
                actual=param,
            )
    return _compiled(comp, what)


def _transformations() -> types.ModuleType:
    """`core.transformations`, imported on first use: it imports TensorFlow, which
    `import simharness` does not (the one lazy import of this module)."""
    import simharness.core.transformations as transformations  # lazy: TensorFlow

    return transformations


def _compiled(comp: bb.ComputationBuildingBlock, what: str) -> bb.ComputationBuildingBlock:
    """`comp`, compiled into one TF computation when it is a lambda with no free references.

    A lambda that refers to its enclosing scope (a nested federated_computation
    capturing an outer parameter) is returned as it is: `federated_map` and the
    sequence intrinsics pass its captures as arguments (`_captures`).
    """
    if isinstance(comp, bb.CompiledComputation) or bb.free_references(comp):
        return comp
    transformations = _transformations()
    return transformations.compile_function(comp, what)


def _only_compiled(comp: bb.ComputationBuildingBlock, what: str) -> bb.ComputationBuildingBlock:
    if not isinstance(comp, bb.CompiledComputation):
        free = sorted(bb.free_references(comp))
        raise SimharnessTypeError(
            f'{what}: the function refers to {free} of the enclosing federated_computation; '
            'here only federated_map and the sequence intrinsics accept such a function: pass '
            'those values as arguments instead'
        )
    return comp


def _captures(
    comp: bb.ComputationBuildingBlock, what: str
) -> Tuple[bb.ComputationBuildingBlock, Dict[str, T.Type], bb.Struct]:
    """What `comp` uses of its enclosing scope, as parameters.

    Returns:
      (`comp` with each use replaced by a fresh reference, {fresh name: type},
      the struct of the used values to pass in, valid in the enclosing scope).

    Raises:
      SimharnessTypeError: if a used value is not an unplaced value a TF graph
        can take.
    """
    transformations = _transformations()
    rewritten, caps = transformations.abstract_captures(comp)
    for c in caps.values():
        t = c.type_signature
        if not transformations.is_local_type(t):
            raise SimharnessTypeError(
                f'{what}: the function refers to {c.compact()!r} of type {t} in its enclosing '
                'federated_computation; a function run on clients (or on elements of a '
                'sequence) may capture unplaced values only',
                actual=t,
            )
    types = {n: c.type_signature for n, c in caps.items()}
    return rewritten, types, bb.Struct([(None, c) for c in caps.values()])


def _lift_local(call: bb.Call, what: str) -> tracing.Value:
    """Binds `call` (a local computation that refers to its enclosing scope) compiled into TF.

    The call is closed over what it uses of its enclosing scope, compiled
    into one TF computation, and called with those values.
    """
    transformations = _transformations()
    body, caps, arg = _captures(call, what)
    compiled = transformations.compile_function(transformations.close_over(body, caps), what)
    return tracing.Value(tracing.current_scope().bind(bb.Call(compiled, arg)))


def _fn_type(comp: bb.ComputationBuildingBlock) -> T.FunctionType:
    """The type of a block returned by `_fn` (which checked that it is a function type)."""
    return cast(T.FunctionType, comp.type_signature)


def _fed_type(comp: bb.ComputationBuildingBlock) -> T.FederatedType:
    """The type of a block returned by `_federated` (which checked that it is federated)."""
    return cast(T.FederatedType, comp.type_signature)


def _federated(
    value: Any, what: str, placement: Optional[T.PlacementLiteral] = None, implicit_zip: bool = True
) -> bb.ComputationBuildingBlock:
    """The building block of a federated argument.

    As in TFF, a (nested) list, tuple, dict or struct of federated values
    with one placement is zipped first (`federated_zip`) unless
    `implicit_zip` is False.
    """
    comp = _bb(value)
    t = comp.type_signature
    if implicit_zip and isinstance(t, T.StructType) and _all_federated(t):
        placements = {leaf.placement for leaf in _federated_leaves(t)}
        if len(placements) > 1:
            raise SimharnessTypeError(
                f'{what}: cannot zip a value of type {t} implicitly: its federated values must '
                'all have the same placement',
                actual=t,
            )
        comp = federated_zip(tracing.Value(comp)).comp
        t = comp.type_signature
    if not isinstance(t, T.FederatedType) or (
        placement is not None and t.placement is not placement
    ):
        where = f' placed at {placement.name}' if placement is not None else ''
        raise SimharnessTypeError(
            f'{what}: expected a federated value{where}, got a value of type {t}', actual=t
        )
    return comp


def _check_numeric(t: T.Type, what: str, floating: bool = False) -> None:
    for leaf in T.flatten_type(t):
        ok = isinstance(leaf, T.TensorType) and T.is_numeric_dtype(leaf.dtype)
        if ok and floating:
            ok = np.issubdtype(leaf.dtype, np.floating)
        if not ok:
            kind = 'floating-point' if floating else 'numeric'
            raise SimharnessTypeError(
                f'{what}: needs {kind} tensors, got a member of type {t}', actual=t
            )


def federated_map(fn: Any, arg: Any) -> tracing.Value:
    """Applies `fn` pointwise to a federated value (at clients or at the server)."""
    value = _federated(arg, 'federated_map')
    vt = _fed_type(value)
    f = _fn(fn, vt.member, 'federated_map')
    rt = _fn_type(f).result
    if not isinstance(f, bb.CompiledComputation):
        # A function that captures unplaced values of the enclosing computation:
        # it is compiled over <member, captures>, and the captures travel with
        # the value, placed alongside it.
        transformations = _transformations()
        f, caps, captured = _captures(f, 'federated_map')
        member = transformations.fresh_name(f, '_member')
        body = bb.Call(f, bb.Reference(member, vt.member))
        f = transformations.compile_function(
            transformations.close_over(body, caps, (member, vt.member)), 'federated_map'
        )
        placed = federated_value(tracing.Value(captured), vt.placement)
        value = federated_zip(tracing.Value(bb.Struct([(None, value), (None, placed.comp)]))).comp
    if vt.placement is T.SERVER:
        result = T.FederatedType(rt, T.SERVER)
        uri = 'federated_apply'
    else:
        result = T.FederatedType(rt, T.CLIENTS, all_equal=False)
        uri = 'federated_map'
    args = bb.Struct([(None, f), (None, value)])
    return _call(uri, args.type_signature, result, args)


def federated_map_all_equal(fn: Any, arg: Any) -> tracing.Value:
    """`federated_map` at clients whose result is equal on all clients (``U@CLIENTS``).

    TFF's `federated_map_all_equal`: `fn` runs once and every client gets
    its result (so a random `fn` gives every client the same draw).

    Raises:
      SimharnessTypeError: `arg` is not a federated value at clients, or `fn`
        does not take its member.
    """
    value = _federated(arg, 'federated_map_all_equal', T.CLIENTS)
    vt = _fed_type(value)
    f = _only_compiled(_fn(fn, vt.member, 'federated_map_all_equal'), 'federated_map_all_equal')
    args = bb.Struct([(None, f), (None, value)])
    return _call(
        'federated_map_all_equal',
        args.type_signature,
        T.FederatedType(_fn_type(f).result, T.CLIENTS, all_equal=True),
        args,
    )


def federated_apply(fn: Any, arg: Any) -> tracing.Value:
    """`federated_map` at the server (TFF's older name)."""
    return federated_map(fn, tracing.Value(_federated(arg, 'federated_apply', T.SERVER)))


def federated_broadcast(value: Any) -> tracing.Value:
    """`T@SERVER -> T@CLIENTS` (all equal)."""
    v = _federated(value, 'federated_broadcast', T.SERVER)
    member = _fed_type(v).member
    return _call(
        'federated_broadcast', v.type_signature, T.FederatedType(member, T.CLIENTS, True), v
    )


def federated_sum(value: Any) -> tracing.Value:
    """`{T}@CLIENTS -> T@SERVER`, summed in the canonical client order."""
    v = _federated(value, 'federated_sum', T.CLIENTS)
    member = _fed_type(v).member
    _check_numeric(member, 'federated_sum')
    return _call('federated_sum', v.type_signature, T.FederatedType(member, T.SERVER), v)


def federated_mean(value: Any, weight: Any = None) -> tracing.Value:
    """Mean (or weighted mean) of a client value, at the server."""
    v = _federated(value, 'federated_mean', T.CLIENTS)
    member = _fed_type(v).member
    _check_numeric(member, 'federated_mean', floating=True)
    result = T.FederatedType(member, T.SERVER)
    if weight is None:
        return _call('federated_mean', v.type_signature, result, v)
    w = _federated(weight, 'federated_mean weight', T.CLIENTS)
    wt = _fed_type(w).member
    if not (isinstance(wt, T.TensorType) and wt.shape == () and T.is_numeric_dtype(wt.dtype)):
        raise SimharnessTypeError(
            f'federated_mean: the weight must be a numeric scalar at '
            f'clients, got {w.type_signature}',
            actual=w.type_signature,
        )
    args = bb.Struct([(None, v), (None, w)])
    return _call('federated_weighted_mean', args.type_signature, result, args)


def _extremum(uri: str, value: Any) -> tracing.Value:
    v = _federated(value, uri, T.CLIENTS)
    member = _fed_type(v).member
    for leaf in T.flatten_type(member):
        if not (
            isinstance(leaf, T.TensorType)
            and (np.issubdtype(leaf.dtype, np.integer) or np.issubdtype(leaf.dtype, np.floating))
        ):
            op = 'min' if uri == 'federated_min' else 'max'
            # TFF: a ValueError naming the type
            raise SimharnessValueError(
                f'{uri}: the value type {v.type_signature} is not compatible with the {op} '
                'operator: every member leaf must be an integer or floating-point tensor'
            )
    return _call(uri, v.type_signature, T.FederatedType(member, T.SERVER), v)


def federated_min(value: Any) -> tracing.Value:
    """The elementwise minimum over clients of a client value, at the server.

    As TFF (which lowers it to `federated_aggregate` with `tf.minimum`), the
    fold starts from the largest finite value of each leaf's dtype, which is
    also the result over zero clients. Clients are folded in the canonical
    order (`simharness.core.reduction`), so signed zeros and NaNs give the
    same bits on every stack.

    Raises:
      SimharnessTypeError: `value` is not a federated value at clients.
      SimharnessValueError: a member leaf is not an integer or float tensor.
    """
    return _extremum('federated_min', value)


def federated_max(value: Any) -> tracing.Value:
    """The elementwise maximum over clients of a client value, at the server.

    The fold starts from the smallest finite value of each leaf's dtype (as
    TFF); see `federated_min`.

    Raises:
      SimharnessTypeError: `value` is not a federated value at clients.
      SimharnessValueError: a member leaf is not an integer or float tensor.
    """
    return _extremum('federated_max', value)


def federated_aggregate(
    value: Any, zero: Any, accumulate: Any, merge: Any, report: Any
) -> tracing.Value:
    """Aggregates client values with `accumulate`, `merge` and `report` (TFF semantics).

    Clients are folded with `accumulate` from `zero` in chunks of consecutive
    clients, chunk accumulators are joined with `merge` in a fixed tree over
    client indices, and `report` maps the result (see
    `simharness.core.reduction`).
    """
    v = _federated(value, 'federated_aggregate', T.CLIENTS)
    member = _fed_type(v).member
    z = _bb(zero)
    zt = z.type_signature
    if isinstance(zt, T.FederatedType):
        if zt.placement is not T.SERVER:
            raise SimharnessTypeError(
                f'federated_aggregate: zero must be unplaced or at the server, got {zt}'
            )
        zt_member = zt.member
    else:
        zt_member = zt
    acc = _only_compiled(
        _fn(accumulate, T.StructType([zt_member, member]), 'federated_aggregate accumulate'),
        'federated_aggregate accumulate',
    )
    at = _fn_type(acc).result
    if not at.is_assignable_from(zt_member) and not zt_member.is_assignable_from(at):
        raise SimharnessTypeError(
            f'federated_aggregate: accumulate returns {at}, which does not '
            f'match the type of zero {zt_member}',
            expected=zt_member,
            actual=at,
        )
    mrg = _only_compiled(
        _fn(merge, T.StructType([at, at]), 'federated_aggregate merge'), 'federated_aggregate merge'
    )
    rep = _only_compiled(
        _fn(report, at, 'federated_aggregate report'), 'federated_aggregate report'
    )
    args = bb.Struct([(None, v), (None, z), (None, acc), (None, mrg), (None, rep)])
    return _call(
        'federated_aggregate',
        args.type_signature,
        T.FederatedType(_fn_type(rep).result, T.SERVER),
        args,
    )


def federated_value(value: Any, placement: T.PlacementLiteral) -> tracing.Value:
    """Places an unplaced value at `placement` (all equal)."""
    if not isinstance(placement, T.PlacementLiteral):
        raise SimharnessTypeError(
            f'federated_value: placement must be CLIENTS or SERVER, got {placement!r}'
        )
    v = _bb(value)
    t = v.type_signature
    if T.contains(t, (T.FederatedType, T.FunctionType)):
        raise SimharnessTypeError(f'federated_value: expected an unplaced value, got {t}', actual=t)
    return _call(f'federated_value_at_{placement.uri}', t, T.FederatedType(t, placement, True), v)


def _all_federated(t: T.Type) -> bool:
    """True when `t` is federated, or a non-empty (nested) struct of federated values."""
    if isinstance(t, T.FederatedType):
        return True
    return isinstance(t, T.StructType) and len(t) > 0 and all(_all_federated(e) for e in t)


def _federated_leaves(t: T.Type) -> list:
    if isinstance(t, T.StructType):
        return [leaf for e in t for leaf in _federated_leaves(e)]
    return [t]


def _zip_member(t: T.Type, placement_box: list) -> T.Type:
    if isinstance(t, T.FederatedType):
        if placement_box and placement_box[0] is not t.placement:
            raise SimharnessTypeError('federated_zip: all values must have the same placement')
        placement_box[:] = [t.placement]
        return t.member
    if isinstance(t, T.StructType):
        return T.StructType(
            [(n, _zip_member(e, placement_box)) for n, e in t.items()], container=t.container
        )
    raise SimharnessTypeError(f'federated_zip: expected a struct of federated values, got {t}')


def federated_zip(value: Any) -> tracing.Value:
    """A (nested) struct of federated values -> a federated struct."""
    v = _bb(value)
    t = v.type_signature
    if isinstance(t, T.FederatedType):
        return tracing.Value(v)
    if not isinstance(t, T.StructType):  # TFF: a ValueError
        raise SimharnessValueError(
            f'federated_zip: expected a struct of federated values, got a value of type {t}'
        )
    if len(t) == 0:
        raise SimharnessTypeError(
            f'federated_zip: expected a non-empty struct of federated values, got {t}', actual=t
        )
    box: list = []
    member = _zip_member(t, box)
    placement = box[0]
    result = T.FederatedType(member, placement, all_equal=placement is T.SERVER)
    return _call(f'federated_zip_at_{placement.uri}', t, result, v)


def federated_eval(fn: Any, placement: T.PlacementLiteral) -> tracing.Value:
    """Evaluates a no-parameter computation at `placement` (each client runs it)."""
    if not isinstance(placement, T.PlacementLiteral):
        raise SimharnessTypeError(
            f'federated_eval: placement must be CLIENTS or SERVER, got {placement!r}'
        )
    f = _only_compiled(_fn(fn, None, 'federated_eval'), 'federated_eval')
    ft = _fn_type(f)
    if ft.parameter is not None:
        raise SimharnessTypeError(
            f'federated_eval: expected a function with no parameter, got {ft}'
        )
    result = T.FederatedType(ft.result, placement, all_equal=placement is T.SERVER)
    return _call(f'federated_eval_at_{placement.uri}', ft, result, f)


def federated_collect(value: Any) -> tracing.Value:
    """`{T}@CLIENTS -> T*@SERVER`, in client order."""
    v = _federated(value, 'federated_collect', T.CLIENTS)
    member = _fed_type(v).member
    return _call(
        'federated_collect', v.type_signature, T.FederatedType(T.SequenceType(member), T.SERVER), v
    )


def federated_secure_select(
    client_keys: Any, max_key: Any, server_val: Any, select_fn: Any
) -> tracing.Value:
    """`federated_select` where the server must not learn the keys (TFF's intrinsic).

    A simulation has no server to hide the keys from: the clients get the
    same values as with `federated_select`. Arguments and errors as there.
    """
    return _select('federated_secure_select', client_keys, max_key, server_val, select_fn)


def federated_select(
    client_keys: Any, max_key: Any, server_val: Any, select_fn: Any
) -> tracing.Value:
    """Each client gets the sequence of `select_fn(server_val, key)` for its keys."""
    return _select('federated_select', client_keys, max_key, server_val, select_fn)


def _select(
    uri: str, client_keys: Any, max_key: Any, server_val: Any, select_fn: Any
) -> tracing.Value:
    k = _federated(client_keys, f'{uri} client_keys', T.CLIENTS, implicit_zip=False)
    kt = _fed_type(k).member
    # TFF wants a statically known length; clients holding different numbers of keys
    # ({int32[?]}@CLIENTS) work here too.
    if not (isinstance(kt, T.TensorType) and kt.dtype == np.int32 and kt.rank == 1):
        raise SimharnessTypeError(
            f'{uri}: client_keys must be int32 vectors at clients, got {k.type_signature}',
            expected='{int32[N]}@CLIENTS',
            actual=k.type_signature,
        )
    mk = _bb(max_key)
    if not isinstance(max_key, (tracing.Value, bb.ComputationBuildingBlock)) and not isinstance(
        mk.type_signature, T.FederatedType
    ):
        # A Python constant is placed at the server for you (a traced value must be).
        mk = federated_value(tracing.Value(mk), T.SERVER).comp
    want = T.FederatedType(np.int32, T.SERVER)
    if not want.is_assignable_from(mk.type_signature):
        raise SimharnessTypeError(
            f'{uri}: max_key must be an int32 placed at the server, got {mk.type_signature}',
            expected=want,
            actual=mk.type_signature,
        )
    sv = _federated(server_val, f'{uri} server_val', T.SERVER)
    # A struct of server values is zipped, as today's TFF does (TFF 0.19 did not): the
    # error of a select_fn that does not fit names the zipped server_val's type.
    what = f'{uri} select_fn (server_val has type {sv.type_signature})'
    f = _only_compiled(
        _fn(select_fn, T.StructType([_fed_type(sv).member, T.TensorType(np.int32)]), what), what
    )
    args = bb.Struct([(None, k), (None, mk), (None, sv), (None, f)])
    result = T.FederatedType(T.SequenceType(_fn_type(f).result), T.CLIENTS, False)
    return _call(uri, args.type_signature, result, args)


#: The allowed range of each leaf of a secure sum's bitwidth / modulus / max_input.
_SECURE_RANGES = {
    'bitwidth': (1, 62, '[1, 62]'),
    'modulus': (1, 2**62, '[1, 2**62]'),
    'max_input': (0, 2**62 - 1, '[0, 2**62 - 1]'),
}


def _check_secure_spec(uri: str, key: str, spec: Any, member: T.Type) -> None:
    """Checks a bitwidth or modulus: one int, or a structure of ints matching `member`.

    Each int must lie in `_SECURE_RANGES[key]`; bools, floats and numpy
    arrays are refused (``int(2.5)`` would silently be 2).
    """
    low, high, text = _SECURE_RANGES[key]

    def leaf(path: str, x: Any) -> None:
        # The range is phrased 'must be in [...]' for the value errors TFF users know.
        name, got = f'{uri}: {key}{path}', f'got {x!r} of type {type(x).__name__}'
        if isinstance(x, bool) or not isinstance(x, numbers.Integral):
            raise SimharnessTypeError(
                f'{name} must be an int in {text}, {got}', expected=int, actual=type(x)
            )
        if not low <= int(x) <= high:
            raise SimharnessValueError(f'{name} must be in {text}, {got}')

    if isinstance(spec, (numbers.Number, np.generic, np.ndarray, str, bytes)):
        leaf('', spec)
        return
    if not isinstance(member, T.StructType):
        raise SimharnessTypeError(
            f'{uri}: {key} must be an int in {text} for a value of type {member}, got '
            f'{spec!r} of type {type(spec).__name__}',
            expected=int,
            actual=type(spec),
        )
    try:
        struct = from_container(spec, member)
    except SimharnessTypeError as e:
        raise SimharnessTypeError(
            f'{uri}: {key} must be an int in {text} or a structure of such ints '
            f'matching {member}, got {spec!r} of type {type(spec).__name__} ({e})',
            expected=member,
            actual=type(spec),
        ) from e

    def walk(path: str, x: Any, t: T.Type) -> None:
        if isinstance(t, T.StructType):
            if not isinstance(x, Struct):
                raise SimharnessTypeError(
                    f'{uri}: {key}{path} must be a structure matching {t}, got {x!r} of type '
                    f'{type(x).__name__}',
                    expected=t,
                    actual=type(x),
                )
            for i, ((name, te), xe) in enumerate(zip(t.items(), x)):
                walk(f'{path}[{name!r}]' if name is not None else f'{path}[{i}]', xe, te)
        else:
            leaf(path, x)

    walk('', struct, member)


def _secure(uri: str, value: Any, spec: Any, key: str) -> tracing.Value:
    v = _federated(value, uri, T.CLIENTS)
    member = _fed_type(v).member
    for leaf in T.flatten_type(member):
        if not (isinstance(leaf, T.TensorType) and np.issubdtype(leaf.dtype, np.integer)):
            raise SimharnessTypeError(
                f'{uri}: secure sums are defined on integers only, got a member of type {member}; '
                'quantize floats to integers first',
                actual=member,
            )
    _check_secure_spec(uri, key, spec, member)
    return _call(uri, v.type_signature, T.FederatedType(member, T.SERVER), v, **{key: spec})


def federated_secure_sum(
    value: Any, max_input: Any = None, *, bitwidth: Any = None
) -> tracing.Value:
    """Secure sum of client integers in ``[0, max_input]`` (checked per element), at the server.

    TFF's `federated_secure_sum(value, max_input)`: `max_input` is one int or
    a structure of ints matching the value's. The sum is exact (computed as
    `federated_secure_sum_bitwidth` with ``bitwidth = max_input.bit_length()``,
    whose modulus no sum of in-range values reaches), then cast to the
    value's dtype with two's-complement wrap-around.

    TFF 0.17-0.19 named the bitwidth variant `federated_secure_sum(value,
    bitwidth)`: code that passes ``bitwidth=`` by keyword gets that variant;
    a positional second argument is `max_input`, as in later TFF.
    """
    if bitwidth is not None:
        if max_input is not None:
            raise SimharnessTypeError('federated_secure_sum: pass max_input or bitwidth, not both')
        return federated_secure_sum_bitwidth(value, bitwidth)
    if max_input is None:
        raise SimharnessTypeError(
            'federated_secure_sum: missing argument max_input (the '
            'largest value a client may contribute)'
        )
    return _secure('federated_secure_sum', value, max_input, 'max_input')


def federated_secure_sum_bitwidth(value: Any, bitwidth: Any) -> tracing.Value:
    """Secure sum of client integers in ``[0, 2**bitwidth - 1]`` (checked per element).

    The sum is exact modulo ``2**(bitwidth + ceil(log2(num_clients)))``, as in
    the secure aggregation protocol, then cast to the value's dtype with
    two's-complement wrap-around.
    """
    return _secure('federated_secure_sum_bitwidth', value, bitwidth, 'bitwidth')


def federated_secure_modular_sum(value: Any, modulus: Any) -> tracing.Value:
    """``SUM(value mod modulus) mod modulus`` of client integers, at the server."""
    return _secure('federated_secure_modular_sum', value, modulus, 'modulus')


def _seq_arg(value: Any, what: str):
    v = _bb(value)
    t = v.type_signature
    member = t.member if isinstance(t, T.FederatedType) else t
    if not isinstance(member, T.SequenceType):
        raise SimharnessTypeError(
            f'{what}: expected a sequence (or a federated sequence), got {t}', actual=t
        )
    return v, t, member


def _lift(t: T.Type, member: T.Type) -> T.Type:
    if isinstance(t, T.FederatedType):
        return T.FederatedType(member, t.placement, t.all_equal and t.placement is T.SERVER)
    return member


def _local_sequence_call(uri: str, args: bb.Struct, result: T.Type) -> bb.Call:
    return bb.Call(bb.Intrinsic(uri, T.FunctionType(args.type_signature, result)), args)


def sequence_map(fn: Any, arg: Any) -> tracing.Value:
    """Maps `fn` over every element of a sequence (also inside federated sequences).

    `fn` may be a federated_computation that refers to (unplaced) values of
    the enclosing computation: the map is then compiled into one TF
    computation that takes them as arguments.
    """
    v, t, seq = _seq_arg(arg, 'sequence_map')
    f = _fn(fn, seq.element, 'sequence_map')
    rt = T.SequenceType(_fn_type(f).result)
    if isinstance(f, bb.CompiledComputation):
        args = bb.Struct([(None, f), (None, v)])
        return _call('sequence_map', args.type_signature, _lift(t, rt), args)
    if not isinstance(t, T.FederatedType):
        return _lift_local(
            _local_sequence_call('sequence_map', bb.Struct([(None, f), (None, v)]), rt),
            'sequence_map',
        )
    # A federated sequence: as TFF, federated_map(s -> sequence_map(fn, s), value).
    transformations = _transformations()
    s = transformations.fresh_name(f, '_seq')
    body = _local_sequence_call(
        'sequence_map', bb.Struct([(None, f), (None, bb.Reference(s, seq))]), rt
    )
    return federated_map(bb.Lambda(s, seq, body), tracing.Value(v))


def sequence_reduce(value: Any, zero: Any, op: Any) -> tracing.Value:
    """Folds a sequence with `op(accumulator, element)` starting from `zero`.

    `op` may be a federated_computation that refers to (unplaced) values of
    the enclosing computation (see `sequence_map`).
    """
    v, t, seq = _seq_arg(value, 'sequence_reduce')
    z = _bb(zero)
    zt = z.type_signature
    zt_member = zt.member if isinstance(zt, T.FederatedType) else zt
    f = _fn(op, T.StructType([zt_member, seq.element]), 'sequence_reduce')
    at = _fn_type(f).result
    if isinstance(f, bb.CompiledComputation):
        args = bb.Struct([(None, v), (None, z), (None, f)])
        return _call('sequence_reduce', args.type_signature, _lift(t, at), args)
    if not isinstance(t, T.FederatedType):
        if isinstance(zt, T.FederatedType):
            raise SimharnessTypeError(
                f'sequence_reduce: a sequence that is not federated needs '
                f'an unplaced zero, got {zt}',
                actual=zt,
            )
        return _lift_local(
            _local_sequence_call(
                'sequence_reduce', bb.Struct([(None, v), (None, z), (None, f)]), at
            ),
            'sequence_reduce',
        )
    # A federated sequence: as TFF, federated_map(s -> sequence_reduce(s, zero, op), value),
    # zipping a federated zero with the value.
    transformations = _transformations()
    s = transformations.fresh_name(bb.Struct([(None, f), (None, z)]), '_seq')
    if isinstance(zt, T.FederatedType):
        pt = T.StructType([seq, zt_member])
        ref = bb.Reference(s, pt)
        args = bb.Struct(
            [(None, bb.Selection(ref, index=0)), (None, bb.Selection(ref, index=1)), (None, f)]
        )
        mapped: Any = tracing.Value(bb.Struct([(None, v), (None, z)]))
    else:
        pt = seq
        args = bb.Struct([(None, bb.Reference(s, seq)), (None, z), (None, f)])
        mapped = tracing.Value(v)
    return federated_map(
        bb.Lambda(s, pt, _local_sequence_call('sequence_reduce', args, at)), mapped
    )


def sequence_sum(value: Any) -> tracing.Value:
    """The sum of a sequence's elements."""
    v, t, seq = _seq_arg(value, 'sequence_sum')
    _check_numeric(seq.element, 'sequence_sum')
    for leaf in T.flatten_type(seq.element):
        if not leaf.is_fully_defined:
            raise SimharnessTypeError(
                f'sequence_sum: element shapes must be fully defined, got {seq}'
            )
    return _call('sequence_sum', t, _lift(t, seq.element), v)


def to_value(
    arg: Any, type_spec: Any = None, *, parameter_type_hint: Any = None, zip_if_needed: bool = False
) -> tracing.Value:
    """`arg` as a traced `Value` of the computation being traced (federated_language's).

    Args:
      arg: a Python or numpy constant, a container of values, a computation,
        a placement or a `Value`.
      type_spec: the type `arg` must have (checked: a `SimharnessTypeError`
        names both types when it is not assignable).
      parameter_type_hint: the parameter type to instantiate a polymorphic
        computation with.
      zip_if_needed: a struct of federated values that `type_spec` wants as
        one federated value is zipped (`federated_zip`).

    Raises:
      SimharnessTypeError: `arg` does not have `type_spec`.
    """
    want = None if type_spec is None else T.to_type(type_spec)
    hint = T.to_type(parameter_type_hint) if parameter_type_hint is not None else want
    comp = tracing.to_building_block(arg, hint)
    t = comp.type_signature
    if want is not None and not want.is_assignable_from(t):
        if zip_if_needed and isinstance(want, T.FederatedType) and isinstance(t, T.StructType):
            zipped = federated_zip(tracing.Value(comp))
            if want.is_assignable_from(zipped.type_signature):
                return zipped
        raise SimharnessTypeError(
            f'the value {comp.compact()!r} has type {t}, which is not assignable to {want}',
            expected=want,
            actual=t,
        )
    return tracing.Value(comp)
