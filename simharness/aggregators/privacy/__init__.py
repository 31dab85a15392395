"""TFF's DP queries (``aggregators/privacy``): the tensorflow_privacy `DPQuery` interface.

`query`: `DPQuery`, `SumAggregationDPQuery`, `GaussianSumQuery`,
`NoPrivacySumQuery`, `NoPrivacyAverageQuery`, `NormalizedQuery`.
`quantile`: `QuantileEstimatorQuery`, `NoPrivacyQuantileEstimatorQuery`,
`QuantileAdaptiveClipSumQuery`. The tree-aggregation queries (DP-FTRL) are
not ported.
"""
