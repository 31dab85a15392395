"""TFF's published data files in a local cache directory, downloaded there when missing.

As TFF's loaders: the decompressed file in ``cache_dir`` (default ``~/.tff``) is used
when there; else ``<name>.lzma`` next to it is decompressed in place; else
``<name>.lzma`` is downloaded from where TFF publishes it (Google Cloud Storage, or a
mirror the environment names: `URL_VARIABLE`) and decompressed on the fly. The file
appears whole or not at all (written under a temporary name, then renamed). A download
that fails (no network, an HTTP error, no answer within `TIMEOUT_S`) raises
`DatasetFileNotFoundError` naming the URL, the path expected and why.
"""

from __future__ import annotations

import lzma
import os
import shutil
import sys
import tempfile
import urllib.error
import urllib.request
from typing import Callable, Optional

from simharness.errors import SimharnessValueError

__all__ = [
    'DatasetFileNotFoundError',
    'TFF_DATASETS_URL',
    'URL_VARIABLE',
    'default_cache_dir',
    'get_local_file',
]

#: Where TFF publishes its data sets (`URL_VARIABLE`, when set, names a mirror instead).
TFF_DATASETS_URL = 'https://storage.googleapis.com/tff-datasets-public/'

#: The environment variable naming a mirror of `TFF_DATASETS_URL` (ending in ``/``).
URL_VARIABLE = 'SIMHARNESS_TFF_DATASETS_URL'

#: Seconds without an answer (connecting, or between two reads) before a download fails.
TIMEOUT_S = 60.0

_CHUNK = 1 << 20


class DatasetFileNotFoundError(SimharnessValueError):
    """A data set's file is not in the cache directory and could not be downloaded."""

    def __init__(self, message: str, *, path: str = ''):
        super().__init__(message)
        self.path = path


def default_cache_dir() -> str:
    """``~/.tff``, TFF's default cache directory."""
    return os.path.join(os.path.expanduser('~'), '.tff')


def get_local_file(filename: str, cache_dir: Optional[str] = None) -> str:
    """The path of `filename` in `cache_dir`: there already, decompressed from the
    ``filename.lzma`` there, or downloaded (TFF's ``filename.lzma``) and decompressed.

    Raises:
        DatasetFileNotFoundError: none of these worked (the message says why).
    """
    directory = os.path.expanduser(str(cache_dir)) if cache_dir is not None else default_cache_dir()
    path = os.path.join(directory, filename)
    if os.path.isfile(path):
        return path
    compressed = path + '.lzma'
    if os.path.isfile(compressed):
        with lzma.open(compressed, 'rb') as src:
            _write_whole(path, lambda out: shutil.copyfileobj(src, out, _CHUNK))
        return path
    url = f'{os.environ.get(URL_VARIABLE) or TFF_DATASETS_URL}{filename}.lzma'
    try:
        os.makedirs(directory, exist_ok=True)
        _download(url, path)
    except (OSError, lzma.LZMAError, EOFError) as e:  # URLError and HTTPError are OSErrors
        if isinstance(e, urllib.error.HTTPError):
            reason: object = f'HTTP {e.code} {e.reason}'
        else:
            reason = getattr(e, 'reason', None) or e
        raise DatasetFileNotFoundError(
            f'expected the data file {path} (or {compressed}), and downloading {url} failed: '
            f'{reason}. Fetch that file into {directory} (decompressed, or as the .lzma), '
            'or pass cache_dir= where the file is',
            path=path,
        ) from e
    return path


def _download(url: str, path: str) -> None:
    """`url` (an LZMA file) decompressed into `path`."""
    print(f'Downloading {url} into {os.path.dirname(path)}', file=sys.stderr, flush=True)
    decompressor = lzma.LZMADecompressor()
    with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:  # noqa: S310 (https)

        def copy(out: 'tempfile._TemporaryFileWrapper[bytes]') -> None:
            while chunk := response.read(_CHUNK):
                out.write(decompressor.decompress(chunk))
            if not decompressor.eof:
                raise EOFError(f'{url} ended before the end of its LZMA stream')

        _write_whole(path, copy)


def _write_whole(path: str, write: Callable[..., None]) -> None:
    """`write(file)` into a temporary file beside `path`, renamed to `path` once complete
    (removed if `write` raises)."""
    directory, name = os.path.split(path)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix='.' + name)
    try:
        with os.fdopen(fd, 'wb') as out:
            write(out)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
