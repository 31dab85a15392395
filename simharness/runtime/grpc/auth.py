"""gRPC transport: who may talk to a service (tokens, loopback, channel options).

A service bound beyond loopback needs a token (sent as call metadata,
``authorization: Bearer <token>``, compared in constant time by the service)
or TLS; `channel_options` caps messages and reconnect backoff on both sides.
"""

from __future__ import annotations

import ipaddress
from typing import Any, List, Optional, Tuple

from simharness import errors as E

from simharness.runtime.grpc.framing import GRPC_MAX_MESSAGE

SERVICE_NAME = 'simharness.remote.v1.ExecutorService'
EXECUTE_PATH = f'/{SERVICE_NAME}/Execute'
WORKER_METADATA = 'simharness-worker'
TOKEN_METADATA = 'authorization'


def is_loopback(host: str) -> bool:
    """Whether `host` names this machine only (127.0.0.0/8, ::1, localhost)."""
    if host.lower() == 'localhost':
        return True
    try:
        return ipaddress.ip_address(host.strip('[]')).is_loopback
    except ValueError:
        return False


def token_metadata(token: Optional[str]) -> Tuple[Tuple[str, str], ...]:
    return () if not token else ((TOKEN_METADATA, f'Bearer {token}'),)


def read_token_file(path: str) -> str:
    """The token in `path` (surrounding whitespace removed); a clear error if unusable."""
    try:
        with open(path, encoding='utf-8') as f:
            token = f.read().strip()
    except OSError as e:
        raise E.SimharnessValueError(f'cannot read the token file {path!r}: {e.strerror}') from None
    except UnicodeDecodeError:
        raise E.SimharnessValueError(f'the token file {path!r} is not UTF-8 text') from None
    check_token(token, f'the token in {path!r}')
    return token


def check_token(token: Any, what: str = 'token') -> str:
    if not isinstance(token, str):
        raise E.SimharnessTypeError(
            f'{what} must be a str, got {type(token).__name__}', expected=str, actual=type(token)
        )
    if len(token) < 16 or not token.isascii() or not token.isprintable() or ' ' in token:
        raise E.SimharnessValueError(
            f'{what} must be at least 16 printable ASCII characters without spaces (got '
            f'{len(token)} characters); make one with: python -c "import secrets; '
            'print(secrets.token_urlsafe(32))"'
        )
    return token


def channel_options(max_message: int = GRPC_MAX_MESSAGE) -> List[Tuple[str, Any]]:
    # Reconnect backoff capped at 1 s (gRPC's default grows to 120 s): a restarted
    # service is found again within a second.
    return [
        ('grpc.max_send_message_length', max_message),
        ('grpc.max_receive_message_length', max_message),
        ('grpc.initial_reconnect_backoff_ms', 100),
        ('grpc.min_reconnect_backoff_ms', 100),
        ('grpc.max_reconnect_backoff_ms', 1000),
    ]
