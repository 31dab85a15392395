"""`ClientData`: TFF's federated data set API (`tff.simulation.datasets.ClientData`).

One family: the abstract `ClientData` here has TFF's whole API
(`client_ids`, `serializable_dataset_fn`, `element_type_structure`,
`create_tf_dataset_for_client`, `dataset_computation`, `datasets`,
`create_tf_dataset_from_all_clients`, `preprocess`, `from_clients_and_tf_fn`,
`train_test_client_split`), and adds the raw-array view our runtime moves
around (`client_arrays`, `client_size`, `array_spec`). Array-backed data sets
(`ArrayClientData`, `TestClientData`, `FileClientData`) override the raw view
with their stored arrays; any other subclass (a user's, `SqlClientData`,
`PreprocessClientData`) gets it by iterating the client's `tf.data.Dataset`.

::

    ClientData (abstract: client_ids, serializable_dataset_fn, element_type_structure)
      ├─ PreprocessClientData   ClientData.preprocess(fn)
      ├─ ConcreteClientData     ClientData.from_clients_and_tf_fn(ids, fn)
      ├─ TestClientData, ArrayClientData  (data/client_data.py: in memory)
      ├─ FileClientData         (data/files.py: .npz files)
      └─ FilePerUserClientData, SqlClientData  (simulation/datasets)

TensorFlow is imported by the methods that build datasets, so importing this
module stays cheap.
"""

from __future__ import annotations

import abc
import logging
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional, Sequence, Union

import numpy as np

from simharness.core.computation import Computation, tf_computation
from simharness.errors import SimharnessTypeError, SimharnessValueError, UnknownClientError

_LOG = logging.getLogger(__name__)

# ArraySpec of one key: (numpy dtype, trailing shape). Plain tuples keep the
# spec picklable and TensorFlow-free.
ArraySpec = tuple[np.dtype, tuple[int, ...]]
Seed = Optional[Union[int, Sequence[int]]]


class IncompatiblePreprocessFnError(SimharnessTypeError):
    """`ClientData.preprocess` was given a computation instead of a TF-traceable function."""

    def __init__(self) -> None:
        super().__init__(
            'The preprocess_fn must not be a federated_language.Computation. Please use a '
            'python callable or tf.function instead. This restriction is because '
            '`tf.data.Dataset.map` wraps preprocessing functions with a `tf.function` '
            'decorator, which cannot call to a `federated_language.Computation`.',
            expected='callable dataset -> dataset',
            actual=Computation,
        )


class InvalidRandomSeedError(SimharnessTypeError):
    """A seed that `np.random.RandomState` does not take (as TFF's)."""

    def __init__(self, seed_type: Any) -> None:
        super().__init__(
            'The seed must be a nonnegative 32-bit integer, a sequence of such integers, or '
            f'None. Found {seed_type} instead.',
            expected='int in [0, 2**32), a sequence of such ints, or None',
            actual=seed_type,
        )


def is_nonnegative_32_bit_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 2**32


def check_numpy_random_seed(seed: Any) -> None:
    """Raises `InvalidRandomSeedError` unless `seed` is None, a uint32 or a sequence of them."""
    if seed is None or is_nonnegative_32_bit_int(seed):
        return
    if (
        isinstance(seed, Sequence)
        and not isinstance(seed, (str, bytes))
        and all(is_nonnegative_32_bit_int(x) for x in seed)
    ):
        return
    raise InvalidRandomSeedError(type(seed))


def _readonly(a: np.ndarray) -> np.ndarray:
    """Returns a read-only view of `a` (the caller cannot corrupt our data)."""
    view = a.view()
    view.flags.writeable = False
    return view


def _fmt_ids(ids: Sequence[str], limit: int = 5) -> str:
    shown = ', '.join(repr(i) for i in list(ids)[:limit])
    return shown + (', ...' if len(ids) > limit else '')


def check_client_arrays(
    client_id: str, arrays: Mapping[str, Any], expected: Optional[Mapping[str, ArraySpec]] = None
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
            f'{type(arrays).__name__}',
            expected='Mapping[str, array]',
            actual=type(arrays),
        )
    if not arrays:
        raise SimharnessValueError(f'client {client_id!r} has no arrays')
    out: dict[str, np.ndarray] = {}
    length = None
    for key, value in arrays.items():
        if not isinstance(key, str):
            raise SimharnessTypeError(
                f'client {client_id!r}: array keys must be str, got {key!r} ({type(key).__name__})',
                expected=str,
                actual=type(key),
            )
        a = np.asarray(value)
        if a.dtype == object:
            raise SimharnessTypeError(
                f'client {client_id!r}, array {key!r}: object arrays are not '
                'supported; use numeric or fixed-width string dtypes',
                expected='numeric dtype',
                actual=a.dtype,
            )
        if a.ndim == 0:
            raise SimharnessValueError(
                f'client {client_id!r}, array {key!r}: needs at least one '
                'dimension (the example axis), got a scalar'
            )
        if length is None:
            length = a.shape[0]
        elif a.shape[0] != length:
            lengths = {k: np.shape(v)[0] if np.ndim(v) else None for k, v in arrays.items()}
            raise SimharnessValueError(
                f'client {client_id!r}: arrays must have the same leading '
                f'length (number of examples), got {lengths}'
            )
        out[key] = a
    if expected is not None:
        if list(out) != list(expected):
            raise SimharnessValueError(
                f'client {client_id!r} has arrays {sorted(out)}, expected '
                f'{sorted(expected)} like the other clients'
            )
        for key, a in out.items():
            dtype, shape = expected[key]
            if a.dtype != dtype:
                raise SimharnessTypeError(
                    f'client {client_id!r}, array {key!r}: dtype {a.dtype} '
                    f'differs from {dtype} of the other clients',
                    expected=dtype,
                    actual=a.dtype,
                )
            if a.shape[1:] != shape:
                raise SimharnessValueError(
                    f'client {client_id!r}, array {key!r}: trailing shape '
                    f'{a.shape[1:]} differs from {shape} of the other clients'
                )
    return out


def array_spec_of(arrays: Mapping[str, np.ndarray]) -> dict[str, ArraySpec]:
    """The (dtype, trailing shape) of each array, in key order."""
    return {k: (a.dtype, tuple(a.shape[1:])) for k, a in arrays.items()}


def tf_compatible_dtype(dtype: np.dtype) -> Any:
    """Maps numpy string dtypes to `tf.string`'s numpy twin (object)."""
    if dtype.kind in ('U', 'S'):
        return np.object_
    return dtype


def element_spec_of(spec: Mapping[str, ArraySpec]) -> dict[str, Any]:
    """The `tf.TensorSpec` dict of one element of arrays with `spec`."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    return {
        k: tf.TensorSpec(shape, tf.as_dtype(tf_compatible_dtype(np.dtype(dtype))))
        for k, (dtype, shape) in spec.items()
    }


class ClientData(abc.ABC):
    """A federated data set: a list of client ids and a function from id to `tf.data.Dataset`.

    TFF's `tff.simulation.datasets.ClientData`. Subclasses implement
    `client_ids`, `serializable_dataset_fn` (TF-traceable: it also runs inside
    a `tf_computation`, on the workers, as `dataset_computation`) and
    `element_type_structure`. The raw-array view (`client_arrays`,
    `client_size`, `array_spec`) is ours: array-backed subclasses return their
    stored arrays; the default iterates the client's dataset, whose elements
    must then be dicts of tensors of one shape.
    """

    @property
    @abc.abstractmethod
    def client_ids(self) -> list[str]:
        """A list of string identifiers for clients in this dataset."""

    @property
    @abc.abstractmethod
    def serializable_dataset_fn(self) -> Callable[[Any], Any]:
        """A callable from a client id (str or string tensor) to a `tf.data.Dataset`.

        It must be traceable by TF: `dataset_computation` traces it into a
        graph, so no Python of it runs at execution time.
        """

    @property
    @abc.abstractmethod
    def element_type_structure(self) -> Any:
        """The nested structure of `tf.TensorSpec` of one element of a client dataset."""

    # ------------------------------------------------------------- TFF's API

    def check_client_id(self, client_id: Any) -> None:
        """Raises the unknown-client error unless `client_id` is one of `client_ids`.

        Subclasses with many clients override it with a set lookup.
        """
        try:
            known = client_id in self.client_ids
        except TypeError:  # an unhashable or incomparable id
            known = False
        if not known:
            raise self._unknown_client(client_id)

    def _unknown_client(self, client_id: Any) -> UnknownClientError:
        ids = self.client_ids
        return UnknownClientError(
            f'ID [{client_id}] is not a client in this ClientData (unknown client id '
            f'{client_id!r}); this data set has {len(ids)} clients: {_fmt_ids(ids)}. See '
            'property `client_ids` for the list of valid ids.'
        )

    def create_tf_dataset_for_client(self, client_id: str) -> Any:
        """A new `tf.data.Dataset` of one client's examples.

        Raises:
            SimharnessValueError: `client_id` is not in `client_ids`.
        """
        self.check_client_id(client_id)
        return self.serializable_dataset_fn(client_id)

    def tensor_slices(self, client_id: str) -> Any:
        """The structure of arrays whose ``tf.data.Dataset.from_tensor_slices`` is the
        client's dataset, when this data set is in-memory slices (`TestClientData`,
        `ArrayClientData`); None for any other (its datasets are built otherwise).

        Raises:
            SimharnessValueError: `client_id` is not in `client_ids`.
        """
        self.check_client_id(client_id)
        return None

    @property
    def dataset_computation(self) -> Computation:
        """A `tf_computation` from a client id (``np.str_``) to that client's dataset.

        The dataset is built where the computation runs (on a worker, for the
        process stack): ``federated_map(cd.dataset_computation, client_ids)``
        ships ids, not data. The function is traced once and cached.
        """
        cached = getattr(self, '_cached_dataset_computation', None)
        if cached is None:
            fn = self.serializable_dataset_fn

            def dataset_computation(client_id: Any) -> Any:
                return fn(client_id)

            cached = tf_computation(dataset_computation, np.str_)
            self._cached_dataset_computation = cached
        return cached

    def datasets(self, limit_count: Optional[int] = None, seed: Seed = None) -> Iterator[Any]:
        """Yields the `tf.data.Dataset` of each client, in an order shuffled by `seed`.

        Args:
            limit_count: at most this many datasets.
            seed: the shuffle's seed (`np.random.RandomState`); None: a fresh order.
        """
        import tensorflow as tf  # pylint: disable=import-outside-toplevel

        check_numpy_random_seed(seed)
        client_ids = list(self.client_ids)
        np.random.RandomState(seed=seed).shuffle(client_ids)
        for count, client_id in enumerate(client_ids):
            if limit_count is not None and count >= limit_count:
                return
            dataset = self.create_tf_dataset_for_client(client_id)
            if not isinstance(dataset, tf.data.Dataset):
                raise SimharnessTypeError(
                    f'create_tf_dataset_for_client({client_id!r}) returned '
                    f'{type(dataset).__name__}, expected a tf.data.Dataset',
                    expected='tf.data.Dataset',
                    actual=type(dataset),
                )
            yield dataset

    def create_tf_dataset_from_all_clients(self, seed: Seed = None) -> Any:
        """One `tf.data.Dataset` of every client's examples, client after client.

        The clients come in an order shuffled by `seed` (None: a fresh order,
        as TFF); each client's examples keep their order.
        """
        import tensorflow as tf  # pylint: disable=import-outside-toplevel

        check_numpy_random_seed(seed)
        client_ids = list(self.client_ids)
        np.random.RandomState(seed=seed).shuffle(client_ids)
        nested = tf.data.Dataset.from_tensor_slices(client_ids)
        return nested.flat_map(self.serializable_dataset_fn)

    def preprocess(self, preprocess_fn: Callable[[Any], Any]) -> 'ClientData':
        """A `ClientData` whose client datasets are ``preprocess_fn(dataset)``.

        Args:
            preprocess_fn: a TF-traceable function from `tf.data.Dataset` to
                `tf.data.Dataset` (map, batch, shuffle, ...).

        Raises:
            IncompatiblePreprocessFnError: `preprocess_fn` is a computation.
            SimharnessTypeError: `preprocess_fn` is not callable.
        """
        if isinstance(preprocess_fn, Computation):
            raise IncompatiblePreprocessFnError()
        if not callable(preprocess_fn):
            raise SimharnessTypeError(
                f'preprocess expects a callable dataset -> dataset, got '
                f'{type(preprocess_fn).__name__}',
                expected='callable',
                actual=type(preprocess_fn),
            )
        return PreprocessClientData(self, preprocess_fn)

    @classmethod
    def from_clients_and_tf_fn(
        cls, client_ids: Iterable[str], serializable_dataset_fn: Callable[[Any], Any]
    ) -> 'ClientData':
        """A `ClientData` of `client_ids` whose datasets `serializable_dataset_fn` builds.

        Raises:
            SimharnessTypeError: `serializable_dataset_fn` is a computation.
        """
        if isinstance(serializable_dataset_fn, Computation):
            raise SimharnessTypeError(
                'The input serializable_dataset_fn cannot be a federated_language.Computation,'
                ' as it must be serializable within the context of a tf.function.',
                expected='TF-traceable callable',
                actual=type(serializable_dataset_fn),
            )
        return ConcreteClientData(client_ids, serializable_dataset_fn)

    @classmethod
    def train_test_client_split(
        cls, client_data: 'ClientData', num_test_clients: int, seed: Seed = None
    ) -> tuple['ClientData', 'ClientData']:
        """Splits the clients into (train, test) `ClientData` with disjoint ids (TFF's rule).

        Test clients are drawn from the end of the shuffled ids and all have
        at least one element; clients found empty go back to train.

        Raises:
            SimharnessValueError: `num_test_clients` <= 0 or not fewer than the
                clients, or too many empty clients.
        """
        if num_test_clients <= 0:
            raise SimharnessValueError('Please specify num_test_clients > 0.')
        if len(client_data.client_ids) <= num_test_clients:
            raise SimharnessValueError(
                f'The client_data supplied has only {len(client_data.client_ids)} clients, '
                f'but {num_test_clients} test clients were requested.'
            )
        check_numpy_random_seed(seed)
        train_ids = list(client_data.client_ids)
        np.random.RandomState(seed).shuffle(train_ids)
        empty: list[str] = []
        test_ids: list[str] = []
        while len(test_ids) < num_test_clients:
            if not train_ids or len(empty) > 5 * num_test_clients + 10:
                raise SimharnessValueError('Encountered too many clients with no data.')
            client_id = train_ids.pop()
            dataset = client_data.create_tf_dataset_for_client(client_id)
            try:
                next(iter(dataset))
            except StopIteration:
                _LOG.warning('Client %s had no data, skipping.', client_id)
                empty.append(client_id)
                continue
            test_ids.append(client_id)

        def from_ids(ids: Iterable[str]) -> 'ClientData':
            return cls.from_clients_and_tf_fn(ids, client_data.serializable_dataset_fn)

        return from_ids(train_ids + empty), from_ids(test_ids)

    # ---------------------------------------------------------- raw arrays

    @property
    def element_spec(self) -> Any:
        """Same as `element_type_structure` (the name `tf.data` uses)."""
        return self.element_type_structure

    def client_arrays(self, client_id: str) -> dict[str, np.ndarray]:
        """The raw arrays of one client, e.g. ``{'x': [n, ...], 'y': [n]}``.

        This default iterates the client's dataset: its elements must be
        dicts of tensors of one shape (a batched dataset needs
        ``drop_remainder=True``), and it must be finite.

        Raises:
            SimharnessValueError: unknown client, infinite dataset, or
                elements of different shapes.
            SimharnessTypeError: elements that are not dicts of tensors.
        """
        import tensorflow as tf  # pylint: disable=import-outside-toplevel

        self.check_client_id(client_id)
        ds = self.create_tf_dataset_for_client(client_id)
        if int(ds.cardinality()) == int(tf.data.INFINITE_CARDINALITY):
            raise SimharnessValueError(
                f'client {client_id!r}: the dataset is infinite (repeat() without a count?); '
                'cannot materialize its arrays'
            )
        spec = ds.element_spec
        if not isinstance(spec, Mapping) or not all(
            isinstance(s, tf.TensorSpec) for s in spec.values()
        ):
            raise SimharnessTypeError(
                f'client {client_id!r}: elements must be dicts of tensors to give arrays, got '
                f"{spec}; map them to a dict such as {{'x': x, 'y': y}}",
                expected='dict[str, TensorSpec]',
                actual=spec,
            )
        keys = list(spec)
        columns: dict[str, list] = {k: [] for k in keys}
        for element in ds.as_numpy_iterator():
            for k in keys:
                columns[k].append(element[k])
        out = {}
        for k in keys:
            s = spec[k]
            if not columns[k]:
                shape = tuple(d or 0 for d in s.shape.as_list())
                out[k] = np.zeros((0,) + shape, s.dtype.as_numpy_dtype)
                continue
            try:
                out[k] = np.stack(columns[k])
            except ValueError as e:
                raise SimharnessValueError(
                    f'client {client_id!r}, element {k!r}: elements of the dataset have '
                    'different shapes (a ragged last batch? use batch(..., '
                    'drop_remainder=True)); cannot stack them into one array'
                ) from e
        return out

    def client_size(self, client_id: str) -> int:
        """The number of examples (elements, after preprocessing) of a client."""
        arrays = self.client_arrays(client_id)
        return int(next(iter(arrays.values())).shape[0])

    @property
    def array_spec(self) -> dict[str, ArraySpec]:
        """Per key: (numpy dtype, trailing shape) of `client_arrays`, from the element spec.

        Raises:
            SimharnessTypeError: elements are not dicts of tensors.
            SimharnessValueError: an element shape has an unknown dimension.
        """
        import tensorflow as tf  # pylint: disable=import-outside-toplevel

        spec = self.element_type_structure
        if not isinstance(spec, Mapping) or not all(
            isinstance(s, tf.TensorSpec) for s in spec.values()
        ):
            raise SimharnessTypeError(
                f'elements must be dicts of tensors to have an array spec, got {spec}',
                expected='dict[str, TensorSpec]',
                actual=spec,
            )
        out = {}
        for k, s in spec.items():
            if not s.shape.is_fully_defined():
                raise SimharnessValueError(
                    f'element {k!r} has shape {s.shape} with an unknown dimension (a ragged '
                    'batch?); cannot give an array spec'
                )
            out[k] = (np.dtype(s.dtype.as_numpy_dtype), tuple(s.shape.as_list()))
        return out


class PreprocessClientData(ClientData):
    """`ClientData.preprocess`: every dataset passes through `preprocess_fn`.

    The element structure is that of the first client's preprocessed dataset
    (as TFF); `client_arrays` iterates the preprocessed dataset.
    """

    def __init__(self, underlying_client_data: ClientData, preprocess_fn: Callable[[Any], Any]):
        if not isinstance(underlying_client_data, ClientData):
            raise SimharnessTypeError(
                f'expected a ClientData, got {type(underlying_client_data).__name__}',
                expected=ClientData,
                actual=type(underlying_client_data),
            )
        self._underlying_client_data = underlying_client_data
        self._preprocess_fn = preprocess_fn
        self._pipeline: Optional[Any] = None  # the traced pipeline, made on first use
        ids = underlying_client_data.client_ids
        if not ids:
            raise SimharnessValueError(
                f'cannot preprocess {underlying_client_data!r}: it has no clients (the element '
                'structure comes from the first client)'
            )
        example = preprocess_fn(underlying_client_data.create_tf_dataset_for_client(ids[0]))
        self._element_type_structure = example.element_spec

        def serializable_dataset_fn(client_id: Any) -> Any:
            return preprocess_fn(underlying_client_data.serializable_dataset_fn(client_id))

        self._serializable_dataset_fn = serializable_dataset_fn

    @property
    def serializable_dataset_fn(self) -> Callable[[Any], Any]:
        return self._serializable_dataset_fn

    @property
    def client_ids(self) -> list[str]:
        return self._underlying_client_data.client_ids

    def check_client_id(self, client_id: Any) -> None:
        self._underlying_client_data.check_client_id(client_id)

    def create_tf_dataset_for_client(self, client_id: str) -> Any:
        """``preprocess_fn(underlying.create_tf_dataset_for_client(client_id))``.

        Over in-memory slices (`tensor_slices`), the pipeline is traced once
        (`simharness.core.slices_pipeline.SlicesPipeline`) and a client's dataset
        is one call of it: the same elements, without tracing the pipeline's
        functions for every client; the dataset also carries that recipe, so
        that a computation reads it in one more call.
        """
        slices = self._underlying_client_data.tensor_slices(client_id)
        if slices is not None:
            if self._pipeline is None:
                # reason: tf_sequences imports TensorFlow, which this module imports lazily
                from simharness.core.slices_pipeline import SlicesPipeline

                self._pipeline = SlicesPipeline(self._preprocess_fn)
            ds = self._pipeline.build(slices)
            if ds is not None:
                return ds
        return self._preprocess_fn(
            self._underlying_client_data.create_tf_dataset_for_client(client_id)
        )

    @property
    def element_type_structure(self) -> Any:
        return self._element_type_structure

    def __repr__(self) -> str:
        return f'PreprocessClientData({self._underlying_client_data!r})'


class ConcreteClientData(ClientData):
    """A `ClientData` given as client ids and a TF-traceable function from id to dataset."""

    def __init__(self, client_ids: Iterable[str], serializable_dataset_fn: Callable[[Any], Any]):
        if isinstance(client_ids, (str, bytes)) or not isinstance(client_ids, Iterable):
            raise SimharnessTypeError(
                f'client_ids must be an iterable of str, got {type(client_ids).__name__}',
                expected='Iterable[str]',
                actual=type(client_ids),
            )
        self._client_ids = list(client_ids)
        if not self._client_ids:
            raise SimharnessValueError('At least one client_id is required.')
        self._id_set: Optional[frozenset] = None
        self._serializable_dataset_fn = serializable_dataset_fn
        self._element_type_structure = serializable_dataset_fn(self._client_ids[0]).element_spec

    @property
    def client_ids(self) -> list[str]:
        return list(self._client_ids)

    def check_client_id(self, client_id: Any) -> None:
        if self._id_set is None:
            try:
                self._id_set = frozenset(self._client_ids)
            except TypeError:  # unhashable ids: the list's own test
                super().check_client_id(client_id)
                return
        try:
            known = client_id in self._id_set
        except TypeError:
            known = False
        if not known:
            raise self._unknown_client(client_id)

    @property
    def serializable_dataset_fn(self) -> Callable[[Any], Any]:
        return self._serializable_dataset_fn

    @property
    def element_type_structure(self) -> Any:
        return self._element_type_structure

    def __repr__(self) -> str:
        return f'ConcreteClientData({len(self._client_ids)} clients)'
