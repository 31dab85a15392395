"""TFF's `DeterministicDiscretizationFactory` (``aggregators/deterministic_discretization.py``).

As `StochasticDiscretizationFactory`, rounding ``x / step_size`` to the
nearest integer (int32); measurements ``<deterministic_discretization[,
distortion]>``.
"""

from __future__ import annotations

from typing import Optional

import tensorflow as tf

from simharness.aggregators import factory
from simharness.aggregators.stochastic_discretization import (
    OUTPUT_TF_TYPE,
    build_discretization_process,
)
from simharness.templates import AggregationProcess

__all__ = ['DeterministicDiscretizationFactory']


def _round(x: tf.Tensor, step: tf.Tensor, index: int) -> tf.Tensor:
    del index
    return tf.cast(tf.round(tf.divide(tf.cast(x, tf.float32), step)), OUTPUT_TF_TYPE)


class DeterministicDiscretizationFactory(factory.UnweightedAggregationFactory):
    """Scales float values by ``1/step_size`` and rounds them to the nearest int32.

    Args and Raises are those of `StochasticDiscretizationFactory`.
    """

    def __init__(
        self,
        inner_agg_factory: factory.UnweightedAggregationFactory,
        step_size: float,
        distortion_aggregation_factory: Optional[factory.UnweightedAggregationFactory] = None,
    ):
        if distortion_aggregation_factory is not None:
            factory.check_factory(
                distortion_aggregation_factory,
                factory.UnweightedAggregationFactory,
                'distortion_aggregation_factory',
            )
        self._step_size = step_size
        self._inner_agg_factory = inner_agg_factory
        self._distortion_aggregation_factory = distortion_aggregation_factory

    def create(self, value_type: factory.ValueType) -> AggregationProcess:
        return build_discretization_process(
            value_type,
            self._step_size,
            self._inner_agg_factory,
            self._distortion_aggregation_factory,
            _round,
            'deterministic_discretization',
        )
