"""The worker protocol: a closed set of operations with typed requests and responses.

```
driver (WorkerDelegatingExecutor, one session per stack)      worker (WorkerService)
  Request(seq, session, op, args, out_base, free) ──codec──▶  resolve Refs in the session
                                                               run the Op on its executor
  Response(seq, ok, kind, count, types, result, error) ◀────  store results under ids
                                                               out_base .. out_base+count-1
```

- `Op` names every operation; `ARGS` gives each one's arguments (a named
  tuple per operation, `OP_ARGS` their names: the arity is checked on both
  sides), and `RESULT` what it answers: `VALUES` (ids
  stored in the session, with their types), `DATA` (numpy trees, `Partial`s,
  `DatasetBlob`s) or `NONE`.
- Value ids are scoped to a session: every stack opens its own session on
  each worker, and closing it disposes of the session's values.
- Errors travel as an `ErrorRecord` (type name, message, remote traceback,
  plain fields) and are rebuilt as the project's error classes (or the
  builtin / TensorFlow class of the same name, looked up in a fixed set of
  modules; no other class is ever built from the peer's bytes).
- `PROTOCOL_VERSION` is checked by the worker on every request.

This module is transport-independent and imports no TensorFlow: the local
transport (pipe + shared memory), gRPC and Ray carry the same bytes.
"""

from __future__ import annotations

import builtins
import dataclasses
import enum
import sys
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple, Type, Union, cast

import numpy as np

from simharness import errors as E
from simharness.core.reduction import Partial, ReductionKind
from simharness.core.structure import map_nest
from simharness.runtime import codec
from simharness.runtime.stream_plan import PlanNode, PlanReduction, is_plan_part

#: 4: the stream plan of STREAM_REDUCE is typed (`runtime.stream_plan`), not tagged lists.
#: 5: the plan carries clients' values (`PlanStacked`) and shared values (`PlanShared`).
#: 6: LOAD_OP_LIBRARIES (the driver's TF op libraries, `runtime.op_libraries`).
PROTOCOL_VERSION = 6


class Op(enum.IntEnum):
    """Every operation a worker service runs."""

    OPEN_SESSION = 1
    CLOSE_SESSION = 2
    FREE = 3
    LOAD_OP_LIBRARIES = 4
    CREATE_VALUE = 10
    CREATE_CALL = 11
    CREATE_STRUCT = 12
    CREATE_SELECTION = 13
    CREATE_VALUES = 20
    CREATE_VALUES_STACKED = 21
    LOAD_SOURCED = 22
    CREATE_MAP = 30
    CREATE_STRUCTS = 31
    CREATE_SELECTIONS = 32
    COMPUTE_MANY = 40
    PARTIAL_REDUCTION = 50
    REDUCTION_RESULT = 51
    STREAM_REDUCE = 52
    SEQUENCE_OP = 60
    SELECT = 61
    PING = 90


class Result(enum.IntEnum):
    NONE = 0
    VALUES = 1
    DATA = 2


# ---------------------------------------------------------------- arguments
# One named tuple per operation: its arguments, in order, as the worker reads them
# (`Ref`/`RefRange`s resolved to the session's values, which only the worker's executor
# knows the class of: `object` here). On the wire they are a plain list (`Request.args`).


class NoArgs(NamedTuple):
    """The arguments of an operation that takes none."""


class LoadOpLibrariesArgs(NamedTuple):
    libraries: List[List[str]]  # [name, path] of each TF op library the driver loaded


class CreateValueArgs(NamedTuple):
    value: object
    type: object  # a `T.Type`, or None


class CreateCallArgs(NamedTuple):
    fn: object
    arg: object  # None: a call without an argument


class CreateStructArgs(NamedTuple):
    elements: List[object]  # (name, value) pairs


class CreateSelectionArgs(NamedTuple):
    source: object
    element: int


class CreateValuesArgs(NamedTuple):
    values: List[object]
    type: object


class CreateValuesStackedArgs(NamedTuple):
    leaves: List[object]  # arrays ``[n, ...]`` of the type's leaves
    type: object


class LoadSourcedArgs(NamedTuple):
    token: int
    source: object  # the source's spec (plain data) the first time, then None
    client_ids: List[str]
    transform: object  # the transform's spec
    type: object


class CreateMapArgs(NamedTuple):
    fn: object
    args: Optional[List[object]]
    calls: Optional[int]  # with no args: how many calls of a no-parameter fn


class CreateStructsArgs(NamedTuple):
    rows: List[List[object]]
    names: List[Optional[str]]


class CreateSelectionsArgs(NamedTuple):
    sources: List[object]
    element: int


class ComputeManyArgs(NamedTuple):
    values: List[object]


class PartialReductionArgs(NamedTuple):
    kind: ReductionKind  # decoded: its string (the service makes it a kind)
    values: List[object]
    start: int
    total: int
    params: Dict[str, object]


class ReductionResultArgs(NamedTuple):
    kind: ReductionKind  # decoded: its string (the service makes it a kind)
    partials: List[Partial]
    total: int
    params: Dict[str, object]
    result_type: object


class StreamReduceArgs(NamedTuple):
    nodes: List[PlanNode]
    reductions: List[PlanReduction]
    start: int
    clients: int
    total: int
    slice_size: Optional[int]


class SequenceOpArgs(NamedTuple):
    op: str
    values: List[object]
    params: Dict[str, object]


class SelectArgs(NamedTuple):
    keys: List[object]
    server_value: object
    select_fn: object
    element_type: object


#: The arguments of each operation (`OP_ARGS`: their names, in order).
ARGS: Dict[Op, Type[NamedTuple]] = {
    Op.OPEN_SESSION: NoArgs,
    Op.CLOSE_SESSION: NoArgs,
    Op.FREE: NoArgs,
    Op.LOAD_OP_LIBRARIES: LoadOpLibrariesArgs,
    Op.CREATE_VALUE: CreateValueArgs,
    Op.CREATE_CALL: CreateCallArgs,
    Op.CREATE_STRUCT: CreateStructArgs,
    Op.CREATE_SELECTION: CreateSelectionArgs,
    Op.CREATE_VALUES: CreateValuesArgs,
    Op.CREATE_VALUES_STACKED: CreateValuesStackedArgs,
    Op.LOAD_SOURCED: LoadSourcedArgs,
    Op.CREATE_MAP: CreateMapArgs,
    Op.CREATE_STRUCTS: CreateStructsArgs,
    Op.CREATE_SELECTIONS: CreateSelectionsArgs,
    Op.COMPUTE_MANY: ComputeManyArgs,
    Op.PARTIAL_REDUCTION: PartialReductionArgs,
    Op.REDUCTION_RESULT: ReductionResultArgs,
    Op.STREAM_REDUCE: StreamReduceArgs,
    Op.SEQUENCE_OP: SequenceOpArgs,
    Op.SELECT: SelectArgs,
    Op.PING: NoArgs,
}

#: Argument names of each operation, in order.
OP_ARGS: Dict[Op, Tuple[str, ...]] = {op: cls._fields for op, cls in ARGS.items()}

RESULT: Dict[Op, Result] = {op: Result.VALUES for op in Op}
RESULT.update(
    {
        Op.OPEN_SESSION: Result.NONE,
        Op.CLOSE_SESSION: Result.NONE,
        Op.FREE: Result.NONE,
        Op.LOAD_OP_LIBRARIES: Result.NONE,
        Op.PING: Result.DATA,
        Op.COMPUTE_MANY: Result.DATA,
        Op.PARTIAL_REDUCTION: Result.DATA,
        Op.STREAM_REDUCE: Result.DATA,
    }
)


@codec.register_message
@dataclasses.dataclass
class ErrorRecord:
    """An exception as plain data: what crosses the seam instead of the exception object."""

    type_name: str
    message: str
    traceback: str = ''
    fields: Dict[str, Any] = dataclasses.field(default_factory=dict)
    retryable: bool = False


@codec.register_message
@dataclasses.dataclass
class Request:
    """One operation for one worker session, covering all of its clients.

    Attributes:
      op: the operation (an `Op`; on the wire its number, made an `Op` again by
        `check_request`).
      session: the session id (scopes value ids).
      args: positional arguments (`OP_ARGS[op]`), with `Ref`/`RefRange` for
        session values.
      out_base: the first id under which the worker stores result values.
      out_count: how many result values the driver expects (ids it reserved).
      free: (first id, count) ranges of session values the driver dropped.
      seq: a number the transport uses to match the response.
      version: `PROTOCOL_VERSION` of the sender.
      want_types: whether the response should carry the result types (a
        pipelining driver knows them already).
    """

    op: Op
    session: int
    args: list
    out_base: int = 0
    out_count: int = 0
    free: list = dataclasses.field(default_factory=list)
    seq: int = 0
    version: int = PROTOCOL_VERSION
    want_types: bool = True

    def __post_init__(self) -> None:
        # Decoded, the op is its number: made an `Op` again (an unknown one stays a number
        # for `check_request` to refuse).
        if type(self.op) is not Op:
            try:
                self.op = Op(self.op)
            except ValueError:
                pass


@codec.register_message
@dataclasses.dataclass
class Response:
    """The answer to a `Request`.

    Attributes:
      ok: False when the operation raised (`error` says what).
      kind: a `Result`.
      count: VALUES: how many values were stored from `out_base`.
      types: VALUES: one type for all values, or a list with one per value.
      result: DATA: the data (numpy arrays, Structs, Partials, DatasetBlobs).
      error: the `ErrorRecord` when not ok.
      seq: the request's `seq`.
    """

    ok: bool
    kind: Result = Result.NONE
    count: int = 0
    types: Any = None
    result: Any = None
    error: Optional[ErrorRecord] = None
    seq: int = 0

    def __post_init__(self) -> None:
        if type(self.kind) is not Result:  # decoded: its number
            self.kind = Result(self.kind)


def check_request(req: Any) -> Request:
    """Validates a decoded request (version, op, arity); raises `ProtocolError`."""
    if not isinstance(req, Request):
        raise E.ProtocolError(f'expected a Request, got {type(req).__name__}')
    if req.version != PROTOCOL_VERSION:
        raise E.ProtocolError(
            f'protocol version {req.version} is not supported (this worker '
            f'speaks {PROTOCOL_VERSION}); use the same simharness version on '
            'both sides'
        )
    try:
        op = Op(req.op)
    except ValueError:
        raise E.ProtocolError(f'unknown operation {req.op!r}') from None
    if len(req.args) != len(OP_ARGS[op]):
        raise E.ProtocolError(
            f'{op.name} takes {len(OP_ARGS[op])} arguments {OP_ARGS[op]}, got {len(req.args)}'
        )
    req.op = op
    return req


def encode_message(msg: Any) -> Tuple[bytes, List[np.ndarray]]:
    """A `Request` or `Response` as (header, buffers)."""
    return codec.encode(msg)


def decode_message(header: bytes, buffers: Any = ()) -> Any:
    return codec.decode(header, buffers)


# ---------------------------------------------------------------- errors


def _plain(x: Any) -> Any:
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    return str(x)


def error_to_record(exc: BaseException, traceback_text: str = '') -> ErrorRecord:
    """An exception as an `ErrorRecord` (fields: its plain attributes)."""
    t = type(exc)
    fields = (
        {k: _plain(v) for k, v in vars(exc).items() if not k.startswith('_')}
        if hasattr(exc, '__dict__')
        else {}
    )
    if isinstance(exc, E.SimharnessError) or t.__module__ == 'builtins':
        message = str(exc.args[0]) if len(exc.args) == 1 else str(exc)
    else:
        message = str(getattr(exc, 'message', None) or exc)
    if isinstance(exc, KeyError) and len(exc.args) == 1:
        message = str(exc.args[0])
    for k in ('node_def', 'op'):  # TF errors: not plain, not needed
        fields.pop(k, None)
    return ErrorRecord(
        f'{t.__module__}.{t.__qualname__}',
        message,
        traceback_text,
        fields,
        isinstance(exc, E.RetryableError),
    )


def _error_class(type_name: str) -> Optional[type]:
    module, _, name = type_name.rpartition('.')
    if module == 'builtins':
        cls = getattr(builtins, name, None)
        return cls if isinstance(cls, type) and issubclass(cls, Exception) else None
    if module == 'simharness.errors' or module.startswith('simharness.'):
        cls = getattr(E, name, None)
        return cls if isinstance(cls, type) and issubclass(cls, Exception) else None
    if module.startswith('tensorflow.'):
        tf_errors = sys.modules.get('tensorflow.python.framework.errors_impl')
        cls = getattr(tf_errors, name, None) if tf_errors is not None else None
        return cls if isinstance(cls, type) and issubclass(cls, Exception) else None
    return None


def record_to_error(
    rec: ErrorRecord, worker_id: Optional[Union[int, str]] = None, pid: Optional[int] = None
) -> BaseException:
    """Rebuilds the exception of `rec` in the driver, the remote traceback as `__cause__`.

    Known classes (the project's errors, builtins, TensorFlow's errors) are
    rebuilt as themselves; any other is a `WorkerError` naming the remote type.
    """
    cls = _error_class(rec.type_name)
    err: Optional[BaseException] = None
    if cls is not None:
        try:
            if cls.__module__.startswith('tensorflow'):
                err = cls(None, None, rec.message)
            else:
                err = Exception.__new__(cls)  # no __init__: keyword-only fields are set below
                Exception.__init__(err, rec.message)
            for k, v in rec.fields.items():  # TF's too: e.g. which client (`at_client`)
                try:
                    setattr(err, k, v)
                except AttributeError:
                    pass
        except Exception:
            err = None
    # A gRPC worker's id is its address (errors keep it as given).
    wid = cast(Optional[int], worker_id)
    if err is None:
        err = E.WorkerError(
            f'{rec.type_name}: {rec.message}',
            worker_id=wid,
            pid=pid,
            remote_traceback=rec.traceback,
        )
    if rec.traceback:
        where = f'worker {worker_id}' + (f' (pid {pid})' if pid is not None else '')
        err.__cause__ = E.WorkerError(
            f'{where} traceback:\n{rec.traceback}',
            worker_id=wid,
            pid=pid,
            remote_traceback=rec.traceback,
        )
    return err


# ---------------------------------------------------------------- trees


def map_leaves(obj: Any, fn: Callable[[Any], Any]) -> Any:
    """Rebuilds `obj` with every non-container leaf replaced by `fn(leaf)`.

    Containers: Struct, Partial, stream plan nodes and reductions (their value
    fields), list, tuple, namedtuple, dict.
    """

    def leaf(x: Any) -> Any:
        if isinstance(x, Partial):
            return x.map(lambda v: map_leaves(v, fn))
        if is_plan_part(x):
            return x.map_values(lambda v: map_leaves(v, fn))
        return fn(x)

    return map_nest(leaf, obj, structs=True)
