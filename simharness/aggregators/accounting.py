"""Privacy accounting of `DifferentiallyPrivateFactory` rounds: ``dp_epsilon``.

::

    one round  = SampledWithoutReplacementDpEvent(num_clients, clients_per_round, event)
                 event: GaussianDpEvent(noise_multiplier), or the event of one `next`
                        (`extract_dp_event_from_state(state)`, TFF's style)
    `rounds` rounds composed with dp_accounting's Renyi accountant (REPLACE_ONE)
    -> epsilon at `delta`   (client-level DP: a neighbouring data set replaces one client)

Not part of TFF (which leaves accounting to the caller through
``extract_dp_event_from_state``); the experiment runner reports it per round
(``dp_epsilon`` in metrics.jsonl).
"""

from __future__ import annotations

import math
from typing import Any, Optional

import dp_accounting
from dp_accounting.rdp import rdp_privacy_accountant

from simharness.validation import check_int

__all__ = ['dp_epsilon', 'round_dp_event']


def round_dp_event(
    noise_multiplier: float,
    clients_per_round: int,
    num_clients: int,
    dp_event: Optional[Any] = None,
) -> dp_accounting.DpEvent:
    """The `DpEvent` of one round: a cohort of `clients_per_round` of `num_clients` clients
    sampled without replacement, then `dp_event` (default: a Gaussian sum of sensitivity 1
    with `noise_multiplier`)."""
    event = (
        dp_event if dp_event is not None else dp_accounting.GaussianDpEvent(float(noise_multiplier))
    )
    return dp_accounting.SampledWithoutReplacementDpEvent(
        int(num_clients), int(clients_per_round), event
    )


def dp_epsilon(
    noise_multiplier: float,
    clients_per_round: int,
    num_clients: int,
    rounds: int,
    delta: float,
    *,
    dp_event: Optional[Any] = None,
) -> float:
    """The (epsilon, delta)-DP epsilon after `rounds` rounds (client-level DP).

    Each round samples `clients_per_round` of `num_clients` clients without
    replacement and releases a Gaussian sum of sensitivity 1 (in units of
    the clip norm) with noise `noise_multiplier`; composed `rounds` times
    with ``dp_accounting``'s Renyi accountant.

    Args:
      noise_multiplier: noise stddev / clip norm (<= 0: no privacy, inf).
      clients_per_round, num_clients: the cohort and the population.
      rounds: rounds released so far (0: epsilon 0).
      delta: the delta of the guarantee.
      dp_event: the event of one round's query instead of
        ``GaussianDpEvent(noise_multiplier)`` (e.g.
        ``extract_dp_event_from_state(aggregator_state)``).
    """
    if noise_multiplier <= 0 and dp_event is None:
        return math.inf
    rounds = check_int('rounds', rounds, 0)
    if rounds == 0:
        return 0.0
    accountant = rdp_privacy_accountant.RdpAccountant(
        neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE
    )
    accountant.compose(
        round_dp_event(noise_multiplier, clients_per_round, num_clients, dp_event), rounds
    )
    return float(accountant.get_epsilon(delta))
