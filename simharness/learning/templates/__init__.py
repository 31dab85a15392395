"""Learning process templates (``tff.learning.templates``): the parts of a round and their composition.

```
LearningProcess(initialize, next, get_model_weights, set_model_weights, get_hparams, set_hparams)
  next(state, [client datasets]) -> LearningProcessOutput(state, metrics)
compose_learning_process(initial_model_weights_fn, distributor, client_work, aggregator, finalizer)
  DistributionProcess   build_broadcast_process(weights_type)
  ClientWorkProcess     build_model_delta_client_work(model_fn, optimizer, client_weighting)
                        build_functional_model_delta_client_work(model=, optimizer=, ...)
  AggregationProcess    (simharness.aggregators factories)
  FinalizerProcess      build_apply_optimizer_finalizer(optimizer, weights_type)
state: LearningAlgorithmState(global_model_weights, distributor, client_work, aggregator, finalizer)
```

Names load on first use (PEP 562).
"""

from typing import Any

from simharness.lazy_names import LazyNames

_WHERE = {
    'build_apply_optimizer_finalizer': 'apply_optimizer_finalizer',
    'reject_non_finite_update': 'apply_optimizer_finalizer',
    'ClientResult': 'client_works',
    'ClientWorkProcess': 'client_works',
    'compose_learning_process': 'composers',
    'LearningAlgorithmState': 'composers',
    'build_broadcast_process': 'distributors',
    'DistributionProcess': 'distributors',
    'FinalizerProcess': 'finalizers',
    'LearningProcess': 'learning_process',
    'LearningProcessOutput': 'learning_process',
    'build_functional_model_delta_client_work': 'model_delta_client_work',
    'build_model_delta_client_work': 'model_delta_client_work',
}
_MODULES = (
    'apply_optimizer_finalizer',
    'client_works',
    'composers',
    'distributors',
    'finalizers',
    'hparams_base',
    'learning_process',
    'model_delta_client_work',
    'proximal_client_work',
    'type_checks',
)

__all__ = sorted(_WHERE)

_LAZY = LazyNames(__name__, _WHERE, _MODULES)


def __getattr__(name: str) -> Any:
    return _LAZY.attribute(name)


def __dir__() -> list:
    return _LAZY.listing()
