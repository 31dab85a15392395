"""Aggregators of model updates for learning algorithms (TFF's ``learning/model_update_aggregator.py``).

```
robust_aggregator(zeroing, clipping, weighted)   zeroing( clipping( mean ) )
dp_aggregator(noise_multiplier, clients_per_round, zeroing)
                                                 zeroing( DP adaptive Gaussian, unweighted )
compression_aggregator(zeroing, clipping, weighted)
                                                 zeroing( clipping( mean( 8-bit quantized sum ) ) )
secure_aggregator(zeroing, clipping, weighted)   zeroing( clipping( mean( secure sum ) ) ),
                                                 norms estimated with secure sums
ddp_secure_aggregator(noise_multiplier, expected_clients_per_round, bits, zeroing, rotation_type)
                                                 zeroing( mean( distributed DP sum ) )
zeroing: adaptive norm, initial 10, the 0.98 quantile times 2 plus 1
clipping: adaptive norm, initial 1, the 0.8 quantile
```
"""

from __future__ import annotations

import importlib
import math
import types
from typing import Callable, Optional, TypeVar, cast

from simharness.aggregators import (
    differential_privacy,
    factory,
    mean,
    quantile_estimation,
    robust,
    secure,
)
from simharness.errors import SimharnessTypeError

__all__ = [
    'compression_aggregator',
    'ddp_secure_aggregator',
    'dp_aggregator',
    'robust_aggregator',
    'secure_aggregator',
]

DebugMeasurementsFn = Callable[[factory.AggregationFactory], factory.AggregationFactory]

#: The kind of a factory (weighted, unweighted, or either): the robust wrappers keep the
#: kind they wrap (declare variables of the abstract kinds, not of a concrete factory).
_Factory = TypeVar('_Factory', bound=factory.AggregationFactory)


def _aggregators_module(name: str) -> types.ModuleType:
    """`simharness.aggregators.<name>`, loaded when used: the quantizing (`encoded`) and
    distributed-DP factories are the only users of their (large) modules here."""
    return importlib.import_module(f'simharness.aggregators.{name}')


def _secure_count_factory() -> secure.SecureSumFactory:
    return secure.SecureSumFactory(upper_bound_threshold=1, lower_bound_threshold=0)


def _default_zeroing(inner_factory: _Factory, secure_estimation: bool = False) -> _Factory:
    """Zeroes updates whose norm exceeds 2 x (estimated 0.98 quantile) + 1."""
    zeroing_norm = quantile_estimation.PrivateQuantileEstimationProcess.no_noise(
        initial_estimate=10.0,
        target_quantile=0.98,
        learning_rate=math.log(10.0),
        multiplier=2.0,
        increment=1.0,
        secure_estimation=secure_estimation,
    )
    if secure_estimation:
        zeroing = robust.zeroing_factory(
            zeroing_norm, inner_factory, zeroed_count_sum_factory=_secure_count_factory()
        )
    else:
        zeroing = robust.zeroing_factory(zeroing_norm, inner_factory)
    return cast(_Factory, zeroing)  # weighted if (and only if) `inner_factory` is


def _default_clipping(inner_factory: _Factory, secure_estimation: bool = False) -> _Factory:
    """Clips updates to the estimated 0.8 quantile of their norms."""
    clipping_norm = quantile_estimation.PrivateQuantileEstimationProcess.no_noise(
        initial_estimate=1.0,
        target_quantile=0.8,
        learning_rate=0.2,
        secure_estimation=secure_estimation,
    )
    if secure_estimation:
        clipping = robust.clipping_factory(
            clipping_norm, inner_factory, clipped_count_sum_factory=_secure_count_factory()
        )
    else:
        clipping = robust.clipping_factory(clipping_norm, inner_factory)
    return cast(_Factory, clipping)  # weighted if (and only if) `inner_factory` is


def _apply_debug(
    aggregation_factory: factory.AggregationFactory,
    weighted: bool,
    debug_measurements_fn: Optional[DebugMeasurementsFn],
) -> factory.AggregationFactory:
    if not debug_measurements_fn:
        return aggregation_factory
    aggregation_factory = debug_measurements_fn(aggregation_factory)
    expected = (
        factory.WeightedAggregationFactory if weighted else factory.UnweightedAggregationFactory
    )
    if not isinstance(aggregation_factory, expected):
        raise SimharnessTypeError(
            'debug_measurements_fn should return the same type.',
            expected=expected,
            actual=type(aggregation_factory),
        )
    return aggregation_factory


def robust_aggregator(
    *,
    zeroing: bool = True,
    clipping: bool = True,
    weighted: bool = True,
    debug_measurements_fn: Optional[DebugMeasurementsFn] = None,
) -> factory.AggregationFactory:
    """A mean robust to outlying updates: adaptive zeroing and clipping.

    Args:
      zeroing: zero out updates of very large norm (adaptive).
      clipping: clip updates to an adaptive norm (the 0.8 quantile).
      weighted: a weighted mean (else unweighted).
      debug_measurements_fn: wraps the mean factory (e.g.
        ``tff.learning.add_debug_measurements``); must keep its weightedness.

    Returns:
      A `WeightedAggregationFactory` (weighted) or an `UnweightedAggregationFactory`.
    """
    aggregation_factory: factory.AggregationFactory = (
        mean.MeanFactory() if weighted else mean.UnweightedMeanFactory()
    )
    aggregation_factory = _apply_debug(aggregation_factory, weighted, debug_measurements_fn)
    if clipping:
        aggregation_factory = _default_clipping(aggregation_factory)
    if zeroing:
        aggregation_factory = _default_zeroing(aggregation_factory)
    return aggregation_factory


def dp_aggregator(
    noise_multiplier: float, clients_per_round: float, zeroing: bool = True
) -> factory.UnweightedAggregationFactory:
    """Central Gaussian DP with an adaptive clip (DP-FedAvg of McMahan et al. 2018).

    Args:
      noise_multiplier: the noise stddev over the clip norm.
      clients_per_round: the expected clients per round.
      zeroing: zero out updates of very large norm first.

    Returns:
      An `UnweightedAggregationFactory`.
    """
    aggregation_factory: factory.UnweightedAggregationFactory = (
        differential_privacy.DifferentiallyPrivateFactory.gaussian_adaptive(
            noise_multiplier, clients_per_round
        )
    )
    if zeroing:
        aggregation_factory = _default_zeroing(aggregation_factory)
    return aggregation_factory


def compression_aggregator(
    *,
    zeroing: bool = True,
    clipping: bool = True,
    weighted: bool = True,
    debug_measurements_fn: Optional[DebugMeasurementsFn] = None,
    **kwargs: object,
) -> factory.AggregationFactory:
    """A mean of updates quantized to 8 bits (tensors of more than 20,000 elements).

    Args:
      zeroing, clipping, weighted, debug_measurements_fn: as `robust_aggregator`.
      **kwargs: passed to ``EncodedSumFactory.quantize_above_threshold``.
    """
    encoded = _aggregators_module('encoded')
    value_sum: factory.UnweightedAggregationFactory = (
        encoded.EncodedSumFactory.quantize_above_threshold(
            quantization_bits=8, threshold=20000, **kwargs
        )
    )
    aggregation_factory: factory.AggregationFactory = (
        mean.MeanFactory(value_sum) if weighted else mean.UnweightedMeanFactory(value_sum)
    )
    aggregation_factory = _apply_debug(aggregation_factory, weighted, debug_measurements_fn)
    if clipping:
        aggregation_factory = _default_clipping(aggregation_factory)
    if zeroing:
        aggregation_factory = _default_zeroing(aggregation_factory)
    return aggregation_factory


def secure_aggregator(
    *, zeroing: bool = True, clipping: bool = True, weighted: bool = True
) -> factory.AggregationFactory:
    """A mean whose sums are secure sums (norm bounds estimated with secure sums too).

    Weights are summed securely with the bound ``2**20 - 1``.
    """
    secure_clip_bound = quantile_estimation.PrivateQuantileEstimationProcess.no_noise(
        initial_estimate=50.0,
        target_quantile=0.95,
        learning_rate=1.0,
        multiplier=2.0,
        secure_estimation=True,
    )
    value_sum = secure.SecureSumFactory(secure_clip_bound)
    aggregation_factory: factory.AggregationFactory
    if weighted:
        aggregation_factory = mean.MeanFactory(
            value_sum_factory=value_sum,
            weight_sum_factory=secure.SecureSumFactory(
                upper_bound_threshold=float(2**20 - 1), lower_bound_threshold=0.0
            ),
        )
    else:
        aggregation_factory = mean.UnweightedMeanFactory(
            value_sum_factory=value_sum, count_sum_factory=_secure_count_factory()
        )
    if clipping:
        aggregation_factory = _default_clipping(aggregation_factory, secure_estimation=True)
    if zeroing:
        aggregation_factory = _default_zeroing(aggregation_factory, secure_estimation=True)
    return aggregation_factory


def ddp_secure_aggregator(
    noise_multiplier: float,
    expected_clients_per_round: int,
    bits: int = 20,
    zeroing: bool = True,
    rotation_type: str = 'hd',
) -> factory.UnweightedAggregationFactory:
    """Distributed DP (distributed Skellam) over secure sums, unweighted.

    Args:
      noise_multiplier: the noise stddev over the L2 clip.
      expected_clients_per_round: the expected clients per round.
      bits: the bits of the secure sum's modular range.
      zeroing: zero out updates of very large norm first.
      rotation_type: 'hd' (randomized Hadamard) or 'dft'.
    """
    distributed_dp = _aggregators_module('distributed_dp')
    value_sum: factory.UnweightedAggregationFactory = distributed_dp.DistributedDpSumFactory(
        noise_multiplier=noise_multiplier,
        expected_clients_per_round=expected_clients_per_round,
        bits=bits,
        l2_clip=0.1,
        mechanism='distributed_skellam',
        rotation_type=rotation_type,
        auto_l2_clip=True,
    )
    aggregation_factory: factory.UnweightedAggregationFactory = mean.UnweightedMeanFactory(
        value_sum_factory=value_sum, count_sum_factory=_secure_count_factory()
    )
    if zeroing:
        aggregation_factory = _default_zeroing(aggregation_factory, secure_estimation=True)
    return aggregation_factory
