"""Cohort sampling: which clients take part in a round.

Every rule is a pure function of (seed, round): a resumed or repeated run
draws the same cohorts. ::

    'random'            uniform without replacement (`sample_clients`)
    'with_replacement'  uniform with replacement (a client may appear twice)
    'weighted'          without replacement, probability proportional to the client's size
    availability p < 1  first each client is available with probability p (independently);
                        the cohort is drawn among the available ones (at least one client)
"""

from __future__ import annotations

from typing import List, Optional, Sequence

import numpy as np

from simharness.data.client_data import sample_clients
from simharness.errors import SimharnessValueError

SAMPLING_MODES = ('random', 'weighted', 'with_replacement')


def available_clients(
    client_ids: Sequence[str], availability: float, round_num: int, seed: int
) -> List[str]:
    """The clients available in round `round_num` (each with probability `availability`)."""
    if not 0.0 < availability <= 1.0:
        raise SimharnessValueError(f'availability must be in (0, 1], got {availability!r}')
    ids = list(client_ids)
    if availability >= 1.0:
        return ids
    rng = np.random.default_rng((int(seed), int(round_num), 0xA7A1))
    up = rng.random(len(ids)) < availability
    if not up.any():  # nobody answered: one client, drawn uniformly
        up[rng.integers(len(ids))] = True
    return [c for c, u in zip(ids, up) if u]


def sample_cohort(
    client_ids: Sequence[str],
    num_clients: int,
    round_num: int,
    seed: int,
    *,
    mode: str = 'random',
    sizes: Optional[Sequence[int]] = None,
    availability: float = 1.0,
) -> List[str]:
    """A round's cohort (see the module docstring).

    Args:
      client_ids: the population.
      num_clients: the cohort size (fewer when fewer clients are available,
        without replacement).
      round_num, seed: the round and the experiment seed.
      mode: one of `SAMPLING_MODES`.
      sizes: the clients' example counts (mode 'weighted'), in `client_ids` order.
      availability: probability that a client is available in a round.

    Raises:
      SimharnessValueError: an unknown mode, missing or bad sizes, or a
        cohort larger than the population.
    """
    if mode not in SAMPLING_MODES:
        raise SimharnessValueError(
            f'unknown sampling mode {mode!r}; allowed: {", ".join(repr(m) for m in SAMPLING_MODES)}'
        )
    ids = list(client_ids)
    if num_clients > len(ids) and mode != 'with_replacement':
        raise SimharnessValueError(
            f'cannot sample {num_clients} distinct clients from a population of {len(ids)}'
        )
    if mode == 'weighted':
        if sizes is None or len(sizes) != len(ids):
            raise SimharnessValueError(
                f"mode 'weighted' needs one size per client, got "
                f'{None if sizes is None else len(sizes)} for {len(ids)}'
            )
    pool = available_clients(ids, availability, round_num, seed)
    k = num_clients if mode == 'with_replacement' else min(num_clients, len(pool))
    if mode == 'random':
        return sample_clients(pool, k, round_num, seed)
    rng = np.random.default_rng((int(seed), int(round_num)))
    if mode == 'with_replacement':
        return [pool[i] for i in rng.integers(0, len(pool), size=k)]
    index = {c: i for i, c in enumerate(ids)}
    w = np.asarray([float(sizes[index[c]]) for c in pool])  # type: ignore[index]
    if (w < 0).any() or not w.sum() > 0:
        raise SimharnessValueError('client sizes must be >= 0 with a positive sum')
    nonzero = int((w > 0).sum())
    k = min(k, nonzero)
    idx = rng.choice(len(pool), size=k, replace=False, p=w / w.sum())
    return [pool[i] for i in idx]
