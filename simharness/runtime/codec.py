"""The codec of the worker seam: a message becomes a small header plus raw tensor buffers.

```
encode(obj) -> (header: bytes, buffers: [ndarray, ...])      msgpack header; big numeric
decode(header, buffers) -> obj                                arrays travel as raw buffers
```

Only a closed set of kinds can be encoded; anything else (a user's class, a
function, a lock, ...) is refused with `CodecError`. Decoding only builds
values of the kinds below from msgpack data, so bytes from a peer can never
make it run code or import a module:

- plain data: None, bool, int (64-bit), float, str, bytes, list, tuple, dict;
- numpy dtypes, and numpy arrays of any memcpy-able dtype (bool, ints, floats, complex,
  float16, bfloat16 and the other ml_dtypes) and numpy scalars; arrays of
  strings/bytes (TF's `tf.string`) travel as lists of bytes in the header;
- the project's own message parts: `Struct`, `Partial`, `Ref`, `RefRange`,
  `DatasetBlob`, `DatasetRecipe`, types (`simharness.core.types`), `CompiledComputation`
  (a serialized graph), `Data` (a URI and a type: external data the
  receiving executor reads itself), `ErrorRecord`, `Packed` (any of these, encoded
  beforehand), and the protocol dataclasses
  registered with `register_message` (the requests and responses, the nodes
  and reductions of a stream plan: `runtime.stream_plan`), by their fields.

Numeric arrays of at least `BUFFER_MIN_BYTES` (and large `bytes`) are
returned as separate buffers, so that a transport can move them through
shared memory (local), chunks (gRPC) or object refs (Ray) without copying
them into the header.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any, Dict, List, Sequence, Tuple

import msgpack
import numpy as np

from simharness.core import types as T
from simharness.core.building_blocks import CompiledComputation, Data, TFGraph
from simharness.core.reduction import HeadRows, Partial
from simharness.core.sequences import TensorBatches
from simharness.core.struct import struct_like
from simharness.core.structure import Struct
from simharness.errors import SimharnessTypeError, SimharnessValueError

#: Numeric arrays at least this big travel as buffers, smaller ones inline.
BUFFER_MIN_BYTES = 1024
#: `bytes` values at least this big (serialized graphs) travel as buffers.
BYTES_BUFFER_MIN = 1 << 16

# Extension codes (msgpack ext types 1..127).
_ARRAY = 1  # [dtype, shape, buffer index]
_INLINE = 2  # [dtype, shape, raw bytes]
_STRARRAY = 3  # [kind, shape, flat list of bytes/str]
_SCALAR = 4  # [dtype, raw bytes]
_TUPLE = 5  # [items]
_STRUCT = 6  # [names, values]
_PARTIAL = 7  # [start, stop, head, [[level, index, value], ...], open_chunk, open_acc]
_REF = 8  # id
_REFRANGE = 9  # [start, count]
_TYPE = 10  # see _enc_type
_COMPUTATION = 11  # [graph_def, input names, output names, type, name]
_DATASET = 12  # [graph, element type]
_BYTESBUF = 13  # buffer index of a big bytes value
_DICT = 14  # [[key, value], ...] (non-str keys)
_MESSAGE = 15  # [message name, field values]
_DTYPE = 16  # a numpy dtype: its token
_DATA = 17  # [uri, type]: a Data building block (external data, read where it lands)
_PACKED = 18  # a value encoded beforehand (`Packed`): its msgpack bytes
_ROWS = 19  # [template, [stacked arrays]]: a partial's head values, one array per leaf


class CodecError(SimharnessTypeError):
    """A value cannot cross the worker seam (or a message is malformed)."""


@dataclasses.dataclass(frozen=True)
class Ref:
    """A reference to a value stored in a worker session, by id."""

    id: int


@dataclasses.dataclass(frozen=True)
class RefRange:
    """References to the values with ids ``start .. start + count - 1``, as a list."""

    start: int
    count: int


@dataclasses.dataclass(frozen=True)
class DatasetBlob:
    """A `tf.data.Dataset` shipped as its serialized graph (no Python code)."""

    graph: bytes
    element_type: Any  # simharness Type of the elements


#: What msgpack packs by itself (`default` is not asked again for what it returns).
_NATIVE = frozenset({type(None), bool, int, float, str, bytes, list, dict})


class Packed:
    """A value encoded once, for several messages (a broadcast to many workers).

    Its encoding numbers its buffers from 0: a message whose first buffers
    are this value's (the first argument of a request) carries the bytes as
    they are; anywhere else the value is encoded again. Either way the
    receiver decodes the value itself.
    """

    __slots__ = ('value', 'payload', 'buffers')

    def __init__(self, value: Any):
        self.value = value
        self.payload, self.buffers = encode(value)


_MESSAGES: Dict[str, type] = {}
#: The field names of each registered message class, in order.
_MESSAGE_FIELDS: Dict[type, Tuple[str, ...]] = {}


def register_message(cls: type) -> type:
    """Registers a dataclass as a message kind the codec may carry (by name)."""
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f'{cls!r} is not a dataclass')
    _MESSAGES[cls.__name__] = cls
    _MESSAGE_FIELDS[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return cls


# In-memory client datasets travel as their arrays and how they are cut.
register_message(TensorBatches)


@register_message
@dataclasses.dataclass(eq=False)
class DatasetRecipe:
    """A client dataset made by a traced pipeline, as its recipe: the client's arrays and
    the pipeline's read function (`simharness.core.slices_pipeline.SlicesPipeline`).

    ``read`` is a `CompiledComputation` (a serialized graph, no Python) from the
    arrays to the dataset's elements, read in one pass: each element's leading size
    per leaf ``[elements, leaves]``, then each leaf's rows concatenated (leaves in
    ``tf.nest`` order of the element spec). A message carries it once per pipeline:
    the recipes after the first of the same `key` come with ``read`` None, and the
    receiver keeps the functions it imported by `key`.
    """

    key: str
    read: Any  # CompiledComputation, or None when sent before under `key`
    element_type: Any  # simharness Type of the elements
    leaves: List[Any]  # the client's arrays: ``from_tensor_slices`` of them, packed


def dtype_token(dt: np.dtype) -> str:
    if dt.kind in 'biufc':
        return dt.str
    if dt.kind == 'V' and dt.names is None and not dt.shape:
        return dt.name  # ml_dtypes (bfloat16, float8_*, int4 ...): their name
    raise CodecError(f'arrays of dtype {dt} cannot cross the worker seam')


def dtype_from(token: str) -> np.dtype:
    try:
        return np.dtype(token)
    except TypeError:
        import ml_dtypes

        try:
            return np.dtype(getattr(ml_dtypes, token))
        except AttributeError:
            raise CodecError(f'unknown dtype {token!r} in a message') from None


def _is_string_array(a: np.ndarray) -> bool:
    return a.dtype.kind in 'SU' or a.dtype == object


class _Encoder:
    """Packs one message at a time; kept per thread (`_encoder`) and reused.

    Every extension value's payload is packed on its own (msgpack's ext types
    carry bytes), one nesting level deeper: one `msgpack.Packer` per level,
    made once and reused (`msgpack.packb` builds a packer per call, which was
    half of the encoding time of a worker's answer of 41 extension values).
    """

    def __init__(self) -> None:
        self.buffers: List[np.ndarray] = []
        self.busy = False
        self._depth = 0
        self._packers: List[Any] = []

    def pack(self, obj: Any) -> bytes:
        d = self._depth
        if d == len(self._packers):
            self._packers.append(
                msgpack.Packer(default=self.default, use_bin_type=True, strict_types=True)
            )
        self._depth = d + 1
        try:
            # A packer left by an error resets itself (msgpack clears its buffer).
            return self._packers[d].pack(obj)
        except CodecError:
            raise
        except (OverflowError, ValueError, TypeError) as e:
            raise CodecError(f'cannot encode a message part: {e}') from None
        finally:
            self._depth = d

    def ext(self, code: int, payload: Any) -> msgpack.ExtType:
        # Our codes and packed bytes: `ExtType`'s own checks (a Python `__new__`) skipped.
        return _new_ext(msgpack.ExtType, (code, self.pack(payload)))

    def array(self, a: np.ndarray) -> msgpack.ExtType:
        if _is_string_array(a):
            flat = a.reshape(-1).tolist()
            for x in flat:
                if not isinstance(x, (bytes, str)):
                    raise CodecError(
                        f'an object array holds a {type(x).__name__}; only arrays of '
                        'numbers, bytes or str can cross the worker seam'
                    )
            return self.ext(_STRARRAY, [a.dtype.kind, list(a.shape), flat])
        token = dtype_token(a.dtype)
        if a.nbytes >= BUFFER_MIN_BYTES:
            self.buffers.append(a)
            return self.ext(_ARRAY, [token, list(a.shape), len(self.buffers) - 1])
        return self.ext(_INLINE, [token, list(a.shape), np.ascontiguousarray(a).tobytes()])

    def default(self, obj: Any) -> Any:
        if type(obj) is np.ndarray:
            return self.array(obj)
        fields = _MESSAGE_FIELDS.get(type(obj))  # a registered message (exactly its class)
        if fields is not None:
            return self.ext(_MESSAGE, [type(obj).__name__, [getattr(obj, f) for f in fields]])
        if isinstance(obj, np.ndarray):
            return self.array(obj)
        if isinstance(obj, np.generic):
            if isinstance(obj, np.bytes_):
                return bytes(obj)
            if isinstance(obj, np.str_):
                return str(obj)
            return self.ext(_SCALAR, [dtype_token(obj.dtype), obj.tobytes()])
        if isinstance(obj, np.dtype):
            return self.ext(_DTYPE, 'object' if obj == np.dtype(object) else dtype_token(obj))
        if isinstance(obj, Struct):
            return self.ext(_STRUCT, [list(obj.names), list(obj)])
        if isinstance(obj, Partial):
            nodes = [[lvl, idx, v] for (lvl, idx), v in sorted(obj.nodes.items())]
            head: Any = obj.head
            if isinstance(head, HeadRows):  # decoded from a message: as it came
                head = self.ext(_ROWS, [head.template, head.stacked])
            else:
                head = list(head)
                rows = _stack_rows(head) if len(head) > 1 else None
                if rows is not None:
                    head = self.ext(_ROWS, list(rows))
            return self.ext(
                _PARTIAL, [obj.start, obj.stop, head, nodes, obj.open_chunk, obj.open_acc]
            )
        if isinstance(obj, Ref):
            return self.ext(_REF, obj.id)
        if isinstance(obj, RefRange):
            return self.ext(_REFRANGE, [obj.start, obj.count])
        if isinstance(obj, T.Type):
            held = _TYPE_EXTS.get(id(obj))
            if held is None or held[0] is not obj:
                if len(_TYPE_EXTS) >= _TYPE_EXTS_MAX:
                    _TYPE_EXTS.clear()
                held = _TYPE_EXTS[id(obj)] = (obj, self.ext(_TYPE, _enc_type(obj)))
            return held[1]
        if isinstance(obj, Packed):
            if self.buffers:  # its buffer numbers would be off: encode it here
                v = obj.value
                return v if type(v) in _NATIVE else self.default(v)
            self.buffers.extend(obj.buffers)
            return msgpack.ExtType(_PACKED, obj.payload)
        if isinstance(obj, DatasetBlob):
            return self.ext(_DATASET, [self.maybe_buffer(obj.graph), obj.element_type])
        if isinstance(obj, Data):
            return self.ext(_DATA, [obj.uri, obj.type_signature])
        if isinstance(obj, CompiledComputation):
            g = obj.graph
            return self.ext(
                _COMPUTATION,
                [
                    self.maybe_buffer(g.graph_def),
                    list(g.input_names),
                    list(g.output_names),
                    obj.type_signature,
                    obj.name,
                ],
            )
        if isinstance(obj, tuple) and not hasattr(type(obj), '_fields'):
            return self.ext(_TUPLE, list(obj))
        if isinstance(obj, dict):  # OrderedDict and other dict subclasses: as a dict
            return self.ext(_DICT, [[k, v] for k, v in obj.items()])
        if dataclasses.is_dataclass(obj) and _MESSAGES.get(type(obj).__name__) is type(obj):
            return self.ext(
                _MESSAGE,
                [type(obj).__name__, [getattr(obj, f.name) for f in dataclasses.fields(obj)]],
            )
        # Subclasses of plain types (IntEnum, a str subclass, ...): their plain value.
        if isinstance(obj, bool):
            return bool(obj)
        if isinstance(obj, int):
            return int(obj)
        if isinstance(obj, float):
            return float(obj)
        if isinstance(obj, str):
            return str(obj)
        if isinstance(obj, list):
            return list(obj)
        raise CodecError(
            f'a value of type {type(obj).__module__}.{type(obj).__qualname__} cannot cross the '
            'worker seam: only numbers, strings, bytes, lists, tuples, dicts, numpy arrays and '
            "simharness' own values (Struct, types, computations) can"
        )

    def maybe_buffer(self, b: bytes) -> Any:
        if len(b) >= BYTES_BUFFER_MIN:
            self.buffers.append(np.frombuffer(b, np.uint8))
            return msgpack.ExtType(_BYTESBUF, msgpack.packb(len(self.buffers) - 1))
        return b


#: Each type's extension value, kept by the type object (which it holds, so that its id
#: is not reused): a round's requests carry the same types to every worker (a plan's
#: value types, a broadcast's), encoded once instead of once per request. Types are
#: immutable; the table is emptied when full.
_TYPE_EXTS: Dict[int, Tuple[T.Type, msgpack.ExtType]] = {}
_TYPE_EXTS_MAX = 4096


def _enc_type(t: T.Type) -> list:
    if isinstance(t, T.TensorType):
        return [
            'T',
            dtype_token(np.dtype(t.dtype)) if np.dtype(t.dtype).kind != 'O' else 'string',
            None if t.shape is None else list(t.shape),
        ]
    if isinstance(t, T.StructType):
        container = None if t.container is None else t.container.__qualname__
        return ['S', list(t.names), [_enc_type(e) for e in t], container]
    if isinstance(t, T.SequenceType):
        return ['Q', _enc_type(t.element)]
    if isinstance(t, T.FunctionType):
        return ['F', None if t.parameter is None else _enc_type(t.parameter), _enc_type(t.result)]
    if isinstance(t, T.FederatedType):
        return ['D', _enc_type(t.member), t.placement.uri, t.all_equal]
    if isinstance(t, T.PlacementType):
        return ['P']
    raise CodecError(f'type {t!r} cannot cross the worker seam')


def _dec_type(x: list) -> T.Type:
    kind = x[0]
    if kind == 'T':
        dtype = np.dtype(object) if x[1] == 'string' else dtype_from(x[1])
        return T.TensorType(dtype, None if x[2] is None else tuple(x[2]))
    if kind == 'S':
        # The Python container (a user class) stays on the sending side.
        return T.StructType(list(zip(x[1], [_dec_type(e) for e in x[2]])))
    if kind == 'Q':
        return T.SequenceType(_dec_type(x[1]))
    if kind == 'F':
        return T.FunctionType(None if x[1] is None else _dec_type(x[1]), _dec_type(x[2]))
    if kind == 'D':
        return T.FederatedType(_dec_type(x[1]), T.placement_from_uri(x[2]), x[3])
    if kind == 'P':
        return T.PlacementType()
    raise CodecError(f'unknown type kind {kind!r} in a message')


class _Decoder:
    def __init__(self, buffers: Sequence[Any]):
        self.buffers = buffers

    def unpack(self, data: bytes) -> Any:
        return msgpack.unpackb(
            data, ext_hook=self.ext_hook, raw=False, strict_map_key=False, use_list=True
        )

    def buffer(self, i: int) -> Any:
        try:
            return self.buffers[i]
        except (IndexError, TypeError):
            raise CodecError(
                f'a message names buffer {i}, but {len(self.buffers)} came with it'
            ) from None

    def ext_hook(self, code: int, data: bytes) -> Any:
        p = self.unpack(data)
        if code == _ARRAY:
            dt = dtype_from(p[0])
            buf = self.buffer(p[2])
            arr = (
                buf
                if isinstance(buf, np.ndarray) and buf.dtype == dt
                else np.frombuffer(buf, dtype=dt)
            )
            return arr.reshape(p[1])
        if code == _INLINE:
            return np.frombuffer(p[2], dtype=dtype_from(p[0])).reshape(p[1])
        if code == _STRARRAY:
            kind, shape, flat = p
            if kind == 'O':
                out = np.empty(len(flat), dtype=object)
                out[:] = flat
                return out.reshape(shape)
            return (
                np.array(flat, dtype=kind).reshape(shape) if flat else np.zeros(shape, dtype=kind)
            )
        if code == _SCALAR:
            return np.frombuffer(p[1], dtype=dtype_from(p[0]))[0]
        if code == _TUPLE:
            return tuple(p)
        if code == _DTYPE:
            return np.dtype(object) if p == 'object' else dtype_from(p)
        if code == _STRUCT:
            return Struct(zip(p[0], p[1]))
        if code == _PARTIAL:
            head = p[2] if isinstance(p[2], HeadRows) else list(p[2])
            return Partial(p[0], p[1], head, {(a, b): v for a, b, v in p[3]}, p[4], p[5])
        if code == _ROWS:
            if not isinstance(p, list) or len(p) != 2 or not isinstance(p[1], list):
                raise CodecError('malformed head rows in a message: expected [template, arrays]')
            try:
                return HeadRows(p[0], p[1])
            except (SimharnessValueError, TypeError, ValueError) as e:
                raise CodecError(f'malformed head rows in a message: {e}') from None
        if code == _REF:
            return Ref(p)
        if code == _REFRANGE:
            return RefRange(p[0], p[1])
        if code == _TYPE:
            return _dec_type(p)
        if code == _PACKED:
            return p
        if code == _BYTESBUF:
            return bytes(memoryview(self.buffer(p)).cast('B'))
        if code == _DATASET:
            return DatasetBlob(p[0], p[1])
        if code == _COMPUTATION:
            return CompiledComputation(TFGraph(p[0], p[1], p[2]), p[3], p[4])
        if code == _DATA:
            if not isinstance(p[0], str) or not isinstance(p[1], T.Type):
                raise CodecError('malformed Data reference in a message')
            return Data(p[0], p[1])
        if code == _DICT:
            return {k: v for k, v in p}
        if code == _MESSAGE:
            cls = _MESSAGES.get(p[0])
            if cls is None:
                raise CodecError(f'unknown message kind {p[0]!r}')
            return cls(*p[1])
        raise CodecError(f'unknown extension code {code} in a message')


# ---------------------------------------------------------------- a partial's head rows
# The head of a `Partial` (the raw values of the clients of a chunk begun in an earlier
# block) holds up to 15 values of one structure; with many small blocks (16 workers of 6
# clients) most clients' values travel so. They go as one array per leaf, rows stacked,
# instead of one extension value per leaf and client, so the receiver decodes each leaf once
# and gets them as `core.reduction.HeadRows` (value k built on demand from row views; folded
# row by row without being built: `add_many_trees`). A worker's head values
# are rows of its summed call's outputs: their stack is a view of them, not a copy
# (`_column`); a fresh copy of megabytes costs page faults on every round.


def _stack_rows(values: List[Any]) -> Any:
    """``(template, stacked)`` of values that are trees of the same structure (`Struct`,
    list, tuple) with numeric leaves (arrays, numpy scalars) alike in kind, dtype and shape:
    the template has each leaf's index in its place (``-1 - index`` for a scalar); else None
    (the values travel one by one)."""
    first: List[Any] = []
    template = _template(values[0], first)
    if template is None or not first:
        return None
    columns = [[a] for a in first]
    for v in values[1:]:
        leaves: List[Any] = []
        if _template(v, leaves) != template:
            return None
        for col, a in zip(columns, leaves):
            if a.dtype != col[0].dtype or a.shape != col[0].shape:
                return None
            col.append(a)
    return template, [_column(col) for col in columns]


def _column(arrays: List[Any]) -> np.ndarray:
    """The arrays stacked: a view when they are consecutive rows of one buffer, else a copy."""
    first = arrays[0]
    if type(first) is np.ndarray and first.flags.c_contiguous and first.base is not None:
        step = first.nbytes
        start = first.__array_interface__['data'][0]
        if step and all(
            type(a) is np.ndarray
            and a.base is first.base
            and a.flags.c_contiguous
            and a.__array_interface__['data'][0] == start + k * step
            for k, a in enumerate(arrays)
        ):
            return np.lib.stride_tricks.as_strided(
                first,
                shape=(len(arrays),) + first.shape,
                strides=(step,) + first.strides,
                writeable=False,
            )
    return np.stack([np.asarray(a) for a in arrays])


def _template(x: Any, leaves: List[Any]) -> Any:
    """`x` with each numeric leaf replaced by its index in `leaves` (appended to it), or
    None when `x` holds anything but `Struct`s, lists, tuples and numeric leaves."""
    if type(x) is np.ndarray or isinstance(x, np.generic):
        if x.dtype.kind in 'OSUV':
            return None
        leaves.append(x)
        return len(leaves) - 1 if type(x) is np.ndarray else -len(leaves)
    if type(x) is Struct:
        items = [_template(v, leaves) for v in x]
        return None if any(i is None for i in items) else struct_like(x, items)
    if type(x) in (list, tuple):
        items = [_template(v, leaves) for v in x]
        return None if any(i is None for i in items) else type(x)(items)
    return None


_new_ext = tuple.__new__  # an `ExtType` (a namedtuple) from (code, bytes), unchecked

_LOCAL = threading.local()


def _encoder() -> _Encoder:
    """This thread's encoder, or a fresh one while it is in use (never: encode does not nest)."""
    enc = getattr(_LOCAL, 'encoder', None)
    if enc is None:
        enc = _LOCAL.encoder = _Encoder()
    return enc if not enc.busy else _Encoder()


def encode(obj: Any) -> Tuple[bytes, List[np.ndarray]]:
    """Encodes `obj` into a header and the numeric buffers it refers to (not copied)."""
    enc = _encoder()
    enc.busy = True
    try:
        return _pack_top(enc, obj), enc.buffers
    finally:
        enc.buffers = []
        enc.busy = False


def _pack_top(enc: _Encoder, obj: Any) -> bytes:
    # Big bytes values become buffers: msgpack calls `default` only for
    # unknown types, so they are swapped out before packing.
    return enc.pack(_swap_big_bytes(enc, obj))


def _swap_big_bytes(enc: _Encoder, obj: Any) -> Any:
    if isinstance(obj, bytes) and len(obj) >= BYTES_BUFFER_MIN:
        return enc.maybe_buffer(obj)
    if type(obj) is list:
        return [_swap_big_bytes(enc, v) for v in obj]
    if type(obj) is dict:
        return {k: _swap_big_bytes(enc, v) for k, v in obj.items()}
    return obj


def decode(header: bytes, buffers: Sequence[Any] = ()) -> Any:
    """Decodes a header made by `encode`; arrays are views of `buffers` (not copied)."""
    try:
        return _Decoder(buffers).unpack(header)
    except CodecError:
        raise
    except (ValueError, TypeError, KeyError, IndexError, msgpack.UnpackException) as e:
        raise CodecError(f'malformed message: {type(e).__name__}: {e}') from None


def roundtrip(obj: Any) -> Any:
    """`decode(*encode(obj))` (tests and in-process transports)."""
    header, buffers = encode(obj)
    return decode(header, buffers)
