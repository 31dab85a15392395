"""Federated data sets read from disk.

Two layouts:

* a directory with one ``<client_id>.npz`` per client, loaded lazily: a
  client's file is read only when its arrays are asked for, so a worker
  process reads only the clients it hosts (`FileClientData.from_npz_dir`);
* one ``.npz`` or ``.csv`` file with a client-id array / column, split into
  clients in memory (`FileClientData.from_single_file`).

`save_npz_dir` writes any `ClientData` in the first layout, each file
atomically (temporary file + ``os.replace``).
"""

from __future__ import annotations

import csv
import os
import re
import struct
import threading
import zipfile
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence, Union

import numpy as np

from simharness.atomic import atomic_open
from simharness.data.client_data import (
    ArraySpec,
    ClientData,
    array_spec_of,
    check_client_arrays,
    concatenated_dataset,
    element_spec_of,
    shuffled_ids,
    slices_dataset_fn,
)
from simharness.errors import SimharnessValueError

PathLike = Union[str, os.PathLike]

# numpy parses .npy headers with `ast.literal_eval`; CPython 3.11's parser
# is not safe to call from two threads at once ("AST constructor recursion
# depth mismatch", CPython gh-106905), and the thread stack loads clients
# from several threads. Every header read (here and in data/uri.py) holds this lock.
HEADER_LOCK = threading.Lock()


def _natural_key(text: str) -> list:
    """Sort key that orders 'c2' before 'c10' (digit runs compare as numbers)."""
    return [
        (0, int(tok), '') if tok.isdigit() else (1, 0, tok)
        for tok in re.split(r'(\d+)', text)
        if tok
    ]


def _fmt_keys(keys: Sequence[str]) -> str:
    return ', '.join(repr(k) for k in keys) if keys else '(none)'


def _npz_headers(path: Path) -> dict[str, tuple[np.dtype, tuple[int, ...]]]:
    """(dtype, full shape) of every array in an .npz, reading headers only."""
    out = {}
    try:
        with HEADER_LOCK, zipfile.ZipFile(path) as zf:
            for name in zf.namelist():
                if not name.endswith('.npy'):
                    continue
                with zf.open(name) as f:
                    version = np.lib.format.read_magic(f)
                    if version == (1, 0):
                        shape, _, dtype = np.lib.format.read_array_header_1_0(f)
                    elif version == (2, 0):
                        shape, _, dtype = np.lib.format.read_array_header_2_0(f)
                    else:  # rare format versions: read the array itself
                        with np.load(path, allow_pickle=False) as npz:
                            a = npz[name[:-4]]
                        shape, dtype = a.shape, a.dtype
                out[name[:-4]] = (np.dtype(dtype), tuple(shape))
    except (zipfile.BadZipFile, ValueError, OSError) as e:
        raise SimharnessValueError(f'{path}: not a readable .npz file ({e})') from e
    return out


def _load_npz(path: Path, keys: Sequence[str], client_id: str) -> dict[str, np.ndarray]:
    try:
        if not zipfile.is_zipfile(path):  # np.load would try to unpickle it
            raise SimharnessValueError(f'{path}: not a readable .npz file (not a zip)')
        with HEADER_LOCK, np.load(path, allow_pickle=False) as npz:
            present = list(npz.files)
            for key in keys:
                if key not in present:
                    raise SimharnessValueError(
                        f'client {client_id!r} ({path}): array {key!r} not found; '
                        f'the file holds {_fmt_keys(present)}'
                    )
            return {key: npz[key] for key in keys}
    except FileNotFoundError as e:
        raise SimharnessValueError(f'client {client_id!r}: file {path} no longer exists') from e
    except (zipfile.BadZipFile, OSError) as e:
        raise SimharnessValueError(f'{path}: not a readable .npz file ({e})') from e
    except ValueError as e:
        if isinstance(e, SimharnessValueError):
            raise
        raise SimharnessValueError(
            f'{path}: cannot load arrays {list(keys)} ({e}); object arrays are not supported'
        ) from e


class FileClientData(ClientData):
    """A `ClientData` backed by files; build it with the `from_*` constructors.

    For a directory of .npz files the object holds only paths and array
    specs (it pickles small); each `client_arrays` call reads that client's
    file (no caching). Arrays keep the names they have in the files.
    """

    def __init__(
        self,
        client_ids: Sequence[str],
        spec: Mapping[str, ArraySpec],
        *,
        paths: Optional[Mapping[str, Path]] = None,
        arrays: Optional[Mapping[str, Mapping[str, np.ndarray]]] = None,
        sizes: Optional[Mapping[str, int]] = None,
    ):
        """Internal; use `from_npz_dir` or `from_single_file`."""
        if (paths is None) == (arrays is None):
            raise SimharnessValueError(
                'FileClientData needs exactly one of paths and arrays; use '
                'FileClientData.from_npz_dir or from_single_file'
            )
        self._ids = list(client_ids)
        self._spec = dict(spec)
        self._paths = dict(paths) if paths is not None else None
        self._arrays = {k: dict(v) for k, v in arrays.items()} if arrays is not None else None
        self._sizes = dict(sizes) if sizes is not None else None

    @classmethod
    def from_npz_dir(
        cls, path: PathLike, x_key: str = 'x', y_key: Optional[str] = 'y', *, validate: bool = True
    ) -> 'FileClientData':
        """One client per ``<client_id>.npz`` file in a directory.

        Client ids are the file stems, in natural order ('c2' before 'c10';
        plain numbers in numeric order). Files not ending in ``.npz`` are
        ignored. Only the arrays `x_key` and `y_key` are loaded; other arrays
        in the files are ignored.

        Args:
            path: the directory.
            x_key: name of the feature array in every file.
            y_key: name of the label array, or None for unlabeled data.
            validate: read every file's array headers now (cheap: no array
                data is read) to check keys, dtypes and shapes across all
                clients and to know all sizes. If False, only the first
                file is inspected, and other files are checked when loaded.

        Returns:
            A lazily loading `FileClientData`.

        Raises:
            SimharnessValueError: missing directory, no .npz files, an array
                missing from a file (naming the arrays it has), unequal
                lengths or trailing shapes.
            SimharnessTypeError: dtypes differ between clients.
        """
        root = Path(path)
        if not root.exists():
            raise SimharnessValueError(f'data directory {root} does not exist')
        if not root.is_dir():
            raise SimharnessValueError(f'{root} is not a directory')
        files = [
            p
            for p in root.iterdir()
            if p.suffix == '.npz' and not p.name.startswith('.') and p.is_file()
        ]
        if not files:
            raise SimharnessValueError(
                f'no .npz files in {root} (expected one <client_id>.npz per client)'
            )
        files.sort(key=lambda p: _natural_key(p.stem))
        keys = [x_key] if y_key is None else [x_key, y_key]
        if len(set(keys)) != len(keys):
            raise SimharnessValueError(f'x_key and y_key are both {x_key!r}')
        paths = {p.stem: p for p in files}
        spec: Optional[dict[str, ArraySpec]] = None
        sizes: Optional[dict[str, int]] = {} if validate else None
        for cid, p in paths.items():
            headers = _npz_headers(p)
            for key in keys:
                if key not in headers:
                    raise SimharnessValueError(
                        f'client {cid!r} ({p}): array {key!r} not found; the '
                        f'file holds {_fmt_keys(list(headers))}'
                    )
            # Validate with stand-ins of the right dtype and shape (no data).
            stand_ins = {
                k: np.lib.stride_tricks.as_strided(
                    np.zeros(1, headers[k][0]),
                    shape=headers[k][1],
                    strides=(0,) * len(headers[k][1]),
                )
                for k in keys
            }
            checked = check_client_arrays(cid, stand_ins, spec)
            if spec is None:
                spec = array_spec_of(checked)
            if sizes is not None:
                sizes[cid] = int(headers[keys[0]][1][0])
            if not validate:
                break
        return cls(list(paths), spec or {}, paths=paths, sizes=sizes)

    @classmethod
    def from_single_file(
        cls,
        path: PathLike,
        client_id_key: str = 'client_id',
        x_key: str = 'x',
        y_key: Optional[str] = 'y',
    ) -> 'FileClientData':
        """Splits one file into clients by a client-id array or column.

        * ``.npz``: the arrays `client_id_key` (``[N]``), `x_key` and `y_key`
          (leading length N). Ids are converted to str.
        * ``.csv``: a header row; the column `client_id_key`, the label
          column `y_key` (int32 if every value is an integer, else float32),
          and every other column a float32 feature, giving ``x_key: [n, F]``
          in column order.

        Clients are ordered by first appearance in the file; a client's
        samples keep their file order. The data is held in memory.

        Args:
            path: the .npz or .csv file.
            client_id_key: name of the client-id array or column.
            x_key: name of the feature array (.npz) or of the features array
                built from the remaining columns (.csv).
            y_key: name of the label array / column, or None for no labels.

        Returns:
            A `FileClientData` with arrays ``{x_key, y_key}``.

        Raises:
            SimharnessValueError: missing file, unsupported suffix, missing
                array or column (naming those present), unequal lengths or
                non-numeric CSV values.
        """
        p = Path(path)
        if not p.exists():
            raise SimharnessValueError(f'data file {p} does not exist')
        if not p.is_file():
            raise SimharnessValueError(f'{p} is not a file')
        keys = [x_key] if y_key is None else [x_key, y_key]
        if len(set(keys + [client_id_key])) != len(keys) + 1:
            raise SimharnessValueError(
                f'client_id_key, x_key and y_key must differ, got '
                f'{client_id_key!r}, {x_key!r}, {y_key!r}'
            )
        suffix = p.suffix.lower()
        if suffix == '.npz':
            ids, arrays = _read_single_npz(p, client_id_key, keys)
        elif suffix == '.csv':
            ids, arrays = _read_single_csv(p, client_id_key, x_key, y_key)
        else:
            raise SimharnessValueError(
                f'{p}: unsupported file type {p.suffix!r}; use .npz or .csv '
                '(or a directory of .npz files with from_npz_dir)'
            )
        split = _split_by_id(ids, arrays)
        spec = array_spec_of(next(iter(split.values())))
        return cls(list(split), spec, arrays=split)

    @property
    def client_ids(self) -> list[str]:
        return list(self._ids)

    @property
    def array_spec(self) -> dict[str, ArraySpec]:
        return dict(self._spec)

    @property
    def paths(self) -> Optional[dict[str, Path]]:
        """Each client's .npz file (None for data read from one file into memory)."""
        return None if self._paths is None else dict(self._paths)

    @property
    def sizes(self) -> Optional[dict[str, int]]:
        """Each client's number of examples, where known without reading its file."""
        return None if self._sizes is None else dict(self._sizes)

    def _check_id(self, client_id: Any) -> None:
        container: Mapping[str, Any] = (
            self._paths if self._paths is not None else self._arrays or {}
        )
        if not isinstance(client_id, str) or client_id not in container:
            raise self._unknown_client(client_id)

    def client_arrays(self, client_id: str) -> dict[str, np.ndarray]:
        self._check_id(client_id)
        if self._paths is None:
            out = {}
            for k, a in (self._arrays or {})[client_id].items():
                view = a.view()
                view.flags.writeable = False
                out[k] = view
            return out
        arrays = _load_npz(self._paths[client_id], list(self._spec), client_id)
        return check_client_arrays(client_id, arrays, self._spec)

    def client_size(self, client_id: str) -> int:
        self._check_id(client_id)
        if self._paths is None:
            arrays = (self._arrays or {})[client_id]
            return int(next(iter(arrays.values())).shape[0])
        if self._sizes is not None:
            return self._sizes[client_id]
        first = next(iter(self._spec))
        path = self._paths[client_id]
        headers = _npz_headers(path)
        if first not in headers:
            raise SimharnessValueError(
                f'client {client_id!r} ({path}): array {first!r} not found; the '
                f'file holds {_fmt_keys(list(headers))}'
            )
        return int(headers[first][1][0])

    @property
    def element_type_structure(self) -> dict[str, Any]:
        return element_spec_of(self._spec)

    def create_tf_dataset_for_client(self, client_id: str) -> Any:
        import tensorflow as tf  # pylint: disable=import-outside-toplevel

        return tf.data.Dataset.from_tensor_slices(self.client_arrays(client_id))

    def create_tf_dataset_from_all_clients(self, seed: Any = None) -> Any:
        if self._paths is not None:  # read by the graph, file by file
            return super().create_tf_dataset_from_all_clients(seed)
        keys = list(self._spec)
        arrays = self._arrays or {}
        return concatenated_dataset(
            [[arrays[c][k] for k in keys] for c in shuffled_ids(self._ids, seed)],
            lambda leaves: dict(zip(keys, leaves)),
        )

    @property
    def serializable_dataset_fn(self) -> Callable[[Any], Any]:
        """A TF-traceable function from client id to its dataset.

        For a directory of .npz files written uncompressed (``np.savez``,
        `save_npz_dir`) the graph reads the client's file itself (the arrays'
        byte ranges were found from the headers): nothing but paths and
        offsets is in the graph, and a worker reads only its clients. Data
        held in memory, or compressed files, go into the graph whole (as
        `ArrayClientData`).
        """
        fn = getattr(self, '_dataset_fn', None)
        if fn is None:
            layouts = None
            if self._paths is not None:
                layouts = [_npz_layout(self._paths[c], list(self._spec)) for c in self._ids]
            if (
                self._paths is not None
                and layouts is not None
                and all(lay is not None for lay in layouts)
            ):
                fn = _npz_reading_fn(
                    self._ids, [str(self._paths[c]) for c in self._ids], layouts, self._spec
                )  # type: ignore[arg-type]
            else:
                keys = list(self._spec)
                arrays = [self.client_arrays(c) for c in self._ids]
                fn = slices_dataset_fn(
                    self._ids,
                    [[a[k] for k in keys] for a in arrays],
                    lambda leaves: dict(zip(keys, leaves)),
                )
            self._dataset_fn = fn
        return fn

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop('_dataset_fn', None)
        state.pop('_cached_dataset_computation', None)
        return state

    def __repr__(self) -> str:
        where = 'npz dir' if self._paths is not None else 'in memory'
        spec = ', '.join(f'{k}: {d}{list(s)}' for k, (d, s) in self._spec.items())
        return f'FileClientData({len(self._ids)} clients, {where}; {spec})'


# The dtypes TF's decode_raw reads.
_DECODE_RAW_DTYPES = frozenset(
    {'float16', 'float32', 'float64', 'int8', 'int16', 'int32', 'int64', 'uint8', 'uint16', 'bool'}
)
# (byte offset of the array data in the file, byte count, rows) of each key.
_Layout = dict[str, tuple[int, int, int]]


def _npz_layout(path: Path, keys: Sequence[str]) -> Optional[_Layout]:
    """Where each array's raw bytes lie in an .npz, or None when TF cannot read them.

    None for compressed members, Fortran order, big-endian or non-numeric
    dtypes (TF's ``decode_raw`` reads little-endian numbers).
    """
    out: _Layout = {}
    try:
        with HEADER_LOCK, zipfile.ZipFile(path) as zf, open(path, 'rb') as raw:
            for key in keys:
                info = zf.getinfo(key + '.npy')
                if info.compress_type != zipfile.ZIP_STORED:
                    return None
                raw.seek(info.header_offset)
                local = raw.read(30)
                name_len, extra_len = struct.unpack('<HH', local[26:30])
                data_start = info.header_offset + 30 + name_len + extra_len
                with zf.open(info) as member:
                    version = np.lib.format.read_magic(member)
                    if version == (1, 0):
                        shape, fortran, dtype = np.lib.format.read_array_header_1_0(member)
                    elif version == (2, 0):
                        shape, fortran, dtype = np.lib.format.read_array_header_2_0(member)
                    else:
                        return None
                    header_len = member.tell()
                dtype = np.dtype(dtype)
                if (
                    (fortran and len(shape) > 1)
                    or dtype.byteorder == '>'
                    or not shape
                    or dtype.newbyteorder('=').name not in _DECODE_RAW_DTYPES
                ):
                    return None
                out[key] = (
                    data_start + header_len,
                    int(np.prod(shape)) * dtype.itemsize,
                    int(shape[0]),
                )
    except (KeyError, zipfile.BadZipFile, OSError, ValueError):
        return None
    return out


def _npz_reading_fn(
    ids: Sequence[str],
    paths: Sequence[str],
    layouts: Sequence[_Layout],
    spec: Mapping[str, ArraySpec],
) -> Callable[[Any], Any]:
    """``fn(client_id) -> tf.data.Dataset`` reading the client's .npz file in the graph."""
    keys = list(spec)
    offsets = np.asarray([[lay[k][0] for k in keys] for lay in layouts], np.int64)
    nbytes = np.asarray([[lay[k][1] for k in keys] for lay in layouts], np.int64)
    rows = np.asarray([lay[keys[0]][2] for lay in layouts], np.int64)
    id_list, path_list = list(ids), list(paths)

    def dataset_fn(client_id: Any) -> Any:
        import tensorflow as tf  # pylint: disable=import-outside-toplevel

        match = tf.equal(tf.constant(id_list), client_id)
        check = tf.debugging.Assert(tf.reduce_any(match), ['No data found for client ', client_id])
        with tf.control_dependencies([check]):
            index = tf.argmax(tf.cast(match, tf.int32), output_type=tf.int32)
        content = tf.io.read_file(tf.gather(tf.constant(path_list), index))
        n = tf.gather(tf.constant(rows), index)
        out = {}
        for j, key in enumerate(keys):
            dtype, trailing = spec[key]
            part = tf.strings.substr(
                content,
                tf.gather(tf.constant(offsets[:, j]), index),
                tf.gather(tf.constant(nbytes[:, j]), index),
            )
            flat = tf.io.decode_raw(part, tf.as_dtype(np.dtype(dtype)), little_endian=True)
            out[key] = tf.reshape(flat, tf.concat([[n], tf.constant(trailing, tf.int64)], 0))
        return tf.data.Dataset.from_tensor_slices(out)

    return dataset_fn


def _read_single_npz(
    p: Path, client_id_key: str, keys: Sequence[str]
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    arrays = _load_npz(p, [client_id_key] + list(keys), client_id='(all)')
    ids = arrays.pop(client_id_key)
    if ids.ndim != 1:
        raise SimharnessValueError(
            f'{p}: client-id array {client_id_key!r} must be 1-D, got shape {ids.shape}'
        )
    for k, a in arrays.items():
        if a.ndim == 0 or a.shape[0] != ids.shape[0]:
            raise SimharnessValueError(
                f'{p}: array {k!r} has shape {a.shape}; its leading length must '
                f'equal the {ids.shape[0]} entries of {client_id_key!r}'
            )
    return ids, arrays


def _read_single_csv(
    p: Path, client_id_key: str, x_key: str, y_key: Optional[str]
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    with open(p, newline='', encoding='utf-8') as f:
        rows = list(csv.reader(f))
    if not rows:
        raise SimharnessValueError(f'{p}: empty CSV file (a header row is needed)')
    header, body = [h.strip() for h in rows[0]], rows[1:]
    body = [r for r in body if r]  # tolerate blank lines
    for key in [client_id_key] + ([y_key] if y_key is not None else []):
        if key not in header:
            raise SimharnessValueError(
                f'{p}: column {key!r} not found; the header has {_fmt_keys(header)}'
            )
    if not body:
        raise SimharnessValueError(f'{p}: no data rows after the header')
    for i, r in enumerate(body):
        if len(r) != len(header):
            raise SimharnessValueError(
                f'{p}, line {i + 2}: {len(r)} fields, the header has {len(header)}'
            )
    table = np.array(body, dtype=str)
    col = {name: j for j, name in enumerate(header)}
    feature_cols = [name for name in header if name not in (client_id_key, y_key)]
    if not feature_cols:
        raise SimharnessValueError(f'{p}: no feature columns besides the id and label')

    def numeric(name: str, dtype: Any) -> np.ndarray:
        values = np.char.strip(table[:, col[name]])
        try:
            return values.astype(dtype)
        except ValueError as e:
            raise SimharnessValueError(
                f'{p}: column {name!r} has non-numeric values ({e})'
            ) from None

    arrays = {x_key: np.stack([numeric(c, np.float32) for c in feature_cols], axis=1)}
    if y_key is not None:
        labels = numeric(y_key, np.float64)
        if np.all(np.isfinite(labels)) and np.all(labels == np.round(labels)):
            arrays[y_key] = labels.astype(np.int32)
        else:
            arrays[y_key] = labels.astype(np.float32)
    ids = np.char.strip(table[:, col[client_id_key]])
    return ids, arrays


def _split_by_id(
    ids: np.ndarray, arrays: Mapping[str, np.ndarray]
) -> dict[str, dict[str, np.ndarray]]:
    """Groups rows by client id: clients in first-appearance order, rows stable."""
    ids = np.asarray(ids).astype(str)
    if ids.shape[0] == 0:
        raise SimharnessValueError('the file has no samples')
    uniq, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
    order = np.argsort(first, kind='stable')  # unique index -> position
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    position = rank[inverse.reshape(-1)]
    rows = np.argsort(position, kind='stable')
    bounds = np.cumsum(np.bincount(position, minlength=len(uniq)))[:-1]
    out = {}
    for pos, chunk in enumerate(np.split(rows, bounds)):
        cid = str(uniq[order[pos]])
        out[cid] = {k: np.ascontiguousarray(a[chunk]) for k, a in arrays.items()}
    return out


def _valid_client_file_stem(client_id: str) -> bool:
    return (
        bool(client_id)
        and client_id not in ('.', '..')
        and not client_id.startswith('.')
        and '/' not in client_id
        and '\\' not in client_id
        and '\0' not in client_id
    )


def save_npz_dir(
    client_data: ClientData, path: PathLike, *, overwrite: bool = False, compressed: bool = False
) -> None:
    """Writes one ``<client_id>.npz`` per client (the `from_npz_dir` layout).

    Each file is written atomically (`simharness.atomic`: a hidden temporary
    file in the same directory, moved into place with ``os.replace``), so a
    reader never sees a partial file. The directory is created if needed.

    Args:
        client_data: any `ClientData`; its `client_arrays` are saved under
            their keys.
        path: the target directory.
        overwrite: allow a directory that already holds .npz files; .npz
            files of clients not in `client_data` are then deleted, so that
            the directory holds exactly `client_data`.
        compressed: use ``np.savez_compressed``.

    Raises:
        SimharnessValueError: the directory already holds .npz files and
            `overwrite` is False, or a client id is not a valid file name.
    """
    root = Path(path)
    if root.exists() and not root.is_dir():
        raise SimharnessValueError(f'{root} exists and is not a directory')
    ids = client_data.client_ids
    bad = [cid for cid in ids if not _valid_client_file_stem(cid)]
    if bad:
        raise SimharnessValueError(
            f'client ids {bad[:5]} cannot be file names (empty, starting with '
            "'.', or containing a path separator)"
        )
    existing = [p for p in root.iterdir() if p.suffix == '.npz'] if root.exists() else []
    if existing and not overwrite:
        raise SimharnessValueError(
            f'{root} already holds {len(existing)} .npz files; pass overwrite=True to replace them'
        )
    root.mkdir(parents=True, exist_ok=True)
    save = np.savez_compressed if compressed else np.savez
    for cid in ids:
        arrays = client_data.client_arrays(cid)
        with atomic_open(root / f'{cid}.npz', 'wb') as f:
            save(f, **arrays)  # type: ignore[arg-type]
    keep = {f'{cid}.npz' for cid in ids}
    for p in existing:
        if p.name not in keep:
            p.unlink()
