"""TFF's ``hierarchical_histogram/hierarchical_histogram_factory.py``.

`create_hierarchical_histogram_aggregation_factory` nests three factories:

```
HistogramClippingSumFactory(clip_mechanism, max_records_per_user)        clients: clip
  DifferentiallyPrivateFactory(TreeRangeSumQuery(NoPrivacySumQuery | GaussianSumQuery))
    SecureSumFactory(max_records_per_user) | SumFactory                   sum the trees
```

The result is the (noised) tree of the summed histograms in TFF's struct form
of a ``tf.RaggedTensor``: ``<flat_values=[n], nested_row_splits=<int64[depth+1]>>``
(``tf.RaggedTensor.from_nested_row_splits`` rebuilds it). The L2 bound of a
client's tree is ``max_records_per_user * sqrt(depth)`` for 'sub-sampling'
and, for 'distinct', ``sqrt`` of the sum over the layers (``k = 0`` the
leaves, up to the root) of ``min(max_records_per_user ** 2,
max_records_per_user * arity ** k)``.

(A ``tf_computation`` that returns a ``tf.RaggedTensor`` returns that struct, as in
TFF: the query's ragged tree crosses as it.)
"""

from __future__ import annotations

import math

from simharness.aggregators import differential_privacy, secure, sum_factory
from simharness.aggregators.privacy import query as dp_query
from simharness.aggregators.privacy import tree as tree_query
from simharness.analytics.hierarchical_histogram import clipping_factory

__all__ = [
    'CENTRAL_DP_MECHANISMS',
    'DP_MECHANISMS',
    'NO_NOISE_MECHANISMS',
    'create_hierarchical_histogram_aggregation_factory',
]

#: The supported no-noise mechanisms.
NO_NOISE_MECHANISMS = ['no-noise']

#: The supported central DP mechanisms.
CENTRAL_DP_MECHANISMS = [
    'central-gaussian',
]

DP_MECHANISMS = CENTRAL_DP_MECHANISMS + NO_NOISE_MECHANISMS


def create_hierarchical_histogram_aggregation_factory(
    num_bins: int,
    arity: int = 2,
    clip_mechanism: str = 'sub-sampling',
    max_records_per_user: int = 10,
    dp_mechanism: str = 'no-noise',
    noise_multiplier: float = 0.0,
    enable_secure_sum: bool = True,
):
    """The hierarchical histogram aggregation factory (see the module).

    Args:
      num_bins: the size of the input histograms (> 0).
      arity: the branching factor of the tree (>= 2, default 2).
      clip_mechanism: ``'sub-sampling'`` (default) or ``'distinct'``.
      max_records_per_user: the most records a client contributes (default 10).
      dp_mechanism: ``'no-noise'`` (default) or ``'central-gaussian'``.
      noise_multiplier: central noise stddev / L2 bound (default 0.0; only
        used by 'central-gaussian').
      enable_secure_sum: sum with `SecureSumFactory` (default True).

    Returns:
      An `UnweightedAggregationFactory` (a `HistogramClippingSumFactory`).

    Raises:
      ValueError: an argument out of range or an unknown mechanism.
    """
    _check_positive(num_bins, 'num_bins')
    _check_greater_equal(arity, 2, 'arity')
    _check_membership(clip_mechanism, clipping_factory.CLIP_MECHANISMS, 'clip_mechanism')
    _check_positive(max_records_per_user, 'max_records_per_user')
    _check_membership(dp_mechanism, DP_MECHANISMS, 'dp_mechanism')
    _check_non_negative(noise_multiplier, 'noise_multiplier')

    l2_norm_bound = 0.0
    if dp_mechanism in ['central-gaussian', 'distributed-discrete-gaussian']:
        if clip_mechanism == 'sub-sampling':
            l2_norm_bound = max_records_per_user * math.sqrt(_tree_depth(num_bins, arity))
        elif clip_mechanism == 'distinct':
            # Layer by layer, from the leaves (at most max_records_per_user ones) up,
            # the squared L2 norm is at most min(m ** 2, m * arity ** layer).
            square_l2_norm_bound = 0.0
            square_layer_l2_norm_bound = max_records_per_user
            for _ in range(_tree_depth(num_bins, arity)):
                square_l2_norm_bound += min(max_records_per_user**2, square_layer_l2_norm_bound)
                square_layer_l2_norm_bound *= arity
            l2_norm_bound = math.sqrt(square_l2_norm_bound)

    if not enable_secure_sum:
        nested_factory = sum_factory.SumFactory()
    elif dp_mechanism in ['no-noise']:
        nested_factory = secure.SecureSumFactory(max_records_per_user)
    elif dp_mechanism in ['central-gaussian']:
        # A float bound, as GaussianSumQuery's records are float.
        nested_factory = secure.SecureSumFactory(float(max_records_per_user))
    else:
        raise ValueError(f'Unexpected {dp_mechanism=!r}.')

    if dp_mechanism == 'central-gaussian':
        query = tree_query.TreeRangeSumQuery.build_central_gaussian_query(
            l2_norm_bound, noise_multiplier * l2_norm_bound, arity
        )
        cast_to_float = True
    elif dp_mechanism == 'no-noise':
        query = tree_query.TreeRangeSumQuery(arity=arity, inner_query=dp_query.NoPrivacySumQuery())
        cast_to_float = False
    else:
        raise ValueError('Unexpected dp_mechanism.')
    nested_factory = differential_privacy.DifferentiallyPrivateFactory(query, nested_factory)

    return clipping_factory.HistogramClippingSumFactory(
        clip_mechanism=clip_mechanism,
        max_records_per_user=max_records_per_user,
        inner_agg_factory=nested_factory,
        cast_to_float=cast_to_float,
    )


def _check_greater_equal(value, threshold, label):
    if value < threshold:
        raise ValueError(f'`{label}` must be at least {threshold}, got {value}.')


def _check_positive(value, label):
    if value <= 0:
        raise ValueError(f'{label} must be positive. Found {value}.')


def _check_non_negative(value, label):
    if value < 0:
        raise ValueError(f'{label} must be non-negative. Found {value}.')


def _check_membership(value, valid_set, label):
    if value not in valid_set:
        raise ValueError(f'`{label}` must be one of {valid_set}. Found {value}.')


def _tree_depth(num_leaves: int, arity: int) -> int:
    """The depth of the tree over `num_leaves` leaves."""
    return math.ceil(math.log(num_leaves) / math.log(arity)) + 1
