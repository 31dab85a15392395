"""The results directory's file writes: JSON documents, JSON lines, appended lines.

Every file of a results directory is written atomically through the one
writer of the project, `simharness.atomic` (temp file, fsync, ``os.replace``;
an `OSError` names the final path; the old file is kept), re-exported here
(`atomic_open`, `write_text`, `write_bytes`, `is_temp_file`). This module adds
strict JSON (`jsonable`, `dumps_json`, `write_json`, `write_jsonl`) and
`append_jsonl`, the one write that appends instead of replacing.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Dict, List, Union

from simharness.atomic import (
    TEMP_SUFFIX,
    PathLike,
    atomic_open,
    is_temp_file,  # noqa: F401
    raise_naming,
    write_bytes,
    write_text,
)

__all__ = [
    'TEMP_SUFFIX',
    'append_jsonl',
    'atomic_open',
    'dumps_json',
    'is_temp_file',
    'jsonable',
    'write_bytes',
    'write_json',
    'write_jsonl',
    'write_text',
]


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
        raise_naming(e, p)
    try:
        try:
            os.write(fd, line)
            os.fsync(fd)
        except OSError as e:
            raise_naming(e, p)
    finally:
        os.close(fd)
    return p


def read_jsonl(path: PathLike) -> List[Dict[str, Any]]:
    """The parseable object rows of a JSONL file (`append_jsonl`'s): a torn last line, a
    non-object line or a missing file gives no row."""
    rows: List[Dict[str, Any]] = []
    try:
        text = Path(path).read_text(encoding='utf-8')
    except OSError:
        return rows
    for line in text.splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows
