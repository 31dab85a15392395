"""The ``[aggregator]`` table's checks (pure Python, at config time) and the DP
accounting the runner reports (`simharness.aggregators.accounting.dp_epsilon`).

Ported from the tests of the padded-array aggregators (``learning/aggregators.py``,
removed by issue 25): the same errors, now raised when the config is read.
"""

from __future__ import annotations

import math

import dp_accounting
import pytest

from simharness.aggregators.accounting import dp_epsilon, round_dp_event
from simharness.errors import ConfigError
from simharness.experiments.config import config_from_dict

TINY = {'name': 'tiny', 'training': {'clients_per_round': 5}}


def test_dp_epsilon_grows_with_rounds_and_falls_with_noise():
    e10 = dp_epsilon(1.0, 10, 1000, 10, 1e-5)
    e100 = dp_epsilon(1.0, 10, 1000, 100, 1e-5)
    assert 0 < e10 < e100
    assert dp_epsilon(2.0, 10, 1000, 100, 1e-5) < e100
    assert dp_epsilon(0.0, 10, 1000, 10, 1e-5) == math.inf
    assert dp_epsilon(1.0, 10, 1000, 0, 1e-5) == 0.0


def test_dp_epsilon_of_a_round_s_dp_event_is_that_of_its_noise_multiplier():
    """TFF's style: the event of one `next` (``extract_dp_event_from_state``) instead of
    the noise multiplier: a Gaussian query's event gives the same epsilon."""
    event = dp_accounting.GaussianDpEvent(1.3)
    assert dp_epsilon(0.0, 10, 1000, 20, 1e-5, dp_event=event) == dp_epsilon(
        1.3, 10, 1000, 20, 1e-5
    )
    sampled = round_dp_event(1.3, 10, 1000)
    assert isinstance(sampled, dp_accounting.SampledWithoutReplacementDpEvent)
    assert (sampled.source_dataset_size, sampled.sample_size) == (1000, 10)


def test_dp_epsilon_rejects_a_negative_round_count():
    with pytest.raises(Exception, match='rounds'):
        dp_epsilon(1.0, 10, 1000, -1, 1e-5)


@pytest.mark.parametrize(
    'table, key, fragment',
    [
        ({'noise_multiplier': 1.0, 'clip': 1.0}, 'aggregator.weighted', 'weighted = false'),
        ({'weighted': False, 'noise_multiplier': 1.0}, 'aggregator.clip', 'clip norm'),
        ({'secure': True, 'weighted': False}, 'aggregator.quantize_bits', 'set quantize_bits'),
        (
            {'quantize_bits': 40, 'clip': 1.0, 'secure': True, 'weighted': False},
            'aggregator.quantize_bits',
            r'int in \[1, 16\]',
        ),
        ({'adaptive_clip': True}, 'aggregator.clip', 'initial clip norm'),
        ({'clip': -1.0}, 'aggregator.clip', 'must be a number > 0'),
        ({'target_quantile': 1.5, 'clip': 1.0}, 'aggregator.target_quantile', '< 1'),
        (
            {
                'weighted': False,
                'secure': True,
                'quantize_bits': 8,
                'clip': 1.0,
                'noise_multiplier': 1.0,
            },
            'aggregator.secure',
            'choose one',
        ),
        (
            {'weighted': False, 'secure': True, 'quantize_bits': 8},
            'aggregator.quantize_range',
            'quantize_range or a clip norm',
        ),
    ],
)
def test_aggregator_errors_name_the_key(table, key, fragment):
    with pytest.raises(ConfigError, match=fragment) as e:
        config_from_dict({**TINY, 'aggregator': table})
    assert e.value.key == key
    assert str(e.value).startswith(f'{key}: ')


def test_quantizing_without_a_secure_sum_says_what_to_write_instead():
    with pytest.raises(ConfigError, match='set secure = true') as e:
        config_from_dict({**TINY, 'aggregator': {'quantize_bits': 8, 'clip': 1.0}})
    assert e.value.key == 'aggregator.quantize_bits'


def test_valid_tables_are_accepted():
    for table in (
        {},
        {'clip': 0.5},
        {'clip': 0.5, 'adaptive_clip': True},
        {'weighted': False, 'clip': 0.5, 'noise_multiplier': 0.3},
        {'weighted': False, 'secure': True, 'quantize_bits': 8, 'quantize_range': 1.0},
    ):
        assert config_from_dict({**TINY, 'aggregator': table}).aggregator.clip == table.get('clip')
