"""The gRPC transport, driver side: handles on a service's worker slots (`RemoteServices`).

```
driver                                                    executor service (hosts/grpc_service.py)
  RemoteServices (owned by a remote factory / RemoteExecutor)
    one stub per service (channels it made, or the user's)
    RemoteWorkerHandle = (service, worker slot)            ExecutorService.Execute
      submit(header, buffers) ─▶ stream queue              one ordered stream per handle
      feeder (gRPC's request-iterator thread):              frames ─▶ MessageAssembler ─▶ Request
        at most max_inflight requests unanswered,  ══════▶   ─▶ WorkerService (in order)
        each cut into Frames of <= 1 MiB                    Response ─▶ frames
      reader thread: frames ─▶ Response ─▶ future  ◀══════
        (FIFO: a stream answers in order)
```

A protocol message (`protocol.Request` / `Response`, encoded by `codec` as a
msgpack header plus raw buffers) travels as one logical byte stream
``[header][buffer 0][buffer 1]...`` cut into `Frame`s of at most
`CHUNK_BYTES` data (see `proto/executor_service.proto`); each buffer's dtype,
shape and size travel as a `TensorSpec`. No gRPC message comes near gRPC's
4 MiB limit, whatever the tensors. Only the codec decodes a message (no
Python object is rebuilt from a peer's bytes); the receiver checks every
size against its limits before it allocates.

A handle's *generation* counts its streams: the sessions a stream opened
live (in the service) as long as the stream does, so when a stream breaks
(the service died, restarted or is unreachable) every value of the old
generation is reported lost (`WorkerCrashedError`), never reused, and the
next use opens a new stream (waiting up to `connect_timeout` for the
service to come back). Errors name the service's address.

Ownership: `RemoteServices` owns its handles and the channels it made (not
channels or stubs given to it); a handle owns its stream and reader thread.
`close()` is idempotent.
"""

from __future__ import annotations

import collections
import concurrent.futures
import itertools
import logging
import secrets
import threading
import time
import weakref
from typing import Any, Callable, Deque, Dict, Iterator, List, Optional, Sequence, cast

from simharness import errors as E
from simharness.runtime import protocol as P
from simharness.runtime.inflight import InFlight
from simharness.runtime.seam import Answer
from simharness.runtime.proto import executor_service_pb2 as pb
from simharness.runtime.grpc.auth import (
    EXECUTE_PATH,
    WORKER_METADATA,
    channel_options,
    check_token,
    is_loopback,
    token_metadata,
)
from simharness.runtime.grpc.framing import (
    CHUNK_BYTES,
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_MAX_INFLIGHT,
    DEFAULT_MAX_MESSAGE_BYTES,
    MessageAssembler,
    decode_frame,
    encoded_frames,
)

log = logging.getLogger(__name__)


class _Call(InFlight):
    __slots__ = ('header', 'buffers', 'sent_at')

    def __init__(
        self, header: bytes, buffers: List[Any], op: str, on_done: Optional[Callable[[], None]]
    ):
        super().__init__(op, on_done)
        self.header = header
        self.buffers = buffers
        self.sent_at = 0.0


class _Passthrough:
    """The handle protocol's broadcast arena, for gRPC: nothing is shared, every service
    receives the bytes of a broadcast value (once per service and operation)."""

    bytes_written = 0

    def acquire(self, key: Any, buffers: Sequence[Any]) -> List[Any]:
        return []

    def release(self, locs: Optional[List[Any]] = None) -> None:
        pass


def _status_name(err: Any) -> str:
    try:
        return err.code().name
    except Exception:
        return 'UNKNOWN'


def _details(err: Any) -> str:
    try:
        return str(err.details() or '')
    except Exception:
        return str(err)


class _Stream:
    """One Execute stream of a handle: its queue, its unanswered requests, its reader."""

    def __init__(self, handle: 'RemoteWorkerHandle', generation: int):
        self.handle = handle
        self.generation = generation
        self.cond = threading.Condition(threading.Lock())
        self.queue: Deque[_Call] = collections.deque()
        self.inflight: Deque[_Call] = collections.deque()
        self.closing = False
        self.failed: Optional[Callable[[_Call], BaseException]] = None
        self.call: Any = None
        self.reader: Optional[threading.Thread] = None

    def requests(self) -> Iterator[Any]:
        """The request iterator gRPC consumes (in its own thread)."""
        seq = itertools.count(1)
        max_inflight = self.handle.services.max_inflight
        chunk = self.handle.services.chunk_bytes
        while True:
            with self.cond:
                while (
                    not self.closing
                    and self.failed is None
                    and (not self.queue or len(self.inflight) >= max_inflight)
                ):
                    self.cond.wait()
                if self.failed is not None or (self.closing and not self.queue):
                    return
                call = self.queue.popleft()
                call.sent_at = time.monotonic()
                self.inflight.append(call)
                header, buffers = call.header, call.buffers
                call.header, call.buffers = b'', []
            yield from encoded_frames(next(seq), header, buffers, chunk)

    def read(self) -> None:
        """The reader thread: answers calls in order; on a broken stream, fails them all."""
        h = self.handle
        asm = MessageAssembler(h.services.max_message_bytes, f'the service at {h.address}')
        error_for: Optional[Callable[[_Call], BaseException]] = None
        try:
            for frame in self.call:
                msg = asm.feed(decode_frame(frame))
                if msg is None:
                    continue
                _, header, buffers = msg
                with self.cond:
                    call = self.inflight.popleft() if self.inflight else None
                    self.cond.notify_all()
                if call is None:
                    raise E.ProtocolError(
                        f'the service at {h.address} answered a request that was never sent'
                    )
                try:
                    resp = P.decode_message(header, buffers)
                except Exception as e:
                    call.finish(error=e)
                    continue
                call.finish(Answer(resp))
            with self.cond:
                clean = self.closing and not self.inflight and not self.queue
            if not clean:
                error_for = h.lost_error(
                    'the service closed the stream (it is shutting down?)', 'UNAVAILABLE'
                )
        except Exception as e:
            import grpc

            if isinstance(e, grpc.RpcError):
                status = _status_name(e)
                with self.cond:
                    quiet = self.closing and status == 'CANCELLED'
                if not quiet:
                    error_for = h.rpc_error(e)
            else:
                error_for = lambda c, e=e: e
                log.warning('stream to %s failed: %s', h.address, e)
        if error_for is not None and self.call is not None:
            try:
                self.call.cancel()  # a broken or malformed stream: stop reading it
            except Exception:  # pragma: no cover - cancelling an ended call
                pass
        self.fail(
            error_for
            or (
                lambda c: E.ExecutorClosedError(
                    f'the stream to {h.address} was closed while it ran {c.op}'
                )
            )
        )

    def fail(self, error_for: Callable[[_Call], BaseException]) -> None:
        with self.cond:
            if self.failed is None:
                self.failed = error_for
            calls = list(self.inflight) + list(self.queue)
            self.inflight.clear()
            self.queue.clear()
            self.cond.notify_all()
        for c in calls:
            c.finish(error=error_for(c))

    def close(self, wait: float = 10.0) -> None:
        with self.cond:
            self.closing = True
            self.cond.notify_all()
        reader = self.reader
        if reader is not None and reader is not threading.current_thread():
            reader.join(wait)
            if reader.is_alive() and self.call is not None:
                self.call.cancel()
                reader.join(wait)


class RemoteWorkerHandle:
    """The driver side of one worker slot of an executor service (the `WorkerHandle` protocol).

    `WorkerDelegatingExecutor` (and `RemoteExecutor`) drive it exactly as a
    local worker process: `submit(header, buffers, op, generation, locs,
    on_done) -> Future[Answer]`, `ensure_started()`, `alive`, `generation`,
    `worker_id`, `pid`, `pool`.
    """

    #: Answers are never lent (`submit(..., lend=True)` is a plain request).
    lends = False
    places_prefix = False  # a broadcast goes alone (`WorkerDelegatingExecutor._wire_node`)

    def __init__(self, services: 'RemoteServices', target: '_Target', slot: int):
        self.services = services
        self.pool = services  # the handle protocol's name for the owner
        self.target = target
        self.address = target.address
        self.slot = slot
        self.worker_id = f'{target.address}#{slot}' if target.num_workers > 1 else target.address
        self.generation = 0
        self.pid: Optional[int] = None
        self.incarnation = ''
        self._lock = threading.Lock()
        self._start_lock = threading.Lock()
        self._stream: Optional[_Stream] = None

    @property
    def alive(self) -> bool:
        s = self._stream
        return s is not None and s.failed is None and not s.closing

    @property
    def stream(self) -> Optional[_Stream]:
        """Its current Execute stream (None before the first start and after `close`)."""
        return self._stream

    # ------------------------------------------------------------ errors
    def lost_error(self, what: str, status: str) -> Callable[[_Call], BaseException]:
        """The error of each call on a stream lost because `what` (gRPC `status`): the
        service is unavailable, the worker's values are gone."""
        addr = self.address

        def error(c: _Call) -> BaseException:
            return E.ServiceUnavailableError(
                f'executor service at {addr} (worker {self.slot}): {what} while it ran {c.op}; '
                'its values are lost: run the computation again (execution_context(factory, '
                'retries=N) does, once the service is back)',
                address=addr,
                status=status,
                worker_id=self.worker_id,
            )

        return error

    def rpc_error(self, e: Any) -> Callable[[_Call], BaseException]:
        """The error of each call on a stream that gRPC ended with the error `e`."""
        status, details = _status_name(e), _details(e)
        if status == 'UNAUTHENTICATED':
            err = E.ServiceAuthenticationError(
                f'the executor service at {self.address} refused this driver: {details}',
                address=self.address,
            )
            return lambda c: err
        if status in (
            'RESOURCE_EXHAUSTED',
            'INVALID_ARGUMENT',
            'UNIMPLEMENTED',
            'FAILED_PRECONDITION',
        ):
            err2 = E.ProtocolError(
                f'the executor service at {self.address} refused a request ({status}): {details}'
            )
            return lambda c: err2
        return self.lost_error(f'connection lost ({status}: {details})', status)

    # ------------------------------------------------------------ lifecycle
    def ensure_started(self, timeout: Optional[float] = None) -> None:
        """Opens a stream to the service (waiting for it up to `connect_timeout`)."""
        import grpc

        with self._start_lock:
            if self.services.closed:
                raise E.ExecutorClosedError('the remote executor services are closed')
            if self.alive:
                return
            old = self._stream
            if old is not None:
                old.close(1.0)
            info = self.services.service_info(self.target, timeout)
            if self.slot >= info.num_workers:
                raise E.ProtocolError(
                    f'the executor service at {self.address} now has {info.num_workers} worker '
                    f'slots; worker {self.slot} is gone (it was restarted with another '
                    '--num-workers): make a new factory'
                )
            gen = self.generation + 1
            stream = _Stream(self, gen)
            md = ((WORKER_METADATA, str(self.slot)),) + token_metadata(self.services.token)
            stream.call = self.target.execute(stream.requests(), metadata=md)
            stream.reader = threading.Thread(
                target=stream.read, name=f'simharness-grpc-{self.worker_id}', daemon=True
            )
            with self._lock:
                self._stream = stream
                self.generation = gen
                self.pid = int(info.pid)
                self.incarnation = info.incarnation
            stream.reader.start()
            del grpc

    def submit(
        self,
        header: bytes,
        buffers: List[Any],
        op: P.Op,
        generation: int,
        locs: Optional[List[Any]] = None,
        on_done: Optional[Callable[[], None]] = None,
        lend: bool = False,
        defer: bool = False,
    ) -> 'concurrent.futures.Future[Answer]':
        """Queues one encoded request; the future resolves to its `Answer` (never with a
        loan: `lend` is ignored, answers arrive as copies over the stream; `defer` too: the
        stream sends each request as it comes)."""
        call = _Call(header, list(buffers), op.name, on_done)
        stream = self._stream
        err: Optional[BaseException] = None
        if self.services.closed:
            err = E.ExecutorClosedError('the remote executor services are closed')
        elif stream is None or stream.generation != generation:
            err = E.WorkerCrashedError(
                f'the stream to the executor service at {self.address} was replaced (the '
                'service was unreachable or restarted); its values are gone: run the '
                'computation again',
                worker_id=cast(Any, self.worker_id),
                pid=self.pid,
            )
        else:
            with stream.cond:
                if stream.failed is not None:
                    err = stream.failed(call)
                elif stream.closing:
                    err = E.ExecutorClosedError(f'the stream to {self.address} is closed')
                else:
                    stream.queue.append(call)
                    stream.cond.notify_all()
        if err is not None:
            call.finish(error=err)
        return call.future

    def close(self) -> None:
        with self._start_lock:
            stream, self._stream = self._stream, None
        if stream is not None:
            stream.close()
            stream.fail(
                lambda c: E.ExecutorClosedError(
                    f'the remote executor services were closed while {self.address} ran {c.op}'
                )
            )


class _Target:
    """One service: its address, stub, and the channel when it was made here.

    `execute(frames, metadata)` opens an Execute stream of serialized Frames:
    raw bytes both ways when the channel is known, else through the stub's
    `Frame` objects (a stub given by the caller).
    """

    def __init__(self, address: str, stub: Any, channel: Any = None, owned: bool = False):
        self.address = address
        self.stub = stub
        self.channel = channel if owned else None  # closed by RemoteServices.close
        self.num_workers = 1
        if channel is not None:
            self.execute = channel.stream_stream(EXECUTE_PATH)  # bytes in, bytes out
        else:
            self.execute = self._execute_through_stub

    def _execute_through_stub(self, frames: Iterator[bytes], metadata: Any = None) -> Any:
        return _StubCall(
            self.stub.Execute((pb.Frame.FromString(b) for b in frames), metadata=metadata)
        )


class _StubCall:
    """A stub's Execute call seen as a stream of serialized Frames."""

    def __init__(self, call: Any):
        self._call = call

    def __iter__(self) -> Iterator[bytes]:
        for f in self._call:
            yield f.SerializeToString()

    def cancel(self) -> bool:
        return self._call.cancel()


#: Seconds within which a frozen (SIGSTOP) or unreachable service fails the call.
DEFAULT_LIVENESS_TIMEOUT = 20.0


def keepalive_options(liveness_timeout: float) -> List[Any]:
    """The driver channel's gRPC keepalive for `liveness_timeout`: an HTTP/2 PING every
    half of it, and the transport dropped (the stream fails UNAVAILABLE) when a ping
    is not acknowledged within the other half. A frozen process cannot acknowledge;
    a busy one can (gRPC's own threads answer). The service permits pings every 1 s."""
    half_ms = max(1500, int(liveness_timeout * 500))
    # Any ping in flight (keepalive, or gRPC's own bandwidth probes) waits at most
    # ping_timeout (gRPC's default: 60 s) for its acknowledgement.
    return [
        ('grpc.keepalive_time_ms', half_ms),
        ('grpc.keepalive_timeout_ms', half_ms),
        ('grpc.http2.ping_timeout_ms', half_ms),
        ('grpc.keepalive_permit_without_calls', 1),
        ('grpc.http2.max_pings_without_data', 0),
    ]


def stub_for(
    target: Any,
    token: Optional[str] = None,
    root_certificates: Optional[bytes] = None,
    liveness_timeout: float = DEFAULT_LIVENESS_TIMEOUT,
) -> _Target:
    """A `_Target` for an address ``'host:port'``, a `grpc.Channel` or an `ExecutorServiceStub`.

    A channel made here (from an address) has keepalive for `liveness_timeout`
    (`keepalive_options`); a channel or stub given is used as it is.
    """
    # reason: grpc (and its generated stubs, which import it) load when a channel is made
    import grpc
    from simharness.runtime.proto import executor_service_pb2_grpc as pbg

    if isinstance(target, str):
        if not target or ':' not in target:
            raise E.SimharnessValueError(f"a service address must be 'host:port', got {target!r}")
        host = target.rsplit(':', 1)[0]
        opts = channel_options() + keepalive_options(liveness_timeout)
        if root_certificates is not None:
            channel = grpc.secure_channel(
                target, grpc.ssl_channel_credentials(root_certificates), options=opts
            )
        else:
            if token and not is_loopback(host):
                log.warning(
                    'sending a token to %s over a plaintext channel; give '
                    'root_certificates= to use TLS',
                    target,
                )
            channel = grpc.insecure_channel(target, options=opts)
        return _Target(target, pbg.ExecutorServiceStub(channel), channel, owned=True)
    if isinstance(target, pbg.ExecutorServiceStub):
        return _Target(_stub_address(target), target)
    if isinstance(target, grpc.Channel):
        return _Target(_channel_address(target), pbg.ExecutorServiceStub(target), target)
    raise E.SimharnessTypeError(
        f"a service must be an address 'host:port', a grpc.Channel or an ExecutorServiceStub, "
        f'got {target!r} of type {type(target).__name__}',
        expected='str | grpc.Channel',
        actual=type(target),
    )


def _channel_address(channel: Any) -> str:
    for attr in ('_target', 'target'):
        t = getattr(channel, attr, None)
        if isinstance(t, bytes):
            return t.decode()
        if isinstance(t, str):
            return t
    inner = getattr(channel, '_channel', None)
    if inner is not None and inner is not channel:
        try:
            return inner.target().decode()
        except Exception:
            pass
    return repr(channel)


def _stub_address(stub: Any) -> str:
    method = getattr(stub, 'GetServiceInfo', None)
    ch = getattr(method, '_channel', None)
    if ch is not None:
        try:
            return ch.target().decode()
        except Exception:
            pass
    return repr(stub)


class RemoteServices:
    """Connections to executor services: one handle per worker slot of every service.

    Args:
      targets: addresses ``'host:port'``, `grpc.Channel`s or
        `ExecutorServiceStub`s (channels made here are closed by `close()`;
        the caller's are not).
      token: sent as call metadata (``authorization: Bearer <token>``).
      root_certificates: PEM bytes: connect to addresses over TLS.
      max_inflight: requests sent and not yet answered per stream.
      connect_timeout: seconds a (re)connect waits for a service.
      max_message_bytes: the largest response accepted.
      chunk_bytes: data bytes per Frame.
      liveness_timeout: seconds within which a service that stops answering
        (frozen by SIGSTOP, a machine gone, a network dropped) fails the call
        with the retryable `ServiceUnavailableError` naming its address:
        gRPC keepalive pings on channels made here (`keepalive_options`).
      request_timeout: seconds one request may wait for its answer (None: no
        limit); past it the stream is cancelled (the service drops its
        sessions) and the call fails with the retryable `WorkerTimeoutError`
        naming the service. Also an attribute.
    """

    def __init__(
        self,
        targets: Sequence[Any],
        *,
        token: Optional[str] = None,
        root_certificates: Optional[bytes] = None,
        max_inflight: int = DEFAULT_MAX_INFLIGHT,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        chunk_bytes: int = CHUNK_BYTES,
        liveness_timeout: float = DEFAULT_LIVENESS_TIMEOUT,
        request_timeout: Optional[float] = None,
    ):
        if token is not None:
            check_token(token)
        if (
            isinstance(liveness_timeout, bool)
            or not isinstance(liveness_timeout, (int, float))
            or not liveness_timeout > 0
        ):
            raise E.SimharnessValueError(
                f'liveness_timeout must be a number > 0 (seconds), got {liveness_timeout!r}'
            )
        self.liveness_timeout = float(liveness_timeout)
        if request_timeout is not None and (
            isinstance(request_timeout, bool)
            or not isinstance(request_timeout, (int, float))
            or not request_timeout > 0
        ):
            raise E.SimharnessValueError(
                f'request_timeout must be None or a number > 0 (seconds), got {request_timeout!r}'
            )
        self.request_timeout = request_timeout
        self._watchdog: Optional[threading.Thread] = None
        self.token = token
        self.max_inflight = max_inflight
        self.connect_timeout = connect_timeout
        self.max_message_bytes = max_message_bytes
        self.chunk_bytes = chunk_bytes
        self.broadcast = _Passthrough()
        self.closed = False
        self._started = False
        self._lock = threading.Lock()
        self.targets: List[_Target] = []
        self.handles: List[RemoteWorkerHandle] = []
        try:
            for t in targets:
                self.targets.append(stub_for(t, token, root_certificates, self.liveness_timeout))
        except BaseException:
            self.close()
            raise
        self._finalizer = weakref.finalize(self, _close_all, self.handles, self.targets)

    @property
    def addresses(self) -> List[str]:
        return [t.address for t in self.targets]

    @property
    def num_workers(self) -> int:
        return len(self.handles)

    def new_session_id(self) -> int:
        """A session id unique across drivers (random: several drivers may share a service)."""
        return secrets.randbits(62) + 1

    def service_info(self, target: _Target, timeout: Optional[float] = None) -> Any:
        """`GetServiceInfo` of one service, waiting up to `timeout` (connect_timeout) for it."""
        import grpc

        timeout = self.connect_timeout if timeout is None else timeout
        try:
            info = target.stub.GetServiceInfo(
                pb.ServiceInfoRequest(),
                timeout=timeout,
                wait_for_ready=True,
                metadata=token_metadata(self.token),
            )
        except grpc.RpcError as e:
            status, details = _status_name(e), _details(e)
            if status == 'UNAUTHENTICATED':
                raise E.ServiceAuthenticationError(
                    f'the executor service at {target.address} refused this driver: {details}',
                    address=target.address,
                ) from None
            raise E.ServiceUnavailableError(
                f'the executor service at {target.address} is unreachable ({status}: '
                f'{details}) after waiting {timeout:g} s; start it (simharness serve --port '
                'PORT) or check the address',
                address=target.address,
                status=status,
            ) from None
        if info.protocol_version != P.PROTOCOL_VERSION:
            raise E.ProtocolError(
                f'the executor service at {target.address} speaks protocol version '
                f'{info.protocol_version}, this driver {P.PROTOCOL_VERSION}: use the same '
                'simharness version on both sides'
            )
        return info

    def start(self) -> None:
        """Asks every service for its worker slots and makes their handles (streams open lazily)."""
        with self._lock:
            if self.closed:
                raise E.ExecutorClosedError('the remote executor services are closed')
            if self._started:
                return
            handles: List[RemoteWorkerHandle] = []
            for t in self.targets:
                info = self.service_info(t)
                t.num_workers = max(1, int(info.num_workers))
                handles.extend(RemoteWorkerHandle(self, t, k) for k in range(t.num_workers))
            self.handles.extend(handles)
            self._started = True
            if self.request_timeout is not None:
                self._watchdog = threading.Thread(
                    target=_watch_requests,
                    args=(weakref.ref(self),),
                    daemon=True,
                    name='simharness-grpc-request-timeout',
                )
                self._watchdog.start()

    @property
    def started(self) -> bool:
        return self._started

    def info(self, timeout: Optional[float] = None) -> List[Dict[str, Any]]:
        """Each service's state: requests served, open streams, sessions and values held."""
        out = []
        for t in self.targets:
            i = self.service_info(t, timeout)
            out.append(
                {
                    'address': t.address,
                    'pid': int(i.pid),
                    'incarnation': i.incarnation,
                    'num_workers': int(i.num_workers),
                    'requests': int(i.requests),
                    'streams': int(i.streams),
                    'sessions': int(i.sessions),
                    'values': int(i.values),
                }
            )
        return out

    def stats(self) -> Dict[str, Any]:
        """The group's counters: what every service holds (``{'services': info()}``)."""
        return {'services': self.info()}

    def close(self) -> None:
        """Closes every stream and the channels made here. Idempotent."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
        _close_all(self.handles, self.targets)
        if hasattr(self, '_finalizer'):
            self._finalizer.detach()

    def __enter__(self) -> 'RemoteServices':
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _close_all(handles: List[RemoteWorkerHandle], targets: List[_Target]) -> None:
    for h in handles:
        try:
            h.close()
        except Exception:  # pragma: no cover - closing never fails
            log.exception('closing a stream failed')
    for t in targets:
        if t.channel is not None:
            t.channel.close()
            t.channel = None


def _watch_requests(ref: Any) -> None:
    """Fails a stream whose oldest request waits past `request_timeout` (4 checks a second)."""
    while True:
        time.sleep(0.25)
        services = ref()
        if services is None or services.closed:
            return
        timeout = services.request_timeout
        handles = list(services.handles)
        del services
        if timeout is None:
            continue
        now = time.monotonic()
        for h in handles:
            stream = h.stream
            if stream is None:
                continue
            with stream.cond:
                call = stream.inflight[0] if stream.inflight else None
            if call is None or now - call.sent_at <= timeout:
                continue
            addr, op, age = h.address, call.op, now - call.sent_at
            log.warning(
                'the executor service at %s did not answer %s within request_timeout=%s s',
                addr,
                op,
                timeout,
            )
            stream.fail(
                lambda c, h=h, addr=addr, op=op, age=age: E.WorkerTimeoutError(
                    f'the executor service at {addr} (worker {h.slot}) did not answer {op} within '
                    f'request_timeout={timeout} s; its stream was cancelled and its values are lost: '
                    'run the computation again (execution_context(factory, retries=N) does)',
                    worker_id=h.worker_id,
                    op=c.op,
                    seconds=round(age, 3),
                    reason='timeout',
                )
            )
            if stream.call is not None:
                try:
                    stream.call.cancel()
                except Exception:  # pragma: no cover - an ended call
                    pass
