"""Security of the executor service: binds, tokens, TLS, and a peer that sends arbitrary bytes."""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import sys

import grpc
import msgpack
import numpy as np
import pytest
import tensorflow as tf

import simharness as sh
from simharness.errors import ServiceAuthenticationError
from simharness.runtime import protocol as P
from simharness.runtime.codec import Ref
from simharness.hosts.grpc_service import start_executor_service
from simharness.runtime.grpc.client import RemoteServices
from simharness.runtime.grpc.framing import GRPC_MAX_MESSAGE, frames_of
from simharness.runtime.proto import executor_service_pb2 as pb
from simharness.runtime.proto.executor_service_pb2_grpc import ExecutorServiceStub
from simharness.stacks import remote_executor_factory

pytestmark = pytest.mark.remote

TOKEN = 'correct-horse-battery-staple-0123'


@sh.federated_computation(sh.type_at_clients(tf.float32))
def total(xs):
    return sh.federated_sum(xs)


def _serves(address, **kw):
    factory = remote_executor_factory([address], connect_timeout=10, **kw)
    with factory, sh.execution_context(factory):
        return total([1.0, 2.0, 3.5]) == np.float32(6.5)


# ---------------------------------------------------------------- binds


@pytest.mark.parametrize('host', ['0.0.0.0', '::', '10.1.2.3'])
def test_non_loopback_bind_without_token_or_tls_refuses_to_start(host):
    with pytest.raises(ValueError, match=rf'refusing to serve on {host}.*token.*TLS'):
        start_executor_service(0, host)


def test_serve_cli_refuses_a_non_loopback_bind_without_token_or_tls():
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3')
    r = subprocess.run(
        [sys.executable, '-m', 'simharness.cli', 'serve', '--port', '0', '--host', '0.0.0.0'],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert r.returncode == 2
    assert 'refusing to serve on 0.0.0.0' in r.stderr and 'listening' not in r.stdout


def test_bad_tokens_are_refused_before_anything_starts(tmp_path):
    with pytest.raises(ValueError, match='at least 16'):
        start_executor_service(0, token='short')
    f = tmp_path / 'token'
    f.write_text('   \n')
    with pytest.raises(ValueError, match='at least 16'):
        remote_executor_factory(['127.0.0.1:1'], token_file=str(f))
    with pytest.raises(ValueError, match='cannot read the token file'):
        remote_executor_factory(['127.0.0.1:1'], token_file=str(tmp_path / 'missing'))
    with pytest.raises(ValueError, match='both a certificate and its key'):
        start_executor_service(0, tls_cert=b'x')


# ---------------------------------------------------------------- token and TLS


@pytest.fixture(scope='module')
def secured(tmp_path_factory):
    """A service on 0.0.0.0 with a token and TLS (a self-signed cert for localhost), hosting
    its clients in 2 local worker processes."""
    if shutil.which('openssl') is None:
        pytest.skip('openssl is needed to make a test certificate')
    from remote_services import ServiceProcess

    d = tmp_path_factory.mktemp('tls')
    cert, key, token = d / 'cert.pem', d / 'key.pem', d / 'token'
    subprocess.run(
        [
            'openssl',
            'req',
            '-x509',
            '-newkey',
            'rsa:2048',
            '-nodes',
            '-keyout',
            str(key),
            '-out',
            str(cert),
            '-days',
            '1',
            '-subj',
            '/CN=localhost',
            '-addext',
            'subjectAltName=DNS:localhost,IP:127.0.0.1',
        ],
        check=True,
        capture_output=True,
    )
    token.write_text(TOKEN + '\n')
    # With 2 local worker processes: the pool-backed service is tested here too.
    p = ServiceProcess(
        args=[
            '--host',
            '0.0.0.0',
            '--token-file',
            str(token),
            '--tls-cert',
            str(cert),
            '--tls-key',
            str(key),
            '--num-workers',
            '2',
        ]
    )
    try:
        yield f'localhost:{p.port}', cert.read_bytes(), str(token)
    finally:
        from remote_services import stop_and_check

        stop_and_check([p])


def test_the_right_token_over_tls_is_served(secured):
    address, cert, token_file = secured
    assert _serves(address, token_file=token_file, root_certificates=cert)


@sh.federated_computation(sh.type_at_clients(tf.float32))
def _mean(xs):
    return sh.federated_mean(xs)


def test_a_service_with_local_worker_processes_hosts_one_block_per_worker(secured):
    from simharness.stacks import local_executor_factory

    address, cert, token_file = secured
    xs = list(np.random.default_rng(0).normal(size=100).astype(np.float32))
    factory = remote_executor_factory([address], token_file=token_file, root_certificates=cert)
    with factory:
        with sh.execution_context(factory):
            remote = _mean(xs)
        assert factory.group.num_workers == 2  # two worker slots, one block each
        info = factory.stats()['services'][0]
        assert info['num_workers'] == 2 and info['streams'] == 2
    with sh.execution_context(local_executor_factory()):
        assert np.asarray(_mean(xs)).tobytes() == np.asarray(remote).tobytes()


@pytest.mark.parametrize('token', [None, 'wrong-token-0123456789', TOKEN[:-1] + 'X'])
def test_a_missing_or_wrong_token_is_rejected(secured, token):
    address, cert, _ = secured
    with pytest.raises(ServiceAuthenticationError, match=f'{address}.*refused') as e:
        _serves(address, token=token, root_certificates=cert)
    assert isinstance(e.value, PermissionError)


def test_plaintext_to_a_tls_service_does_not_connect(secured):
    address, _, _ = secured
    with pytest.raises(sh.errors.ServiceUnavailableError, match='unreachable'):
        with RemoteServices([address], token=TOKEN, connect_timeout=1) as s:
            s.start()


# ---------------------------------------------------------------- arbitrary bytes


def _execute(address, frames, raw=False, timeout=30):
    """Sends `frames` on one Execute stream; returns (responses, grpc status name or None)."""
    channel = grpc.insecure_channel(address)
    try:
        if raw:
            call = channel.stream_stream(
                '/simharness.remote.v1.ExecutorService/Execute',
                request_serializer=lambda b: b,
                response_deserializer=lambda b: b,
            )
        else:
            call = ExecutorServiceStub(channel).Execute
        out = []
        try:
            for r in call(iter(frames), metadata=(('simharness-worker', '0'),), timeout=timeout):
                out.append(r)
            return out, None
        except grpc.RpcError as e:
            return out, e.code().name
    finally:
        channel.close()


def _responses(frames_out):
    from simharness.runtime.grpc.framing import MessageAssembler

    asm = MessageAssembler()
    msgs = []
    for f in frames_out:
        m = asm.feed(f)
        if m is not None:
            msgs.append(P.decode_message(m[1], m[2]))
    return msgs


def test_random_bytes_on_the_tcp_port_leave_the_service_serving(remote_pair):
    address = remote_pair.addresses[0]
    host, port = address.rsplit(':', 1)
    rng = random.Random(1)
    for _ in range(50):
        with socket.create_connection((host, int(port)), timeout=5) as s:
            try:
                s.sendall(rng.randbytes(rng.randint(1, 20000)))
            except OSError:
                pass  # the service may hang up first
    assert _serves(address)


def test_random_messages_are_refused_and_the_service_keeps_serving(remote_pair):
    address = remote_pair.addresses[0]
    rng = random.Random(2)
    # Bytes that are no Frame at all (gRPC's decoding fails).
    _, status = _execute(address, [rng.randbytes(rng.randint(1, 3000)) for _ in range(5)], raw=True)
    assert status is not None
    # Frames whose message is random bytes, or random msgpack: an error Response each.
    garbage = [rng.randbytes(rng.randint(0, 5000)) for _ in range(100)]
    garbage += [
        msgpack.packb([rng.randint(-5, 100), rng.random(), 'x' * rng.randint(0, 9)])
        for _ in range(50)
    ]
    garbage += [
        msgpack.packb(msgpack.ExtType(rng.randint(0, 127), rng.randbytes(20))) for _ in range(100)
    ]
    frames = [f for k, g in enumerate(garbage) for f in frames_of(k + 1, g, [])]
    out, status = _execute(address, frames)
    assert status is None
    answers = _responses(out)
    assert len(answers) == len(garbage)
    assert all(isinstance(a, P.Response) and not a.ok for a in answers)
    names = {a.error.type_name.rsplit('.', 1)[1] for a in answers}
    assert names <= {'CodecError', 'ProtocolError'}, names
    assert _serves(address)


def test_requests_for_unknown_sessions_ids_and_ops_get_errors(remote_pair):
    address = remote_pair.addresses[0]
    reqs = [
        P.Request(P.Op.COMPUTE_MANY, 123456789, [[Ref(5)]]),  # no such session
        P.Request(P.Op.OPEN_SESSION, 77, []),
        P.Request(P.Op.COMPUTE_MANY, 77, [[Ref(5)]]),  # no such value
        P.Request(999, 77, []),  # no such op
        P.Request(P.Op.CREATE_CALL, 77, []),  # wrong arity
        P.Request(P.Op.PING, 0, [], version=P.PROTOCOL_VERSION + 1),
        P.Request(P.Op.CLOSE_SESSION, 77, []),
    ]
    frames = []
    for k, r in enumerate(reqs):
        header, buffers = P.encode_message(r)
        frames.extend(frames_of(k + 1, header, buffers))
    out, status = _execute(address, frames)
    assert status is None
    answers = _responses(out)
    oks = [a.ok for a in answers]
    assert oks == [False, True, False, False, False, False, True]
    assert 'session 123456789 is not open' in answers[0].error.message
    assert 'value 5' in answers[2].error.message
    assert 'unknown operation' in answers[3].error.message
    assert 'protocol version' in answers[5].error.message


def test_malformed_and_oversized_messages_end_the_stream_not_the_service(remote_pair):
    address = remote_pair.addresses[0]
    cases = {
        'no first frame': [pb.Frame(seq=1, data=b'x', last=True)],
        'more data than declared': [
            pb.Frame(seq=1, first=True, header_size=2, data=b'xyz', last=True)
        ],
        'ends early': [pb.Frame(seq=1, first=True, header_size=10, data=b'x', last=True)],
        'bad spec': [
            pb.Frame(
                seq=1,
                first=True,
                header_size=0,
                num_buffers=1,
                tensors=[pb.TensorSpec(dtype='<f4', shape=[3], nbytes=5)],
                last=True,
            )
        ],
        'unknown dtype': [
            pb.Frame(
                seq=1,
                first=True,
                num_buffers=1,
                tensors=[pb.TensorSpec(dtype='object', shape=[1], nbytes=8)],
                last=True,
            )
        ],
        'huge header': [pb.Frame(seq=1, first=True, header_size=1 << 62)],
        'huge tensor': [
            pb.Frame(
                seq=1,
                first=True,
                num_buffers=1,
                tensors=[pb.TensorSpec(dtype='<f8', shape=[1 << 40], nbytes=8 << 40)],
            )
        ],
        'a gRPC message over 4 MiB': [
            pb.Frame(
                seq=1,
                first=True,
                header_size=GRPC_MAX_MESSAGE + 10,
                data=b'\0' * (GRPC_MAX_MESSAGE + 10),
                last=True,
            )
        ],
    }
    for what, frames in cases.items():
        _, status = _execute(address, frames)
        assert status in ('INVALID_ARGUMENT', 'RESOURCE_EXHAUSTED'), (what, status)
    assert _serves(address)
