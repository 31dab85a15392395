"""`simharness serve`: run an executor service (the gRPC side of `remote_executor_factory`)."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
from typing import Any, Dict, Iterator, Optional

from simharness.errors import SimharnessError
from simharness.runtime.seam import DEFAULT_CLIENTS_PER_WORKER
from simharness.tfquiet import import_tensorflow, initialize_devices, quiet_stderr

SERVE_HELP = (
    "Serve a block of clients to remote drivers over gRPC (TFF's executor service): drivers "
    'connect with simharness.framework.remote_executor_factory(["HOST:PORT", ...]) or '
    'RemoteExecutor. Binds 127.0.0.1 unless --host says otherwise; any other address needs '
    '--token-file or --tls-cert/--tls-key (whoever reaches the service runs TF graphs in it). '
    'Prints "listening on HOST:PORT" when ready; SIGTERM or Ctrl-C stop it (exit 0).'
)


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser(
        'serve', help='run an executor service for remote drivers (gRPC)', description=SERVE_HELP
    )
    p.add_argument(
        '--port',
        type=int,
        required=True,
        metavar='P',
        help='TCP port (0: any free port, printed when ready)',
    )
    p.add_argument(
        '--host', default='127.0.0.1', help='address to bind (default 127.0.0.1: this machine only)'
    )
    p.add_argument(
        '--token-file',
        metavar='F',
        help='file holding the token drivers must send (>= 16 characters)',
    )
    p.add_argument('--tls-cert', metavar='C', help='PEM certificate (with --tls-key): serve TLS')
    p.add_argument('--tls-key', metavar='K', help='PEM private key of --tls-cert')
    p.add_argument(
        '--num-workers',
        type=int,
        default=0,
        metavar='N',
        help='0 (default): run clients in this process; N: a local pool of N pinned '
        'worker processes, each a worker slot hosting one block of clients',
    )
    p.add_argument(
        '--clients-per-worker',
        type=int,
        default=DEFAULT_CLIENTS_PER_WORKER,
        metavar='K',
        help=f'the most clients run through one TF call (default {DEFAULT_CLIENTS_PER_WORKER})',
    )
    p.add_argument(
        '--session-timeout',
        type=float,
        default=60.0,
        metavar='S',
        help='seconds after which a silent driver counts as gone and its values are '
        'freed (keepalive pings; default 60)',
    )
    p.add_argument(
        '--max-message-bytes',
        type=int,
        default=4 << 30,
        metavar='B',
        help='largest request accepted, tensors included (default 4 GiB)',
    )
    p.add_argument(
        '--data-dir',
        metavar='DIR',
        help='root of relative paths in Data URIs (default: the working directory)',
    )
    p.add_argument('-v', '--verbose', action='store_true', help='INFO logs and tracebacks')
    return p


def _read(path: Optional[str], what: str) -> Optional[bytes]:
    if path is None:
        return None
    with open(path, 'rb') as f:
        data = f.read()
    if not data.strip():
        raise ValueError(f'{what} {path!r} is empty')
    return data


#: Signals that stop the service (Ctrl-C, and those the CLI turns into `Terminated`).
_STOP_SIGNALS = tuple(
    getattr(signal, n) for n in ('SIGINT', 'SIGTERM', 'SIGHUP') if hasattr(signal, n)
)


@contextlib.contextmanager
def _stop_begins_at_the_signal(server: Any) -> Iterator[None]:
    """For the block: a stop signal first makes `server` stop admitting calls
    (`ExecutorServer.begin_stop`: its port closes, so a driver's retry waits for a restarted
    service instead of reaching this one), then runs the handler it replaced (the CLI's
    `Terminated`; chained to it, the worker pools' SIGTERM path, which closes them at once:
    their requests in flight end UNAVAILABLE). Previous handlers are restored at the end.
    Outside the main thread this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous: Dict[int, Any] = {}

    def handler(signum: int, frame: Any) -> None:
        try:
            server.begin_stop()
        finally:
            previous[signum](signum, frame)

    try:
        for signum in _STOP_SIGNALS:
            old = signal.getsignal(signum)
            if not callable(old):  # ignored, or the default action: left as it is
                continue
            previous[signum] = old
            signal.signal(signum, handler)
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


def main(args: argparse.Namespace) -> int:
    """Runs the service until SIGTERM / SIGINT; 0 then, 2 for bad arguments, 1 if it cannot bind."""
    # The command line imports this module for its arguments; gRPC and the service
    # (TensorFlow, for an in-process backend) load only when it serves, with TensorFlow's
    # C++ start-up lines filtered out (errors still show).
    # A service runs serialized graphs: TensorFlow without loading Keras (about half of
    # its import time; `tf.keras` and `import keras` still load it on first use).
    import_tensorflow(keras=False)
    with quiet_stderr():
        # reason: loaded only when serving (see above)
        from simharness.hosts.grpc_service import start_executor_service

        # reason: loaded only when serving (see above)
        from simharness.runtime.grpc.auth import read_token_file
    if 'tensorflow' in sys.modules:
        initialize_devices()  # the cuInit line of CPU-only machines
    if args.data_dir is not None:
        os.environ['SIMHARNESS_DATA_DIR'] = os.path.abspath(args.data_dir)
    try:
        token = read_token_file(args.token_file) if args.token_file else None
        cert = _read(args.tls_cert, '--tls-cert')
        key = _read(args.tls_key, '--tls-key')
        server = start_executor_service(
            args.port,
            args.host,
            token=token,
            tls_cert=cert,
            tls_key=key,
            num_workers=args.num_workers,
            clients_per_worker=args.clients_per_worker,
            max_message_bytes=args.max_message_bytes,
            session_timeout=args.session_timeout,
        )
    except (SimharnessError, ValueError, OSError) as e:
        print(f'error: {e}', file=sys.stderr)
        return 2
    try:
        with _stop_begins_at_the_signal(server):
            print(
                f'simharness executor service listening on {server.address} (pid '
                f'{os.getpid()}, {server.service.num_workers} worker slot(s)'
                f'{", token" if token else ""}{", TLS" if cert else ""})',
                flush=True,
            )
            while not server.wait(1.0):
                pass
    except KeyboardInterrupt:  # Ctrl-C, SIGTERM, SIGHUP: a normal stop
        print('stopping', file=sys.stderr, flush=True)
    finally:
        server.stop()
    return 0
