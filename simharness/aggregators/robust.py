"""TFF's `clipping_factory` and `zeroing_factory` (``aggregators/robust.py``).

```
norm   = norm_process.report(state)                (a constant, or adaptive: an EstimationProcess)
client: value -> clip to L2 ball of radius norm    (clipping)  |  0 if ||value||_p > norm  (zeroing)
inner_agg_factory aggregates the clipped values; the norm process sees every client's norm.
state        <clipping_norm, inner_agg, clipped_count_agg>      (zeroing_norm, inner_agg, zeroed_count_agg)
measurements <clipping, clipping_norm, clipped_count>           (zeroing, zeroing_norm, zeroed_count)
```
"""

from __future__ import annotations

import collections
import math
from typing import Any, Callable, Optional, Union

import numpy as np
import tensorflow as tf

from simharness.aggregators import factory, sum_factory
from simharness.aggregators import tensor_utils as tu
from simharness.core import intrinsics
from simharness.core import types as T
from simharness.core.computation import Computation, federated_computation, tf_computation
from simharness.errors import SimharnessTypeError, SimharnessValueError
from simharness.templates import AggregationProcess, EstimationProcess, MeasuredProcessOutput

__all__ = ['clipping_factory', 'zeroing_factory', 'NORM_TF_TYPE', 'COUNT_TF_TYPE']

NORM_TF_TYPE = np.float32
COUNT_TF_TYPE = np.int32


def _constant_process(value: float) -> EstimationProcess:
    """An `EstimationProcess` with empty state that reports `value`."""
    init_fn = federated_computation(lambda: intrinsics.federated_value((), T.SERVER))
    next_fn = federated_computation(
        lambda state, value: state,
        init_fn.type_signature.result,
        T.FederatedType(NORM_TF_TYPE, T.CLIENTS),
    )
    report_fn = federated_computation(
        lambda state: intrinsics.federated_value(value, T.SERVER), init_fn.type_signature.result
    )
    return EstimationProcess(init_fn, next_fn, report_fn)


def check_norm_process(norm_process: Any, name: str) -> None:
    """TFF's checks: ``next: <S@SERVER, float32@CLIENTS> -> S``, ``report: S -> float32@SERVER``."""
    factory.check_factory(norm_process, EstimationProcess, name)
    param = norm_process.next.type_signature.parameter
    if not isinstance(param, T.StructType) or len(param) != 2:
        raise SimharnessTypeError(
            f'`{name}.next` must take two arguments but found:\n{param}', actual=param
        )
    norm_at_clients = T.FederatedType(NORM_TF_TYPE, T.CLIENTS)
    if not param[1].is_assignable_from(norm_at_clients):
        raise SimharnessTypeError(
            f'Second argument of `{name}.next` must be assignable from {norm_at_clients} but '
            f'found {param[1]}',
            expected=norm_at_clients,
            actual=param[1],
        )
    result = norm_process.next.type_signature.result
    if not norm_process.state_type.is_assignable_from(result):
        raise SimharnessTypeError(
            f'Result type of `{name}.next` must consist of state only but found result type:'
            f'\n{result}\nwhile the state type is:\n{norm_process.state_type}',
            actual=result,
        )
    report = norm_process.report.type_signature.result
    norm_at_server = T.FederatedType(NORM_TF_TYPE, T.SERVER)
    if not norm_at_server.is_assignable_from(report):
        raise SimharnessTypeError(
            f'Result type of `{name}.report` must be assignable to {norm_at_server} but found '
            f'{report}.',
            expected=norm_at_server,
            actual=report,
        )


def clipping_factory(
    clipping_norm: Union[float, EstimationProcess],
    inner_agg_factory: factory.AggregationFactory,
    clipped_count_sum_factory: Optional[factory.UnweightedAggregationFactory] = None,
) -> factory.AggregationFactory:
    """A factory that projects each value onto an L2 ball before `inner_agg_factory`.

    Args:
      clipping_norm: a float (fixed norm) or an `EstimationProcess` (adaptive,
        e.g. `PrivateQuantileEstimationProcess`) whose `next` takes each
        client's norm (float32@CLIENTS) and whose `report` gives the norm.
      inner_agg_factory: aggregates the clipped values (its weightedness is
        the returned factory's).
      clipped_count_sum_factory: sums the clipped count (default `SumFactory`).

    Returns:
      A factory whose processes measure ``clipping`` (the inner
      measurements), ``clipping_norm`` and ``clipped_count``.
    """
    if clipped_count_sum_factory is None:
        clipped_count_sum_factory = sum_factory.SumFactory()
    factory.check_factory(
        clipped_count_sum_factory, factory.UnweightedAggregationFactory, 'clipped_count_sum_factory'
    )

    def make_clip_fn(value_type: factory.ValueType) -> Computation:
        @tf_computation(value_type, NORM_TF_TYPE)
        def clip_fn(value, norm):
            clipped, global_norm = _clip_by_global_l2_norm(value, norm)
            return clipped, global_norm, tf.cast(global_norm > norm, COUNT_TF_TYPE)

        return clip_fn

    return _make_wrapper(
        clipping_norm, inner_agg_factory, clipped_count_sum_factory, make_clip_fn, 'clipp'
    )


def zeroing_factory(
    zeroing_norm: Union[float, EstimationProcess],
    inner_agg_factory: factory.AggregationFactory,
    norm_order: float = math.inf,
    zeroed_count_sum_factory: Optional[factory.UnweightedAggregationFactory] = None,
) -> factory.AggregationFactory:
    """A factory that zeroes each value whose norm exceeds a bound before `inner_agg_factory`.

    The weight of a zeroed value is left unchanged (as TFF).

    Args:
      zeroing_norm: a float (fixed) or an `EstimationProcess` (adaptive).
      inner_agg_factory: aggregates the values after zeroing.
      norm_order: 1.0, 2.0 or infinity: the norm compared with `zeroing_norm`.
      zeroed_count_sum_factory: sums the zeroed count (default `SumFactory`).

    Returns:
      A factory whose processes measure ``zeroing``, ``zeroing_norm`` and
      ``zeroed_count``.

    Raises:
      TypeError: `norm_order` is not a float.
      ValueError: `norm_order` is not 1, 2 or infinity.
    """
    if zeroed_count_sum_factory is None:
        zeroed_count_sum_factory = sum_factory.SumFactory()
    factory.check_factory(
        zeroed_count_sum_factory, factory.UnweightedAggregationFactory, 'zeroed_count_sum_factory'
    )
    factory.check_factory(norm_order, float, 'norm_order')
    if not (norm_order in (1.0, 2.0) or math.isinf(norm_order)):
        raise SimharnessValueError('norm_order must be 1.0, 2.0 or infinity')
    norm_fn = {1.0: tu.global_l1_norm, 2.0: tu.global_l2_norm}.get(norm_order, tu.global_inf_norm)

    def make_zero_fn(value_type: factory.ValueType) -> Computation:
        @tf_computation(value_type, NORM_TF_TYPE)
        def zero_fn(value, norm):
            global_norm = norm_fn(value)
            should_zero = global_norm > norm
            zeroed = tu.cond(
                should_zero, lambda: tu.map_structure(tf.zeros_like, value), lambda: value, value
            )
            return zeroed, global_norm, tf.cast(should_zero, COUNT_TF_TYPE)

        return zero_fn

    return _make_wrapper(
        zeroing_norm, inner_agg_factory, zeroed_count_sum_factory, make_zero_fn, 'zero'
    )


def _make_wrapper(
    clipping_norm: Union[float, EstimationProcess],
    inner_agg_factory: factory.AggregationFactory,
    count_sum_factory: factory.UnweightedAggregationFactory,
    make_clip_fn: Callable[[factory.ValueType], Computation],
    prefix: str,
) -> factory.AggregationFactory:
    """A factory of inner_agg_factory's weightedness that applies `make_clip_fn(type)` first."""
    factory.check_factory(
        inner_agg_factory,
        (factory.UnweightedAggregationFactory, factory.WeightedAggregationFactory),
        'inner_agg_factory',
    )
    factory.check_factory(clipping_norm, (float, EstimationProcess), f'{prefix}ing_norm')
    norm_process = (
        _constant_process(clipping_norm) if isinstance(clipping_norm, float) else clipping_norm
    )
    check_norm_process(norm_process, f'{prefix}ing_norm_process')
    count_process = count_sum_factory.create(T.TensorType(COUNT_TF_TYPE))

    def init_impl(inner: AggregationProcess) -> Any:
        return intrinsics.federated_zip(
            collections.OrderedDict(
                [
                    (f'{prefix}ing_norm', norm_process.initialize()),
                    ('inner_agg', inner.initialize()),
                    (f'{prefix}ed_count_agg', count_process.initialize()),
                ]
            )
        )

    def next_impl(
        state: Any, value: Any, clip_fn: Computation, inner: AggregationProcess, weight: Any = None
    ) -> MeasuredProcessOutput:
        norm_state, agg_state, count_state = state
        norm = norm_process.report(norm_state)
        clipped, global_norm, was_clipped = intrinsics.federated_map(
            clip_fn, (value, intrinsics.federated_broadcast(norm))
        )
        new_norm_state = norm_process.next(norm_state, global_norm)
        agg_output = (
            inner.next(agg_state, clipped)
            if weight is None
            else inner.next(agg_state, clipped, weight)
        )
        count_output = count_process.next(count_state, was_clipped)
        new_state = collections.OrderedDict(
            [
                (f'{prefix}ing_norm', new_norm_state),
                ('inner_agg', agg_output.state),
                (f'{prefix}ed_count_agg', count_output.state),
            ]
        )
        measurements = collections.OrderedDict(
            [
                (f'{prefix}ing', agg_output.measurements),
                (f'{prefix}ing_norm', norm),
                (f'{prefix}ed_count', count_output.result),
            ]
        )
        return MeasuredProcessOutput(
            state=intrinsics.federated_zip(new_state),
            result=agg_output.result,
            measurements=intrinsics.federated_zip(measurements),
        )

    if isinstance(inner_agg_factory, factory.WeightedAggregationFactory):
        return _WeightedRobustFactory(inner_agg_factory, make_clip_fn, init_impl, next_impl)
    return _UnweightedRobustFactory(inner_agg_factory, make_clip_fn, init_impl, next_impl)


class _WeightedRobustFactory(factory.WeightedAggregationFactory):
    """A weighted factory that clips or zeroes values before its inner factory."""

    def __init__(
        self,
        inner: factory.WeightedAggregationFactory,
        make_clip_fn: Callable,
        init_impl: Callable,
        next_impl: Callable,
    ):
        self._inner, self._make_clip_fn = inner, make_clip_fn
        self._init_impl, self._next_impl = init_impl, next_impl

    def create(
        self, value_type: factory.ValueType, weight_type: factory.ValueType
    ) -> AggregationProcess:
        factory.check_is_structure_of_floats(value_type)
        factory.check_value_type(weight_type, 'weight_type')
        inner = self._inner.create(value_type, weight_type)
        clip_fn = self._make_clip_fn(value_type)
        init_impl, next_impl = self._init_impl, self._next_impl
        init_fn = federated_computation(lambda: init_impl(inner))

        @federated_computation(
            init_fn.type_signature.result,
            T.FederatedType(value_type, T.CLIENTS),
            T.FederatedType(weight_type, T.CLIENTS),
        )
        def next_fn(state, value, weight):
            return next_impl(state, value, clip_fn, inner, weight)

        return AggregationProcess(init_fn, next_fn)


class _UnweightedRobustFactory(factory.UnweightedAggregationFactory):
    """An unweighted factory that clips or zeroes values before its inner factory."""

    def __init__(
        self,
        inner: factory.UnweightedAggregationFactory,
        make_clip_fn: Callable,
        init_impl: Callable,
        next_impl: Callable,
    ):
        self._inner, self._make_clip_fn = inner, make_clip_fn
        self._init_impl, self._next_impl = init_impl, next_impl

    def create(self, value_type: factory.ValueType) -> AggregationProcess:
        factory.check_is_structure_of_floats(value_type)
        inner = self._inner.create(value_type)
        clip_fn = self._make_clip_fn(value_type)
        init_impl, next_impl = self._init_impl, self._next_impl
        init_fn = federated_computation(lambda: init_impl(inner))

        @federated_computation(
            init_fn.type_signature.result, T.FederatedType(value_type, T.CLIENTS)
        )
        def next_fn(state, value):
            return next_impl(state, value, clip_fn, inner)

        return AggregationProcess(init_fn, next_fn)


def _clip_by_global_l2_norm(value: Any, clip_norm: Any) -> Any:
    """As `tf.clip_by_global_norm`, for mixed float dtypes: (clipped, norm before)."""
    global_norm = tu.global_l2_norm(value)

    def clip():
        divisor = global_norm / clip_norm
        return tu.map_structure(lambda x: x / tf.cast(divisor, x.dtype), value)

    clipped = tu.cond(tf.math.greater(global_norm, clip_norm), clip, lambda: value, value)
    return clipped, global_norm
