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
"""

from simharness.learning import aggregators, optimizers
from simharness.learning.aggregators import Aggregator, dp_epsilon
from simharness.learning.algorithms import (ALGORITHM_NAMES, LearningProcess,
                                            LearningProcessOutput, build_algorithm,
                                            build_fed_eval, build_fed_prox, build_fed_sgd,
                                            build_weighted_fed_avg)
from simharness.learning.fedavg import FedAvg, FedAvgConfig, pad_clients
from simharness.learning.functional import (FunctionalModel, InputSpec, from_keras_model,
                                            from_model_spec)
from simharness.learning.models import (MODEL_NAMES, ModelSpec, accuracy, forward, get_model,
                                        init_weights, loss, numpy_evaluate)

__all__ = ['ALGORITHM_NAMES', 'Aggregator', 'FedAvg', 'FedAvgConfig', 'FunctionalModel',
           'InputSpec', 'LearningProcess', 'LearningProcessOutput', 'MODEL_NAMES', 'ModelSpec',
           'accuracy', 'aggregators', 'build_algorithm', 'build_fed_eval', 'build_fed_prox',
           'build_fed_sgd', 'build_weighted_fed_avg', 'dp_epsilon', 'forward',
           'from_keras_model', 'from_model_spec', 'get_model', 'init_weights', 'loss',
           'numpy_evaluate', 'optimizers', 'pad_clients']
