"""How the clients' model updates become one server update (TFF's ``tff.aggregators``).

An `Aggregator` is plain configuration; `simharness.learning.algorithms`
traces it into every round, on the clients and at the server::

    client (inside the client computation, per update u with weight n):
        clip      u *= min(1, C / ||u||)        C: fixed, or adaptive (server state)
        quantize  u -> q in [0, 2^b - 1]        stochastic rounding over [-R, R]
    aggregate:    federated_mean(u, weight=n)   weighted (default)
                  federated_mean(u)             unweighted
                  federated_sum(u) + noise      Gaussian DP: N(0, (z C)^2) at the server,
                                                divided by clients_per_round
                  federated_secure_sum_bitwidth(q, b)   secure sum of the quantized update
    server:       adaptive clipping  C <- C exp(-eta (unclipped fraction - target quantile))

So ``DP-FedAvg`` is `dp_gaussian_fixed` / `dp_gaussian_adaptive` (as TFF's
``DifferentiallyPrivateFactory.gaussian_fixed / gaussian_adaptive``) and
`dp_epsilon` accounts for it with Google's ``dp_accounting`` (RDP, the
cohort sampled without replacement). Noise comes from stateless TF random
ops seeded by (seed, round): the same bits on every stack.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from simharness.errors import ConfigError

AGGREGATORS = ('dp_adaptive', 'dp_fixed', 'mean', 'secure', 'unweighted_mean')


def _num(key: str, v: Any, *, low: float = 0.0, strict: bool = True,
         high: float = math.inf) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or (
            v <= low if strict else v < low) or v >= high:
        raise ConfigError(f'aggregator {key} must be a number {">" if strict else ">="} {low:g}'
                          + (f' and < {high:g}' if high < math.inf else '') + f', got {v!r}',
                          key=key, value=v)
    return float(v)


@dataclasses.dataclass(frozen=True)
class Aggregator:
    """An aggregation of client updates (see the module docstring).

    Attributes:
      weighted: mean weighted by the clients' example counts (False:
        unweighted; DP and secure sums are unweighted).
      clip: L2 clip norm of each client's update (the initial norm when
        `adaptive`); None: no clipping.
      adaptive: adapt the clip norm towards `target_quantile` of the
        update norms (Andrew et al., 2021).
      target_quantile, clip_learning_rate: of the adaptive clipping.
      noise_multiplier: Gaussian noise std / clip norm on the sum (0: no DP).
      clients_per_round: the DP mean's denominator (the cohort size).
      clipped_count_stddev: noise on the count of unclipped updates
        (adaptive DP; default 0.05 * clients_per_round, as TFF).
      quantize_bits: quantize each value to this many bits (None: off).
      quantize_range: values are clipped to [-R, R] before quantizing
        (default: the clip norm).
      secure: sum the quantized updates with federated_secure_sum_bitwidth.
      seed: seed of the DP noise and of the stochastic rounding.
    """

    weighted: bool = True
    clip: Optional[float] = None
    adaptive: bool = False
    target_quantile: float = 0.5
    clip_learning_rate: float = 0.2
    noise_multiplier: float = 0.0
    clients_per_round: Optional[int] = None
    clipped_count_stddev: Optional[float] = None
    quantize_bits: Optional[int] = None
    quantize_range: Optional[float] = None
    secure: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        if self.clip is not None:
            _num('clip', self.clip)
        if self.adaptive and self.clip is None:
            raise ConfigError('adaptive clipping needs an initial clip norm', key='clip')
        _num('target_quantile', self.target_quantile, high=1.0)
        _num('clip_learning_rate', self.clip_learning_rate, strict=False)
        _num('noise_multiplier', self.noise_multiplier, strict=False)
        if self.noise_multiplier > 0 or self.secure:
            if self.weighted:
                raise ConfigError('Gaussian DP and secure sums aggregate unweighted: set '
                                  'weighted = false', key='weighted', value=True)
        if self.noise_multiplier > 0:
            if self.clip is None:
                raise ConfigError('Gaussian DP needs a clip norm (the sensitivity)', key='clip')
            if not isinstance(self.clients_per_round, int) or self.clients_per_round < 1:
                raise ConfigError('Gaussian DP needs clients_per_round (an int >= 1, the mean\'s '
                                  f'denominator), got {self.clients_per_round!r}',
                                  key='clients_per_round', value=self.clients_per_round)
        if self.quantize_bits is not None:
            b = self.quantize_bits
            if isinstance(b, bool) or not isinstance(b, int) or not 1 <= b <= 16:
                raise ConfigError(f'quantize_bits must be an int in [1, 16], got {b!r}',
                                  key='quantize_bits', value=b)
            if self.quantize_range is None and self.clip is None:
                raise ConfigError('quantization needs quantize_range or a clip norm',
                                  key='quantize_range')
        if self.quantize_range is not None:
            _num('quantize_range', self.quantize_range)
        if self.secure and self.quantize_bits is None:
            raise ConfigError('a secure sum adds integers: set quantize_bits',
                              key='quantize_bits')
        if self.secure and self.noise_multiplier > 0:
            raise ConfigError('secure sums with central DP noise are not combined here (the '
                              'server would add noise to the securely summed update): choose '
                              'one', key='secure', value=True)

    # ------------------------------------------------------------- state
    @property
    def uses_unclipped_count(self) -> bool:
        return self.adaptive

    def initial_state(self) -> List[Any]:
        """Server state: ``[clip norm (float32 scalar)]`` (0 when there is no clipping)."""
        return [np.float32(self.clip or 0.0)]

    @property
    def update_noise_multiplier(self) -> float:
        """z of the update's noise (adaptive: part of the budget goes to the count)."""
        z = self.noise_multiplier
        if not (self.adaptive and z > 0):
            return z
        s = self.count_stddev / 2.0
        if z >= s:
            raise ConfigError(f'noise_multiplier {z} is too large for clipped_count_stddev '
                              f'{self.count_stddev} (needs z < clipped_count_stddev / 2)',
                              key='noise_multiplier', value=z)
        return (z ** -2 - s ** -2) ** -0.5

    @property
    def count_stddev(self) -> float:
        if self.clipped_count_stddev is not None:
            return self.clipped_count_stddev
        return 0.05 * (self.clients_per_round or 1) if self.noise_multiplier > 0 else 0.0

    @property
    def quant_range(self) -> float:
        return float(self.quantize_range if self.quantize_range is not None else self.clip)

    # ------------------------------------------------------ client side (TF)
    def client_process(self, update: List[Any], clip_norm: Any, round_num: Any
                       ) -> Tuple[List[Any], Any]:
        """Clipping and quantization of one update; returns (update or q, unclipped 0/1)."""
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        unclipped = tf.constant(1.0)
        if self.clip is not None:
            norm = tf.linalg.global_norm(update)
            unclipped = tf.cast(norm <= clip_norm, tf.float32)
            factor = tf.minimum(1.0, clip_norm / tf.maximum(norm, 1e-30))
            update = [u * factor for u in update]
        if self.quantize_bits is not None:
            r = self.quant_range
            levels = float(2 ** self.quantize_bits - 1)
            step = 2.0 * r / levels
            # Stochastic rounding, seeded by the round and the update's own bits (the
            # client's identity is not known inside a federated_map): same bits anywhere.
            fp = tf.bitcast(tf.reduce_sum([tf.reduce_sum(tf.abs(u)) for u in update]), tf.int32)
            out = []
            for i, u in enumerate(update):
                noise = tf.random.stateless_uniform(
                    tf.shape(u), seed=tf.stack([tf.cast(round_num, tf.int32) * 1009 + i, fp]))
                q = tf.floor((tf.clip_by_value(u, -r, r) + r) / step + noise)
                q = tf.clip_by_value(q, 0.0, levels)
                out.append(tf.cast(q, tf.int32) if self.secure else q * step - r)
            update = out
        return update, unclipped

    # ------------------------------------------------------- server side (TF)
    def server_finalize(self, total: List[Any], count: Any, unclipped_sum: Any,
                        clip_norm: Any, round_num: Any) -> Tuple[List[Any], Any, Dict[str, Any]]:
        """From the aggregate to the mean update; returns (mean, new clip norm, measurements).

        `total` is the weighted / unweighted mean (no DP), the plain sum (DP)
        or the sum of quantized integers (secure); `count` the number of
        clients of the round.
        """
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        measurements: Dict[str, Any] = {}
        mean = total
        if self.secure:
            r = self.quant_range
            step = 2.0 * r / float(2 ** self.quantize_bits - 1)
            mean = [(tf.cast(q, tf.float32) * step - count * r) / count for q in total]
        elif self.noise_multiplier > 0:
            std = self.update_noise_multiplier * clip_norm
            seed0 = tf.cast(round_num, tf.int32)
            noised = [t + std * tf.random.stateless_normal(
                tf.shape(t), seed=tf.stack([seed0 * 1009 + i, tf.constant(self.seed, tf.int32)]))
                for i, t in enumerate(total)]
            mean = [t / float(self.clients_per_round) for t in noised]
            measurements['dp_noise_stddev'] = std / float(self.clients_per_round)
        new_clip = clip_norm
        if self.adaptive:
            n = float(self.clients_per_round) if self.noise_multiplier > 0 else count
            noisy = unclipped_sum
            if self.noise_multiplier > 0:
                noisy = unclipped_sum + self.count_stddev * tf.random.stateless_normal(
                    [], seed=tf.stack([tf.cast(round_num, tf.int32),
                                       tf.constant(self.seed + 7919, tf.int32)]))
            frac = noisy / n
            new_clip = clip_norm * tf.exp(-self.clip_learning_rate * (frac - self.target_quantile))
            measurements['unclipped_fraction'] = unclipped_sum / tf.maximum(count, 1.0)
        if self.clip is not None:
            measurements['clip_norm'] = clip_norm
            if not self.adaptive:
                measurements['unclipped_fraction'] = unclipped_sum / tf.maximum(count, 1.0)
        return mean, new_clip, measurements

    def measurement_names(self) -> List[str]:
        names = []
        if self.noise_multiplier > 0:
            names.append('dp_noise_stddev')
        if self.clip is not None:
            names += ['unclipped_fraction', 'clip_norm']
        return names


# ------------------------------------------------------------- constructors

def mean() -> Aggregator:
    """The weighted mean (FedAvg's default)."""
    return Aggregator()


def unweighted_mean() -> Aggregator:
    return Aggregator(weighted=False)


def clipping(clip: float, adaptive: bool = False, target_quantile: float = 0.5,
             learning_rate: float = 0.2, weighted: bool = True) -> Aggregator:
    """Clips each update to L2 norm `clip` (fixed, or adaptive from that start)."""
    return Aggregator(weighted=weighted, clip=clip, adaptive=adaptive,
                      target_quantile=target_quantile, clip_learning_rate=learning_rate)


def dp_gaussian_fixed(noise_multiplier: float, clients_per_round: int, clip: float,
                      seed: int = 0) -> Aggregator:
    """Central Gaussian DP with a fixed clip norm (TFF's ``gaussian_fixed``)."""
    return Aggregator(weighted=False, clip=clip, noise_multiplier=noise_multiplier,
                      clients_per_round=clients_per_round, seed=seed)


def dp_gaussian_adaptive(noise_multiplier: float, clients_per_round: int,
                         initial_l2_norm_clip: float = 0.1, target_unclipped_quantile: float = 0.5,
                         learning_rate: float = 0.2, clipped_count_stddev: Optional[float] = None,
                         seed: int = 0) -> Aggregator:
    """Central Gaussian DP with adaptive clipping (TFF's ``gaussian_adaptive``)."""
    return Aggregator(weighted=False, clip=initial_l2_norm_clip, adaptive=True,
                      target_quantile=target_unclipped_quantile, clip_learning_rate=learning_rate,
                      noise_multiplier=noise_multiplier, clients_per_round=clients_per_round,
                      clipped_count_stddev=clipped_count_stddev, seed=seed)


def quantized_mean(bits: int, value_range: float, weighted: bool = True) -> Aggregator:
    """Each value stochastically rounded to `bits` bits over [-range, range]."""
    return Aggregator(weighted=weighted, quantize_bits=bits, quantize_range=value_range)


def secure_sum(bits: int, value_range: float, clip: Optional[float] = None) -> Aggregator:
    """Quantized updates summed with ``federated_secure_sum_bitwidth`` (unweighted mean)."""
    return Aggregator(weighted=False, clip=clip, quantize_bits=bits, quantize_range=value_range,
                      secure=True)


def dp_epsilon(noise_multiplier: float, clients_per_round: int, num_clients: int, rounds: int,
               delta: float) -> float:
    """The (epsilon, delta)-DP epsilon after `rounds` rounds (client-level DP).

    Each round samples `clients_per_round` of `num_clients` clients without
    replacement and releases a Gaussian sum of sensitivity 1 (in units of
    the clip norm) with noise `noise_multiplier`; composed `rounds` times
    with ``dp_accounting``'s Rényi accountant.
    """
    import dp_accounting  # pylint: disable=import-outside-toplevel
    from dp_accounting.rdp import rdp_privacy_accountant as rdp  # pylint: disable=import-outside-toplevel
    if noise_multiplier <= 0:
        return math.inf
    if rounds <= 0:
        return 0.0
    event = dp_accounting.SampledWithoutReplacementDpEvent(
        num_clients, clients_per_round, dp_accounting.GaussianDpEvent(noise_multiplier))
    acc = rdp.RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    acc.compose(event, int(rounds))
    return float(acc.get_epsilon(delta))
