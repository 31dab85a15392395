"""Federated data sets: one array dict per client, as in `tff.simulation.datasets`.

A `ClientData` maps string client ids to the raw per-client arrays
(``{'x': ..., 'y': ...}``, equal leading length) and builds `tf.data`
datasets from them on request. The raw arrays are what the runtime moves
around (shared memory, tensors); `tf.data` is only a convenience view.

TensorFlow is imported lazily, only by the methods that build `tf.data`
objects or TF specs, so that importing this module stays cheap.
"""

from __future__ import annotations

import abc
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np

from simharness.errors import SimharnessTypeError, SimharnessValueError


# ArraySpec of one key: (numpy dtype, trailing shape). Plain tuples keep the
# spec picklable and TensorFlow-free.
ArraySpec = tuple[np.dtype, tuple[int, ...]]


def _readonly(a: np.ndarray) -> np.ndarray:
    """Returns a read-only view of `a` (the caller cannot corrupt our data)."""
    view = a.view()
    view.flags.writeable = False
    return view


def _fmt_ids(ids: Sequence[str], limit: int = 5) -> str:
    shown = ', '.join(repr(i) for i in list(ids)[:limit])
    return shown + (', ...' if len(ids) > limit else '')


def check_client_arrays(client_id: str, arrays: Mapping[str, Any],
                        expected: Optional[Mapping[str, ArraySpec]] = None
                        ) -> dict[str, np.ndarray]:
    """Validates one client's arrays and returns them as a dict of ndarrays.

    Args:
        client_id: the client's id, used in error messages.
        arrays: mapping from key to array-like; every array has at least one
            dimension and all share the same leading length.
        expected: if given, the keys, dtypes and trailing shapes the arrays
            must have (from another client).

    Returns:
        A new dict (same key order) of `np.ndarray` (not copied when the
        inputs already are arrays).

    Raises:
        SimharnessTypeError: an array has object dtype or a dtype other than
            the expected one.
        SimharnessValueError: no arrays, 0-d arrays, unequal lengths, or keys
            or trailing shapes that differ from `expected`.
    """
    if not isinstance(arrays, Mapping):
        raise SimharnessTypeError(
            f'client {client_id!r}: expected a mapping from key to array, got '
            f'{type(arrays).__name__}', expected='Mapping[str, array]',
            actual=type(arrays))
    if not arrays:
        raise SimharnessValueError(f'client {client_id!r} has no arrays')
    out: dict[str, np.ndarray] = {}
    length = None
    for key, value in arrays.items():
        if not isinstance(key, str):
            raise SimharnessTypeError(
                f'client {client_id!r}: array keys must be str, got {key!r} '
                f'({type(key).__name__})', expected=str, actual=type(key))
        a = np.asarray(value)
        if a.dtype == object:
            raise SimharnessTypeError(
                f'client {client_id!r}, array {key!r}: object arrays are not '
                'supported; use numeric or fixed-width string dtypes',
                expected='numeric dtype', actual=a.dtype)
        if a.ndim == 0:
            raise SimharnessValueError(
                f'client {client_id!r}, array {key!r}: needs at least one '
                'dimension (the example axis), got a scalar')
        if length is None:
            length = a.shape[0]
        elif a.shape[0] != length:
            lengths = {k: np.shape(v)[0] if np.ndim(v) else None
                       for k, v in arrays.items()}
            raise SimharnessValueError(
                f'client {client_id!r}: arrays must have the same leading '
                f'length (number of examples), got {lengths}')
        out[key] = a
    if expected is not None:
        if list(out) != list(expected):
            raise SimharnessValueError(
                f'client {client_id!r} has arrays {sorted(out)}, expected '
                f'{sorted(expected)} like the other clients')
        for key, a in out.items():
            dtype, shape = expected[key]
            if a.dtype != dtype:
                raise SimharnessTypeError(
                    f'client {client_id!r}, array {key!r}: dtype {a.dtype} '
                    f'differs from {dtype} of the other clients',
                    expected=dtype, actual=a.dtype)
            if a.shape[1:] != shape:
                raise SimharnessValueError(
                    f'client {client_id!r}, array {key!r}: trailing shape '
                    f'{a.shape[1:]} differs from {shape} of the other clients')
    return out


def array_spec_of(arrays: Mapping[str, np.ndarray]) -> dict[str, ArraySpec]:
    """The (dtype, trailing shape) of each array, in key order."""
    return {k: (a.dtype, tuple(a.shape[1:])) for k, a in arrays.items()}


class ClientData(abc.ABC):
    """A federated data set: per-client arrays addressed by string client ids.

    Subclasses implement `client_ids` and `client_arrays`; everything else
    has a default built on those two. Client ids keep their given order
    (not sorted), so index ``k`` of `client_ids` is a stable client index.

    Like `tff.simulation.datasets.ClientData`, but the raw arrays are first
    class: `client_arrays` returns them without going through `tf.data`.
    """

    @property
    @abc.abstractmethod
    def client_ids(self) -> list[str]:
        """The client ids, in a fixed order (a new list on each call)."""

    @abc.abstractmethod
    def client_arrays(self, client_id: str) -> dict[str, np.ndarray]:
        """The raw arrays of one client, e.g. ``{'x': [n, ...], 'y': [n]}``.

        Args:
            client_id: one of `client_ids`.

        Returns:
            A dict of arrays with a common leading length (the examples).
            The arrays may be read-only views of the stored data.

        Raises:
            SimharnessValueError: unknown client id.
        """

    @property
    def array_spec(self) -> dict[str, ArraySpec]:
        """Per key: (numpy dtype, trailing shape) shared by all clients."""
        return array_spec_of(self.client_arrays(self.client_ids[0]))

    @property
    def element_spec(self) -> Any:
        """The `tf.TensorSpec` structure of one element of a client dataset."""
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        return {k: tf.TensorSpec(shape, tf.as_dtype(_tf_compatible(dtype)))
                for k, (dtype, shape) in self.array_spec.items()}

    def client_size(self, client_id: str) -> int:
        """The number of examples (leading length of the arrays) of a client."""
        arrays = self.client_arrays(client_id)
        return int(next(iter(arrays.values())).shape[0])

    def create_tf_dataset_for_client(self, client_id: str) -> Any:
        """A `tf.data.Dataset` over one client's examples, in stored order.

        Args:
            client_id: one of `client_ids`.

        Returns:
            A dataset whose elements are dicts of tensors (one example each).
        """
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        return tf.data.Dataset.from_tensor_slices(self.client_arrays(client_id))

    def create_tf_dataset_from_all_clients(self) -> Any:
        """All clients' datasets concatenated in `client_ids` order."""
        ids = self.client_ids
        ds = self.create_tf_dataset_for_client(ids[0])
        for cid in ids[1:]:
            ds = ds.concatenate(self.create_tf_dataset_for_client(cid))
        return ds

    def preprocess(self, fn: Callable[[Any], Any]) -> 'ClientData':
        """Returns a new ClientData whose client datasets are ``fn(dataset)``.

        As in TFF, `fn` maps a `tf.data.Dataset` to a `tf.data.Dataset`
        (map, batch, ...). The new data set materializes `client_arrays` by
        iterating the preprocessed dataset (its elements must be dicts of
        tensors of equal shape; a batched dataset with a ragged last batch
        cannot be materialized). `client_size` then counts elements of the
        preprocessed dataset (batches, if `fn` batches).

        Args:
            fn: a function from `tf.data.Dataset` to `tf.data.Dataset`.

        Returns:
            A `ClientData` with the same client ids.

        Raises:
            SimharnessTypeError: `fn` is not callable.
        """
        if not callable(fn):
            raise SimharnessTypeError(
                f'preprocess expects a callable dataset -> dataset, got '
                f'{type(fn).__name__}', expected='callable', actual=type(fn))
        return _PreprocessedClientData(self, fn)

    def _unknown_client(self, client_id: Any) -> SimharnessValueError:
        ids = self.client_ids
        return SimharnessValueError(
            f'unknown client id {client_id!r}; this data set has {len(ids)} '
            f'clients: {_fmt_ids(ids)}')


def _tf_compatible(dtype: np.dtype) -> Any:
    """Maps numpy string dtypes to `tf.string`'s numpy twin (object)."""
    if dtype.kind in ('U', 'S'):
        return np.object_
    return dtype


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
            raise SimharnessValueError(f'no array {key!r} in this data set; it has '
                                       f'{", ".join(map(repr, spec))}')
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
            raise SimharnessTypeError(f'StackedRows reads slices of rows, got '
                                      f'{type(index).__name__}', expected=slice,
                                      actual=type(index))
        lo, hi, step = index.indices(len(self))
        if step != 1:
            raise SimharnessValueError(f'StackedRows reads contiguous rows, got step {step}')
        parts = []
        k = int(np.searchsorted(self._ends, lo, side='right'))
        while lo < hi and k < len(self._ids):
            start = int(self._ends[k - 1]) if k else 0
            a = self._cd.client_arrays(self._ids[k])[self._key]
            parts.append(a[lo - start:min(hi, int(self._ends[k])) - start])
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
    """A `ClientData` held in memory as numpy arrays.

    The arrays are not copied; `client_arrays` returns read-only views.
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
                f'ArrayClientData expects a mapping client_id -> arrays, got '
                f'{type(data).__name__}', expected='Mapping[str, Mapping]',
                actual=type(data))
        if not data:
            raise SimharnessValueError('ArrayClientData needs at least one client')
        self._data: dict[str, dict[str, np.ndarray]] = {}
        spec: Optional[dict[str, ArraySpec]] = None
        for cid, arrays in data.items():
            if not isinstance(cid, str):
                raise SimharnessTypeError(
                    f'client ids must be str, got {cid!r} ({type(cid).__name__})',
                    expected=str, actual=type(cid))
            checked = check_client_arrays(cid, arrays, spec)
            if spec is None:
                spec = array_spec_of(checked)
            self._data[cid] = checked
        self._spec: dict[str, ArraySpec] = spec or {}

    @classmethod
    def from_stacked(cls, x: Any, y: Any, client_ids: Optional[Sequence[str]] = None,
                     *, x_key: str = 'x', y_key: str = 'y') -> 'ArrayClientData':
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
                f'shapes {x.shape} and {y.shape}')
        if x.shape[:2] != y.shape[:2]:
            raise SimharnessValueError(
                f'from_stacked: x and y must agree on [K, n], got x {x.shape} '
                f'and y {y.shape}')
        if x_key == y_key:
            raise SimharnessValueError(f'x_key and y_key are both {x_key!r}')
        k = x.shape[0]
        ids = [str(i) for i in range(k)] if client_ids is None else list(client_ids)
        if len(ids) != k:
            raise SimharnessValueError(
                f'from_stacked: got {len(ids)} client ids for {k} clients')
        if len(set(ids)) != len(ids):
            raise SimharnessValueError('from_stacked: client ids are not unique')
        return cls({cid: {x_key: x[i], y_key: y[i]} for i, cid in enumerate(ids)})

    @property
    def client_ids(self) -> list[str]:
        return list(self._data)

    @property
    def array_spec(self) -> dict[str, ArraySpec]:
        return dict(self._spec)

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


class _PreprocessedClientData(ClientData):
    """The result of `ClientData.preprocess`: datasets pass through `fn`."""

    def __init__(self, base: ClientData, fn: Callable[[Any], Any]):
        self._base = base
        self._fn = fn

    @property
    def client_ids(self) -> list[str]:
        return self._base.client_ids

    def create_tf_dataset_for_client(self, client_id: str) -> Any:
        return self._fn(self._base.create_tf_dataset_for_client(client_id))

    @property
    def element_spec(self) -> Any:
        # Apply fn to an empty dataset with the base spec: no client is loaded.
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        empty = {k: np.zeros((0,) + shape, dtype)
                 for k, (dtype, shape) in self._base.array_spec.items()}
        return self._fn(tf.data.Dataset.from_tensor_slices(empty)).element_spec

    @property
    def array_spec(self) -> dict[str, ArraySpec]:
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        spec = self.element_spec
        if not isinstance(spec, Mapping) or not all(
                isinstance(s, tf.TensorSpec) for s in spec.values()):
            raise SimharnessTypeError(
                'preprocessed elements must be dicts of tensors to have an '
                f'array spec, got {spec}', expected='dict[str, TensorSpec]',
                actual=spec)
        out = {}
        for k, s in spec.items():
            if not s.shape.is_fully_defined():
                raise SimharnessValueError(
                    f'preprocessed element {k!r} has shape {s.shape} with an '
                    'unknown dimension (a ragged batch?); cannot give an array spec')
            out[k] = (np.dtype(s.dtype.as_numpy_dtype), tuple(s.shape.as_list()))
        return out

    def client_arrays(self, client_id: str) -> dict[str, np.ndarray]:
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        if client_id not in set(self._base.client_ids):
            raise self._unknown_client(client_id)
        ds = self.create_tf_dataset_for_client(client_id)
        if int(ds.cardinality()) == int(tf.data.INFINITE_CARDINALITY):
            raise SimharnessValueError(
                f'client {client_id!r}: the preprocessed dataset is infinite '
                '(repeat() without a count?); cannot materialize its arrays')
        if not isinstance(ds.element_spec, Mapping):
            raise SimharnessTypeError(
                f'client {client_id!r}: preprocessed elements must be dicts of '
                f'tensors to give arrays, got {ds.element_spec}; map them to a '
                "dict such as {'x': x, 'y': y}",
                expected='dict[str, TensorSpec]', actual=ds.element_spec)
        keys = list(ds.element_spec)
        columns: dict[str, list] = {k: [] for k in keys}
        for element in ds.as_numpy_iterator():
            for k in keys:
                columns[k].append(element[k])
        out = {}
        for k in keys:
            s = ds.element_spec[k]
            if not columns[k]:
                shape = tuple(d or 0 for d in s.shape.as_list())
                out[k] = np.zeros((0,) + shape, s.dtype.as_numpy_dtype)
                continue
            try:
                out[k] = np.stack(columns[k])
            except ValueError as e:
                raise SimharnessValueError(
                    f'client {client_id!r}, element {k!r}: elements of the '
                    'preprocessed dataset have different shapes (a ragged last '
                    'batch? use batch(..., drop_remainder=True)); cannot stack '
                    'them into one array') from e
        return out


def sample_clients(client_ids: Sequence[str], num_clients: int, round_num: int,
                   seed: int) -> list[str]:
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
    for name, value in (('num_clients', num_clients), ('round_num', round_num),
                        ('seed', seed)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise SimharnessTypeError(
                f'sample_clients: {name} must be an int, got {value!r} '
                f'({type(value).__name__})', expected=int, actual=type(value))
        if value < 0:
            raise SimharnessValueError(
                f'sample_clients: {name} must be >= 0, got {value}')
    population = list(client_ids)
    if num_clients > len(population):
        raise SimharnessValueError(
            f'sample_clients: cannot sample {num_clients} distinct clients from '
            f'a population of {len(population)}')
    rng = np.random.default_rng((int(seed), int(round_num)))
    idx = rng.choice(len(population), size=num_clients, replace=False)
    return [population[i] for i in idx]
