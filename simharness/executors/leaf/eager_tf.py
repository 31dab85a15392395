"""`EagerTFExecutor`: runs serialized TF computations eagerly on one device.

What it does: embeds `CompiledComputation`s as callables (a bounded LRU
cache keyed by graph fingerprint), keeps values as eager tensors, Structs
of them, or `tf.data.Dataset`s between calls, validates argument types, and
implements the `BatchExecutor` block operations: a block of clients whose
inputs have equal shapes runs through ONE TF call (`tf.map_fn` over the
stacked per-client inputs, with broadcast inputs passed once), and
reductions follow the canonical tree of `simharness.core.reduction`
(`eager_reductions.LeafReductions`: an object each executor owns, `reductions`).

What it leaves to other layers: placements and intrinsics (the federating
layer), lambdas and references (the reference-resolving layer), threads and
processes (the delegating executors).

Its helpers, each in a module of its own: `embedded_function` (graph import,
batched calls and folds, the function cache), `tf_values` (values into and
out of tensors, with type checks; dlpack), `client_blocks` (a block of
clients' values and the values that refer to it), `eager_sequences` (clients'
sequences taken in stacked; the sequence intrinsics on datasets); numpy folds of partial
reductions live with the canonical reduction order in `core.reduction`.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, cast

import numpy as np
import tensorflow as tf

from simharness.core import building_blocks as bb
from simharness.core import determinism
from simharness.core.computation import Computation
from simharness.core import types as T
from simharness.core.structure import Struct, flatten, pack_as
from simharness.core.batching import stack_python_values
from simharness.core.buffers import SharedReads
from simharness.errors import (
    ExecutorClosedError,
    SimharnessError,
    SimharnessTypeError,
    SimharnessValueError,
    at_client,
)
from simharness.core.sequences import TensorBatches
from simharness.executors.base import (
    BatchExecutor,
    ExecutorValue,
    normalize_struct_elements,
    selection_index,
)
from simharness.executors.leaf.client_blocks import (
    ClientBlock,
    EagerValue,
    plain_leaves,
    runs,
    stack_columns,
)
from simharness.core.reduction import Partial, ReductionKind
from simharness.executors.leaf.eager_sequences import (
    select_datasets,
    sequence_op,
    stack_sequences,
    stacked_sequences,
)
from simharness.executors.leaf.eager_reductions import REDUCTION_SLICE, LeafReductions
from simharness.runtime.stream_plan import PlanNode, PlanReduction
from simharness.executors.leaf.embedded_function import (
    DEFAULT_CACHE_SIZE,
    EmbeddedFunction,
    FunctionCache,
    flatten_arg,
    lowered_leaves,
    pack_result,
)
from simharness.executors.leaf.tf_values import (
    fast_tensor,
    ingest,
    numpy_tree,
)
from simharness.validation import EagerModeError, check_bool, check_int, check_type_spec_matches

__all__ = [
    'EagerTFExecutor',
    'EagerValue',
    'ClientBlock',
    'EmbeddedFunction',
    'FunctionCache',
    'REDUCTION_SLICE',
]


def _check_device(device: str) -> None:
    """Raises a `SimharnessValueError` unless TF has a logical device matching `device`."""
    try:
        spec = tf.DeviceSpec.from_string(device)
    except ValueError as e:
        raise SimharnessValueError(
            f"device {device!r} is not a TF device name (such as '/CPU:0' or '/GPU:1'): {e}"
        ) from None
    devices = tf.config.list_logical_devices()
    for d in devices:
        have = tf.DeviceSpec.from_string(d.name)
        if (spec.device_type is None or spec.device_type.upper() == have.device_type.upper()) and (
            spec.device_index is None or spec.device_index == have.device_index
        ):
            return
    raise SimharnessValueError(
        f'device {device!r} is not on this machine; its logical devices are '
        f'{[d.name for d in devices]} (tf.config.list_logical_devices())'
    )


def _check_finite(f: EmbeddedFunction, args: Sequence[EagerValue]) -> None:
    """Raises when one of `args` holds an infinite dataset (``repeat()`` without a count)
    where `f` reads its datasets to the end (`EmbeddedFunction.reduces_to_end`): the call
    would never return. The error's `map_position` is the argument's."""
    for i, a in enumerate(args):
        leaves = flatten(a.internal)
        for j in f.sequence_params:
            ds = leaves[j] if j < len(leaves) else None
            if isinstance(ds, tf.data.Dataset) and int(ds.cardinality()) == int(
                tf.data.INFINITE_CARDINALITY
            ):
                err = SimharnessValueError(
                    f'its dataset is infinite (a repeat() without a count?) and '
                    f'{f.comp.name or "the computation"} reads its datasets to the end '
                    f'(dataset.reduce): the call would never return; give each client a '
                    f'finite dataset (repeat(count), take(n))'
                )
                err.map_position = i  # type: ignore[attr-defined]
                raise err


class EagerTFExecutor(BatchExecutor):
    """Runs serialized TF computations eagerly on `device` (TFF's EagerTFExecutor).

    Args:
      device: a TF device name ('/CPU:0', '/GPU:1') or a
        `tf.config.LogicalDevice` (TFF's spelling); None lets TF choose.
      cache_size: how many embedded functions to keep (least recently used
        ones are dropped), when no shared `function_cache` is given.
      function_cache: a `FunctionCache` shared with other executors.
      max_batch_size: the most clients run through one TF call (bounds the
        memory of a batched map); None: no bound.
      sums_in_calls: a streamed sum of a compiled map is made inside the map's
        call (`stream_eval.summed_map`; the same bits). Workers' executors turn it
        on; client threads sharing the driver's cores ran the reference round
        slower that way (2 threads 35.0 -> 36.3 ms, 4 threads 40.5 -> 44.6 ms).
      shared_reads: the broadcasts another process wrote for this one, from their
        owner (a local worker's host): values created from them are read in place
        (`tf_values.Pin`). None: values are copied.

    Raises:
      RuntimeError: not executing eagerly (inside a `tf.Graph().as_default()`
        block or a `tf.function`), as TFF's.
      TypeError: `device` is neither a str nor a `tf.config.LogicalDevice`.
      ValueError: this machine has no such device (see
        `tf.config.list_logical_devices()`).
    """

    def __init__(
        self,
        device: Optional[Any] = None,
        cache_size: int = DEFAULT_CACHE_SIZE,
        function_cache: Optional[FunctionCache] = None,
        max_batch_size: Optional[int] = None,
        sums_in_calls: bool = False,
        shared_reads: Optional[SharedReads] = None,
    ):
        if not tf.executing_eagerly():
            raise EagerModeError(
                'EagerTFExecutor can only be constructed in eager mode; it was constructed '
                'inside a TF graph (a `tf.Graph().as_default()` block or a `tf.function`)'
            )
        max_batch_size = check_int('max_batch_size', max_batch_size, 1, allow_none=True)
        if function_cache is None:
            check_int('cache_size', cache_size, 1)
        elif not isinstance(function_cache, FunctionCache):
            raise SimharnessTypeError(
                f'function_cache must be a FunctionCache or None, got {function_cache!r} of '
                f'type {type(function_cache).__name__}',
                expected=FunctionCache,
                actual=type(function_cache),
            )
        if isinstance(device, tf.config.LogicalDevice):
            device = device.name
        elif device is not None and not isinstance(device, str):
            raise SimharnessTypeError(
                f"device must be a TF device name (a str such as '/CPU:0'), a "
                f'tf.config.LogicalDevice or None, got {device!r} of type {type(device).__name__}',
                expected=str,
                actual=type(device),
            )
        # Bit-identical results on every stack: ops run on a fixed number of
        # intra-op threads in every process (see simharness.core.determinism).
        # Before the device check: listing devices starts the TF runtime.
        determinism.pin_tensorflow_threads()
        if device:
            _check_device(device)
        #: The most clients one TF call runs (None: no bound).
        self.max_batch = max_batch_size
        self.sums_in_calls = check_bool('sums_in_calls', sums_in_calls)
        #: Partial reductions, their combination and streamed plans (`LeafReductions`).
        self.reductions = LeafReductions(self)
        self._pin = shared_reads.pin if shared_reads is not None else None
        self._device = device
        self._owns_cache = function_cache is None
        self._cache = function_cache if function_cache is not None else FunctionCache(cache_size)
        self._closed = False  # never set: close() releases resources, the next use rebuilds them

    # ------------------------------------------------------------ helpers
    @property
    def device(self) -> Optional[str]:
        """The TF device name its ops are placed on (None: TF's placement)."""
        return self._device

    def can_share(self, other: Any) -> bool:
        """Whether `other`'s values can be used here as they are (no copy): both are
        EagerTF executors of this process on the same device (tensors are immutable)."""
        return isinstance(other, EagerTFExecutor) and other.device == self._device

    def _check_open(self) -> None:
        if self._closed:
            raise ExecutorClosedError('this EagerTFExecutor is closed')

    def device_scope(self):
        """A context manager placing ops on this executor's device."""
        return tf.device(self._device) if self._device else _NullScope()

    # ------------------------------------------------------------ reductions
    async def create_partial_reduction(
        self,
        kind: ReductionKind,
        values: Sequence[object],
        start: int,
        total: int,
        params: Dict[str, object],
    ) -> Partial:
        self._check_open()
        return await self.reductions.create_partial_reduction(kind, values, start, total, params)

    async def create_reduction_result(
        self,
        kind: ReductionKind,
        partials: Sequence[Partial],
        total: int,
        params: Dict[str, Any],
        result_type: T.Type,
    ) -> EagerValue:
        self._check_open()
        return await self.reductions.create_reduction_result(
            kind, partials, total, params, result_type
        )

    async def create_streamed_reductions(
        self,
        nodes: Sequence[PlanNode],
        reductions: Sequence[PlanReduction],
        start: int,
        count: int,
        total: int,
        slice_size: Optional[int] = None,
    ) -> List[Partial]:
        self._check_open()
        return await self.reductions.create_streamed_reductions(
            nodes, reductions, start, count, total, slice_size
        )

    def partial_joiner(
        self, kind: ReductionKind, total: int
    ) -> Optional[Callable[[Partial, Partial], Partial]]:
        return self.reductions.partial_joiner(kind, total)

    def stream_slice(self, slice_size: Optional[int] = None) -> int:
        """Clients per streamed slice (`LeafReductions.stream_slice`)."""
        return self.reductions.stream_slice(slice_size)

    def embed(self, comp: bb.CompiledComputation) -> EmbeddedFunction:
        return self._cache.get_or_embed(comp, self.device_scope)

    @property
    def cache_info(self) -> Dict[str, int]:
        return {'size': len(self._cache), 'max_size': self._cache.max_size}

    def fn_of(self, v: ExecutorValue) -> EmbeddedFunction:
        """The embedded function a function value of this executor holds."""
        fn = v.internal if isinstance(v, EagerValue) else None
        if not isinstance(fn, EmbeddedFunction):
            raise SimharnessTypeError(
                f'value of type {v.type_signature} is not a function embedded in this executor',
                actual=v.type_signature,
            )
        return fn

    def call(self, fn: EmbeddedFunction, arg: Optional[EagerValue]) -> EagerValue:
        ft = fn.type_signature
        if ft.parameter is None:
            if arg is not None:
                raise SimharnessTypeError(
                    f'function {ft} takes no argument, got {arg.type_signature}'
                )
            leaves: List[Any] = []
        else:
            if arg is None:
                raise SimharnessTypeError(f'function {ft} needs an argument of type {ft.parameter}')
            ft.parameter.check_assignable_from(arg.type_signature, 'argument')
            if fn.sequence_params:
                lowered = lowered_leaves(fn, flatten(arg.internal))
                if lowered is not None:
                    with self.device_scope():
                        out = lowered[0].call_flat(plain_leaves(lowered[1]))
                    return EagerValue(pack_result(out, ft.result), ft.result)
            leaves = flatten_arg(arg.internal)
        with self.device_scope():
            out = fn.call_flat(leaves)
        return EagerValue(pack_result(out, ft.result), ft.result)

    # ------------------------------------------------------------ Executor
    async def create_value(self, value: Any, type_spec: Any = None) -> EagerValue:
        self._check_open()
        if isinstance(value, Computation):  # a tf_computation given as is (TFF's raw API)
            hint = type_spec.parameter if isinstance(type_spec, T.FunctionType) else None
            value = value.to_building_block(hint)
        if isinstance(value, bb.CompiledComputation):
            check_type_spec_matches(type_spec, value.type_signature, 'computation')
            return EagerValue(self.embed(value), value.type_signature)
        if isinstance(value, EagerValue):
            check_type_spec_matches(type_spec, value.type_signature, 'value')
            return value
        if isinstance(value, bb.Data) and type_spec is None:
            type_spec = value.type_signature
        if isinstance(value, bb.ComputationBuildingBlock) and not isinstance(value, bb.Data):
            raise SimharnessTypeError(
                f'an EagerTFExecutor embeds compiled TF computations, not a '
                f'{type(value).__name__} building block (of type {value.type_signature}); '
                'put a ReferenceResolvingExecutor (and a FederatingExecutor) above it',
                actual=value.type_signature,
            )
        t = T.to_type(type_spec) if type_spec is not None else T.infer_type(value)
        if isinstance(t, T.FunctionType):
            raise SimharnessTypeError(
                f'a function of type {t} must be given as a compiled '
                f'TF computation, got {type(value).__name__}',
                expected=t,
            )
        with self.device_scope():
            return EagerValue(ingest(value, t, self._pin), t)

    async def create_call(
        self, comp: ExecutorValue, arg: Optional[ExecutorValue] = None
    ) -> EagerValue:
        self._check_open()
        return self.call(self.fn_of(comp), cast(Optional[EagerValue], arg))  # a value of ours

    async def create_struct(self, elements: Any) -> EagerValue:
        self._check_open()
        items = normalize_struct_elements(elements)
        return EagerValue(
            Struct((n, v.internal) for n, v in items),
            T.StructType([(n, v.type_signature) for n, v in items]),
        )

    async def create_selection(
        self, source: ExecutorValue, index: Optional[int] = None, name: Optional[str] = None
    ) -> EagerValue:
        self._check_open()
        index = selection_index(source, index, name)
        source = cast(EagerValue, source)  # a value of this executor
        t = source.type_signature
        if not isinstance(t, T.StructType) or not isinstance(source.internal, Struct):
            raise SimharnessTypeError(f'cannot select from a value of type {t}', actual=t)
        return EagerValue(source.internal[index], t[index])

    def close(self) -> None:
        """Releases the embedded functions of a private cache; the executor stays usable.

        As in TFF, using an executor after `close()` re-initializes it: the
        next computation is embedded again. A cache shared with other
        executors (`function_cache`) is left to its owner.
        """
        if self._owns_cache:
            self._cache.clear()

    # ------------------------------------------------------------ batches
    async def create_values(self, values: Sequence[Any], type_spec: Any) -> List[EagerValue]:
        self._check_open()
        t = T.to_type(type_spec)
        values = list(values)
        if (
            len(values) >= 2
            and T.contains_only_tensors(t)
            and all(l.is_fully_defined and l.dtype != np.dtype(object) for l in T.flatten_type(t))
        ):
            block = self._stack_python(values, t)
            if block is not None:
                return block.values()
        if len(values) >= 2 and isinstance(t, T.SequenceType):
            stacked = stack_sequences(self, values, t)
            if stacked is not None:
                return stacked
        out = []
        with self.device_scope():
            for i, v in enumerate(values):
                try:
                    out.append(EagerValue(ingest(v, t, self._pin), t))
                except SimharnessError as e:
                    raise at_client(e, i)
        return out

    async def create_values_stacked(
        self, leaves: Sequence[np.ndarray], type_spec: Any
    ) -> List[EagerValue]:
        """Embeds n client values given leaf by leaf as arrays [n, ...] (already validated)."""
        self._check_open()
        t = T.to_type(type_spec)
        if isinstance(t, T.SequenceType) and len(leaves) == 1:
            return stacked_sequences(self, leaves[0], t)
        types = T.flatten_type(t)
        if len(leaves) != len(types) or not leaves:
            raise SimharnessTypeError(f'{len(leaves)} stacked leaves do not match {t}')
        n = leaves[0].shape[0]
        with self.device_scope():
            block = ClientBlock(
                t,
                n,
                [
                    ('stacked', fast_tensor(np.asarray(x, dtype=lt.dtype)))
                    for x, lt in zip(leaves, types)
                ],
            )
        return block.values()

    def _stack_python(self, values: List[Any], t: T.Type) -> Optional[ClientBlock]:
        """Stacks Python/numpy client values leaf by leaf (None: use the slow path)."""
        arrays = stack_python_values(values, t)
        if arrays is None:
            return None  # the per-value path gives the precise error
        with self.device_scope():
            return ClientBlock(t, len(values), [('stacked', fast_tensor(a)) for a in arrays])

    async def create_map(
        self,
        fn: ExecutorValue,
        args: Optional[Sequence[ExecutorValue]],
        count: Optional[int] = None,
    ) -> List[EagerValue]:
        self._check_open()
        return self.map_sync(self.fn_of(fn), cast(Optional[Sequence[EagerValue]], args), count)

    def map_sync(
        self, f: EmbeddedFunction, args: Optional[Sequence[EagerValue]], count: Optional[int] = None
    ) -> List[EagerValue]:
        """`f` on each of `args` (or `count` times without arguments). A TensorFlow error
        raised for one of them (a dataset that fails while it is read, a failed
        assertion) says which: its `map_position` is the argument's position (the
        strategy turns it into the client's, `at_client`)."""
        if args and f.reduces_to_end and f.sequence_params:
            _check_finite(f, args)
        try:
            return self._map_sync(f, args, count)
        except tf.errors.OpError as e:
            if not args:
                raise
            raise self._failing_argument(f, list(args), e) from None

    def _failing_argument(
        self, f: EmbeddedFunction, args: List[EagerValue], err: tf.errors.OpError
    ) -> tf.errors.OpError:
        """The error of the first argument of `args` on which `f` fails when run alone
        (a block call's error does not say whose it was), its `map_position` set; `err`
        itself if none fails alone."""
        if len(args) == 1:
            err.map_position = 0  # type: ignore[attr-defined]
            return err
        for i, a in enumerate(args):
            try:
                self.call(f, a)
            except tf.errors.OpError as e:
                e.map_position = i  # type: ignore[attr-defined]
                return e
        return err

    def _map_sync(
        self, f: EmbeddedFunction, args: Optional[Sequence[EagerValue]], count: Optional[int] = None
    ) -> List[EagerValue]:
        if args is None:
            return [self.call(f, None) for _ in range(count or 0)]
        args = list(args)
        pt = f.type_signature.parameter
        if len(args) >= 2 and pt is not None and f.sequence_params:
            return self._map_lowered(f, args)
        if len(args) < 2 or pt is None or not f.batchable():
            return [self.call(f, a) for a in args]
        out: List[EagerValue] = []
        step = self.max_batch or len(args)
        for begin, end, block, lo in runs(args):
            if block is not None and pt.is_assignable_from(block.type):
                for a in range(begin, end, step):
                    b = min(end, a + step)
                    out.extend(
                        self._map_leaves(f, block.sub_leaves(lo + a - begin, lo + b - begin), b - a)
                        or [self.call(f, x) for x in args[a:b]]
                    )
            else:
                out.extend(self._map_loose(f, args[begin:end], pt, step))
        return out

    def _map_lowered(self, f: EmbeddedFunction, args: List[EagerValue]) -> List[EagerValue]:
        """A map of a function over sequences, the sequences' loops lowered where they can be.

        Consecutive clients whose sequences lower the same way and whose
        components have the same shapes run in one batched TF call (as any
        map over tensors); others one call each.
        """
        pt = cast(T.Type, f.type_signature.parameter)
        rows: List[Optional[Tuple[EmbeddedFunction, List[Any]]]] = []
        checked_types: List[T.Type] = []  # argument types known to fit (zipped rows share one)
        for a in args:
            at = a.type_signature
            if not any(at is c for c in checked_types):
                pt.check_assignable_from(at, 'argument')
                checked_types.append(at)
            rows.append(lowered_leaves(f, flatten(a.internal)))
        out: List[EagerValue] = []
        step = self.max_batch or len(args)
        i = 0
        while i < len(args):
            low = rows[i]
            if low is None:
                out.append(self.call(f, args[i]))
                i += 1
                continue
            j = i + 1
            while (
                j < len(args)
                and j - i < step
                and rows[j] is not None
                and cast(Tuple, rows[j])[0] is low[0]
            ):
                j += 1
            lf = low[0]
            group = [cast(Tuple, r)[1] for r in rows[i:j]]
            # A function too large to unroll its loops (a recurrent model's update) runs one
            # call per client: its batched form costs more to trace and optimize (~0.5-1 s
            # for a character GRU, in whichever round two clients first have the same
            # number of batches) than the calls it saves; the same bits either way.
            leaves = (
                stack_columns(group, self.device_scope)
                if (j - i >= 2 and lf.batchable() and f.unrolls_loops)
                else None
            )
            res = self._map_leaves(lf, leaves, j - i) if leaves is not None else None
            if res is None:
                res = []
                for r in group:
                    with self.device_scope():
                        o = lf.call_flat(plain_leaves(r))
                    res.append(
                        EagerValue(pack_result(o, f.type_signature.result), f.type_signature.result)
                    )
            out.extend(res)
            i = j
        return out

    def _map_loose(
        self, f: EmbeddedFunction, args: List[EagerValue], pt: T.Type, step: int
    ) -> List[EagerValue]:
        out: List[EagerValue] = []
        for a in range(0, len(args), step):
            chunk = args[a : a + step]
            leaves = self.block_leaves(chunk, pt) if len(chunk) >= 2 else None
            res = self._map_leaves(f, leaves, len(chunk)) if leaves is not None else None
            out.extend(res if res is not None else [self.call(f, x) for x in chunk])
        return out

    def _map_leaves(
        self, f: EmbeddedFunction, leaves: List[Tuple[str, Any]], n: int
    ) -> Optional[List[EagerValue]]:
        if not any(k == 'stacked' for k, _ in leaves):
            return None
        mask = tuple(k == 'shared' for k, _ in leaves)
        with self.device_scope():
            res = f.call_batched(
                mask,
                [x for k, x in leaves if k == 'shared'],
                [x for k, x in leaves if k == 'stacked'],
                n,
            )
        return ClientBlock(f.type_signature.result, n, [('stacked', o) for o in res]).values()

    def block_leaves(self, args: List[EagerValue], pt: T.Type) -> Optional[List[Tuple[str, Any]]]:
        """Stacks arbitrary same-shaped client values (slow path of a batched map)."""
        for a in args:
            pt.check_assignable_from(a.type_signature, 'argument')
        per_client = [flatten(a.internal) for a in args]
        out = []
        for i in range(len(per_client[0])):
            col = [pc[i] for pc in per_client]
            if all(c is col[0] for c in col):
                out.append(('shared', col[0]))
            elif all(isinstance(c, tf.Tensor) and c.shape == col[0].shape for c in col):
                with self.device_scope():
                    out.append(('stacked', tf.stack(col)))
            else:
                return None
        return out

    async def create_structs(
        self, rows: Sequence[Sequence[ExecutorValue]], names: Sequence[Optional[str]]
    ) -> List[EagerValue]:
        self._check_open()
        rows = [list(r) for r in rows]
        out = self._zip_blocks(rows, names) if len(rows) >= 2 and rows[0] else None
        if out is not None:
            return out
        if rows and rows[0] and all(len(r) == len(rows[0]) for r in rows):
            first = [v.type_signature for v in rows[0]]
            if all(all(v.type_signature is t for v, t in zip(r, first)) for r in rows):
                t = T.StructType(list(zip(names, first)))  # one type for all rows
                return [
                    EagerValue(Struct(zip(names, [cast(EagerValue, v).internal for v in r])), t)
                    for r in rows
                ]
        return [await self.create_struct(list(zip(names, row))) for row in rows]

    def _zip_blocks(
        self, rows: Sequence[Sequence[Any]], names: Sequence[Optional[str]]
    ) -> Optional[List[EagerValue]]:
        """Zips columns of block values run by run (None when they are not block-aligned)."""
        cols = [cast(List[EagerValue], [r[j] for r in rows]) for j in range(len(rows[0]))]
        types = [c[0].type_signature for c in cols]
        t = T.StructType(list(zip(names, types)))
        shared: Dict[int, List[Tuple[str, Any]]] = {}
        col_runs: Dict[int, List[Tuple[int, int, Optional[ClientBlock], int]]] = {}
        bounds = None
        for j, col in enumerate(cols):
            if all(c is col[0] for c in col) and not isinstance(
                col[0].internal, (tf.data.Dataset, TensorBatches, EmbeddedFunction)
            ):
                shared[j] = [('shared', x) for x in flatten(col[0].internal)]
                continue
            rs = runs(col)
            if any(block is None for _, _, block, _ in rs):
                return None
            b = [(begin, end) for begin, end, _, _ in rs]
            if bounds is not None and b != bounds:
                return None
            bounds = b
            col_runs[j] = rs
        if bounds is None:
            return None  # every column shared: nothing per client to stack
        out: List[EagerValue] = []
        for k, (begin, end) in enumerate(bounds):
            leaves: List[Tuple[str, Any]] = []
            for j in range(len(cols)):
                if j in shared:
                    leaves.extend(shared[j])
                else:
                    _, _, block, lo = col_runs[j][k]
                    # columns with a run outside a block were rejected above
                    leaves.extend(cast(ClientBlock, block).sub_leaves(lo, lo + end - begin))
            out.extend(ClientBlock(t, end - begin, leaves).values())
        return out

    async def create_selections(
        self, sources: Sequence[ExecutorValue], index: int
    ) -> List[EagerValue]:
        self._check_open()
        sources = list(sources)
        out: List[EagerValue] = []
        for begin, end, block, lo in runs(sources):
            if block is not None and isinstance(block.type, T.StructType):
                counts = [len(T.flatten_type(e)) for e in block.type]
                first = sum(counts[:index])
                leaves = block.sub_leaves(lo, lo + end - begin)[first : first + counts[index]]
                out.extend(ClientBlock(block.type[index], end - begin, leaves).values())
            else:
                out.extend([await self.create_selection(s, index) for s in sources[begin:end]])
        return out

    async def compute_many(self, values: Sequence[ExecutorValue]) -> List[Any]:
        values = cast(List[EagerValue], list(values))  # values of this executor
        out: List[Any] = []
        for begin, end, block, lo in runs(values):
            if block is None:
                out.append(numpy_tree(values[begin].internal))
                continue
            npl = block.numpy_leaves()
            out.extend(
                pack_as(block.type, [x if k == 'shared' else x[i] for k, x in npl])
                for i in range(lo, lo + end - begin)
            )
        return out

    # ------------------------------------------------------------ sequences
    async def create_sequence_op(
        self, op: str, values: Sequence[ExecutorValue], params: Dict[str, Any]
    ) -> List[EagerValue]:
        self._check_open()
        out = []
        with self.device_scope():
            for v in cast(Sequence[EagerValue], values):  # values of this executor
                out.append(sequence_op(self, op, v, params))
        return out

    async def create_select(
        self,
        keys: Sequence[ExecutorValue],
        server_value: ExecutorValue,
        select_fn: ExecutorValue,
        element_type: T.Type,
    ) -> List[EagerValue]:
        self._check_open()
        fn = self.fn_of(select_fn)
        return select_datasets(
            self,
            cast(Sequence[EagerValue], keys),  # values of this executor
            cast(EagerValue, server_value),
            fn,
            element_type,
        )


class _NullScope:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
