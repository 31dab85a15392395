"""Secure summation of metrics (TFF's ``SecureSumFactory`` of ``sum_aggregation_factory.py``).

Secure aggregation works on integers in a bounded range, so every tensor of
the unfinalized metrics gets a value range (clipped into it, floats
quantized): integers default to ``[0, 2**20 - 1]``, floats to an auto-tuned
upper bound (a quantile estimate). Tensors with the same range and dtype are
summed by one inner `tff.aggregators.SecureSumFactory` process.
"""

from __future__ import annotations

import collections
import dataclasses
import math
from typing import Callable, List, Mapping, Optional, Tuple, TypeVar, Union, cast

import numpy as np
import tensorflow as tf

from simharness.aggregators import factory, secure
from simharness.aggregators.quantile_estimation import PrivateQuantileEstimationProcess
from simharness.core import intrinsics
from simharness.core import types as T
from simharness.core.computation import federated_computation, tf_computation
from simharness.core.structure import Struct
from simharness.errors import SimharnessTypeError, SimharnessValueError
from simharness.learning.metrics import aggregation_utils
from simharness.templates import AggregationProcess, EstimationProcess, MeasuredProcessOutput

DEFAULT_FIXED_SECURE_LOWER_BOUND = 0
DEFAULT_FIXED_SECURE_UPPER_BOUND = 2**20 - 1
_DELIMITER = '/'


#: A bound of a value range: a number; None for the lower bound of an auto-tuned
#: range, whose upper bound is an `EstimationProcess` (a quantile estimate).
Bound = Union[int, float, None, EstimationProcess]


@dataclasses.dataclass(frozen=True)
class _MetricRange:
    """A closed value range, opaque to structure traversal."""

    lower: Bound
    upper: Bound

    def __eq__(self, other: object) -> bool:
        """Type-aware equality (no int/float conversion; estimation processes never equal)."""
        if isinstance(self.upper, EstimationProcess) or not isinstance(other, _MetricRange):
            return False
        return (
            type(self.upper) is type(other.upper)
            and self.upper == other.upper
            and type(self.lower) is type(other.lower)
            and self.lower == other.lower
        )

    def __hash__(self) -> int:
        return hash(
            (
                type(self.lower),
                self.lower,
                type(self.upper),
                id(self.upper) if isinstance(self.upper, EstimationProcess) else self.upper,
            )
        )


#: The value ranges of the metrics' tensors: a (partial) tree of nested mappings and lists
#: like the metrics, whose leaves are ``(lower, upper)`` tuples (None: the default
#: range); `fill_missing_values_with_defaults` makes every leaf a `_MetricRange`.
ValueRanges = Union[
    Mapping[str, 'ValueRanges'], List['ValueRanges'], Tuple[Bound, Bound], _MetricRange, None
]

_Leaf = TypeVar('_Leaf')


class UnquantizableDTypeError(SimharnessTypeError):
    """A tensor dtype that cannot be quantized (neither float nor integer)."""


#: A tree of OrderedDicts and lists (the Python containers of a metrics type) of leaves.
Tree = Union[_Leaf, 'collections.OrderedDict[str, Tree[_Leaf]]', List['Tree[_Leaf]']]


def _from_type_tree(fn: Callable[[T.TensorType], _Leaf], t: T.Type) -> Tree[_Leaf]:
    """`fn` of each tensor type of `t`, in `t`'s Python containers (OrderedDict / list)."""
    if isinstance(t, T.TensorType):
        return fn(t)
    if not isinstance(t, T.StructType):
        raise SimharnessTypeError(
            f'expected a structure of tensor types, found {t}', expected=T.StructType, actual=t
        )
    items = [(n, _from_type_tree(fn, e)) for n, e in t.items()]
    container = t.python_container
    if (
        container is not None
        and issubclass(container, Mapping)
        or (container is None and items and all(n for n, _ in items))
    ):
        return collections.OrderedDict(items)
    return [v for _, v in items]


def _flatten_with_path(value: object, path: tuple = ()) -> list:
    """``[(path, leaf)]`` of nested mappings, lists, tuples and Structs, in the order of
    TFF's ``tree.flatten_with_path`` (dm-tree): a mapping's keys sorted (an OrderedDict's
    too; a Struct whose elements are all named likewise), sequences in order."""
    if isinstance(value, Struct):
        items = value.items()
        if items and all(n is not None for n, _ in items):
            return [
                p for n, v in sorted(items, key=_first) for p in _flatten_with_path(v, path + (n,))
            ]
        return [p for i, (_, v) in enumerate(items) for p in _flatten_with_path(v, path + (i,))]
    if isinstance(value, Mapping):
        return [p for k in sorted(value) for p in _flatten_with_path(value[k], path + (k,))]
    if isinstance(value, (list, tuple)) and not isinstance(value, _MetricRange):
        return [p for i, v in enumerate(value) for p in _flatten_with_path(v, path + (i,))]
    return [(path, value)]


def _first(item: Tuple[Optional[str], object]) -> str:
    return str(item[0])


def _pack(template: Tree[object], leaves: list) -> Tree[object]:
    """`leaves` (in `_flatten_with_path`'s order: a mapping's keys sorted) in the nesting of
    `template` (an OrderedDict / list tree, its own key order kept)."""
    it = iter(leaves)

    def build(t: Tree[object]) -> Tree[object]:
        if isinstance(t, Mapping):
            built = {k: build(t[k]) for k in sorted(t)}
            return collections.OrderedDict((k, built[k]) for k in t)
        if isinstance(t, list):
            return [build(v) for v in t]
        return next(it)

    return build(template)


def create_default_secure_sum_quantization_ranges(
    local_unfinalized_metrics_type: T.StructType,
    lower_bound: Union[int, float] = DEFAULT_FIXED_SECURE_LOWER_BOUND,
    upper_bound: Union[int, float] = DEFAULT_FIXED_SECURE_UPPER_BOUND,
    use_auto_tuned_bounds_for_float_values: Optional[bool] = True,
) -> Tree[Tuple[Bound, Bound]]:
    """Default value ranges for each tensor of the metrics type (TFF's defaults).

    Floats: ``(None, <quantile estimation process>)`` when auto-tuned, else
    ``(float(lower), float(upper))``; integers ``(ceil(lower), floor(upper))``.

    Raises:
      TypeError: non-numeric bounds.
      ValueError: ``lower >= upper``, or an integer tensor with a range narrower than 1.
      UnquantizableDTypeError: a tensor neither float nor integer.
    """
    for name, b in (('upper_bound', upper_bound), ('lower_bound', lower_bound)):
        if isinstance(b, bool) or not isinstance(b, (int, float)):
            raise SimharnessTypeError(
                f'{name} must be an int or float, found {type(b).__name__}',
                expected=float,
                actual=type(b),
            )
    if lower_bound >= upper_bound:
        raise SimharnessValueError('`upper_bound` must be greater than `lower_bound`.')
    integer_width = math.floor(upper_bound) - math.ceil(lower_bound)
    auto_tuned = PrivateQuantileEstimationProcess.no_noise(
        initial_estimate=50.0,
        target_quantile=0.95,
        learning_rate=1.0,
        multiplier=2.0,
        secure_estimation=True,
    )

    def default_range(t: T.TensorType) -> Tuple[Bound, Bound]:
        dtype = np.dtype(t.dtype.as_numpy_dtype if hasattr(t.dtype, 'as_numpy_dtype') else t.dtype)
        if np.issubdtype(dtype, np.floating):
            if use_auto_tuned_bounds_for_float_values:
                return None, auto_tuned
            return float(lower_bound), float(upper_bound)
        if np.issubdtype(dtype, np.integer):
            if integer_width < 1:
                raise SimharnessValueError(
                    'Encounter an integer tensor in the type, but quantization range '
                    f'[{lower_bound}, {upper_bound}] is not wide enough to quantize any '
                    f'integers (becomes [{int(lower_bound)}, {int(upper_bound)}]).'
                )
            return math.ceil(lower_bound), math.floor(upper_bound)
        raise UnquantizableDTypeError(
            f'Do not know how to create a default range for dtype {dtype}. Only floating or '
            'integer types are supported.',
            actual=dtype,
        )

    return _from_type_tree(default_range, local_unfinalized_metrics_type)


def _check_user_metric_value_range(value_range: object) -> None:
    if not isinstance(value_range, tuple):
        raise SimharnessTypeError(
            f'Expected range to be a tuple, found {type(value_range).__name__}',
            expected=tuple,
            actual=type(value_range),
        )
    if len(value_range) != 2:
        raise SimharnessValueError(
            f'Ranges must be defined as a 2-tuple, got a tuple of length {len(value_range)}.'
        )
    lower, upper = value_range
    if isinstance(lower, bool) or not isinstance(lower, (int, float)):
        raise SimharnessTypeError(
            f'Expected lower bound to be an int or float, found {type(lower).__name__}',
            expected=float,
            actual=type(lower),
        )
    if type(upper) is not type(lower):
        raise SimharnessTypeError(
            'The lower bound threshold should have the same type as the upper bound threshold, '
            f'but found the lower bound threshold type {type(lower)} and the upper bound '
            f'threshold type {type(upper)}.',
            expected=type(lower),
            actual=type(upper),
        )


def fill_missing_values_with_defaults(
    default_values: Tree[Tuple[Bound, Bound]], user_values: ValueRanges
) -> Tree[_MetricRange]:
    """The user's ranges, with the defaults wherever the user gave none (None or missing).

    Raises:
      TypeError: a user range that is not a 2-tuple of numbers of one type.
      ValueError: a tuple of another length.
    """
    # A user's tree follows the metrics' structure: a mapping where the defaults are one,
    # a list where they are one (another value fails at `.get` or `[i]`, as in TFF).
    if isinstance(default_values, Mapping):
        user_map = cast(Mapping[str, ValueRanges], user_values or {})
        return collections.OrderedDict(
            (k, fill_missing_values_with_defaults(v, user_map.get(k)))
            for k, v in default_values.items()
        )
    if isinstance(default_values, list):
        user_list = cast(
            List[ValueRanges], [None] * len(default_values) if user_values is None else user_values
        )
        return [
            fill_missing_values_with_defaults(v, user_list[i]) for i, v in enumerate(default_values)
        ]
    if user_values is None:
        return _MetricRange(*default_values)
    if isinstance(user_values, _MetricRange):
        return user_values
    _check_user_metric_value_range(user_values)
    return _MetricRange(*user_values)


def create_factory_key(lower: Bound, upper: Union[Bound, str], tensor_dtype: object) -> str:
    """``'lower/upper/dtype'`` (an estimation process reads 'default_estimation_process')."""
    if isinstance(upper, EstimationProcess):
        upper = 'default_estimation_process'
    return _DELIMITER.join(str(item) for item in (lower, upper, tf.as_dtype(tensor_dtype).name))


class SecureSumFactory(factory.UnweightedAggregationFactory):
    """Secure summation of unfinalized metrics (TFF's ``learning.metrics.SecureSumFactory``).

    The process' ``next`` returns the summed unfinalized metrics as its
    result; its state and measurements are `OrderedDict` s keyed by the
    groups' factory keys (``'lower/upper/dtype'``).

    Args:
      metric_value_ranges: an optional `OrderedDict` (a partial tree of the
        metrics' structure) of ``(lower, upper)`` ranges; None anywhere means
        the default range.

    Raises:
      TypeError: `metric_value_ranges` is not an `OrderedDict`.
    """

    def __init__(self, metric_value_ranges: Optional['collections.OrderedDict'] = None):
        if metric_value_ranges is not None and not isinstance(
            metric_value_ranges, collections.OrderedDict
        ):
            raise SimharnessTypeError(
                'Expected metric_value_ranges to be a collections.OrderedDict, found '
                f'{type(metric_value_ranges).__name__}',
                expected=collections.OrderedDict,
                actual=type(metric_value_ranges),
            )
        self._metric_value_ranges = metric_value_ranges

    def create(self, local_unfinalized_metrics_type: factory.ValueType) -> AggregationProcess:
        metrics_type = local_unfinalized_metrics_type
        aggregation_utils.check_local_unfinalized_metrics_type(metrics_type)
        assert isinstance(metrics_type, T.StructType)  # checked above
        defaults = create_default_secure_sum_quantization_ranges(metrics_type)
        try:
            ranges = fill_missing_values_with_defaults(defaults, self._metric_value_ranges)
        except TypeError as e:
            raise SimharnessTypeError(
                f'Failed to create encoding value range from: {self._metric_value_ranges}'
            ) from e
        tensor_types = _from_type_tree(lambda t: t, metrics_type)
        typed = _flatten_with_path(tensor_types)
        ranged = _flatten_with_path(ranges)
        key_by_path: dict = collections.OrderedDict()
        range_by_key: dict = collections.OrderedDict()
        paths_by_key: dict = collections.defaultdict(list)
        types_by_key: dict = collections.defaultdict(list)
        for (path, tensor_type), (_, value_range) in zip(typed, ranged):
            key = create_factory_key(value_range.lower, value_range.upper, tensor_type.dtype)
            key_by_path[path] = key
            range_by_key[key] = value_range
            paths_by_key[key].append(path)
            types_by_key[key].append(tensor_type)
        flat_paths = [path for path, _ in typed]
        processes = collections.OrderedDict(
            (
                key,
                secure.SecureSumFactory(r.upper, r.lower).create(
                    T.StructType(types_by_key[key], container=list)
                ),
            )
            for key, r in range_by_key.items()
        )

        @tf_computation(metrics_type)
        def group_value_by_factory_key(local_unfinalized_metrics):
            grouped: collections.OrderedDict = collections.OrderedDict()
            for path, value in _flatten_with_path(local_unfinalized_metrics):
                grouped.setdefault(key_by_path[path], []).append(value)
            return grouped

        @federated_computation()
        def init_fn():
            return intrinsics.federated_zip(
                collections.OrderedDict((key, p.initialize()) for key, p in processes.items())
            )

        @federated_computation(
            init_fn.type_signature.result, T.FederatedType(metrics_type, T.CLIENTS)
        )
        def next_fn(state, client_local_unfinalized_metrics):
            grouped = intrinsics.federated_map(
                group_value_by_factory_key, client_local_unfinalized_metrics
            )
            outputs = collections.OrderedDict(
                (key, p.next(state[key], grouped[key])) for key, p in processes.items()
            )
            new_state = collections.OrderedDict((k, o.state) for k, o in outputs.items())
            zipped = intrinsics.federated_zip(
                collections.OrderedDict(
                    (k, intrinsics.federated_zip((o.result, o.measurements)))
                    for k, o in outputs.items()
                )
            )

            @tf_computation(zipped.type_signature.member)
            def flatten_aggregation_output(grouped_output):
                by_path = {}
                measurements = collections.OrderedDict()
                for key in processes:
                    result, measurement = grouped_output[key]
                    measurements[key] = measurement
                    for path, value in zip(paths_by_key[key], list(result)):
                        by_path[path] = value
                return (_pack(tensor_types, [by_path[p] for p in flat_paths]), measurements)

            flat = intrinsics.federated_map(flatten_aggregation_output, zipped)
            return MeasuredProcessOutput(
                state=intrinsics.federated_zip(new_state), result=flat[0], measurements=flat[1]
            )

        return AggregationProcess(init_fn, next_fn)
