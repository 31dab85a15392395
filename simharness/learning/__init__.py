"""Models (pure TF functions of a weights list) and FedAvg built on the public intrinsics."""

from simharness.learning.fedavg import FedAvg, FedAvgConfig, pad_clients
from simharness.learning.models import (MODEL_NAMES, ModelSpec, accuracy, forward, get_model,
                                        init_weights, loss, numpy_evaluate)

__all__ = ['FedAvg', 'FedAvgConfig', 'MODEL_NAMES', 'ModelSpec', 'accuracy', 'forward',
           'get_model', 'init_weights', 'loss', 'numpy_evaluate', 'pad_clients']
