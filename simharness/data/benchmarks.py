"""The standard federated benchmarks, read from the files TFF publishes.

A loader reads TFF's file from its cache directory (default ``~/.tff``, TFF's); a
missing file is decompressed from its ``.lzma`` there, or downloaded from where TFF
publishes it, as TFF's loaders do (`simharness.data.tff_files`). Two formats are
read, as TFF's own loaders do:

* SQLite (TFF >= 0.20; ``emnist_all.sqlite``, ``cifar100.sqlite``,
  ``shakespeare.sqlite``, ``stackoverflow.sqlite``): a table
  ``examples(split_name, client_id, serialized_example_proto)`` of
  serialized ``tf.train.Example`` protos and a table
  ``client_metadata(client_id, split_name, num_examples)``
  (``tff.simulation.datasets.SqlClientData``).
* HDF5 (earlier TFF; ``fed_emnist_train.h5``, ``fed_cifar100_train.h5``,
  ``shakespeare_train.h5``, ``stackoverflow_train.h5``): one group per
  client, ``examples/<client_id>/<feature>`` (``HDF5ClientData``).

::

    load_emnist(cache_dir, only_digits=False, split='train')   x [28, 28, 1] float32, y: 62 classes
    load_cifar100(cache_dir, split='train')                    x [32, 32, 3] float32 in [0, 1], y: 100
    load_shakespeare(cache_dir, split='train', sequence_length=80)
        next-character prediction: x, y [80] int32 (TFF's tutorial vocabulary + pad/oov/bos/eos)
    load_stackoverflow(cache_dir, split='train', vocab_size=10000, sequence_length=20)
        next-word prediction: x, y [20] int32 (the most frequent words of the loaded clients)
    load_hf_dataset(path, x_column, y_column, partition='natural' | 'dirichlet', ...)
        a Hugging Face data set saved with save_to_disk (or in the local HF cache)

Every loader returns an `ArrayClientData` with arrays ``x`` and ``y``.
"""

from __future__ import annotations

import collections
import sqlite3
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from simharness.data.client_data import ArrayClientData
from simharness.data import tff_files
from simharness.data.digits import dirichlet_partition
from simharness.errors import SimharnessValueError

PathLike = Union[str, Path]

#: TFF's Shakespeare character vocabulary (its text-generation tutorial).
SHAKESPEARE_VOCAB = list(
    'dhlptx@DHLPTX $(,048cgkoswCGKOSW[_#\'/37;?bfjnrvzBFJNRVZ"&*.26:\naeimquyAEIMQUY]!%)-159\r'
)
#: Token ids of the sequence tasks: 0 pad, 1.. the vocabulary, then oov, bos, eos.
PAD = 0


def _find(cache_dir: Optional[PathLike], names: Sequence[str], what: str) -> Path:
    """The first of `names` in `cache_dir` (default ``~/.tff``, TFF's); else the first
    name (TFF's SQLite file) decompressed from its ``.lzma`` there, or downloaded as TFF's
    loaders do (`tff_files.get_local_file`)."""
    d = Path(cache_dir if cache_dir is not None else tff_files.default_cache_dir()).expanduser()
    for n in names:
        if (d / n).is_file():
            return d / n
    try:
        return Path(tff_files.get_local_file(names[0], str(d)))
    except tff_files.DatasetFileNotFoundError as e:
        raise tff_files.DatasetFileNotFoundError(
            f'{what}: none of {", ".join(names)} in {d}; {e}', path=e.path
        ) from e


# ------------------------------------------------------------------- formats


def _sql_split(path: Path, split: str) -> Tuple[List[str], sqlite3.Connection]:
    con = sqlite3.connect(f'file:{path}?mode=ro', uri=True)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    missing = {'examples', 'client_metadata'} - tables
    if missing:
        con.close()
        raise SimharnessValueError(
            f'{path}: not a TFF SQLite data set (missing tables {sorted(missing)})'
        )
    ids = sorted(
        r[0]
        for r in con.execute(
            'SELECT DISTINCT client_id FROM client_metadata WHERE split_name = ?', (split,)
        )
    )
    if not ids:
        splits = sorted(
            r[0] for r in con.execute('SELECT DISTINCT split_name FROM client_metadata')
        )
        con.close()
        raise SimharnessValueError(f'{path}: no clients in split {split!r} (splits: {splits})')
    return ids, con


def _parse_example(blob: bytes) -> Dict[str, Any]:
    from tensorflow.core.example import example_pb2  # pylint: disable=import-outside-toplevel

    ex = example_pb2.Example()
    ex.ParseFromString(blob)
    out: Dict[str, Any] = {}
    for name, f in ex.features.feature.items():
        kind = f.WhichOneof('kind')
        if kind == 'float_list':
            out[name] = np.asarray(f.float_list.value, np.float32)
        elif kind == 'int64_list':
            out[name] = np.asarray(f.int64_list.value, np.int64)
        elif kind == 'bytes_list':
            out[name] = list(f.bytes_list.value)
    return out


def read_tff_sqlite(path: PathLike, split: str) -> Dict[str, List[Dict[str, Any]]]:
    """``{client_id: [parsed tf.train.Example features, ...]}`` of one split, examples in
    stored order."""
    ids, con = _sql_split(Path(path), split)
    try:
        out: Dict[str, List[Dict[str, Any]]] = collections.OrderedDict((c, []) for c in ids)
        for cid, blob in con.execute(
            'SELECT client_id, serialized_example_proto FROM examples WHERE split_name = ? '
            'ORDER BY rowid',
            (split,),
        ):
            if cid in out:
                out[cid].append(_parse_example(blob))
    finally:
        con.close()
    return out


def read_tff_h5(path: PathLike) -> Dict[str, Dict[str, np.ndarray]]:
    """``{client_id: {feature: array}}`` of a TFF HDF5 file (``examples/<client>/<feature>``)."""
    import h5py  # pylint: disable=import-outside-toplevel

    out: Dict[str, Dict[str, np.ndarray]] = collections.OrderedDict()
    with h5py.File(path, 'r') as f:
        if 'examples' not in f:
            raise SimharnessValueError(f'{path}: not a TFF HDF5 data set (no "examples" group)')
        for cid in sorted(f['examples']):
            out[cid] = {k: np.asarray(v[()]) for k, v in f['examples'][cid].items()}
    return out


def _clients(per_client: Mapping[str, Mapping[str, np.ndarray]]) -> ArrayClientData:
    return ArrayClientData({c: dict(a) for c, a in per_client.items() if len(a['y'])})


def _load(
    cache_dir: Optional[PathLike],
    sqlite_names: Sequence[str],
    sql_split: str,
    h5_names: Sequence[str],
    what: str,
    from_examples: Callable[[List[Dict[str, Any]]], Dict[str, np.ndarray]],
    from_h5: Callable[[Dict[str, np.ndarray]], Dict[str, np.ndarray]],
) -> ArrayClientData:
    path = _find(cache_dir, list(sqlite_names) + list(h5_names), what)
    if path.suffix == '.h5':
        return _clients({c: from_h5(g) for c, g in read_tff_h5(path).items()})
    return _clients({c: from_examples(ex) for c, ex in read_tff_sqlite(path, sql_split).items()})


# --------------------------------------------------------------- the loaders


def _check_split(split: str, allowed: Sequence[str], what: str) -> None:
    if split not in allowed:
        raise SimharnessValueError(f'{what}: split must be one of {list(allowed)}, got {split!r}')


def load_emnist(
    cache_dir: Optional[PathLike] = None, only_digits: bool = False, split: str = 'train'
) -> ArrayClientData:
    """Federated EMNIST (3,400 writers; 62 classes, or 10 with `only_digits`).

    Files: ``emnist_all.sqlite`` (splits ``all_train``, ``all_test``,
    ``digits_only_train``, ``digits_only_test``), or the HDF5 files
    ``fed_emnist[_digitsonly]_{train,test}.h5``. Features ``pixels``
    [28, 28] float32 (1.0 is the background, as TFF) and ``label``.
    """
    _check_split(split, ('train', 'test'), 'load_emnist')
    sql_split = f'{"digits_only" if only_digits else "all"}_{split}'
    h5 = f'fed_emnist{"_digitsonly" if only_digits else ""}_{split}.h5'

    def convert(pixels: Iterable[Any], labels: Iterable[Any]) -> Dict[str, np.ndarray]:
        x = np.asarray(list(pixels), np.float32).reshape(-1, 28, 28, 1)
        return {'x': x, 'y': np.asarray(list(labels), np.int32).reshape(-1)}

    return _load(
        cache_dir,
        ['emnist_all.sqlite', 'emnist.sqlite'],
        sql_split,
        [h5],
        'load_emnist',
        lambda ex: convert([e['pixels'] for e in ex], [e['label'][0] for e in ex]),
        lambda g: convert(g['pixels'], g['label']),
    )


def load_cifar100(cache_dir: Optional[PathLike] = None, split: str = 'train') -> ArrayClientData:
    """Federated CIFAR-100 (500 train / 100 test clients, Pachinko allocation).

    Files: ``cifar100.sqlite`` (splits ``train``, ``test``) or
    ``fed_cifar100_{train,test}.h5``. ``x`` is the image scaled to [0, 1],
    ``y`` the fine label (0..99), ``coarse_y`` the coarse one (0..19).
    """
    _check_split(split, ('train', 'test'), 'load_cifar100')

    def convert(
        images: Iterable[Any], labels: Iterable[Any], coarse: Iterable[Any]
    ) -> Dict[str, np.ndarray]:
        x = np.asarray(list(images), np.float32).reshape(-1, 32, 32, 3) / np.float32(255.0)
        return {
            'x': x,
            'y': np.asarray(list(labels), np.int32).reshape(-1),
            'coarse_y': np.asarray(list(coarse), np.int32).reshape(-1),
        }

    return _load(
        cache_dir,
        ['cifar100.sqlite', 'fed_cifar100.sqlite'],
        split,
        [f'fed_cifar100_{split}.h5'],
        'load_cifar100',
        lambda ex: convert(
            [e['image'] for e in ex],
            [e['label'][0] for e in ex],
            [e['coarse_label'][0] for e in ex],
        ),
        lambda g: convert(g['image'], g['label'], g['coarse_label']),
    )


def _sequences(
    token_lists: Iterable[Sequence[int]], length: int, bos: int, eos: int
) -> Dict[str, np.ndarray]:
    """``[bos] + tokens + [eos]`` cut into chunks of length + 1; x = chunk[:-1], y = chunk[1:]."""
    rows: List[List[int]] = []
    for toks in token_lists:
        ids = [bos] + list(toks) + [eos]
        for start in range(0, max(len(ids) - 1, 1), length):
            chunk = ids[start : start + length + 1]
            if len(chunk) < 2:
                continue
            rows.append(chunk + [PAD] * (length + 1 - len(chunk)))
    arr = np.asarray(rows, np.int32).reshape(-1, length + 1)
    return {'x': arr[:, :-1].copy(), 'y': arr[:, 1:].copy()}


def load_shakespeare(
    cache_dir: Optional[PathLike] = None, split: str = 'train', sequence_length: int = 80
) -> ArrayClientData:
    """Federated Shakespeare (715 characters of the plays), next-character prediction.

    Files: ``shakespeare.sqlite`` (splits ``train``, ``test``) or
    ``shakespeare_{train,test}.h5`` (feature ``snippets``). Each snippet
    becomes ``[bos] chars [eos]`` over `SHAKESPEARE_VOCAB` (ids 1..86; 0
    pad, 87 oov, 88 bos, 89 eos: 90 classes), cut into sequences.
    """
    _check_split(split, ('train', 'test'), 'load_shakespeare')
    table = {ch: i + 1 for i, ch in enumerate(SHAKESPEARE_VOCAB)}
    oov, bos, eos = len(table) + 1, len(table) + 2, len(table) + 3

    def convert(snippets: Iterable[Any]) -> Dict[str, np.ndarray]:
        texts = [s.decode('utf-8', 'replace') if isinstance(s, bytes) else str(s) for s in snippets]
        return _sequences(
            ([table.get(ch, oov) for ch in t] for t in texts), sequence_length, bos, eos
        )

    return _load(
        cache_dir,
        ['shakespeare.sqlite'],
        split,
        [f'shakespeare_{split}.h5'],
        'load_shakespeare',
        lambda ex: convert([e['snippets'][0] for e in ex]),
        lambda g: convert(g['snippets']),
    )


def load_stackoverflow(
    cache_dir: Optional[PathLike] = None,
    split: str = 'train',
    vocab_size: int = 10000,
    sequence_length: int = 20,
    max_clients: Optional[int] = None,
) -> ArrayClientData:
    """Federated Stack Overflow, next-word prediction.

    Files: ``stackoverflow.sqlite`` (splits ``train``, ``heldout``,
    ``test``) or ``stackoverflow_{train,held_out,test}.h5`` (feature
    ``tokens``: space-separated words). The vocabulary is the first
    `vocab_size` words of TFF's ``stackoverflow.word_count`` file (``word
    count`` per line, most frequent first) when it is beside the data file, else the
    `vocab_size` most frequent words of the loaded clients (ties by word);
    ids: 0 pad, 1..vocab_size words, then oov, bos, eos.
    """
    _check_split(split, ('train', 'heldout', 'test'), 'load_stackoverflow')
    h5_split = 'held_out' if split == 'heldout' else split
    per_client: Dict[str, List[str]] = collections.OrderedDict()
    path = _find(
        cache_dir, ['stackoverflow.sqlite', f'stackoverflow_{h5_split}.h5'], 'load_stackoverflow'
    )
    if path.suffix == '.h5':
        for c, g in read_tff_h5(path).items():
            per_client[c] = [t.decode() if isinstance(t, bytes) else str(t) for t in g['tokens']]
    else:
        for c, ex in read_tff_sqlite(path, split).items():
            per_client[c] = [e['tokens'][0].decode() for e in ex]
    if max_clients is not None:
        per_client = collections.OrderedDict(list(per_client.items())[:max_clients])
    word_count = path.parent / 'stackoverflow.word_count'
    if word_count.is_file():
        with open(word_count, encoding='utf-8') as f:
            words = [line.split()[0] for line, _ in zip(f, range(vocab_size)) if line.split()]
    else:
        counts: Dict[str, int] = collections.Counter(
            w for texts in per_client.values() for t in texts for w in t.split()
        )
        words = sorted(counts, key=lambda w: (-counts[w], w))[:vocab_size]
    table = {w: i + 1 for i, w in enumerate(words)}
    oov, bos, eos = vocab_size + 1, vocab_size + 2, vocab_size + 3
    return _clients(
        {
            c: _sequences(
                ([table.get(w, oov) for w in t.split()] for t in texts), sequence_length, bos, eos
            )
            for c, texts in per_client.items()
        }
    )


# --------------------------------------------------------------- Hugging Face


def load_hf_dataset(
    path: str,
    x_column: str,
    y_column: str,
    *,
    split: Optional[str] = None,
    partition: str = 'natural',
    client_id_column: Optional[str] = None,
    num_clients: int = 10,
    alpha: float = 0.5,
    seed: int = 0,
    min_size: int = 1,
    cache_dir: Optional[PathLike] = None,
) -> ArrayClientData:
    """A Hugging Face data set split over clients, from local files only.

    Args:
      path: a directory written by ``Dataset.save_to_disk`` /
        ``DatasetDict.save_to_disk``, or a data set name already in the
        local Hugging Face cache (`cache_dir`; read with
        ``HF_DATASETS_OFFLINE=1``: nothing is downloaded).
      x_column, y_column: the feature and the (integer class) label columns.
      split: the split of a DatasetDict (e.g. 'train').
      partition: ``'natural'`` (one client per value of `client_id_column`,
        e.g. a writer or user id) or ``'dirichlet'`` (label skew over
        `num_clients` clients with concentration `alpha`, as
        `dirichlet_partition`).
      client_id_column: the natural client id (partition 'natural').
      num_clients, alpha, seed, min_size: of the Dirichlet partition.
      cache_dir: the Hugging Face cache directory for a name.

    Raises:
      SimharnessValueError: a missing path, split or column, or a bad partition.
    """
    import datasets  # pylint: disable=import-outside-toplevel

    p = Path(path).expanduser()
    if p.is_dir():
        ds = datasets.load_from_disk(str(p))
    else:
        # Offline for this call: the libraries read these flags at import, so both
        # their module constants are set (and restored), not only the environment.
        import huggingface_hub.constants as hub  # pylint: disable=import-outside-toplevel

        saved = (
            datasets.config.HF_HUB_OFFLINE,
            datasets.config.HF_DATASETS_OFFLINE,
            hub.HF_HUB_OFFLINE,
        )
        datasets.config.HF_HUB_OFFLINE = datasets.config.HF_DATASETS_OFFLINE = True
        hub.HF_HUB_OFFLINE = True
        try:
            ds = datasets.load_dataset(
                path, cache_dir=None if cache_dir is None else str(cache_dir)
            )
        except Exception as e:  # the library raises several types for "not cached"
            raise SimharnessValueError(
                f'Hugging Face data set {path!r} is neither a saved '
                f'directory nor in the local cache: {e}'
            ) from e
        finally:
            (
                datasets.config.HF_HUB_OFFLINE,
                datasets.config.HF_DATASETS_OFFLINE,
                hub.HF_HUB_OFFLINE,
            ) = saved
    if isinstance(ds, datasets.DatasetDict):
        if split is None or split not in ds:
            raise SimharnessValueError(
                f'{path}: choose a split, one of {sorted(ds)}; got {split!r}'
            )
        ds = ds[split]
    for col in (x_column, y_column) + ((client_id_column,) if partition == 'natural' else ()):
        if col is None or col not in ds.column_names:
            raise SimharnessValueError(f'{path}: no column {col!r} (columns: {ds.column_names})')
    table = ds.with_format('numpy')
    x = np.asarray(table[x_column])
    y = np.asarray(table[y_column]).astype(np.int32)
    if x.dtype.kind in 'iub':
        x = x.astype(np.float32)
    if partition == 'natural':
        ids = np.asarray([str(v) for v in table[client_id_column]])
        order = sorted(set(ids.tolist()))
        return ArrayClientData({c: {'x': x[ids == c], 'y': y[ids == c]} for c in order})
    if partition == 'dirichlet':
        parts = dirichlet_partition(
            y, num_clients, alpha, np.random.default_rng(seed), min_size=min_size
        )
        width = len(str(num_clients - 1))
        return ArrayClientData(
            {f'client_{i:0{width}d}': {'x': x[idx], 'y': y[idx]} for i, idx in enumerate(parts)}
        )
    raise SimharnessValueError(f"partition must be 'natural' or 'dirichlet', got {partition!r}")
