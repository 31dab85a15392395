"""A serialized StableHLO module as a `CompiledComputation`: one TF graph, one XLA call.

A JAX computation is lowered by JAX (`jax.export`) into a StableHLO module, serialized
as versioned MLIR bytecode with a calling-convention version. This module wraps those
bytes in a TF graph whose single op is TF's ``XlaCallModule`` (the op that runs a
serialized StableHLO module through XLA, as ``jax2tf`` does), fed by the computation's
parameter leaves in the order the module takes them and giving its result leaves:

```
param leaves (TFF order) --arg_order--> XlaCallModule(module=<StableHLO bytecode>,
                                                      version, platforms=['CPU'])
                                          --> result leaves (TFF order)
```

The graph is an ordinary `CompiledComputation` (`core/tf_serialization`): every stack
runs it as it runs a `tf_computation` (the thread stack, worker processes, gRPC and Ray
workers, blocks of clients, compiled federated lambdas), and it crosses to a worker as
serialized graph bytes. The worker imports no JAX and none of the user's Python: TF
compiles the module with XLA where the op runs.

It imports no JAX (only TF); `simharness.jax.jax_serialization` makes the module.
"""

from __future__ import annotations

from typing import List, Optional, Sequence

import tensorflow as tf

# TF's op that runs a serialized StableHLO module (the op jax2tf emits); no public API.
from tensorflow.compiler.tf2xla.ops import gen_xla_ops
from tensorflow.compiler.tf2xla.python import xla as tfxla

from simharness.core import building_blocks as bb
from simharness.core import types as T
from simharness.core.structure import flatten, pack_as
from simharness.core.tf_serialization import serialize_tf_function, tf_dtype
from simharness.errors import SimharnessValueError
from simharness.executors.leaf import client_blocks

__all__ = [
    'VMAPPED_ATTR',
    'XLA_CALL_MODULE_OP',
    'max_calling_convention_version',
    'stablehlo_module',
    'xla_call_computation',
]

#: The TF op a JAX computation's graph holds.
XLA_CALL_MODULE_OP = 'XlaCallModule'
#: Its attribute holding a vectorized computation's block module (the name
#: `client_blocks` reads; an attribute whose name begins with ``_`` is not the op's own,
#: and TF passes it by).
VMAPPED_ATTR = client_blocks.VMAPPED_ATTR


def _without_containers(t: T.Type) -> T.Type:
    """`t` with its Python containers dropped (the graph is fed and read as `Struct`s)."""
    if isinstance(t, T.StructType):
        return T.StructType([(n, _without_containers(e)) for n, e in t.items()])
    return t


def xla_call_computation(
    parameter_type: Optional[T.Type],
    result_type: T.Type,
    arg_order: Sequence[int],
    module: bytes,
    version: int,
    platforms: Sequence[str],
    name: str = '',
    vmapped: Optional[bytes] = None,
) -> bb.CompiledComputation:
    """A `CompiledComputation` of type ``(parameter_type -> result_type)`` that runs `module`.

    Args:
      parameter_type: the computation's parameter (tensors and structs), or None.
      result_type: its result; the module's results are its leaves, in order.
      arg_order: the module's argument k is the parameter's leaf ``arg_order[k]``.
      module: the serialized StableHLO module (`jax.export.Exported.mlir_module_serialized`).
      version: its calling-convention version (`Exported.calling_convention_version`).
      platforms: the platforms it was lowered for (``('cpu',)``).
      name: the computation's name.
      vmapped: a module of the same calling convention mapping the computation over a
        leading (symbolic) block dimension of every argument, or None. Kept in the
        ``XlaCallModule`` node's attribute `VMAPPED_ATTR`, which TF ignores: a leaf
        executor runs a block of clients as one call of it
        (`client_blocks.VmappedModule`).
    """
    tensors: List[T.TensorType] = []
    for t in T.flatten_type(result_type):
        if not isinstance(t, T.TensorType):
            raise SimharnessValueError(f'a JAX computation returns tensors, got {result_type}')
        tensors.append(t)
    out_shapes = [tf.TensorShape(t.shape) for t in tensors]
    out_dtypes = [tf_dtype(t.dtype) for t in tensors]
    plain_param = None if parameter_type is None else _without_containers(parameter_type)
    plain_result = _without_containers(result_type)
    order = list(arg_order)

    def call(leaves: List[object]) -> object:
        outs = gen_xla_ops.xla_call_module(
            args=[leaves[i] for i in order],
            version=version,
            module=module,
            Sout=out_shapes,
            Tout=out_dtypes,
            dim_args_spec=[],
            platforms=[p.upper() for p in platforms],
            function_list=[],
            has_token_input_output=False,
            disabled_checks=[],
        )
        if isinstance(plain_result, T.StructType):
            return pack_as(plain_result, list(outs))
        return outs[0]

    if plain_param is None:
        traced = serialize_tf_function(lambda: call([]), None, False, name)
    else:
        traced = serialize_tf_function(lambda arg: call(flatten(arg)), plain_param, False, name)
    graph = traced.graph
    if vmapped is not None:
        graph = _with_vmapped(graph, vmapped)
    return bb.CompiledComputation(graph, T.FunctionType(parameter_type, result_type), name)


def _with_vmapped(graph: bb.TFGraph, vmapped: bytes) -> bb.TFGraph:
    """`graph` with `vmapped` in its ``XlaCallModule`` node."""
    graph_def = tf.compat.v1.GraphDef.FromString(graph.graph_def)
    (node,) = [n for n in graph_def.node if n.op == XLA_CALL_MODULE_OP]
    node.attr[VMAPPED_ATTR].s = vmapped
    return bb.TFGraph(graph_def.SerializeToString(), graph.input_names, graph.output_names)


def max_calling_convention_version() -> int:
    """The newest calling-convention version of StableHLO modules this TensorFlow runs."""
    return int(tfxla.call_module_maximum_supported_version())


def stablehlo_module(comp: bb.CompiledComputation) -> Optional[bytes]:
    """The serialized StableHLO module `comp` runs, or None for a TF computation."""
    graph_def = tf.compat.v1.GraphDef.FromString(comp.graph.graph_def)
    for node in graph_def.node:
        if node.op == XLA_CALL_MODULE_OP:
            return bytes(node.attr['module'].s)
    return None
