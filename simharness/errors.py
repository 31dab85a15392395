"""The one error tree of simharness.

Every error raised on purpose by the library derives from `SimharnessError`.
User mistakes also derive from the matching builtin (`TypeError`,
`ValueError`) so that ``except TypeError`` keeps working for TFF users.
Errors carry their facts as attributes and survive pickling (they cross
process boundaries from the workers).
"""

from __future__ import annotations

from typing import Any, Optional


class SimharnessError(Exception):
    """Base class of every error raised on purpose by simharness."""

    def __reduce__(self):
        # Exceptions with keyword-only constructors do not pickle by default;
        # rebuild from the message and restore the attribute dict.
        return (_rebuild_error, (type(self), self.args, self.__dict__))


def _rebuild_error(cls, args, state):
    err = cls.__new__(cls)
    Exception.__init__(err, *args)
    err.__dict__.update(state)
    return err


def at_client(err: BaseException, index: int) -> BaseException:
    """`err` (raised for one client's value) saying which client: its message starts with
    ``client <index>:`` and its `client` attribute is `index`, the client's position in
    the list the program passed. An error that already names a client (by its position
    in a part of that list) is renamed: `index` is then the part's start plus that
    position. TensorFlow's errors (``tf.errors.OpError``: the message in its `message`)
    keep their class, with their message cut to what concerns the user (`tf_error_text`).
    Returns `err` itself."""
    state = err.__dict__
    if 'client' in state:
        index += int(state['client'])
        detail = state.get('client_detail', '')
    else:
        if _is_tf_error(err):
            detail = tf_error_text(str(getattr(err, 'message', '')))
        else:
            detail = str(err.args[0]) if err.args else ''
        state['client_detail'] = detail
    state['client'] = index
    text = f'client {index}: {detail}'
    if _is_tf_error(err):
        state['_message'] = text  # what TF's `message` and str() read
    else:
        err.args = (text,) + tuple(err.args[1:])
    return err


def _is_tf_error(err: BaseException) -> bool:
    return '_message' in err.__dict__ and type(err).__module__.startswith('tensorflow.')


#: Lines of TensorFlow's runtime errors that say where in a graph, not what went wrong.
_TF_NOISE = (
    'Graph execution error',
    'Detected at node',
    '<stack traces unavailable>',
    '[[{{node',
    '[[',
)


def tf_error_text(message: str) -> str:
    """What a TensorFlow runtime error says to a user, in one line: its message without
    the graph-location lines (``Graph execution error:``, ``Detected at node ...``,
    ``[[{{node ...}}]]``) and the function name (``[Op:__inference_...]``)."""
    lines = message.splitlines()
    for marker in ('<stack traces unavailable>', "Node: '"):  # the end of the graph's traceback
        at = [i for i, line in enumerate(lines) if line.strip().startswith(marker)]
        if at:
            lines = lines[at[-1] + 1 :]
            break
    keep = []
    for line in lines:
        line = line.split(' [Op:__inference')[0].strip()
        if line and not line.startswith(_TF_NOISE):
            keep.append(line)
    return ' '.join(keep) or message.strip()


class RetryableError(SimharnessError):
    """Marker for transient failures: running the computation again may work."""


class SimharnessTypeError(SimharnessError, TypeError):
    """A value or computation does not have the type that was expected."""

    def __init__(self, message: str, *, expected: Any = None, actual: Any = None):
        super().__init__(message)
        self.expected = expected
        self.actual = actual


class SimharnessValueError(SimharnessError, ValueError):
    """A value is of the right type but not acceptable (out of range, ...)."""


class UnknownClientError(SimharnessValueError, KeyError):
    """A client id that a `ClientData` does not have: a `ValueError` (TFF's `ClientData`,
    `SqlClientData`, `FilePerUserClientData` raise one) and a `KeyError` (TFF's
    `TestClientData` / `FromTensorSlicesClientData` do), so that either ``except`` works."""

    __str__ = Exception.__str__  # the message as given (a KeyError's str would quote it)


class DeviceNotFoundError(SimharnessValueError):
    """A device was asked for that this machine does not have.

    Attributes:
        requested: the user's device choice, as given.
        missing: the GPU ids asked for but not found.
        found: the GPU ids found.
        checked: how they were looked for (environment, nvidia-smi, ...).
    """

    def __init__(
        self,
        message: str,
        *,
        requested: Any = None,
        missing: Any = (),
        found: Any = (),
        checked: str = '',
    ):
        super().__init__(message)
        self.requested = requested
        self.missing = tuple(missing)
        self.found = tuple(found)
        self.checked = checked


class CardinalityError(SimharnessValueError):
    """The number of clients implied by arguments is inconsistent."""

    def __init__(
        self, message: str, *, expected: Optional[int] = None, actual: Optional[int] = None
    ):
        super().__init__(message)
        self.expected = expected
        self.actual = actual


class ExecutorClosedError(SimharnessError, RuntimeError):
    """An executor or pool was used after `close()`."""


class WorkerError(SimharnessError, RuntimeError):
    """A worker process reported an error while running a request.

    The worker's traceback text is kept in `remote_traceback` and chained as
    ``__cause__`` when the error is re-raised in the driver.
    """

    def __init__(
        self,
        message: str,
        *,
        worker_id: Optional[int] = None,
        pid: Optional[int] = None,
        remote_traceback: str = '',
    ):
        super().__init__(message)
        self.worker_id = worker_id
        self.pid = pid
        self.remote_traceback = remote_traceback


class WorkerCrashedError(RetryableError, RuntimeError):
    """A worker process died while the driver waited on it.

    Attributes:
        worker_id: index of the worker in its pool.
        pid: process id of the dead worker.
        exitcode: exit code (>= 0) or minus the signal number (< 0), as in
            `multiprocessing.Process.exitcode`.
        likely_cause: a human-readable guess (killed, segfault, out of memory).
    """

    def __init__(
        self,
        message: str,
        *,
        worker_id: Optional[int] = None,
        pid: Optional[int] = None,
        exitcode: Optional[int] = None,
        likely_cause: str = '',
    ):
        super().__init__(message)
        self.worker_id = worker_id
        self.pid = pid
        self.exitcode = exitcode
        self.likely_cause = likely_cause


class ServiceUnavailableError(WorkerCrashedError):
    """A remote executor service is unreachable, or its stream broke (retryable).

    Attributes:
        address: the service's address (``host:port``).
        status: the gRPC status code's name (``UNAVAILABLE``, ...).
    """

    def __init__(
        self, message: str, *, address: str = '', status: str = '', worker_id: Optional[Any] = None
    ):
        super().__init__(message, worker_id=worker_id)
        self.address = address
        self.status = status


class ServiceAuthenticationError(SimharnessError, PermissionError):
    """A remote executor service refused the driver's token (or TLS identity)."""

    def __init__(self, message: str, *, address: str = ''):
        super().__init__(message)
        self.address = address


class WorkerStartError(SimharnessError, RuntimeError):
    """A worker process could not start (bad device, import error, ...)."""

    def __init__(
        self, message: str, *, worker_id: Optional[int] = None, remote_traceback: str = ''
    ):
        super().__init__(message)
        self.worker_id = worker_id
        self.remote_traceback = remote_traceback


class ConfigError(SimharnessError, ValueError):
    """A configuration key has a value that is not allowed."""

    def __init__(self, message: str, *, key: str = '', value: Any = None):
        super().__init__(message)
        self.key = key
        self.value = value


class RunInProgressError(SimharnessError, RuntimeError):
    """Another run holds the run directory's lock: a second run of it is refused
    before it touches any of the directory's files.

    Attributes:
        run_dir: the run directory (a str).
        pid: the process holding the lock, when it could be read (else None).
        host: the host name of that process, when it could be read.
    """

    def __init__(
        self,
        message: str,
        *,
        run_dir: str = '',
        pid: Optional[int] = None,
        host: Optional[str] = None,
    ):
        super().__init__(message)
        self.run_dir = run_dir
        self.pid = pid
        self.host = host


class ProtocolError(SimharnessError, RuntimeError):
    """A message on the worker seam is malformed, of another protocol version, or refused."""


class WorkerLostError(RetryableError, RuntimeError):
    """A worker no longer holds what a request needs (it was restarted, or its session is gone).

    Running the computation again rebuilds the worker's state.
    """

    def __init__(self, message: str, *, worker_id: Optional[int] = None, pid: Optional[int] = None):
        super().__init__(message)
        self.worker_id = worker_id
        self.pid = pid


class WorkerTimeoutError(RetryableError, RuntimeError):
    """A worker did not answer in time, or made no progress (stopped, deadlocked).

    The worker is killed (and replaced on next use).

    Attributes:
        worker_id: index of the worker in its pool.
        pid: its process id.
        op: the operation it was running.
        seconds: how long the driver waited.
        reason: 'timeout' (the request deadline passed), 'stopped' (the
            process was stopped, e.g. SIGSTOP) or 'no progress' (no CPU time
            used while the request was in flight).
    """

    def __init__(
        self,
        message: str,
        *,
        worker_id: Optional[int] = None,
        pid: Optional[int] = None,
        op: str = '',
        seconds: float = 0.0,
        reason: str = '',
    ):
        super().__init__(message)
        self.worker_id = worker_id
        self.pid = pid
        self.op = op
        self.seconds = seconds
        self.reason = reason


class NoTypeSignatureError(SimharnessTypeError, AttributeError):
    """A polymorphic computation (one traced per argument type) was asked its type
    signature: a `TypeError`, and an `AttributeError` as in TFF (where such a function has
    no ``type_signature``), so that ``hasattr(comp, 'type_signature')`` is False."""


class SimharnessAttributeError(SimharnessError, AttributeError):
    """A struct (type, value or traced value) has no element of that name (TFF: AttributeError)."""


class EagerModeError(SimharnessError, RuntimeError):
    """An eager-only object was created outside eager mode (TFF: RuntimeError)."""


class MissingDependencyError(SimharnessError, ImportError):
    """An optional dependency (an extra such as ``simharness[ray]``) is not installed."""


class ContextError(SimharnessTypeError, RuntimeError):
    """An intrinsic was called outside a federated computation (TFF: `ContextError`, a
    RuntimeError; a TypeError here too, as simharness raised before)."""


class OversubscribedWarning(UserWarning):
    """More worker processes than the CPU cores this process may use: the workers share
    them (slower rounds, the same results)."""
