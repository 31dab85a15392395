"""A weighted sum's products made by numpy as the rows are folded, with TensorFlow's bits.

TFF's weighted mean multiplies each client's update by its weight
(`aggregators.mean._mul`, in every `tff.learning` FedAvg round), then sums the
products. Run as a map then a fold, a worker writes every client's products
(16 MB for 48 clients of the reference MLP) and reads them back; folded as they
are made (`stream_eval.scaled_sum`, `fold_rows_into`'s `scale`), each product
is added while it is in cache. The map then the fold, 3.0-3.5 ms for 52 clients
of the reference MLP on the development machine; fused, 2.0-2.2 ms.

What makes the products TensorFlow's is the floating-point mode: TensorFlow runs
its kernels (XLA's too) with denormals flushed to zero (x86's MXCSR FTZ and DAZ
bits), numpy without. `denormals_flushed()` sets both bits around numpy's
multiplies, which then round and flush as TF's kernels do (IEEE multiply,
round to nearest even: the same result per element); the additions stay outside
it, as the fold of TF's products adds them. Only where that mode can be set and
is checked to work (`FLUSH_AVAILABLE`: x86-64 Linux with glibc); elsewhere the
map and the fold run as before.

`scaling_of` recognizes the graphs this applies to: every result a parameter
times one per-client parameter (or its cast to the result's dtype), each result
rounded once -- ``Placeholder``, ``Identity``, ``IdentityN``, ``NoOp``, ``Mul``
of float32/float64, ``Cast`` to float32/float64 from float32, float64, int32 or
int64, nothing else (TF's graph runtime reorders longer chains, and may drop a
cast pair or a multiply by one: other roundings, other flushes).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform
import sys
import threading
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

#: The dtypes this module multiplies and casts to; the dtypes it casts from.
_FLOAT_DTYPES = frozenset({np.dtype(np.float32), np.dtype(np.float64)})
_CAST_SOURCES = frozenset(
    {np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.int32), np.dtype(np.int64)}
)
_PASS_OPS = frozenset({'Identity', 'IdentityN'})
#: TF's `DataType` enum (types.proto) of those dtypes.
_DATA_TYPES: Dict[int, np.dtype] = {
    1: np.dtype(np.float32),
    2: np.dtype(np.float64),
    3: np.dtype(np.int32),
    9: np.dtype(np.int64),
}
#: x86's MXCSR bits: flush results to zero (FTZ), read denormal inputs as zero (DAZ).
_FTZ_DAZ = 0x8040


class _FEnv(ctypes.Structure):
    """glibc's x86-64 ``fenv_t``: the x87 environment (28 bytes), then MXCSR."""

    _fields_ = [('x87', ctypes.c_uint8 * 28), ('mxcsr', ctypes.c_uint32)]


def _libm() -> Optional[ctypes.CDLL]:
    if sys.platform != 'linux' or platform.machine() not in ('x86_64', 'AMD64'):
        return None
    name = ctypes.util.find_library('m')
    if name is None or ctypes.sizeof(_FEnv) != 32:
        return None
    try:
        return ctypes.CDLL(name)
    except OSError:
        return None


_LIBM = _libm()


class _Flushed(threading.local):
    """The context of `denormals_flushed`: this thread's environment, kept to restore."""

    def __init__(self) -> None:
        self.saved = _FEnv()
        self.flushed = _FEnv()
        self._saved_ref = ctypes.byref(self.saved)
        self._flushed_ref = ctypes.byref(self.flushed)
        self._saved_at = ctypes.addressof(self.saved)
        self._flushed_at = ctypes.addressof(self.flushed)
        self.depth = 0

    def __enter__(self) -> None:
        if _LIBM is None:
            raise RuntimeError('denormals cannot be flushed on this platform')
        if self.depth == 0:
            if _LIBM.fegetenv(self._saved_ref) != 0:
                raise RuntimeError('fegetenv failed')
            ctypes.memmove(self._flushed_at, self._saved_at, ctypes.sizeof(_FEnv))
            self.flushed.mxcsr |= _FTZ_DAZ
            _LIBM.fesetenv(self._flushed_ref)
        self.depth += 1

    def __exit__(self, *exc: object) -> None:
        self.depth -= 1
        if self.depth == 0:
            _LIBM.fesetenv(self._saved_ref)  # type: ignore[union-attr]


_FLUSHED = _Flushed()


def denormals_flushed() -> _Flushed:
    """A context that runs its block with this thread's denormals flushed to zero (FTZ
    and DAZ), as TensorFlow runs its kernels; the previous mode comes back after."""
    return _FLUSHED


def _flush_works() -> bool:
    """Whether `denormals_flushed` makes numpy flush (and read subnormals as zero) here."""
    if _LIBM is None:
        return False
    try:
        x = np.array([2.0**-130, 2.0**-60, 1.0], np.float32)
        w = np.float32(2.0**-70)
        plain = x * np.float32(1.0)
        with denormals_flushed():
            flushed = x * w
            daz = x * np.float32(1.0)
        after = x * np.float32(1.0)
    except (RuntimeError, OSError):
        return False
    return (
        bool(plain[0] != 0)  # numpy keeps subnormals outside the mode
        and flushed.tolist() == [0.0, 0.0, 2.0**-70]  # FTZ: 2**-130 is a subnormal result
        and daz.tolist() == [0.0, 2.0**-60, 1.0]  # DAZ: a subnormal input reads as zero
        and bool(after[0] != 0)  # the mode came back
    )


#: True where numpy can run with TensorFlow's floating-point mode (checked at import).
FLUSH_AVAILABLE = _flush_works()


class _Node(NamedTuple):
    op: str
    inputs: Tuple[str, ...]  # 'node:k' names of data inputs (control inputs dropped)
    dtype: Optional[np.dtype]  # Mul's T, Cast's DstT


class Scaling(NamedTuple):
    """Result j is parameter leaf ``factors[j]`` times parameter leaf ``weight``."""

    factors: Tuple[int, ...]
    weight: int


def _tensor_name(name: str) -> str:
    return name if ':' in name else name + ':0'


def _nodes_of(graph_def: object) -> Optional[Dict[str, _Node]]:
    """The graph's nodes, or None when one is not of the ops and dtypes above."""

    def dtype(attr: object) -> Optional[np.dtype]:
        code = getattr(attr, 'type', None)  # an AttrValue's DataType
        return _DATA_TYPES.get(code) if isinstance(code, int) else None

    nodes: Dict[str, _Node] = {}
    for n in graph_def.node:  # type: ignore[attr-defined]
        data = tuple(_tensor_name(i) for i in n.input if not i.startswith('^'))
        if n.op in ('Placeholder', 'NoOp') or n.op in _PASS_OPS:
            node = _Node(n.op, data, None)
        elif n.op == 'Mul' and dtype(n.attr['T']) in _FLOAT_DTYPES:
            node = _Node(n.op, data, dtype(n.attr['T']))
        elif (
            n.op == 'Cast'
            and dtype(n.attr['SrcT']) in _CAST_SOURCES
            and dtype(n.attr['DstT']) in _FLOAT_DTYPES
        ):
            node = _Node(n.op, data, dtype(n.attr['DstT']))
        else:
            return None
        nodes[n.name] = node
    return nodes


def _made_by(nodes: Dict[str, _Node], name: str) -> str:
    """The tensor that tensor `name` passes on, through Identity ops."""
    name = _tensor_name(name)
    node = nodes[name.split(':')[0]]
    while node.op in _PASS_OPS:
        name = node.inputs[int(name.split(':')[1])]
        node = nodes[name.split(':')[0]]
    return name


def scaling_of(
    graph_def: object, input_names: Sequence[str], output_names: Sequence[str]
) -> Optional[Scaling]:
    """For a graph whose every result is a parameter times one other parameter (or its
    cast to the result's dtype) -- TFF's ``value * tf.cast(weight, value.dtype)`` --,
    the positions of each result's factor and of the weight among the parameters; else
    None (and None wherever `FLUSH_AVAILABLE` is False)."""
    if not FLUSH_AVAILABLE or graph_def.library.function:  # type: ignore[attr-defined]
        return None
    nodes = _nodes_of(graph_def)
    if nodes is None:
        return None
    inputs = [_tensor_name(i) for i in input_names]
    outputs = [_tensor_name(o) for o in output_names]
    if not outputs or any(i.split(':')[0] not in nodes for i in inputs + outputs):
        return None
    position = {name: j for j, name in enumerate(inputs)}
    factors: List[int] = []
    weight: Optional[int] = None
    for out in outputs:
        node = nodes[_made_by(nodes, out).split(':')[0]]
        if node.op != 'Mul' or len(node.inputs) != 2:
            return None
        found: List[Tuple[bool, int]] = []  # (cast, parameter position)
        for i in node.inputs:
            src = _made_by(nodes, i)
            src_node = nodes[src.split(':')[0]]
            if src_node.op == 'Cast' and src_node.dtype == node.dtype:
                src = _made_by(nodes, src_node.inputs[0])
                found.append((True, position.get(src, -1)))
            elif src_node.op == 'Placeholder':
                found.append((False, position.get(src, -1)))
            else:
                return None
        (cast_a, a), (cast_b, b) = found
        if cast_a or (not cast_b and weight is not None and a == weight):
            (cast_a, a), (cast_b, b) = (cast_b, b), (cast_a, a)  # the weight second
        if cast_a or a < 0 or b < 0 or a == b or b != (b if weight is None else weight):
            return None
        weight = b
        factors.append(a)
    if weight is None or weight in factors:
        return None
    return Scaling(tuple(factors), weight)
