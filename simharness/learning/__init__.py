"""Models, algorithms, optimizers and aggregators, built on the public intrinsics.

* `FunctionalModel`: `from_keras_model` (TFF's signature), `from_model_spec`
  (the built-in logreg / mlp / cnn of `models`).
* Algorithms as processes (`algorithms`): `build_weighted_fed_avg` (FedAvg,
  FedAvgM, FedAdam, FedYogi, FedAdagrad through the server optimizer),
  `build_fed_prox`, `build_fed_sgd`, `build_fed_eval`, `build_algorithm`.
* `optimizers`: stateless sgd / adam / yogi / adagrad.
* `aggregators`: mean, clipping (fixed, adaptive), Gaussian central DP with
  `dp_epsilon`, quantization, secure sum.
* `FedAvg` / `FedAvgConfig`: the original FedAvg of the benchmarks.

Names load on first use (PEP 562): importing the package, or
`simharness.learning.aggregators` (which configs validate with), imports no
TensorFlow.
"""

import importlib
from typing import Any

_WHERE = {
    'Aggregator': 'aggregators', 'dp_epsilon': 'aggregators',
    # The padded-array processes (moved from `algorithms`, which is now TFF's package).
    'ALGORITHM_NAMES': 'padded', 'LearningProcess': 'padded',
    'LearningProcessOutput': 'padded', 'build_algorithm': 'padded',
    'build_fed_eval': 'padded', 'build_fed_prox': 'padded',
    'build_fed_sgd': 'padded', 'build_weighted_fed_avg': 'padded',
    'FedAvg': 'fedavg', 'FedAvgConfig': 'fedavg', 'pad_clients': 'fedavg',
    'reference_fedavg_workload': 'fedavg',
    'FunctionalModel': 'functional', 'InputSpec': 'functional',
    'from_keras_model': 'functional', 'from_model_spec': 'functional',
    'functional_model_from_keras': 'functional',
    'MODEL_NAMES': 'models', 'ModelSpec': 'models', 'accuracy': 'models', 'forward': 'models',
    'get_model': 'models', 'init_weights': 'models', 'loss': 'models',
    'numpy_evaluate': 'models',
    # TFF's tff.learning names.
    'ClientWeighting': 'client_weight_lib', 'LoopImplementation': 'loop_builder',
    'dp_aggregator': 'model_update_aggregator', 'robust_aggregator': 'model_update_aggregator',
    'secure_aggregator': 'model_update_aggregator',
    'add_debug_measurements': 'debug_measurements',
    'add_debug_measurements_with_mixed_dtype': 'debug_measurements',
}
_MODULES = ('aggregators', 'algorithms', 'client_weight_lib', 'debug_measurements', 'fedavg',
            'functional',
            'keras_examples', 'loop_builder', 'metrics', 'model_update_aggregator', 'models',
            'optimizers', 'padded', 'programs', 'templates')

__all__ = sorted(_WHERE) + ['aggregators', 'algorithms', 'metrics', 'model_update_aggregator',
                            'models', 'optimizers', 'programs', 'templates']


def __getattr__(name: str) -> Any:
    if name in _MODULES:
        return importlib.import_module(f'{__name__}.{name}')
    if name in _WHERE:
        value = getattr(importlib.import_module(f'{__name__}.{_WHERE[name]}'), name)
        globals()[name] = value
        return value
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')


def __dir__() -> list:
    return sorted(set(globals()) | set(__all__))
