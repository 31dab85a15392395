"""Atomic file writes: a reader (or a crash) never sees half a file.

::

    write_text / write_bytes / write_json(path, ...)
        -> hidden temp file '.<name>.<random>.tmp' in the same directory
        -> write, flush, fsync
        -> os.replace(temp, path)          (atomic on POSIX and Windows)
        on any exception (KeyboardInterrupt included) the temp file is removed

Every file of a results directory is written through these functions. An
`OSError` on the way (a full disk: ENOSPC, a read-only or unwritable
directory: EROFS, EACCES) is raised again with the *final* path as its
``filename``, e.g. ``[Errno 28] No space left on device: '.../metrics.jsonl'``;
the previous file at that path, if any, is left as it was.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
from pathlib import Path
from typing import IO, Any, Iterator, NoReturn, Union

PathLike = Union[str, 'os.PathLike[str]']

#: Suffix of the temporary files (`is_temp_file` recognises them).
TEMP_SUFFIX = '.tmp'


@contextlib.contextmanager
def atomic_open(path: PathLike, mode: str = 'w') -> Iterator[IO[Any]]:
    """Opens a temporary file that replaces `path` when the block exits normally.

    Args:
        path: the final path; its directory must exist.
        mode: ``'w'`` (text, UTF-8) or ``'wb'``.

    Yields:
        The open temporary file.
    """
    if mode not in ('w', 'wb'):
        raise ValueError(f"mode must be 'w' or 'wb', got {mode!r}")
    target = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f'.{target.name}.',
                                   suffix=TEMP_SUFFIX)
    except OSError as e:
        _raise_naming(e, target)
    try:
        try:
            os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give a normal file's mode
            f: IO[Any] = (os.fdopen(fd, 'w', encoding='utf-8') if mode == 'w'
                          else os.fdopen(fd, 'wb'))
        except BaseException:
            os.close(fd)
            raise
        with f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError):
            _raise_naming(e, target)
        raise


def _raise_naming(error: OSError, target: Path) -> NoReturn:
    """Raises `error` again naming `target` (same errno, so the same OSError subclass)."""
    if error.errno is None or error.filename == str(target):
        raise error
    raise OSError(error.errno, error.strerror or str(error), str(target)) from error


def _umask() -> int:
    """The process umask, read without changing it (Linux), else the usual 022."""
    try:
        with open('/proc/self/status', encoding='ascii') as f:
            for line in f:
                if line.startswith('Umask:'):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def write_text(path: PathLike, text: str) -> Path:
    """Writes `text` (UTF-8) to `path` atomically; returns the path."""
    with atomic_open(path, 'w') as f:
        f.write(text)
    return Path(path)


def write_bytes(path: PathLike, data: bytes) -> Path:
    """Writes `data` to `path` atomically; returns the path."""
    with atomic_open(path, 'wb') as f:
        f.write(data)
    return Path(path)


def jsonable(value: Any) -> Any:
    """`value` with non-finite floats as None and numpy scalars as Python ones."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if hasattr(value, 'item') and callable(value.item) and not isinstance(value, (str, bytes)):
        try:
            value = value.item()
        except (TypeError, ValueError):
            pass
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def dumps_json(value: Any, indent: Union[int, None] = 2) -> str:
    """Strict JSON (no NaN) of `value` after `jsonable`."""
    return json.dumps(jsonable(value), indent=indent, allow_nan=False, sort_keys=False)


def write_json(path: PathLike, value: Any) -> Path:
    """Writes `value` as indented JSON to `path` atomically; returns the path."""
    return write_text(path, dumps_json(value) + '\n')


def write_jsonl(path: PathLike, rows: Any) -> Path:
    """Writes one compact JSON object per line to `path` atomically; returns the path."""
    return write_text(path, ''.join(dumps_json(r, indent=None) + '\n' for r in rows))


def append_jsonl(path: PathLike, row: Any) -> Path:
    """Appends one compact JSON line to `path` and syncs it to disk; returns the path.

    The line is written with one ``write`` call and fsynced: a crash leaves
    whole lines before it, at worst a torn last line, which readers of
    metrics.jsonl skip (a resumed run rewrites the file from its checkpoint).
    """
    p = Path(path)
    line = (dumps_json(row, indent=None) + '\n').encode('utf-8')
    try:
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
    except OSError as e:
        _raise_naming(e, p)
    try:
        try:
            os.write(fd, line)
            os.fsync(fd)
        except OSError as e:
            _raise_naming(e, p)
    finally:
        os.close(fd)
    return p


def is_temp_file(path: PathLike) -> bool:
    """Whether `path` is a temporary file left by `atomic_open`."""
    name = Path(path).name
    return name.startswith('.') and name.endswith(TEMP_SUFFIX)
