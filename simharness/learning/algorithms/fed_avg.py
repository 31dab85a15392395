"""Federated Averaging (TFF's ``learning/algorithms/fed_avg.py``; McMahan et al. 2017).

```
distributor:  broadcast ModelWeights
client_work:  local training with client_optimizer_fn; update = initial - trained trainable weights,
              weight = num_examples (NUM_EXAMPLES) or 1 (UNIFORM)
aggregator:   model_aggregator (default MeanFactory: weighted mean of the updates)
finalizer:    server_optimizer_fn applied with the mean update as its gradient
              (default SGD, learning rate 1.0: weights - mean update)
metrics:      OrderedDict(distributor=(), client_work=OrderedDict(train=<model metrics>),
                          aggregator=..., finalizer=OrderedDict(update_non_finite=...))
```
With a server optimizer other than SGD(1.0) this is FedOpt (Reddi et al. 2021):
FedAvgM (momentum), FedAdam, FedYogi, FedAdagrad.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from simharness.aggregators import factory, factory_utils, mean
from simharness.core import types as T
from simharness.core import narrowing as N
from simharness.errors import SimharnessTypeError
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
    model_delta_client_work,
)

__all__ = ['DEFAULT_SERVER_OPTIMIZER_FN', 'build_unweighted_fed_avg', 'build_weighted_fed_avg']


def DEFAULT_SERVER_OPTIMIZER_FN() -> Optimizer:  # noqa: N802 (TFF's name)
    """SGD with learning rate 1.0: the new weights are the weights minus the mean update."""
    return sgdm.build_sgdm(learning_rate=1.0)


def build_weighted_fed_avg(
    model_fn: _common.ModelFn,
    client_optimizer_fn: keras_optimizer.OptimizerOrKerasFn,
    server_optimizer_fn: Optional[keras_optimizer.OptimizerOrKerasFn] = None,
    *,
    client_weighting: ClientWeighting = ClientWeighting.NUM_EXAMPLES,
    model_distributor: Optional[distributors.DistributionProcess] = None,
    model_aggregator: Optional[factory.WeightedAggregationFactory] = None,
    metrics_aggregator: Optional[MetricsAggregatorType] = None,
    loop_implementation: loop_builder.LoopImplementation = (
        loop_builder.LoopImplementation.DATASET_REDUCE
    ),
) -> learning_process.LearningProcess:
    """A `LearningProcess` of federated averaging with weighted client updates.

    Args:
      model_fn: a no-arg callable returning a new `VariableModel` (e.g. of
        ``tff.learning.models.from_keras_model``) each call, or a
        `FunctionalModel`.
      client_optimizer_fn: the clients' `Optimizer` (``build_sgdm(...)``, ...),
        or (TFF up to v0.86) a no-arg callable returning a Keras optimizer, made
        per client update; not with a `FunctionalModel`.
      server_optimizer_fn: the server's `Optimizer`, or a no-arg callable
        returning a Keras optimizer (the finalizer's state is then its
        variables); default SGD at 1.0.
      client_weighting: a `ClientWeighting` (default NUM_EXAMPLES).
      model_distributor: a `DistributionProcess` of the weights; default broadcast.
      model_aggregator: a `WeightedAggregationFactory`; default `MeanFactory()`.
      metrics_aggregator: ``(finalizers) -> (metrics@CLIENTS -> metrics@SERVER)``;
        default ``tff.learning.metrics.sum_then_finalize``.
      loop_implementation: the clients' dataset loop.

    Returns:
      A `LearningProcess` whose state is a `LearningAlgorithmState`.

    Raises:
      SimharnessTypeError: an argument has the wrong type.
    """
    _common.check_instance(client_weighting, ClientWeighting, 'client_weighting')
    if server_optimizer_fn is None:
        server_optimizer_fn = DEFAULT_SERVER_OPTIMIZER_FN()
    _common.check_model_fn(model_fn)
    if not callable(model_fn):
        for name, opt in (
            ('client_optimizer_fn', client_optimizer_fn),
            ('server_optimizer_fn', server_optimizer_fn),
        ):
            if not isinstance(opt, Optimizer):
                raise SimharnessTypeError(
                    'If `model_fn` is a `tff.learning.models.FunctionalModel`, '
                    f'`{name}` must be an instance of `tff.learning.optimizers.Optimizer`. '
                    f'Got {type(opt)}',
                    expected=Optimizer,
                    actual=type(opt),
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
        client_work = model_delta_client_work.build_functional_model_delta_client_work(
            model=model_fn,
            optimizer=_common.tff_optimizer(client_optimizer_fn, 'client_optimizer_fn'),
            client_weighting=client_weighting,
            metrics_aggregator=metrics_aggregator,
            loop_implementation=loop_implementation,
        )
    else:
        client_work = model_delta_client_work.build_model_delta_client_work(
            model_fn=model_fn,
            optimizer=client_optimizer_fn,
            client_weighting=client_weighting,
            metrics_aggregator=metrics_aggregator,
            loop_implementation=loop_implementation,
        )
    finalizer = apply_optimizer_finalizer.build_apply_optimizer_finalizer(
        server_optimizer_fn, model_weights_type
    )
    return composers.compose_learning_process(
        initial_model_weights_fn, model_distributor, client_work, aggregator, finalizer
    )


def build_unweighted_fed_avg(
    model_fn: _common.ModelFn,
    client_optimizer_fn: keras_optimizer.OptimizerOrKerasFn,
    server_optimizer_fn: Optional[keras_optimizer.OptimizerOrKerasFn] = None,
    model_distributor: Optional[distributors.DistributionProcess] = None,
    model_aggregator: Optional[factory.UnweightedAggregationFactory] = None,
    metrics_aggregator: Optional[MetricsAggregatorType] = None,
    loop_implementation: loop_builder.LoopImplementation = (
        loop_builder.LoopImplementation.DATASET_REDUCE
    ),
) -> learning_process.LearningProcess:
    """Federated averaging with every client counted the same (UNIFORM weighting).

    Args: as `build_weighted_fed_avg`; `model_aggregator` is an
    `UnweightedAggregationFactory` (default `UnweightedMeanFactory()`).
    """
    if model_aggregator is None:
        model_aggregator = mean.UnweightedMeanFactory()
    _common.check_instance(
        model_aggregator, factory.UnweightedAggregationFactory, 'model_aggregator'
    )
    if server_optimizer_fn is None:
        server_optimizer_fn = DEFAULT_SERVER_OPTIMIZER_FN()
    return build_weighted_fed_avg(
        model_fn=model_fn,
        client_optimizer_fn=client_optimizer_fn,
        server_optimizer_fn=server_optimizer_fn,
        client_weighting=ClientWeighting.UNIFORM,
        model_distributor=model_distributor,
        model_aggregator=factory_utils.as_weighted_aggregator(model_aggregator),
        metrics_aggregator=metrics_aggregator,
        loop_implementation=loop_implementation,
    )
