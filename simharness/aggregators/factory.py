"""TFF's aggregation factory model (``aggregators/factory.py``).

```
factory.create(value_type)                -> AggregationProcess   (UnweightedAggregationFactory)
factory.create(value_type, weight_type)   -> AggregationProcess   (WeightedAggregationFactory)
process.initialize()            -> S@SERVER
process.next(S, {V}@CLIENTS[, {W}@CLIENTS]) -> MeasuredProcessOutput(state, result@SERVER,
                                                                      measurements@SERVER)
```

Also the type checks every factory shares (`check_value_type`,
`is_structure_of_floats`, ...), as TFF's `py_typecheck` and
`federated_language.framework` helpers.
"""

from __future__ import annotations

import abc
from typing import Any, Callable, Union

import numpy as np

from simharness.core import types as T
from simharness.errors import SimharnessTypeError, SimharnessValueError
from simharness.templates import AggregationProcess

__all__ = [
    'AggregationFactory',
    'UnweightedAggregationFactory',
    'ValueType',
    'WeightedAggregationFactory',
    'check_factory',
    'check_float_nonnegative',
    'check_float_positive',
    'check_float_probability',
    'check_value_type',
    'is_structure_of_floats',
    'is_structure_of_integers',
    'is_structure_of_tensors',
]

ValueType = Union[T.TensorType, T.StructType]


class UnweightedAggregationFactory(abc.ABC):
    """Creates `AggregationProcess`es without weights."""

    @abc.abstractmethod
    def create(self, value_type: ValueType) -> AggregationProcess:
        """An `AggregationProcess` of values of `value_type` placed at CLIENTS.

        Its `next` takes ``<S@SERVER, {value_type}@CLIENTS>``.

        Args:
          value_type: a non-federated `TensorType` or `StructType`.
        """
        raise NotImplementedError


class WeightedAggregationFactory(abc.ABC):
    """Creates `AggregationProcess`es with weights."""

    @abc.abstractmethod
    def create(self, value_type: ValueType, weight_type: ValueType) -> AggregationProcess:
        """An `AggregationProcess` of (value, weight) pairs placed at CLIENTS.

        Its `next` takes ``<S@SERVER, {value_type}@CLIENTS, {weight_type}@CLIENTS>``.

        Args:
          value_type: a non-federated `TensorType` or `StructType`.
          weight_type: a non-federated `TensorType` or `StructType`.
        """
        raise NotImplementedError


AggregationFactory = Union[UnweightedAggregationFactory, WeightedAggregationFactory]


def _type_name(x: Any) -> str:
    t = type(x)
    return f'{t.__module__}.{t.__qualname__}'


def check_value_type(value_type: Any, what: str = 'value_type') -> ValueType:
    """`value_type` if it is a `TensorType` or `StructType` (TFF's check), else a `TypeError`.

    Structs must hold only tensors (no federated, function or sequence types).
    """
    if not isinstance(value_type, (T.TensorType, T.StructType)):
        raise SimharnessTypeError(
            f'Expected {what} to be a TensorType or StructType, found {_type_name(value_type)} '
            f'({value_type!r})',
            expected=ValueType,
            actual=type(value_type),
        )
    if not is_structure_of_tensors(value_type):
        raise SimharnessTypeError(
            f'{what} must be a structure of tensors only, found {value_type}', actual=value_type
        )
    return value_type


def check_factory(value: Any, cls: Any, what: str) -> None:
    """A `TypeError` naming `what` unless `value` is an instance of `cls` (TFF's check_type)."""
    if not isinstance(value, cls):
        names = ' or '.join(c.__name__ for c in cls) if isinstance(cls, tuple) else cls.__name__
        raise SimharnessTypeError(
            f'Expected {what} to be a {names}, found {_type_name(value)} ({value!r})',
            expected=cls,
            actual=type(value),
        )


def _all_leaves(t: T.Type, pred: Callable[[T.TensorType], bool]) -> bool:
    if isinstance(t, T.StructType):
        return all(_all_leaves(e, pred) for e in t)
    return isinstance(t, T.TensorType) and pred(t)


def is_structure_of_tensors(t: T.Type) -> bool:
    """Whether `t` is a tensor or a (nested) struct of only tensors."""
    return _all_leaves(t, lambda _: True)


def is_structure_of_floats(t: T.Type) -> bool:
    """Whether every leaf of `t` is a floating-point tensor (TFF's helper of that name)."""
    return _all_leaves(t, lambda x: np.issubdtype(x.dtype, np.floating))


def is_structure_of_integers(t: T.Type) -> bool:
    """Whether every leaf of `t` is an integer tensor."""
    return _all_leaves(t, lambda x: np.issubdtype(x.dtype, np.integer))


def check_is_structure_of_floats(value_type: Any) -> ValueType:
    """`value_type` if a structure of floats (TFF's mean/robust `_check_value_type`)."""
    check_value_type(value_type)
    if not is_structure_of_floats(value_type):
        raise SimharnessTypeError(
            f'All values in provided value_type must be of floating dtype. Provided '
            f'value_type: {value_type}',
            actual=value_type,
        )
    return value_type


def _check_float(value: Any, label: str) -> None:
    if not isinstance(value, float):
        raise SimharnessTypeError(
            f'Expected {label} to be a float, found {_type_name(value)} ({value!r})',
            expected=float,
            actual=type(value),
        )


def check_float_positive(value: Any, label: str) -> None:
    """A `TypeError` unless `value` is a float; a `ValueError` unless it is > 0."""
    _check_float(value, label)
    if value <= 0:
        raise SimharnessValueError(f'{label} must be positive. Found {value}.')


def check_float_nonnegative(value: Any, label: str) -> None:
    """A `TypeError` unless `value` is a float; a `ValueError` unless it is >= 0."""
    _check_float(value, label)
    if value < 0:
        raise SimharnessValueError(f'{label} must be nonnegative. Found {value}.')


def check_float_probability(value: Any, label: str) -> None:
    """A `TypeError` unless `value` is a float; a `ValueError` unless it is in [0, 1]."""
    _check_float(value, label)
    if not 0 <= value <= 1:
        raise SimharnessValueError(f'{label} must be between 0 and 1 (inclusive). Found {value}.')
