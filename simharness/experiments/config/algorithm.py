"""``[algorithm]``: the federated algorithm and its hyper-parameters."""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Optional

from simharness.experiments.config.base import (
    ALGORITHMS,
    _choice,
    _int,
    _num,
    _opt,
    OPTIMIZERS,
    _Table,
)


@dataclasses.dataclass(frozen=True)
class AlgorithmConfig(_Table):
    """``[algorithm]``: the federated algorithm and its hyper-parameters.

    Attributes:
        name: ``'fedavg'`` (default), ``'fedavgm'`` (server SGD with
            momentum, 0.9 unless server_momentum is set), ``'fedadam'``,
            ``'fedyogi'``, ``'fedadagrad'`` (adaptive server optimizers),
            ``'fedprox'`` or ``'fedsgd'`` (see
            `simharness.experiments.processes.build_learning_process`).
        client_learning_rate: local step (> 0; default 0.05).
        local_epochs: passes over the client data per round (>= 1; default 1).
        batch_size: examples per local step (>= 1; default 10).
        server_learning_rate: server step (> 0; default 1.0).
        server_momentum: server SGD momentum in [0, 1) (default 0).
        client_optimizer: ``'sgd'`` (default), ``'adam'``, ``'yogi'``, ``'adagrad'``.
        client_momentum: momentum of a client SGD in [0, 1) (default 0).
        server_optimizer: overrides the one the name implies (optional).
        beta_1, beta_2, epsilon: of adam / yogi (defaults 0.9, 0.999, and
            1e-7 for adam, 1e-3 for yogi, 1e-7 for adagrad).
        proximal_strength: FedProx's mu (> 0; default 0.01).
    """

    TABLE: ClassVar[str] = 'algorithm'
    name: str = _opt('fedavg', _choice(ALGORITHMS))
    client_learning_rate: float = _opt(0.05, _num(0.0, inclusive=False))
    local_epochs: int = _opt(1, _int(1))
    batch_size: int = _opt(10, _int(1))
    server_learning_rate: float = _opt(1.0, _num(0.0, inclusive=False))
    server_momentum: float = _opt(0.0, _num(0.0, below=1.0))
    client_optimizer: str = _opt('sgd', _choice(OPTIMIZERS))
    client_momentum: float = _opt(0.0, _num(0.0, below=1.0))
    server_optimizer: Optional[str] = _opt(None, _choice(OPTIMIZERS))
    beta_1: float = _opt(0.9, _num(0.0, below=1.0))
    beta_2: float = _opt(0.999, _num(0.0, below=1.0))
    epsilon: Optional[float] = _opt(None, _num(0.0, inclusive=False))
    proximal_strength: float = _opt(0.01, _num(0.0, inclusive=False))
