"""Serializes a Python function of JAX code as a computation (TFF's ``jax_serialization``).

As TFF does: the parameter type becomes one `jax.ShapeDtypeStruct` per tensor leaf
(each knowing its leaf index) in the parameter's structure, the function is traced by
``jax.jit(fn, keep_unused=True)`` on them, and the result type is read from what JAX
gives back. TFF then kept the XLA computation (HLO) in its computation proto; here JAX
exports it (`jax.export`) as a serialized StableHLO module with a calling-convention
version, and `simharness.jax.xla_call` wraps that in a TF graph that runs it
(``XlaCallModule``): a `CompiledComputation` like a `tf_computation`'s, which crosses
to worker processes as bytes and runs there without JAX or the user's Python.

```
fn, parameter type --(ShapeDtypeStructs, JaxComputationContext)--> jax.jit(fn).trace
  --jax.export--> Exported(StableHLO bytecode, in/out avals, out_tree)
  --xla_call_computation--> CompiledComputation((parameter -> result))
```

Struct arguments reach the function as the tensorflow frontend gives them: the type's
Python container when it has one (`collections.OrderedDict`, a named tuple, a list),
else a `Struct`, which is registered here as a JAX pytree (TFF registers its own).
"""

from __future__ import annotations

import inspect
from typing import Callable, Dict, List, Optional, Sequence, Tuple, cast

import jax
import numpy as np

from simharness.core import building_blocks as bb
from simharness.core import context_stack
from simharness.core import types as T
from simharness.core.struct import Struct
from simharness.errors import SimharnessTypeError, SimharnessValueError
from simharness.jax.jax_computation_context import JaxComputationContext
from simharness.jax.xla_call import max_calling_convention_version, xla_call_computation

__all__ = ['XlaSerializerTensorArg', 'serialize_jax_computation']

#: The platforms a JAX computation is lowered for.
PLATFORMS = ('cpu',)


class XlaSerializerTensorArg(jax.ShapeDtypeStruct):
    """A parameter leaf: its JAX shape and dtype, its TFF type and its index among the
    parameter's leaves (TFF's ``_XlaSerializerTensorArg``)."""

    def __init__(self, tensor_type: T.TensorType, tensor_index: int):
        super().__init__(tuple(tensor_type.shape or ()), tensor_type.dtype)
        self.type_signature = tensor_type
        self.tensor_index = tensor_index


def _struct_flatten(struct: Struct) -> Tuple[Tuple[object, ...], Tuple[Optional[str], ...]]:
    return tuple(struct), tuple(n for n, _ in struct.items())


def _struct_unflatten(names: Tuple[Optional[str], ...], values: Sequence[object]) -> Struct:
    return Struct(zip(names, values))


jax.tree_util.register_pytree_node(Struct, _struct_flatten, _struct_unflatten)


def _check_fully_defined(parameter_type: T.Type) -> None:
    for t in T.flatten_type(parameter_type):
        if isinstance(t, T.TensorType) and (t.shape is None or None in t.shape):
            raise SimharnessTypeError(
                'Can only serialize XLA computations whose parameters contain '
                'fully-defined TensorShapes at the leaves; encountered undefined tensor '
                'shapes (or unknown rank tensors) in the signature:\n'
                f'{parameter_type.formatted_representation()}',
                actual=parameter_type,
            )


def _packed_arg(t: T.Type, counter: List[int]) -> object:
    """The parameter as the function receives it, its leaves `XlaSerializerTensorArg`s."""
    if isinstance(t, T.TensorType):
        leaf = XlaSerializerTensorArg(t, counter[0])
        counter[0] += 1
        return leaf
    if not isinstance(t, T.StructType):
        raise SimharnessTypeError(
            'Can only construct an XLA serializer for TFF types which contain exclusively '
            f'structure and tensor types; found type:\n {t.formatted_representation()}',
            actual=t,
        )
    elems = [_packed_arg(e, counter) for e in t]
    return _in_container(t, elems)


def _in_container(t: T.StructType, elems: List[object]) -> object:
    c = t.container
    names = t.names
    if c is not None:
        if T.is_namedtuple_class(c):
            return c(*elems)
        if issubclass(c, dict):
            return c(zip(names, elems))
        if issubclass(c, (list, tuple)):
            return c(elems)
    return Struct(zip(names, elems))


def _args_and_kwargs(
    fn: Callable[..., object], parameter_type: Optional[T.Type], packed: object, unpack: bool
) -> Tuple[Tuple[object, ...], Dict[str, object]]:
    """How `fn` is called on the packed parameter (as the tensorflow frontend calls it)."""
    if parameter_type is None:
        return (), {}
    if not unpack:
        return (packed,), {}
    st = cast(T.StructType, parameter_type)
    values = list(packed.values()) if isinstance(packed, dict) else list(cast(Sequence, packed))
    names = [n for n, _ in st.items()]
    try:
        params = [
            p.name
            for p in inspect.signature(fn).parameters.values()
            if p.kind == p.POSITIONAL_OR_KEYWORD
        ]
    except (TypeError, ValueError):
        return tuple(values), {}
    if None not in names and names != params and sorted(names) == sorted(params):
        return (), dict(zip(cast(List[str], names), values))
    return tuple(values), {}


def _tensor_type(aval: object) -> T.TensorType:
    return T.TensorType(np.dtype(getattr(aval, 'dtype')), tuple(getattr(aval, 'shape')))


def serialize_jax_computation(
    fn: Callable[..., object],
    parameter_type: Optional[object],
    context_stack_arg: object = None,
    *,
    unpack: Optional[bool] = None,
    name: str = '',
    vectorize: bool = False,
) -> Tuple[bb.CompiledComputation, T.FunctionType]:
    """Traces `fn` with JAX into a computation of the TFF type JAX gives it.

    Args:
      fn: the Python function of JAX code (what one could `jax.jit`).
      parameter_type: its parameter's type (tensors and structs of fully defined shapes),
        or None when it takes none.
      context_stack_arg: TFF's ``context_stack`` argument; accepted, unused (the
        `JaxComputationContext` is installed on simharness's context stack).
      unpack: whether a struct parameter is passed as several arguments; None: when `fn`
        takes more than one positional parameter (TFF's ``unpack_arg``).
      name: the computation's name.
      vectorize: also export `fn` mapped over a leading block dimension of every
        parameter leaf (`jax.vmap`, the block size symbolic), kept in the graph beside
        the per-client module: a worker then runs a block of clients as one call of it
        (`simharness.executors.leaf.client_blocks.VmappedModule`).

    Returns:
      The `CompiledComputation` and its type signature, with the Python containers of the
      result JAX returned.

    Raises:
      TypeError: the parameter type holds no-tensor types or shapes not fully defined.
      ValueError: `vectorize` for a computation without a parameter.
    """
    del context_stack_arg
    ptype = None if parameter_type is None else T.to_type(parameter_type)
    if ptype is not None:
        _check_fully_defined(ptype)
        packed = _packed_arg(ptype, [0])
    else:
        packed = None
    if unpack is None:
        unpack = _takes_several(fn) and isinstance(ptype, T.StructType)
    args, kwargs = _args_and_kwargs(fn, ptype, packed, unpack)
    # The module takes the parameter's leaves in JAX's order of (args, kwargs).
    leaves, treedef = jax.tree_util.tree_flatten((args, kwargs))
    arg_order = [cast(XlaSerializerTensorArg, leaf).tensor_index for leaf in leaves]
    with context_stack.install(JaxComputationContext()):
        exported = jax.export.export(jax.jit(fn, keep_unused=True), platforms=PLATFORMS)(
            *args, **kwargs
        )
        vmapped = None
        if vectorize:
            if not leaves:
                raise SimharnessValueError(
                    'vectorize=True needs a computation with a parameter (its clients are '
                    'mapped over the parameter leaves)'
                )
            vmapped = _export_vmapped(fn, treedef, leaves)
    _check_version(exported.calling_convention_version)
    result = jax.tree_util.tree_unflatten(
        exported.out_tree, [_tensor_type(a) for a in exported.out_avals]
    )
    result_type = T.to_type(result)
    comp = xla_call_computation(
        ptype,
        result_type,
        arg_order,
        exported.mlir_module_serialized,
        exported.calling_convention_version,
        exported.platforms,
        name,
        vmapped=None if vmapped is None else vmapped.mlir_module_serialized,
    )
    return comp, comp.type_signature


def _export_vmapped(
    fn: Callable[..., object], treedef: object, leaves: Sequence[object]
) -> 'jax.export.Exported':
    """`fn` mapped (`jax.vmap`) over a leading block dimension ``b`` of every parameter
    leaf, exported with ``b`` symbolic: one module for every block size, taking the
    parameter leaves in the order of `leaves` (the per-client module's)."""

    def flat_fn(*xs: object) -> object:
        a, k = jax.tree_util.tree_unflatten(cast(jax.tree_util.PyTreeDef, treedef), xs)
        return fn(*a, **k)

    (b,) = jax.export.symbolic_shape('b')
    specs = [
        jax.ShapeDtypeStruct((b,) + tuple(getattr(x, 'shape')), getattr(x, 'dtype')) for x in leaves
    ]
    exported = jax.export.export(jax.jit(jax.vmap(flat_fn)), platforms=PLATFORMS)(*specs)
    _check_version(exported.calling_convention_version)
    return exported


def _check_version(version: int) -> None:
    """Refuses a module the installed TensorFlow could not run (now, not on a worker)."""
    newest = max_calling_convention_version()
    if version > newest:
        raise SimharnessValueError(
            f'JAX {jax.__version__} exported a StableHLO module of calling-convention version '
            f'{version}; this TensorFlow runs versions up to {newest}. Export older modules '
            f"(jax.config.update('jax_export_calling_convention_version', {newest})), or "
            'install a TensorFlow as new as JAX'
        )


def _takes_several(fn: Callable[..., object]) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    n = sum(1 for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))
    return n > 1
