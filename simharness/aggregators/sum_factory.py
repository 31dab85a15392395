"""TFF's `SumFactory` (``aggregators/sum_factory.py``): `federated_sum`, no state, no measurements."""

from __future__ import annotations

from simharness.aggregators import factory
from simharness.core import intrinsics
from simharness.core import types as T
from simharness.core.computation import federated_computation
from simharness.templates import AggregationProcess, MeasuredProcessOutput

__all__ = ['SumFactory']


class SumFactory(factory.UnweightedAggregationFactory):
    """Sums the values placed at CLIENTS into a value placed at SERVER.

    State and measurements are empty (``<>@SERVER``).
    """

    def create(self, value_type: factory.ValueType) -> AggregationProcess:
        factory.check_value_type(value_type)

        @federated_computation()
        def init_fn():
            return intrinsics.federated_value((), T.SERVER)

        @federated_computation(
            init_fn.type_signature.result, T.FederatedType(value_type, T.CLIENTS)
        )
        def next_fn(state, value):
            summed = intrinsics.federated_sum(value)
            empty = intrinsics.federated_value((), T.SERVER)
            return MeasuredProcessOutput(state, summed, empty)

        return AggregationProcess(init_fn, next_fn)
