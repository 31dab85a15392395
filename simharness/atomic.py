"""Atomic file writes: a reader (or a crash) never sees half a file.

::

    atomic_open(path) / write_text / write_bytes        atomic_path(path)
        -> hidden temp file '.<name>.<random>.tmp' in the same directory
        -> write (to the open file)                     -> the caller writes the temp path
        -> flush, fsync                                    (SQLite), then fsync
        -> os.replace(temp, path)          (atomic on POSIX and Windows)
        on any exception (KeyboardInterrupt included, and a signal's exception
        wherever it lands) the temp file is removed

The one writer of every file simharness makes whole (results directories,
client .npz files, benchmark history, release CSVs, SQLite client data). An
`OSError` on the way (a full disk: ENOSPC, a read-only or unwritable
directory: EROFS, EACCES) is raised again with the *final* path as its
``filename``, e.g. ``[Errno 28] No space left on device: '.../metrics.jsonl'``;
the previous file at that path, if any, is left as it was. The file gets a
new file's usual mode (0666 less the umask).

It imports nothing of simharness: every layer may use it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path
from typing import IO, Any, Iterator, NoReturn, Optional, Tuple, Union

PathLike = Union[str, 'os.PathLike[str]']

#: Suffix of the temporary files (`is_temp_file` recognises them).
TEMP_SUFFIX = '.tmp'

__all__ = [
    'TEMP_SUFFIX',
    'atomic_open',
    'atomic_path',
    'is_temp_file',
    'raise_naming',
    'write_bytes',
    'write_text',
]


@contextlib.contextmanager
def _replacing(target: Path) -> Iterator[Tuple[int, str]]:
    """A new temp file beside `target` (its open fd and its path), moved onto `target` when
    the block exits normally and removed otherwise.

    The temp file's name is chosen before the file exists and the one ``try`` covers its
    creation, so an exception raised at any point (a signal's, e.g. the CLI's SIGTERM,
    can land between any two bytecodes) leaves no file behind. ``os.open`` with mode 0666
    gives a new file's usual mode (0666 less the umask).
    """
    tmp = str(target.parent / f'.{target.name}.{secrets.token_hex(8)}{TEMP_SUFFIX}')
    try:
        yield os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666), tmp
        os.replace(tmp, target)
    except BaseException as e:
        if not isinstance(e, FileExistsError):  # (a name taken by another writer: not ours)
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        if isinstance(e, OSError):
            raise_naming(e, target)
        raise


@contextlib.contextmanager
def atomic_open(
    path: PathLike, mode: str = 'w', *, newline: Optional[str] = None
) -> Iterator[IO[Any]]:
    """Opens a temporary file that replaces `path` when the block exits normally.

    Args:
        path: the final path; its directory must exist.
        mode: ``'w'`` (text, UTF-8) or ``'wb'``.
        newline: text mode's `newline` (``''`` for the csv module).

    Yields:
        The open temporary file.
    """
    if mode not in ('w', 'wb'):
        raise ValueError(f"mode must be 'w' or 'wb', got {mode!r}")
    with _replacing(Path(path)) as (fd, _):
        try:
            f: IO[Any] = (
                os.fdopen(fd, 'w', encoding='utf-8', newline=newline)
                if mode == 'w'
                else os.fdopen(fd, 'wb')
            )
        except BaseException:
            with contextlib.suppress(OSError):  # (a file object made and lost closed it)
                os.close(fd)
            raise
        with f:
            yield f
            f.flush()
            os.fsync(f.fileno())


@contextlib.contextmanager
def atomic_path(path: PathLike) -> Iterator[Path]:
    """A temporary path that replaces `path` when the block exits normally.

    For writers that open the file themselves (SQLite): the temp file exists
    (empty) when the block starts; whatever the block leaves there is synced
    to disk and moved onto `path`. Its directory must exist.
    """
    with _replacing(Path(path)) as (fd, tmp):
        os.close(fd)
        yield Path(tmp)
        sync = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(sync)
        finally:
            os.close(sync)


def raise_naming(error: OSError, target: Path) -> NoReturn:
    """Raises `error` again naming `target` (same errno, so the same OSError subclass)."""
    if error.errno is None or error.filename == str(target):
        raise error
    raise OSError(error.errno, error.strerror or str(error), str(target)) from error


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


def is_temp_file(path: PathLike) -> bool:
    """Whether `path` is a temporary file left by `atomic_open` / `atomic_path`."""
    name = Path(path).name
    return name.startswith('.') and name.endswith(TEMP_SUFFIX)
