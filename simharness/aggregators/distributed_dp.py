"""TFF's `DistributedDpSumFactory` (``aggregators/distributed_dp.py``): distributed DP over SecAgg.

```
concat( rotation(hd|dft)( clipping(l2_clip, adaptive when auto_l2_clip)(
  DiscretizationFactory(scale, stochastic, beta, prior_norm_bound=l2_clip)(
    DifferentiallyPrivateFactory(DistributedSkellamSumQuery: local noise on each client)(
      modular clip [-2**(bits-1), 2**(bits-1)) ( modular clip [0, 2**bits) ( secure sum ))))))
scale = min(1e6, sqrt(2**(2 bits) - n k**2) / (2 k sqrt(c**2 n**2 / d + n sigma**2)))
measurements <l2_clip, scale_factor, scaled_inflated_l2, scaled_local_stddev,
              actual_num_clients, padded_dim, dp_query_metrics>
```
With `auto_l2_clip` the clip follows a secure quantile estimate and each
`next` retunes the scale and the query's bounds (TFF's `_autotune_component_states`).

Noise: as in TFF, each client draws its Skellam noise from unseeded Poisson
ops: fresh on every client and every call, so independent between clients
(equal records too), and not the same bits on two stacks or two runs. The
Skellam query's global state has a fourth field, ``noise_seed`` (int64[2];
ours), used only by a query built with ``noise_seed=<int>``: each client then
seeds its draws with it folded with a fingerprint of its record, the same bits
on every stack, at a price: clients holding equal records draw equal noise (a
reproducibility mode for tests, not for a privacy guarantee).
The ``distributed_dgauss`` mechanism (tensorflow_privacy's discrete Gaussian
sampler) is not written: choosing it raises `NotImplementedError`.
"""

from __future__ import annotations

import collections
import math
import warnings
from typing import Any, Optional

import dp_accounting
import numpy as np
import tensorflow as tf

from simharness.aggregators import (
    concat,
    differential_privacy,
    discretization,
    factory,
    modular_clipping,
    quantile_estimation,
    robust,
    rotation,
    secure,
)
from simharness.aggregators import tensor_utils as tu
from simharness.aggregators.privacy import quantile as quantile_query
from simharness.aggregators.privacy import query as dp_query
from simharness.core import intrinsics
from simharness.core import types as T
from simharness.core.computation import federated_computation, tf_computation
from simharness.templates import AggregationProcess, MeasuredProcessOutput

__all__ = [
    'DP_MECHANISMS',
    'DistributedDpSumFactory',
    'DistributedSkellamSumQuery',
    'MAX_SCALE_FACTOR',
    'ROTATION_TYPES',
]

DP_MECHANISMS = ['distributed_dgauss', 'distributed_skellam']
ROTATION_TYPES = ['hd', 'dft']
MAX_SCALE_FACTOR = 1e6


class DistributedSkellamSumQuery(dp_query.SumAggregationDPQuery):
    """tensorflow_privacy's `DistributedSkellamSumQuery`: each client adds Skellam noise.

    The records are int32; each client checks their L1 and L2 norms against the
    bounds and adds the difference of two Poisson draws of mean
    ``local_stddev**2 / 2`` to every coordinate. `noise_seed` (ours): None
    (TFF's) draws unseeded noise, fresh and independent on every client and
    call; an int seeds each client's draws with the state's seed (this int,
    then moved on at each `get_noised_result`) folded with a fingerprint of
    its record: the same bits on every stack, but equal records draw equal noise.
    """

    _GlobalState = collections.namedtuple(
        '_GlobalState', ['l1_norm_bound', 'l2_norm_bound', 'local_stddev', 'noise_seed']
    )
    _SampleParams = collections.namedtuple(
        '_SampleParams', ['l1_norm_bound', 'l2_norm_bound', 'local_stddev', 'noise_seed']
    )

    def __init__(
        self,
        l1_norm_bound: Any,
        l2_norm_bound: Any,
        local_stddev: Any,
        noise_seed: Optional[int] = None,
    ):
        self._l1_norm_bound = l1_norm_bound
        self._l2_norm_bound = l2_norm_bound
        self._local_stddev = local_stddev
        self._noise_seed = noise_seed

    def initial_global_state(self) -> Any:
        seed = tf.constant([0, 0 if self._noise_seed is None else int(self._noise_seed)], tf.int64)
        return self._GlobalState(
            tf.cast(self._l1_norm_bound, tf.int32),
            tf.cast(self._l2_norm_bound, tf.float32),
            tf.cast(self._local_stddev, tf.float32),
            seed,
        )

    def derive_sample_params(self, global_state: Any) -> Any:
        return self._SampleParams(*global_state)

    def add_noise_to_sample(self, local_stddev: Any, record: Any, seed: Any) -> Any:
        """`record` plus Skellam noise of stddev `local_stddev` per coordinate."""
        local_stddev = tf.cast(local_stddev, tf.float64)
        lam = 0.5 * local_stddev * local_stddev
        leaves = tu.flatten(record)
        if self._noise_seed is None:  # TFF's: unseeded, fresh on every client and call
            return tu.pack_sequence_as(
                record,
                [
                    v
                    + tf.cast(
                        tf.random.poisson(tf.shape(v), lam, dtype=tf.int64)
                        - tf.random.poisson(tf.shape(v), lam, dtype=tf.int64),
                        v.dtype,
                    )
                    for v in leaves
                ],
            )
        client_seed = tf.random.experimental.stateless_fold_in(
            tf.cast(seed, tf.int64), tu.fingerprint(leaves)
        )
        noised = []
        for i, v in enumerate(leaves):
            leaf_seed = tf.random.experimental.stateless_fold_in(client_seed, i)
            poissons = tf.random.stateless_poisson(
                shape=tf.concat([tf.shape(v), [2]], axis=0),
                seed=leaf_seed,
                lam=tf.stack([lam, lam]),
                dtype=tf.int64,
            )
            noised.append(v + tf.cast(poissons[..., 0] - poissons[..., 1], v.dtype))
        return tu.pack_sequence_as(record, noised)

    def preprocess_record(self, params: Any, record: Any) -> Any:
        leaves = tu.flatten(record)
        for x in leaves:
            tf.debugging.assert_type(x, tf.int32)
        as_float = [tf.cast(x, tf.float32) for x in leaves]
        checks = [
            tf.debugging.assert_less_equal(
                tf.reduce_sum([tf.norm(x, ord=1) for x in leaves]),
                params.l1_norm_bound,
                message='L1 norm exceeds the bound.',
            ),
            tf.debugging.assert_less_equal(
                tf.linalg.global_norm(as_float),
                params.l2_norm_bound,
                message='Global L2 norm exceeds the bound.',
            ),
        ]
        with tf.control_dependencies(checks):
            return tu.cond(
                tf.equal(params.local_stddev, 0.0),
                lambda: tu.map_structure(tf.identity, record),
                lambda: self.add_noise_to_sample(params.local_stddev, record, params.noise_seed),
                like=record,
            )

    def get_noised_result(self, sample_state: Any, global_state: Any) -> Any:
        pair = tf.random.experimental.stateless_split(global_state.noise_seed, 2)
        return (
            sample_state,
            global_state._replace(noise_seed=pair[1]),
            dp_accounting.UnsupportedDpEvent(),
        )


def _check_scalar(value: Any, label: str) -> None:
    if isinstance(value, bool) or not (isinstance(value, (int, float)) or np.isscalar(value)):
        raise TypeError(f'{label} must be a scalar. Found {value!r}.')


def _check_positive(value: Any, label: str) -> None:
    _check_scalar(value, label)
    if value <= 0:
        raise ValueError(f'{label} must be positive. Found {value!r}.')


def _check_nonnegative(value: Any, label: str) -> None:
    _check_scalar(value, label)
    if value < 0:
        raise ValueError(f'{label} must be nonnegative. Found {value!r}.')


def _check_integer(value: Any, label: str) -> None:
    _check_scalar(value, label)
    if not isinstance(value, (int, np.integer)):
        raise TypeError(f'{label} must be an integer. Found {value!r}.')


def _check_bool(value: Any, label: str) -> None:
    if not isinstance(value, bool):
        raise TypeError(f'{label} must be a bool. Found {value!r}.')


def _check_str(value: Any, label: str, options: list) -> None:
    msg = f'`{label}` must be a string and one of {options}. Found {value}.'
    if not isinstance(value, str):
        raise TypeError(msg)
    if value not in options:
        raise ValueError(msg)


def _check_in_range(
    value: Any, label: str, left: float, right: float, left_inclusive: bool, right_inclusive: bool
) -> None:
    _check_scalar(value, label)
    left_ok = value >= left if left_inclusive else value > left
    right_ok = value <= right if right_inclusive else value < right
    if not (left_ok and right_ok):
        raise ValueError(
            f'{label} should be between {left} and {right} (with left_inclusive='
            f'{left_inclusive} and right_inclusive={right_inclusive}). '
            f'Found {value}.'
        )


def _clip_prob_to_num_stddevs(clip_prob: float) -> float:
    """Standard deviations of a Gaussian outside of which lies `clip_prob` of the mass."""
    return math.sqrt(2) * float(tf.math.erfcinv(tf.constant(clip_prob, tf.float64)).numpy())


def _heuristic_scale_factor(
    local_stddev: Any,
    l2_clip: Any,
    bits: Any,
    num_clients: Any,
    dim: Any,
    k_stddevs: Any,
    rho: float = 1.0,
) -> tf.Tensor:
    """TFF's scale: the noisy sum of `num_clients` fits in `bits` with `k_stddevs` to spare."""
    bits = tf.cast(bits, tf.float64)
    c = tf.cast(l2_clip, tf.float64)
    dim = tf.cast(dim, tf.float64)
    k_stddevs = tf.cast(k_stddevs, tf.float64)
    n = tf.cast(num_clients, tf.float64)
    sigma = tf.cast(local_stddev, tf.float64)
    numer = tf.sqrt(2.0 ** (2.0 * bits) - n * k_stddevs**2)
    denom = 2.0 * k_stddevs * tf.sqrt(rho / dim * c**2 * n**2 + n * sigma**2)
    return numer / denom


class DistributedDpSumFactory(factory.UnweightedAggregationFactory):
    """Sums with distributed DP (local discrete noise, modular secure sum), TFF's defaults.

    Args:
      noise_multiplier: the noise stddev over the L2 clip (>= 0).
      expected_clients_per_round: the expected clients per round (a positive int).
      bits: the secure sum's bit width, 1 to 22.
      l2_clip: the (initial) L2 clip of the client values.
      modclip_prob: the target probability of a modular wrap-around, in (0, 1).
      beta: the conditional rounding's parameter, in [0, 1).
      mechanism: 'distributed_skellam' ('distributed_dgauss' is not written here).
      rotation_type: 'hd' (randomized Hadamard) or 'dft' (randomized DFT).
      auto_l2_clip: adapt the clip to a quantile of the norms (secure estimate).
      auto_l2_target_quantile, auto_l2_lr, auto_l2_clip_count_stddev: its parameters.
    """

    def __init__(
        self,
        noise_multiplier: float,
        expected_clients_per_round: int,
        bits: int,
        l2_clip: float,
        modclip_prob: float = 1e-4,
        beta: float = 0.0,
        mechanism: str = 'distributed_skellam',
        rotation_type: str = 'dft',
        auto_l2_clip: bool = False,
        auto_l2_target_quantile: float = 0.5,
        auto_l2_lr: float = 0.2,
        auto_l2_clip_count_stddev: Optional[float] = None,
    ):
        _check_nonnegative(noise_multiplier, 'noise_multiplier')
        _check_positive(expected_clients_per_round, 'expected_clients_per_round')
        _check_integer(expected_clients_per_round, 'expected_clients_per_round')
        _check_in_range(bits, 'bits', 1, 22, True, True)
        _check_integer(bits, 'bits')
        _check_positive(l2_clip, 'l2_clip')
        _check_in_range(modclip_prob, 'modclip_prob', 0, 1, False, False)
        _check_in_range(beta, 'beta', 0.0, 1.0, True, False)
        _check_str(mechanism, 'mechanism', DP_MECHANISMS)
        _check_str(rotation_type, 'rotation_type', ROTATION_TYPES)
        _check_bool(auto_l2_clip, 'auto_l2_clip')
        if mechanism == 'distributed_dgauss':
            raise NotImplementedError(
                "mechanism='distributed_dgauss' (tensorflow_privacy's discrete Gaussian "
                "sampler) is not written in simharness; use 'distributed_skellam'."
            )
        if beta > 0.0:
            warnings.warn(
                f'The selected beta {beta} is greater than zero. This indicates that '
                'conditional randomized rounding is used. Consider setting beta to 0 '
                'if you would like to avoid instabilities.'
            )
        if auto_l2_clip:
            _check_in_range(auto_l2_target_quantile, 'auto_l2_target_quantile', 0, 1, True, True)
            _check_positive(auto_l2_lr, 'auto_l2_lr')
            if auto_l2_clip_count_stddev is not None:
                _check_nonnegative(auto_l2_clip_count_stddev, 'auto_l2_clip_count_stddev')
        self._initial_l2_clip = l2_clip
        self._noise_multiplier = noise_multiplier
        self._num_clients = expected_clients_per_round
        self._bits = bits
        self._modclip_prob = modclip_prob
        self._k_stddevs = _clip_prob_to_num_stddevs(modclip_prob)
        self._beta = beta
        self._mechanism = mechanism
        self._rotation_type = rotation_type
        self._auto_l2_clip = auto_l2_clip
        if bits < math.log2(expected_clients_per_round):
            raise ValueError(
                'bits should be >= log2(expected_clients_per_round). '
                f'Found 2^b = 2^{bits} < {expected_clients_per_round}.'
            )
        if 2 ** (2 * bits) < expected_clients_per_round * self._k_stddevs**2:
            raise ValueError(
                f'The selected bit-width ({bits}) is too small for the given parameters '
                f'(expected_clients_per_round = {expected_clients_per_round}, modclip_prob = '
                f'{modclip_prob}). You must decrease the `expected_clients_per_round`, '
                'increase `bits`, or increase `modclip_prob`.'
            )
        if auto_l2_clip:
            self._l2_clip, self._value_noise_mult = self._build_auto_l2_clip_process(
                auto_l2_target_quantile, auto_l2_lr, auto_l2_clip_count_stddev
            )
        else:
            self._l2_clip = self._initial_l2_clip
            self._value_noise_mult = self._noise_multiplier

    def _build_auto_l2_clip_process(
        self, target_quantile: float, learning_rate: float, clip_count_stddev: Optional[float]
    ) -> tuple:
        value_noise_mult, clip_count_stddev = differential_privacy.adaptive_clip_noise_params(
            self._noise_multiplier, self._num_clients, clip_count_stddev
        )
        estimator_query = quantile_query.QuantileEstimatorQuery(
            initial_estimate=self._initial_l2_clip,
            target_quantile=target_quantile,
            learning_rate=learning_rate,
            below_estimate_stddev=clip_count_stddev,
            expected_num_records=self._num_clients,
            geometric_update=True,
        )
        estimator_process = quantile_estimation.PrivateQuantileEstimationProcess(
            quantile_estimator_query=estimator_query,
            record_aggregation_factory=secure.SecureSumFactory(
                upper_bound_threshold=0.5, lower_bound_threshold=-0.5
            ),
        )
        return estimator_process, value_noise_mult

    def _build_aggregation_factory(self) -> factory.UnweightedAggregationFactory:
        central_stddev = self._value_noise_mult * self._initial_l2_clip
        local_stddev = central_stddev / math.sqrt(self._num_clients)
        self._client_dim = max(1, self._client_dim)
        if self._rotation_type == 'hd':
            self._padded_dim = 2 ** math.ceil(math.log2(self._client_dim))
            rotation_factory: Any = rotation.HadamardTransformFactory
        else:
            self._padded_dim = math.ceil(self._client_dim / 2.0) * 2
            rotation_factory = rotation.DiscreteFourierTransformFactory
        scale = float(
            _heuristic_scale_factor(
                local_stddev,
                self._initial_l2_clip,
                self._bits,
                self._num_clients,
                self._padded_dim,
                self._k_stddevs,
            ).numpy()
        )
        scale = min(scale, MAX_SCALE_FACTOR)
        if scale <= 1:
            warnings.warn(
                f'The selected scale_factor {scale} <= 1. This may lead to substantial '
                'quantization errors. Consider increasing the bit-width (currently '
                f'{self._bits}) or decreasing the expected number of clients per '
                f'round (currently {self._num_clients}).'
            )
        inflated_l2 = float(
            discretization.inflated_l2_norm_bound(
                l2_norm_bound=self._initial_l2_clip,
                gamma=1.0 / scale,
                beta=self._beta,
                dim=self._padded_dim,
            ).numpy()
        )
        scaled_inflated_l2 = (inflated_l2 + 1e-5) * scale
        scaled_l1 = math.ceil(
            scaled_inflated_l2 * min(math.sqrt(self._padded_dim), scaled_inflated_l2)
        )
        nested: Any = secure.SecureSumFactory(
            upper_bound_threshold=2**self._bits - 1, lower_bound_threshold=0
        )
        nested = modular_clipping.ModularClippingSumFactory(
            clip_range_lower=0, clip_range_upper=2**self._bits, inner_agg_factory=nested
        )
        nested = modular_clipping.ModularClippingSumFactory(
            clip_range_lower=-(2 ** (self._bits - 1)),
            clip_range_upper=2 ** (self._bits - 1),
            inner_agg_factory=nested,
        )
        query = DistributedSkellamSumQuery(
            l1_norm_bound=scaled_l1,
            l2_norm_bound=scaled_inflated_l2,
            local_stddev=local_stddev * scale,
        )
        nested = differential_privacy.DifferentiallyPrivateFactory(
            query=query, record_aggregation_factory=nested
        )
        nested = discretization.DiscretizationFactory(
            inner_agg_factory=nested,
            scale_factor=scale,
            stochastic=True,
            beta=self._beta,
            prior_norm_bound=self._initial_l2_clip,
        )
        nested = robust.clipping_factory(
            clipping_norm=self._l2_clip,
            inner_agg_factory=nested,
            clipped_count_sum_factory=secure.SecureSumFactory(
                upper_bound_threshold=1, lower_bound_threshold=0
            ),
        )
        nested = rotation_factory(inner_agg_factory=nested)
        return concat.concat_factory(inner_agg_factory=nested)

    def _unpack_state(self, agg_state: Any) -> tuple:
        l2_clip_state = agg_state[0]  # concat has no state; the rotation's is (inner, seed)
        discrete_state = l2_clip_state['inner_agg']
        return l2_clip_state, discrete_state, discrete_state['inner_agg_process']

    def _unpack_measurements(self, agg_measurements: Any) -> tuple:
        l2_clip_metrics = agg_measurements[self._rotation_type]
        discrete_metrics = l2_clip_metrics['clipping']
        return l2_clip_metrics, discrete_metrics, discrete_metrics['discretize']

    def _autotune_component_states(self, agg_state: Any) -> Any:
        value_noise_mult, num_clients = self._value_noise_mult, self._num_clients
        bits, padded_dim, k_stddevs, beta = (
            self._bits,
            self._padded_dim,
            self._k_stddevs,
            self._beta,
        )
        unpack = self._unpack_state
        state_type = agg_state.type_signature.member

        @tf_computation(state_type, np.float32)
        def update_fn(state, new_l2_clip):
            _, discrete_state, dp_state = unpack(state)
            new_local_stddev = new_l2_clip * value_noise_mult / math.sqrt(num_clients)
            new_scale = tf.math.minimum(
                _heuristic_scale_factor(
                    new_local_stddev, new_l2_clip, bits, num_clients, padded_dim, k_stddevs
                ),
                tf.constant(MAX_SCALE_FACTOR, tf.float64),
            )
            new_scale = tf.cast(new_scale, tf.float32)
            new_inflated_l2 = discretization.inflated_l2_norm_bound(
                l2_norm_bound=new_l2_clip, gamma=1.0 / new_scale, beta=beta, dim=padded_dim
            )
            new_scaled_inflated_l2 = (new_inflated_l2 + 1e-5) * new_scale
            l1_fac = tf.minimum(math.sqrt(padded_dim), new_scaled_inflated_l2)
            new_scaled_l1 = tf.cast(tf.math.ceil(new_scaled_inflated_l2 * l1_fac), tf.int32)
            query_state = dp_state.query_state
            new_query_state = type(query_state)(
                new_scaled_l1,
                new_scaled_inflated_l2,
                new_local_stddev * new_scale,
                query_state.noise_seed,
            )
            new_dp_state = dp_state._replace(query_state=new_query_state)
            new_discrete = collections.OrderedDict(
                scale_factor=new_scale, prior_norm_bound=new_l2_clip, inner_agg_process=new_dp_state
            )
            new_clip_state = collections.OrderedDict(state[0])
            new_clip_state['inner_agg'] = new_discrete
            del discrete_state
            return (new_clip_state,) + tuple(state[1:])

        new_l2_clip = self._l2_clip.report(agg_state[0]['clipping_norm'])
        return intrinsics.federated_map(update_fn, (agg_state, new_l2_clip))

    def _derive_measurements(self, agg_state: Any, agg_measurements: Any) -> Any:
        _, discrete_state, dp_state = self._unpack_state(agg_state)
        l2_clip_metrics, _, dp_metrics = self._unpack_measurements(agg_measurements)
        query_state = dp_state.query_state
        actual_num_clients = intrinsics.federated_secure_sum_bitwidth(
            intrinsics.federated_value(1, T.CLIENTS), bitwidth=1
        )
        padded_dim = intrinsics.federated_value(int(self._padded_dim), T.SERVER)
        return intrinsics.federated_zip(
            collections.OrderedDict(
                l2_clip=l2_clip_metrics['clipping_norm'],
                scale_factor=discrete_state['scale_factor'],
                scaled_inflated_l2=query_state.l2_norm_bound,
                scaled_local_stddev=query_state.local_stddev,
                actual_num_clients=actual_num_clients,
                padded_dim=padded_dim,
                dp_query_metrics=dp_metrics['dp_query_metrics'],
            )
        )

    def create(self, value_type: factory.ValueType) -> AggregationProcess:
        value_type = T.to_type(value_type)
        if (
            isinstance(value_type, T.StructType)
            and value_type.container is not None
            and factory.is_structure_of_tensors(value_type)
        ):
            self._client_dim = sum(int(np.prod(leaf.shape)) for leaf in T.flatten_type(value_type))
        elif isinstance(value_type, T.TensorType):
            self._client_dim = int(np.prod(value_type.shape))
        else:
            raise TypeError(
                'Expected `value_type` to be `TensorType` or `StructWithPythonType` '
                f'containing only `TensorType`. Found type: {value_type!r}'
            )
        if not (
            factory.is_structure_of_floats(value_type)
            or factory.is_structure_of_integers(value_type)
        ):
            raise TypeError(
                'Component dtypes of `value_type` must all be integers or floats. '
                f'Found {value_type!r}.'
            )
        ddp_process = self._build_aggregation_factory().create(value_type)
        init_fn = ddp_process.initialize

        @federated_computation(
            init_fn.type_signature.result, T.FederatedType(value_type, T.CLIENTS)
        )
        def next_fn(state, value):
            agg_output = ddp_process.next(state, value)
            measurements = self._derive_measurements(agg_output.state, agg_output.measurements)
            new_state = agg_output.state
            if self._auto_l2_clip:
                new_state = self._autotune_component_states(agg_output.state)
            return MeasuredProcessOutput(
                state=new_state, result=agg_output.result, measurements=measurements
            )

        return AggregationProcess(init_fn, next_fn)
