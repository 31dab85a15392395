"""``[aggregator]``: how client updates are combined, checked in pure Python (no
TensorFlow; `simharness.experiments.processes.build_model_aggregator` builds TFF's factory)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar, Optional

from simharness.errors import ConfigError
from simharness.experiments.config.base import _as_given, _check_bool, _int, _num, _opt, _Table


def _agg_num(
    key: str, v: Any, *, low: float = 0.0, strict: bool = True, high: float = math.inf
) -> float:
    """A number of the ``[aggregator]`` table (the error names ``aggregator.<key>``)."""
    if (
        isinstance(v, bool)
        or not isinstance(v, (int, float))
        or not math.isfinite(v)
        or (v <= low if strict else v < low)
        or v >= high
    ):
        raise ConfigError(
            f'aggregator.{key}: aggregator {key} must be a number '
            f'{">" if strict else ">="} {low:g}'
            + (f' and < {high:g}' if high < math.inf else '')
            + f', got {v!r}',
            key=f'aggregator.{key}',
            value=v,
        )
    return float(v)


def _agg_error(key: str, message: str, value: Any = None) -> ConfigError:
    return ConfigError(f'aggregator.{key}: {message}', key=f'aggregator.{key}', value=value)


@dataclasses.dataclass(frozen=True)
class AggregatorConfig(_Table):
    """``[aggregator]``: how client updates are combined (TFF's ``tff.aggregators``).

    `simharness.experiments.processes.build_model_aggregator` builds the
    factory: the (weighted) mean, `clipping_factory` (fixed or adaptive
    norm), `DifferentiallyPrivateFactory.gaussian_fixed / gaussian_adaptive`,
    or an unweighted mean over `SecureSumFactory`.

    Attributes:
        weighted: mean weighted by client example counts (default true;
            Gaussian DP and secure sums need false).
        clip: L2 clip norm of each client update (the initial norm when
            adaptive_clip); unset: no clipping.
        adaptive_clip: adapt the clip norm to target_quantile (default false).
        target_quantile: of the adaptive clipping (default 0.5).
        clip_learning_rate: of the adaptive clipping (default 0.2).
        noise_multiplier: central Gaussian DP noise / clip norm (default 0:
            off); the mean divides by training.clients_per_round.
        clipped_count_stddev: adaptive DP: noise on the unclipped count
            (default 0.05 * clients_per_round).
        dp_delta: the delta of the reported epsilon (default 1e-5).
        quantize_bits: with secure: the updates are summed as integers
            (SecureSumFactory quantizes within quantize_range); required by
            secure.
        quantize_range: the secure sum's range [-R, R] (default: clip).
        secure: sum the updates with a secure sum (unweighted).
        seed: seed of the DP noise (default 0).

    Every option is checked here (pure Python, no TensorFlow).
    """

    TABLE: ClassVar[str] = 'aggregator'
    weighted: bool = _opt(True, _check_bool)
    clip: Optional[float] = None
    adaptive_clip: bool = _opt(False, _check_bool)
    target_quantile: float = 0.5
    clip_learning_rate: float = 0.2
    noise_multiplier: float = 0.0
    clipped_count_stddev: Optional[float] = None
    dp_delta: float = _opt(1e-5, _as_given(_num(0.0, inclusive=False, below=1.0)))
    quantize_bits: Optional[int] = None
    quantize_range: Optional[float] = None
    secure: bool = _opt(False, _check_bool)
    seed: int = _opt(0, _int(0))

    def _validate(self) -> None:
        if self.clip is not None:
            _agg_num('clip', self.clip)
        if self.adaptive_clip and self.clip is None:
            raise _agg_error('clip', 'adaptive clipping needs an initial clip norm')
        _agg_num('target_quantile', self.target_quantile, high=1.0)
        _agg_num('clip_learning_rate', self.clip_learning_rate, strict=False)
        _agg_num('noise_multiplier', self.noise_multiplier, strict=False)
        if (self.noise_multiplier > 0 or self.secure) and self.weighted:
            raise _agg_error(
                'weighted',
                'Gaussian DP and secure sums aggregate unweighted: set weighted = false',
                True,
            )
        if self.noise_multiplier > 0 and self.clip is None:
            raise _agg_error('clip', 'Gaussian DP needs a clip norm (the sensitivity)')
        if self.clipped_count_stddev is not None:
            _agg_num('clipped_count_stddev', self.clipped_count_stddev)
        if self.quantize_bits is not None:
            b = self.quantize_bits
            if isinstance(b, bool) or not isinstance(b, int) or not 1 <= b <= 16:
                raise _agg_error(
                    'quantize_bits', f'quantize_bits must be an int in [1, 16], got {b!r}', b
                )
            if not self.secure:
                raise ConfigError(
                    'aggregator.quantize_bits without aggregator.secure has no TFF aggregator: '
                    'set secure = true (SecureSumFactory quantizes within quantize_range) or '
                    'drop quantize_bits',
                    key='aggregator.quantize_bits',
                    value=b,
                )
            if self.quantize_range is None and self.clip is None:
                raise _agg_error(
                    'quantize_range', 'quantization needs quantize_range or a clip norm'
                )
        if self.quantize_range is not None:
            _agg_num('quantize_range', self.quantize_range)
        if self.secure and self.quantize_bits is None:
            raise _agg_error('quantize_bits', 'a secure sum adds integers: set quantize_bits')
        if self.secure and self.noise_multiplier > 0:
            raise _agg_error(
                'secure',
                'secure sums with central DP noise are not combined here '
                '(the server would add noise to the securely summed update): '
                'choose one',
                True,
            )
