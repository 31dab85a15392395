"""Finding TFF's published data files in a local cache directory; nothing is downloaded.

TFF's loaders download ``<name>.lzma`` from Google Cloud Storage into
``cache_dir`` (default ``~/.tff``) and decompress it. Ours only look: the
decompressed file, or its ``.lzma`` next to it (then decompressed in place),
else a `DatasetFileNotFoundError` naming the path expected and where TFF
publishes the file.
"""

from __future__ import annotations

import lzma
import os
import shutil
import tempfile
from typing import Optional

from simharness.errors import SimharnessValueError

__all__ = ['DatasetFileNotFoundError', 'TFF_DATASETS_URL', 'default_cache_dir', 'get_local_file']

#: Where TFF publishes its data sets (for the error message).
TFF_DATASETS_URL = 'https://storage.googleapis.com/tff-datasets-public/'


class DatasetFileNotFoundError(SimharnessValueError):
    """A data set's file is not in the cache directory (simharness downloads nothing)."""

    def __init__(self, message: str, *, path: str = ''):
        super().__init__(message)
        self.path = path


def default_cache_dir() -> str:
    """``~/.tff``, TFF's default cache directory."""
    return os.path.join(os.path.expanduser('~'), '.tff')


def get_local_file(filename: str, cache_dir: Optional[str] = None) -> str:
    """The path of `filename` in `cache_dir`, decompressing ``filename.lzma`` if only it is there.

    Raises:
        DatasetFileNotFoundError: neither file is there.
    """
    directory = os.path.expanduser(str(cache_dir)) if cache_dir is not None else default_cache_dir()
    path = os.path.join(directory, filename)
    if os.path.isfile(path):
        return path
    compressed = path + '.lzma'
    if os.path.isfile(compressed):
        fd, tmp = tempfile.mkstemp(dir=directory, prefix='.' + filename)
        try:
            with os.fdopen(fd, 'wb') as out, lzma.open(compressed, 'rb') as src:
                shutil.copyfileobj(src, out, 1 << 20)
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        return path
    raise DatasetFileNotFoundError(
        f'expected the data file {path} (or {compressed}); simharness downloads nothing: fetch '
        f'{TFF_DATASETS_URL}{filename}.lzma into {directory} (and decompress it, or leave the '
        '.lzma there), or pass cache_dir= where the file is',
        path=path,
    )
