"""Compiles local functions of building blocks into one TF computation.

A `federated_computation` over unplaced values (or a lambda nested in one)
is a tree of `tf_computation` calls glued together by references,
selections, structs, blocks, lambdas and the sequence intrinsics
(`sequence_map`, `sequence_reduce`, `sequence_sum`). Such a tree is
compiled here into ONE serialized TF graph, a `CompiledComputation`: every
called tf_computation's `GraphDef` is imported into a fresh graph, wired to
the tensors of its argument; sequence intrinsics become `tf.data` `map` and
`reduce` whose functions capture the enclosing tensors (so a nested
computation may refer to a parameter of the one around it).

Intrinsics then see only `CompiledComputation`s: a compiled lambda runs
batched, and in worker processes, like any tf_computation (the worker
protocol carries serialized graphs, never Python).

::

    intrinsics._fn(lambda)  ──compile_function──▶  CompiledComputation
        (trace time)            fresh tf.Graph: placeholders → imported graphs → result_i
"""

from __future__ import annotations

import collections.abc
import itertools
from typing import Any, Dict, List, Optional, Tuple, cast

import attrs
import tensorflow as tf

from simharness.core import building_blocks as bb
from simharness.core import determinism
from simharness.core import types as T
from simharness.core.structure import Struct, pack_as
from simharness.core.tf_serialization import element_spec_for, tf_dtype
from simharness.errors import SimharnessTypeError

#: The intrinsics that a compiled function may call (on unplaced sequences).
SEQUENCE_INTRINSICS = frozenset({'sequence_map', 'sequence_reduce', 'sequence_sum'})


def is_local_type(t: Optional[T.Type]) -> bool:
    """True for types a TF graph can take or return (no federated, functional or placement parts)."""
    return t is None or not T.contains(t, (T.FederatedType, T.FunctionType, T.PlacementType))


def free_reference_types(comp: bb.ComputationBuildingBlock) -> Dict[str, T.Type]:
    """The free references of `comp` with their types, in order of first use."""
    free = bb.free_references(comp)
    out: Dict[str, T.Type] = {}

    def walk(c: bb.ComputationBuildingBlock) -> None:
        if isinstance(c, bb.Reference):
            if c.name in free and c.name not in out:
                out[c.name] = c.type_signature
            return
        for child in c.children():
            walk(child)

    walk(comp)
    return out


def _path(comp: bb.ComputationBuildingBlock) -> Optional[Tuple[str, Tuple[int, ...]]]:
    """(root name, indices) of a chain of selections from a reference, else None."""
    indices: List[int] = []
    while isinstance(comp, bb.Selection):
        indices.append(comp.index)
        comp = comp.source
    if isinstance(comp, bb.Reference):
        return comp.name, tuple(reversed(indices))
    return None


def abstract_captures(
    comp: bb.ComputationBuildingBlock,
) -> Tuple[bb.ComputationBuildingBlock, Dict[str, bb.ComputationBuildingBlock]]:
    """Replaces what `comp` uses of its enclosing scope by fresh references.

    Each longest chain of selections from a free reference (``arg[1]``, say,
    where ``arg`` is the enclosing computation's parameter) becomes one
    capture, so that a function may use an unplaced element of a parameter
    whose other elements are federated.

    Returns:
      (the rewritten block, {fresh name: the captured chain, valid in the
      enclosing scope}), in order of first use.
    """
    free = bb.free_references(comp)
    captures: Dict[str, bb.ComputationBuildingBlock] = {}
    by_path: Dict[Tuple[str, Tuple[int, ...]], str] = {}
    prefix = fresh_name(comp, '_cap')

    def rewrite(c: bb.ComputationBuildingBlock, bound: frozenset) -> bb.ComputationBuildingBlock:
        path = _path(c) if isinstance(c, (bb.Reference, bb.Selection)) else None
        if path is not None and path[0] in free and path[0] not in bound:
            name = by_path.get(path)
            if name is None:
                name = by_path[path] = f'{prefix}_{len(by_path)}'
                captures[name] = c
            return bb.Reference(name, c.type_signature)
        if isinstance(c, bb.Selection):
            return bb.Selection(rewrite(c.source, bound), index=c.index)
        if isinstance(c, bb.Struct):
            return bb.Struct(
                [(n, rewrite(e, bound)) for n, e in c.elements],
                container=getattr(c.type_signature, 'container', None),
            )
        if isinstance(c, bb.Call):
            return bb.Call(rewrite(c.fn, bound), None if c.arg is None else rewrite(c.arg, bound))
        if isinstance(c, bb.Lambda):
            inner = bound | {c.parameter_name} if c.parameter_name is not None else bound
            return bb.Lambda(c.parameter_name, c.parameter_type, rewrite(c.result, inner))
        if isinstance(c, bb.Block):
            locals_ = []
            for n, v in c.locals:
                locals_.append((n, rewrite(v, bound)))
                bound = bound | {n}
            return bb.Block(locals_, rewrite(c.result, bound))
        return c

    return rewrite(comp, frozenset()), captures


def _names_in(comp: bb.ComputationBuildingBlock) -> set:
    names: set = set()

    def walk(c: bb.ComputationBuildingBlock) -> None:
        if isinstance(c, bb.Reference):
            names.add(c.name)
        elif isinstance(c, bb.Lambda) and c.parameter_name is not None:
            names.add(c.parameter_name)
        elif isinstance(c, bb.Block):
            names.update(n for n, _ in c.locals)
        for child in c.children():
            walk(child)

    walk(comp)
    return names


def fresh_name(comp: bb.ComputationBuildingBlock, prefix: str = '_lifted') -> str:
    """A name that neither binds nor refers to anything in `comp`."""
    used = _names_in(comp)
    return next(f'{prefix}{i}' for i in itertools.count() if f'{prefix}{i}' not in used)


def close_over(
    body: bb.ComputationBuildingBlock,
    captures: Dict[str, T.Type],
    param: Optional[Tuple[str, T.Type]] = None,
) -> bb.Lambda:
    """A lambda with no free references that takes `body`'s captures as a parameter.

    With `param` (name, type) None: ``(p -> let c_i = p[i] in body)``. With a
    parameter: ``(p -> let x = p[0], c_i = p[1][i] in body)``. The caller
    passes the captured values (a struct of the references) at the call.
    """
    caps_type = T.StructType(list(captures.values()))
    pname = fresh_name(body)
    if param is None:
        ref = bb.Reference(pname, caps_type)
        locals_ = [(n, bb.Selection(ref, index=i)) for i, n in enumerate(captures)]
        return bb.Lambda(pname, caps_type, bb.Block(locals_, body) if locals_ else body)
    ptype = T.StructType([param[1], caps_type])
    ref = bb.Reference(pname, ptype)
    caps = bb.Selection(ref, index=1)
    locals_ = [(param[0], bb.Selection(ref, index=0))]
    locals_ += [(n, bb.Selection(caps, index=i)) for i, n in enumerate(captures)]
    return bb.Lambda(pname, ptype, bb.Block(locals_, body))


class _Closure:
    __slots__ = ('lam', 'env')

    def __init__(self, lam: bb.Lambda, env: Dict[str, Any]):
        self.lam, self.env = lam, env


class _SequenceOp:
    __slots__ = ('uri', 'type_signature')

    def __init__(self, uri: str, type_signature: T.FunctionType):
        self.uri, self.type_signature = uri, type_signature


def _leaves(value: Any, t: T.Type) -> List[tf.Tensor]:
    """The tensor leaves of a symbolic value of type `t` (sequences are variant tensors)."""
    if isinstance(t, T.StructType):
        out: List[tf.Tensor] = []
        for i, e in enumerate(t):
            out.extend(_leaves(value[i], e))
        return out
    if isinstance(value, (_Closure, _SequenceOp, bb.CompiledComputation)):
        raise SimharnessTypeError(f'a function cannot be used as a value of type {t} here')
    return [value]


def _from_elem(elem: Any, t: T.Type) -> Any:
    """A dataset element (containers as `element_spec_for` builds them) as a symbolic value."""
    if not isinstance(t, T.StructType):
        return elem
    out = []
    for i, (n, e) in enumerate(t.items()):
        if isinstance(elem, collections.abc.Mapping):
            child = elem[n]
        elif n is not None and (T.is_namedtuple(elem) or attrs.has(type(elem))):
            child = getattr(elem, n)
        else:
            child = elem[i]
        out.append((n, _from_elem(child, e)))
    return Struct(out)


def _to_elem(value: Any, t: T.Type, spec: Any) -> Any:
    """A symbolic value as a dataset element shaped like `spec` (from `element_spec_for(t)`)."""
    if not isinstance(t, T.StructType):
        return value
    # element_spec_for names the elements of mappings, namedtuples and attrs classes
    names = cast(Tuple[str, ...], t.names)
    cls: Any = type(spec)  # a container class: its constructor is not typed
    if isinstance(spec, collections.abc.Mapping):
        specs = [spec[n] for n in names]
    elif T.is_namedtuple(spec) or attrs.has(cls):
        specs = [getattr(spec, n) for n in names]
    else:
        specs = list(spec)
    elems = [_to_elem(value[i], e, s) for i, (e, s) in enumerate(zip(t, specs))]
    if isinstance(spec, collections.abc.Mapping):
        return cls(zip(names, elems))
    if T.is_namedtuple(spec):
        return cls(*elems)
    if attrs.has(cls):
        return cls(**dict(zip(names, elems)))
    return tuple(elems)


class _Compiler:
    """Evaluates building blocks symbolically into the default TF graph."""

    def __init__(self, what: str):
        self._what = what
        self._graph_defs: Dict[str, Any] = {}
        self._imports = itertools.count()

    def fail(self, why: str) -> SimharnessTypeError:
        return SimharnessTypeError(
            f'{self._what}: cannot compile this federated_computation into a TF computation: '
            f'{why}. A function passed to an intrinsic may call tf_computations, other such '
            'federated_computations and sequence_map / sequence_reduce / sequence_sum, and use '
            'selections and structs'
        )

    def evaluate(self, comp: bb.ComputationBuildingBlock, env: Dict[str, Any]) -> Any:
        if isinstance(comp, bb.Reference):
            if comp.name not in env:
                raise self.fail(f'it refers to {comp.name!r}, a value of its enclosing scope')
            return env[comp.name]
        if isinstance(comp, bb.Selection):
            source = self.evaluate(comp.source, env)
            if not isinstance(source, Struct):
                raise self.fail(f'cannot select from {comp.source.type_signature}')
            return source[comp.index]
        if isinstance(comp, bb.Struct):
            return Struct((n, self.evaluate(e, env)) for n, e in comp.elements)
        if isinstance(comp, bb.Block):
            env = dict(env)
            for name, value in comp.locals:
                env[name] = self.evaluate(value, env)
            return self.evaluate(comp.result, env)
        if isinstance(comp, bb.Lambda):
            return _Closure(comp, env)
        if isinstance(comp, bb.CompiledComputation):
            return comp
        if isinstance(comp, bb.Call):
            fn = self.evaluate(comp.fn, env)
            arg = None if comp.arg is None else self.evaluate(comp.arg, env)
            return self.apply(fn, arg)
        if isinstance(comp, bb.Intrinsic):
            if comp.uri not in SEQUENCE_INTRINSICS:
                raise self.fail(f'it calls the federated intrinsic {comp.uri}')
            return _SequenceOp(comp.uri, comp.type_signature)  # type: ignore[arg-type]
        raise self.fail(f'it contains a {type(comp).__name__} ({comp.compact()})')

    def apply(self, fn: Any, arg: Any) -> Any:
        if isinstance(fn, _Closure):
            env = fn.env
            if fn.lam.parameter_name is not None:
                env = dict(env)
                env[fn.lam.parameter_name] = arg
            return self.evaluate(fn.lam.result, env)
        if isinstance(fn, bb.CompiledComputation):
            return self._call_graph(fn, arg)
        if isinstance(fn, _SequenceOp):
            return getattr(self, '_' + fn.uri)(fn.type_signature, arg)
        raise self.fail(f'cannot call {fn!r}')

    def _call_graph(self, comp: bb.CompiledComputation, arg: Any) -> Any:
        ft = comp.type_signature
        leaves = [] if ft.parameter is None else _leaves(arg, ft.parameter)
        graph = tf.compat.v1.get_default_graph()
        # Tensors of an enclosing graph (captured inside a tf.data function)
        # enter this one through an op, which captures them.
        leaves = [x if x.graph is graph else tf.identity(x) for x in leaves]
        gd = self._graph_defs.get(comp.graph.fingerprint)
        if gd is None:
            gd = tf.compat.v1.GraphDef()
            gd.ParseFromString(comp.graph.graph_def)
            self._graph_defs[comp.graph.fingerprint] = gd
        outs = tf.graph_util.import_graph_def(
            gd,
            input_map=dict(zip(comp.graph.input_names, leaves)),
            return_elements=list(comp.graph.output_names),
            name=f'call_{next(self._imports)}',
        )
        return pack_as(ft.result, list(outs))

    @staticmethod
    def _dataset(variant: tf.Tensor, t: T.SequenceType) -> tf.data.Dataset:
        return tf.data.experimental.from_variant(variant, element_spec_for(t.element))

    def _sequence_map(self, ft: T.FunctionType, arg: Any) -> tf.Tensor:
        pt = ft.parameter
        assert isinstance(pt, T.StructType)  # <fn, seq>, built by intrinsics.sequence_map
        seq_t, res_t = pt[1], ft.result
        assert isinstance(seq_t, T.SequenceType) and isinstance(res_t, T.SequenceType)
        fn, variant = arg[0], arg[1]
        spec = element_spec_for(seq_t.element)
        out_spec = element_spec_for(res_t.element)

        def mapper(*args):
            elem = args if type(spec) is tuple else args[0]  # tf.data unpacks plain tuples
            value = self.apply(fn, _from_elem(elem, seq_t.element))
            return _to_elem(value, res_t.element, out_spec)

        return tf.data.experimental.to_variant(self._dataset(variant, seq_t).map(mapper))

    def _sequence_reduce(self, ft: T.FunctionType, arg: Any) -> Any:
        pt = ft.parameter
        assert isinstance(pt, T.StructType)  # <seq, zero, op>, built by intrinsics.sequence_reduce
        seq_t, zero_t, acc_t = pt[0], pt[1], ft.result
        assert isinstance(seq_t, T.SequenceType)
        variant, zero, op = arg[0], arg[1], arg[2]
        if isinstance(zero_t, T.FederatedType):
            raise self.fail(f'sequence_reduce has a federated zero ({zero_t})')
        init = tuple(tf.convert_to_tensor(x) for x in _leaves(zero, zero_t))

        def reduce_fn(acc, elem):
            value = self.apply(
                op,
                Struct(
                    [(None, pack_as(acc_t, list(acc))), (None, _from_elem(elem, seq_t.element))]
                ),
            )
            return tuple(_leaves(value, acc_t))

        res = self._dataset(variant, seq_t).reduce(init, reduce_fn)
        return pack_as(acc_t, list(res) if isinstance(res, (tuple, list)) else [res])

    def _sequence_sum(self, ft: T.FunctionType, arg: Any) -> Any:
        seq_t = ft.parameter
        assert isinstance(seq_t, T.SequenceType)
        leaves_t = T.flatten_type(seq_t.element)
        zeros = tuple(tf.zeros(lt.shape, tf_dtype(lt.dtype)) for lt in leaves_t)

        def add(acc, elem):
            return tuple(
                a + e for a, e in zip(acc, _leaves(_from_elem(elem, seq_t.element), seq_t.element))
            )

        res = self._dataset(arg, seq_t).reduce(zeros, add)
        return pack_as(seq_t.element, list(res))


def _placeholders(t: T.Type, inputs: List[tf.Tensor]) -> Any:
    if isinstance(t, T.StructType):
        return Struct((n, _placeholders(e, inputs)) for n, e in t.items())
    if isinstance(t, T.TensorType):
        ph = tf.compat.v1.placeholder(tf_dtype(t.dtype), t.shape, name=f'arg_{len(inputs)}')
    elif isinstance(t, T.SequenceType):
        ph = tf.compat.v1.placeholder(tf.variant, (), name=f'arg_{len(inputs)}')
    else:
        raise SimharnessTypeError(f'a TF computation cannot take a parameter of type {t}')
    inputs.append(ph)
    return ph


def compile_function(
    comp: bb.ComputationBuildingBlock, what: str = 'computation', name: str = ''
) -> bb.CompiledComputation:
    """Compiles a function-typed block with no free references into one TF graph.

    Args:
      comp: a `Lambda` (or any function-typed block) over unplaced values.
      what: how error messages name the function (the intrinsic's argument).
      name: the name of the `CompiledComputation`.

    Returns:
      A `CompiledComputation` of the same type signature.

    Raises:
      SimharnessTypeError: if `comp` refers to its enclosing scope, takes or
        returns federated or functional values, or calls a federated
        intrinsic.
    """
    if isinstance(comp, bb.CompiledComputation):
        return comp
    ft = comp.type_signature
    compiler = _Compiler(what)
    if not isinstance(ft, T.FunctionType):
        raise compiler.fail(f'it is a value of type {ft}, not a function')
    free = sorted(bb.free_references(comp))
    if free:
        raise compiler.fail(f'it refers to {free} of its enclosing scope')
    if not (is_local_type(ft.parameter) and is_local_type(ft.result)):
        raise compiler.fail(f'its type {ft} has federated or functional parts')
    determinism.pin_tensorflow_threads()
    graph = tf.Graph()
    inputs: List[tf.Tensor] = []
    with graph.as_default():
        fn = compiler.evaluate(comp, {})
        arg = None if ft.parameter is None else _placeholders(ft.parameter, inputs)
        result = compiler.apply(fn, arg)
        outputs = [
            tf.identity(x, name=f'result_{i}') for i, x in enumerate(_leaves(result, ft.result))
        ]
    return bb.CompiledComputation(
        bb.TFGraph(
            graph.as_graph_def().SerializeToString(),
            [t.name for t in inputs],
            [t.name for t in outputs],
        ),
        ft,
        name=name,
    )
