"""The executor service: the worker service behind gRPC (`simharness serve`).

```
ExecutorServer (grpc.server, ThreadPoolExecutor, 127.0.0.1 unless a token or TLS)
  [token interceptor: `authorization: Bearer <token>`, constant-time compare]
  ExecutorService (servicer)
    GetServiceInfo          protocol version, incarnation, worker slots, state
    Execute (one stream per driver handle and worker slot)
      stream reader thread:  Frames ─▶ MessageAssembler (size limits) ─▶ decode +
                             check_request (bad bytes: an error Response) ─▶ backend
      handler thread:        answers, in request order ─▶ Frames
      stream end:            the sessions it opened are closed (a vanished driver's
                             values are freed; keepalive pings detect a dead peer
                             within session_timeout); a stream that ends before its
                             answers (the driver died or cancelled) drops its requests
                             not yet started: the rest of a dead driver's round never runs
      shutting down:         no new call is admitted (the port closes first: a driver's
                             retry waits for a restarted service), and every call the
                             closing backend cannot answer ends UNAVAILABLE naming this
                             service (the driver's retryable ServiceUnavailableError),
                             never an error answer of the closed backend
  backend
    in-process (num_workers=0): ONE thread runs WorkerService(EagerTFExecutor)
    pool (num_workers=N):       a local WorkerPool; slot k is worker process k
```

Reads and writes: the servicer's counters and the set of sessions per
stream; all values live in the backend's `WorkerService`(s). The server
owns the backend and closes it on `stop()`.
"""

from __future__ import annotations

import concurrent.futures
import hmac
import logging
import os
import queue
import threading
import traceback
import uuid
from typing import Any, Callable, Dict, Iterator, List, Optional, Protocol, Set, Tuple

from simharness import errors as E
from simharness.runtime.grpc import auth as A
from simharness.runtime.grpc import framing as G
from simharness.runtime import protocol as P
from simharness.hosts.local_worker import create_worker_pool
from simharness.runtime.seam import DEFAULT_CLIENTS_PER_WORKER, Answer
from simharness.validation import check_int, check_number
from simharness.runtime.proto import executor_service_pb2 as pb
from simharness.runtime.proto import executor_service_pb2_grpc as pbg

log = logging.getLogger(__name__)

#: Seconds without an answer to a keepalive ping after which a driver is gone.
DEFAULT_SESSION_TIMEOUT = 60.0
_END = object()


#: An answer as it goes back on the stream: `protocol.encode_message`'s (header, buffers).
Encoded = Tuple[bytes, List[Any]]


class _Backend(Protocol):
    """What runs a service's requests: `_InProcessBackend` or `_PoolBackend`.

    `submit` always answers with a future of the encoded `Response` (an operation's failure
    is an error answer); the future fails with `_BackendClosed` only when the backend was
    closed before it could run the request.
    """

    num_workers: int

    def submit(
        self, slot: int, req: P.Request, header: bytes, buffers: List[Any]
    ) -> 'concurrent.futures.Future[Encoded]':
        """Runs `req` (whose bytes are `header`, `buffers`) on worker slot `slot`."""

    def generation(self, slot: int) -> int:
        """The generation of the worker in `slot` (it grows when the worker is replaced)."""

    def ensure_started(self, slot: int) -> None:
        """Starts the worker of `slot` unless it runs."""

    def state(self) -> Dict[str, int]:
        """Requests served, sessions open and values held, over every slot."""

    def close(self) -> None:
        """Stops the backend (its workers)."""


class _BackendClosed(Exception):
    """A backend's answer when it was closed (the service is shutting down) before it could
    run the request: the stream ends UNAVAILABLE, not with an error answer."""


def _encode_response(resp: P.Response) -> Encoded:
    try:
        return P.encode_message(resp)
    except Exception as e:
        return P.encode_message(
            P.Response(False, error=P.error_to_record(e, traceback.format_exc()), seq=resp.seq)
        )


class _InProcessBackend:
    """One thread runs every request on one `WorkerService` (an EagerTF executor here)."""

    num_workers = 1

    def __init__(self, name: str, clients_per_worker: Optional[int]):
        # Imported here (reason: only this backend runs TF in the service's process; a
        # service over worker processes never imports TensorFlow itself).
        from simharness.hosts.leaf import worker_service

        self._service = worker_service(name, None, clients_per_worker)
        self._queue: 'queue.Queue[Any]' = queue.Queue()
        self._closed = False
        self._closing_lock = threading.Lock()  # nothing is queued behind the end
        self._thread = threading.Thread(target=self._run, name='simharness-service', daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _END:
                return
            req, fut = item
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(_encode_response(self._service.handle(req)))
            except BaseException as e:  # pragma: no cover - handle() reports failures itself
                fut.set_exception(e)

    def submit(
        self, slot: int, req: P.Request, header: bytes, buffers: List[Any]
    ) -> 'concurrent.futures.Future[Encoded]':
        fut: 'concurrent.futures.Future[Encoded]' = concurrent.futures.Future()
        with self._closing_lock:
            if not self._closed:
                self._queue.put((req, fut))
                return fut
        fut.set_exception(_BackendClosed('the service is closed'))
        return fut

    def generation(self, slot: int) -> int:
        return 1

    def ensure_started(self, slot: int) -> None:
        pass

    def state(self) -> Dict[str, int]:
        s = self._service
        return {
            'requests': s.requests,
            'sessions': len(s.sessions),
            'values': sum(len(x.values) for x in list(s.sessions.values())),
        }

    def close(self) -> None:
        with self._closing_lock:
            self._closed = True
            self._queue.put(_END)
        self._thread.join(30)
        self._service.close()


class _PoolBackend:
    """A local `WorkerPool`: slot k is worker process k."""

    def __init__(self, num_workers: int, clients_per_worker: Optional[int]):
        self._pool = create_worker_pool(
            num_workers=num_workers, clients_per_worker=clients_per_worker
        )
        self._pool.start()
        self.num_workers = num_workers

    def submit(
        self, slot: int, req: P.Request, header: bytes, buffers: List[Any]
    ) -> 'concurrent.futures.Future[Encoded]':
        out: 'concurrent.futures.Future[Encoded]' = concurrent.futures.Future()
        h = self._pool.handles[slot]
        try:
            inner = h.submit(header, list(buffers), req.op, h.generation)
        except E.ExecutorClosedError as e:
            out.set_exception(_BackendClosed(str(e)))
            return out

        def done(f: 'concurrent.futures.Future[Answer]') -> None:
            if not out.set_running_or_notify_cancel():  # the stream ended: nobody waits
                return
            exc = f.exception()
            if isinstance(exc, E.ExecutorClosedError):
                # The pool was closed under the request (the service is stopping: SIGTERM
                # closes started pools at once): not an answer of the worker.
                out.set_exception(_BackendClosed(str(exc)))
                return
            resp = (
                f.result().response
                if exc is None
                else P.Response(False, error=P.error_to_record(exc), seq=req.seq)
            )
            resp.seq = req.seq
            out.set_result(_encode_response(resp))

        inner.add_done_callback(done)
        return out

    def generation(self, slot: int) -> int:
        return self._pool.handles[slot].generation

    def ensure_started(self, slot: int) -> None:
        self._pool.handles[slot].ensure_started()

    def state(self) -> Dict[str, int]:
        out = {'requests': 0, 'sessions': 0, 'values': 0}
        for s in self._pool.ping():
            for k in out:
                out[k] += (s or {}).get(k, 0)
        return out

    def close(self) -> None:
        self._pool.close()


class ExecutorService(pbg.ExecutorServiceServicer):
    """The gRPC servicer around the worker service (TFF's executor service).

    Args:
      num_workers: 0 (default): run clients in this process, on one thread;
        N >= 1: a local pool of N pinned worker processes, each a worker slot
        that hosts one block of clients.
      clients_per_worker: the most clients run through one TF call.
      max_message_bytes: the largest request (header + tensors) accepted.
      session_timeout: seconds of silence (unanswered keepalive pings) after
        which a driver counts as gone and its sessions are freed.
      name: this service's address, for error messages.
    """

    def __init__(
        self,
        num_workers: int = 0,
        *,
        clients_per_worker: Optional[int] = DEFAULT_CLIENTS_PER_WORKER,
        max_message_bytes: int = G.DEFAULT_MAX_MESSAGE_BYTES,
        chunk_bytes: int = G.CHUNK_BYTES,
        session_timeout: float = DEFAULT_SESSION_TIMEOUT,
        name: str = 'service',
    ):
        self.incarnation = uuid.uuid4().hex
        self.max_message_bytes = max_message_bytes
        self.chunk_bytes = chunk_bytes
        self.session_timeout = session_timeout
        self.name = name
        self._lock = threading.Lock()
        self._streams = 0
        self._requests = 0
        self._shutting_down = threading.Event()
        self.backend: _Backend = (
            _InProcessBackend(name, clients_per_worker)
            if num_workers == 0
            else _PoolBackend(num_workers, clients_per_worker)
        )
        self.num_workers = max(1, num_workers)

    # ------------------------------------------------------------ shutdown
    @property
    def shutting_down(self) -> bool:
        return self._shutting_down.is_set()

    def begin_shutdown(self) -> None:
        """From now on every call this service cannot answer ends UNAVAILABLE (`close`
        follows). Idempotent."""
        self._shutting_down.set()

    def _unavailable(self, context: Any, what: str = '') -> None:
        """Ends the call as UNAVAILABLE, naming this service (a transient failure: the
        driver raises its retryable ServiceUnavailableError and may retry elsewhere)."""
        import grpc

        context.abort(
            grpc.StatusCode.UNAVAILABLE,
            f'the executor service at {self.name} is shutting down{what}; the values '
            'it held are gone: run the computation again once it is back',
        )

    # ------------------------------------------------------------ RPCs
    def GetServiceInfo(self, request: Any, context: Any) -> Any:
        if self.shutting_down:
            self._unavailable(context)
        try:
            st = self.backend.state()
        except E.ExecutorClosedError:  # a pool closed under it (SIGTERM closes pools first)
            self._unavailable(context)
        with self._lock:
            streams, requests = self._streams, self._requests
        return pb.ServiceInfo(
            protocol_version=P.PROTOCOL_VERSION,
            incarnation=self.incarnation,
            num_workers=self.num_workers,
            pid=os.getpid(),
            simharness_version=_version(),
            max_message_bytes=self.max_message_bytes,
            chunk_bytes=self.chunk_bytes,
            requests=requests,
            sessions=st['sessions'],
            values=st['values'],
            streams=streams,
            session_timeout=self.session_timeout,
        )

    def Execute(self, request_iterator: Any, context: Any) -> Iterator[Any]:
        import grpc

        md = dict(context.invocation_metadata() or ())
        raw = md.get(A.WORKER_METADATA, '0')
        try:
            slot = int(raw)
            if not 0 <= slot < self.num_workers:
                raise ValueError
        except ValueError:
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f'{A.WORKER_METADATA}={raw!r}: this service has worker slots '
                f'0..{self.num_workers - 1}',
            )
        if self.shutting_down:
            self._unavailable(context)
        try:
            self.backend.ensure_started(slot)
        except E.ExecutorClosedError:
            self._unavailable(context)
        except Exception as e:
            context.abort(grpc.StatusCode.UNAVAILABLE, f'worker {slot} could not start: {e}')
        gen = self.backend.generation(slot)
        out: 'queue.Queue[Any]' = queue.Queue()
        sessions: Set[int] = set()
        pending: List['concurrent.futures.Future[Encoded]'] = []
        as_objects = [False]  # the peer's frames came as `Frame` objects: answer likewise

        def ended() -> None:
            # The RPC is over (answered, cancelled, or the peer gone): requests of this stream
            # not yet started are dropped and its sessions closed now, not after the dead
            # driver's queued work has run (the in-process backend; a worker process runs what
            # it was sent, the session close follows it).
            with self._lock:
                waiting = list(pending)
                pending.clear()
            for f in waiting:
                f.cancel()
            self._close_sessions(slot, sessions)

        context.add_callback(ended)
        reader = threading.Thread(
            target=self._read,
            args=(request_iterator, slot, out, sessions, as_objects, pending),
            name='simharness-service-stream',
            daemon=True,
        )
        with self._lock:
            self._streams += 1
        reader.start()
        try:
            seq = 0
            while True:
                item = out.get()
                if item is _END:
                    return
                if isinstance(item, tuple) and item and item[0] == 'abort':
                    context.abort(item[1], item[2])
                seq += 1
                try:
                    header, buffers = item.result()
                except concurrent.futures.CancelledError:  # the RPC ended (`ended`)
                    return
                except _BackendClosed:  # closed under the request: no answer, unavailable
                    self._unavailable(
                        context, ' (its worker was stopped while it ran a request of this stream)'
                    )
                with self._lock:
                    if pending and pending[0] is item:
                        pending.pop(0)
                if self.backend.generation(slot) != gen:
                    context.abort(
                        grpc.StatusCode.UNAVAILABLE,
                        f'worker {slot} of the executor service at {self.name} died '
                        'and was replaced; its values are gone',
                    )
                frames = G.encoded_frames(seq, header, buffers, self.chunk_bytes)
                if as_objects[0]:
                    frames = (pb.Frame.FromString(b) for b in frames)
                yield from frames
        finally:
            with self._lock:
                self._streams -= 1
            self._close_sessions(slot, sessions)

    def add_to_server(self, server: Any) -> None:
        """Registers this servicer on a `grpc.Server`: Execute carries serialized Frames as raw
        bytes (parsed by hand, one copy); `add_ExecutorServiceServicer_to_server` works too,
        through `Frame` objects."""
        import grpc

        handlers = {
            'GetServiceInfo': grpc.unary_unary_rpc_method_handler(
                self.GetServiceInfo,
                request_deserializer=pb.ServiceInfoRequest.FromString,
                response_serializer=pb.ServiceInfo.SerializeToString,
            ),
            'Execute': grpc.stream_stream_rpc_method_handler(self.Execute),
        }
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(A.SERVICE_NAME, handlers),)
        )

    # ------------------------------------------------------------ helpers
    def _read(
        self,
        frames: Any,
        slot: int,
        out: 'queue.Queue[Any]',
        sessions: Set[int],
        as_objects: List[bool],
        pending: List['concurrent.futures.Future[Encoded]'],
    ) -> None:
        """Reads one stream's requests and submits them, in order (a thread per stream)."""
        import grpc

        asm = G.MessageAssembler(self.max_message_bytes, 'the driver')
        try:
            for raw in frames:
                if isinstance(raw, pb.Frame):  # registered through the generated servicer code
                    as_objects[0] = True
                try:
                    msg = asm.feed(G.decode_frame(raw))
                except E.ProtocolError as e:
                    code = (
                        grpc.StatusCode.RESOURCE_EXHAUSTED
                        if 'limit' in str(e)
                        else grpc.StatusCode.INVALID_ARGUMENT
                    )
                    out.put(('abort', code, str(e)))
                    return
                if msg is None:
                    continue
                _, header, buffers = msg
                fut = self._submit(slot, header, buffers, sessions)
                with self._lock:
                    self._requests += 1
                    pending.append(fut)
                out.put(fut)
        except Exception as e:  # the driver went away (cancelled) or sent what gRPC refused
            log.debug('stream of worker %s ended: %s', slot, e)
        finally:
            out.put(_END)

    def _submit(
        self, slot: int, header: bytes, buffers: List[Any], sessions: Set[int]
    ) -> 'concurrent.futures.Future[Encoded]':
        try:
            req = P.check_request(P.decode_message(header, buffers))
        except Exception as e:  # bytes that are no request: an error answer, keep serving
            fut: 'concurrent.futures.Future[Encoded]' = concurrent.futures.Future()
            fut.set_result(P.encode_message(P.Response(False, error=P.error_to_record(e))))
            return fut
        if req.op == P.Op.OPEN_SESSION:
            sessions.add(req.session)
        elif req.op == P.Op.CLOSE_SESSION:
            sessions.discard(req.session)
        return self.backend.submit(slot, req, header, buffers)

    def _close_sessions(self, slot: int, sessions: Set[int]) -> None:
        with self._lock:  # once: from the RPC's end callback or the handler's exit
            closing = list(sessions)
            sessions.clear()
        for sid in closing:
            req = P.Request(P.Op.CLOSE_SESSION, sid, [])
            header, buffers = P.encode_message(req)
            try:
                self.backend.submit(slot, req, header, buffers)
            except Exception:  # the backend is closing: its sessions go with it
                pass

    def close(self) -> None:
        self.begin_shutdown()
        self.backend.close()


def _version() -> str:
    try:
        from importlib.metadata import version

        return version('simharness')
    except Exception:
        return 'unknown'


class _TokenInterceptor:
    """Refuses every call whose ``authorization`` metadata is not ``Bearer <token>``."""

    def __init__(self, token: str):
        import grpc

        self._expected = f'Bearer {token}'.encode()

        def deny_unary(request: Any, context: Any) -> Any:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, 'missing or wrong token')

        def deny_stream(request_iterator: Any, context: Any) -> Any:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, 'missing or wrong token')

        self._deny_unary = grpc.unary_unary_rpc_method_handler(deny_unary)
        self._deny_stream = grpc.stream_stream_rpc_method_handler(deny_stream)

    def intercept_service(self, continuation: Callable[[Any], Any], details: Any) -> Any:
        got = ''
        for k, v in details.invocation_metadata or ():
            if k == A.TOKEN_METADATA:
                got = v if isinstance(v, str) else v.decode('latin-1')
        if hmac.compare_digest(got.encode('utf-8', 'replace'), self._expected):
            return continuation(details)
        return self._deny_stream if details.method.endswith('/Execute') else self._deny_unary


def _make_interceptor(token: str) -> Any:
    import grpc

    class TokenInterceptor(_TokenInterceptor, grpc.ServerInterceptor):
        pass

    return TokenInterceptor(token)


class ExecutorServer:
    """A running executor service (`start_executor_service`); `stop()` ends it.

    Attributes:
      host, port: where it listens; `address` is ``host:port``.
      service: the `ExecutorService`.
    """

    def __init__(
        self,
        server: Any,
        service: ExecutorService,
        host: str,
        port: int,
        threads: Optional[concurrent.futures.ThreadPoolExecutor] = None,
    ):
        self._server = server
        self._threads = threads  # the server's handler threads: ours to end at `stop()`
        self.service = service
        self.host = host
        self.port = port
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._shutdown: Optional[threading.Event] = None  # gRPC's, once stopping began
        self._grace = 5.0

    @property
    def address(self) -> str:
        host = f'[{self.host}]' if ':' in self.host else self.host
        return f'{host}:{self.port}'

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Blocks until `stop()` (True) or `timeout` seconds (False)."""
        return self._stopped.wait(timeout)

    def begin_stop(self, grace: float = 5.0) -> None:
        """Starts stopping, without waiting: the port closes and no new call is admitted
        (drivers waiting for this address wait for its successor); calls in flight may
        finish within `grace` seconds, then end UNAVAILABLE, as does any call the closing
        backend cannot answer. Idempotent; safe in a signal handler of the main thread
        (it waits for nothing)."""
        self.service.begin_shutdown()
        if self._shutdown is None:
            self._grace = grace
            self._shutdown = self._server.stop(grace)

    def stop(self, grace: float = 5.0) -> None:
        """Stops serving (streams end), then closes the backend. Idempotent."""
        with self._lock:
            if self._stopped.is_set():
                return
            self.begin_stop(grace)
            assert self._shutdown is not None
            self._shutdown.wait(self._grace + 5)
            self.service.close()
            if self._threads is not None:
                # gRPC leaves its executor's idle threads alive until the executor is
                # collected: tell them to end now (not waiting: a handler still unwinding
                # must not hang the stop), so that nothing of a stopped service lingers.
                self._threads.shutdown(wait=False)
            self._stopped.set()

    def __enter__(self) -> 'ExecutorServer':
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def start_executor_service(
    port: int = 0,
    host: str = '127.0.0.1',
    *,
    token: Optional[str] = None,
    tls_cert: Optional[bytes] = None,
    tls_key: Optional[bytes] = None,
    num_workers: int = 0,
    clients_per_worker: Optional[int] = DEFAULT_CLIENTS_PER_WORKER,
    max_message_bytes: int = G.DEFAULT_MAX_MESSAGE_BYTES,
    session_timeout: float = DEFAULT_SESSION_TIMEOUT,
    max_streams: int = 64,
) -> ExecutorServer:
    """Starts an executor service (the Python equivalent of ``simharness serve``).

    Args:
      port: the TCP port (0: any free one; see `ExecutorServer.port`).
      host: the address to bind. Anything other than a loopback address
        requires a `token` or TLS (`tls_cert` and `tls_key`, PEM bytes).
      token: drivers must send it (``authorization: Bearer <token>``);
        compared in constant time.
      num_workers, clients_per_worker, max_message_bytes, session_timeout:
        as in `ExecutorService`.
      max_streams: the most streams (driver handles) served at once.

    Raises:
      SimharnessValueError: a non-loopback `host` without token or TLS, a
        lone cert or key, a port out of range, or a port already in use.
    """
    check_int('port', port, 0, 65535)
    check_int('num_workers', num_workers, 0)
    check_int('clients_per_worker', clients_per_worker, 1, allow_none=True)
    check_int('max_message_bytes', max_message_bytes, 1 << 20)
    check_number('session_timeout', session_timeout, greater_than=0)
    check_int('max_streams', max_streams, 1)
    if not isinstance(host, str) or not host:
        raise E.SimharnessTypeError(
            f'host must be a non-empty str, got {host!r}', expected=str, actual=type(host)
        )
    if token is not None:
        A.check_token(token)
    if (tls_cert is None) != (tls_key is None):
        raise E.SimharnessValueError(
            'TLS needs both a certificate and its key (--tls-cert and --tls-key)'
        )
    if not A.is_loopback(host) and token is None and tls_cert is None:
        raise E.SimharnessValueError(
            f'refusing to serve on {host}: a non-loopback address needs a token (--token-file) '
            'or TLS (--tls-cert/--tls-key), because whoever reaches the service runs TF graphs '
            'in it; bind 127.0.0.1 (the default) for this machine only'
        )
    import grpc

    keepalive_ms = max(1000, int(session_timeout * 500))
    options = A.channel_options() + [
        ('grpc.keepalive_time_ms', keepalive_ms),
        ('grpc.keepalive_timeout_ms', keepalive_ms),
        ('grpc.keepalive_permit_without_calls', 1),
        ('grpc.http2.max_pings_without_data', 0),
        ('grpc.http2.min_ping_interval_without_data_ms', 1000),
        ('grpc.so_reuseport', 0),
    ]
    name = f'{host}:{port}'
    service = ExecutorService(
        num_workers,
        clients_per_worker=clients_per_worker,
        max_message_bytes=max_message_bytes,
        session_timeout=session_timeout,
        name=name,
    )
    try:
        interceptors = [_make_interceptor(token)] if token is not None else []
        # Each stream holds a handler thread and a reader thread; GetServiceInfo needs one more.
        threads = concurrent.futures.ThreadPoolExecutor(
            max_workers=max_streams + 4, thread_name_prefix='simharness-grpc-server'
        )
        server = grpc.server(
            threads,
            interceptors=interceptors,
            options=options,
            maximum_concurrent_rpcs=max_streams + 4,
        )
        service.add_to_server(server)
        bind = f'[{host}]:{port}' if ':' in host else f'{host}:{port}'
        try:
            if tls_cert is not None:
                bound = server.add_secure_port(
                    bind, grpc.ssl_server_credentials([(tls_key, tls_cert)])
                )
            else:
                bound = server.add_insecure_port(bind)
        except RuntimeError as e:
            bound = 0
            log.debug('bind failed: %s', e)
        if not bound:
            raise E.SimharnessValueError(
                f'cannot listen on {bind} (in use, or not an address of this machine)'
            )
        server.start()
    except BaseException:
        service.close()
        threads.shutdown(wait=False)
        raise
    service.name = f'{host}:{bound}'
    return ExecutorServer(server, service, host, bound, threads)
