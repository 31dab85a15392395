from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TensorSpec(_message.Message):
    __slots__ = ('dtype', 'shape', 'nbytes')
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    NBYTES_FIELD_NUMBER: _ClassVar[int]
    dtype: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    nbytes: int
    def __init__(
        self,
        dtype: _Optional[str] = ...,
        shape: _Optional[_Iterable[int]] = ...,
        nbytes: _Optional[int] = ...,
    ) -> None: ...

class Frame(_message.Message):
    __slots__ = ('seq', 'first', 'header_size', 'num_buffers', 'tensors', 'data', 'last')
    SEQ_FIELD_NUMBER: _ClassVar[int]
    FIRST_FIELD_NUMBER: _ClassVar[int]
    HEADER_SIZE_FIELD_NUMBER: _ClassVar[int]
    NUM_BUFFERS_FIELD_NUMBER: _ClassVar[int]
    TENSORS_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    seq: int
    first: bool
    header_size: int
    num_buffers: int
    tensors: _containers.RepeatedCompositeFieldContainer[TensorSpec]
    data: bytes
    last: bool
    def __init__(
        self,
        seq: _Optional[int] = ...,
        first: bool = ...,
        header_size: _Optional[int] = ...,
        num_buffers: _Optional[int] = ...,
        tensors: _Optional[_Iterable[_Union[TensorSpec, _Mapping]]] = ...,
        data: _Optional[bytes] = ...,
        last: bool = ...,
    ) -> None: ...

class ServiceInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ServiceInfo(_message.Message):
    __slots__ = (
        'protocol_version',
        'incarnation',
        'num_workers',
        'pid',
        'simharness_version',
        'max_message_bytes',
        'chunk_bytes',
        'requests',
        'sessions',
        'values',
        'streams',
        'session_timeout',
    )
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    NUM_WORKERS_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    SIMHARNESS_VERSION_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGE_BYTES_FIELD_NUMBER: _ClassVar[int]
    CHUNK_BYTES_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    STREAMS_FIELD_NUMBER: _ClassVar[int]
    SESSION_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    protocol_version: int
    incarnation: str
    num_workers: int
    pid: int
    simharness_version: str
    max_message_bytes: int
    chunk_bytes: int
    requests: int
    sessions: int
    values: int
    streams: int
    session_timeout: float
    def __init__(
        self,
        protocol_version: _Optional[int] = ...,
        incarnation: _Optional[str] = ...,
        num_workers: _Optional[int] = ...,
        pid: _Optional[int] = ...,
        simharness_version: _Optional[str] = ...,
        max_message_bytes: _Optional[int] = ...,
        chunk_bytes: _Optional[int] = ...,
        requests: _Optional[int] = ...,
        sessions: _Optional[int] = ...,
        values: _Optional[int] = ...,
        streams: _Optional[int] = ...,
        session_timeout: _Optional[float] = ...,
    ) -> None: ...
