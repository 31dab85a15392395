"""In-memory federated data sets: `TestClientData` (TFF's) and `ArrayClientData`.

Both are `ClientData` (data/client_base.py: TFF's whole API) over per-client
numpy arrays:

* `TestClientData` is `tff.simulation.datasets.TestClientData`: a dict from
  client id to tensor slices (a list, a tuple or a dict, as
  ``tf.data.Dataset.from_tensor_slices`` takes them; TF's dtype inference:
  Python ints are int32, floats float32).
* `ArrayClientData` takes ``{client_id: {key: array}}`` as is (no copy,
  validated), the shape our runtime moves around (`client_arrays`).

Their `serializable_dataset_fn` (and so `dataset_computation`) holds every
client's data in the traced graph (as TFF's TestClientData): concatenated
per leaf, one slice per client, found by id at run time. That suits small and
medium data sets (up to `MAX_EMBEDDED_BYTES`); a large one is better read by
its workers from files (`FileClientData`, `FilePerUserClientData`,
`SqlClientData`).

TensorFlow is imported lazily, by the methods that build `tf.data` objects or
TF specs, so that importing this module stays cheap.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np

from simharness.data.client_base import (
    ArraySpec,
    ClientData,
    ConcreteClientData,
    IncompatiblePreprocessFnError,
    InvalidRandomSeedError,
    PreprocessClientData,
    _readonly,
    array_spec_of,
    check_client_arrays,
    check_numpy_random_seed,
    element_spec_of,
    tf_compatible_dtype,
)
from simharness.errors import SimharnessTypeError, SimharnessValueError

__all__ = [
    'ArrayClientData',
    'ArraySpec',
    'ClientData',
    'ConcreteClientData',
    'IncompatiblePreprocessFnError',
    'InvalidRandomSeedError',
    'MAX_EMBEDDED_BYTES',
    'PreprocessClientData',
    'StackedRows',
    'TestClientData',
    'array_spec_of',
    'check_client_arrays',
    'check_numpy_random_seed',
    'concatenated_dataset',
    'sample_clients',
    'shuffled_ids',
    'slices_dataset_fn',
]

#: The most bytes of client data `slices_dataset_fn` puts into a graph (a
#: serialized TF graph is limited to 2 GB).
MAX_EMBEDDED_BYTES = 1 << 30

# Kept for callers of the old private name.
_tf_compatible = tf_compatible_dtype


def slices_dataset_fn(
    client_ids: Sequence[str],
    per_client_leaves: Sequence[Sequence[np.ndarray]],
    pack: Callable[[list], Any],
) -> Callable[[Any], Any]:
    """A TF-traceable function from client id to the dataset of that client's slices.

    Args:
        client_ids: the ids, in order.
        per_client_leaves: for each client, its leaves (same count and
            trailing shapes for all clients; a common leading length per client).
        pack: builds the element structure from a list of leaf tensors.

    Returns:
        ``fn(client_id) -> tf.data.Dataset``: every leaf concatenated over the
        clients and held as a constant; the id is looked up at run time
        (``InvalidArgumentError`` 'No data found for client' when absent).

    Raises:
        SimharnessValueError: more than `MAX_EMBEDDED_BYTES` of data.
    """
    total = sum(int(np.asarray(a).nbytes) for leaves in per_client_leaves for a in leaves)
    if total > MAX_EMBEDDED_BYTES:
        raise SimharnessValueError(
            f'this data set holds {total} bytes; a dataset_computation of in-memory data puts '
            f'all of it into the graph, and at most {MAX_EMBEDDED_BYTES} bytes fit. Read large '
            'data from files on the clients (FileClientData.from_npz_dir, '
            'FilePerUserClientData, SqlClientData), or pass datasets instead of ids'
        )
    ids = list(client_ids)
    num_leaves = len(per_client_leaves[0])
    sizes = np.asarray(
        [len(leaves[0]) if num_leaves else 0 for leaves in per_client_leaves], np.int64
    )
    ends = np.cumsum(sizes)
    starts = ends - sizes
    columns = [
        np.concatenate([np.asarray(leaves[i]) for leaves in per_client_leaves])
        for i in range(num_leaves)
    ]

    def dataset_fn(client_id: Any) -> Any:
        import tensorflow as tf  # pylint: disable=import-outside-toplevel

        match = tf.equal(tf.constant(ids), client_id)
        check = tf.debugging.Assert(tf.reduce_any(match), ['No data found for client ', client_id])
        with tf.control_dependencies([check]):
            index = tf.argmax(tf.cast(match, tf.int32), output_type=tf.int32)
        lo = tf.gather(tf.constant(starts), index)
        hi = tf.gather(tf.constant(ends), index)
        leaves = [tf.constant(col)[lo:hi] for col in columns]
        return tf.data.Dataset.from_tensor_slices(pack(leaves))

    return dataset_fn


def shuffled_ids(client_ids: Sequence[str], seed: Any) -> list[str]:
    """`client_ids` in TFF's order for `create_tf_dataset_from_all_clients` (RandomState(seed))."""
    check_numpy_random_seed(seed)
    ids = list(client_ids)
    np.random.RandomState(seed=seed).shuffle(ids)
    return ids


def concatenated_dataset(
    leaves_in_order: Sequence[Sequence[np.ndarray]], pack: Callable[[list], Any]
) -> Any:
    """``from_tensor_slices`` of each leaf concatenated over the given clients (in that order).

    The same elements in the same order as ``flat_map`` over the clients'
    datasets, without putting every client's data into a traced function.
    """
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    columns = [
        np.concatenate([np.asarray(leaves[i]) for leaves in leaves_in_order])
        for i in range(len(leaves_in_order[0]))
    ]
    return tf.data.Dataset.from_tensor_slices(pack(columns))


def _isnamedtuple(x: Any) -> bool:
    return isinstance(x, tuple) and hasattr(x, '_fields')


def _normalize_slices(client_id: str, slices: Any) -> Any:
    """Dicts and tuples stay structure; anything else becomes one numpy leaf (TF's dtypes)."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    if isinstance(slices, Mapping):
        return type(slices)(  # type: ignore[call-arg]
            (k, _normalize_slices(client_id, v)) for k, v in slices.items()
        )
    if isinstance(slices, tuple) and not _isnamedtuple(slices):
        return tuple(_normalize_slices(client_id, v) for v in slices)
    if tf.is_tensor(slices):
        raise SimharnessTypeError(
            f'client {client_id!r}: Tensor slices must not be TF tensors. Consider converting '
            'them to numpy values instead.',
            expected='list or numpy array',
            actual=type(slices),
        )
    try:
        return np.asarray(tf.convert_to_tensor(slices).numpy())
    except (TypeError, ValueError) as e:
        raise SimharnessTypeError(
            f'client {client_id!r}: cannot make tensor slices of {type(slices).__name__} ({e})',
            expected='list, numpy array, tuple or dict of these',
            actual=type(slices),
        ) from e


class TestClientData(ClientData):
    """TFF's `tff.simulation.datasets.TestClientData`: in-memory tensor slices per client.

    Args:
        tensor_slices_dict: ``{client_id: slices}`` where every ``slices`` is
            of one kind: a list (or array), a tuple (not a namedtuple) or a
            dict of these, as `tf.data.Dataset.from_tensor_slices` takes it.
            Leaves must not be `tf.Tensor`. Every client needs data. The
            input is not modified (it is copied).

    Raises:
        SimharnessTypeError: not a dict, namedtuples, clients of different
            kinds, or tensor leaves.
        SimharnessValueError: a client with no data, or clients whose element
            structures differ.
    """

    __test__ = False  # not a pytest test class

    def __init__(self, tensor_slices_dict: dict):
        import tensorflow as tf  # pylint: disable=import-outside-toplevel

        if not isinstance(tensor_slices_dict, dict):
            raise SimharnessTypeError(
                f'TestClientData expects a dict client_id -> tensor slices, got '
                f'{type(tensor_slices_dict).__name__}',
                expected=dict,
                actual=type(tensor_slices_dict),
            )
        if not tensor_slices_dict:
            raise SimharnessValueError('TestClientData needs at least one client')
        structures = list(tensor_slices_dict.values())
        example = structures[0]
        if _isnamedtuple(example):
            raise SimharnessTypeError(
                'The tensor slices in the client data dictionary must be strictly lists, '
                'tuples (not namedtuples), or dictionaries, but the provided data was a '
                'namedtuple. Suggest using ._asdict() to convert the namedtuples to '
                'dictionaries to work with this class.',
                expected='list, tuple or dict',
                actual=type(example),
            )
        kind = type(example)
        if not isinstance(example, (list, tuple, dict, np.ndarray)):
            raise SimharnessTypeError(
                f'tensor slices must be lists, tuples or dicts, got {kind.__name__}',
                expected='list, tuple or dict',
                actual=kind,
            )
        for cid, s in tensor_slices_dict.items():
            if not isinstance(cid, str):
                raise SimharnessTypeError(
                    f'client ids must be str, got {cid!r} ({type(cid).__name__})',
                    expected=str,
                    actual=type(cid),
                )
            if not isinstance(s, kind):
                raise SimharnessTypeError(
                    f'client {cid!r}: tensor slices of type {type(s).__name__}; the first client '
                    f'has {kind.__name__} and all must be alike',
                    expected=kind,
                    actual=type(s),
                )
        for leaf in tf.nest.flatten(tensor_slices_dict):
            if tf.is_tensor(leaf):
                raise SimharnessTypeError(
                    'Tensor slices must not be TF tensors. Consider converting them to numpy '
                    'values instead.',
                    expected='numpy or Python values',
                    actual=type(leaf),
                )
        self._slices: dict[str, Any] = {}
        self._leaves: dict[str, list[np.ndarray]] = {}
        for cid, s in tensor_slices_dict.items():
            norm = _normalize_slices(cid, copy.deepcopy(s))
            leaves = tf.nest.flatten(norm)
            if not leaves or any(np.ndim(a) == 0 for a in leaves) or len(leaves[0]) == 0:
                raise SimharnessValueError(f'No data found for client {cid}')
            self._slices[cid] = norm
            self._leaves[cid] = leaves
        self._element_type_structure = self.create_tf_dataset_for_client(
            self.client_ids[0]
        ).element_spec
        for cid in self._slices:
            spec = tf.data.Dataset.from_tensor_slices(self._slices[cid]).element_spec
            if spec != self._element_type_structure:
                raise SimharnessValueError(
                    f'client {cid!r} has elements {spec}, the first client '
                    f'{self._element_type_structure}; all clients need one element structure'
                )
        self._dataset_fn: Optional[Callable[[Any], Any]] = None

    @property
    def client_ids(self) -> list[str]:
        return list(self._slices)

    @property
    def serializable_dataset_fn(self) -> Callable[[Any], Any]:
        if self._dataset_fn is None:
            import tensorflow as tf  # pylint: disable=import-outside-toplevel

            template = self._slices[self.client_ids[0]]
            self._dataset_fn = slices_dataset_fn(
                self.client_ids,
                [self._leaves[c] for c in self._slices],
                lambda leaves: tf.nest.pack_sequence_as(template, leaves),
            )
        return self._dataset_fn

    def create_tf_dataset_for_client(self, client_id: str) -> Any:
        import tensorflow as tf  # pylint: disable=import-outside-toplevel

        if not isinstance(client_id, str) or client_id not in self._slices:
            raise self._unknown_client(client_id)
        return tf.data.Dataset.from_tensor_slices(self._slices[client_id])

    def tensor_slices(self, client_id: str) -> Any:
        if not isinstance(client_id, str) or client_id not in self._slices:
            raise self._unknown_client(client_id)
        return self._slices[client_id]

    @property
    def element_type_structure(self) -> Any:
        return self._element_type_structure

    def create_tf_dataset_from_all_clients(self, seed: Any = None) -> Any:
        import tensorflow as tf  # pylint: disable=import-outside-toplevel

        template = self._slices[self.client_ids[0]]
        return concatenated_dataset(
            [self._leaves[c] for c in shuffled_ids(self.client_ids, seed)],
            lambda leaves: tf.nest.pack_sequence_as(template, leaves),
        )

    def client_arrays(self, client_id: str) -> dict[str, np.ndarray]:
        if not isinstance(client_id, str) or client_id not in self._slices:
            raise self._unknown_client(client_id)
        s = self._slices[client_id]
        if isinstance(s, Mapping) and all(isinstance(v, np.ndarray) for v in s.values()):
            return {str(k): _readonly(v) for k, v in s.items()}
        return super().client_arrays(client_id)

    def client_size(self, client_id: str) -> int:
        if not isinstance(client_id, str) or client_id not in self._leaves:
            raise self._unknown_client(client_id)
        return int(len(self._leaves[client_id][0]))

    def __repr__(self) -> str:
        return f'TestClientData({len(self._slices)} clients; {self._element_type_structure})'


class StackedRows:
    """One array of every client, in client order, as if concatenated, read a slice at a time.

    What a central evaluation over all clients' data needs without holding
    it all: ``rows[lo:hi]`` reads only the clients those rows belong to (from
    their files, for `FileClientData`) and concatenates their parts. `shape`,
    `dtype`, `ndim` and ``len()`` are those of the concatenation;
    ``np.asarray(rows)`` builds it whole.

    Args:
        client_data: the `ClientData`.
        key: which array of each client (e.g. ``'x'``).

    Raises:
        SimharnessValueError: `key` is not one of the data set's arrays.
    """

    def __init__(self, client_data: 'ClientData', key: str):
        spec = client_data.array_spec
        if key not in spec:
            raise SimharnessValueError(
                f'no array {key!r} in this data set; it has {", ".join(map(repr, spec))}'
            )
        self._cd = client_data
        self._key = key
        self._ids = client_data.client_ids
        self._ends = np.cumsum([client_data.client_size(c) for c in self._ids], dtype=np.int64)
        dtype, trailing = spec[key]
        self.dtype = np.dtype(dtype)
        self.shape = (int(self._ends[-1]) if len(self._ends) else 0,) + tuple(trailing)
        self.ndim = len(self.shape)

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, index: Any) -> np.ndarray:
        if not isinstance(index, slice):
            raise SimharnessTypeError(
                f'StackedRows reads slices of rows, got {type(index).__name__}',
                expected=slice,
                actual=type(index),
            )
        lo, hi, step = index.indices(len(self))
        if step != 1:
            raise SimharnessValueError(f'StackedRows reads contiguous rows, got step {step}')
        parts = []
        k = int(np.searchsorted(self._ends, lo, side='right'))
        while lo < hi and k < len(self._ids):
            start = int(self._ends[k - 1]) if k else 0
            a = self._cd.client_arrays(self._ids[k])[self._key]
            parts.append(a[lo - start : min(hi, int(self._ends[k])) - start])
            lo = int(self._ends[k])
            k += 1
        if not parts:
            return np.empty((0,) + self.shape[1:], self.dtype)
        return np.concatenate(parts) if len(parts) > 1 else np.array(parts[0])

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        whole = self[:]
        return whole if dtype is None else whole.astype(dtype, copy=False)

    def __repr__(self) -> str:
        return f'StackedRows({self._key!r} of {len(self._ids)} clients, shape {self.shape})'


class ArrayClientData(ClientData):
    """A `ClientData` held in memory as numpy arrays: ``{client_id: {key: array}}``.

    The arrays are not copied; `client_arrays` returns read-only views.
    Client datasets are ``tf.data.Dataset.from_tensor_slices`` of a client's
    dict of arrays; `element_type_structure` is the dict of their
    `tf.TensorSpec` (numpy string arrays become ``tf.string``).
    """

    def __init__(self, data: Mapping[str, Mapping[str, Any]]):
        """Builds the data set from ``{client_id: {key: array}}``.

        Args:
            data: one mapping of arrays per client. All clients have the same
                keys, dtypes and trailing shapes; within a client all arrays
                have the same leading length. Client order is kept.

        Raises:
            SimharnessTypeError: `data` is not a mapping, a client id is not a
                str, or dtypes differ between clients.
            SimharnessValueError: no clients, or inconsistent keys or shapes.
        """
        if not isinstance(data, Mapping):
            raise SimharnessTypeError(
                f'ArrayClientData expects a mapping client_id -> arrays, got {type(data).__name__}',
                expected='Mapping[str, Mapping]',
                actual=type(data),
            )
        if not data:
            raise SimharnessValueError('ArrayClientData needs at least one client')
        self._data: dict[str, dict[str, np.ndarray]] = {}
        spec: Optional[dict[str, ArraySpec]] = None
        for cid, arrays in data.items():
            if not isinstance(cid, str):
                raise SimharnessTypeError(
                    f'client ids must be str, got {cid!r} ({type(cid).__name__})',
                    expected=str,
                    actual=type(cid),
                )
            checked = check_client_arrays(cid, arrays, spec)
            if spec is None:
                spec = array_spec_of(checked)
            self._data[cid] = checked
        self._spec: dict[str, ArraySpec] = spec or {}
        self._dataset_fn: Optional[Callable[[Any], Any]] = None

    @classmethod
    def from_stacked(
        cls,
        x: Any,
        y: Any,
        client_ids: Optional[Sequence[str]] = None,
        *,
        x_key: str = 'x',
        y_key: str = 'y',
    ) -> 'ArrayClientData':
        """Builds equal-size clients from stacked arrays.

        Args:
            x: array ``[K, n, ...]``; client k gets ``x[k]`` (a view).
            y: array ``[K, n, ...]``; client k gets ``y[k]``.
            client_ids: K distinct ids; default ``'0', '1', ..., str(K-1)``.
            x_key: key of `x` in the client arrays.
            y_key: key of `y` in the client arrays.

        Returns:
            An `ArrayClientData` with K clients.

        Raises:
            SimharnessValueError: leading dimensions that do not match, or
                the wrong number of (or duplicate) client ids.
        """
        x = np.asarray(x)
        y = np.asarray(y)
        if x.ndim < 2 or y.ndim < 2:
            raise SimharnessValueError(
                f'from_stacked expects x [K, n, ...] and y [K, n, ...], got '
                f'shapes {x.shape} and {y.shape}'
            )
        if x.shape[:2] != y.shape[:2]:
            raise SimharnessValueError(
                f'from_stacked: x and y must agree on [K, n], got x {x.shape} and y {y.shape}'
            )
        if x_key == y_key:
            raise SimharnessValueError(f'x_key and y_key are both {x_key!r}')
        k = x.shape[0]
        ids = [str(i) for i in range(k)] if client_ids is None else list(client_ids)
        if len(ids) != k:
            raise SimharnessValueError(f'from_stacked: got {len(ids)} client ids for {k} clients')
        if len(set(ids)) != len(ids):
            raise SimharnessValueError('from_stacked: client ids are not unique')
        return cls({cid: {x_key: x[i], y_key: y[i]} for i, cid in enumerate(ids)})

    @property
    def client_ids(self) -> list[str]:
        return list(self._data)

    @property
    def array_spec(self) -> dict[str, ArraySpec]:
        return dict(self._spec)

    @property
    def element_type_structure(self) -> dict[str, Any]:
        return element_spec_of(self._spec)

    @property
    def serializable_dataset_fn(self) -> Callable[[Any], Any]:
        if self._dataset_fn is None:
            keys = list(self._spec)
            self._dataset_fn = slices_dataset_fn(
                list(self._data),
                [[a[k] for k in keys] for a in self._data.values()],
                lambda leaves: dict(zip(keys, leaves)),
            )
        return self._dataset_fn

    def create_tf_dataset_for_client(self, client_id: str) -> Any:
        import tensorflow as tf  # pylint: disable=import-outside-toplevel

        return tf.data.Dataset.from_tensor_slices(self.client_arrays(client_id))

    def tensor_slices(self, client_id: str) -> Any:
        return self.client_arrays(client_id)

    def create_tf_dataset_from_all_clients(self, seed: Any = None) -> Any:
        keys = list(self._spec)
        return concatenated_dataset(
            [[self._data[c][k] for k in keys] for c in shuffled_ids(self.client_ids, seed)],
            lambda leaves: dict(zip(keys, leaves)),
        )

    def client_arrays(self, client_id: str) -> dict[str, np.ndarray]:
        try:
            arrays = self._data[client_id]
        except (KeyError, TypeError):
            raise self._unknown_client(client_id) from None
        return {k: _readonly(a) for k, a in arrays.items()}

    def client_size(self, client_id: str) -> int:
        try:
            arrays = self._data[client_id]
        except (KeyError, TypeError):
            raise self._unknown_client(client_id) from None
        return int(next(iter(arrays.values())).shape[0])

    def __repr__(self) -> str:
        spec = ', '.join(f'{k}: {d}{list(s)}' for k, (d, s) in self._spec.items())
        return f'ArrayClientData({len(self._data)} clients; {spec})'


def sample_clients(
    client_ids: Sequence[str], num_clients: int, round_num: int, seed: int
) -> list[str]:
    """Samples a cohort of distinct clients, reproducibly per (seed, round).

    Uses ``np.random.default_rng((seed, round_num)).choice(len(client_ids),
    num_clients, replace=False)``: the same (seed, round_num) always gives
    the same cohort, in the same (random) order, independent of any other
    random state.

    Args:
        client_ids: the population, e.g. `ClientData.client_ids`.
        num_clients: cohort size, ``0 <= num_clients <= len(client_ids)``.
        round_num: the round number (>= 0).
        seed: the experiment seed (>= 0).

    Returns:
        `num_clients` distinct elements of `client_ids`.

    Raises:
        SimharnessTypeError: a count, round or seed that is not an int.
        SimharnessValueError: negative values, or more clients than exist.
    """
    for name, value in (('num_clients', num_clients), ('round_num', round_num), ('seed', seed)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise SimharnessTypeError(
                f'sample_clients: {name} must be an int, got {value!r} ({type(value).__name__})',
                expected=int,
                actual=type(value),
            )
        if value < 0:
            raise SimharnessValueError(f'sample_clients: {name} must be >= 0, got {value}')
    population = list(client_ids)
    if num_clients > len(population):
        raise SimharnessValueError(
            f'sample_clients: cannot sample {num_clients} distinct clients from '
            f'a population of {len(population)}'
        )
    rng = np.random.default_rng((int(seed), int(round_num)))
    idx = rng.choice(len(population), size=num_clients, replace=False)
    return [population[i] for i in idx]
