"""Models, algorithms, optimizers and aggregators (``tff.learning``), built on the public
intrinsics.

* `models`: TFF's `FunctionalModel`, `functional_model_from_keras`,
  `from_keras_model`, `ModelWeights`; the built-in logreg / mlp / cnn specs
  (`get_model`, `init_weights`, `numpy_evaluate`).
* `algorithms`: TFF's builders (`build_weighted_fed_avg`, `build_fed_prox`,
  `build_fed_sgd`, `build_fed_eval`, ...) returning `templates.LearningProcess`.
* `optimizers`: TFF's ``build_sgdm`` / ``build_adam`` / ... family.
* `dp_aggregator`, `robust_aggregator`, `secure_aggregator`; the factories
  themselves are `simharness.aggregators` (``tff.aggregators``), DP
  accounting `simharness.aggregators.accounting.dp_epsilon`.
* `build_federated_averaging_process`, `build_federated_sgd_process`,
  `build_federated_evaluation`, `from_keras_model`, `state_with_new_model_weights`,
  `framework` (`ServerState`, `ModelWeights`, `weights_type_from_model`): TFF v0.19's (2021) API
  as thin aliases of today's algorithms (`legacy_2021`); `ModelWeights`,
  `BatchOutput`: 2021's places of today's `models` classes.
* `FedAvg` / `FedAvgConfig`: the benchmarks' reference FedAvg over the core
  intrinsics (padded client tensors).

Names load on first use (PEP 562): importing the package imports no
TensorFlow.
"""

from typing import Any

from simharness.lazy_names import LazyNames

_WHERE = {
    'FedAvg': 'fedavg',
    'FedAvgConfig': 'fedavg',
    'pad_clients': 'fedavg',
    'reference_fedavg_workload': 'fedavg',
    'MODEL_NAMES': 'models',
    'ModelSpec': 'models',
    'accuracy': 'models',
    'forward': 'models',
    'get_model': 'models',
    'init_weights': 'models',
    'loss': 'models',
    'numpy_evaluate': 'models',
    # TFF's tff.learning names.
    'ClientWeighting': 'client_weight_lib',
    'LoopImplementation': 'loop_builder',
    'dp_aggregator': 'model_update_aggregator',
    'robust_aggregator': 'model_update_aggregator',
    'secure_aggregator': 'model_update_aggregator',
    'compression_aggregator': 'model_update_aggregator',
    'ddp_secure_aggregator': 'model_update_aggregator',
    'add_debug_measurements': 'debug_measurements',
    'add_debug_measurements_with_mixed_dtype': 'debug_measurements',
    # TFF v0.19's (2021) names, thin aliases of today's algorithms (legacy_2021).
    'build_federated_averaging_process': 'legacy_2021',
    'build_federated_evaluation': 'legacy_2021',
    'build_federated_sgd_process': 'legacy_2021',
    'framework': 'legacy_2021',
    'from_keras_model': 'legacy_2021',
    'state_with_new_model_weights': 'legacy_2021',
    'BatchOutput': 'models',
    'ModelWeights': 'models',  # 2021's places of today's classes
}
_MODULES = (
    'algorithms',
    'client_weight_lib',
    'debug_measurements',
    'fedavg',
    'keras_examples',
    'legacy_2021',
    'loop_builder',
    'metrics',
    'model_update_aggregator',
    'models',
    'optimizers',
    'programs',
    'templates',
)

__all__ = sorted(_WHERE) + [
    'algorithms',
    'metrics',
    'model_update_aggregator',
    'models',
    'optimizers',
    'programs',
    'templates',
]

#: ``Model``: TFF 0.48-0.52's name of `models.VariableModel`.
_LAZY = LazyNames(__name__, _WHERE, _MODULES, aliases={'Model': ('models', 'VariableModel')})


def __getattr__(name: str) -> Any:
    return _LAZY.attribute(name)


def __dir__() -> list:
    return _LAZY.listing()
