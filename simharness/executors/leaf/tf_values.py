"""Values into and out of the eager runtime: numpy/Python/TF values as tensors of a type.

`ingest` turns a user's or a peer's value into what an `EagerTFExecutor`
holds for a type (eager tensors, `Struct`s of them, `TensorBatches` or
`tf.data.Dataset`s), checking it against the type with clear errors;
`fast_tensor` / `fast_numpy` move large arrays between numpy and TF through
dlpack (one copy in, none out). Given a `Pin` (a worker's `SharedReads.pin`,
handed in by the host that owns the shared memory), an array of a broadcast
that memory holds becomes a tensor read in place, not a copy.
"""

from __future__ import annotations

import collections
import inspect
import functools
import types
from typing import Any, Callable, List, Optional, Sequence, Tuple, Union, cast

import attrs
import numpy as np
import tensorflow as tf

from simharness.core import building_blocks as bb
from simharness.core import types as T
from simharness.core.buffers import POOL, aligned_empty, fast_copyto
from simharness.core.sequences import TensorBatches
from simharness.core.structure import (
    Struct,
    flatten,
    from_container,
    map_structure,
    mark_adopted,
    tensor_to_numpy,
)
from simharness.core.tf_serialization import element_spec_for, tf_dtype
from simharness.core.dataset_templates import attach_template_recipe
from simharness.core.tf_sequences import fresh_copy, read_fresh
from simharness.errors import SimharnessTypeError, SimharnessValueError
from simharness.executors.leaf import tensor_sequences as tseq


#: Arrays at least this big move between numpy and TF through dlpack.
DLPACK_MIN_BYTES = 1 << 18

#: An array lying in memory another process wrote for this one (a broadcast) as a view
#: that a tensor may adopt in place, held while it lives; None for any other array
#: (`core.buffers.SharedReads.pin`).
Pin = Callable[[np.ndarray], Optional[np.ndarray]]


def fast_tensor(arr: np.ndarray) -> tf.Tensor:
    """A tensor holding a private copy of `arr`.

    Arrays of plain numbers are copied once into a 64-byte-aligned buffer
    that the tensor then adopts through dlpack (`_tensor_of_copy`); others use
    `tf.convert_to_tensor`.
    """
    if not _copyable(arr):
        return tf.convert_to_tensor(arr)
    return _tensor_of_copy(arr)[0]


def _copyable(arr: np.ndarray) -> bool:
    """Plain numbers of native byte order: what dlpack carries (bool, int, uint, float; dlpack
    of a string or object array aborts the process)."""
    return arr.dtype.kind in 'biuf' and arr.dtype.isnative


def _dlpack_size(arr: np.ndarray) -> bool:
    """Big enough for sharing through dlpack to pay, and `_copyable`."""
    return arr.nbytes >= DLPACK_MIN_BYTES and _copyable(arr)


def _tensor_of_copy(arr: np.ndarray) -> Tuple[tf.Tensor, np.ndarray]:
    """A tensor adopting a private, 64-byte-aligned copy of the `_copyable` `arr`, and that copy.

    Even for small arrays this is several times faster than TF's own conversion
    (``tf.convert_to_tensor`` of a small numpy array costs 35-90 us here, TF 2.21,
    2026-11-30: a client's [70, 64] float32 batch 52 us, a scalar 85 us; this, 5-19 us),
    with the same dtype, shape and bytes.
    """
    # Big: a pooled buffer, no fresh pages to fault in when the same size comes again
    # (the tensor keeps the buffer referenced, so it is not reused while it lives).
    # 64-byte aligned either way: a misaligned view aborts.
    if arr.nbytes >= DLPACK_MIN_BYTES:
        own = POOL.empty(arr.shape, arr.dtype)
    else:
        own = aligned_empty(arr.shape, arr.dtype)
    fast_copyto(own, arr)
    return tf.experimental.dlpack.from_dlpack(own.__dlpack__()), own


def adopt_tensor(arr: Union[np.ndarray, np.generic]) -> tf.Tensor:
    """A tensor of `arr` that shares its memory (no copy) when it can; else of a private copy.

    Only for arrays that nobody will write again: results the caller just
    computed (a sum into a pooled buffer, a copy out of shared memory). Shares
    when `arr` is big and `_copyable`, C-contiguous, writable (numpy exports no
    read-only array) and 64-byte aligned; the tensor keeps `arr` alive.
    """
    arr = np.asarray(arr)
    if not _dlpack_size(arr):
        return fast_tensor(arr)
    if arr.flags.c_contiguous and arr.flags.writeable and arr.ctypes.data % 64 == 0:
        t, own = tf.experimental.dlpack.from_dlpack(arr.__dlpack__()), arr
    else:  # not shareable (read-only: a partial read in place in a worker's arena)
        t, own = _tensor_of_copy(arr)
    mark_adopted(t, own)  # a result: the context may hand `own` out instead of a copy
    return t


def fast_numpy(t: Any) -> np.ndarray:
    """A read-only numpy view of a CPU tensor (no copy for large ones)."""
    if isinstance(t, np.ndarray):
        return t
    if not hasattr(t, 'numpy'):
        return np.asarray(t)
    if t.dtype.size * t.shape.num_elements() >= DLPACK_MIN_BYTES:
        return tensor_to_numpy(t)
    return t.numpy()


def _check_shape(value_shape: Tuple[int, ...], t: T.TensorType, what: Any) -> None:
    reason = T.shape_refusal(value_shape, t)
    if reason is not None:
        raise SimharnessTypeError(
            f'value {what!r:.80} is refused: {reason}', expected=t, actual=tuple(value_shape)
        )


def _is_ml_dtype(dt: np.dtype) -> bool:
    """True for the plain numeric dtypes of `ml_dtypes` (bfloat16, float8_*, int4, ...).

    numpy gives them kind 'V', as it does structured and raw void dtypes,
    which are not numbers.
    """
    return (
        dt.kind == 'V'
        and dt.names is None
        and not dt.shape
        and dt.type.__module__.startswith('ml_dtypes')
    )


def to_tensor(value: Any, t: T.TensorType, pin: Optional[Pin] = None) -> tf.Tensor:
    """Converts one leaf to an eager tensor of type `t`, with clear errors.

    Args:
      value: the leaf (a tensor, numpy array or Python value).
      t: its type.
      pin: where a broadcast's arrays are read in place (`Pin`); None: copied.
    """
    if isinstance(value, tf.Tensor):
        if value.dtype != tf_dtype(t.dtype):
            raise SimharnessTypeError(
                f'tensor of dtype {value.dtype.name} is not assignable to {t}',
                expected=t,
                actual=value.dtype.name,
            )
        _check_shape(tuple(value.shape), t, value)
        return value
    if isinstance(value, (tf.data.Dataset, Struct, dict, list)) and not (
        isinstance(value, list) and t.shape
    ):
        raise SimharnessTypeError(
            f'value {value!r:.80} ({type(value).__name__}) is not assignable to tensor type {t}',
            expected=t,
            actual=type(value).__name__,
        )
    if t.dtype == np.dtype(object):
        arr = np.asarray(value, dtype=object)
        bad = next((x for x in arr.flat if not isinstance(x, (str, bytes))), None)
        if bad is not None:
            raise SimharnessTypeError(
                f'value {value!r:.80} is not assignable to {t}: '
                f'{bad!r} ({type(bad).__name__}) is not a str or bytes',
                expected=t,
                actual=type(bad).__name__,
            )
    else:
        src = np.asarray(value)
        if (
            src.dtype == object
            or src.dtype.kind in 'US'
            or (src.dtype.kind == 'V' and not _is_ml_dtype(src.dtype))
        ):
            raise SimharnessTypeError(
                f'value {value!r:.80} ({src.dtype}) is not assignable to {t}',
                expected=t,
                actual=str(src.dtype),
            )
        T.check_array(src, t, value)  # the rule for client values: no lossy cast, no wrap
        src = src.astype(t.dtype, copy=False)
        if pin is not None and _dlpack_size(src) and src.ctypes.data % 64 == 0:
            shared = pin(src)
            if shared is not None:  # a broadcast in shared memory: read in place, no copy
                return tf.experimental.dlpack.from_dlpack(shared.__dlpack__())
        return fast_tensor(src)
    _check_shape(arr.shape, t, value)
    return fast_tensor(arr)


def _empty_shape(shape: tf.TensorShape) -> List[int]:
    """The shape of an empty column of elements of `shape` (unknown dimensions: 0)."""
    return [0] + ([d or 0 for d in shape.as_list()] if shape.rank is not None else [])


def dataset_from_value(value: Any, t: T.SequenceType) -> tf.data.Dataset:
    """A dataset of `t` from a dataset, a list of elements or a generator (function).

    A generator function (or generator) is drained into a list of elements,
    so that the dataset holds no Python state (it can then move to other
    executors and processes as a serialized graph). Elements of one shape are
    one ``from_tensor_slices``; elements of different shapes (a type with unknown
    dimensions) are concatenated. Also what a context returns for a sequence
    result (`simharness.context.to_python`), as TFF's contexts return a dataset.
    """
    value = elements_of_generator(value)
    if isinstance(value, tf.data.Dataset):
        actual = T.from_tf_structure(value.element_spec)
        if not t.element.is_assignable_from(actual):
            raise SimharnessTypeError(
                f'dataset of {actual}* is not assignable to {t}',
                expected=t,
                actual=T.SequenceType(actual),
            )
        return value
    if isinstance(value, (list, tuple)):
        spec = element_spec_for(t.element)
        elems = [ingest(v, t.element) for v in value]
        if not elems:
            return tf.data.Dataset.from_tensor_slices(
                tf.nest.map_structure(lambda s: tf.zeros(_empty_shape(s.shape), s.dtype), spec)
            )
        py = [struct_to_spec_container(e, spec) for e in elems]
        if all(len({tuple(x.shape) for x in leaf}) == 1 for leaf in zip(*map(flatten, elems))):
            stacked = tf.nest.map_structure(lambda *xs: tf.stack(xs), *py)
            return tf.data.Dataset.from_tensor_slices(stacked)
        # Ragged: elements of different shapes (a type with unknown dimensions) are
        # concatenated, a balanced tree of one-element datasets.
        parts = [tf.data.Dataset.from_tensors(e) for e in py]
        while len(parts) > 1:
            pairs = [a.concatenate(b) for a, b in zip(parts[::2], parts[1::2])]
            parts = pairs + ([parts[-1]] if len(parts) % 2 else [])
        return parts[0]
    raise SimharnessTypeError(
        f'value {value!r:.80} ({type(value).__name__}) is not a sequence; '
        f'expected a tf.data.Dataset or a list for {t}',
        expected=t,
    )


def _tensors(pin: Optional[Pin]) -> Callable[[Any, T.TensorType], tf.Tensor]:
    """`to_tensor` reading a broadcast's arrays in place where `pin` is given."""
    return to_tensor if pin is None else functools.partial(to_tensor, pin=pin)


def sequence_from_value(value: Any, t: T.SequenceType, pin: Optional[Pin] = None) -> Any:
    """What an executor holds for a sequence: `TensorBatches` when its elements are
    slices of in-memory tensors (a list of elements, ``from_tensor_slices``,
    ``.batch``), else a `tf.data.Dataset` (`pin`: as `to_tensor`'s)."""
    if isinstance(value, TensorBatches):
        return tseq.checked(value, t, _tensors(pin))
    if isinstance(value, tf.data.Dataset):
        tb = tseq.recognize(value, t)
        if tb is not None:
            try:
                out = tseq.checked(tb, t, _tensors(pin))
            except (SimharnessTypeError, SimharnessValueError):
                return dataset_from_value(value, t)  # the dataset path says what is wrong
            out.derived['dataset'] = value  # the user's own object, if it is asked for
            return out
        # a small finite pipeline: the elements of a fresh copy, as TFF's executors read it
        # (by its template's traced reader when another client's dataset made one)
        attach_template_recipe(value)
        tb = read_fresh(value, t)
        if tb is not None:
            return tseq.checked(tb, t, _tensors(pin))
        return dataset_from_value(fresh_copy(value), t)
    value = elements_of_generator(value)
    if isinstance(value, (list, tuple)) and value:
        types = tseq.component_types(t, batched=False)
        if types is not None and all(l.is_fully_defined for l in T.flatten_type(t.element)):
            elems = [ingest(v, t.element, pin) for v in value]
            leaves = [flatten(e) for e in elems]
            comps = [tf.stack([row[j] for row in leaves]) for j in range(len(types))]
            return TensorBatches(comps, None, False, t.element)
    return dataset_from_value(value, t)


def revive_datasets(x: Any) -> Any:
    """`x` with every `DatasetBlob` (a dataset as it crosses from a worker) rebuilt into its
    dataset; the rest as it is."""
    from simharness.runtime.codec import DatasetBlob
    from simharness.runtime.datasets import dataset_from_blob
    from simharness.runtime.protocol import map_leaves

    return map_leaves(x, lambda v: dataset_from_blob(v) if isinstance(v, DatasetBlob) else v)


def as_dataset(x: Any) -> Any:
    """A `tf.data.Dataset` for a `TensorBatches`; anything else unchanged."""
    return tseq.to_dataset(x) if isinstance(x, TensorBatches) else x


def elements_of_generator(value: Any) -> Any:
    """The elements of a generator function or generator, as a list; anything else unchanged."""
    if isinstance(value, types.GeneratorType):
        return list(value)
    if inspect.isgeneratorfunction(value) or (
        callable(value)
        and not isinstance(value, (tf.data.Dataset, type))
        and not hasattr(value, 'type_signature')
    ):
        return list(value())
    return value


def struct_to_spec_container(value: Any, spec: Any) -> Any:
    """`value` (a `Struct` of tensors) in the containers of the element structure `spec`."""
    if isinstance(value, Struct):
        elems = [struct_to_spec_container(v, s) for v, s in zip(value, _spec_children(spec))]
        if isinstance(spec, collections.abc.Mapping):
            return cast(Any, type(spec))(zip(spec.keys(), elems))  # a concrete Mapping class
        if T.is_namedtuple(spec):
            return type(spec)(*elems)
        if attrs.has(type(spec)):
            return type(spec)(**dict(zip(_attrs_names(spec), elems)))
        return tuple(elems)
    return value


def _attrs_names(spec: attrs.AttrsInstance) -> List[str]:
    return [f.name for f in attrs.fields(type(spec))]


def _spec_children(spec: Any) -> list:
    if isinstance(spec, collections.abc.Mapping):
        return list(spec.values())
    if attrs.has(type(spec)):
        return [getattr(spec, n) for n in _attrs_names(spec)]
    return list(spec)


def ingest(value: Any, t: T.Type, pin: Optional[Pin] = None) -> Any:
    """Converts a Python/numpy/TF value into this executor's representation of type `t`.

    Args:
      value: the value.
      t: its type.
      pin: where a broadcast's arrays are read in place (`Pin`); None: copied.
    """
    if isinstance(value, bb.Data):  # external data: read here (see simharness.data.uri)
        from simharness.data.uri import resolve as resolve_data_uri

        if not t.is_assignable_from(value.type_signature):
            raise SimharnessTypeError(
                f'Data {value.uri!r} of type {value.type_signature} is not assignable to {t}',
                expected=t,
                actual=value.type_signature,
            )
        value = resolve_data_uri(value.uri, value.type_signature)
        if isinstance(t, T.SequenceType):
            value = tf.data.Dataset.from_tensor_slices(value)
    if isinstance(t, T.TensorType):
        return to_tensor(value, t, pin)
    if isinstance(t, T.StructType):
        s = from_container(value, t)
        return Struct((n, ingest(v, e, pin)) for (n, e), v in zip(t.items(), s))
    if isinstance(t, T.SequenceType):
        return sequence_from_value(value, t, pin)
    raise SimharnessTypeError(f'an EagerTFExecutor cannot hold a value of type {t}', actual=t)


def ingest_owned(value: Any, t: T.Type) -> Any:
    """`ingest` of a value the caller just computed and gives away (a reduction's result).

    Tensor leaves that are numpy arrays of exactly the leaf's dtype and a
    fitting shape become tensors without a copy (`adopt_tensor`); the rest
    goes through `ingest`, with its checks.
    """
    if isinstance(t, T.TensorType):
        if (
            isinstance(value, (np.ndarray, np.generic))
            and t.dtype != np.dtype(object)
            and value.dtype == np.dtype(t.dtype)
            and T.shape_refusal(value.shape, t) is None
        ):
            return adopt_tensor(value)  # a numpy scalar (a reduced scalar leaf) too
        return ingest(value, t)
    if isinstance(t, T.StructType) and isinstance(value, Struct) and len(value) == len(t):
        return Struct((n, ingest_owned(v, e)) for (n, e), v in zip(t.items(), value))
    return ingest(value, t)


def numpy_tree(x: Any) -> Any:
    def leaf(v):
        if isinstance(v, TensorBatches):
            v = as_dataset(v)
        if isinstance(v, tf.data.Dataset):  # datasets are materialized by the context
            return v
        return fast_numpy(v)

    return map_structure(leaf, x)


def as_tensors(xs: Sequence[Any]) -> List[Any]:
    return [x if isinstance(x, tf.Tensor) else fast_tensor(np.asarray(x)) for x in xs]
