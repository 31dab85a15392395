"""External data: the `Data` building block's URIs, read from the executor's own filesystem.

TFF's `Data(uri, type)` building block names data the runtime holds; the
driver ships only the reference. `EagerTFExecutor` resolves it where it runs
(the driver's threads, a worker process, a remote executor service), so a
service or worker reads its clients' data locally.

URI format::

    npz:<path>                 every array of an .npz file
    npz:<path>?keys=x,y        only these arrays, in this order

``<path>`` is percent-encoded as in a URL (``%20`` for a space). A relative
path is resolved against ``$SIMHARNESS_DATA_DIR`` (``simharness serve
--data-dir DIR`` sets it) or, without it, the working directory. The
building block's type says what the arrays become:

* a `SequenceType` (a client's dataset): the arrays, sliced along their first
  axis (all the same length), give the elements; an element type that is a
  named struct takes the arrays of its names (so ``<x=float32[2],y=int32>*``
  reads arrays ``x`` and ``y``), an unnamed struct takes them in order
  (`keys` or the file's order), a tensor type takes the one array;
* a `StructType` of tensors: the arrays themselves, likewise;
* a `TensorType`: the one array.

Dtypes must match the type exactly and shapes must fit it (a `TypeError`
naming the URI, the array and both types); a missing file or array is a
`ValueError`. Typical use: one file per client, a computation over
``{T*}@CLIENTS`` called with ``[Data(f'npz:clients/{cid}.npz', T*) for cid in
ids]`` (see `client_data_blocks`).

Reads only files; imports no TensorFlow (the executor turns columns into a
dataset).
"""

from __future__ import annotations

import collections
import os
import urllib.parse
from pathlib import Path
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from simharness.core import types as T
from simharness.core.building_blocks import Data
from simharness.data.files import HEADER_LOCK
from simharness.errors import SimharnessTypeError, SimharnessValueError

SCHEME = 'npz'
DATA_DIR_ENV = 'SIMHARNESS_DATA_DIR'


def parse_uri(uri: str) -> Tuple[Path, Optional[List[str]]]:
    """(path, keys or None) of an ``npz:`` URI; `ValueError` for anything else."""
    if not isinstance(uri, str):
        raise SimharnessTypeError(
            f'a Data URI must be a str, got {type(uri).__name__}', expected=str, actual=type(uri)
        )
    scheme, sep, rest = uri.partition(':')
    if not sep or scheme != SCHEME:
        raise SimharnessValueError(
            f'Data URI {uri!r} is not understood: simharness reads "npz:<path>" (optionally '
            '"?keys=a,b"); see simharness.data.uri'
        )
    path_part, _, query = rest.partition('?')
    if path_part.startswith('//'):  # npz:///abs/path (URL style)
        path_part = path_part[2:]
    path_text = urllib.parse.unquote(path_part)
    if not path_text:
        raise SimharnessValueError(f'Data URI {uri!r} names no file')
    keys = None
    if query:
        params = urllib.parse.parse_qs(query, keep_blank_values=True)
        unknown = sorted(set(params) - {'keys'})
        if unknown:
            raise SimharnessValueError(
                f'Data URI {uri!r}: unknown parameter(s) {unknown}; only "keys" is understood'
            )
        keys = [k for k in ','.join(params['keys']).split(',') if k]
        if not keys:
            raise SimharnessValueError(f'Data URI {uri!r}: "keys=" names no array')
    path = Path(path_text)
    if not path.is_absolute():
        path = Path(os.environ.get(DATA_DIR_ENV) or os.getcwd()) / path
    return path, keys


def make_uri(path: Any, keys: Optional[Sequence[str]] = None) -> str:
    """The ``npz:`` URI of `path` (and `keys`)."""
    uri = f'{SCHEME}:' + urllib.parse.quote(os.fspath(path))
    if keys:
        uri += '?keys=' + ','.join(urllib.parse.quote(k, safe='') for k in keys)
    return uri


def client_data_blocks(
    directory: Any, client_ids: Sequence[str], type_spec: Any, keys: Optional[Sequence[str]] = None
) -> List[Any]:
    """``Data`` blocks of ``<directory>/<client id>.npz``, one per client (relative paths stay
    relative: each executor resolves them against its own data directory)."""
    t = T.to_type(type_spec)
    return [Data(make_uri(Path(directory) / f'{cid}.npz', keys), t) for cid in client_ids]


def _load(
    uri: str, path: Path, keys: Optional[List[str]]
) -> 'collections.OrderedDict[str, np.ndarray]':
    try:
        with HEADER_LOCK, np.load(path, allow_pickle=False) as z:
            names = list(z.files)
            wanted = keys if keys is not None else names
            missing = [k for k in wanted if k not in names]
            if missing:
                raise SimharnessValueError(
                    f'Data URI {uri!r}: {path} has no array(s) {missing}; it has {names}'
                )
            return collections.OrderedDict((k, np.asarray(z[k])) for k in wanted)
    except FileNotFoundError:
        raise SimharnessValueError(
            f'Data URI {uri!r}: no file {path} on this machine '
            f'(relative paths resolve against ${DATA_DIR_ENV} or the '
            'working directory)'
        ) from None
    except (OSError, ValueError) as e:
        if isinstance(e, SimharnessValueError):
            raise
        raise SimharnessValueError(f'Data URI {uri!r}: cannot read {path} as .npz: {e}') from None


def _check(uri: str, name: str, a: np.ndarray, t: Any, rows: bool) -> np.ndarray:
    if not isinstance(t, T.TensorType):
        raise SimharnessTypeError(
            f'Data URI {uri!r}: array {name!r} cannot give a value of type '
            f'{t} (only tensors come from arrays)',
            expected=t,
        )
    if a.dtype != np.dtype(t.dtype):
        raise SimharnessTypeError(
            f'Data URI {uri!r}: array {name!r} has dtype {a.dtype}, the type asks for {t}',
            expected=t,
            actual=str(a.dtype),
        )
    shape = a.shape[1:] if rows else a.shape
    if rows and a.ndim == 0:
        raise SimharnessTypeError(
            f'Data URI {uri!r}: array {name!r} is a scalar; a sequence '
            'needs arrays with a first (example) axis',
            expected=t,
        )
    if t.shape is not None and (
        len(shape) != len(t.shape) or any(d is not None and d != s for d, s in zip(t.shape, shape))
    ):
        what = 'elements' if rows else 'array'
        raise SimharnessTypeError(
            f'Data URI {uri!r}: array {name!r} has {what} of shape '
            f'{tuple(shape)}, the type asks for {t}',
            expected=t,
            actual=tuple(shape),
        )
    return a


def _pick(uri: str, arrays: 'collections.OrderedDict[str, np.ndarray]', t: Any, rows: bool) -> Any:
    """Arrays arranged as type `t` (columns of a sequence's elements when `rows`)."""
    if isinstance(t, T.TensorType):
        if len(arrays) != 1:
            raise SimharnessTypeError(
                f'Data URI {uri!r} holds arrays {list(arrays)}; a {t} takes exactly one (name it '
                'with "?keys=")',
                expected=t,
            )
        ((name, a),) = arrays.items()
        return _check(uri, name, a, t, rows)
    if not isinstance(t, T.StructType):
        raise SimharnessTypeError(f'Data URI {uri!r} cannot give a value of type {t}', expected=t)
    names = list(t.names)
    if all(n is not None for n in names):
        missing = [n for n in names if n not in arrays]
        if missing:
            raise SimharnessValueError(
                f'Data URI {uri!r} has no array(s) {missing} for {t}; it has {list(arrays)}'
            )
        return collections.OrderedDict(
            (n, _check(uri, n, arrays[n], et, rows)) for n, et in t.items()
        )
    if len(arrays) != len(names):
        raise SimharnessTypeError(
            f'Data URI {uri!r} holds {len(arrays)} arrays, {t} takes {len(names)}', expected=t
        )
    return tuple(_check(uri, k, a, et, rows) for (k, a), et in zip(arrays.items(), t))


def resolve(uri: str, type_spec: Any) -> Any:
    """What `uri` holds, as type `type_spec` (see the module docstring).

    Returns:
      For a `SequenceType`: the element columns (an array, an OrderedDict
      or a tuple of arrays of equal length) to slice into a dataset; else
      the value (an array, an OrderedDict or a tuple of arrays).

    Raises:
      SimharnessValueError: a malformed URI, a missing file or array.
      SimharnessTypeError: the arrays do not fit the type.
    """
    t = T.to_type(type_spec)
    path, keys = parse_uri(uri)
    arrays = _load(uri, path, keys)
    if isinstance(t, T.SequenceType):
        cols = _pick(uri, arrays, t.element, rows=True)
        leaves = (
            [cols]
            if isinstance(cols, np.ndarray)
            else list(cols.values() if isinstance(cols, dict) else cols)
        )
        lengths = {a.shape[0] for a in leaves}
        if len(lengths) > 1:
            raise SimharnessValueError(
                f'Data URI {uri!r}: the arrays of a sequence must have '
                f'the same length, got {sorted(lengths)}'
            )
        return cols
    return _pick(uri, arrays, t, rows=False)
