"""Client sampling for simulations: TFF's `build_uniform_sampling_fn`."""

from __future__ import annotations

from typing import Callable, Optional, Sequence, TypeVar

import numpy as np

from simharness.errors import SimharnessValueError

__all__ = ['MLCG_MODULUS', 'MLCG_MULTIPLIER', 'build_uniform_sampling_fn']

#: The multiplicative linear congruential generator (Lehmer) that seeds round r.
MLCG_MODULUS = 2**31 - 1
MLCG_MULTIPLIER = 16807

T = TypeVar('T')


def build_uniform_sampling_fn(
    sample_range: Sequence[T], replace: bool = False, random_seed: Optional[int] = None
) -> Callable[[int, int], list[T]]:
    """A function ``(round_num, size) -> list`` drawing `size` elements of `sample_range`.

    As TFF: with an int `random_seed`, round r draws with
    ``np.random.RandomState(MULTIPLIER**r * start % MODULUS)`` where ``start``
    is ``RandomState(random_seed).randint(1, MODULUS - 1)``, so a round's
    sample depends only on the seed and the round; without a seed each call
    draws afresh.

    Raises (from the returned function):
        SimharnessValueError: more elements than exist, without replacement.
    """
    seeded = isinstance(random_seed, int)
    if seeded:
        mlcg_start = np.random.RandomState(random_seed).randint(1, MLCG_MODULUS - 1)

    def get_pseudo_random_int(round_num: int) -> int:
        return pow(MLCG_MULTIPLIER, round_num, MLCG_MODULUS) * mlcg_start % MLCG_MODULUS

    def sample_fn(round_num: int, size: int) -> list[T]:
        random_state = (
            np.random.RandomState(get_pseudo_random_int(round_num))
            if seeded
            else np.random.RandomState()
        )
        try:
            return random_state.choice(
                sample_range,
                size=size,  # type: ignore[arg-type]
                replace=replace,
            ).tolist()
        except ValueError as e:
            raise SimharnessValueError(
                f'Failed to sample {size} clients from population of size {len(sample_range)}.'
            ) from e

    return sample_fn
