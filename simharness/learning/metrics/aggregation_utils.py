"""Checks and the finalizer computation of metric aggregators (TFF's ``aggregation_utils``)."""

from __future__ import annotations

import collections
from collections.abc import Mapping
from typing import Callable, cast

from simharness import structure
from simharness.core import types as T
from simharness.core.structure import Struct
from simharness.core.computation import Computation, tf_computation
from simharness.errors import SimharnessTypeError, SimharnessValueError
from simharness.learning._typing import MetricFinalizers, TensorStructure


def _fields(struct_type: T.StructType) -> list:
    return [name for name, _ in struct_type.items()]


def check_finalizers_matches_unfinalized_metrics(
    metric_finalizers: Mapping[str, Callable], local_unfinalized_metrics_type: T.StructType
) -> None:
    """Raises ValueError unless the finalizers' names are the unfinalized metrics' names."""
    in_finalizers = set(metric_finalizers.keys())
    in_metrics = set(_fields(local_unfinalized_metrics_type))
    if in_finalizers != in_metrics:
        raise SimharnessValueError(
            'The metric names in `metric_finalizers` do not match those in the '
            '`local_unfinalized_metrics`. Metric names in the `metric_finalizers` but not the '
            f'`local_unfinalized_metrics`: {in_finalizers - in_metrics}. Metric names in the '
            '`local_unfinalized_metrics` but not the `metric_finalizers`: '
            f'{in_metrics - in_finalizers}.\nMetrics names in the `metric_finalizers`: '
            f'{in_finalizers}. Metric names in the `local_unfinalized_metrics`: {in_metrics}.'
        )


def check_metric_finalizers(metric_finalizers: object) -> None:
    """Raises TypeError unless `metric_finalizers` is callable or an `OrderedDict` keyed by str."""
    if callable(metric_finalizers):
        return
    if not isinstance(metric_finalizers, collections.OrderedDict):
        raise SimharnessTypeError(
            'Expected `metric_finalizers` to be a collections.OrderedDict of str -> finalizer '
            f'or a callable, found {type(metric_finalizers).__name__}',
            expected=collections.OrderedDict,
            actual=type(metric_finalizers),
        )
    for key in metric_finalizers:
        if not isinstance(key, str):
            raise SimharnessTypeError(
                f'Expected metric_finalizers key {key!r} to be a str, found {type(key).__name__}',
                expected=str,
                actual=type(key),
            )


def check_local_unfinalized_metrics_type(local_unfinalized_metrics_type: object) -> T.StructType:
    """The type, a struct whose Python container is `OrderedDict`; else a TypeError."""
    if not isinstance(local_unfinalized_metrics_type, T.StructType):
        raise SimharnessTypeError(
            'Expected the input `local_unfinalized_metrics_type` to be a '
            '`StructWithPythonType`, found '
            f'{type(local_unfinalized_metrics_type).__name__}.',
            expected=T.StructType,
            actual=type(local_unfinalized_metrics_type),
        )
    container = local_unfinalized_metrics_type.python_container
    if container is not collections.OrderedDict:
        raise SimharnessTypeError(
            'Expected the input `local_unfinalized_metrics_type` to be a '
            '`StructWithPythonType` with `collections.OrderedDict` as the Python container, '
            f'found one with Python container {getattr(container, "__name__", container)}.',
            expected=collections.OrderedDict,
            actual=container,
        )
    return local_unfinalized_metrics_type


def as_python(value: TensorStructure) -> TensorStructure:
    """A traced struct as Python containers (finalizers take lists of tensors)."""
    return structure.to_odict_or_tuple(value) if isinstance(value, Struct) else value


def build_finalizer_computation(
    metric_finalizers: MetricFinalizers, local_unfinalized_metrics_type: T.Type
) -> Computation:
    """A `tf_computation` ``unfinalized metrics -> finalized metrics``."""
    if callable(metric_finalizers):
        return tf_computation(
            lambda m: metric_finalizers(as_python(m)), local_unfinalized_metrics_type
        )

    @tf_computation(local_unfinalized_metrics_type)
    def finalizer_computation(unfinalized_metrics: TensorStructure) -> collections.OrderedDict:
        # The metrics type is checked to be an OrderedDict struct: a mapping by name.
        by_name = cast(Mapping[str, TensorStructure], as_python(unfinalized_metrics))
        return collections.OrderedDict(
            (name, finalizer(by_name[name])) for name, finalizer in metric_finalizers.items()
        )

    return finalizer_computation
