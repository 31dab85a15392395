"""Client values held by an `EagerTFExecutor`, and blocks of them.

A `ClientBlock` holds the values of n clients leaf by leaf, stacked along a
leading client dimension or shared by all (broadcast weights), so that
block operations run one TF call for all of them; an `EagerValue` is one
value (a tensor, `Struct`, dataset or function), possibly a client's slice
of a block, taken lazily. A `VmappedModule` runs a block of clients of a vectorized
JAX computation (``tff.jax.computation(..., vectorize=True)``) as one call of its
vmapped StableHLO module.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from simharness.core import types as T
from simharness.core.reduction import Partial
from simharness.core.sequences import TensorBatches
from simharness.core.structure import Struct, map_structure, pack_as
from simharness.executors.base import ExecutorValue
from simharness.executors.leaf.tf_values import as_dataset, fast_numpy

#: The attribute of a vectorized JAX computation's ``XlaCallModule`` node that holds the
#: serialized StableHLO module of the computation mapped over a leading block dimension
#: of every argument (symbolic: one module for every block size), taking the arguments
#: the node takes (`simharness.jax.xla_call`). TF ignores attributes whose name begins
#: with ``_``.
VMAPPED_ATTR = '_simharness_vmapped_module'


class ClientBlock:
    """The values of n clients stored leaf by leaf: stacked [n, ...] or shared.

    A leaf is ('stacked', tensor with a leading client dimension) or
    ('shared', one tensor every client sees, e.g. broadcast weights). ClientBlock
    operations (map, zip, select, compute, reduce) work on the leaves
    directly; a client's own value is sliced out only when asked for.
    """

    __slots__ = ('type', 'n', 'leaves', '_numpy')

    def __init__(self, type_spec: T.Type, n: int, leaves: List[Tuple[str, Any]]):
        self.type = type_spec
        self.n = n
        self.leaves = leaves
        self._numpy: Optional[List[Any]] = None

    def values(self) -> List['EagerValue']:
        return [EagerValue(None, self.type, self, i) for i in range(self.n)]

    def slice(self, i: int) -> Any:
        return pack_as(self.type, [x if kind == 'shared' else x[i] for kind, x in self.leaves])

    def numpy_leaves(self) -> List[Any]:
        if self._numpy is None:
            self._numpy = [(kind, fast_numpy(x)) for kind, x in self.leaves]
        return self._numpy

    def sub_leaves(self, lo: int, hi: int) -> List[Tuple[str, Any]]:
        """The leaves of clients [lo, hi) (shared leaves unchanged)."""
        if lo == 0 and hi == self.n:
            return list(self.leaves)
        return [(k, x if k == 'shared' else x[lo:hi]) for k, x in self.leaves]


class EagerValue(ExecutorValue):
    """A value held by an `EagerTFExecutor`: tensor, Struct, dataset or function.

    A client value made by a block operation refers to its `ClientBlock` and index
    and is sliced out lazily.
    """

    __slots__ = ('_value', '_type', '_block', '_index')

    def __init__(
        self, value: Any, type_spec: T.Type, block: Optional[ClientBlock] = None, index: int = 0
    ):
        self._value = value
        self._type = type_spec
        self._block = block
        self._index = index

    @property
    def block_slot(self) -> Optional[Tuple[ClientBlock, int]]:
        """The block this client value is a (lazy) slice of, and its index there; None for
        a value of its own."""
        return None if self._block is None else (self._block, self._index)

    @property
    def internal(self) -> Any:
        if self._value is None and self._block is not None:
            self._value = self._block.slice(self._index)
        return self._value

    @property
    def internal_representation(self) -> Any:
        """TFF's name of `internal`: the tensor, `Struct`, dataset or function held.

        A sequence held as in-memory tensors (`TensorBatches`) shows as the
        `tf.data.Dataset` it stands for, as in TFF.
        """
        return self._public()

    def _public(self) -> Any:
        v = self.internal
        if isinstance(v, TensorBatches) or (
            isinstance(v, Struct)
            and any(isinstance(t, T.SequenceType) for t in T.flatten_type(self._type))
        ):
            return map_structure(as_dataset, v)
        return v

    @property
    def type_signature(self) -> T.Type:
        return self._type

    async def compute(self) -> Any:
        return self._public()  # sequences leave as datasets

    def __repr__(self) -> str:
        return f'EagerValue({self._type})'


def runs(values: Sequence[Any]) -> List[Tuple[int, int, Optional[ClientBlock], int]]:
    """Splits `values` into runs of consecutive clients of one block.

    Returns (begin, end, block, first index in block) per run; `block` is
    None for values that belong to no block (each such value is its own run).
    """
    out: List[Tuple[int, int, Optional[ClientBlock], int]] = []
    slots = [v.block_slot if isinstance(v, EagerValue) else None for v in values]
    i, n = 0, len(values)
    while i < n:
        slot = slots[i]
        if slot is None:
            out.append((i, i + 1, None, 0))
            i += 1
            continue
        b, lo = slot
        j = i + 1
        while j < n and (s := slots[j]) is not None and s[0] is b and s[1] == lo + (j - i):
            j += 1
        out.append((i, j, b, lo))
        i = j
    return out


class Row:
    """Row `index` of the stacked tensor `stacked` (which is `tensor`)."""

    __slots__ = ('tensor', 'stacked', 'index')

    def __init__(self, tensor: Any, stacked: Any, index: int):
        self.tensor, self.stacked, self.index = tensor, stacked, index


def plain_leaves(leaves: List[Any]) -> List[Any]:
    return [x.tensor if isinstance(x, Row) else x for x in leaves]


def stack_columns(rows: List[List[Any]], device_scope) -> Optional[List[Tuple[str, Any]]]:
    """Leaves of several clients as block leaves: shared (one object) or stacked."""
    out: List[Tuple[str, Any]] = []
    for j in range(len(rows[0])):
        col = [r[j] for r in rows]
        if isinstance(col[0], Row) and all(
            isinstance(c, Row) and c.stacked is col[0].stacked and c.index == col[0].index + k
            for k, c in enumerate(col)
        ):
            lo, whole = col[0].index, col[0].stacked
            out.append(
                (
                    'stacked',
                    whole if lo == 0 and len(col) == whole.shape[0] else whole[lo : lo + len(col)],
                )
            )
            continue
        col = plain_leaves(col)
        if all(c is col[0] for c in col):
            out.append(('shared', col[0]))
        elif all(
            isinstance(c, tf.Tensor) and c.dtype != tf.variant and c.shape == col[0].shape
            for c in col
        ):
            with device_scope():
                out.append(('stacked', tf.stack(col)))
        else:
            return None
    if not any(k == 'stacked' for k, _ in out):
        return None
    return out


def rows_to_values(partial: Partial, head_type: T.Type, acc_type: T.Type) -> Partial:
    """Turns the one-row leaf lists of a partial into numpy values of their types."""

    def value(leaf_list, t):
        vals = [np.asarray(x)[0] for x in leaf_list]
        return pack_as(t, vals) if isinstance(t, T.StructType) else vals[0]

    return Partial(
        partial.start,
        partial.stop,
        [value(v, head_type) for v in partial.head],
        {k: value(v, acc_type) for k, v in partial.nodes.items()},
        partial.open_chunk,
        None if partial.open_chunk is None else value(partial.open_acc, acc_type),
    )


#: Ops a graph that is just one ``XlaCallModule`` call holds besides it.
_PLAIN_OPS = frozenset({'Placeholder', 'Identity', 'NoOp'})


def _tensor(name: str) -> str:
    """A tensor's name as ``node:index`` (a graph def's inputs write ``node`` for index 0)."""
    return name if ':' in name else f'{name}:0'


def _through_identities(nodes: Dict[str, tf.compat.v1.NodeDef], name: str) -> str:
    """The tensor `name` is, followed back through ``Identity`` ops, as ``node:index``."""
    name = _tensor(name)
    while True:
        node = nodes.get(name.split(':')[0])
        if node is None or node.op != 'Identity' or not name.endswith(':0'):
            return name
        name = _tensor(node.input[0])


def module_call_args(
    graph_def: tf.compat.v1.GraphDef, input_names: Sequence[str], output_names: Sequence[str]
) -> Optional[List[int]]:
    """For a graph that is one ``XlaCallModule`` call (a JAX computation's graph): the
    parameter leaf each of the op's arguments is; None for any other graph.

    Such a graph holds nothing but its parameters, fed to the op (possibly through
    ``Identity`` ops, in any order), and the op's results, in order, passed through
    ``Identity`` ops as its results.
    """
    calls = [n for n in graph_def.node if n.op == 'XlaCallModule']
    if len(calls) != 1:
        return None
    node = calls[0]
    if any(n.op not in _PLAIN_OPS for n in graph_def.node if n is not node):
        return None
    nodes = {n.name: n for n in graph_def.node}
    params = {_tensor(name): i for i, name in enumerate(input_names)}
    sources = [_through_identities(nodes, x) for x in node.input if not x.startswith('^')]
    if len(sources) != len(node.input) or any(x not in params for x in sources):
        return None
    results = [_through_identities(nodes, name) for name in output_names]
    if results != [f'{node.name}:{k}' for k in range(len(results))]:
        return None
    return [params[x] for x in sources]


class VmappedModule:
    """The block module of a vectorized JAX computation, run on blocks of clients.

    Made from a computation's graph (`from_graph`) whose ``XlaCallModule`` node holds
    `VMAPPED_ATTR`; `make_block_fn` gives the TF function that runs n clients in one call
    of it: the shared leaves (one value for every client, e.g. broadcast weights) are
    broadcast to the block, the stacked ones passed as they are, and the results come
    back stacked, as `EmbeddedFunction.call_batched`'s. TF compiles the module with XLA
    once per block size (its block dimension is refined from the arguments' shapes).
    """

    __slots__ = ('module', 'version', 'args', 'out_shapes', 'out_dtypes', 'platforms')

    def __init__(self, node: tf.compat.v1.NodeDef, args: Sequence[int]):
        attrs = node.attr
        self.module: bytes = attrs[VMAPPED_ATTR].s
        self.version = int(attrs['version'].i)
        #: The parameter leaf each of the module's arguments is.
        self.args = tuple(args)
        self.out_shapes = [
            tf.TensorShape([None]).concatenate(tf.TensorShape(s)) for s in attrs['Sout'].list.shape
        ]
        self.out_dtypes = [tf.dtypes.as_dtype(t) for t in attrs['Tout'].list.type]
        self.platforms = [p.decode() for p in attrs['platforms'].list.s]

    @classmethod
    def from_graph(
        cls,
        graph_def: tf.compat.v1.GraphDef,
        input_names: Sequence[str],
        output_names: Sequence[str],
    ) -> Optional['VmappedModule']:
        """The block module of a graph that is one vectorized ``XlaCallModule`` call, or None.

        The graph must be nothing but its parameters fed to the op and the op's results,
        in order, passed through ``Identity`` ops as its results (a JAX computation's own
        graph, or one that passes a computation's parameters on to it in another order):
        the block module then computes all of it, its arguments taken from the
        parameters that feed the op. Any other graph (one that composes the module with
        other ops) runs as any graph does.
        """
        args = module_call_args(graph_def, input_names, output_names)
        if args is None:
            return None
        (node,) = [n for n in graph_def.node if n.op == 'XlaCallModule']
        if VMAPPED_ATTR not in node.attr:
            return None
        return cls(node, args)

    def make_block_fn(
        self,
        mask: Tuple[bool, ...],
        shared_sig: Tuple[tf.TensorSpec, ...],
        stacked_sig: Tuple[tf.TensorSpec, ...],
    ) -> Callable[..., Tuple[tf.Tensor, ...]]:
        """A `tf.function` ``(shared, stacked) -> stacked results`` running the module.

        Args:
          mask: per parameter leaf, True where the block shares one value.
          shared_sig: the `tf.TensorSpec`s of the shared leaves.
          stacked_sig: those of the stacked leaves (a leading client dimension).
        """
        # reason: TF's op that runs a serialized StableHLO module (no public API)
        from tensorflow.compiler.tf2xla.ops import gen_xla_ops  # pylint: disable=import-outside-toplevel

        @tf.function(autograph=False, input_signature=(shared_sig, stacked_sig))
        def block(shared, stacked):
            n = tf.shape(stacked[0])[0]
            it_s, it_x = iter(shared), iter(stacked)
            leaves = []
            for m in mask:
                if m:
                    x = next(it_s)
                    leaves.append(tf.broadcast_to(x[None], tf.concat([[n], tf.shape(x)], 0)))
                else:
                    leaves.append(next(it_x))
            return tuple(
                gen_xla_ops.xla_call_module(
                    args=[leaves[i] for i in self.args],
                    version=self.version,
                    module=self.module,
                    Sout=self.out_shapes,
                    Tout=self.out_dtypes,
                    dim_args_spec=[],
                    platforms=self.platforms,
                    function_list=[],
                    has_token_input_output=False,
                    disabled_checks=[],
                )
            )

        return block
