"""FedProx (TFF's ``learning/algorithms/fed_prox.py``; Li et al. 2020).

FedAvg whose clients add ``proximal_strength * (w - w_initial)`` to every
gradient (`simharness.learning.templates.proximal_client_work`); otherwise as
`fed_avg` (the server optimizer defaults to SGD at 1.0).
"""

from __future__ import annotations

import logging
from typing import Optional

import numpy as np

from simharness.aggregators import factory, factory_utils, mean
from simharness.core import types as T
from simharness.core import narrowing as N
from simharness.errors import SimharnessTypeError, SimharnessValueError
from simharness.learning import loop_builder
from simharness.learning.algorithms import _common
from simharness.learning.client_weight_lib import ClientWeighting
from simharness.learning.metrics import aggregator as metric_aggregator
from simharness.learning.metrics.types import MetricsAggregatorType
from simharness.learning.optimizers import keras_optimizer, sgdm
from simharness.learning.optimizers.optimizer import Optimizer
from simharness.learning.templates import (
    apply_optimizer_finalizer,
    composers,
    distributors,
    learning_process,
    proximal_client_work,
)

__all__ = ['DEFAULT_SERVER_OPTIMIZER_FN', 'build_unweighted_fed_prox', 'build_weighted_fed_prox']

_LOG = logging.getLogger(__name__)

#: SGD at 1.0 (TFF's default server optimizer of FedProx).
DEFAULT_SERVER_OPTIMIZER_FN = sgdm.build_sgdm(learning_rate=1.0)


def build_weighted_fed_prox(
    model_fn: _common.ModelFn,
    proximal_strength: float,
    client_optimizer_fn: keras_optimizer.OptimizerOrKerasFn,
    server_optimizer_fn: keras_optimizer.OptimizerOrKerasFn = DEFAULT_SERVER_OPTIMIZER_FN,
    client_weighting: ClientWeighting = ClientWeighting.NUM_EXAMPLES,
    model_distributor: Optional[distributors.DistributionProcess] = None,
    model_aggregator: Optional[factory.WeightedAggregationFactory] = None,
    metrics_aggregator: Optional[MetricsAggregatorType] = None,
    loop_implementation: loop_builder.LoopImplementation = (
        loop_builder.LoopImplementation.DATASET_REDUCE
    ),
) -> learning_process.LearningProcess:
    """A `LearningProcess` of FedProx with weighted client updates.

    Args:
      model_fn: a no-arg callable returning a new `VariableModel`, or a
        `FunctionalModel`.
      proximal_strength: the nonnegative weight of the proximal term (0.0 is FedAvg).
      client_optimizer_fn, server_optimizer_fn: `Optimizer`s, or (TFF up to
        v0.86) no-arg callables returning Keras optimizers (a client one only
        with a model_fn, not a `FunctionalModel`).
      client_weighting, model_distributor, model_aggregator,
      metrics_aggregator, loop_implementation: as `build_weighted_fed_avg`.

    Raises:
      SimharnessValueError: `proximal_strength` is not a nonnegative float.
      SimharnessTypeError: another argument has the wrong type.
    """
    if not isinstance(proximal_strength, float) or proximal_strength < 0.0:
        raise SimharnessValueError(
            f'proximal_strength must be a nonnegative float, found {proximal_strength!r}'
        )
    if proximal_strength == 0.0:
        _LOG.warning(
            'proximal_strength is set to 0.0, which means FedProx will behave as '
            'FedAvg. Is this intentional?'
        )
    _common.check_model_fn(model_fn)
    if not callable(model_fn) and not isinstance(client_optimizer_fn, Optimizer):
        raise SimharnessTypeError(
            'When `model_fn` is a `tff.learning.models.FunctionalModel`, the '
            '`client_optimizer_fn` must be a `tff.learning.optimizers.Optimizer`.'
            f'Got {type(client_optimizer_fn)}.',
            expected=Optimizer,
            actual=type(client_optimizer_fn),
        )
    initial_model_weights_fn = _common.initial_model_weights_fn(model_fn)
    model_weights_type = N.as_struct(initial_model_weights_fn.type_signature.result)
    if model_distributor is None:
        model_distributor = distributors.build_broadcast_process(model_weights_type)
    if model_aggregator is None:
        model_aggregator = mean.MeanFactory()
    _common.check_instance(model_aggregator, factory.WeightedAggregationFactory, 'model_aggregator')
    aggregator = model_aggregator.create(
        _common.model_update_type(model_fn, model_weights_type), T.TensorType(np.float32)
    )
    _common.check_aggregator_keeps_type(aggregator)
    if metrics_aggregator is None:
        metrics_aggregator = metric_aggregator.sum_then_finalize
    if not callable(model_fn):
        client_work = proximal_client_work.build_functional_model_delta_client_work(
            model=model_fn,
            optimizer=_common.tff_optimizer(client_optimizer_fn, 'client_optimizer_fn'),
            client_weighting=client_weighting,
            delta_l2_regularizer=proximal_strength,
            metrics_aggregator=metrics_aggregator,
        )
    else:
        client_work = proximal_client_work.build_model_delta_client_work(
            model_fn=model_fn,
            optimizer=client_optimizer_fn,
            client_weighting=client_weighting,
            delta_l2_regularizer=proximal_strength,
            metrics_aggregator=metrics_aggregator,
            loop_implementation=loop_implementation,
        )
    finalizer = apply_optimizer_finalizer.build_apply_optimizer_finalizer(
        server_optimizer_fn, model_weights_type
    )
    return composers.compose_learning_process(
        initial_model_weights_fn, model_distributor, client_work, aggregator, finalizer
    )


def build_unweighted_fed_prox(
    model_fn: _common.ModelFn,
    proximal_strength: float,
    client_optimizer_fn: keras_optimizer.OptimizerOrKerasFn,
    server_optimizer_fn: keras_optimizer.OptimizerOrKerasFn = DEFAULT_SERVER_OPTIMIZER_FN,
    model_distributor: Optional[distributors.DistributionProcess] = None,
    model_aggregator: Optional[factory.UnweightedAggregationFactory] = None,
    metrics_aggregator: Optional[MetricsAggregatorType] = None,
    loop_implementation: loop_builder.LoopImplementation = (
        loop_builder.LoopImplementation.DATASET_REDUCE
    ),
) -> learning_process.LearningProcess:
    """FedProx with every client counted the same (UNIFORM weighting).

    Args: as `build_weighted_fed_prox`; `model_aggregator` is an
    `UnweightedAggregationFactory` (default `UnweightedMeanFactory()`).
    """
    if model_aggregator is None:
        model_aggregator = mean.UnweightedMeanFactory()
    _common.check_instance(
        model_aggregator, factory.UnweightedAggregationFactory, 'model_aggregator'
    )
    return build_weighted_fed_prox(
        model_fn=model_fn,
        proximal_strength=proximal_strength,
        client_optimizer_fn=client_optimizer_fn,
        server_optimizer_fn=server_optimizer_fn,
        client_weighting=ClientWeighting.UNIFORM,
        model_distributor=model_distributor,
        model_aggregator=factory_utils.as_weighted_aggregator(model_aggregator),
        metrics_aggregator=metrics_aggregator,
        loop_implementation=loop_implementation,
    )
