"""TFF's `SecureSumFactory` and `SecureModularSumFactory` (``aggregators/secure.py``).

```
SecureModularSumFactory(m):        federated_secure_modular_sum(value, m)        (symmetric: 2m-1, shifted)
SecureSumFactory(upper[, lower]):  ints:   clip, shift to [0, upper-lower], secure_sum_bitwidth, shift back
                                   floats: primitives.secure_quantized_sum (32-bit quantization)
        bounds: constants, or EstimationProcesses that adapt between rounds (state)
        measurements <secure_upper_clipped_count, secure_lower_clipped_count,
                      secure_upper_threshold, secure_lower_threshold>
```
"""

from __future__ import annotations

import collections
import enum
import math
from typing import Any, Callable, Optional, Union

import numpy as np
import tensorflow as tf

from simharness.aggregators import factory, primitives
from simharness.aggregators import tensor_utils as tu
from simharness.core import intrinsics
from simharness.core import types as T
from simharness.core.computation import Computation, federated_computation, tf_computation
from simharness.errors import SimharnessTypeError, SimharnessValueError
from simharness.templates import AggregationProcess, EstimationProcess, MeasuredProcessOutput

__all__ = ['SecureModularSumFactory', 'SecureSumFactory']

NORM_TYPE = np.float32
COUNT_TYPE = np.int32
ThresholdEstType = Union[int, float, np.integer, np.floating, EstimationProcess]


class _Config(enum.Enum):
    INT = 1
    FLOAT = 2


class SecureModularSumFactory(factory.UnweightedAggregationFactory):
    """Sums integer values securely modulo `modulus`.

    Values wrap around modulo `modulus` (in [0, modulus-1]); with
    `symmetric_range`, in [-(modulus-1), modulus-1], summed with modulus
    ``2*modulus-1`` and shifted back.

    Args:
      modulus: a positive int (or numpy integer scalar).
      symmetric_range: sum on the range symmetric around 0.

    Raises:
      TypeError: `modulus` is not an integer or `symmetric_range` not a bool.
      ValueError: `modulus` is not positive.
    """

    def __init__(self, modulus: Union[int, np.integer], symmetric_range: bool = False):
        if isinstance(modulus, bool) or not isinstance(modulus, (int, np.integer)):
            raise SimharnessTypeError(
                f'Expected modulus to be an int, found {type(modulus).__name__} ({modulus!r})',
                actual=modulus,
            )
        if modulus <= 0:
            raise SimharnessValueError(f'Provided modulus must be positive, but found: {modulus}')
        factory.check_factory(symmetric_range, bool, 'symmetric_range')
        self._modulus = int(modulus)
        self._symmetric_range = symmetric_range

    def create(self, value_type: factory.ValueType) -> AggregationProcess:
        factory.check_value_type(value_type)
        if not factory.is_structure_of_integers(value_type):
            raise SimharnessTypeError(
                'Provided value_type must either be an integer type or a structure of integer '
                f'types, but found: {value_type}',
                actual=value_type,
            )
        modulus, symmetric = self._modulus, self._symmetric_range

        @tf_computation()
        def mod_clip_after_symmetric_range_sum(value):
            def shift(v):
                where = tf.cast(tf.math.greater_equal(v, modulus), v.dtype)
                return v - (2 * modulus - 1) * where

            return tu.map_structure(shift, value)

        @federated_computation()
        def init_fn():
            return intrinsics.federated_value((), T.SERVER)

        @federated_computation(
            init_fn.type_signature.result, T.FederatedType(value_type, T.CLIENTS)
        )
        def next_fn(state, value):
            if symmetric:
                summed = intrinsics.federated_secure_modular_sum(value, 2 * modulus - 1)
                summed = intrinsics.federated_map(mod_clip_after_symmetric_range_sum, summed)
            else:
                summed = intrinsics.federated_secure_modular_sum(value, modulus)
            return MeasuredProcessOutput(state, summed, intrinsics.federated_value((), T.SERVER))

        return AggregationProcess(init_fn, next_fn)


def _check_bound_process(process: Any, name: str) -> None:
    """TFF's checks: ``next: <S, float32@CLIENTS> -> S``, ``report`` gives the estimate."""
    factory.check_factory(process, EstimationProcess, name)
    param: Any = process.next.type_signature.parameter
    if not isinstance(param, T.StructType) or len(param) != 2:
        raise SimharnessTypeError(f'`{name}.next` must take two arguments but found:\n{param}')
    float_at_clients = T.FederatedType(NORM_TYPE, T.CLIENTS)
    if not param[1].is_assignable_from(float_at_clients):
        raise SimharnessTypeError(
            f'Second argument of `{name}.next` must be assignable from '
            f'{float_at_clients} but found {param[1]}'
        )
    result: Any = process.next.type_signature.result
    if not process.state_type.is_assignable_from(result):
        raise SimharnessTypeError(
            f'Result type of `{name}.next` must consist of state only but found result type:'
            f'\n{result}\nwhile the state type is:\n{process.state_type}'
        )
    report: Any = process.report.type_signature.result
    value_t: Any = param[1]
    estimate_at_server = T.FederatedType(value_t.member, T.SERVER)
    if not report.is_assignable_from(estimate_at_server):
        raise SimharnessTypeError(
            f'Report type of `{name}.report` must be assignable from '
            f'{estimate_at_server} but found {report}.'
        )


def _is_integer(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def _is_float(v: Any) -> bool:
    return isinstance(v, (float, np.floating))


@federated_computation()
def _empty_state():
    return intrinsics.federated_value((), T.SERVER)


@tf_computation()
def _reduce_nest_max(value):
    return tf.reduce_max(tf.stack([tf.reduce_max(v) for v in tu.flatten(value)]))


@tf_computation()
def _reduce_nest_min(value):
    return tf.reduce_min(tf.stack([tf.reduce_min(v) for v in tu.flatten(value)]))


@tf_computation()
def _client_shift(value, upper_bound, lower_bound):
    return tu.map_structure(
        lambda v: tf.clip_by_value(v, lower_bound, upper_bound) - lower_bound, value
    )


@tf_computation()
def _server_shift(value, lower_bound, num_summands):
    return tu.map_structure(
        lambda v: v + lower_bound * tf.cast(num_summands, lower_bound.dtype), value
    )


class SecureSumFactory(factory.UnweightedAggregationFactory):
    """Sums values with `federated_secure_sum_bitwidth` within known bounds.

    Integers are clipped to ``[lower, upper]`` and summed exactly; floats
    are clipped and quantized to 32 bits (`primitives.secure_quantized_sum`).
    With only `upper_bound_threshold`, the bounds are ``[-upper, upper]``.
    Float bounds may be `EstimationProcess`es (e.g.
    `PrivateQuantileEstimationProcess`) that adapt to the values' extremes.

    Args:
      upper_bound_threshold: an int or float constant, or an
        `EstimationProcess` of float32.
      lower_bound_threshold: optional, of the same kind.

    Raises:
      TypeError: a threshold of the wrong type, or of different kinds.
      ValueError: a lone constant upper bound that is not positive, or an
        upper bound not above the lower one.
    """

    def __init__(self, upper_bound_threshold: Any, lower_bound_threshold: Optional[Any] = None):
        _check_threshold(upper_bound_threshold)
        if lower_bound_threshold is not None and not isinstance(
            lower_bound_threshold, type(upper_bound_threshold)
        ):
            raise SimharnessTypeError(
                'Provided upper_bound_threshold and lower_bound_threshold must have the same '
                f'types, but found:\ntype(upper_bound_threshold): {upper_bound_threshold}\n'
                f'type(lower_bound_threshold): {lower_bound_threshold}'
            )
        self._upper: Any = upper_bound_threshold
        self._lower: Any = lower_bound_threshold
        self._update_state: Callable[..., Any] = lambda _, __, ___: _empty_state()
        self._init_fn: Computation = _empty_state
        if _is_integer(upper_bound_threshold):
            self._config = _Config.INT
            lower = lower_bound_threshold
            if lower is None:
                _check_positive(upper_bound_threshold)
                lower = -1 * upper_bound_threshold
            else:
                _check_upper_larger_than_lower(upper_bound_threshold, lower)
            self._bitwidth = math.ceil(math.log2(upper_bound_threshold - lower + 1))
        else:
            self._config = _Config.FLOAT
            if _is_float(upper_bound_threshold):
                if lower_bound_threshold is None:
                    _check_positive(upper_bound_threshold)
                else:
                    _check_upper_larger_than_lower(upper_bound_threshold, lower_bound_threshold)
            else:
                _check_bound_process(upper_bound_threshold, 'upper_bound_threshold')
                if lower_bound_threshold is None:
                    self._init_fn = upper_bound_threshold.initialize
                    self._update_state = _update_state_single_process(upper_bound_threshold)
                else:
                    _check_bound_process(lower_bound_threshold, 'lower_bound_threshold')
                    up, low = upper_bound_threshold, lower_bound_threshold
                    self._init_fn = federated_computation(
                        lambda: intrinsics.federated_zip((up.initialize(), low.initialize()))
                    )
                    self._update_state = _update_state_two_processes(up, low)

    def create(self, value_type: factory.ValueType) -> AggregationProcess:
        self._check_value_type(value_type)

        @federated_computation(
            self._init_fn.type_signature.result, T.FederatedType(value_type, T.CLIENTS)
        )
        def next_fn(state, value):
            value_max = intrinsics.federated_map(_reduce_nest_max, value)
            value_min = intrinsics.federated_map(_reduce_nest_min, value)
            upper, lower = self._bounds_from_state(state, value_max.type_signature.member.dtype)
            new_state = self._update_state(state, value_min, value_max)
            summed = self._sum_securely(value, upper, lower)
            measurements = self._measurements(upper, lower, value_max, value_min)
            return MeasuredProcessOutput(new_state, summed, measurements)

        return AggregationProcess(self._init_fn, next_fn)

    def _measurements(self, upper: Any, lower: Any, value_max: Any, value_min: Any) -> Any:
        above = intrinsics.federated_map(
            tf_computation(lambda bound, value: tf.cast(bound < value, COUNT_TYPE)),
            (intrinsics.federated_broadcast(upper), value_max),
        )
        below = intrinsics.federated_map(
            tf_computation(lambda bound, value: tf.cast(bound > value, COUNT_TYPE)),
            (intrinsics.federated_broadcast(lower), value_min),
        )
        return intrinsics.federated_zip(
            collections.OrderedDict(
                secure_upper_clipped_count=intrinsics.federated_secure_sum_bitwidth(above, 1),
                secure_lower_clipped_count=intrinsics.federated_secure_sum_bitwidth(below, 1),
                secure_upper_threshold=upper,
                secure_lower_threshold=lower,
            )
        )

    def _sum_securely(self, value: Any, upper: Any, lower: Any) -> Any:
        if self._config is _Config.FLOAT:
            return primitives.secure_quantized_sum(value, lower, upper)
        shifted = intrinsics.federated_map(
            _client_shift,
            (value, intrinsics.federated_broadcast(upper), intrinsics.federated_broadcast(lower)),
        )
        summed = intrinsics.federated_secure_sum_bitwidth(shifted, self._bitwidth)
        num_summands = intrinsics.federated_secure_sum_bitwidth(
            intrinsics.federated_value(1, T.CLIENTS), bitwidth=1
        )
        return intrinsics.federated_map(_server_shift, (summed, lower, num_summands))

    def _bounds_from_state(self, state: Any, dtype: np.dtype) -> Any:
        cast = tf_computation(lambda x: tf.cast(x, dtype))
        if isinstance(self._upper, EstimationProcess):
            if self._lower is not None:
                upper = intrinsics.federated_map(cast, self._upper.report(state[0]))
                lower = intrinsics.federated_map(cast, self._lower.report(state[1]))
            else:
                upper = intrinsics.federated_map(cast, self._upper.report(state))
                lower = intrinsics.federated_map(tf_computation(lambda x: x * -1.0), upper)
            return upper, lower
        up = self._upper
        low = self._lower if self._lower is not None else -self._upper
        bounds = tf_computation(lambda: (tf.constant(up, dtype), tf.constant(low, dtype)))
        pair = intrinsics.federated_eval(bounds, T.SERVER)
        return pair[0], pair[1]

    def _check_value_type(self, value_type: Any) -> None:
        factory.check_value_type(value_type)
        if len({leaf.dtype for leaf in T.flatten_type(value_type)}) != 1:
            raise SimharnessTypeError(
                'Expected a type which is a structure containing the '
                f'same dtypes, found {value_type}.',
                actual=value_type,
            )
        if self._config is _Config.INT and not factory.is_structure_of_integers(value_type):
            raise SimharnessTypeError(
                'The `SecureSumFactory` was configured to work with integer dtypes. All values '
                f'in provided `value_type` hence must be of integer dtype. \nProvided '
                f'value_type: {value_type}',
                actual=value_type,
            )
        if self._config is _Config.FLOAT and not factory.is_structure_of_floats(value_type):
            raise SimharnessTypeError(
                'The `SecureSumFactory` was configured to work with floating point dtypes. All '
                'values in provided `value_type` hence must be of floating point dtype. '
                f'\nProvided value_type: {value_type}',
                actual=value_type,
            )


def _check_threshold(value: Any) -> None:
    if isinstance(value, bool) or not isinstance(
        value, (int, float, np.integer, np.floating, EstimationProcess)
    ):
        raise SimharnessTypeError(
            f'Expected upper_bound_threshold to be an int, a float or an EstimationProcess, '
            f'found {type(value).__name__}',
            actual=value,
        )


def _check_positive(value: Any) -> None:
    if value <= 0:
        raise SimharnessValueError(
            'If only `upper_bound_threshold` is specified as a Python constant, it must be '
            'positive. Its negative will be used as a lower bound which would be larger than '
            f'the upper bound. \nProvided `upper_bound_threshold`: {value}'
        )


def _check_upper_larger_than_lower(upper: Any, lower: Any) -> None:
    if upper <= lower:
        raise SimharnessValueError(
            'The provided `upper_bound_threshold` must be larger than the provided '
            f'`lower_bound_threshold`, but received:\n`upper_bound_threshold`: {upper}\n'
            f'`lower_bound_threshold`: {lower}\n'
        )


def _update_state_single_process(process: EstimationProcess) -> Callable[..., Any]:
    param: Any = process.next.type_signature.parameter
    dtype = param[1].member.dtype
    abs_max = tf_computation(lambda x, y: tf.cast(tf.maximum(tf.abs(x), tf.abs(y)), dtype))

    def update_state(state, value_min, value_max):
        return process.next(state, intrinsics.federated_map(abs_max, (value_min, value_max)))

    return update_state


def _update_state_two_processes(
    upper: EstimationProcess, lower: EstimationProcess
) -> Callable[..., Any]:
    upper_param: Any = upper.next.type_signature.parameter
    lower_param: Any = lower.next.type_signature.parameter
    max_dtype = upper_param[1].member.dtype
    min_dtype = lower_param[1].member.dtype

    def update_state(state, value_min, value_max):
        value_min = intrinsics.federated_map(
            tf_computation(lambda x: tf.cast(x, min_dtype)), value_min
        )
        value_max = intrinsics.federated_map(
            tf_computation(lambda x: tf.cast(x, max_dtype)), value_max
        )
        return intrinsics.federated_zip(
            (upper.next(state[0], value_max), lower.next(state[1], value_min))
        )

    return update_state
