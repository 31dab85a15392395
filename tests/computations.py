"""Computations several test modules and benchmarks share."""

from __future__ import annotations

from typing import Any

import numpy as np

import simharness as sh


def broadcast_aggregate(num_floats: int, twice: bool = False) -> Any:
    """``federated_sum(federated_map(x * 0.5, federated_broadcast(w)))`` for a float32[num_floats]
    model at the server: with 2 clients the result is exactly ``w``. `twice`: the
    computation returns that one sum twice, as ``(s, s)``."""
    spec = sh.TensorType(np.float32, (num_floats,))

    @sh.tf_computation(spec)
    def half(x):
        return x * 0.5

    @sh.federated_computation(sh.type_at_server(spec))
    def broadcast_aggregate(w):
        s = sh.federated_sum(sh.federated_map(half, sh.federated_broadcast(w)))
        return (s, s) if twice else s
    return broadcast_aggregate
