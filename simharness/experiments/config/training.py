"""``[training]``: rounds, cohorts, seed, evaluation schedule, checkpoints, callbacks."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from simharness.errors import ConfigError
from simharness.experiments.config.base import (
    _check_bool,
    _check_float,
    _check_str,
    _choice,
    COHORTS,
    _int,
    _opt,
    _Table,
)


def _check_availability(key: str, value: Any) -> float:
    a = _check_float(key, value, minimum=0.0, inclusive=False)
    if a > 1.0:
        raise ConfigError(f'{key} must be in (0, 1], got {a}', key=key, value=a)
    return a


@dataclasses.dataclass(frozen=True)
class TrainingConfig(_Table):
    """``[training]``: rounds, cohorts, seed and evaluation schedule.

    Attributes:
        rounds: number of rounds (>= 1; default 10). Rounds are numbered
            from 0.
        clients_per_round: cohort size (>= 1, at most the number of
            clients; default 10).
        seed: seed of the cohort sampling and of the initial weights
            (>= 0; default 0).
        eval_every: central evaluation after every this many rounds, and
            always after the last one (0: only after the last; default 1).
        cohort: ``'random'`` (``sample_clients(ids, k, round, seed)``,
            default) or ``'reference'`` (round r takes the clients
            ``(r * k + i) mod N``, i < k, in client-id order: the rule of
            the reference benchmark), ``'weighted'`` (without replacement,
            with probability proportional to the client's size) or
            ``'with_replacement'`` (uniform, a client may appear twice).
        availability: each round each client is available with this
            probability (independently, seeded by seed and round); the
            cohort is drawn from the available ones (default 1.0).
        checkpoint_every: save the server state every this many rounds
            (and after the last); an interrupted run resumes from its last
            checkpoint (0: never; default 10).
        early_stopping_metric: the metric watched by early stopping and
            best-model tracking (default 'eval_loss'; names with "loss"
            are minimized, others maximized).
        early_stopping_patience: stop after this many evaluations without
            improvement (0: never; default 0).
        tensorboard: write TensorBoard scalars to <run>/tensorboard
            (default true).
        federated_eval: besides the central evaluation, evaluate the new
            weights federatedly (the process's ``evaluate`` on the stack, over
            every client's data) when evaluating: ``fed_eval_loss``,
            ``fed_eval_accuracy`` (default false).
    """

    TABLE: ClassVar[str] = 'training'
    rounds: int = _opt(10, _int(1))
    clients_per_round: int = _opt(10, _int(1))
    seed: int = _opt(0, _int(0))
    eval_every: int = _opt(1, _int(0))
    cohort: str = _opt('random', _choice(COHORTS))
    availability: float = _opt(1.0, _check_availability)
    checkpoint_every: int = _opt(10, _int(0))
    early_stopping_metric: str = _opt('eval_loss', _check_str)
    early_stopping_patience: int = _opt(0, _int(0))
    tensorboard: bool = _opt(True, _check_bool)
    federated_eval: bool = _opt(False, _check_bool)

    def evaluates_after(self, round_num: int) -> bool:
        """Whether central evaluation runs after round `round_num` (0-based)."""
        if round_num == self.rounds - 1:
            return True
        return self.eval_every > 0 and (round_num + 1) % self.eval_every == 0
