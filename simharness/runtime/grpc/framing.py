"""gRPC transport: a protocol message as a stream of `Frame`s, and back.

A protocol message (`protocol.Request` / `Response`, encoded by `codec` as a
msgpack header plus raw buffers) travels as one logical byte stream
``[header][buffer 0][buffer 1]...`` cut into `Frame`s of at most
`CHUNK_BYTES` data (see `proto/executor_service.proto`); each buffer's dtype,
shape and size travel as a `TensorSpec`. No gRPC message comes near gRPC's
4 MiB limit, whatever the tensors. Only the codec decodes a message (no
Python object is rebuilt from a peer's bytes); the receiver (`MessageAssembler`)
checks every size against its limits before it allocates.
"""

from __future__ import annotations

from typing import Any, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from simharness import errors as E
from simharness.runtime import codec
from simharness.runtime.proto import executor_service_pb2 as pb

#: Data bytes per Frame (1 MiB: well under gRPC's default 4 MiB message limit).
CHUNK_BYTES = 1 << 20
#: gRPC's own message limit, set explicitly on both sides (Frames stay far below it).
GRPC_MAX_MESSAGE = 4 << 20
#: TensorSpecs per Frame at most (bounds a Frame's size whatever the buffer count).
MAX_SPECS_PER_FRAME = 4096
#: Largest protocol message (header + buffers) a side accepts by default.
DEFAULT_MAX_MESSAGE_BYTES = 4 << 30
#: Most buffers one message may declare.
MAX_BUFFERS = 1 << 20
#: Requests sent and not yet answered, per stream.
DEFAULT_MAX_INFLIGHT = 32
#: Seconds a (re)connect waits for a service to be reachable.
DEFAULT_CONNECT_TIMEOUT = 30.0


def _flat_bytes(buf: Any) -> np.ndarray:
    if isinstance(buf, (bytes, bytearray, memoryview)):
        return np.frombuffer(buf, np.uint8)
    return np.ascontiguousarray(buf).reshape(-1).view(np.uint8)


def _spec(buf: Any) -> Any:
    if isinstance(buf, (bytes, bytearray, memoryview)):
        return pb.TensorSpec(dtype='|u1', shape=[len(buf)], nbytes=len(buf))
    a = np.asarray(buf)
    return pb.TensorSpec(dtype=codec.dtype_token(a.dtype), shape=list(a.shape), nbytes=a.nbytes)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


#: The tag of `Frame.data` (field 6, length-delimited).
_DATA_TAG = bytes([(6 << 3) | 2])


def encoded_frames(
    seq: int, header: bytes, buffers: Sequence[Any], chunk: int = CHUNK_BYTES
) -> Iterator[bytes]:
    """The Frames of one message (`header` plus `buffers`), serialized, <= `chunk` data bytes each.

    The bytes are the protobuf encoding of `Frame` (its small fields through
    the generated class, the data field appended by hand), so a frame's data
    is copied once, into the message, instead of three times through
    protobuf objects.
    """
    parts = [memoryview(header).cast('B')] + [_flat_bytes(b).data for b in buffers]
    specs = [_spec(b) for b in buffers]
    pieces: List[Any] = []
    size = 0
    pending_specs: List[Any] = []
    first = True

    def frame(last: bool) -> bytes:
        nonlocal first, pieces, size, pending_specs
        f = pb.Frame(seq=seq, tensors=pending_specs, last=last)
        if first:
            f.first = True
            f.header_size = len(header)
            f.num_buffers = len(buffers)
            first = False
        out = (
            b''.join([f.SerializeToString(), _DATA_TAG, _varint(size), *pieces])
            if size
            else f.SerializeToString()
        )
        pieces, size, pending_specs = [], 0, []
        return out

    for i, part in enumerate(parts):
        if i:
            if len(pending_specs) >= MAX_SPECS_PER_FRAME:
                yield frame(False)
            pending_specs.append(specs[i - 1])
        off, n = 0, part.nbytes
        while off < n:
            take = min(n - off, chunk - size)
            pieces.append(part[off : off + take])
            size += take
            off += take
            if size >= chunk:
                yield frame(False)
    yield frame(True)


def frames_of(
    seq: int, header: bytes, buffers: Sequence[Any], chunk: int = CHUNK_BYTES
) -> Iterator[Any]:
    """The Frames of one message as `Frame` objects (for a generated stub)."""
    for raw in encoded_frames(seq, header, buffers, chunk):
        yield pb.Frame.FromString(raw)


class WireFrame:
    """A `Frame` parsed from its bytes by hand: `data` is a view of them (not copied)."""

    __slots__ = ('seq', 'first', 'header_size', 'num_buffers', 'tensors', 'data', 'last')

    def __init__(self) -> None:
        self.seq = 0
        self.first = False
        self.header_size = 0
        self.num_buffers = 0
        self.tensors: List[Any] = []
        self.data: Any = b''
        self.last = False


def _read_varint(b: Any, i: int, n: int) -> Tuple[int, int]:
    shift = 0
    value = 0
    while True:
        if i >= n or shift > 63:
            raise E.ProtocolError('malformed frame: a truncated or overlong varint')
        c = b[i]
        i += 1
        value |= (c & 0x7F) << shift
        if not c & 0x80:
            return value, i
        shift += 7


_VARINT_FIELDS = {1: 'seq', 2: 'first', 3: 'header_size', 4: 'num_buffers', 7: 'last'}


def decode_frame(raw: Any) -> Any:
    """A `WireFrame` from the protobuf bytes of a `Frame` (a `Frame` object passes as is).

    Raises:
      ProtocolError: the bytes are not a `Frame`.
    """
    if isinstance(raw, pb.Frame):
        return raw
    if not isinstance(raw, (bytes, bytearray, memoryview)):
        raise E.ProtocolError(f'malformed frame: {type(raw).__name__}, not bytes')
    mv = memoryview(raw).cast('B')
    f = WireFrame()
    i, n = 0, len(mv)
    while i < n:
        key, i = _read_varint(mv, i, n)
        field, wire = key >> 3, key & 7
        if wire == 0:
            v, i = _read_varint(mv, i, n)
            name = _VARINT_FIELDS.get(field)
            if name is not None:
                setattr(f, name, bool(v) if name in ('first', 'last') else v)
        elif wire == 2:
            ln, i = _read_varint(mv, i, n)
            if i + ln > n:
                raise E.ProtocolError('malformed frame: a field runs past its end')
            if field == 5:
                try:
                    f.tensors.append(pb.TensorSpec.FromString(mv[i : i + ln].tobytes()))
                except Exception:
                    raise E.ProtocolError('malformed frame: a TensorSpec does not parse') from None
            elif field == 6:
                f.data = mv[i : i + ln]
            i += ln
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        else:
            raise E.ProtocolError(f'malformed frame: wire type {wire}')
    if i != n:
        raise E.ProtocolError('malformed frame: a field runs past its end')
    return f


class MessageAssembler:
    """Rebuilds messages from Frames, checking every declared size against its limits.

    Args:
      max_message_bytes: the largest header + buffers accepted.
      where: names the peer in error messages.

    `feed(frame)` returns ``(seq, header, buffers)`` when a message is
    complete (buffers are numpy arrays of their declared dtype and shape),
    else None; a malformed or oversized message raises `ProtocolError`.
    """

    def __init__(self, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES, where: str = 'peer'):
        self.max_message_bytes = max_message_bytes
        self.where = where
        self._seq: Optional[int] = None

    def _fail(self, what: str) -> None:
        self._seq = None
        raise E.ProtocolError(f'malformed message from {self.where}: {what}')

    def feed(self, frame: Any) -> Optional[Tuple[int, bytes, List[np.ndarray]]]:
        if self._seq is None:
            if not frame.first:
                self._fail('a message must begin with its first frame')
            if frame.header_size > self.max_message_bytes:
                self._seq = None
                raise E.ProtocolError(
                    f'a message from {self.where} declares a {frame.header_size}-byte header, '
                    f'over the limit of {self.max_message_bytes} bytes (max_message_bytes)'
                )
            if frame.num_buffers > MAX_BUFFERS:
                self._fail(f'{frame.num_buffers} buffers declared (at most {MAX_BUFFERS})')
            self._seq = frame.seq
            self._header = bytearray(frame.header_size)
            self._hpos = 0
            self._nbuf = frame.num_buffers
            self._bufs: List[Tuple[np.ndarray, np.dtype, Tuple[int, ...]]] = []
            self._bi = 0
            self._bpos = 0
            self._total = frame.header_size
        elif frame.first or frame.seq != self._seq:
            self._fail(f'frame of message {frame.seq} inside message {self._seq}')
        for spec in frame.tensors:
            self._add_spec(spec)
        data = frame.data
        pos, n = 0, len(data)
        if n:
            src = np.frombuffer(data, np.uint8)
            while pos < n:
                if self._hpos < len(self._header):
                    take = min(n - pos, len(self._header) - self._hpos)
                    self._header[self._hpos : self._hpos + take] = data[pos : pos + take]
                    self._hpos += take
                    pos += take
                    continue
                while self._bi < len(self._bufs) and self._bpos >= self._bufs[self._bi][0].nbytes:
                    self._bi += 1
                    self._bpos = 0
                if self._bi >= len(self._bufs):
                    self._fail('more data than the declared header and buffers')
                buf = self._bufs[self._bi][0]
                take = min(n - pos, buf.nbytes - self._bpos)
                buf[self._bpos : self._bpos + take] = src[pos : pos + take]
                self._bpos += take
                pos += take
        if not frame.last:
            return None
        filled = (
            self._hpos == len(self._header)
            and len(self._bufs) == self._nbuf
            and all(
                k < self._bi or (k == self._bi and self._bpos == b[0].nbytes) or b[0].nbytes == 0
                for k, b in enumerate(self._bufs)
            )
        )
        if not filled:
            self._fail('the message ended before all its declared bytes arrived')
        header = bytes(self._header)
        buffers = [raw.view(dt).reshape(shape) for raw, dt, shape in self._bufs]
        seq, self._seq = self._seq, None
        self._header = bytearray()
        self._bufs = []
        return seq, header, buffers

    def _add_spec(self, spec: Any) -> None:
        if len(self._bufs) >= self._nbuf:
            self._fail(f'more than the {self._nbuf} declared buffers')
        try:
            dt = codec.dtype_from(spec.dtype)
        except (codec.CodecError, TypeError, ValueError):
            self._fail(f'unknown dtype {spec.dtype!r}')
        if dt.kind not in 'biufcV' or dt.itemsize == 0 or dt.names is not None:
            self._fail(f'dtype {spec.dtype!r} cannot travel as raw bytes')
        shape = tuple(spec.shape)
        if any(d < 0 for d in shape) or len(shape) > 64:
            self._fail(f'bad shape {shape}')
        count = 1
        for d in shape:
            count *= d
            if count * dt.itemsize > self.max_message_bytes:
                break
        if count * dt.itemsize != spec.nbytes:
            self._fail(f'a buffer of {spec.nbytes} bytes cannot hold {dt} {shape}')
        self._total += spec.nbytes
        if self._total > self.max_message_bytes:
            self._seq = None
            raise E.ProtocolError(
                f'a message from {self.where} is larger than the limit of '
                f'{self.max_message_bytes} bytes (max_message_bytes)'
            )
        self._bufs.append((np.empty(spec.nbytes, np.uint8), dt, shape))
