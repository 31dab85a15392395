"""TFF's `PrivateQuantileEstimationProcess` (``aggregators/quantile_estimation.py``).

An `EstimationProcess` over a `QuantileEstimatorQuery`:
```
state  = <query state, record aggregation state[, noise seed]>@SERVER
next(state, {float32}@CLIENTS) -> state        report(state) -> current estimate (float32@SERVER)
```
The noise seed (int64[2]) is there only when the query adds noise (not for
`no_noise`); see `privacy.query` for why (the same bits on every stack).
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
import tensorflow as tf

from simharness.aggregators import factory, secure, sum_factory
from simharness.aggregators.privacy import quantile as quantile_query
from simharness.core import intrinsics
from simharness.core import types as T
from simharness.core.computation import federated_computation, tf_computation
from simharness.errors import SimharnessTypeError, SimharnessValueError
from simharness.templates import EstimationProcess

__all__ = ['PrivateQuantileEstimationProcess', 'initial_noise_seed', 'next_noise_seed']


def initial_noise_seed(noise_seed: Optional[int]) -> Any:
    """A tf_computation returning the first seed: from `noise_seed`, or fresh when None."""
    if noise_seed is None:
        return tf_computation(
            lambda: tf.random.uniform([2], minval=tf.int64.min, maxval=tf.int64.max, dtype=tf.int64)
        )
    if isinstance(noise_seed, bool) or not isinstance(noise_seed, (int, np.integer)):
        raise SimharnessTypeError(
            f'noise_seed must be an int or None, got {noise_seed!r} of '
            f'type {type(noise_seed).__name__}',
            actual=type(noise_seed),
        )
    seed = int(noise_seed)
    if not 0 <= seed < 2**63:
        raise SimharnessValueError(f'noise_seed must be in [0, 2**63), got {seed}')
    return tf_computation(lambda: tf.constant([0, seed], tf.int64))


def next_noise_seed(seed: Any) -> Any:
    """(seed for this call's noise, seed for the state) from the state's seed (TF)."""
    pair = tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), 2)
    return pair[0], pair[1]


class PrivateQuantileEstimationProcess(EstimationProcess):
    """Estimates a quantile of client values with a `QuantileEstimatorQuery`.

    Args:
      quantile_estimator_query: a `quantile.QuantileEstimatorQuery`.
      record_aggregation_factory: sums the records (default `SumFactory`).
      noise_seed: the seed of the query's noise, when it adds noise (ours,
        not TFF's); None: a fresh seed at each `initialize`.

    Raises:
      TypeError: a wrong type of query or factory.
    """

    @classmethod
    def no_noise(
        cls,
        initial_estimate: float,
        target_quantile: float,
        learning_rate: float,
        multiplier: float = 1.0,
        increment: float = 0.0,
        secure_estimation: bool = False,
    ) -> EstimationProcess:
        """A no-noise estimator reporting ``multiplier * C + increment`` for the quantile C.

        C adapts geometrically (Andrew, Thakkar et al. 2021) without noise:
        no differential privacy.

        Args:
          initial_estimate: the initial estimate of C (> 0).
          target_quantile: the quantile q in [0, 1].
          learning_rate: the learning rate (> 0).
          multiplier: r of ``r C + i`` (> 0).
          increment: i of ``r C + i`` (>= 0).
          secure_estimation: count with `SecureSumFactory` instead of `SumFactory`.

        Raises:
          TypeError: an argument is not a float.
          ValueError: an argument is out of its range.
        """
        factory.check_float_positive(initial_estimate, 'initial_estimate')
        factory.check_float_probability(target_quantile, 'target_quantile')
        factory.check_float_positive(learning_rate, 'learning_rate')
        factory.check_float_positive(multiplier, 'multiplier')
        factory.check_float_nonnegative(increment, 'increment')
        record_factory = (
            secure.SecureSumFactory(1.0) if secure_estimation else sum_factory.SumFactory()
        )
        process = cls(
            quantile_query.NoPrivacyQuantileEstimatorQuery(
                initial_estimate=initial_estimate,
                target_quantile=target_quantile,
                learning_rate=learning_rate,
                geometric_update=True,
            ),
            record_factory,
        )
        if multiplier == 1.0 and increment == 0.0:
            return process
        return process.map(_affine_transform(multiplier, increment))

    def __init__(
        self,
        quantile_estimator_query: quantile_query.QuantileEstimatorQuery,
        record_aggregation_factory: Optional[factory.UnweightedAggregationFactory] = None,
        noise_seed: Optional[int] = None,
    ):
        factory.check_factory(
            quantile_estimator_query,
            quantile_query.QuantileEstimatorQuery,
            'quantile_estimator_query',
        )
        if record_aggregation_factory is None:
            record_aggregation_factory = sum_factory.SumFactory()
        factory.check_factory(
            record_aggregation_factory,
            factory.UnweightedAggregationFactory,
            'record_aggregation_factory',
        )
        q = quantile_estimator_query
        seeded = q.needs_noise_seed()
        initial_state_fn = tf_computation(q.initial_global_state)
        state_type = initial_state_fn.type_signature.result
        derive_sample_params = tf_computation(q.derive_sample_params, state_type)
        get_record = tf_computation(
            q.preprocess_record, derive_sample_params.type_signature.result, np.float32
        )
        record_type = get_record.type_signature.result
        agg_process = record_aggregation_factory.create(record_type)
        agg_next_result: Any = agg_process.next.type_signature.result
        agg_result_type = agg_next_result.result.member

        if seeded:
            seed_fn = initial_noise_seed(noise_seed)

            @tf_computation(agg_result_type, state_type, T.TensorType(np.int64, [2]))
            def new_query_state(sample_state, global_state, seed):
                this_call, next_seed = next_noise_seed(seed)
                _, new_state, _ = q.get_noised_result(
                    sample_state, global_state, noise_seed=this_call
                )
                return new_state, next_seed
        else:

            @tf_computation(agg_result_type, state_type)
            def new_query_state(sample_state, global_state):
                return q.get_noised_result(sample_state, global_state)[1]

        @federated_computation()
        def init_fn():
            parts = [
                intrinsics.federated_eval(initial_state_fn, T.SERVER),
                agg_process.initialize(),
            ]
            if seeded:
                parts.append(intrinsics.federated_eval(seed_fn, T.SERVER))
            return intrinsics.federated_zip(tuple(parts))

        @federated_computation(
            init_fn.type_signature.result, T.FederatedType(np.float32, T.CLIENTS)
        )
        def next_fn(state, value):
            query_state, agg_state = state[0], state[1]
            params = intrinsics.federated_broadcast(
                intrinsics.federated_map(derive_sample_params, query_state)
            )
            record = intrinsics.federated_map(get_record, (params, value))
            agg_output = agg_process.next(agg_state, record)
            if seeded:
                new_state, new_seed = intrinsics.federated_map(
                    new_query_state, (agg_output.result, query_state, state[2])
                )
                return intrinsics.federated_zip((new_state, agg_output.state, new_seed))
            new_state = intrinsics.federated_map(new_query_state, (agg_output.result, query_state))
            return intrinsics.federated_zip((new_state, agg_output.state))

        report_fn = federated_computation(
            lambda state: state[0].current_estimate, init_fn.type_signature.result
        )
        super().__init__(init_fn, next_fn, report_fn)


def _affine_transform(multiplier: float, increment: float) -> Any:
    transform = tf_computation(lambda value: multiplier * value + increment, np.float32)
    return federated_computation(
        lambda value: intrinsics.federated_map(transform, value),
        T.FederatedType(np.float32, T.SERVER),
    )
