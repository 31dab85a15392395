"""TFF's ``hierarchical_histogram/hierarchical_histogram_lib.py``: the federated computations.

```
client data (float32 sequence) -> histogram of num_bins bins in [lower, upper)     clients
  -> create_hierarchical_histogram_aggregation_factory(...) (clip, tree, sum, noise)
  -> ServerOutput(aggregated_hierarchical_histogram, round_timestamp)@SERVER
```

`build_hierarchical_histogram_computation` is one round;
`build_hierarchical_histogram_process` wraps it in an `IterativeProcess`
whose state is the last round's `ServerOutput` (``initialize``: a zero tree,
timestamp 0). ``aggregated_hierarchical_histogram`` is TFF's struct form of
a ``tf.RaggedTensor`` (``flat_values``, ``nested_row_splits``).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf

from simharness.analytics.hierarchical_histogram import clipping_factory
from simharness.analytics.hierarchical_histogram import hierarchical_histogram_factory
from simharness.core import intrinsics
from simharness.core import types as T
from simharness.core.computation import federated_computation, tf_computation
from simharness.templates import IterativeProcess

__all__ = [
    'ServerOutput',
    'build_hierarchical_histogram_computation',
    'build_hierarchical_histogram_process',
]


class ServerOutput(NamedTuple):
    """A round's result.

    Attributes:
      aggregated_hierarchical_histogram: the aggregated tree (``flat_values``,
        ``nested_row_splits``).
      round_timestamp: the round's start, int64 seconds since the Unix epoch.
    """

    aggregated_hierarchical_histogram: dict[str, Any]
    round_timestamp: Any


def _discretized_histogram_counts(
    client_data: tf.data.Dataset, lower_bound: float, upper_bound: float, num_bins: int
) -> tf.Tensor:
    """The int32 histogram of `client_data` in `num_bins` bins of ``[lower_bound, upper_bound)``.

    Records outside the range are dropped.

    Raises:
      ValueError: ``upper_bound < lower_bound``, ``num_bins <= 0``, or data
        that is not float32.
    """
    if upper_bound < lower_bound:
        raise ValueError(f'upper_bound: {upper_bound} is smaller than lower_bound: {lower_bound}.')
    if num_bins <= 0:
        raise ValueError(f'num_bins: {num_bins} smaller or equal to zero.')
    data_type = client_data.element_spec.dtype
    if data_type != tf.float32:
        raise ValueError(f'`client_data` contains {data_type} values.`tf.float32` is expected.')
    precision = (upper_bound - lower_bound) / num_bins

    def insert_record(histogram, record):
        if histogram.shape != (num_bins,):
            raise ValueError(f'Expected shape ({num_bins}, ). Get {histogram.shape}.')
        if record < lower_bound or record >= upper_bound:
            return histogram
        else:
            bin_index = tf.cast(tf.math.floor((record - lower_bound) / precision), tf.int32)
        return tf.tensor_scatter_nd_add(tensor=histogram, indices=[[bin_index]], updates=[1])

    return client_data.reduce(tf.zeros([num_bins], dtype=tf.int32), insert_record)


def _check_arguments(
    lower_bound,
    upper_bound,
    num_bins,
    arity,
    clip_mechanism,
    max_records_per_user,
    dp_mechanism,
    noise_multiplier,
):
    _check_greater_than_equal(upper_bound, lower_bound, 'upper_bound', 'lower_bound')
    _check_positive(num_bins, 'num_bins')
    _check_greater_than_equal_thres(arity, 2, 'arity')
    _check_membership(clip_mechanism, clipping_factory.CLIP_MECHANISMS, 'clip_mechanism')
    _check_greater_than_equal_thres(max_records_per_user, 1, 'max_records_per_user')
    _check_membership(dp_mechanism, hierarchical_histogram_factory.DP_MECHANISMS, 'dp_mechanism')
    _check_greater_than_equal_thres(noise_multiplier, 0.0, noise_multiplier)


def build_hierarchical_histogram_computation(
    lower_bound: float,
    upper_bound: float,
    num_bins: int,
    arity: int = 2,
    clip_mechanism: str = 'sub-sampling',
    max_records_per_user: int = 10,
    dp_mechanism: str = 'no-noise',
    noise_multiplier: float = 0.0,
    enable_secure_sum: bool = True,
):
    """The federated computation of one round of hierarchical histogram aggregation.

    Args:
      lower_bound: the lower bound of the data range.
      upper_bound: the upper bound of the data range (>= `lower_bound`).
      num_bins: the number of bins (> 0).
      arity: the branching factor of the tree (>= 2, default 2).
      clip_mechanism: ``'sub-sampling'`` (default) or ``'distinct'``.
      max_records_per_user: the most records a client contributes (default 10).
      dp_mechanism: ``'no-noise'`` (default) or ``'central-gaussian'``.
      noise_multiplier: central noise stddev / L2 bound (default 0.0).
      enable_secure_sum: sum with secure aggregation (default True).

    Returns:
      A federated computation ``{float32*}@CLIENTS -> ServerOutput@SERVER``.

    Raises:
      ValueError: an argument out of range or an unknown mechanism.
    """
    _check_arguments(
        lower_bound,
        upper_bound,
        num_bins,
        arity,
        clip_mechanism,
        max_records_per_user,
        dp_mechanism,
        noise_multiplier,
    )

    @tf_computation(T.SequenceType(np.float32))
    def client_work(client_data):
        return _discretized_histogram_counts(client_data, lower_bound, upper_bound, num_bins)

    agg_factory = hierarchical_histogram_factory.create_hierarchical_histogram_aggregation_factory(
        num_bins=num_bins,
        arity=arity,
        clip_mechanism=clip_mechanism,
        max_records_per_user=max_records_per_user,
        dp_mechanism=dp_mechanism,
        noise_multiplier=noise_multiplier,
        enable_secure_sum=enable_secure_sum,
    )
    process = agg_factory.create(client_work.type_signature.result)
    timestamp_fn = tf_computation(lambda: tf.cast(tf.timestamp(), np.int64))

    @federated_computation(T.FederatedType(client_work.type_signature.parameter, T.CLIENTS))
    def hierarchical_histogram_computation(federated_client_data):
        round_timestamp = intrinsics.federated_eval(timestamp_fn, T.SERVER)
        client_histogram = intrinsics.federated_map(client_work, federated_client_data)
        return intrinsics.federated_zip(
            ServerOutput(
                process.next(process.initialize(), client_histogram).result, round_timestamp
            )
        )

    return hierarchical_histogram_computation


def build_hierarchical_histogram_process(
    lower_bound: float,
    upper_bound: float,
    num_bins: int,
    arity: int = 2,
    clip_mechanism: str = 'sub-sampling',
    max_records_per_user: int = 10,
    dp_mechanism: str = 'no-noise',
    noise_multiplier: float = 0.0,
    enable_secure_sum: bool = True,
) -> IterativeProcess:
    """`build_hierarchical_histogram_computation` as an `IterativeProcess`.

    The state is the last round's `ServerOutput` (``initialize``: an all-zero
    tree of the result's shape, timestamp 0); ``next(state, client_data)``
    returns ``(ServerOutput, ())``. Arguments and errors: as
    `build_hierarchical_histogram_computation`.
    """
    _check_arguments(
        lower_bound,
        upper_bound,
        num_bins,
        arity,
        clip_mechanism,
        max_records_per_user,
        dp_mechanism,
        noise_multiplier,
    )
    one_round_computation = build_hierarchical_histogram_computation(
        lower_bound=lower_bound,
        upper_bound=upper_bound,
        num_bins=num_bins,
        arity=arity,
        clip_mechanism=clip_mechanism,
        max_records_per_user=max_records_per_user,
        dp_mechanism=dp_mechanism,
        noise_multiplier=noise_multiplier,
        enable_secure_sum=enable_secure_sum,
    )
    parameter_type_signature = one_round_computation.type_signature.parameter
    result_type_signature = one_round_computation.type_signature.result

    @tf_computation
    def initialize():
        value_type, _ = result_type_signature.member
        flat_values_type = value_type['flat_values']
        row_splits_type = value_type['nested_row_splits'][0]
        # A valid ragged tensor: row splits from 0 to the number of values.
        nested_row_splits = np.zeros(shape=row_splits_type.shape, dtype=row_splits_type.dtype)
        nested_row_splits[-1] = flat_values_type.shape[0]
        flat_values = tf.zeros(shape=flat_values_type.shape, dtype=flat_values_type.dtype)
        initial_hierarchical_histogram = {
            'flat_values': flat_values,
            'nested_row_splits': [nested_row_splits],
        }
        return ServerOutput(initial_hierarchical_histogram, tf.constant(0, dtype=tf.int64))

    @federated_computation
    def init_fn():
        return intrinsics.federated_eval(initialize, T.SERVER)

    @federated_computation(init_fn.type_signature.result, parameter_type_signature)
    def next_fn(_, client_data):
        return one_round_computation(client_data), intrinsics.federated_value((), T.SERVER)

    return IterativeProcess(init_fn, next_fn)


def _check_greater_than_equal(lvalue, rvalue, llabel, rlabel):
    if lvalue < rvalue:
        raise ValueError(
            f'`{llabel}` should be no smaller than `{rlabel}`. Found {lvalue} and {rvalue}.'
        )


def _check_greater_than_equal_thres(value, threshold, label):
    if value < threshold:
        raise ValueError(f'`{label}` must be at least {threshold}. Found {value}.')


def _check_positive(value, label):
    if value <= 0:
        raise ValueError(f'{label} must be positive. Found {value}.')


def _check_membership(value, valid_set, label):
    if value not in valid_set:
        raise ValueError(f'`{label}` must be one of {valid_set}. Found {value}.')
