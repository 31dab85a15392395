"""Port of TFF's ``tensorflow_federated/python/simulation/sampling_utils_test.py``.

No case left out. Added: a seeded round's sample is TFF's (the Lehmer
generator's seed for the round, then ``RandomState.choice``), and too large
a sample without replacement names the population.
"""

import numpy as np
import pytest

from simharness.simulation import sampling_utils

CASES = [
    (range(100), False),
    (range(5), True),
    ([str(i) for i in range(100)], False),
    ([str(i) for i in range(5)], True),
]
IDS = ['int_no_replace', 'int_replace', 'sequence_no_replace', 'sequence_replace']


@pytest.mark.parametrize('a, replace', CASES, ids=IDS)
def test_build_uniform_sampling_fn_with_random_seed(a, replace):
    s1 = sampling_utils.build_uniform_sampling_fn(a, replace=replace, random_seed=1)(5, size=10)
    s2 = sampling_utils.build_uniform_sampling_fn(a, replace=replace, random_seed=1)(5, size=10)
    assert s1 == s2


@pytest.mark.parametrize('a, replace', CASES, ids=IDS)
def test_build_sampling_fn_without_random_seed(a, replace):
    s1 = sampling_utils.build_uniform_sampling_fn(a, replace=replace)(5, size=10)
    s2 = sampling_utils.build_uniform_sampling_fn(a, replace=replace)(5, size=10)
    assert s1 != s2


def test_seeded_rounds_follow_the_lehmer_generator():
    population = [f'c{i}' for i in range(50)]
    sample_fn = sampling_utils.build_uniform_sampling_fn(population, random_seed=7)
    start = np.random.RandomState(7).randint(1, 2**31 - 2)
    for round_num in (0, 1, 2, 9):
        seed = pow(16807, round_num, 2**31 - 1) * start % (2**31 - 1)
        want = np.random.RandomState(seed).choice(population, size=4, replace=False).tolist()
        assert sample_fn(round_num, 4) == want
    assert sample_fn(1, 4) != sample_fn(2, 4)


def test_too_many_without_replacement():
    with pytest.raises(ValueError, match='Failed to sample 6 clients from population of size 5'):
        sampling_utils.build_uniform_sampling_fn(range(5), random_seed=0)(1, 6)
